/**
 * A KvStore that answers every call at once and records each call's kind and deadline: for the
 * tests that a call's deadline reaches the store, through the KV service and the member gate.
 */
import type { KvStore } from "../../src/api/index.ts";

export function deadlineRecordingStore(): {
  store: KvStore;
  seen: [string, number | undefined][];
} {
  const seen: [string, number | undefined][] = [];
  const version = { index: 1, term: 1 };
  const store: KvStore = {
    put: (_key, _value, _expected, deadline) => {
      seen.push(["put", deadline]);
      return Promise.resolve({ type: "written", version });
    },
    delete: (_key, _expected, deadline) => {
      seen.push(["delete", deadline]);
      return Promise.resolve({ type: "not-found" });
    },
    get: (_key, _linearizable, deadline) => {
      seen.push(["get", deadline]);
      return Promise.resolve(null);
    },
    scan: (_req, deadline) => {
      seen.push(["scan", deadline]);
      return Promise.resolve({ items: [], more: false });
    },
  };
  return { store, seen };
}
