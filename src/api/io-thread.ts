/**
 * A gRPC I/O thread (a worker thread; io-threads.ts starts them). It serves every method of the
 * node's gRPC server on the node's `rpc_addr`, which all I/O threads listen on together with
 * SO_REUSEPORT (the kernel spreads the connections), and does the HTTP/2 and gRPC framing of its
 * connections, the larger part of a call's CPU. It speaks gRPC on node:http2 itself
 * (grpc-wire.ts): a call costs ~28 µs of CPU here against ~42 µs through grpc-js's server
 * (BENCHMARKS.md). It does no KV work itself:
 *
 * - **Unary calls** (KV Put/Get/Delete/Scan, Admin, the peers' unary calls, health checks) go to
 *   the main thread as bytes, batched per event-loop turn (handoff.ts); the main thread decodes
 *   them, runs the very handlers its own server registers, and sends back the encoded answer or
 *   the status with its trailers, which are relayed as they are.
 * - **Streaming calls** (Meta.WatchCluster, the peers' Raft streams and snapshots, health watch,
 *   reflection) are proxied as HTTP/2 streams, bytes and trailers as they are, with flow control, to
 *   the main thread's own gRPC server on a loopback port: rare or long-lived, they need no
 *   batching.
 *
 * Messages to the main thread: "listening" (with the port) or "listen-error", then "closed" after
 * a shutdown. Messages from it: reply batches, and "shutdown" with the drain deadline.
 */
import http2, {
  type IncomingHttpHeaders,
  type ClientHttp2Session,
  type ClientHttp2Stream,
  type Http2Session,
  type OutgoingHttpHeaders,
  type ServerHttp2Stream,
} from "node:http2";
import { createServer, type Server as NetServer } from "node:net";
import { parentPort, workerData } from "node:worker_threads";
import { status } from "@grpc/grpc-js";
import {
  deadlineOf,
  frame,
  headerPairs,
  RESPONSE_HEADERS,
  statusHeaders,
  unaryMessage,
  WireError,
} from "./grpc-wire.ts";
import {
  BatchBuilder,
  type CallBatch,
  type IoThreadSetup,
  type MetadataPairs,
  REPLY_FIELDS,
  type ReplyBatch,
} from "./handoff.ts";

const port = parentPort;
if (port === null) throw new Error("io-thread.ts runs only as a worker thread");
const setup = workerData as IoThreadSetup;

const { NGHTTP2_CANCEL, NGHTTP2_INTERNAL_ERROR, NGHTTP2_NO_ERROR, NGHTTP2_FLAG_END_STREAM } =
  http2.constants;
const DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024;
const maxReceive = setup.serverOptions["grpc.max_receive_message_length"] ?? DEFAULT_MAX_MESSAGE;
const maxSend = setup.serverOptions["grpc.max_send_message_length"] ?? DEFAULT_MAX_MESSAGE;
/** Path → the method's index in setup.methods, and whether it is unary. */
const methods = new Map(
  setup.methods.map((m, index) => [
    m.path,
    { index, unary: !m.requestStream && !m.responseStream },
  ]),
);
/** Each connection's client address, for the handlers' logs (getPeer). */
const peerOf = new WeakMap<Http2Session, string>();

/** Ends `stream` with a status and no message (a trailers-only response). */
function respondStatus(
  stream: ServerHttp2Stream,
  code: number,
  details: string,
  pairs: MetadataPairs | null,
): void {
  if (stream.closed || stream.headersSent) return;
  stream.respond(statusHeaders(code, details, pairs, true), { endStream: true });
}

// ── unary calls: handed to the main thread ───────────────────────────────────────────────────

let nextId = 1;
const waiting = new Map<number, ServerHttp2Stream>();
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

