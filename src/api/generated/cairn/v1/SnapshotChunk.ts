// Original file: proto/cairn/v1/raft.proto

import type { SnapshotHeader as _cairn_v1_SnapshotHeader, SnapshotHeader__Output as _cairn_v1_SnapshotHeader__Output } from '../../cairn/v1/SnapshotHeader.ts';
import type { SnapshotTrailer as _cairn_v1_SnapshotTrailer, SnapshotTrailer__Output as _cairn_v1_SnapshotTrailer__Output } from '../../cairn/v1/SnapshotTrailer.ts';

export interface SnapshotChunk {
  'header'?: (_cairn_v1_SnapshotHeader | null);
  'data'?: (Buffer | Uint8Array | string);
  'trailer'?: (_cairn_v1_SnapshotTrailer | null);
  'chunk'?: "header"|"data"|"trailer";
}

export interface SnapshotChunk__Output {
  'header'?: (_cairn_v1_SnapshotHeader__Output | null);
  'data'?: (Buffer);
  'trailer'?: (_cairn_v1_SnapshotTrailer__Output | null);
  'chunk'?: "header"|"data"|"trailer";
}
