/** Placement and routing of keys over shards (and, later, of shards over nodes). */
export { jumpConsistentHash, shardForKey, xxhash64 } from "./routing.ts";
