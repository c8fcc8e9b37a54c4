/**
 * Cluster membership and failure detection: SWIM over UDP on the RPC port number.
 * See docs/membership.md for the protocol, the wire format and the tuning settings.
 */

// The driver: what the node starts.
export {
  bindGossipSocket,
  Membership,
  MembershipClosedError,
  type MembershipEvent,
  type MembershipLogger,
  type MembershipOptions,
  type MembershipStats,
  RECORDED_PER_ROUND,
  type RecordedMember,
} from "./membership.ts";

// Sealed gossip (cluster.gossip_key_file).
export { GossipSeal, type GossipPlaintext, SEAL_OVERHEAD, type SealFailureReason } from "./seal.ts";

// Metrics the driver feeds.
export {
  type DropReason,
  GOSSIP_LATENCY_BUCKETS_MS,
  type MembershipMetrics,
  noopMembershipMetrics,
} from "./metrics.ts";

// Vocabulary shared with the rest of the node.
export {
  DEFAULT_SWIM_CONFIG,
  DEFAULT_TICK_MS,
  type Incarnation,
  type MemberEventKind,
  type MemberId,
  type MemberMeta,
  MembershipConfigError,
  type MemberState,
  type MemberView,
  DuplicateNodeIdError,
  ShardCountMismatchError,
  type SwimConfig,
} from "./core/index.ts";
