// Original file: proto/cairn/v1/raft.proto

import type { ScannedItem as _cairn_v1_ScannedItem, ScannedItem__Output as _cairn_v1_ScannedItem__Output } from '../../cairn/v1/ScannedItem.ts';

export interface ScanShardsReply {
  'items'?: (_cairn_v1_ScannedItem)[];
  'more'?: (boolean);
}

export interface ScanShardsReply__Output {
  'items': (_cairn_v1_ScannedItem__Output)[];
  'more': (boolean);
}
