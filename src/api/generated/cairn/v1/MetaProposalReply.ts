// Original file: proto/cairn/v1/raft.proto


export interface MetaProposalReply {
}

export interface MetaProposalReply__Output {
}
