// Original file: proto/cairn/v1/kv.proto

import type { Version as _cairn_v1_Version, Version__Output as _cairn_v1_Version__Output } from '../../cairn/v1/Version.ts';

export interface PutResponse {
  'version'?: (_cairn_v1_Version | null);
}

export interface PutResponse__Output {
  'version': (_cairn_v1_Version__Output | null);
}
