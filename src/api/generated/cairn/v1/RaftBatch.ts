// Original file: proto/cairn/v1/raft.proto

import type { ShardRaftMessage as _cairn_v1_ShardRaftMessage, ShardRaftMessage__Output as _cairn_v1_ShardRaftMessage__Output } from '../../cairn/v1/ShardRaftMessage.ts';

export interface RaftBatch {
  'messages'?: (_cairn_v1_ShardRaftMessage)[];
  'to_replica_id'?: (string);
}

export interface RaftBatch__Output {
  'messages': (_cairn_v1_ShardRaftMessage__Output)[];
  'to_replica_id': (string);
}
