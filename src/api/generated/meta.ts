import type * as grpc from '@grpc/grpc-js';
import type { MessageTypeDefinition } from '@grpc/proto-loader';

import type { ClusterView as _cairn_v1_ClusterView, ClusterView__Output as _cairn_v1_ClusterView__Output } from './cairn/v1/ClusterView.ts';
import type { Member as _cairn_v1_Member, Member__Output as _cairn_v1_Member__Output } from './cairn/v1/Member.ts';
import type { MetaClient as _cairn_v1_MetaClient, MetaDefinition as _cairn_v1_MetaDefinition } from './cairn/v1/Meta.ts';
import type { ShardInfo as _cairn_v1_ShardInfo, ShardInfo__Output as _cairn_v1_ShardInfo__Output } from './cairn/v1/ShardInfo.ts';
import type { WatchClusterRequest as _cairn_v1_WatchClusterRequest, WatchClusterRequest__Output as _cairn_v1_WatchClusterRequest__Output } from './cairn/v1/WatchClusterRequest.ts';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  cairn: {
    v1: {
      ClusterView: MessageTypeDefinition<_cairn_v1_ClusterView, _cairn_v1_ClusterView__Output>
      Member: MessageTypeDefinition<_cairn_v1_Member, _cairn_v1_Member__Output>
      Meta: SubtypeConstructor<typeof grpc.Client, _cairn_v1_MetaClient> & { service: _cairn_v1_MetaDefinition }
      ShardInfo: MessageTypeDefinition<_cairn_v1_ShardInfo, _cairn_v1_ShardInfo__Output>
      WatchClusterRequest: MessageTypeDefinition<_cairn_v1_WatchClusterRequest, _cairn_v1_WatchClusterRequest__Output>
    }
  }
}

