// Original file: proto/cairn/v1/raft.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { ConfirmTermsReply as _cairn_v1_ConfirmTermsReply, ConfirmTermsReply__Output as _cairn_v1_ConfirmTermsReply__Output } from '../../cairn/v1/ConfirmTermsReply.ts';
import type { ConfirmTermsRequest as _cairn_v1_ConfirmTermsRequest, ConfirmTermsRequest__Output as _cairn_v1_ConfirmTermsRequest__Output } from '../../cairn/v1/ConfirmTermsRequest.ts';
import type { MetaProposal as _cairn_v1_MetaProposal, MetaProposal__Output as _cairn_v1_MetaProposal__Output } from '../../cairn/v1/MetaProposal.ts';
import type { MetaProposalReply as _cairn_v1_MetaProposalReply, MetaProposalReply__Output as _cairn_v1_MetaProposalReply__Output } from '../../cairn/v1/MetaProposalReply.ts';
import type { RaftFrame as _cairn_v1_RaftFrame, RaftFrame__Output as _cairn_v1_RaftFrame__Output } from '../../cairn/v1/RaftFrame.ts';
import type { RaftStreamAck as _cairn_v1_RaftStreamAck, RaftStreamAck__Output as _cairn_v1_RaftStreamAck__Output } from '../../cairn/v1/RaftStreamAck.ts';
import type { ReadIndexReply as _cairn_v1_ReadIndexReply, ReadIndexReply__Output as _cairn_v1_ReadIndexReply__Output } from '../../cairn/v1/ReadIndexReply.ts';
import type { ReadIndexRequest as _cairn_v1_ReadIndexRequest, ReadIndexRequest__Output as _cairn_v1_ReadIndexRequest__Output } from '../../cairn/v1/ReadIndexRequest.ts';
import type { ScanShardsReply as _cairn_v1_ScanShardsReply, ScanShardsReply__Output as _cairn_v1_ScanShardsReply__Output } from '../../cairn/v1/ScanShardsReply.ts';
import type { ScanShardsRequest as _cairn_v1_ScanShardsRequest, ScanShardsRequest__Output as _cairn_v1_ScanShardsRequest__Output } from '../../cairn/v1/ScanShardsRequest.ts';
import type { SnapshotAck as _cairn_v1_SnapshotAck, SnapshotAck__Output as _cairn_v1_SnapshotAck__Output } from '../../cairn/v1/SnapshotAck.ts';
import type { SnapshotChunk as _cairn_v1_SnapshotChunk, SnapshotChunk__Output as _cairn_v1_SnapshotChunk__Output } from '../../cairn/v1/SnapshotChunk.ts';

export interface RaftClient extends grpc.Client {
  ConfirmTerms(argument: _cairn_v1_ConfirmTermsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ConfirmTermsReply__Output>): grpc.ClientUnaryCall;
  ConfirmTerms(argument: _cairn_v1_ConfirmTermsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_ConfirmTermsReply__Output>): grpc.ClientUnaryCall;
  ConfirmTerms(argument: _cairn_v1_ConfirmTermsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ConfirmTermsReply__Output>): grpc.ClientUnaryCall;
  ConfirmTerms(argument: _cairn_v1_ConfirmTermsRequest, callback: grpc.requestCallback<_cairn_v1_ConfirmTermsReply__Output>): grpc.ClientUnaryCall;
  confirmTerms(argument: _cairn_v1_ConfirmTermsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ConfirmTermsReply__Output>): grpc.ClientUnaryCall;
  confirmTerms(argument: _cairn_v1_ConfirmTermsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_ConfirmTermsReply__Output>): grpc.ClientUnaryCall;
  confirmTerms(argument: _cairn_v1_ConfirmTermsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ConfirmTermsReply__Output>): grpc.ClientUnaryCall;
  confirmTerms(argument: _cairn_v1_ConfirmTermsRequest, callback: grpc.requestCallback<_cairn_v1_ConfirmTermsReply__Output>): grpc.ClientUnaryCall;
  
  InstallSnapshot(metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_SnapshotAck__Output>): grpc.ClientWritableStream<_cairn_v1_SnapshotChunk>;
  InstallSnapshot(metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_SnapshotAck__Output>): grpc.ClientWritableStream<_cairn_v1_SnapshotChunk>;
  InstallSnapshot(options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_SnapshotAck__Output>): grpc.ClientWritableStream<_cairn_v1_SnapshotChunk>;
  InstallSnapshot(callback: grpc.requestCallback<_cairn_v1_SnapshotAck__Output>): grpc.ClientWritableStream<_cairn_v1_SnapshotChunk>;
  installSnapshot(metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_SnapshotAck__Output>): grpc.ClientWritableStream<_cairn_v1_SnapshotChunk>;
  installSnapshot(metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_SnapshotAck__Output>): grpc.ClientWritableStream<_cairn_v1_SnapshotChunk>;
  installSnapshot(options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_SnapshotAck__Output>): grpc.ClientWritableStream<_cairn_v1_SnapshotChunk>;
  installSnapshot(callback: grpc.requestCallback<_cairn_v1_SnapshotAck__Output>): grpc.ClientWritableStream<_cairn_v1_SnapshotChunk>;
  
