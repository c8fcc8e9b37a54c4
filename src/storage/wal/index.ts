export { LostWalError, Wal } from "./wal.ts";
export type {
  ClampedCommit,
  TornTail,
  WalDroppedLog,
  WalEntry,
  WalHardState,
  WalOptions,
  WalRecord,
  WalSnapshotMeta,
  WalStats,
} from "./types.ts";
