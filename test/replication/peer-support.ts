/**
 * Helpers for the peer transport tests: a gRPC server with cairn.v1.Raft on 127.0.0.1 port 0
 * (grpc-js's, or the node's own front end in this thread as `cairn serve` runs it), a recording
 * logger, a bounded wait on a condition, and node n1's PeerLinks for the tests of the
 * transport's parts.
 */
import assert from "node:assert/strict";
import { Server, ServerCredentials, status } from "@grpc/grpc-js";
import { IoThreads, MethodTable } from "../../src/api/io-threads.ts";
import { nodeId } from "../../src/raft/index.ts";
import { PeerLinks, type PeerLinksOptions } from "../../src/replication/peer-links.ts";
import type { RaftHandlers } from "../../src/api/generated/cairn/v1/Raft.ts";
import {
  createRaftService,
  type PeerLogger,
  RAFT_SERVER_OPTIONS,
  type RaftService,
  type RaftServiceOptions,
  type ShardMessage,
} from "../../src/replication/index.ts";

export interface RaftServer {
  readonly address: string;
  readonly service: RaftService;
  /** Ends the peers' streams and stops the server at once. */
  stop(): void;
}

/** `wrap` may replace or watch the service's handlers. */
export async function startRaftServer(
  handler: (from: string, messages: ShardMessage[]) => void,
  options: RaftServiceOptions,
  address = "127.0.0.1:0",
  wrap: (implementation: RaftHandlers) => RaftHandlers = (implementation) => implementation,
): Promise<RaftServer> {
  const server = new Server(RAFT_SERVER_OPTIONS);
  const service = createRaftService(handler, options);
  server.addService(service.definition, wrap(service.implementation));
  const port = await new Promise<number>((resolve, reject) => {
    server.bindAsync(address, ServerCredentials.createInsecure(), (err, p) =>
      err === null ? resolve(p) : reject(err),
    );
  });
  return {
    address: `127.0.0.1:${port}`,
    service,
    stop(): void {
      service.endAll();
      server.forceShutdown();
    },
  };
}

/**
 * The same service behind the front end a node runs (io-threads.ts, `rpc.io_threads: 0`): it
 * serves Stream itself (the raw handler) and proxies the rest to a grpc-js server on loopback.
 */
export async function startRaftFrontEnd(
  handler: (from: string, messages: ShardMessage[]) => void,
  options: RaftServiceOptions,
  address = "127.0.0.1:0",
  wrap: (implementation: RaftHandlers) => RaftHandlers = (implementation) => implementation,
): Promise<RaftServer> {
  // Stream is served by the front end itself: proxied to grpc-js, it would be refused.
  const inner = await startRaftServer(handler, options, "127.0.0.1:0", (impl) => ({
    ...wrap(impl),
    Stream: (_call, callback) => callback({ code: status.UNIMPLEMENTED, details: "proxied" }),
  }));
  const table = new MethodTable();
  table.add(inner.service.definition, wrap(inner.service.implementation));
  table.addRawStream(inner.service.rawStream.path, inner.service.rawStream.handler);
  const [host, port] = address.split(":");
  const threads = new IoThreads({
    count: 0,
    host: host ?? "127.0.0.1",
    port: Number(port),
    mainAddress: inner.address,
    table,
    serverOptions: RAFT_SERVER_OPTIONS,
    onFailure: (err) => assert.fail(err),
  });
  const listening = await threads.start();
  return {
    address: `127.0.0.1:${listening}`,
    service: inner.service,
    stop(): void {
      inner.service.endAll();
      void threads.close(0);
      inner.stop();
    },
  };
}

/** Where a test's peers connect: grpc-js's server, or the front end. */
export const RAFT_SERVERS = [
  ["grpc-js", startRaftServer],
  ["front end", startRaftFrontEnd],
] as const;

export interface LogLine {
  readonly level: string;
  readonly message: string;
  readonly fields: Readonly<Record<string, unknown>>;
}

export function recordingLogger(lines: LogLine[]): PeerLogger {
  const at =
    (level: string) =>
    (message: string, fields: Readonly<Record<string, unknown>> = {}): void => {
      lines.push({ level, message, fields });
    };
  return { debug: at("debug"), info: at("info"), warn: at("warn"), error: at("error") };
}

/** Polls `check` (bounded) until it holds; the code under test runs on its own events. */
export async function eventually(
  what: string,
  check: () => boolean | Promise<boolean>,
  timeoutMs = 10_000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    if (await check()) return;
    await new Promise((r) => setTimeout(r, 5));
  }
  assert.fail(`not within ${timeoutMs} ms: ${what}`);
}

/**
 * Node n1's links to its peers with the transport's defaults, and `close()`, which aborts their
 * `closing` signal and closes them, as GrpcTransport.close() does.
 */
export function testLinks(options: Partial<PeerLinksOptions> = {}): {
  readonly links: PeerLinks;
  readonly closing: AbortController;
  close(): Promise<void>;
} {
  const closing = new AbortController();
  const links = new PeerLinks({
    self: nodeId("n1"),
    replicaId: nodeId("n1"),
    clusterId: "c1",
    resolve: () => null,
    log: recordingLogger([]),
    onUnreachable: undefined,
    maxInFlightBytesPerPeer: 16 << 20,
    maxInFlightBytes: 64 << 20,
    maxFrameBytes: 128 << 20,
    initialBackoffMs: 50,
    maxBackoffMs: 1000,
    random: Math.random,
    now: () => performance.now(),
    interceptors: [],
    shardWorker: undefined,
    ...options,
    closing: closing.signal,
  });
  return {
    links,
    closing,
    async close() {
      closing.abort();
      await links.close();
    },
  };
}
