// Original file: proto/cairn/v1/kv.proto

import type { Version as _cairn_v1_Version, Version__Output as _cairn_v1_Version__Output } from '../../cairn/v1/Version.ts';

export interface GetResponse {
  'found'?: (boolean);
  'value'?: (Buffer | Uint8Array | string);
  'version'?: (_cairn_v1_Version | null);
}

export interface GetResponse__Output {
  'found': (boolean);
  'value': (Buffer);
  'version': (_cairn_v1_Version__Output | null);
}
