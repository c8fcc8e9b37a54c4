// Original file: proto/cairn/v1/raft.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { RaftFrame as _cairn_v1_RaftFrame, RaftFrame__Output as _cairn_v1_RaftFrame__Output } from '../../cairn/v1/RaftFrame.ts';
import type { RaftStreamAck as _cairn_v1_RaftStreamAck, RaftStreamAck__Output as _cairn_v1_RaftStreamAck__Output } from '../../cairn/v1/RaftStreamAck.ts';

export interface RaftClient extends grpc.Client {
  Stream(metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_RaftStreamAck__Output>): grpc.ClientWritableStream<_cairn_v1_RaftFrame>;
  Stream(metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_RaftStreamAck__Output>): grpc.ClientWritableStream<_cairn_v1_RaftFrame>;
  Stream(options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_RaftStreamAck__Output>): grpc.ClientWritableStream<_cairn_v1_RaftFrame>;
  Stream(callback: grpc.requestCallback<_cairn_v1_RaftStreamAck__Output>): grpc.ClientWritableStream<_cairn_v1_RaftFrame>;
  stream(metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_RaftStreamAck__Output>): grpc.ClientWritableStream<_cairn_v1_RaftFrame>;
  stream(metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_RaftStreamAck__Output>): grpc.ClientWritableStream<_cairn_v1_RaftFrame>;
  stream(options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_RaftStreamAck__Output>): grpc.ClientWritableStream<_cairn_v1_RaftFrame>;
  stream(callback: grpc.requestCallback<_cairn_v1_RaftStreamAck__Output>): grpc.ClientWritableStream<_cairn_v1_RaftFrame>;
  
}

export interface RaftHandlers extends grpc.UntypedServiceImplementation {
  Stream: grpc.handleClientStreamingCall<_cairn_v1_RaftFrame__Output, _cairn_v1_RaftStreamAck>;
  
}

export interface RaftDefinition extends grpc.ServiceDefinition {
  Stream: MethodDefinition<_cairn_v1_RaftFrame, _cairn_v1_RaftStreamAck, _cairn_v1_RaftFrame__Output, _cairn_v1_RaftStreamAck__Output>
}
