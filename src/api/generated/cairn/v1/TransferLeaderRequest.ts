// Original file: proto/cairn/v1/admin.proto


export interface TransferLeaderRequest {
  'shard_id'?: (number);
  'node_id'?: (string);
}

export interface TransferLeaderRequest__Output {
  'shard_id': (number);
  'node_id': (string);
}
