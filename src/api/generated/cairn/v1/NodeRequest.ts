// Original file: proto/cairn/v1/admin.proto


export interface NodeRequest {
  'node_id'?: (string);
}

export interface NodeRequest__Output {
  'node_id': (string);
}
