// Original file: proto/cairn/v1/raft.proto

import type { Long } from '@grpc/proto-loader';

export interface ConfirmTermsRequest {
  'cluster_id'?: (string);
  'shard_ids'?: (number)[];
  'terms'?: (number | string | Long)[];
  'replicas'?: (string)[];
}

export interface ConfirmTermsRequest__Output {
  'cluster_id': (string);
  'shard_ids': (number)[];
  'terms': (number)[];
  'replicas': (string)[];
}
