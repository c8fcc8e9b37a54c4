// Original file: proto/cairn/v1/admin.proto


export interface TransferLeaderResponse {
  'shard_id'?: (number);
  'leader'?: (string);
}

export interface TransferLeaderResponse__Output {
  'shard_id': (number);
  'leader': (string);
}
