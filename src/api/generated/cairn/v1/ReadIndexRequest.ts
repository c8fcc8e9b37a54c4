// Original file: proto/cairn/v1/raft.proto

import type { Long } from '@grpc/proto-loader';

export interface ReadIndexRequest {
  'cluster_id'?: (string);
  'shard_ids'?: (number)[];
  'replica'?: (string);
  'terms'?: (number | string | Long)[];
}

export interface ReadIndexRequest__Output {
  'cluster_id': (string);
  'shard_ids': (number)[];
  'replica': (string);
  'terms': (number)[];
}
