// Original file: proto/cairn/v1/raft.proto


export interface ReadIndexRequest {
  'cluster_id'?: (string);
  'shard_ids'?: (number)[];
}

export interface ReadIndexRequest__Output {
  'cluster_id': (string);
  'shard_ids': (number)[];
}
