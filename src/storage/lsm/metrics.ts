/**
 * Hooks for the catalogue metrics. The server (issue 4) implements this interface with
 * prom-client; the engine only calls it.
 *
 * - `lsm_memtable_size_bytes{shard_id}` ← memtableSize (active + immutable memtables)
 * - `lsm_sstable_count{level,shard_id}` ← sstableCount, after every change of the file set (not
 *   at a new engine's open, whose counts are all zero; a node reads `tablesPerLevel` at a scrape)
 * - `lsm_compaction_duration_ms{level,result}` ← compactionDuration; `level` is the input level,
 *   `result` is "success" or "failure"; buckets COMPACTION_DURATION_BUCKETS_MS
 */
export interface LsmMetrics {
  memtableSize(shardId: number, bytes: number): void;
  sstableCount(shardId: number, level: number, count: number): void;
  compactionDuration(level: number, result: "success" | "failure", ms: number): void;
}

/**
 * Exponential histogram bounds for compaction durations, 1 ms to 10 s, factor √10:
 * 1, 3.162, 10, 31.62, 100, 316.2, 1000, 3162, 10000 (ms).
 */
export const COMPACTION_DURATION_BUCKETS_MS: readonly number[] = [
  1, 3.162, 10, 31.62, 100, 316.2, 1000, 3162, 10000,
];

export const NO_METRICS: LsmMetrics = {
  memtableSize: () => undefined,
  sstableCount: () => undefined,
  compactionDuration: () => undefined,
};
