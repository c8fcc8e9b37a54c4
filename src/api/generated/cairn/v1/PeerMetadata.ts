// Original file: proto/cairn/v1/raft.proto


export interface PeerMetadata {
  'key'?: (string);
  'value'?: (string);
}

export interface PeerMetadata__Output {
  'key': (string);
  'value': (string);
}
