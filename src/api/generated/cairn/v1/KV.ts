// Original file: proto/cairn/v1/kv.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { DeleteRequest as _cairn_v1_DeleteRequest, DeleteRequest__Output as _cairn_v1_DeleteRequest__Output } from '../../cairn/v1/DeleteRequest.ts';
import type { DeleteResponse as _cairn_v1_DeleteResponse, DeleteResponse__Output as _cairn_v1_DeleteResponse__Output } from '../../cairn/v1/DeleteResponse.ts';
import type { GetRequest as _cairn_v1_GetRequest, GetRequest__Output as _cairn_v1_GetRequest__Output } from '../../cairn/v1/GetRequest.ts';
import type { GetResponse as _cairn_v1_GetResponse, GetResponse__Output as _cairn_v1_GetResponse__Output } from '../../cairn/v1/GetResponse.ts';
import type { PutRequest as _cairn_v1_PutRequest, PutRequest__Output as _cairn_v1_PutRequest__Output } from '../../cairn/v1/PutRequest.ts';
import type { PutResponse as _cairn_v1_PutResponse, PutResponse__Output as _cairn_v1_PutResponse__Output } from '../../cairn/v1/PutResponse.ts';
import type { ScanRequest as _cairn_v1_ScanRequest, ScanRequest__Output as _cairn_v1_ScanRequest__Output } from '../../cairn/v1/ScanRequest.ts';
import type { ScanResponse as _cairn_v1_ScanResponse, ScanResponse__Output as _cairn_v1_ScanResponse__Output } from '../../cairn/v1/ScanResponse.ts';

export interface KVClient extends grpc.Client {
  Delete(argument: _cairn_v1_DeleteRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  Delete(argument: _cairn_v1_DeleteRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  Delete(argument: _cairn_v1_DeleteRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  Delete(argument: _cairn_v1_DeleteRequest, callback: grpc.requestCallback<_cairn_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  delete(argument: _cairn_v1_DeleteRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  delete(argument: _cairn_v1_DeleteRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  delete(argument: _cairn_v1_DeleteRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  delete(argument: _cairn_v1_DeleteRequest, callback: grpc.requestCallback<_cairn_v1_DeleteResponse__Output>): grpc.ClientUnaryCall;
  
  Get(argument: _cairn_v1_GetRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_GetResponse__Output>): grpc.ClientUnaryCall;
  Get(argument: _cairn_v1_GetRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_GetResponse__Output>): grpc.ClientUnaryCall;
  Get(argument: _cairn_v1_GetRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_GetResponse__Output>): grpc.ClientUnaryCall;
  Get(argument: _cairn_v1_GetRequest, callback: grpc.requestCallback<_cairn_v1_GetResponse__Output>): grpc.ClientUnaryCall;
  get(argument: _cairn_v1_GetRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_GetResponse__Output>): grpc.ClientUnaryCall;
  get(argument: _cairn_v1_GetRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_GetResponse__Output>): grpc.ClientUnaryCall;
  get(argument: _cairn_v1_GetRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_GetResponse__Output>): grpc.ClientUnaryCall;
  get(argument: _cairn_v1_GetRequest, callback: grpc.requestCallback<_cairn_v1_GetResponse__Output>): grpc.ClientUnaryCall;
  
  Put(argument: _cairn_v1_PutRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_PutResponse__Output>): grpc.ClientUnaryCall;
  Put(argument: _cairn_v1_PutRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_PutResponse__Output>): grpc.ClientUnaryCall;
  Put(argument: _cairn_v1_PutRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_PutResponse__Output>): grpc.ClientUnaryCall;
  Put(argument: _cairn_v1_PutRequest, callback: grpc.requestCallback<_cairn_v1_PutResponse__Output>): grpc.ClientUnaryCall;
  put(argument: _cairn_v1_PutRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_PutResponse__Output>): grpc.ClientUnaryCall;
  put(argument: _cairn_v1_PutRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_PutResponse__Output>): grpc.ClientUnaryCall;
  put(argument: _cairn_v1_PutRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_PutResponse__Output>): grpc.ClientUnaryCall;
  put(argument: _cairn_v1_PutRequest, callback: grpc.requestCallback<_cairn_v1_PutResponse__Output>): grpc.ClientUnaryCall;
  
  Scan(argument: _cairn_v1_ScanRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ScanResponse__Output>): grpc.ClientUnaryCall;
  Scan(argument: _cairn_v1_ScanRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_ScanResponse__Output>): grpc.ClientUnaryCall;
  Scan(argument: _cairn_v1_ScanRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ScanResponse__Output>): grpc.ClientUnaryCall;
  Scan(argument: _cairn_v1_ScanRequest, callback: grpc.requestCallback<_cairn_v1_ScanResponse__Output>): grpc.ClientUnaryCall;
  scan(argument: _cairn_v1_ScanRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ScanResponse__Output>): grpc.ClientUnaryCall;
  scan(argument: _cairn_v1_ScanRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_cairn_v1_ScanResponse__Output>): grpc.ClientUnaryCall;
  scan(argument: _cairn_v1_ScanRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_cairn_v1_ScanResponse__Output>): grpc.ClientUnaryCall;
  scan(argument: _cairn_v1_ScanRequest, callback: grpc.requestCallback<_cairn_v1_ScanResponse__Output>): grpc.ClientUnaryCall;
  
}

export interface KVHandlers extends grpc.UntypedServiceImplementation {
  Delete: grpc.handleUnaryCall<_cairn_v1_DeleteRequest__Output, _cairn_v1_DeleteResponse>;
  
  Get: grpc.handleUnaryCall<_cairn_v1_GetRequest__Output, _cairn_v1_GetResponse>;
  
  Put: grpc.handleUnaryCall<_cairn_v1_PutRequest__Output, _cairn_v1_PutResponse>;
  
  Scan: grpc.handleUnaryCall<_cairn_v1_ScanRequest__Output, _cairn_v1_ScanResponse>;
  
}

export interface KVDefinition extends grpc.ServiceDefinition {
  Delete: MethodDefinition<_cairn_v1_DeleteRequest, _cairn_v1_DeleteResponse, _cairn_v1_DeleteRequest__Output, _cairn_v1_DeleteResponse__Output>
  Get: MethodDefinition<_cairn_v1_GetRequest, _cairn_v1_GetResponse, _cairn_v1_GetRequest__Output, _cairn_v1_GetResponse__Output>
  Put: MethodDefinition<_cairn_v1_PutRequest, _cairn_v1_PutResponse, _cairn_v1_PutRequest__Output, _cairn_v1_PutResponse__Output>
  Scan: MethodDefinition<_cairn_v1_ScanRequest, _cairn_v1_ScanResponse, _cairn_v1_ScanRequest__Output, _cairn_v1_ScanResponse__Output>
}
