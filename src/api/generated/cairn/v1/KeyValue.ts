// Original file: proto/cairn/v1/kv.proto

import type { Version as _cairn_v1_Version, Version__Output as _cairn_v1_Version__Output } from '../../cairn/v1/Version.ts';

export interface KeyValue {
  'key'?: (Buffer | Uint8Array | string);
  'value'?: (Buffer | Uint8Array | string);
  'version'?: (_cairn_v1_Version | null);
}

export interface KeyValue__Output {
  'key': (Buffer);
  'value': (Buffer);
  'version': (_cairn_v1_Version__Output | null);
}
