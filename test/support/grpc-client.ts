/**
 * A plain @grpc/grpc-js client built from proto/ with @grpc/proto-loader, independent of the
 * server's code, for end-to-end tests.
 */
import {
  type ChannelCredentials,
  type ChannelOptions,
  credentials,
  type Client,
  loadPackageDefinition,
  type Metadata,
  type MethodDefinition,
  type ServiceError,
  type StatusObject,
} from "@grpc/grpc-js";
import type { EventEmitter } from "node:events";
import { loadSync } from "@grpc/proto-loader";
import { join } from "node:path";
import { ROOT } from "./server-process.ts";

const definition = loadSync(["cairn/v1/kv.proto", "cairn/v1/meta.proto", "cairn/v1/admin.proto"], {
  keepCase: true,
  longs: Number,
  enums: String,
  defaults: true,
  includeDirs: [join(ROOT, "proto")],
});
const pkg = loadPackageDefinition(definition) as any; // eslint-disable-line @typescript-eslint/no-explicit-any

export type Reply = Record<string, unknown>;

export interface Clients {
  readonly kv: Client;
  readonly meta: Client;
  readonly admin: Client;
  call(client: Client, method: string, request: Reply, deadlineMs?: number): Promise<Reply>;
  /** `call`, with the trailing metadata of the answer (e.g. `cairn-served-by`). */
  callWithTrailer(
    client: Client,
    method: string,
    request: Reply,
    deadlineMs?: number,
  ): Promise<{ reply: Reply; trailer: Metadata }>;
  close(): void;
}

/**
 * Clients of the three services; `options` are grpc-js channel options (e.g. compression),
 * `creds` the channel's credentials (cleartext by default; credentials.createSsl for TLS).
 */
export function connect(
  address: string,
  options: ChannelOptions = {},
  creds: ChannelCredentials = credentials.createInsecure(),
): Clients {
  const v1 = pkg.cairn.v1;
  const kv = new v1.KV(address, creds, options) as Client;
  const meta = new v1.Meta(address, creds, options) as Client;
  const admin = new v1.Admin(address, creds, options) as Client;
  return {
    kv,
    meta,
    admin,
    call(client, method, request, deadlineMs = 10_000) {
      return new Promise((resolve, reject) => {
        const fn = (client as unknown as Record<string, (...a: unknown[]) => void>)[method];
        if (fn === undefined) throw new Error(`no method ${method}`);
        fn.call(
          client,
          request,
          { deadline: Date.now() + deadlineMs },
          (err: ServiceError | null, res: Reply) => (err === null ? resolve(res) : reject(err)),
        );
      });
    },
    callWithTrailer(client, method, request, deadlineMs = 10_000) {
      return new Promise((resolve, reject) => {
        const fn = (client as unknown as Record<string, (...a: unknown[]) => EventEmitter>)[method];
        if (fn === undefined) throw new Error(`no method ${method}`);
        let reply: Reply | undefined;
        const call = fn.call(
          client,
          request,
          { deadline: Date.now() + deadlineMs },
          (err: ServiceError | null, res: Reply) => {
            if (err === null) reply = res;
            else reject(err);
          },
        );
        // grpc-js calls back, then emits the status (with the trailers) at once.
        call.on("status", (s: StatusObject) => {
          if (reply !== undefined) resolve({ reply, trailer: s.metadata });
        });
      });
    },
    close() {
      kv.close();
      meta.close();
      admin.close();
    },
  };
}

export function grpcError(err: unknown): { code: number; details: string; metadata: Metadata } {
  const e = err as ServiceError;
  return { code: e.code, details: e.details, metadata: e.metadata };
}

/**
 * A method of a test service whose messages are bytes passed through as they are (no protobuf):
 * `/<service>/<name>`, unary or client-streaming.
 */
export function bytesMethod(
  service: string,
  name: string,
  requestStream: boolean,
): MethodDefinition<Buffer, Buffer> {
  const id = (b: Buffer): Buffer => b;
  return {
    path: `/${service}/${name}`,
    requestStream,
    responseStream: false,
    requestSerialize: id,
    requestDeserialize: id,
    responseSerialize: id,
    responseDeserialize: id,
  };
}
