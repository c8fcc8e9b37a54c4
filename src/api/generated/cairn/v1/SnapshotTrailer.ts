// Original file: proto/cairn/v1/raft.proto

import type { Long } from '@grpc/proto-loader';

export interface SnapshotTrailer {
  'crc32c'?: (number);
  'total_bytes'?: (number | string | Long);
}

export interface SnapshotTrailer__Output {
  'crc32c': (number);
  'total_bytes': (number);
}
