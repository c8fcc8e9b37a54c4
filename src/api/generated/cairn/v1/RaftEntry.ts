// Original file: proto/cairn/v1/raft.proto

import type { RaftEntryType as _cairn_v1_RaftEntryType, RaftEntryType__Output as _cairn_v1_RaftEntryType__Output } from '../../cairn/v1/RaftEntryType.ts';
import type { Long } from '@grpc/proto-loader';

export interface RaftEntry {
  'term'?: (number | string | Long);
  'index'?: (number | string | Long);
  'type'?: (_cairn_v1_RaftEntryType);
  'data'?: (Buffer | Uint8Array | string);
}

export interface RaftEntry__Output {
  'term': (number);
  'index': (number);
  'type': (_cairn_v1_RaftEntryType__Output);
  'data': (Buffer);
}
