// Original file: proto/cairn/v1/raft.proto

import type { RaftMessageType as _cairn_v1_RaftMessageType, RaftMessageType__Output as _cairn_v1_RaftMessageType__Output } from '../../cairn/v1/RaftMessageType.ts';
import type { RaftEntry as _cairn_v1_RaftEntry, RaftEntry__Output as _cairn_v1_RaftEntry__Output } from '../../cairn/v1/RaftEntry.ts';
import type { RaftSnapshot as _cairn_v1_RaftSnapshot, RaftSnapshot__Output as _cairn_v1_RaftSnapshot__Output } from '../../cairn/v1/RaftSnapshot.ts';
import type { Long } from '@grpc/proto-loader';

export interface RaftMessage {
  'type'?: (_cairn_v1_RaftMessageType);
  'term'?: (number | string | Long);
  'prev_index'?: (number | string | Long);
  'prev_term'?: (number | string | Long);
  'entries'?: (_cairn_v1_RaftEntry)[];
  'commit'?: (number | string | Long);
  'index'?: (number | string | Long);
  'reject'?: (boolean);
  'hint_index'?: (number | string | Long);
  'hint_term'?: (number | string | Long);
  'last_index'?: (number | string | Long);
  'last_term'?: (number | string | Long);
  'transfer'?: (boolean);
  'read_seq'?: (number | string | Long);
  'snapshot'?: (_cairn_v1_RaftSnapshot | null);
  'quiesce'?: (boolean);
  'no_reply'?: (boolean);
  'lost'?: (boolean);
  'commit_term'?: (number | string | Long);
}

export interface RaftMessage__Output {
  'type': (_cairn_v1_RaftMessageType__Output);
  'term': (number);
  'prev_index': (number);
  'prev_term': (number);
  'entries': (_cairn_v1_RaftEntry__Output)[];
  'commit': (number);
  'index': (number);
  'reject': (boolean);
  'hint_index': (number);
  'hint_term': (number);
  'last_index': (number);
  'last_term': (number);
  'transfer': (boolean);
  'read_seq': (number);
  'snapshot': (_cairn_v1_RaftSnapshot__Output | null);
  'quiesce': (boolean);
  'no_reply': (boolean);
  'lost': (boolean);
  'commit_term': (number);
}
