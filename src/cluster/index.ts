/** Placement and routing of keys over shards, and the cluster view clients route with. */
export { jumpConsistentHash, shardForKey, xxhash64 } from "./routing.ts";
export {
  type ClusterView,
  ClusterViewPublisher,
  type MemberView,
  rpcAddressOf,
  type ShardView,
  type ViewListener,
} from "./view.ts";
