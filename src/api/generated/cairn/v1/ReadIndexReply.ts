// Original file: proto/cairn/v1/raft.proto

import type { ReadIndexResult as _cairn_v1_ReadIndexResult, ReadIndexResult__Output as _cairn_v1_ReadIndexResult__Output } from '../../cairn/v1/ReadIndexResult.ts';

export interface ReadIndexReply {
  'results'?: (_cairn_v1_ReadIndexResult)[];
}

export interface ReadIndexReply__Output {
  'results': (_cairn_v1_ReadIndexResult__Output)[];
}
