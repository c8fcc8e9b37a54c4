/** The TypeScript client of Cairn (docs/client.md). */
export {
  CairnClient,
  type CairnClientOptions,
  type CallOptions,
  type DeleteOptions,
  type GetOptions,
  type PutOptions,
  type ScanOptions,
  type ScanRange,
  type TlsOptions,
} from "./client.ts";
export {
  ClientClosedError,
  DeadlineExceededError,
  IndeterminateWriteError,
  InvalidRequestError,
  ServerError,
  UnavailableError,
  VersionConflictError,
} from "./errors.ts";
export type {
  Bytes,
  ClusterView,
  Consistency,
  DeleteResult,
  GetResult,
  KeyValue,
  MemberInfo,
  NodeStanding,
  ScanResult,
  ShardInfo,
  SnapshotResult,
  Version,
} from "./types.ts";
