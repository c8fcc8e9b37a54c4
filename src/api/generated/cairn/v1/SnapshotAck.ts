// Original file: proto/cairn/v1/raft.proto


export interface SnapshotAck {
}

export interface SnapshotAck__Output {
}
