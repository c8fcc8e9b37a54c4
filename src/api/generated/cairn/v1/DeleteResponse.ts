// Original file: proto/cairn/v1/kv.proto

import type { Version as _cairn_v1_Version, Version__Output as _cairn_v1_Version__Output } from '../../cairn/v1/Version.ts';

export interface DeleteResponse {
  'deleted'?: (boolean);
  'version'?: (_cairn_v1_Version | null);
}

export interface DeleteResponse__Output {
  'deleted': (boolean);
  'version': (_cairn_v1_Version__Output | null);
}
