/**
 * A gRPC I/O thread (a worker thread; io-threads.ts starts them). It serves every method of the
 * node's gRPC server on the node's `rpc_addr`, which all I/O threads listen on together with
 * SO_REUSEPORT (the kernel spreads the connections), and does the HTTP/2 and gRPC framing of its
 * connections, the larger part of a call's CPU. It does no KV work itself:
 *
 * - **Unary calls** (KV Put/Get/Delete/Scan, Admin, the peers' unary calls, health checks) go to
 *   the main thread as bytes, batched per event-loop turn (handoff.ts); the main thread decodes
 *   them, runs the very handlers its own server registers, and sends back the encoded answer or
 *   the status with its trailers, which are relayed as they are.
 * - **Streaming calls** (Meta.WatchCluster, the peers' Raft streams and snapshots, health watch,
 *   reflection) are proxied, message by message with flow control, to the main thread's own gRPC
 *   server on a loopback port: rare or long-lived, they need no batching.
 *
 * Messages to the main thread: "listening" (with the port) or "listen-error", then "closed" after
 * a shutdown. Messages from it: reply batches, and "shutdown" with the drain deadline.
 */
import { createServer, type Server as NetServer, type Socket } from "node:net";
import { parentPort, workerData } from "node:worker_threads";
import type { Metadata } from "@grpc/grpc-js";
import {
  type Client,
  credentials,
  type Deadline,
  makeGenericClientConstructor,
  type sendUnaryData,
  Server,
  ServerCredentials,
  type ServerDuplexStream,
  type ServerReadableStream,
  type ServerUnaryCall,
  type ServerWritableStream,
  status,
  type StatusObject,
} from "@grpc/grpc-js";
import {
  BatchBuilder,
  type CallBatch,
  type IoThreadSetup,
  type MetadataPairs,
  metadataPairs,
  REPLY_FIELDS,
  type ReplyBatch,
  toMetadata,
} from "./handoff.ts";

const port = parentPort;
if (port === null) throw new Error("io-thread.ts runs only as a worker thread");
const setup = workerData as IoThreadSetup;

const identity = (b: Buffer): Buffer => b;

// ── unary calls: handed to the main thread ───────────────────────────────────────────────────

let nextId = 1;
const waiting = new Map<number, sendUnaryData<Buffer>>();
let meta: (MetadataPairs | null)[] = [];
let peers: string[] = [];
let cancels: number[] = [];
const calls = new BatchBuilder(() => {
  const { head, body } = calls.take();
  const batch: CallBatch = { kind: "calls", head, body, meta, peers, cancels };
  meta = [];
  peers = [];
  cancels = [];
  port.postMessage(batch, [head.buffer, body.buffer]);
});

function deadlineMs(d: Deadline): number {
  return d instanceof Date ? d.getTime() : d;
}

function unary(method: number) {
  return (call: ServerUnaryCall<Buffer, Buffer>, callback: sendUnaryData<Buffer>): void => {
    const id = nextId++;
    waiting.set(id, callback);
    meta.push(metadataPairs(call.metadata));
    peers.push(call.getPeer());
    calls.add([id, method, deadlineMs(call.getDeadline())], call.request);
    call.once("cancelled", () => {
      if (!waiting.delete(id)) return;
      cancels.push(id);
      calls.schedule();
    });
  };
}

function onReplies(batch: ReplyBatch): void {
  const { head, body } = batch;
  let at = 0;
  for (let i = 0, r = 0; i < head.length; i += REPLY_FIELDS, r++) {
    const id = head[i] as number;
    const code = head[i + 1] as number;
    const length = head[i + 2] as number;
    const bytes = Buffer.from(body.buffer, body.byteOffset + at, length);
    at += length;
    const callback = waiting.get(id);
    if (callback === undefined) continue;
    waiting.delete(id);
    const trailer = toMetadata(batch.trailers[r] ?? null);
    if (code === status.OK) callback(null, bytes, trailer);
    else callback({ code, details: batch.details[r] ?? "", metadata: trailer }, null);
  }
}

// ── streaming calls: proxied to the main thread's own server ────────────────────────────────

const Upstream = makeGenericClientConstructor({}, "CairnIoThreadProxy");
const upstream: Client = new Upstream(setup.mainAddress, credentials.createInsecure(), {
  "grpc.max_receive_message_length": -1,
  "grpc.max_send_message_length": -1,
  // A loopback hop inside the node: never through the operator's grpc_proxy / http_proxy.
  "grpc.enable_http_proxy": 0,
});

function forwardMetadata(md: Metadata): Metadata {
  return toMetadata(metadataPairs(md));
}

function endWithStatus(
  call: ServerWritableStream<Buffer, Buffer> | ServerDuplexStream<Buffer, Buffer>,
  s: StatusObject,
): void {
  if (s.code === status.OK) call.end(s.metadata);
  else call.emit("error", { code: s.code, details: s.details, metadata: s.metadata });
}

