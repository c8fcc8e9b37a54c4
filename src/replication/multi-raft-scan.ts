/**
 * The multi-raft driver's scans: merging the key-ordered lists of several shards.
 */
import type { StoredItem } from "./state-machine.ts";

/** Merges per-shard key-ordered lists into one key-ordered list. */
export function mergeSorted(lists: StoredItem[][]): StoredItem[] {
  const all = lists.flat();
  all.sort((a, b) => Buffer.compare(a.key, b.key));
  return all;
}
