// Original file: proto/cairn/v1/raft.proto

import type { Long } from '@grpc/proto-loader';

export interface ReadIndexResult {
  'index'?: (number | string | Long);
  'error_code'?: (string);
  'error'?: (string);
  'leader'?: (string);
}

export interface ReadIndexResult__Output {
  'index': (number);
  'error_code': (string);
  'error': (string);
  'leader': (string);
}
