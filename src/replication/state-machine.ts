/**
 * A shard's replicated state machine: committed log entries applied, in order, to the shard's
 * LSM engine. Compare-and-set is evaluated here, inside apply, so it is atomic with respect to
 * every other write of the shard. Applying the same log gives every replica the same state.
 *
 * Shard 0's state machine also applies the meta group's commands (design.md §5.1): it keeps the
 * cluster's MetaState, loaded from the engine's internal `0x00 meta/` records on first use, and
 * writes each command's changed records in the same engine batch as the entry's index, so the
 * stored records always match the applied log (and travel with the shard's snapshots).
 */
import { type MetaOutcome, MetaState } from "../cluster/index.ts";
import type { ConfState, Entry } from "../raft/index.ts";
import type { LsmSnapshot, WriteOp } from "../storage/index.ts";
import type { ShardEngine } from "./engine.ts";
import {
  confKey,
  decodeCommand,
  decodeConf,
  decodeMetaEntry,
  decodeStoredValue,
  encodeConf,
  encodeStoredValue,
  isMetaEntry,
  META_RECORDS_END,
  META_RECORDS_START,
  metaStorageKey,
  storageKey,
  USER_KEYS_END,
  userKey,
  type KvCommand,
  type Version,
} from "./commands.ts";

/** applyCommandNow's answer when the entry must go through applyCommand instead. */
export const WAIT: unique symbol = Symbol("wait");

/**
 * The engine batch of a KV command with `outcome`. An entry that changes no key is still
 * written (with no operations): the engine must make its index durable with the next flush, or
 * the WAL could never be compacted past it.
 */
function writeOps(cmd: KvCommand, skey: Uint8Array, outcome: ApplyOutcome): readonly WriteOp[] {
  if (outcome.type === "written" && cmd.op === "put") {
    return [{ type: "put", key: skey, value: encodeStoredValue(outcome.version, cmd.value) }];
  }
  if (outcome.type === "deleted") return [{ type: "delete", key: skey }];
  return NO_OPS;
}

const NO_OPS: readonly WriteOp[] = [];

/** What applying one KV command did; answered to the client that proposed it. */
export type ApplyOutcome =
  | { readonly type: "written"; readonly version: Version }
  | { readonly type: "deleted"; readonly version: Version }
  | { readonly type: "not-found" }
  | { readonly type: "precondition-failed"; readonly current: Version | null };

/**
 * What applying one meta command did; for the node that proposed it, never for a client. Kept
 * out of ApplyOutcome for now: the switches over ApplyOutcome in src/api and the driver would
 * stop being exhaustive. The driver gets it from applyMeta() or onMeta.
 */
export interface MetaApplyOutcome {
  readonly type: "meta";
  readonly index: number;
  readonly outcome: MetaOutcome;
}

export interface KvStateMachineOptions {
  /** This shard is the meta group (shard 0) and applies meta commands. Default false. */
  readonly metaGroup?: boolean;
}

export interface StoredItem {
  readonly key: Uint8Array;
  readonly value: Uint8Array;
  readonly version: Version;
}

export class KvStateMachine {
  readonly lsm: ShardEngine;
  readonly #metaGroup: boolean;
  #applied: number;
  /** The meta group's state as of #applied; undefined until first used (then loaded). */
  #meta: MetaState | undefined;
  /**
   * Called after each applied meta command (changed or not) with the state it left and its
   * outcome, and by reportMeta() (outcome null). Set by the driver; it runs inside the apply
   * loop, so it must not throw.
   */
  onMeta?: (state: MetaState, applied: MetaApplyOutcome | null) => void;

  constructor(lsm: ShardEngine, options: KvStateMachineOptions = {}) {
    this.lsm = lsm;
    this.#metaGroup = options.metaGroup ?? false;
    this.#applied = lsm.flushedSeq;
  }

  /** Index of the last entry applied. */
  get appliedIndex(): number {
    return this.#applied;
  }

  /**
   * Set from outside only when the engine's whole content was replaced (a snapshot install): the
   * cached meta state no longer matches the engine, so it is dropped and loaded again on next
   * use. The driver then calls reportMeta() to be told the new state.
   */
  set appliedIndex(index: number) {
    this.#applied = index;
    this.#meta = undefined;
  }

  /** The cluster's metadata as of the applied index; null unless this shard is the meta group. */
  meta(): MetaState | null {
    if (!this.#metaGroup) return null;
    this.#meta ??= this.#loadMeta();
    return this.#meta;
  }

  /**
   * Reports the meta state to onMeta: the one held, or read from the engine when none is (a
   * snapshot install, setting appliedIndex, dropped it). Null, and no call, unless this shard is
   * the meta group.
   */
  reportMeta(): MetaState | null {
    const meta = this.meta();
    if (meta !== null) this.onMeta?.(meta, null);
    return meta;
  }

  #loadMeta(): MetaState {
    const records: { key: Uint8Array; value: Uint8Array }[] = [];
    for (const [k, value] of this.lsm.scan({ start: META_RECORDS_START, end: META_RECORDS_END })) {
      records.push({ key: k.subarray(1), value });
    }
    return MetaState.load(records);
  }

