/**
 * One shard's view of the WAL, in memory: its uncompacted entries, its latest hard state and
 * snapshot metadata. Both live appends and recovery replay go through the same methods, so the
 * state after a restart is the state before it by construction.
 *
 * Invariants:
 *  1. `entries[i].index === compactIndex + 1 + i` (the log is contiguous above the compaction point).
 *  2. `term(compactIndex) === compactTerm`; entries at or below `compactIndex` are gone.
 *  3. `bytes` is the sum of `entryBytes()` over `entries`.
 */
import { CairnError } from "../../common/index.ts";
import type { WalEntry, WalHardState, WalSnapshotMeta } from "./types.ts";

/** Rough per-entry overhead of the JS objects around the payload, for memory accounting. */
const ENTRY_OVERHEAD_BYTES = 80;

export function entryBytes(e: WalEntry): number {
  return e.data.length + ENTRY_OVERHEAD_BYTES;
}

export class ShardLog {
  entries: WalEntry[] = [];
  compactIndex = 0;
  compactTerm = 0;
  hardState: WalHardState | undefined = undefined;
  snapshot: WalSnapshotMeta | undefined = undefined;
  bytes = 0;
  /**
   * Set during recovery when an entry arrives above a hole (its predecessors were in a deleted
   * segment); a later compaction record must cover the hole or recovery fails.
   */
  holeBelow = 0;

  get lastIndex(): number {
    return this.compactIndex + this.entries.length;
  }

  /**
   * Appends `e`; an entry at an index already present replaces it and every entry after it
   * (Raft's log-matching overwrite of a conflicting suffix).
   */
  append(e: WalEntry, recovering: boolean): void {
    if (e.index <= this.compactIndex) return;
    if (e.index > this.lastIndex + 1) {
      if (!recovering) {
        throw new CairnError(
          "CAIRN_ERR_WAL_GAP",
          `WAL append: entry ${e.index} leaves a gap after ${this.lastIndex}`,
        );
      }
      this.entries = [];
      this.bytes = 0;
      this.compactIndex = e.index - 1;
      this.compactTerm = 0;
      this.holeBelow = e.index;
    } else if (e.index <= this.lastIndex) {
      const keep = e.index - this.compactIndex - 1;
      for (let i = keep; i < this.entries.length; i++) {
        this.bytes -= entryBytes(this.entries[i] as WalEntry);
      }
      this.entries.length = keep;
    }
    this.entries.push(e);
    this.bytes += entryBytes(e);
  }

  /** Drops entries up to `index` (inclusive); `term` is the term of the entry at `index`. */
  compact(index: number, term: number): void {
    if (this.holeBelow !== 0 && index >= this.holeBelow - 1) {
      // Recovery met this shard's first surviving entry before the compaction record that
      // covers what came before it (that record sits in a later segment): the hole is filled,
      // and a mark at exactly the hole's edge brings the term the placeholder lacked.
      this.holeBelow = 0;
      if (index === this.compactIndex) this.compactTerm = term;
    }
    if (index <= this.compactIndex) return;
    if (index >= this.lastIndex) {
      this.entries = [];
      this.bytes = 0;
    } else {
      const drop = index - this.compactIndex;
      for (let i = 0; i < drop; i++) this.bytes -= entryBytes(this.entries[i] as WalEntry);
      this.entries = this.entries.slice(drop);
    }
    this.compactIndex = index;
    this.compactTerm = term;
  }

  /** Installs a snapshot: the whole log is replaced by the snapshot's position. */
  applySnapshot(meta: WalSnapshotMeta): void {
    this.entries = [];
    this.bytes = 0;
    this.compactIndex = meta.index;
    this.compactTerm = meta.term;
    this.snapshot = meta;
    this.holeBelow = 0;
  }

  term(index: number): number | undefined {
    if (index === this.compactIndex) return this.compactTerm;
    if (index < this.compactIndex || index > this.lastIndex) return undefined;
    return (this.entries[index - this.compactIndex - 1] as WalEntry).term;
  }
}
