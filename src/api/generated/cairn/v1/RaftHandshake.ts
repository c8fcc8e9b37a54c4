// Original file: proto/cairn/v1/raft.proto


export interface RaftHandshake {
  'cluster_id'?: (string);
  'from_node_id'?: (string);
  'to_node_id'?: (string);
  'from_replica_id'?: (string);
}

export interface RaftHandshake__Output {
  'cluster_id': (string);
  'from_node_id': (string);
  'to_node_id': (string);
  'from_replica_id': (string);
}
