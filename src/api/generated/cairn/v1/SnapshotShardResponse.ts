// Original file: proto/cairn/v1/admin.proto

import type { Long } from '@grpc/proto-loader';

export interface SnapshotShardResponse {
  'shard_id'?: (number);
  'index'?: (number | string | Long);
  'term'?: (number | string | Long);
  'size_bytes'?: (number | string | Long);
}

export interface SnapshotShardResponse__Output {
  'shard_id': (number);
  'index': (number);
  'term': (number);
  'size_bytes': (number);
}
