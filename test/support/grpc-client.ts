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
} from "@grpc/grpc-js";
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
