// Original file: proto/cairn/v1/raft.proto

import type { Long } from '@grpc/proto-loader';

export interface ScannedItem {
  'key'?: (Buffer | Uint8Array | string);
  'value'?: (Buffer | Uint8Array | string);
  'index'?: (number | string | Long);
  'term'?: (number | string | Long);
}

export interface ScannedItem__Output {
  'key': (Buffer);
  'value': (Buffer);
  'index': (number);
  'term': (number);
}
