// Original file: proto/cairn/v1/raft.proto


export interface SnapshotTrailer {
  'crc32c'?: (number);
}

export interface SnapshotTrailer__Output {
  'crc32c': (number);
}
