import type * as grpc from '@grpc/grpc-js';
import type { EnumTypeDefinition, MessageTypeDefinition } from '@grpc/proto-loader';

import type { DeleteRequest as _cairn_v1_DeleteRequest, DeleteRequest__Output as _cairn_v1_DeleteRequest__Output } from './cairn/v1/DeleteRequest.ts';
import type { DeleteResponse as _cairn_v1_DeleteResponse, DeleteResponse__Output as _cairn_v1_DeleteResponse__Output } from './cairn/v1/DeleteResponse.ts';
import type { GetRequest as _cairn_v1_GetRequest, GetRequest__Output as _cairn_v1_GetRequest__Output } from './cairn/v1/GetRequest.ts';
import type { GetResponse as _cairn_v1_GetResponse, GetResponse__Output as _cairn_v1_GetResponse__Output } from './cairn/v1/GetResponse.ts';
import type { KVClient as _cairn_v1_KVClient, KVDefinition as _cairn_v1_KVDefinition } from './cairn/v1/KV.ts';
import type { KeyValue as _cairn_v1_KeyValue, KeyValue__Output as _cairn_v1_KeyValue__Output } from './cairn/v1/KeyValue.ts';
import type { PutRequest as _cairn_v1_PutRequest, PutRequest__Output as _cairn_v1_PutRequest__Output } from './cairn/v1/PutRequest.ts';
import type { PutResponse as _cairn_v1_PutResponse, PutResponse__Output as _cairn_v1_PutResponse__Output } from './cairn/v1/PutResponse.ts';
import type { ScanRequest as _cairn_v1_ScanRequest, ScanRequest__Output as _cairn_v1_ScanRequest__Output } from './cairn/v1/ScanRequest.ts';
import type { ScanResponse as _cairn_v1_ScanResponse, ScanResponse__Output as _cairn_v1_ScanResponse__Output } from './cairn/v1/ScanResponse.ts';
import type { Version as _cairn_v1_Version, Version__Output as _cairn_v1_Version__Output } from './cairn/v1/Version.ts';

type SubtypeConstructor<Constructor extends new (...args: any) => any, Subtype> = {
  new(...args: ConstructorParameters<Constructor>): Subtype;
};

export interface ProtoGrpcType {
  cairn: {
    v1: {
      Consistency: EnumTypeDefinition
      DeleteRequest: MessageTypeDefinition<_cairn_v1_DeleteRequest, _cairn_v1_DeleteRequest__Output>
      DeleteResponse: MessageTypeDefinition<_cairn_v1_DeleteResponse, _cairn_v1_DeleteResponse__Output>
      GetRequest: MessageTypeDefinition<_cairn_v1_GetRequest, _cairn_v1_GetRequest__Output>
      GetResponse: MessageTypeDefinition<_cairn_v1_GetResponse, _cairn_v1_GetResponse__Output>
      KV: SubtypeConstructor<typeof grpc.Client, _cairn_v1_KVClient> & { service: _cairn_v1_KVDefinition }
      KeyValue: MessageTypeDefinition<_cairn_v1_KeyValue, _cairn_v1_KeyValue__Output>
      PutRequest: MessageTypeDefinition<_cairn_v1_PutRequest, _cairn_v1_PutRequest__Output>
      PutResponse: MessageTypeDefinition<_cairn_v1_PutResponse, _cairn_v1_PutResponse__Output>
      ScanRequest: MessageTypeDefinition<_cairn_v1_ScanRequest, _cairn_v1_ScanRequest__Output>
      ScanResponse: MessageTypeDefinition<_cairn_v1_ScanResponse, _cairn_v1_ScanResponse__Output>
      Version: MessageTypeDefinition<_cairn_v1_Version, _cairn_v1_Version__Output>
    }
  }
}

