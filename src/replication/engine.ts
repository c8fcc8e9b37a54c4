/**
 * The seams between the driver and the world it runs in, so that the deterministic simulation
 * can run the real driver: the storage engine of a shard (the LSM in production, an in-memory
 * twin in the simulation) and the clock that ticks groups and schedules rounds.
 */
import type { Backpressure, LsmSnapshot, ScanOptions, WriteOp } from "../storage/index.ts";
import { LsmEngine, type LsmEnvironment } from "../storage/index.ts";

/** What a shard's state machine needs from its storage engine. `LsmEngine` is the real one. */
export interface ShardEngine {
  /** Highest sequence (Raft index) whose writes survive a crash; the replay starts above it. */
  readonly flushedSeq: number;
  /** Set once the engine failed for good; it then refuses every call. */
  readonly failure: unknown;
  /**
   * Applies a batch at `seq` (strictly increasing; an empty batch still records `seq`, so the
   * next flush makes it durable). Resolves once reads see it.
   */
  write(seq: number, ops: readonly WriteOp[]): Promise<void>;
  /**
   * write(), done at once when nothing would make it wait: true once reads see the batch; false,
   * having done nothing, when it would wait (back-pressure): then call write(). Throws what
   * write() would reject with.
   */
  writeNow(seq: number, ops: readonly WriteOp[]): boolean;
  get(key: Uint8Array, snapshot?: LsmSnapshot): Uint8Array | undefined;
  scan(options: ScanOptions): Iterable<[Uint8Array, Uint8Array]>;
  snapshot(): LsmSnapshot;
  /** Makes everything written so far durable (flushedSeq reaches the last written sequence). */
  flush(): Promise<void>;
  backpressure(): Backpressure;
  stats(): { readonly bytesPerLevel: readonly number[] };
  /** Bytes of its memtables, active and immutable (lsm_memtable_size_bytes). */
  readonly memtableBytes: number;
  /** Tables per level, L0 first (lsm_sstable_count); read at a scrape. */
  readonly tablesPerLevel: readonly number[];
  /**
   * Replaces the whole content with a snapshot stream (encodeSnapshotFrames), durably: once it
   * resolves, `flushedSeq` is the snapshot's sequence.
   */
  importSnapshot(chunks: AsyncIterable<Uint8Array>): Promise<void>;
  close(): Promise<void>;
  /**
   * What the open moved aside, for the node to log (LsmEngine.quarantined: a torn manifest and
   * the tables its dropped edit may have added). Absent or empty when nothing was.
   */
  readonly quarantined?: readonly string[];
}

/**
 * Opens (creating if needed) the engine of `shard` in `dir`, whose log here dropped its entries
 * up to `logDroppedThrough` (LsmOptions.logDroppedThrough: an engine behind it keeps every table).
 */
export type EngineOpener = (
  shard: number,
  dir: string,
  logDroppedThrough: number,
) => Promise<ShardEngine>;

export function lsmOpener(env: LsmEnvironment, memtableBytes: number): EngineOpener {
  return (shard, dir, logDroppedThrough) =>
    LsmEngine.open(dir, env, { shardId: shard, memtableBytes, logDroppedThrough });
}

/** Time as the driver sees it. */
export interface Clock {
  /** Milliseconds on a monotonic clock. */
  now(): number;
  /** Calls `fn` every `ms` until the returned function is called. */
  every(ms: number, fn: () => void): () => void;
  /** Calls `fn` once, after the current I/O callbacks (setImmediate). */
  defer(fn: () => void): void;
}

export const systemClock: Clock = {
  now: () => performance.now(),
  every(ms, fn) {
    const timer = setInterval(fn, ms);
    return () => clearInterval(timer);
  },
  defer(fn) {
    setImmediate(fn);
  },
};
