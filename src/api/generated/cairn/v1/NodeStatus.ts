// Original file: proto/cairn/v1/admin.proto


export interface NodeStatus {
  'node_id'?: (string);
  'state'?: (string);
  'replicas'?: (number);
}

export interface NodeStatus__Output {
  'node_id': (string);
  'state': (string);
  'replicas': (number);
}
