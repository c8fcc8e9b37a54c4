/**
 * The multi-raft driver's maintenance, a pass every second: an engine that failed in the
 * background fails the node; shards are flushed when the WAL holds too much; the WAL is
 * compacted up to what the engines hold (retainedFrom: keeping what members behind a leader
 * still need). And snapshotShard, the operator's flush-and-compact of one shard.
 */
import { CairnError } from "../common/errors.ts";
import type { ConfState, LogIndex, NodeId, Role } from "../raft/index.ts";
import type { Wal } from "../storage/index.ts";
import type { ShardTable, SnapshotResult } from "./multi-raft-options.ts";

/** What maintenance needs of the driver. */
export interface MaintenanceHost {
  readonly shards: ShardTable;
  readonly wal: Pick<
    Wal,
    | "isOverMemoryBudget"
    | "stats"
    | "memoryBudgetBytes"
    | "largestShards"
    | "lastIndex"
    | "firstIndex"
    | "compact"
    | "sync"
    | "term"
    | "hardState"
  >;
  readonly replicaId: NodeId;
  /** The node is closed or failed: no pass runs. */
  stopped(): boolean;
  /** Fails the node (an engine failed, the WAL could not compact). */
  fail(err: unknown): void;
  checkShardId(id: number): void;
}

/**
 * Log entries a leader keeps, beyond what its engine holds, for members behind it (see
 * retainedFrom); further behind, a member catches up by snapshot.
 */
export const RETAINED_ENTRIES = 10_000;

/** What retainedFrom reads of a group's Raft core. */
export interface RetentionView {
  readonly role: Role;
  matchOf(id: NodeId): LogIndex | null;
}

/**
 * How far a leader may compact its log, given `flushed` (what its engine holds durably): not
 * past what its slowest member (other than `self`) still needs, so a follower a little behind
 * (restarted, slow) catches up from the log rather than by a whole snapshot; but never keeping
 * more than RETAINED_ENTRIES beyond `flushed`'s reach, past which that member gets a snapshot.
 * Followers send no entries, so they compact to `flushed`.
 */
export function retainedFrom(
  raw: RetentionView,
  conf: ConfState,
  self: NodeId,
  flushed: number,
): number {
  if (raw.role !== "leader") return flushed;
  let needed = flushed;
  for (const member of [...conf.voters, ...conf.learners]) {
    if (member === self) continue;
    const match = raw.matchOf(member);
    if (match !== null) needed = Math.min(needed, match);
  }
  return Math.max(needed, flushed - RETAINED_ENTRIES);
}

export class Maintenance {
  readonly #host: MaintenanceHost;
  #maintaining = false;

  constructor(host: MaintenanceHost) {
    this.#host = host;
  }

  /**
   * The maintenance pass, run every second: compacts WAL entries already in SSTables (keeping
   * what members behind a leader still need, retainedFrom), flushes shards when the WAL holds
   * too much, and syncs what rounds appended without a sync. Those are commit indexes that
   * moved alone (needsSync): a round does not wait for them, but left in memory until the next
   * round that syncs, which an idle group may never run, a crash took them, and a follower
   * restarted without its peers (the one replica left of a shard that lost its quorum,
   * docs/operations.md "Lost a quorum") served none of the writes it had applied since its
   * last sync. Now they are on disk within a pass.
   */
  async maintain(): Promise<void> {
    if (this.#maintaining || this.#host.stopped()) return;
    this.#maintaining = true;
    try {
      // An engine that failed in the background (a flush or compaction could not write) serves
      // nothing more; the node must restart and recover it from its last durable state and the
      // WAL, like any other storage failure.
      for (const s of this.#host.shards.values()) {
        if (s.sm.lsm.failure !== undefined) throw s.sm.lsm.failure;
      }
      if (this.#host.wal.isOverMemoryBudget()) {
        // Flush the shards holding the most until what they hold covers the excess (at most
        // 64 a pass): with writes spread over many shards, a few flushes a second would fall
        // behind the intake and the log's memory would grow past its budget.
        const stats = this.#host.wal.stats();
        let excess = stats.memoryBytes - this.#host.wal.memoryBudgetBytes / 2;
        const flushes: Promise<void>[] = [];
        for (const { shard, bytes } of this.#host.wal.largestShards(64)) {
          if (excess <= 0) break;
          const s = this.#host.shards.get(shard);
          if (s === undefined) continue;
          flushes.push(
            s.sm.lsm.flush().catch((err: unknown) => {
              if (!s.removed && !this.#host.stopped()) throw err;
            }),
          );
          excess -= bytes;
        }
        // A flush's engine may be closed while it waits: its replica removed (replica GC,
        // multi-raft-removal.ts), or the driver closing, neither of which waits for this pass.
        // Its flush then rejects (an LsmEngine's flush() does when close() begins before its
        // memtable's flush started, behind MAX_CONCURRENT_FLUSHES running ones): that is no
        // failure of the node, whose WAL still holds what was not flushed, or dropped it.
        await Promise.all(flushes);
      }
      const overBudget = this.#host.wal.isOverMemoryBudget();
      for (const s of this.#host.shards.values()) {
        // Never past the commit index the WAL records: it makes a compaction durable with
        // everything appended before it, so the hard state recording that commit goes with it.
        // (The engine may hold more than a restarted node's commit: a commit index moved alone
        // is synced lazily, needsSync.) Not the Raft core's commit: a snapshot a round is still
        // installing moved it, and the engine's flushed index, before the round records them
        // in the WAL; compacted past the recorded commit, a crash left a log its shard could
        // not open.
        const flushed = Math.min(
          s.sm.lsm.flushedSeq,
          this.#host.wal.lastIndex(s.id),
          this.#host.wal.hardState(s.id)?.commit ?? 0,
        );
        const upTo = overBudget
          ? flushed
          : retainedFrom(s.raw, s.storage.conf, this.#host.replicaId, flushed);
        if (upTo >= this.#host.wal.firstIndex(s.id)) this.#host.wal.compact(s.id, upTo);
      }
      // Nothing to write: resolved at once. Under load rounds sync all the time, and this one
      // joins the next batch's write (group commit).
      await this.#host.wal.sync();
    } catch (err) {
      this.#host.fail(err);
    } finally {
      this.#maintaining = false;
    }
  }

  /** Flushes the shard's LSM and compacts its WAL entries up to what is now in SSTables. */
  async snapshotShard(id: number): Promise<SnapshotResult> {
    this.#host.checkShardId(id);
    const shard = this.#host.shards.get(id);
    if (shard === undefined) {
      throw new CairnError(
        "CAIRN_ERR_SHARD_NOT_ACTIVE",
        `shard ${id} is not active on this node (it holds no data)`,
      );
    }
    await shard.sm.lsm.flush();
    // Not past the commit index the WAL records (see maintain()).
    const index = Math.min(
      shard.sm.lsm.flushedSeq,
      this.#host.wal.lastIndex(id),
      this.#host.wal.hardState(id)?.commit ?? 0,
    );
    this.#host.wal.compact(id, index);
    await this.#host.wal.sync();
    const term = this.#host.wal.term(id, this.#host.wal.firstIndex(id) - 1) ?? 0;
    const stats = shard.sm.lsm.stats();
    const sizeBytes = stats.bytesPerLevel.reduce((a, b) => a + b, 0);
    return { shardId: id, index: this.#host.wal.firstIndex(id) - 1, term, sizeBytes };
  }
}
