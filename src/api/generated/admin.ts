import type * as grpc from '@grpc/grpc-js';
import type { MessageTypeDefinition } from '@grpc/proto-loader';

import type { AdminClient as _cairn_v1_AdminClient, AdminDefinition as _cairn_v1_AdminDefinition } from './cairn/v1/Admin.ts';
import type { NodeRequest as _cairn_v1_NodeRequest, NodeRequest__Output as _cairn_v1_NodeRequest__Output } from './cairn/v1/NodeRequest.ts';
import type { NodeStatus as _cairn_v1_NodeStatus, NodeStatus__Output as _cairn_v1_NodeStatus__Output } from './cairn/v1/NodeStatus.ts';
import type { SnapshotShardRequest as _cairn_v1_SnapshotShardRequest, SnapshotShardRequest__Output as _cairn_v1_SnapshotShardRequest__Output } from './cairn/v1/SnapshotShardRequest.ts';
import type { SnapshotShardResponse as _cairn_v1_SnapshotShardResponse, SnapshotShardResponse__Output as _cairn_v1_SnapshotShardResponse__Output } from './cairn/v1/SnapshotShardResponse.ts';
import type { TransferLeaderRequest as _cairn_v1_TransferLeaderRequest, TransferLeaderRequest__Output as _cairn_v1_TransferLeaderRequest__Output } from './cairn/v1/TransferLeaderRequest.ts';
import type { TransferLeaderResponse as _cairn_v1_TransferLeaderResponse, TransferLeaderResponse__Output as _cairn_v1_TransferLeaderResponse__Output } from './cairn/v1/TransferLeaderResponse.ts';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  cairn: {
    v1: {
      Admin: SubtypeConstructor<typeof grpc.Client, _cairn_v1_AdminClient> & { service: _cairn_v1_AdminDefinition }
      NodeRequest: MessageTypeDefinition<_cairn_v1_NodeRequest, _cairn_v1_NodeRequest__Output>
      NodeStatus: MessageTypeDefinition<_cairn_v1_NodeStatus, _cairn_v1_NodeStatus__Output>
      SnapshotShardRequest: MessageTypeDefinition<_cairn_v1_SnapshotShardRequest, _cairn_v1_SnapshotShardRequest__Output>
      SnapshotShardResponse: MessageTypeDefinition<_cairn_v1_SnapshotShardResponse, _cairn_v1_SnapshotShardResponse__Output>
      TransferLeaderRequest: MessageTypeDefinition<_cairn_v1_TransferLeaderRequest, _cairn_v1_TransferLeaderRequest__Output>
      TransferLeaderResponse: MessageTypeDefinition<_cairn_v1_TransferLeaderResponse, _cairn_v1_TransferLeaderResponse__Output>
    }
  }
}

