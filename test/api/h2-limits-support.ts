/**
 * The front end the limit tests (h2-limits.test.ts, h2-peer-limits.test.ts) attack: io-threads.ts,
 * in this thread or in an I/O thread, serving a small test service or a node's peers' service.
 * The tests speak to it with test/support/h2-raw.ts.
 */
import { Server, ServerCredentials, type ServiceDefinition } from "@grpc/grpc-js";
import type { SharedConnectionSlots } from "../../src/api/connection-slots.ts";
import { ERROR_CODE_KEY } from "../../src/api/wire.ts";
import { headerValue, type RawH2Client } from "../support/h2-raw.ts";
import {
  type FrontEndEvent,
  type FrontEndLimits,
  IoThreads,
  MethodTable,
} from "../../src/api/io-threads.ts";
import {
  createRaftService,
  MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES,
  type PeerCall,
  RAFT_SERVER_OPTIONS,
  type ShardMessage,
} from "../../src/replication/index.ts";

export const UNARY = "/test.Limits/Unary";
export const PEER_UNARY = "/cairn.v1.Raft/ProposeMeta";
/** A server-streaming method: the front end proxies it to the main thread's server. */
export const STREAMING = "/test.Limits/Watch";

const bytes = (b: Buffer): Buffer => b;

function unaryDef(path: string, responseStream = false): ServiceDefinition[string] {
  return {
    path,
    requestStream: false,
    responseStream,
    requestSerialize: bytes,
    requestDeserialize: bytes,
    responseSerialize: bytes,
    responseDeserialize: bytes,
  } as unknown as ServiceDefinition[string];
}

/** What the test service saw: each call's request and metadata. */
export interface Seen {
  calls: { path: string; request: Buffer; metadata: Record<string, unknown> }[];
}

export interface TestFrontEnd {
  readonly port: number;
  readonly seen: Seen;
  readonly events: FrontEndEvent[];
  /** Resolve a held call (see `hold`): the answer is the request echoed. */
  readonly held: (() => void)[];
  /** Resolves once at least `count` calls wait in `held` (the test's timeout bounds the wait). */
  whenHeld(count: number): Promise<void>;
  close(): Promise<void>;
}

export interface FrontEndOptions {
  readonly ioThreads?: number;
  readonly serverOptions?: Record<string, number>;
  /** Calls are answered only when the test releases them (`held`). */
  readonly hold?: boolean;
  readonly limits?: Partial<FrontEndLimits>;
  /** The node's connection bounds (connection-slots.ts); absent, none. */
  readonly connections?: SharedConnectionSlots;
}

/** A front end on 127.0.0.1:0 serving UNARY (echo) and PEER_UNARY (echo). */
export async function startFrontEnd(options: FrontEndOptions = {}): Promise<TestFrontEnd> {
  const seen: Seen = { calls: [] };
  const held: (() => void)[] = [];
  const events: FrontEndEvent[] = [];
  const heldWaiters: { count: number; resolve: () => void }[] = [];
  const whenHeld = (count: number): Promise<void> => {
    if (held.length >= count) return Promise.resolve();
    return new Promise((resolve) => heldWaiters.push({ count, resolve }));
  };
  const table = new MethodTable();
  const handler = (
    call: { request: Buffer; metadata: { getMap(): Record<string, unknown> }; getPath(): string },
    callback: (err: unknown, value?: unknown) => void,
  ): void => {
    seen.calls.push({
      path: call.getPath(),
      request: call.request,
      metadata: call.metadata.getMap(),
    });
    if (options.hold === true) {
      held.push(() => callback(null, call.request));
      for (const w of heldWaiters.splice(0)) {
        if (held.length >= w.count) w.resolve();
        else heldWaiters.push(w);
      }
    } else {
      callback(null, call.request);
    }
  };
  table.add({ Unary: unaryDef(UNARY) }, { Unary: handler as never });
  table.add({ ProposeMeta: unaryDef(PEER_UNARY) }, { ProposeMeta: handler as never });
  table.add({ Watch: unaryDef(STREAMING, true) }, { Watch: (() => undefined) as never });
  const threads = new IoThreads({
    count: options.ioThreads ?? 0,
    host: "127.0.0.1",
    port: 0,
    mainAddress: "127.0.0.1:1",
    internalKey: "test",
    table,
    serverOptions: options.serverOptions ?? {},
    onFailure: (err) => {
      throw err;
    },
    onEvent: (event) => events.push(event),
    ...(options.limits === undefined ? {} : { limits: options.limits }),
    ...(options.connections === undefined ? {} : { connections: options.connections }),
  });
  const port = await threads.start();
  return { port, seen, events, held, whenHeld, close: () => threads.close(1000) };
}

