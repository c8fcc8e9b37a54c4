/**
 * Replication: the multi-raft driver joining the Raft core, the WAL and the per-shard LSM
 * engines, and the KV state machine each shard applies its log to.
 */
export {
  ABSENT,
  decodeMetaEntry,
  encodeMetaEntry,
  isMetaEntry,
  type KvCommand,
  type Version,
} from "./commands.ts";
export { type Clock, type EngineOpener, type ShardEngine, systemClock } from "./engine.ts";
export {
  type DriverTestingBugs,
  type LostShard,
  MultiRaft,
  type RaftTransport,
  type RemovalOutcome,
  type ShardMessage,
  type MultiRaftOptions,
  type ReplicationObserver,
  type ScanRequest,
  type ShardInfo,
  ShuttingDownError,
  type SnapshotResult,
} from "./multi-raft.ts";
export {
  type ClientCall,
  ProposalLostError,
  ReadCancelledError,
  ReadPastDeadlineError,
} from "./request-errors.ts";
export { ScanCall } from "./multi-raft-scan.ts";
export { REQUEST_OVERHEAD_BYTES } from "./request-budget.ts";
export { ITEM_OVERHEAD_BYTES, mergePages, type ScanPage } from "./scan-merge.ts";
export { GrpcTransport, type GrpcTransportOptions, type PeerStats } from "./grpc-transport.ts";
export {
  createRaftService,
  RAFT_SERVER_OPTIONS,
  type RaftService,
  type RaftServiceOptions,
} from "./raft-service.ts";
export type { PeerLogger } from "./peer-logger.ts";
export { inTurn, type PaceClock, type Pacer, RateLimiter } from "./rate-limiter.ts";
export type { ConfirmTerms, ReadVoucher, TermCheck } from "./term-confirm.ts";
export {
  MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES,
  SnapshotAssembler,
  type SnapshotMetrics,
  SnapshotRefusal,
} from "./snapshot-transfer.ts";
export type { SnapshotDisk } from "./snapshot-file.ts";
export { CodecError } from "./codec.ts";
export type { PeerCall, PeerReply } from "./frame-codec.ts";
export type {
  ApplyOutcome,
  KvStateMachineOptions,
  MetaApplyOutcome,
  StoredItem,
} from "./state-machine.ts";