  /** The configuration the state machine recorded durably (null for a new shard). */
  durableConf(): ConfState | null {
    const raw = this.lsm.get(confKey());
    return raw === undefined ? null : decodeConf(raw);
  }

  /**
   * Applies a committed KV entry. Entries at or below the engine's flushed sequence were applied
   * before a restart and are skipped. Resolves once the write is in the engine (it may wait for
   * flushes and compactions under back-pressure; nothing is dropped). A meta entry is applied
   * as by applyMeta() and answers null here: its outcome goes to onMeta.
   */
  async applyCommand(e: Entry): Promise<ApplyOutcome | null> {
    if (e.index <= this.#applied) return null;
    if (isMetaEntry(e.data)) {
      await this.applyMeta(e);
      return null;
    }
    const cmd = decodeCommand(e.data);
    const skey = storageKey(cmd.key);
    const outcome = this.#evaluate(e, cmd.op, skey, cmd.expected);
    await this.lsm.write(e.index, writeOps(cmd, skey, outcome));
    // Only now: a read served at appliedIndex must see this entry's effect in the engine.
    this.#applied = e.index;
    return outcome;
  }

  /**
   * applyCommand() done before returning, for a KV entry the engine takes at once (the common
   * case: no back-pressure). WAIT, with nothing changed, for a meta entry or when the engine
   * would make the write wait: then call applyCommand().
   */
  applyCommandNow(e: Entry): ApplyOutcome | null | typeof WAIT {
    if (e.index <= this.#applied) return null;
    if (isMetaEntry(e.data)) return WAIT;
    const cmd = decodeCommand(e.data);
    const skey = storageKey(cmd.key);
    const outcome = this.#evaluate(e, cmd.op, skey, cmd.expected);
    if (!this.lsm.writeNow(e.index, writeOps(cmd, skey, outcome))) return WAIT;
    this.#applied = e.index;
    return outcome;
  }

  /**
   * Applies a committed meta entry (encodeMetaEntry): the command is evaluated against the meta
   * state and its changed records are written under the internal prefix in the entry's own
   * batch; the new state is adopted only once the write is in the engine. Outside the meta group
   * the command is rejected (the same way on every replica) and changes nothing. Null for an
   * entry already applied.
   */
  async applyMeta(e: Entry): Promise<MetaApplyOutcome | null> {
    if (e.index <= this.#applied) return null;
    const cmd = decodeMetaEntry(e.data);
    const state = this.meta();
    if (state === null) {
      await this.lsm.write(e.index, []);
      this.#applied = e.index;
      const reason = "meta command in the log of a shard that is not the meta group";
      return { type: "meta", index: e.index, outcome: { kind: "rejected", reason } };
    }
    const result = state.apply(cmd);
    const ops: WriteOp[] = result.records.map((r) => ({
      type: "put",
      key: metaStorageKey(r.key),
      value: r.value,
    }));
    await this.lsm.write(e.index, ops);
    this.#meta = result.state;
    this.#applied = e.index;
    const applied: MetaApplyOutcome = { type: "meta", index: e.index, outcome: result.outcome };
    this.onMeta?.(result.state, applied);
    return applied;
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
    if (e.index <= this.#applied) return;
    await this.lsm.write(e.index, [{ type: "put", key: confKey(), value: encodeConf(conf) }]);
    this.#applied = e.index;
  }

  /** An entry with nothing for the state machine (the leader's no-op): its index is recorded. */
  async skip(e: Entry): Promise<void> {
    if (e.index <= this.#applied) return;
    await this.lsm.write(e.index, []);
    this.#applied = e.index;
  }

  /** skip() done before returning; false, with nothing changed, when the engine would wait. */
  skipNow(e: Entry): boolean {
    if (e.index <= this.#applied) return true;
    if (!this.lsm.writeNow(e.index, [])) return false;
    this.#applied = e.index;
    return true;
  }

  get(key: Uint8Array): StoredItem | null {
    const raw = this.lsm.get(storageKey(key));
    if (raw === undefined) return null;
    const { version, value } = decodeStoredValue(raw);
    return { key, value, version };
  }

  /**
   * User keys in order from `start` (inclusive) to `end` (exclusive, or the last key), as of
   * `snapshot`, read as they are asked for (scan-merge.ts takes what a page needs). The tables
   * the read pins are released when it ends: finish it or call `return()`.
   */
  *scan(start: Uint8Array, end: Uint8Array | null, snapshot: LsmSnapshot): Generator<StoredItem> {
    const it = this.lsm.scan({
      start: storageKey(start),
      end: end === null ? USER_KEYS_END : storageKey(end),
      snapshot,
    });
    for (const [k, raw] of it) {
      const { version, value } = decodeStoredValue(raw);
      yield { key: userKey(k), value, version };
    }
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
