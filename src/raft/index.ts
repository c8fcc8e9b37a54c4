/**
 * The Raft consensus core: a pure, synchronous, deterministic state machine (see docs/raft.md).
 * Drivers use RawNode; RaftStorage is what they must provide; MemoryStorage is its in-memory twin.
 */
export {
  describeConf,
  describeData,
  describeEntries,
  describeEntry,
  describeHardState,
  describeMessage,
  describeSnapshot,
} from "./describe.ts";
export {
  InvalidRaftRequestError,
  NotLeaderError,
  ProposalDroppedError,
  RaftInvariantError,
} from "./errors.ts";
export type { Message, MessageType, TimeoutNowMessage } from "./message.ts";
export type { RaftConfig, TestingBugs } from "./raft.ts";
export { type BasicStatus, type Ready, RawNode, type SoftState, type Status } from "./raw-node.ts";
export { EMPTY_CONF, MemoryStorage, type RaftStorage } from "./storage.ts";
export {
  type ConfChange,
  type ConfState,
  confAfter,
  decodeConfChange,
  type Entry,
  type EntryType,
  encodeConfChange,
  type HardState,
  type LogIndex,
  logIndex,
  type NodeId,
  nodeId,
  type ReadState,
  type Role,
  type Snapshot,
  type SnapshotMeta,
  type SnapshotStream,
  type Term,
  term,
} from "./types.ts";