function unary(stream: ServerHttp2Stream, headers: IncomingHttpHeaders, method: number): void {
  const chunks: Buffer[] = [];
  let size = 0;
  stream.on("data", (chunk: Buffer) => {
    size += chunk.length;
    if (size <= maxReceive + 5) chunks.push(chunk);
  });
  stream.once("end", () => {
    let message: Buffer;
    try {
      if (size > maxReceive + 5) {
        throw new WireError(
          status.RESOURCE_EXHAUSTED,
          `Received message larger than max (${size - 5} vs. ${maxReceive})`,
        );
      }
      message = unaryMessage(chunks, headers["grpc-encoding"] as string | undefined, maxReceive);
    } catch (err) {
      const wire = err instanceof WireError;
      respondStatus(
        stream,
        wire ? err.code : status.INTERNAL,
        wire ? err.message : `could not read the request: ${String(err)}`,
        null,
      );
      return;
    }
    const id = nextId++;
    waiting.set(id, stream);
    meta.push(headerPairs(headers));
    peers.push(peerOf.get(stream.session as Http2Session) ?? "unknown");
    calls.add([id, method, deadlineOf(headers)], message);
    stream.once("close", () => {
      if (!waiting.delete(id)) return; // answered
      cancels.push(id);
      calls.schedule();
    });
  });
}

function onReplies(batch: ReplyBatch): void {
  const { head, body } = batch;
  let at = 0;
  for (let i = 0, r = 0; i < head.length; i += REPLY_FIELDS, r++) {
    const id = head[i] as number;
    const code = head[i + 1] as number;
    const length = head[i + 2] as number;
    const bytes = body.subarray(at, at + length);
    at += length;
    const stream = waiting.get(id);
    if (stream === undefined) continue;
    waiting.delete(id);
    if (stream.closed) continue;
    const trailer = batch.trailers[r] ?? null;
    if (code !== status.OK) {
      respondStatus(stream, code, batch.details[r] ?? "", trailer);
    } else if (length > maxSend) {
      respondStatus(
        stream,
        status.RESOURCE_EXHAUSTED,
        `Sent message larger than max (${length} vs. ${maxSend})`,
        null,
      );
    } else {
      stream.respond(RESPONSE_HEADERS, { waitForTrailers: true }); // node:http2 copies it
      stream.once("wantTrailers", () =>
        stream.sendTrailers(statusHeaders(0, "OK", trailer, false)),
      );
      stream.end(frame(bytes));
    }
  }
}

// ── streaming calls: proxied to the main thread's own server ────────────────────────────────

let upstream: ClientHttp2Session | null = null;

function upstreamSession(): ClientHttp2Session {
  if (upstream !== null && !upstream.closed && !upstream.destroyed) return upstream;
  const session = http2.connect(`http://${setup.mainAddress}`, {
    maxSessionMemory: Number.MAX_SAFE_INTEGER,
    peerMaxConcurrentStreams: 1 << 20,
  });
  session.on("error", () => undefined); // its streams fail, and the next call reconnects
  session.once("close", () => {
    if (upstream === session) upstream = null;
  });
  upstream = session;
  return session;
}

/** The headers of `h` other than the connection's own pseudo-headers. */
function forwardable(h: IncomingHttpHeaders, keep: readonly string[]): OutgoingHttpHeaders {
  const out: OutgoingHttpHeaders = {};
  for (const key in h) {
    if (key.charCodeAt(0) === 58 /* : */ && !keep.includes(key)) continue;
    out[key] = h[key];
  }
  return out;
}