  ProposeMeta(argument: _cairn_v1_MetaProposal, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_MetaProposalReply__Output>): grpc.ClientUnaryCall;
  ProposeMeta(argument: _cairn_v1_MetaProposal, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_MetaProposalReply__Output>): grpc.ClientUnaryCall;
  ProposeMeta(argument: _cairn_v1_MetaProposal, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_MetaProposalReply__Output>): grpc.ClientUnaryCall;
  ProposeMeta(argument: _cairn_v1_MetaProposal, callback: grpc.requestCallback<_cairn_v1_MetaProposalReply__Output>): grpc.ClientUnaryCall;
  proposeMeta(argument: _cairn_v1_MetaProposal, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_MetaProposalReply__Output>): grpc.ClientUnaryCall;
  proposeMeta(argument: _cairn_v1_MetaProposal, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_MetaProposalReply__Output>): grpc.ClientUnaryCall;
  proposeMeta(argument: _cairn_v1_MetaProposal, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_MetaProposalReply__Output>): grpc.ClientUnaryCall;
  proposeMeta(argument: _cairn_v1_MetaProposal, callback: grpc.requestCallback<_cairn_v1_MetaProposalReply__Output>): grpc.ClientUnaryCall;
  
  ReadIndex(argument: _cairn_v1_ReadIndexRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ReadIndexReply__Output>): grpc.ClientUnaryCall;
  ReadIndex(argument: _cairn_v1_ReadIndexRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_ReadIndexReply__Output>): grpc.ClientUnaryCall;
  ReadIndex(argument: _cairn_v1_ReadIndexRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ReadIndexReply__Output>): grpc.ClientUnaryCall;
  ReadIndex(argument: _cairn_v1_ReadIndexRequest, callback: grpc.requestCallback<_cairn_v1_ReadIndexReply__Output>): grpc.ClientUnaryCall;
  readIndex(argument: _cairn_v1_ReadIndexRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ReadIndexReply__Output>): grpc.ClientUnaryCall;
  readIndex(argument: _cairn_v1_ReadIndexRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_ReadIndexReply__Output>): grpc.ClientUnaryCall;
  readIndex(argument: _cairn_v1_ReadIndexRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ReadIndexReply__Output>): grpc.ClientUnaryCall;
  readIndex(argument: _cairn_v1_ReadIndexRequest, callback: grpc.requestCallback<_cairn_v1_ReadIndexReply__Output>): grpc.ClientUnaryCall;
  
  ScanShards(argument: _cairn_v1_ScanShardsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ScanShardsReply__Output>): grpc.ClientUnaryCall;
  ScanShards(argument: _cairn_v1_ScanShardsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_ScanShardsReply__Output>): grpc.ClientUnaryCall;
  ScanShards(argument: _cairn_v1_ScanShardsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ScanShardsReply__Output>): grpc.ClientUnaryCall;
  ScanShards(argument: _cairn_v1_ScanShardsRequest, callback: grpc.requestCallback<_cairn_v1_ScanShardsReply__Output>): grpc.ClientUnaryCall;
  scanShards(argument: _cairn_v1_ScanShardsRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ScanShardsReply__Output>): grpc.ClientUnaryCall;
  scanShards(argument: _cairn_v1_ScanShardsRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_ScanShardsReply__Output>): grpc.ClientUnaryCall;
  scanShards(argument: _cairn_v1_ScanShardsRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ScanShardsReply__Output>): grpc.ClientUnaryCall;
  scanShards(argument: _cairn_v1_ScanShardsRequest, callback: grpc.requestCallback<_cairn_v1_ScanShardsReply__Output>): grpc.ClientUnaryCall;
  
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
  ConfirmTerms: grpc.handleUnaryCall<_cairn_v1_ConfirmTermsRequest__Output, _cairn_v1_ConfirmTermsReply>;
  
  InstallSnapshot: grpc.handleClientStreamingCall<_cairn_v1_SnapshotChunk__Output, _cairn_v1_SnapshotAck>;
  
  ProposeMeta: grpc.handleUnaryCall<_cairn_v1_MetaProposal__Output, _cairn_v1_MetaProposalReply>;
  
  ReadIndex: grpc.handleUnaryCall<_cairn_v1_ReadIndexRequest__Output, _cairn_v1_ReadIndexReply>;
  
  ScanShards: grpc.handleUnaryCall<_cairn_v1_ScanShardsRequest__Output, _cairn_v1_ScanShardsReply>;
  
  Stream: grpc.handleClientStreamingCall<_cairn_v1_RaftFrame__Output, _cairn_v1_RaftStreamAck>;
  
}

export interface RaftDefinition extends grpc.ServiceDefinition {
  ConfirmTerms: MethodDefinition<_cairn_v1_ConfirmTermsRequest, _cairn_v1_ConfirmTermsReply, _cairn_v1_ConfirmTermsRequest__Output, _cairn_v1_ConfirmTermsReply__Output>
  InstallSnapshot: MethodDefinition<_cairn_v1_SnapshotChunk, _cairn_v1_SnapshotAck, _cairn_v1_SnapshotChunk__Output, _cairn_v1_SnapshotAck__Output>
  ProposeMeta: MethodDefinition<_cairn_v1_MetaProposal, _cairn_v1_MetaProposalReply, _cairn_v1_MetaProposal__Output, _cairn_v1_MetaProposalReply__Output>
  ReadIndex: MethodDefinition<_cairn_v1_ReadIndexRequest, _cairn_v1_ReadIndexReply, _cairn_v1_ReadIndexRequest__Output, _cairn_v1_ReadIndexReply__Output>
  ScanShards: MethodDefinition<_cairn_v1_ScanShardsRequest, _cairn_v1_ScanShardsReply, _cairn_v1_ScanShardsRequest__Output, _cairn_v1_ScanShardsReply__Output>
  Stream: MethodDefinition<_cairn_v1_RaftFrame, _cairn_v1_RaftStreamAck, _cairn_v1_RaftFrame__Output, _cairn_v1_RaftStreamAck__Output>
}
