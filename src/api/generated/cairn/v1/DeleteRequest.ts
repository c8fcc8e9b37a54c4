// Original file: proto/cairn/v1/kv.proto

import type { Version as _cairn_v1_Version, Version__Output as _cairn_v1_Version__Output } from '../../cairn/v1/Version.ts';

export interface DeleteRequest {
  'key'?: (Buffer | Uint8Array | string);
  'expected_version'?: (_cairn_v1_Version | null);
  '_expected_version'?: "expected_version";
}

export interface DeleteRequest__Output {
  'key': (Buffer);
  'expected_version'?: (_cairn_v1_Version__Output | null);
  '_expected_version'?: "expected_version";
}
