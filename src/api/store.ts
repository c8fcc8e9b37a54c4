/**
 * What the gRPC services need from the store: the seam between the API and the multi-raft driver
 * (MultiRaft implements it). Narrow on purpose, so a test can stand a fake in for one node.
 */
import type {
  ApplyOutcome,
  ClientCall,
  ScanPage,
  ScanRequest,
  ShardInfo,
  SnapshotResult,
  StoredItem,
  Version,
} from "../replication/index.ts";

/**
 * The KV operations. In a cluster, put, delete and a linearizable get reject with NotLeaderError
 * (src/raft) on a node that does not lead the key's shard.
 *
 * `deadline` is the call's deadline on deadlineClock() (src/common/deadline-clock.ts), when its
 * client gives up on it; absent or Infinity, it has none. What waits on the call's behalf stops
 * waiting then: a call handed to the shard worker that owns the key's shard fails at it
 * (src/node/siblings.ts; at the driver's own bound, sooner), a write not yet proposed is
 * never proposed after it (src/replication/shard.ts), and a linearizable get or scan stops
 * waiting for its read indexes or their applies (src/replication/multi-raft-reads.ts), a scan's
 * share asked of a peer too (its call carries the deadline).
 *
 * A read's `call` is its client's call (ClientCall: the served call itself, nothing made for
 * it): a linearizable get or scan also stops waiting once it is cancelled (its client cancelled
 * it, or its connection closed), giving its share of the request budget back, as at its
 * deadline. Writes take none: one proposed is in the log whether its client waits or not.
 */
export interface KvStore {
  put(
    key: Uint8Array,
    value: Uint8Array,
    expected?: Version,
    deadline?: number,
  ): Promise<ApplyOutcome>;
  delete(key: Uint8Array, expected?: Version, deadline?: number): Promise<ApplyOutcome>;
  get(
    key: Uint8Array,
    linearizable: boolean,
    deadline?: number,
    call?: ClientCall,
  ): Promise<StoredItem | null>;
  scan(req: ScanRequest, deadline?: number, call?: ClientCall): Promise<ScanPage>;
  /**
   * The node a Put or Delete of `key` here would be refused naming (the leader of its shard
   * when this node follows it and knows that leader; for a shard this node holds no replica
   * of, where it is likely led), so the API forwards it at once rather than through the
   * refusal. null otherwise. Optional: without it every write goes through the store.
   */
  leaderElsewhere?(key: Uint8Array): string | null;
}

/**
 * The Admin operations. `deadline` is the call's, as for KvStore: a snapshot of a shard another
 * shard worker owns stops being waited for then (src/node/siblings.ts), taken there all the same.
 */
export interface AdminStore {
  snapshotShard(id: number, deadline?: number): Promise<SnapshotResult>;
  /** Throws CAIRN_ERR_INVALID_ARGUMENT for an id outside [0, total_shards). */
  checkShardId(id: number): void;
  shardInfo(id: number): ShardInfo | null;
  transferLeader(id: number, to: string): Promise<void>;
}
