// Original file: proto/cairn/v1/raft.proto

import type { Long } from '@grpc/proto-loader';

export interface ReadIndexReply {
  'index'?: (number | string | Long);
}

export interface ReadIndexReply__Output {
  'index': (number);
}
