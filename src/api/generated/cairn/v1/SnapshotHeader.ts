// Original file: proto/cairn/v1/raft.proto

import type { RaftHandshake as _cairn_v1_RaftHandshake, RaftHandshake__Output as _cairn_v1_RaftHandshake__Output } from '../../cairn/v1/RaftHandshake.ts';
import type { RaftMessage as _cairn_v1_RaftMessage, RaftMessage__Output as _cairn_v1_RaftMessage__Output } from '../../cairn/v1/RaftMessage.ts';
import type { Long } from '@grpc/proto-loader';

export interface SnapshotHeader {
  'handshake'?: (_cairn_v1_RaftHandshake | null);
  'shard_id'?: (number);
  'message'?: (_cairn_v1_RaftMessage | null);
  'total_bytes'?: (number | string | Long);
  'to_replica_id'?: (string);
}

export interface SnapshotHeader__Output {
  'handshake': (_cairn_v1_RaftHandshake__Output | null);
  'shard_id': (number);
  'message': (_cairn_v1_RaftMessage__Output | null);
  'total_bytes': (number);
  'to_replica_id': (string);
}
