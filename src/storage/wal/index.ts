export { Wal } from "./wal.ts";
export type {
  TornTail,
  WalEntry,
  WalHardState,
  WalOptions,
  WalRecord,
  WalSnapshotMeta,
  WalStats,
} from "./types.ts";
