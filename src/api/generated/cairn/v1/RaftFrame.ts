// Original file: proto/cairn/v1/raft.proto

import type { RaftHandshake as _cairn_v1_RaftHandshake, RaftHandshake__Output as _cairn_v1_RaftHandshake__Output } from '../../cairn/v1/RaftHandshake.ts';
import type { RaftBatch as _cairn_v1_RaftBatch, RaftBatch__Output as _cairn_v1_RaftBatch__Output } from '../../cairn/v1/RaftBatch.ts';
import type { PeerCall as _cairn_v1_PeerCall, PeerCall__Output as _cairn_v1_PeerCall__Output } from '../../cairn/v1/PeerCall.ts';
import type { PeerReply as _cairn_v1_PeerReply, PeerReply__Output as _cairn_v1_PeerReply__Output } from '../../cairn/v1/PeerReply.ts';

export interface RaftFrame {
  'handshake'?: (_cairn_v1_RaftHandshake | null);
  'batch'?: (_cairn_v1_RaftBatch | null);
  'call'?: (_cairn_v1_PeerCall | null);
  'reply'?: (_cairn_v1_PeerReply | null);
  'frame'?: "handshake"|"batch"|"call"|"reply";
}

export interface RaftFrame__Output {
  'handshake'?: (_cairn_v1_RaftHandshake__Output | null);
  'batch'?: (_cairn_v1_RaftBatch__Output | null);
  'call'?: (_cairn_v1_PeerCall__Output | null);
  'reply'?: (_cairn_v1_PeerReply__Output | null);
  'frame'?: "handshake"|"batch"|"call"|"reply";
}
