// Original file: proto/cairn/v1/raft.proto


export interface ConfirmTermsReply {
  'confirmed'?: (boolean)[];
}

export interface ConfirmTermsReply__Output {
  'confirmed': (boolean)[];
}
