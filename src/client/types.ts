/** The client's public value types. */

/** The version of a key: the Raft log index (and term) of the write that produced it. */
export interface Version {
  readonly index: number;
  readonly term: number;
}

export type Consistency = "linearizable" | "serializable";

/** Keys and values are bytes; strings are encoded as UTF-8. */
export type Bytes = Uint8Array | string;

export interface KeyValue {
  readonly key: Uint8Array;
  readonly value: Uint8Array;
  readonly version: Version;
}

export interface GetResult extends KeyValue {
  /** The value decoded as UTF-8. */
  text(): string;
}

export interface DeleteResult {
  /** False when the key did not exist (the delete still succeeded). */
  readonly deleted: boolean;
  readonly version: Version;
}

export interface ScanResult {
  readonly items: readonly KeyValue[];
  /** True when the range holds more items than were returned (the limit was reached). */
  readonly more: boolean;
  /**
   * The shards left out (ScanOptions.skipUnavailableShards: none of their replicas answered),
   * ascending; their keys in the range are missing. Empty otherwise.
   */
  readonly skippedShards: readonly number[];
}

export interface MemberInfo {
  readonly id: string;
  readonly rpcAddr: string;
  readonly httpAddr: string;
  /** Gossip's view: alive, suspect, dead or left. */
  readonly state: string;
  /**
   * The cluster's record: joining, active, decommissioning, decommissioned or dead; "" from a
   * node that does not know its cluster yet.
   */
  readonly memberState: string;
  /** Shards the cluster places on the member (0 from a node that does not know its cluster). */
  readonly replicas: number;
  /** It reported its disk nearly full (`cluster.disk_full_percent`): it takes no new replica. */
  readonly diskFull: boolean;
  /**
   * The highest cluster version the member's build runs; 0 from a node that does not know its
   * cluster yet.
   */
  readonly build: number;
}

/** A member's standing as Admin.DecommissionNode and Admin.RemoveNode answer it. */
export interface NodeStanding {
  readonly nodeId: string;
  readonly state: string;
  /** Shards still placed on the node. */
  readonly replicas: number;
}

export interface ShardInfo {
  readonly id: number;
  /** The leader's node id, or "" when no leader is known. */
  readonly leader: string;
  readonly replicas: readonly string[];
  readonly term: number;
}

export interface ClusterView {
  readonly epoch: number;
  readonly totalShards: number;
  /** The node's cluster id; "" before it joined one, and on a single node. */
  readonly clusterId: string;
  /**
   * The cluster version (docs/operations.md, "Upgrading"); 0 before the node joined a cluster,
   * and on a single node.
   */
  readonly clusterVersion: number;
  readonly nodes: readonly MemberInfo[];
  readonly shards: readonly ShardInfo[];
}

export interface SnapshotResult {
  readonly shardId: number;
  readonly index: number;
  readonly term: number;
  readonly sizeBytes: number;
}

/**
 * Bytes decoded as UTF-8, every character kept: a leading byte order mark (U+FEFF) is part of
 * the value (TextDecoder drops it unless told not to).
 */
export function utf8(bytes: Uint8Array): string {
  return new TextDecoder("utf-8", { ignoreBOM: true }).decode(bytes);
}

export function toBytes(b: Bytes): Uint8Array {
  return typeof b === "string" ? new TextEncoder().encode(b) : b;
}
