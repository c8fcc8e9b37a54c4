/**
 * The gRPC boundary: cairn.v1 services over the multi-raft driver, with one error → status
 * mapping (errors.ts) and request validation against the configured limits.
 */
export {
  CURRENT_VERSION_KEY,
  ERROR_CODE_KEY,
  InvalidArgumentError,
  LEADER_HINT_KEY,
  toServiceError,
  VersionMismatchError,
} from "./errors.ts";
export { CLUSTER_ID_KEY, INCARNATION_KEY } from "./wire.ts";
export {
  type CairnProto,
  LOADER_OPTIONS,
  loadCairnProto,
  PROTO_DIR,
  PROTO_FILES,
} from "./proto.ts";
export {
  DEFAULT_FORWARD_DEADLINE_MS,
  type ForwardOptions,
  LeaderUnreachableError,
} from "./forward.ts";
export {
  type LeadershipTransfer,
  type MemberAdmin,
  type NodeStanding,
  transferInPlace,
} from "./admin-service.ts";
export { newInternalKey, RpcServer, type RpcServerOptions } from "./server.ts";
export { ConnectionSlots, type SharedConnectionSlots } from "./connection-slots.ts";
export type { WorkerTunnels } from "./front-end.ts";
export type { AdminStore, KvStore } from "./store.ts";
export type { Limits } from "./validate.ts";
export { FORWARDED_KEY, SERVED_BY_KEY } from "./wire.ts";
