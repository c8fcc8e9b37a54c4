// Original file: proto/cairn/v1/raft.proto


export interface RaftStreamAck {
}

export interface RaftStreamAck__Output {
}
