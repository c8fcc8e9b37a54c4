// Original file: proto/cairn/v1/kv.proto

import type { KeyValue as _cairn_v1_KeyValue, KeyValue__Output as _cairn_v1_KeyValue__Output } from '../../cairn/v1/KeyValue.ts';

export interface ScanResponse {
  'items'?: (_cairn_v1_KeyValue)[];
  'next_page_token'?: (Buffer | Uint8Array | string);
  'skipped_shards'?: (number)[];
}

export interface ScanResponse__Output {
  'items': (_cairn_v1_KeyValue__Output)[];
  'next_page_token': (Buffer);
  'skipped_shards': (number)[];
}
