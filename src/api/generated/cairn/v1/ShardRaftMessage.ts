// Original file: proto/cairn/v1/raft.proto

import type { RaftMessage as _cairn_v1_RaftMessage, RaftMessage__Output as _cairn_v1_RaftMessage__Output } from '../../cairn/v1/RaftMessage.ts';

export interface ShardRaftMessage {
  'shard_id'?: (number);
  'message'?: (_cairn_v1_RaftMessage | null);
}

export interface ShardRaftMessage__Output {
  'shard_id': (number);
  'message': (_cairn_v1_RaftMessage__Output | null);
}
