// Original file: proto/cairn/v1/meta.proto


export interface Member {
  'id'?: (string);
  'rpc_addr'?: (string);
  'http_addr'?: (string);
  'state'?: (string);
  'member_state'?: (string);
  'replicas'?: (number);
  'disk_full'?: (boolean);
  'build'?: (number);
}

export interface Member__Output {
  'id': (string);
  'rpc_addr': (string);
  'http_addr': (string);
  'state': (string);
  'member_state': (string);
  'replicas': (number);
  'disk_full': (boolean);
  'build': (number);
}
