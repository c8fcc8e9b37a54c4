// Original file: proto/cairn/v1/meta.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { ClusterView as _cairn_v1_ClusterView, ClusterView__Output as _cairn_v1_ClusterView__Output } from '../../cairn/v1/ClusterView.ts';
import type { WatchClusterRequest as _cairn_v1_WatchClusterRequest, WatchClusterRequest__Output as _cairn_v1_WatchClusterRequest__Output } from '../../cairn/v1/WatchClusterRequest.ts';

export interface MetaClient extends grpc.Client {
  WatchCluster(argument: _cairn_v1_WatchClusterRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_cairn_v1_ClusterView__Output>;
  WatchCluster(argument: _cairn_v1_WatchClusterRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_cairn_v1_ClusterView__Output>;
  watchCluster(argument: _cairn_v1_WatchClusterRequest, metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientReadableStream<_cairn_v1_ClusterView__Output>;
  watchCluster(argument: _cairn_v1_WatchClusterRequest, options?: grpc.CallOptions): grpc.ClientReadableStream<_cairn_v1_ClusterView__Output>;
  
}

export interface MetaHandlers extends grpc.UntypedServiceImplementation {
  WatchCluster: grpc.handleServerStreamingCall<_cairn_v1_WatchClusterRequest__Output, _cairn_v1_ClusterView>;
  
}

export interface MetaDefinition extends grpc.ServiceDefinition {
  WatchCluster: MethodDefinition<_cairn_v1_WatchClusterRequest, _cairn_v1_ClusterView, _cairn_v1_WatchClusterRequest__Output, _cairn_v1_ClusterView__Output>
}
