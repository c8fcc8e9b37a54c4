// Original file: proto/cairn/v1/raft.proto


export interface MetaProposal {
  'cluster_id'?: (string);
  'command'?: (Buffer | Uint8Array | string);
}

export interface MetaProposal__Output {
  'cluster_id': (string);
  'command': (Buffer);
}
