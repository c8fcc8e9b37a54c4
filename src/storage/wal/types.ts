/**
 * What the WAL stores, in its own vocabulary: it knows shards, terms and indexes, never Raft's
 * types. The replication driver converts between the two.
 */
import type { FileSystem, RunDelayClock } from "../common/index.ts";

/** One log entry of one shard. `type` is an opaque tag (0..255) kept for the caller. */
export interface WalEntry {
  readonly term: number;
  readonly index: number;
  readonly type: number;
  readonly data: Uint8Array;
}

export interface WalHardState {
  readonly term: number;
  /** The candidate voted for in `term`, or null. */
  readonly vote: string | null;
  readonly commit: number;
}

/** Where a snapshot puts the log: everything up to `index` is in the snapshot. */
export interface WalSnapshotMeta {
  readonly index: number;
  readonly term: number;
  /** Opaque bytes kept for the caller (Raft's configuration at `index`). */
  readonly data: Uint8Array;
}

/**
 * The last entry (index, term) of a shard's log that a drop deleted (Wal.drop, Wal.droppedLog):
 * a replica created again votes as that log would until its own log holds something. { 0, 0 }
 * for a log that held nothing.
 */
export interface WalDroppedLog {
  readonly index: number;
  readonly term: number;
}

/** One item of an `append()` batch. */
export type WalRecord =
  | { readonly kind: "entries"; readonly shard: number; readonly entries: readonly WalEntry[] }
  | { readonly kind: "hard-state"; readonly shard: number; readonly state: WalHardState }
  | { readonly kind: "snapshot"; readonly shard: number; readonly meta: WalSnapshotMeta };

/** What recovery cut off the end of the last segment (a write torn by a crash). */
export interface TornTail {
  readonly file: string;
  /** Where the damage starts: the file is cut there. */
  readonly offset: number;
  /** Bytes of damage cut off, up to the last non-zero byte (zeros after it were never written). */
  readonly droppedBytes: number;
}

/** A recovered hard state whose commit was past its shard's last durable entry. */
export interface ClampedCommit {
  readonly shard: number;
  /** The commit index recorded on disk. */
  readonly commit: number;
  /** The shard's last durable entry, the commit the WAL now reports. */
  readonly clampedTo: number;
}

export interface WalOptions {
  /**
   * Rotate to a new segment once the current one holds this many bytes. Default 64 MiB. One
   * write may carry at most 2 GiB - 1 less this and 64 MiB (a segment recovery can read):
   * `append` refuses a batch that would make it larger.
   */
  readonly segmentBytes?: number;
  /**
   * Make each new segment `segmentBytes` long (a sparse file) once its header is written, so
   * that an O_DSYNC write inside it does not also have to persist a new file size: a lone
   * write is ~15% faster on ext4 (docs/storage.md). The unwritten rest reads as zeros, which
   * recovery takes for the end of the log. A segment is cut back to its records when the next
   * one starts. Default true.
   */
  readonly preallocate?: boolean;
  /**
   * Soft budget for uncompacted entries held in memory across all shards. Default 512 MiB.
   * Exceeding it never fails an append: `isOverMemoryBudget()` tells the driver to flush and
   * compact the shards `largestShards()` names.
   */
  readonly memoryBudgetBytes?: number;
  /** Where the segments live. Default: the real file system (`nodeFileSystem`). */
  readonly fs?: FileSystem;
  /**
   * A batch of at most this many bytes is written with a blocking write (`FsFile.writeNow`)
   * when the file system has one and the disk is fast (see Wal#writesNow); larger batches, and
   * every batch on a slow disk, are written asynchronously. 0: always asynchronously.
   * Default 64 KiB.
   */
  readonly blockingWriteMaxBytes?: number;
  /**
   * Eight blocking writes in a row that each take longer than this (ms) mark the disk slow (one
   * late write is a disk's tail): the next 1,000 batches are written asynchronously, then
   * blocking writes are tried again. A write's time is its wall time less what its thread waited
   * for a core meanwhile (runDelay). Default 2.
   */
  readonly blockingWriteSlowMs?: number;
  /**
   * How long the writing thread has waited for a core, in all (ms), or null when unknown: a
   * blocking write's wall time less this one's growth over it is what the disk took. Default:
   * Linux's scheduler statistics of the thread that makes the first blocking write
   * (threadRunDelayClock); tests pass their own.
   */
  readonly runDelay?: RunDelayClock | null;
  /**
   * Called right before a blocking write stops the thread: the caller hands what it has
   * framed for its sockets (answers, peer messages) to the kernel now, so that it travels
   * during the write instead of after it.
   */
  readonly beforeBlockingWrite?: () => void;
  /**
   * Called once per batch written and durable (an O_DSYNC write): how long the write took, in
   * milliseconds (from the write's start to its return, a thread-pool hop included), and its
   * bytes. What an operator watches for a slow disk (the node's cairn_wal_write_duration_seconds).
   */
  readonly onBatchWritten?: (ms: number, bytes: number) => void;
  /**
   * A file outside the WAL's directory that records that this WAL was created (the driver keeps
   * it beside the directory: `<data_dir>/wal.created`). Written durably once the WAL holds a
   * segment. When it exists and the directory holds no segment with a header (deleted, or
   * emptied), the WAL was lost with everything it held: open throws CAIRN_ERR_LOST_STATE naming
   * the directory, writing no segment, unless `acceptLoss`. Default: none (no such check).
   */
  readonly createdMarker?: string;
  /**
   * The operator accepts a lost WAL (recovery.unsafe_accept_lost_wal): open starts a new one and
   * reports it in `Wal.lost`.
   */
  readonly acceptLoss?: boolean;
  /**
   * Planted bugs, for checking that the deterministic simulation finds them. Never set in
   * production.
   */
  readonly testingBugs?: {
    /**
     * The bug of old versions: a rotation's checkpoint records the in-memory state, which already
     * includes the batch the rotation writes next (a crash between the two leaves a commit past
     * the last entry), and recovery does not clamp such a commit.
     */
    readonly rotationCheckpointIncludesBatch?: boolean;
  };
}

/** Counters for metrics and tests. */
export interface WalStats {
  readonly recordsAppended: number;
  readonly syncs: number;
  /** Of `syncs`, the batches written with a blocking write. */
  readonly blockingWrites: number;
  readonly bytesWritten: number;
  readonly segments: number;
  readonly segmentsDeleted: number;
  /** Failed unlinks of obsolete segments and failed directory fsyncs after them (retried). */
  readonly segmentDeleteFailures: number;
  readonly memoryBytes: number;
  /**
   * Bytes appended and not yet written (a write is durable: O_DSYNC): records no round waits
   * for (a commit index that moved alone), until the next write or the maintenance pass.
   */
  readonly unwrittenBytes: number;
}
