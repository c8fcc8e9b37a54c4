// Original file: proto/cairn/v1/raft.proto

import type { Long } from '@grpc/proto-loader';

export interface RaftSnapshotMeta {
  'index'?: (number | string | Long);
  'term'?: (number | string | Long);
  'voters'?: (string)[];
  'learners'?: (string)[];
}

export interface RaftSnapshotMeta__Output {
  'index': (number);
  'term': (number);
  'voters': (string)[];
  'learners': (string)[];
}
