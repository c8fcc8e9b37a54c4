// Original file: proto/cairn/v1/kv.proto

import type { Long } from '@grpc/proto-loader';

export interface Version {
  'index'?: (number | string | Long);
  'term'?: (number | string | Long);
}

export interface Version__Output {
  'index': (number);
  'term': (number);
}
