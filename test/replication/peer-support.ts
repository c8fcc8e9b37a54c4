/**
 * Helpers for the peer transport tests: a gRPC server with cairn.v1.Raft on 127.0.0.1 port 0
 * (grpc-js's, or the node's own front end in this thread as `cairn serve` runs it), node n1's
 * transport to it, a raw unary call, the messages the tests send, a recording logger, a bounded
 * wait on a condition, a port nothing listens on, and node n1's PeerLinks for the tests of the
 * transport's parts.
 */
import assert from "node:assert/strict";
import { createServer } from "node:net";
import {
  Client,
  credentials,
  Metadata,
  Server,
  ServerCredentials,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import { IoThreads, MethodTable } from "../../src/api/io-threads.ts";
import { loadRaftProto } from "../../src/api/proto.ts";
import { PEER_KEY } from "../../src/api/wire.ts";
import { logIndex, type Message, nodeId, type NodeId, term } from "../../src/raft/index.ts";
import { encodeSnapshotFrames } from "../../src/storage/index.ts";
import { PeerLinks, type PeerLinksOptions } from "../../src/replication/peer-links.ts";
import type { RaftHandlers } from "../../src/api/generated/cairn/v1/Raft.ts";
import {
  createRaftService,
  GrpcTransport,
  type GrpcTransportOptions,
  type PeerLogger,
  RAFT_SERVER_OPTIONS,
  type RaftService,
  type RaftServiceOptions,
  type ShardMessage,
} from "../../src/replication/index.ts";

export const N1 = nodeId("n1");
export const N2 = nodeId("n2");

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
    internalKey: "test",
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

/** Node n2's server in cluster c1, started by `start`, keeping each frame it receives in `got`. */
export async function collectingServer(
  start: typeof startRaftServer = startRaftServer,
): Promise<RaftServer & { readonly got: ShardMessage[][] }> {
  const got: ShardMessage[][] = [];
  const server = await start((_from, messages) => got.push(messages), {
    clusterId: "c1",
    nodeId: "n2",
  });
  return { ...server, got };
}

/**
 * Node n2's server in cluster c1, started by `start` with `options` added, answering ReadIndex
 * and ConfirmTerms and counting the calls it served in `served`.
 */
export async function countingServer(
  start: typeof startRaftServer = startRaftServer,
  options: Partial<RaftServiceOptions> = {},
): Promise<RaftServer & { readonly served: number }> {
  let served = 0;
  const server = await start(() => undefined, {
    clusterId: "c1",
    nodeId: "n2",
    readIndex: () => {
      served++;
      return Promise.resolve(1);
    },
    confirmTerms: (checks) => {
      served++;
      return checks.map(() => true);
    },
    ...options,
  });
  return {
    ...server,
    get served() {
      return served;
    },
  };
}

/** Node n1's transport in cluster c1 whose peers all live at `address`; `options` go over that. */
export function transportTo(
  address: string,
  options: Partial<GrpcTransportOptions> = {},
): GrpcTransport {
  return new GrpcTransport({ clusterId: "c1", nodeId: "n1", peers: () => address, ...options });
}

/**
 * A unary call of `name` with a raw grpc-js client, as node `peer` would make it (no cairn-peer
 * metadata when `peer` is null); resolves with the call's error, null when it succeeded.
 */
export function rawUnary(
  address: string,
  name: "ReadIndex" | "ConfirmTerms" | "ScanShards",
  request: object,
  peer: string | null = "n1",
): Promise<ServiceError | null> {
  const method: {
    path: string;
    requestSerialize: (r: object) => Buffer;
    responseDeserialize: (b: Buffer) => unknown;
  } = loadRaftProto().cairn.v1.Raft.service[name];
  const client = new Client(address, credentials.createInsecure());
  const metadata = new Metadata();
  if (peer !== null) metadata.set(PEER_KEY, peer);
  return new Promise<ServiceError | null>((resolve) => {
    client.makeUnaryRequest(
      method.path,
      method.requestSerialize,
      method.responseDeserialize,
      request,
      metadata,
      (err: ServiceError | null) => {
        client.close();
        resolve(err);
      },
    );
  });
}

/** A heartbeat on shard 1 from node `from` to n2, at term 1. */
export function heartbeat(from = "n1"): ShardMessage {
  const message: Message = {
    type: "heartbeat",
    from: nodeId(from),
    to: N2,
    term: term(1),
    commit: logIndex(0),
    readSeq: 1,
    quiesce: false,
    noReply: false,
  };
  return { shard: 1, message };
}

/**
 * An engine's snapshot image at `seq` (docs/storage.md, "Snapshot stream") of exactly `length`
 * bytes (at least 63): one key, whose value's bytes differ from one position to the next (by
 * `seed`), so that a misplaced chunk shows.
 */
export function snapshotImage(length: number, seq: number, seed = 0): Uint8Array {
  // The header frame (28 bytes), the end frame (24), and one entry's frame: 8 bytes, the key's
  // length and key (2), the value's length (a varint of `width` bytes) and the value.
  for (let width = 1; width <= 4; width++) {
    const n = length - 62 - width;
    if (n < 0 || n >= 2 ** (7 * width) || (width > 1 && n < 2 ** (7 * (width - 1)))) continue;
    const value = new Uint8Array(n);
    for (let i = 0; i < n; i++) value[i] = (i * 31 + (i >>> 8) + seed) & 0xff;
    const image = Buffer.concat([...encodeSnapshotFrames(seq, [[new Uint8Array([0x01]), value]])]);
    assert.equal(image.length, length);
    return new Uint8Array(image.buffer, image.byteOffset, image.length);
  }
  throw new RangeError(`no image of ${length} bytes`);
}

/** A snapshot from n1 to `to` at term 2, of the state at `index` (voters n1 and n2), holding `data`. */
export function snapshotMessage(
  index: number,
  data: Uint8Array,
  to: NodeId = N2,
): Extract<Message, { type: "snapshot" }> {
  return {
    type: "snapshot",
    from: N1,
    to,
    term: term(2),
    snapshot: {
      meta: { index: logIndex(index), term: term(2), conf: { voters: [N1, N2], learners: [] } },
      data,
    },
  };
}

/** A port nothing listens on (bound, then released). */
export async function freePort(): Promise<number> {
  const srv = createServer();
  await new Promise<void>((r) => srv.listen(0, "127.0.0.1", r));
  const address = srv.address();
  assert.ok(address !== null && typeof address === "object");
  await new Promise<void>((r) => srv.close(() => r()));
  return address.port;
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
    self: N1,
    replicaId: N1,
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
