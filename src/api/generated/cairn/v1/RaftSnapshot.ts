// Original file: proto/cairn/v1/raft.proto

import type { RaftSnapshotMeta as _cairn_v1_RaftSnapshotMeta, RaftSnapshotMeta__Output as _cairn_v1_RaftSnapshotMeta__Output } from '../../cairn/v1/RaftSnapshotMeta.ts';

export interface RaftSnapshot {
  'meta'?: (_cairn_v1_RaftSnapshotMeta | null);
  'data'?: (Buffer | Uint8Array | string);
}

export interface RaftSnapshot__Output {
  'meta': (_cairn_v1_RaftSnapshotMeta__Output | null);
  'data': (Buffer);
}
