/** Options shared by the manifest-roll crash test and its child. Not a test file itself. */
import type { LsmOptions } from "../../src/storage/lsm/index.ts";

/**
 * No automatic flush (the child flushes every few batches), an L0 trigger of 2 so that every
 * other flush is compacted (edits that remove tables), and a manifest that rolls once it holds
 * 4× its last snapshot: every few edits.
 */
export const ROLL_CRASH_OPTIONS: LsmOptions = {
  memtableBytes: 1 << 20,
  l0CompactionTrigger: 2,
  levelBaseBytes: 4096,
  targetFileBytes: 2048,
  manifestRollBytes: 1,
};

export const ROLL_CRASH_BATCHES_PER_FLUSH = 5;
