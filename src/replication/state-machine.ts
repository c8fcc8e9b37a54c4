/**
 * A shard's replicated state machine: committed log entries applied, in order, to the shard's
 * LSM engine. Compare-and-set is evaluated here, inside apply, so it is atomic with respect to
 * every other write of the shard. Applying the same log gives every replica the same state.
 */
import type { ConfState, Entry } from "../raft/index.ts";
import type { LsmSnapshot, WriteOp } from "../storage/index.ts";
import type { ShardEngine } from "./engine.ts";
import {
  confKey,
  decodeCommand,
  decodeConf,
  decodeStoredValue,
  encodeConf,
  encodeStoredValue,
  storageKey,
  USER_KEYS_END,
  userKey,
  type KvCommand,
  type Version,
} from "./commands.ts";

/** What applying one KV command did; answered to the client that proposed it. */
export type ApplyOutcome =
  | { readonly type: "written"; readonly version: Version }
  | { readonly type: "deleted"; readonly version: Version }
  | { readonly type: "not-found" }
  | { readonly type: "precondition-failed"; readonly current: Version | null };

export interface StoredItem {
  readonly key: Uint8Array;
  readonly value: Uint8Array;
  readonly version: Version;
}

export class KvStateMachine {
  readonly lsm: ShardEngine;
  /** Index of the last entry applied. */
  appliedIndex: number;

  constructor(lsm: ShardEngine) {
    this.lsm = lsm;
    this.appliedIndex = lsm.flushedSeq;
  }

  /** The configuration the state machine recorded durably (null for a new shard). */
  durableConf(): ConfState | null {
    const raw = this.lsm.get(confKey());
    return raw === undefined ? null : decodeConf(raw);
  }

  /**
   * Applies a committed KV entry. Entries at or below the engine's flushed sequence were applied
   * before a restart and are skipped. Resolves once the write is in the engine (it may wait for
   * flushes and compactions under back-pressure; nothing is dropped).
   */
  async applyCommand(e: Entry): Promise<ApplyOutcome | null> {
    if (e.index <= this.appliedIndex) return null;
    const cmd = decodeCommand(e.data);
    const skey = storageKey(cmd.key);
    const outcome = this.#evaluate(e, cmd.op, skey, cmd.expected);
    let ops: WriteOp[] = [];
    if (outcome.type === "written" && cmd.op === "put") {
      ops = [{ type: "put", key: skey, value: encodeStoredValue(outcome.version, cmd.value) }];
    } else if (outcome.type === "deleted") {
      ops = [{ type: "delete", key: skey }];
    }
    // An entry that changes no key is still written (with no operations): the engine must make
    // its index durable with the next flush, or the WAL could never be compacted past it.
    await this.lsm.write(e.index, ops);
    // Only now: a read served at appliedIndex must see this entry's effect in the engine.
    this.appliedIndex = e.index;
    return outcome;
  }

  #evaluate(
    e: Entry,
    op: KvCommand["op"],
    skey: Uint8Array,
    expected: Version | undefined,
  ): ApplyOutcome {
    if (expected !== undefined || op === "delete") {
      const current = this.#version(skey);
      if (expected !== undefined && !sameVersion(current, expected)) {
        return { type: "precondition-failed", current };
      }
      if (op === "delete" && current === null) return { type: "not-found" };
    }
    const version: Version = { index: e.index, term: e.term };
    return op === "put" ? { type: "written", version } : { type: "deleted", version };
  }

  /** Records a configuration change applied at `e` (persisted with the shard's data). */
  async applyConf(e: Entry, conf: ConfState): Promise<void> {
    if (e.index <= this.appliedIndex) return;
    await this.lsm.write(e.index, [{ type: "put", key: confKey(), value: encodeConf(conf) }]);
    this.appliedIndex = e.index;
  }

  /** An entry with nothing for the state machine (the leader's no-op): its index is recorded. */
  async skip(e: Entry): Promise<void> {
    if (e.index <= this.appliedIndex) return;
    await this.lsm.write(e.index, []);
    this.appliedIndex = e.index;
  }

  get(key: Uint8Array): StoredItem | null {
    const raw = this.lsm.get(storageKey(key));
    if (raw === undefined) return null;
    const { version, value } = decodeStoredValue(raw);
    return { key, value, version };
  }

  /**
   * User keys in order from `start` (inclusive) to `end` (exclusive, or the last key), at most
   * `limit`, as of `snapshot`.
   */
  scan(
    start: Uint8Array,
    end: Uint8Array | null,
    limit: number,
    snapshot: LsmSnapshot,
  ): StoredItem[] {
    const out: StoredItem[] = [];
    if (limit <= 0) return out;
    const it = this.lsm.scan({
      start: storageKey(start),
      end: end === null ? USER_KEYS_END : storageKey(end),
      snapshot,
      limit,
    });
    for (const [k, raw] of it) {
      const { version, value } = decodeStoredValue(raw);
      out.push({ key: userKey(k), value, version });
    }
    return out;
  }

  #version(skey: Uint8Array): Version | null {
    const raw = this.lsm.get(skey);
    return raw === undefined ? null : decodeStoredValue(raw).version;
  }
}

function sameVersion(current: Version | null, expected: Version): boolean {
  if (expected.index === 0 && expected.term === 0) return current === null;
  return current !== null && current.index === expected.index && current.term === expected.term;
}
