/**
 * What the HTTP server asks the node about its health (contract §2.1–2.3, §3; design.md §2).
 * The node implements HealthSource; the server only calls it.
 */
export type NodeHealthStatus = "healthy" | "degraded" | "unhealthy";
export type ShardHealthStatus = "healthy" | "degraded" | "unavailable";

export interface ShardHealth {
  id: number;
  status: ShardHealthStatus;
  is_leader: boolean;
  raft_term: number;
  commit_index: number;
  last_applied: number;
}

export interface MemberHealth {
  id: string;
  rpc_addr: string;
  http_addr: string;
  /** `left`: the member stopped gracefully (it told the others); `dead`: it failed. */
  state: "alive" | "suspect" | "dead" | "left";
}

export interface HealthReport {
  status: NodeHealthStatus;
  node_id: string;
  uptime_seconds: number;
  total_shards: number;
  active_shards: number;
  shards: ShardHealth[];
  nodes: MemberHealth[];
  /**
   * Cluster mode, once the node knows its cluster: the cluster version (docs/operations.md,
   * "Upgrading"). Each entry of `nodes` names its member's build.
   */
  cluster_version?: number;
  /**
   * Present (true) while the node's disk is under `storage.min_free_bytes` and it refuses Puts
   * (src/node/disk-reserve.ts); the status is then `degraded` at least.
   */
  puts_refused?: true;
}

export interface HealthSource {
  /**
   * True when shard 0 exists, has a leader and its engine is open. No I/O; called per probe. A
   * node with shard workers asks them (a message to each thread and back).
   */
  isQuickHealthy(): boolean | Promise<boolean>;
  /** The detailed report; may touch storage; a rejection becomes a 500. */
  report(): Promise<HealthReport>;
}

/** HTTP status of GET /health for a report (design.md §2): 503 only when unhealthy. */
export function healthHttpStatus(status: NodeHealthStatus): 200 | 503 {
  return status === "unhealthy" ? 503 : 200;
}
