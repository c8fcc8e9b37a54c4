// Original file: proto/cairn/v1/admin.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { NodeRequest as _cairn_v1_NodeRequest, NodeRequest__Output as _cairn_v1_NodeRequest__Output } from '../../cairn/v1/NodeRequest.ts';
import type { NodeStatus as _cairn_v1_NodeStatus, NodeStatus__Output as _cairn_v1_NodeStatus__Output } from '../../cairn/v1/NodeStatus.ts';
import type { SnapshotShardRequest as _cairn_v1_SnapshotShardRequest, SnapshotShardRequest__Output as _cairn_v1_SnapshotShardRequest__Output } from '../../cairn/v1/SnapshotShardRequest.ts';
import type { SnapshotShardResponse as _cairn_v1_SnapshotShardResponse, SnapshotShardResponse__Output as _cairn_v1_SnapshotShardResponse__Output } from '../../cairn/v1/SnapshotShardResponse.ts';
import type { TransferLeaderRequest as _cairn_v1_TransferLeaderRequest, TransferLeaderRequest__Output as _cairn_v1_TransferLeaderRequest__Output } from '../../cairn/v1/TransferLeaderRequest.ts';
import type { TransferLeaderResponse as _cairn_v1_TransferLeaderResponse, TransferLeaderResponse__Output as _cairn_v1_TransferLeaderResponse__Output } from '../../cairn/v1/TransferLeaderResponse.ts';

