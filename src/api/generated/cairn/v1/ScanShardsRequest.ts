// Original file: proto/cairn/v1/raft.proto

import type { Long } from '@grpc/proto-loader';

export interface ScanShardsRequest {
  'cluster_id'?: (string);
  'shard_ids'?: (number)[];
  'start'?: (Buffer | Uint8Array | string);
  'end'?: (Buffer | Uint8Array | string);
  'has_end'?: (boolean);
  'limit'?: (number);
  'linearizable'?: (boolean);
  'max_bytes'?: (number | string | Long);
}

export interface ScanShardsRequest__Output {
  'cluster_id': (string);
  'shard_ids': (number)[];
  'start': (Buffer);
  'end': (Buffer);
  'has_end': (boolean);
  'limit': (number);
  'linearizable': (boolean);
  'max_bytes': (number);
}
