// Original file: proto/cairn/v1/meta.proto

import type { Member as _cairn_v1_Member, Member__Output as _cairn_v1_Member__Output } from '../../cairn/v1/Member.ts';
import type { ShardInfo as _cairn_v1_ShardInfo, ShardInfo__Output as _cairn_v1_ShardInfo__Output } from '../../cairn/v1/ShardInfo.ts';
import type { Long } from '@grpc/proto-loader';

export interface ClusterView {
  'epoch'?: (number | string | Long);
  'nodes'?: (_cairn_v1_Member)[];
  'shards'?: (_cairn_v1_ShardInfo)[];
  'total_shards'?: (number);
  'cluster_id'?: (string);
  'incarnation'?: (string);
  'cluster_version'?: (number);
  'first_seed'?: (boolean);
}

export interface ClusterView__Output {
  'epoch': (number);
  'nodes': (_cairn_v1_Member__Output)[];
  'shards': (_cairn_v1_ShardInfo__Output)[];
  'total_shards': (number);
  'cluster_id': (string);
  'incarnation': (string);
  'cluster_version': (number);
  'first_seed': (boolean);
}