/** The main thread's messages to the client, at the client's pace. */
function relayDown(
  up: NodeJS.EventEmitter & { pause(): void; resume(): void },
  call: ServerWritableStream<Buffer, Buffer> | ServerDuplexStream<Buffer, Buffer>,
): void {
  up.on("metadata", (md: Metadata) => call.sendMetadata(md));
  up.on("data", (b: Buffer) => {
    if (!call.write(b)) up.pause();
  });
  call.on("drain", () => up.resume());
}

/** The client's messages to the main thread, at the main thread's pace. */
function relayUp(
  call: ServerReadableStream<Buffer, Buffer> | ServerDuplexStream<Buffer, Buffer>,
  up: NodeJS.EventEmitter & { write(b: Buffer): boolean; end(): void },
): void {
  up.on("drain", () => call.resume());
  call.on("data", (b: Buffer) => {
    if (!up.write(b)) call.pause();
  });
  call.on("end", () => up.end());
}

function serverStream(path: string) {
  return (call: ServerWritableStream<Buffer, Buffer>): void => {
    const options = { deadline: call.getDeadline() };
    const md = forwardMetadata(call.metadata);
    const up = upstream.makeServerStreamRequest(
      path,
      identity,
      identity,
      call.request,
      md,
      options,
    );
    relayDown(up, call);
    up.on("error", () => undefined); // the status follows
    up.on("status", (s: StatusObject) => endWithStatus(call, s));
    call.on("cancelled", () => up.cancel());
  };
}

function clientStream(path: string) {
  return (call: ServerReadableStream<Buffer, Buffer>, callback: sendUnaryData<Buffer>): void => {
    let response: Buffer | undefined;
    const options = { deadline: call.getDeadline() };
    const md = forwardMetadata(call.metadata);
    const up = upstream.makeClientStreamRequest(path, identity, identity, md, options, (_e, v) => {
      response = v;
    });
    up.on("metadata", (m: Metadata) => call.sendMetadata(m));
    relayUp(call, up);
    up.on("status", (s: StatusObject) => {
      if (s.code === status.OK && response !== undefined) callback(null, response, s.metadata);
      else callback({ code: s.code, details: s.details, metadata: s.metadata }, null);
    });
    call.on("cancelled", () => up.cancel());
    call.on("error", () => up.cancel());
  };
}

function bidiStream(path: string) {
  return (call: ServerDuplexStream<Buffer, Buffer>): void => {
    const options = { deadline: call.getDeadline() };
    const md = forwardMetadata(call.metadata);
    const up = upstream.makeBidiStreamRequest(path, identity, identity, md, options);
    relayDown(up, call);
    relayUp(call, up);
    up.on("error", () => undefined); // the status follows
    up.on("status", (s: StatusObject) => endWithStatus(call, s));
    call.on("cancelled", () => up.cancel());
  };
}

// ── the server ─────────────────────────────────────────────────────────────────────────────

const server = new Server(setup.serverOptions);
setup.methods.forEach((m, index) => {
  const [handler, type] =
    !m.requestStream && !m.responseStream
      ? [unary(index), "unary"]
      : m.requestStream && m.responseStream
        ? [bidiStream(m.path), "bidi"]
        : m.requestStream
          ? [clientStream(m.path), "clientStream"]
          : [serverStream(m.path), "serverStream"];
  server.register(m.path, handler as never, identity, identity, type);
});
const injector = server.createConnectionInjector(ServerCredentials.createInsecure());
const sockets = new Set<Socket>();
const listener: NetServer = createServer({ noDelay: true }, (socket) => {
  sockets.add(socket);
  socket.once("close", () => sockets.delete(socket));
  injector.injectConnection(socket);
});
listener.once("error", (err: NodeJS.ErrnoException) => {
  port.postMessage({ kind: "listen-error", code: err.code ?? null, message: err.message });
});
listener.listen({ host: setup.host, port: setup.port, reusePort: true }, () => {
  listener.removeAllListeners("error");
  const address = listener.address();
  port.postMessage({
    kind: "listening",
    port: typeof address === "object" && address !== null ? address.port : setup.port,
  });
});

function shutdown(deadlineMs: number): void {
  listener.close();
  const done = (): void => {
    clearTimeout(timer);
    for (const s of sockets) s.destroy();
    upstream.close();
    port?.postMessage({ kind: "closed" });
  };
  const timer = setTimeout(() => {
    server.forceShutdown();
    done();
  }, deadlineMs);
  server.tryShutdown(done);
}

port.on("message", (msg: ReplyBatch | { kind: "shutdown"; deadlineMs: number }) => {
  if (msg.kind === "replies") onReplies(msg);
  else shutdown(msg.deadlineMs);
});
