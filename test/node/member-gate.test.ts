/**
 * The member gate (src/node/member-gate.ts): a node that is not an active member refuses KV
 * calls without reaching the store; an active member's calls reach it whole, their deadline too.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { AdminStore, KvStore } from "../../src/api/index.ts";
import { gateByMembership } from "../../src/node/member-gate.ts";
import { deadlineRecordingStore } from "../support/deadline-store.ts";

const b = (s: string): Uint8Array => new TextEncoder().encode(s);

describe("the member gate", () => {
  it("refuses KV calls while not a member, and passes each call's deadline on once one", async () => {
    const { store: kv, seen } = deadlineRecordingStore();
    const store = {
      ...kv,
      snapshotShard: () => Promise.reject(new Error("not asked")),
      checkShardId: () => undefined,
      shardInfo: () => null,
      transferLeader: () => Promise.reject(new Error("not asked")),
    } satisfies KvStore & AdminStore;
    let why: string | null = "node n1 is joining";
    let left = false;
    const gated = gateByMembership(
      store,
      () => why,
      () => left,
    );
    const req = { start: b(""), end: null, limit: 1, maxBytes: 1024, linearizable: true };
    await assert.rejects(gated.put(b("k"), b("v"), undefined, 5), {
      code: "CAIRN_ERR_NOT_MEMBER",
      leftForGood: false,
    });
    await assert.rejects(gated.scan(req, 5), { code: "CAIRN_ERR_NOT_MEMBER" });
    // Decommissioned: the refusal says it is for good (the trailer cairn-left-cluster).
    why = "node n1 was decommissioned from cluster c";
    left = true;
    await assert.rejects(gated.get(b("k"), true, 5), {
      code: "CAIRN_ERR_NOT_MEMBER",
      leftForGood: true,
    });
    assert.deepEqual(seen, [], "nothing reached the store");
    why = null;
    await gated.put(b("k"), b("v"), undefined, 1);
    await gated.delete(b("k"), undefined, 2);
    await gated.get(b("k"), true, 3);
    await gated.scan(req, 4);
    assert.deepEqual(seen, [
      ["put", 1],
      ["delete", 2],
      ["get", 3],
      ["scan", 4],
    ]);
  });
});
