import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { ConfirmTermsReply as _cairn_v1_ConfirmTermsReply, ConfirmTermsReply__Output as _cairn_v1_ConfirmTermsReply__Output } from './cairn/v1/ConfirmTermsReply.ts';
import type { ConfirmTermsRequest as _cairn_v1_ConfirmTermsRequest, ConfirmTermsRequest__Output as _cairn_v1_ConfirmTermsRequest__Output } from './cairn/v1/ConfirmTermsRequest.ts';
import type { MetaProposal as _cairn_v1_MetaProposal, MetaProposal__Output as _cairn_v1_MetaProposal__Output } from './cairn/v1/MetaProposal.ts';
import type { MetaProposalReply as _cairn_v1_MetaProposalReply, MetaProposalReply__Output as _cairn_v1_MetaProposalReply__Output } from './cairn/v1/MetaProposalReply.ts';
import type { PeerCall as _cairn_v1_PeerCall, PeerCall__Output as _cairn_v1_PeerCall__Output } from './cairn/v1/PeerCall.ts';
import type { PeerMetadata as _cairn_v1_PeerMetadata, PeerMetadata__Output as _cairn_v1_PeerMetadata__Output } from './cairn/v1/PeerMetadata.ts';
import type { PeerReply as _cairn_v1_PeerReply, PeerReply__Output as _cairn_v1_PeerReply__Output } from './cairn/v1/PeerReply.ts';
import type { RaftClient as _cairn_v1_RaftClient, RaftDefinition as _cairn_v1_RaftDefinition } from './cairn/v1/Raft.ts';
import type { RaftBatch as _cairn_v1_RaftBatch, RaftBatch__Output as _cairn_v1_RaftBatch__Output } from './cairn/v1/RaftBatch.ts';
import type { RaftEntry as _cairn_v1_RaftEntry, RaftEntry__Output as _cairn_v1_RaftEntry__Output } from './cairn/v1/RaftEntry.ts';
import type { RaftFrame as _cairn_v1_RaftFrame, RaftFrame__Output as _cairn_v1_RaftFrame__Output } from './cairn/v1/RaftFrame.ts';
import type { RaftHandshake as _cairn_v1_RaftHandshake, RaftHandshake__Output as _cairn_v1_RaftHandshake__Output } from './cairn/v1/RaftHandshake.ts';
import type { RaftMessage as _cairn_v1_RaftMessage, RaftMessage__Output as _cairn_v1_RaftMessage__Output } from './cairn/v1/RaftMessage.ts';
import type { RaftSnapshot as _cairn_v1_RaftSnapshot, RaftSnapshot__Output as _cairn_v1_RaftSnapshot__Output } from './cairn/v1/RaftSnapshot.ts';
import type { RaftSnapshotMeta as _cairn_v1_RaftSnapshotMeta, RaftSnapshotMeta__Output as _cairn_v1_RaftSnapshotMeta__Output } from './cairn/v1/RaftSnapshotMeta.ts';
import type { RaftStreamAck as _cairn_v1_RaftStreamAck, RaftStreamAck__Output as _cairn_v1_RaftStreamAck__Output } from './cairn/v1/RaftStreamAck.ts';
import type { ReadIndexReply as _cairn_v1_ReadIndexReply, ReadIndexReply__Output as _cairn_v1_ReadIndexReply__Output } from './cairn/v1/ReadIndexReply.ts';
import type { ReadIndexRequest as _cairn_v1_ReadIndexRequest, ReadIndexRequest__Output as _cairn_v1_ReadIndexRequest__Output } from './cairn/v1/ReadIndexRequest.ts';
import type { ReadIndexResult as _cairn_v1_ReadIndexResult, ReadIndexResult__Output as _cairn_v1_ReadIndexResult__Output } from './cairn/v1/ReadIndexResult.ts';
import type { ScanShardsReply as _cairn_v1_ScanShardsReply, ScanShardsReply__Output as _cairn_v1_ScanShardsReply__Output } from './cairn/v1/ScanShardsReply.ts';
import type { ScanShardsRequest as _cairn_v1_ScanShardsRequest, ScanShardsRequest__Output as _cairn_v1_ScanShardsRequest__Output } from './cairn/v1/ScanShardsRequest.ts';
import type { ScannedItem as _cairn_v1_ScannedItem, ScannedItem__Output as _cairn_v1_ScannedItem__Output } from './cairn/v1/ScannedItem.ts';
import type { ShardRaftMessage as _cairn_v1_ShardRaftMessage, ShardRaftMessage__Output as _cairn_v1_ShardRaftMessage__Output } from './cairn/v1/ShardRaftMessage.ts';
import type { SnapshotAck as _cairn_v1_SnapshotAck, SnapshotAck__Output as _cairn_v1_SnapshotAck__Output } from './cairn/v1/SnapshotAck.ts';
import type { SnapshotChunk as _cairn_v1_SnapshotChunk, SnapshotChunk__Output as _cairn_v1_SnapshotChunk__Output } from './cairn/v1/SnapshotChunk.ts';
import type { SnapshotHeader as _cairn_v1_SnapshotHeader, SnapshotHeader__Output as _cairn_v1_SnapshotHeader__Output } from './cairn/v1/SnapshotHeader.ts';
import type { SnapshotTrailer as _cairn_v1_SnapshotTrailer, SnapshotTrailer__Output as _cairn_v1_SnapshotTrailer__Output } from './cairn/v1/SnapshotTrailer.ts';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  cairn: {
    v1: {
      ConfirmTermsReply: MessageTypeDefinition<_cairn_v1_ConfirmTermsReply, _cairn_v1_ConfirmTermsReply__Output>
      ConfirmTermsRequest: MessageTypeDefinition<_cairn_v1_ConfirmTermsRequest, _cairn_v1_ConfirmTermsRequest__Output>
      MetaProposal: MessageTypeDefinition<_cairn_v1_MetaProposal, _cairn_v1_MetaProposal__Output>
      MetaProposalReply: MessageTypeDefinition<_cairn_v1_MetaProposalReply, _cairn_v1_MetaProposalReply__Output>
      PeerCall: MessageTypeDefinition<_cairn_v1_PeerCall, _cairn_v1_PeerCall__Output>
      PeerMetadata: MessageTypeDefinition<_cairn_v1_PeerMetadata, _cairn_v1_PeerMetadata__Output>
      PeerReply: MessageTypeDefinition<_cairn_v1_PeerReply, _cairn_v1_PeerReply__Output>
      Raft: SubtypeConstructor<typeof grpc.Client, _cairn_v1_RaftClient> & { service: _cairn_v1_RaftDefinition }
      RaftBatch: MessageTypeDefinition<_cairn_v1_RaftBatch, _cairn_v1_RaftBatch__Output>
      RaftEntry: MessageTypeDefinition<_cairn_v1_RaftEntry, _cairn_v1_RaftEntry__Output>
      RaftEntryType: EnumTypeDefinition
      RaftFrame: MessageTypeDefinition<_cairn_v1_RaftFrame, _cairn_v1_RaftFrame__Output>
      RaftHandshake: MessageTypeDefinition<_cairn_v1_RaftHandshake, _cairn_v1_RaftHandshake__Output>
      RaftMessage: MessageTypeDefinition<_cairn_v1_RaftMessage, _cairn_v1_RaftMessage__Output>
      RaftMessageType: EnumTypeDefinition
      RaftSnapshot: MessageTypeDefinition<_cairn_v1_RaftSnapshot, _cairn_v1_RaftSnapshot__Output>
      RaftSnapshotMeta: MessageTypeDefinition<_cairn_v1_RaftSnapshotMeta, _cairn_v1_RaftSnapshotMeta__Output>
      RaftStreamAck: MessageTypeDefinition<_cairn_v1_RaftStreamAck, _cairn_v1_RaftStreamAck__Output>
      ReadIndexReply: MessageTypeDefinition<_cairn_v1_ReadIndexReply, _cairn_v1_ReadIndexReply__Output>
      ReadIndexRequest: MessageTypeDefinition<_cairn_v1_ReadIndexRequest, _cairn_v1_ReadIndexRequest__Output>
      ReadIndexResult: MessageTypeDefinition<_cairn_v1_ReadIndexResult, _cairn_v1_ReadIndexResult__Output>
      ScanShardsReply: MessageTypeDefinition<_cairn_v1_ScanShardsReply, _cairn_v1_ScanShardsReply__Output>
      ScanShardsRequest: MessageTypeDefinition<_cairn_v1_ScanShardsRequest, _cairn_v1_ScanShardsRequest__Output>
      ScannedItem: MessageTypeDefinition<_cairn_v1_ScannedItem, _cairn_v1_ScannedItem__Output>
      ShardRaftMessage: MessageTypeDefinition<_cairn_v1_ShardRaftMessage, _cairn_v1_ShardRaftMessage__Output>
      SnapshotAck: MessageTypeDefinition<_cairn_v1_SnapshotAck, _cairn_v1_SnapshotAck__Output>
      SnapshotChunk: MessageTypeDefinition<_cairn_v1_SnapshotChunk, _cairn_v1_SnapshotChunk__Output>
      SnapshotHeader: MessageTypeDefinition<_cairn_v1_SnapshotHeader, _cairn_v1_SnapshotHeader__Output>
      SnapshotTrailer: MessageTypeDefinition<_cairn_v1_SnapshotTrailer, _cairn_v1_SnapshotTrailer__Output>
    }
  }
}