export interface AdminClient extends grpc.Client {
  DecommissionNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  DecommissionNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  DecommissionNode(argument: _cairn_v1_NodeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  DecommissionNode(argument: _cairn_v1_NodeRequest, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  decommissionNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  decommissionNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  decommissionNode(argument: _cairn_v1_NodeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  decommissionNode(argument: _cairn_v1_NodeRequest, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  
  GetNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  GetNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  GetNode(argument: _cairn_v1_NodeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  GetNode(argument: _cairn_v1_NodeRequest, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  getNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  getNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  getNode(argument: _cairn_v1_NodeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  getNode(argument: _cairn_v1_NodeRequest, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  
  RecommissionNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  RecommissionNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  RecommissionNode(argument: _cairn_v1_NodeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  RecommissionNode(argument: _cairn_v1_NodeRequest, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  recommissionNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  recommissionNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  recommissionNode(argument: _cairn_v1_NodeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  recommissionNode(argument: _cairn_v1_NodeRequest, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  
  RemoveNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  RemoveNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  RemoveNode(argument: _cairn_v1_NodeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  RemoveNode(argument: _cairn_v1_NodeRequest, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  removeNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  removeNode(argument: _cairn_v1_NodeRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  removeNode(argument: _cairn_v1_NodeRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  removeNode(argument: _cairn_v1_NodeRequest, callback: grpc.requestCallback<_cairn_v1_NodeStatus__Output>): grpc.ClientUnaryCall;
  
  SnapshotShard(argument: _cairn_v1_SnapshotShardRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_SnapshotShardResponse__Output>): grpc.ClientUnaryCall;
  SnapshotShard(argument: _cairn_v1_SnapshotShardRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_SnapshotShardResponse__Output>): grpc.ClientUnaryCall;
  SnapshotShard(argument: _cairn_v1_SnapshotShardRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_SnapshotShardResponse__Output>): grpc.ClientUnaryCall;
  SnapshotShard(argument: _cairn_v1_SnapshotShardRequest, callback: grpc.requestCallback<_cairn_v1_SnapshotShardResponse__Output>): grpc.ClientUnaryCall;
  snapshotShard(argument: _cairn_v1_SnapshotShardRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_SnapshotShardResponse__Output>): grpc.ClientUnaryCall;
  snapshotShard(argument: _cairn_v1_SnapshotShardRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_SnapshotShardResponse__Output>): grpc.ClientUnaryCall;
  snapshotShard(argument: _cairn_v1_SnapshotShardRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_SnapshotShardResponse__Output>): grpc.ClientUnaryCall;
  snapshotShard(argument: _cairn_v1_SnapshotShardRequest, callback: grpc.requestCallback<_cairn_v1_SnapshotShardResponse__Output>): grpc.ClientUnaryCall;
  
  TransferLeader(argument: _cairn_v1_TransferLeaderRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_TransferLeaderResponse__Output>): grpc.ClientUnaryCall;
  TransferLeader(argument: _cairn_v1_TransferLeaderRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_TransferLeaderResponse__Output>): grpc.ClientUnaryCall;
  TransferLeader(argument: _cairn_v1_TransferLeaderRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_TransferLeaderResponse__Output>): grpc.ClientUnaryCall;
  TransferLeader(argument: _cairn_v1_TransferLeaderRequest, callback: grpc.requestCallback<_cairn_v1_TransferLeaderResponse__Output>): grpc.ClientUnaryCall;
  transferLeader(argument: _cairn_v1_TransferLeaderRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_TransferLeaderResponse__Output>): grpc.ClientUnaryCall;
  transferLeader(argument: _cairn_v1_TransferLeaderRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_TransferLeaderResponse__Output>): grpc.ClientUnaryCall;
  transferLeader(argument: _cairn_v1_TransferLeaderRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_TransferLeaderResponse__Output>): grpc.ClientUnaryCall;
  transferLeader(argument: _cairn_v1_TransferLeaderRequest, callback: grpc.requestCallback<_cairn_v1_TransferLeaderResponse__Output>): grpc.ClientUnaryCall;
  
}

export interface AdminHandlers extends grpc.UntypedServiceImplementation {
  DecommissionNode: grpc.handleUnaryCall<_cairn_v1_NodeRequest__Output, _cairn_v1_NodeStatus>;
  
  GetNode: grpc.handleUnaryCall<_cairn_v1_NodeRequest__Output, _cairn_v1_NodeStatus>;
  
  RecommissionNode: grpc.handleUnaryCall<_cairn_v1_NodeRequest__Output, _cairn_v1_NodeStatus>;
  
  RemoveNode: grpc.handleUnaryCall<_cairn_v1_NodeRequest__Output, _cairn_v1_NodeStatus>;
  
  SnapshotShard: grpc.handleUnaryCall<_cairn_v1_SnapshotShardRequest__Output, _cairn_v1_SnapshotShardResponse>;
  
  TransferLeader: grpc.handleUnaryCall<_cairn_v1_TransferLeaderRequest__Output, _cairn_v1_TransferLeaderResponse>;
  
}

export interface AdminDefinition extends grpc.ServiceDefinition {
  DecommissionNode: MethodDefinition<_cairn_v1_NodeRequest, _cairn_v1_NodeStatus, _cairn_v1_NodeRequest__Output, _cairn_v1_NodeStatus__Output>
  GetNode: MethodDefinition<_cairn_v1_NodeRequest, _cairn_v1_NodeStatus, _cairn_v1_NodeRequest__Output, _cairn_v1_NodeStatus__Output>
  RecommissionNode: MethodDefinition<_cairn_v1_NodeRequest, _cairn_v1_NodeStatus, _cairn_v1_NodeRequest__Output, _cairn_v1_NodeStatus__Output>
  RemoveNode: MethodDefinition<_cairn_v1_NodeRequest, _cairn_v1_NodeStatus, _cairn_v1_NodeRequest__Output, _cairn_v1_NodeStatus__Output>
  SnapshotShard: MethodDefinition<_cairn_v1_SnapshotShardRequest, _cairn_v1_SnapshotShardResponse, _cairn_v1_SnapshotShardRequest__Output, _cairn_v1_SnapshotShardResponse__Output>
  TransferLeader: MethodDefinition<_cairn_v1_TransferLeaderRequest, _cairn_v1_TransferLeaderResponse, _cairn_v1_TransferLeaderRequest__Output, _cairn_v1_TransferLeaderResponse__Output>
}
