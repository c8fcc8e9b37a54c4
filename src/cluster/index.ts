/** Placement and routing of keys over shards, the cluster's metadata, and the cluster view. */
export { type AllocatorInput, allocate, isBalancingMove, STALLED_AFTER_MS } from "./allocator.ts";
export { jumpConsistentHash, shardForKey, xxhash64 } from "./routing.ts";
export {
  type BootstrapDecision,
  type BootstrapInput,
  BUILD_VERSION,
  decodeMetaCommand,
  encodeMetaCommand,
  MEMBER_STATES,
  type MemberState,
  META_KEY_PREFIX,
  type MetaApplyResult,
  type MetaCommand,
  type MetaMember,
  type MetaOutcome,
  type MetaRecord,
  MetaState,
  type MetaStateView,
  isMetaHolder,
  startsNewLife,
  rendezvousReplicas,
  rendezvousWeight,
  type ShardPlacement,
  shouldBootstrap,
  anotherFirstSeed,
  VERSION_DECOMMISSION_STAYS,
  VERSION_DEMOTION,
  VERSION_MOVE_ORIGIN,
} from "./meta.ts";
export { nodeOfReplica, replicaIdOf } from "./replica.ts";
export {
  type ClusterView,
  ClusterViewPublisher,
  type MemberView,
  rpcAddressOf,
  type ShardView,
  VIEW_MIN_INTERVAL_MS,
  type ViewClock,
  type ViewListener,
} from "./view.ts";
