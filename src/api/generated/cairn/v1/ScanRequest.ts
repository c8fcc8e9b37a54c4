// Original file: proto/cairn/v1/kv.proto

import type { Consistency as _cairn_v1_Consistency, Consistency__Output as _cairn_v1_Consistency__Output } from '../../cairn/v1/Consistency.ts';

export interface ScanRequest {
  'start'?: (Buffer | Uint8Array | string);
  'end'?: (Buffer | Uint8Array | string);
  'prefix'?: (Buffer | Uint8Array | string);
  'limit'?: (number);
  'page_token'?: (Buffer | Uint8Array | string);
  'consistency'?: (_cairn_v1_Consistency);
  'skip_unavailable_shards'?: (boolean);
}

export interface ScanRequest__Output {
  'start': (Buffer);
  'end': (Buffer);
  'prefix': (Buffer);
  'limit': (number);
  'page_token': (Buffer);
  'consistency': (_cairn_v1_Consistency__Output);
  'skip_unavailable_shards': (boolean);
}
