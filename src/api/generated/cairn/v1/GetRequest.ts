// Original file: proto/cairn/v1/kv.proto

import type { Consistency as _cairn_v1_Consistency, Consistency__Output as _cairn_v1_Consistency__Output } from '../../cairn/v1/Consistency.ts';

export interface GetRequest {
  'key'?: (Buffer | Uint8Array | string);
  'consistency'?: (_cairn_v1_Consistency);
}

export interface GetRequest__Output {
  'key': (Buffer);
  'consistency': (_cairn_v1_Consistency__Output);
}
