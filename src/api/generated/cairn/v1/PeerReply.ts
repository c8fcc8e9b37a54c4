// Original file: proto/cairn/v1/raft.proto

import type { PeerMetadata as _cairn_v1_PeerMetadata, PeerMetadata__Output as _cairn_v1_PeerMetadata__Output } from '../../cairn/v1/PeerMetadata.ts';
import type { Long } from '@grpc/proto-loader';

export interface PeerReply {
  'id'?: (number | string | Long);
  'code'?: (number);
  'details'?: (string);
  'response'?: (Buffer | Uint8Array | string);
  'trailers'?: (_cairn_v1_PeerMetadata)[];
}

export interface PeerReply__Output {
  'id': (number);
  'code': (number);
  'details': (string);
  'response': (Buffer);
  'trailers': (_cairn_v1_PeerMetadata__Output)[];
}
