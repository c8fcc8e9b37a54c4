/**
 * The simulation's replicated key-value register: commands in log entries, applied in order with
 * the store's semantics (src/replication/state-machine.ts): a write's version is the (index,
 * term) of its entry; compare-and-set and conditional delete are decided at apply time.
 *
 * The view is derived from a host's StateMachine (the ordered list of applied entries, which a
 * snapshot carries whole), so restarts and snapshot installs need no extra bookkeeping.
 */
import type { RegisterInput, RegisterOutput, Version } from "../../support/linearizability.ts";
import type { AppliedEntry, StateMachine } from "../support/host.ts";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

function versionText(v: Version | null): string {
  return v === null ? "-" : `${v.index}/${v.term}`;
}

function parseVersion(s: string): Version | null {
  if (s === "-") return null;
  const [i, t] = s.split("/");
  return { index: Number(i), term: Number(t) };
}

/** `put k v` | `putif k 12/3 v` | `del k` | `delif k -`; gets never enter the log. */
export function encodeCommand(key: string, input: RegisterInput): Uint8Array {
  switch (input.type) {
    case "put":
      return encoder.encode(`put ${key} ${input.value}`);
    case "put-if":
      return encoder.encode(`putif ${key} ${versionText(input.expected)} ${input.value}`);
    case "delete":
      return encoder.encode(`del ${key}`);
    case "delete-if":
      return encoder.encode(`delif ${key} ${versionText(input.expected)}`);
    case "get":
      throw new Error("reads are not log commands");
  }
}

export function decodeCommand(data: Uint8Array): { key: string; input: RegisterInput } | null {
  const [op, key, a, b] = decoder.decode(data).split(" ");
  if (key === undefined) return null;
  switch (op) {
    case "put":
      return a === undefined ? null : { key, input: { type: "put", value: a } };
    case "putif":
      return a === undefined || b === undefined
        ? null
        : { key, input: { type: "put-if", expected: parseVersion(a), value: b } };
    case "del":
      return { key, input: { type: "delete" } };
    case "delif":
      return a === undefined
        ? null
        : { key, input: { type: "delete-if", expected: parseVersion(a) } };
    default:
      return null;
  }
}

interface Item {
  readonly value: string;
  readonly version: Version;
}

function same(a: Version | null, b: Version | null): boolean {
  return a === null || b === null ? a === b : a.index === b.index && a.term === b.term;
}

export class KvView {
  readonly #items = new Map<string, Item>();
  /** The outcome of every command applied, by log index. */
  readonly #outcomes = new Map<number, RegisterOutput>();
  #source: readonly AppliedEntry[] | null = null;
  #applied = 0;

  /** Catch up with the state machine's applied entries (rebuilding after a snapshot install). */
  sync(sm: StateMachine): void {
    if (sm.entries !== this.#source) {
      this.#source = sm.entries;
      this.#applied = 0;
      this.#items.clear();
      this.#outcomes.clear();
    }
    for (; this.#applied < sm.entries.length; this.#applied++) {
      this.#apply(sm.entries[this.#applied] as AppliedEntry);
    }
  }

  get(key: string): RegisterOutput {
    const it = this.#items.get(key);
    return it === undefined ? { type: "absent" } : { type: "found", ...it };
  }

  outcome(index: number): RegisterOutput | undefined {
    return this.#outcomes.get(index);
  }

  #apply(e: AppliedEntry): void {
    const cmd = decodeCommand(e.data);
    if (cmd === null) return;
    const { key, input } = cmd;
    const current = this.#items.get(key)?.version ?? null;
    const version: Version = { index: e.index, term: e.term };
    let out: RegisterOutput;
    if ((input.type === "put-if" || input.type === "delete-if") && !same(current, input.expected)) {
      out = { type: "precondition-failed", current };
    } else if (input.type === "put" || input.type === "put-if") {
      this.#items.set(key, { value: input.value, version });
      out = { type: "written", version };
    } else if (current === null) {
      out = { type: "not-found" };
    } else {
      this.#items.delete(key);
      out = { type: "deleted", version };
    }
    this.#outcomes.set(e.index, out);
  }
}

const views = new WeakMap<StateMachine, KvView>();

/** The key-value view of a state machine, kept up to date. */
export function kvOf(sm: StateMachine): KvView {
  let v = views.get(sm);
  if (v === undefined) {
    v = new KvView();
    views.set(sm, v);
  }
  v.sync(sm);
  return v;
}
