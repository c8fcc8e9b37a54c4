// Original file: proto/cairn/v1/admin.proto


export interface SnapshotShardRequest {
  'shard_id'?: (number);
}

export interface SnapshotShardRequest__Output {
  'shard_id': (number);
}