/** Node n2's peers' service behind a front end (startPeerFrontEnd), and what reached it. */
export interface PeerFrontEnd {
  readonly port: number;
  /** The KV calls its Stream receiver took (RaftFrame.call), in order. */
  readonly calls: PeerCall[];
  /** The snapshots InstallSnapshot handed to Raft, whole and verified. */
  readonly snapshots: ShardMessage[];
  readonly events: FrontEndEvent[];
  close(): Promise<void>;
}

/**
 * Node n2 of cluster c1's cairn.v1.Raft on 127.0.0.1:0 as a node serves it: its front end (in
 * this thread, Stream served by its raw handler; or in an I/O thread) and, on loopback, the main
 * thread's grpc-js server, which serves what the front end proxies (InstallSnapshot; Stream from
 * an I/O thread). Every node is a member; the receive limits are a node's (4 MiB for clients,
 * 128 MiB for the peers, a data chunk's for a snapshot's messages after its header).
 */
export async function startPeerFrontEnd(options: FrontEndOptions = {}): Promise<PeerFrontEnd> {
  const calls: PeerCall[] = [];
  const snapshots: ShardMessage[] = [];
  const events: FrontEndEvent[] = [];
  const service = createRaftService((_from, messages) => snapshots.push(...messages), {
    clusterId: "c1",
    nodeId: "n2",
    calls: { serve: (_from, call) => calls.push(call), replied: () => undefined },
  });
  const server = new Server(RAFT_SERVER_OPTIONS);
  server.addService(service.definition, service.implementation);
  const upstream = await new Promise<number>((resolve, reject) => {
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) =>
      err === null ? resolve(p) : reject(err),
    );
  });
  const table = new MethodTable();
  table.add(service.definition, service.implementation);
  table.addRawStream(service.rawStream.path, service.rawStream.handler);
  const threads = new IoThreads({
    count: options.ioThreads ?? 0,
    host: "127.0.0.1",
    port: 0,
    mainAddress: `127.0.0.1:${upstream}`,
    internalKey: "test",
    table,
    serverOptions: {
      "grpc.max_receive_message_length": 4 << 20,
      "grpc.max_send_message_length": 4 << 20,
    },
    limits: {
      peerMaxReceive: RAFT_SERVER_OPTIONS["grpc.max_receive_message_length"],
      peerSnapshotMaxReceive: MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES,
      ...options.limits,
    },
    onFailure: (err) => {
      throw err;
    },
    onEvent: (event) => events.push(event),
    ...(options.connections === undefined ? {} : { connections: options.connections }),
  });
  const port = await threads.start();
  return {
    port,
    calls,
    snapshots,
    events,
    close: async () => {
      service.endAll();
      await threads.close(1000);
      server.forceShutdown();
    },
  };
}

/** The status stream `id` ended with so far: code, message, cairn-error-code; null for none. */
export function statusOf(
  client: RawH2Client,
  id: number,
): { code: number; message: string; error: string | undefined } | null {
  const block = client.streams
    .get(id)
    ?.blocks.find((b) => headerValue(b, "grpc-status") !== undefined);
  if (block === undefined) return null;
  return {
    code: Number(headerValue(block, "grpc-status")),
    message: decodeURIComponent(headerValue(block, "grpc-message") ?? ""),
    error: headerValue(block, ERROR_CODE_KEY),
  };
}
