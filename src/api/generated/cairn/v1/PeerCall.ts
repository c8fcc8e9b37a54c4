// Original file: proto/cairn/v1/raft.proto

import type { Long } from '@grpc/proto-loader';

export interface PeerCall {
  'id'?: (number | string | Long);
  'method'?: (string);
  'timeout_ms'?: (number);
  'request'?: (Buffer | Uint8Array | string);
}

export interface PeerCall__Output {
  'id': (number);
  'method': (string);
  'timeout_ms': (number);
  'request': (Buffer);
}