function proxy(stream: ServerHttp2Stream, headers: IncomingHttpHeaders): void {
  let up: ClientHttp2Stream;
  try {
    up = upstreamSession().request(forwardable(headers, [":method", ":path"]));
  } catch (err) {
    respondStatus(stream, status.UNAVAILABLE, `the node's main thread: ${String(err)}`, null);
    return;
  }
  let responded = false;
  let trailersOnly = false;
  let trailers: OutgoingHttpHeaders | null = null;
  up.on("error", () => undefined); // its close follows
  up.on("response", (h: IncomingHttpHeaders, flags: number) => {
    if (stream.closed) return;
    responded = true;
    trailersOnly = (flags & NGHTTP2_FLAG_END_STREAM) !== 0;
    stream.respond(
      forwardable(h, [":status"]),
      trailersOnly ? { endStream: true } : { waitForTrailers: true },
    );
  });
  up.on("trailers", (t: IncomingHttpHeaders) => {
    trailers = forwardable(t, []);
  });
  stream.on("wantTrailers", () => {
    stream.sendTrailers(
      trailers ?? statusHeaders(status.INTERNAL, "the call ended without a status", null, false),
    );
  });
  // Messages both ways, each side at the other's pace.
  up.on("data", (chunk: Buffer) => {
    if (!stream.closed && !stream.write(chunk)) up.pause();
  });
  stream.on("drain", () => up.resume());
  stream.on("data", (chunk: Buffer) => {
    if (!up.closed && !up.write(chunk)) stream.pause();
  });
  up.on("drain", () => stream.resume());
  stream.on("end", () => {
    if (!up.closed) up.end();
  });
  up.on("end", () => {
    if (responded && !trailersOnly && !stream.closed) stream.end();
  });
  up.on("close", () => {
    if (stream.closed) return;
    if (!responded) {
      respondStatus(stream, status.UNAVAILABLE, "the node's main thread ended the call", null);
    } else if (
      up.rstCode !== undefined &&
      up.rstCode !== NGHTTP2_NO_ERROR &&
      !stream.writableEnded
    ) {
      stream.close(NGHTTP2_INTERNAL_ERROR);
    }
  });
  stream.on("close", () => {
    if (!up.closed) up.close(NGHTTP2_CANCEL);
  });
}

// ── the server ─────────────────────────────────────────────────────────────────────────────

const server = http2.createServer({
  // As grpc-js: Node's default session memory limit breaks busy connections (ENHANCE_YOUR_CALM).
  maxSessionMemory: Number.MAX_SAFE_INTEGER,
  maxSendHeaderBlockLength: Number.MAX_SAFE_INTEGER,
});
const sessions = new Set<Http2Session>();
server.on("session", (session: Http2Session) => {
  sessions.add(session);
  const s = session.socket;
  peerOf.set(session, `${s.remoteAddress ?? "unknown"}:${s.remotePort ?? 0}`);
  session.on("error", () => undefined); // its streams are closed with it
  session.once("close", () => {
    sessions.delete(session);
    if (sessions.size === 0) onSessionsClosed?.();
  });
});
server.on("stream", (stream: ServerHttp2Stream, headers: IncomingHttpHeaders) => {
  stream.on("error", () => undefined); // a reset stream; its close event follows
  const type = headers["content-type"];
  if (typeof type !== "string" || !type.startsWith("application/grpc")) {
    stream.respond({ ":status": 415 }, { endStream: true });
    return;
  }
  const path = headers[":path"] ?? "";
  const method = methods.get(path);
  if (method === undefined) {
    respondStatus(
      stream,
      status.UNIMPLEMENTED,
      `The server does not implement the method ${path}`,
      null,
    );
  } else if (method.unary) {
    unary(stream, headers, method.index);
  } else {
    proxy(stream, headers);
  }
});

const listener: NetServer = createServer({ noDelay: true }, (socket) => {
  // Dead clients are found by TCP keepalive (grpc-js's server would send HTTP/2 pings).
  socket.setKeepAlive(true, 60_000);
  server.emit("connection", socket);
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

let onSessionsClosed: (() => void) | null = null;

/** Stops accepting, lets the connections' calls finish (GOAWAY), cuts them at the deadline. */
function shutdown(deadlineMs: number): void {
  listener.close();
  const done = (): void => {
    onSessionsClosed = null;
    clearTimeout(timer);
    for (const s of sessions) s.destroy();
    upstream?.destroy();
    port?.postMessage({ kind: "closed" });
  };
  const timer = setTimeout(done, deadlineMs);
  if (sessions.size === 0) {
    done();
    return;
  }
  // Counted by the sessions' own close events: close(callback) never calls back for a session
  // that is closing already (its client said GOAWAY first), which held shutdowns 10 s.
  onSessionsClosed = done;
  for (const s of sessions) s.close();
}

port.on("message", (msg: ReplyBatch | { kind: "shutdown"; deadlineMs: number }) => {
  if (msg.kind === "replies") onReplies(msg);
  else shutdown(msg.deadlineMs);
});
