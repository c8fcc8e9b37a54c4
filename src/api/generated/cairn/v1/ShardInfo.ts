// Original file: proto/cairn/v1/meta.proto

import type { Long } from '@grpc/proto-loader';

export interface ShardInfo {
  'id'?: (number);
  'leader'?: (string);
  'replicas'?: (string)[];
  'term'?: (number | string | Long);
}

export interface ShardInfo__Output {
  'id': (number);
  'leader': (string);
  'replicas': (string)[];
  'term': (number);
}
