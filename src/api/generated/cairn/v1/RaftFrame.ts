// Original file: proto/cairn/v1/raft.proto

import type { RaftHandshake as _cairn_v1_RaftHandshake, RaftHandshake__Output as _cairn_v1_RaftHandshake__Output } from '../../cairn/v1/RaftHandshake.ts';
import type { RaftBatch as _cairn_v1_RaftBatch, RaftBatch__Output as _cairn_v1_RaftBatch__Output } from '../../cairn/v1/RaftBatch.ts';

export interface RaftFrame {
  'handshake'?: (_cairn_v1_RaftHandshake | null);
  'batch'?: (_cairn_v1_RaftBatch | null);
  'frame'?: "handshake"|"batch";
}

export interface RaftFrame__Output {
  'handshake'?: (_cairn_v1_RaftHandshake__Output | null);
  'batch'?: (_cairn_v1_RaftBatch__Output | null);
  'frame'?: "handshake"|"batch";
}
