/**
 * The gRPC front end of a node: io-threads.ts runs it in the main thread itself
 * (`rpc.io_threads: 0`) or in worker threads (io-thread.ts), which all listen on `rpc_addr`
 * together with SO_REUSEPORT (the kernel spreads the connections). It serves every method of the
 * node's gRPC server and does the HTTP/2 and gRPC framing of its connections: it speaks gRPC
 * (grpc-wire.ts) on its own HTTP/2 server (h2/), where a no-op call costs ~13 µs of CPU, against
 * ~24 µs on node:http2 and ~42 µs through grpc-js's server (BENCHMARKS.md). It does no KV work
 * itself:
 *
 * - **Unary calls** (KV Put/Get/Delete/Scan, Admin, the peers' unary calls, health checks) go to
 *   the main thread as bytes, batched per event-loop turn (handoff.ts); the main thread decodes
 *   them, runs the very handlers its own server registers, and sends back the encoded answer or
 *   the status with its trailers, which are relayed as they are.
 * - **Client-streaming calls with a raw handler** (the peers' Raft streams), when the front end
 *   runs in the main thread: each whole message goes straight to the handler (RawStreamHandler),
 *   which answers once; no second HTTP/2 hop, no protobuf objects, no compressed message.
 * - **Other streaming calls** (Meta.WatchCluster, the peers' snapshots, health watch,
 *   reflection; Raft streams in I/O threads) are proxied as HTTP/2 streams, bytes and trailers as
 *   they are, with flow control, to the main thread's own gRPC server on a loopback port: rare or
 *   long-lived, they need no batching.
 *
 * Against hostile clients (docs/architecture.md, "The front end against hostile clients"): every
 * connection gets the limits of FrontEndLimits (`rpc.*`), the node's bounds (connection-slots.ts:
 * connections, per address too, clients' streams, bytes of requests still arriving) are counted
 * across its threads, idle connections are swept, a call
 * reset before it is dispatched never runs (`dispatchReady`, and the batch's cancels in
 * io-threads.ts), compressed messages inflate on libuv's thread pool a few at a time per
 * connection (the peers' streams take none), each method has its receive limit (the peers' their
 * own, once a streaming call's first message is whole: openPeerCall; InstallSnapshot's later
 * messages a data chunk's, FrontEndLimits.peerSnapshotMaxReceive), a malformed
 * `grpc-timeout` is refused, and the peers' methods answer only calls that carry `cairn-peer`
 * (PERMISSION_DENIED otherwise: not authentication, see PEER_KEY). With peer TLS
 * (`tls.peer_ca_file`) they answer only a connection whose certificate the peer CA signed and
 * names the node `cairn-peer` names (src/common/peer-tls.ts; UNAUTHENTICATED without one,
 * PERMISSION_DENIED for another node's), reported as CAIRN_ERR_PEER_REFUSED. Every call is
 * handed on with its connection's TlsIdentity (null without a verified certificate). With
 * authentication configured (`auth.tokens_file`, `tls.client_ca_file`), every call is first
 * checked against its caller's identity and role (CallGate: call-auth.ts, authz.ts), before it
 * is dispatched, streamed or proxied; without it there is no gate and no per-call cost.
 *
 * Messages to the main thread: "listening" (with the port) or "listen-error", then "closed" after
 * a shutdown, and "event" for a connection ended by a bug or a limit (FrontEndEvent). Messages
 * from it: reply batches, and "shutdown" with the drain deadline.
 */
import http2, {
  type ClientHttp2Session,
  type ClientHttp2Stream,
  type IncomingHttpHeaders,
  type OutgoingHttpHeaders,
} from "node:http2";
import { closeSync } from "node:fs";
import { createServer, type Server as NetServer, Socket } from "node:net";
import { status } from "@grpc/grpc-js";
import {
  deadlineOf,
  type Fields,
  frame,
  headerPairs,
  inflateMessage,
  invalidTimeoutDetails,
  MessageReader,
  MessageSizeGuard,
  RESPONSE_FIELDS,
  statusFields,
  unaryFramed,
  MessageTooLargeError,
  WireError,
} from "./grpc-wire.ts";
import { deadlineClock, dupFd, IntMap } from "../common/index.ts";
import { ConnectionSlots, type IncomingSource, type Refusal } from "./connection-slots.ts";
import { peerIdentityRefusal, type TlsIdentity } from "../common/peer-tls.ts";
import {
  type ConnectionOptions,
  ErrorCode,
  ServerConnection,
  type ServerStream,
} from "./h2/connection.ts";
import { encodeHeaders, type HeaderList } from "./h2/hpack.ts";
import {
  BatchBuilder,
  type CallBatch,
  DEFAULT_FRONT_END_LIMITS,
  type FrontEndEvent,
  type FrontEndLimits,
  type IoThreadSetup,
  type MetadataPairs,
  type RawStreamCall,
  type RawStreamSink,
  REPLY_FIELDS,
  type ReplyBatch,
} from "./handoff.ts";
import {
  goAwayInadequateSecurity,
  tlsFront,
  type TlsFront,
  TLS_HANDSHAKE_BYTE,
} from "./tls-front.ts";
import { methodClassOf, type MethodClass } from "./authz.ts";
import { CallGate } from "./call-auth.ts";
import { ERROR_CODE_KEY, INTERNAL_KEY, PEER_KEY, SERVED_BY_KEY, SHARD_WORKER_KEY } from "./wire.ts";
import { answer as tunnelAnswer, readTunnelRequest, TUNNEL_OPEN } from "./worker-tunnel.ts";

const { NGHTTP2_CANCEL, NGHTTP2_NO_ERROR, NGHTTP2_FLAG_END_STREAM } = http2.constants;
/** The first byte of a CONNECT request (worker-tunnel.ts). */
const CONNECT_BYTE = 0x43;
const DEFAULT_MAX_MESSAGE = 4 * 1024 * 1024;
/** Encoded once: the headers of every answer with a message, and the trailers of a plain OK. */
const OK_FIELDS = statusFields(status.OK, "OK", null, false);
const OK_TRAILERS = encodeHeaders(OK_FIELDS);
/** HpackEncoder.cached slots of a connection: its response headers and its plain OK trailers. */
const RESPONSE_SLOT = 0;
const OK_SLOT = 1;

/** Runs `sweep` every quarter of `timeoutMs`, not keeping the thread alive; null for 0 (off). */
function everyQuarterOf(timeoutMs: number, sweep: () => void): NodeJS.Timeout | null {
  if (timeoutMs <= 0) return null;
  const timer = setInterval(sweep, Math.max(1, Math.floor(timeoutMs / 4)));
  timer.unref();
  return timer;
}

/**
 * Sends a response's headers, indexed on the connection (they are framed at once: see
 * HpackEncoder): ~70 bytes on a connection's first response, 3 after.
 */
function sendResponseHeaders(stream: ServerStream): void {
  // A block the encoder indexed must be sent: never encoded for a stream that sends nothing.
  if (stream.localEnded || stream.closed) return;
  stream.sendHeaders(stream.connection.encoder.cached(RESPONSE_SLOT, RESPONSE_FIELDS));
}

/**
 * Ends a response with the trailers of a plain OK: indexed when they leave at once (nothing
 * waits in the stream's queue), else the block that leaves the table alone.
 */
function sendOkTrailers(stream: ServerStream): void {
  if (stream.localEnded || stream.closed) return;
  stream.sendTrailers(
    stream.queuedBytes === 0 ? stream.connection.encoder.cached(OK_SLOT, OK_FIELDS) : OK_TRAILERS,
  );
}

/**
 * The OK trailers of a Put, Get or Delete, which carry `cairn-served-by` and nothing else
 * (kv-service.ts), per node id named: encoded once, and with their own HpackEncoder.cached slot
 * (after OK_SLOT), the id indexed too (hpack.ts INDEXED_NAMES): after a connection's first such
 * answer they cost it 3 bytes, against 2 for a plain OK. At most SERVED_BY_SLOTS ids (a cluster
 * has few nodes); the trailers naming another are encoded each time, without indexing.
 */
const servedByTrailers = new Map<
  string,
  { readonly slot: number; readonly fields: Fields; readonly block: Buffer }
>();
const SERVED_BY_SLOTS = 32;

/** Ends a response with the trailers of an OK that carries `trailer` (see servedByTrailers). */
function sendOkTrailersWith(stream: ServerStream, trailer: MetadataPairs): void {
  if (stream.localEnded || stream.closed) return;
  const [key, id] = trailer.length === 1 ? (trailer[0] as MetadataPairs[number]) : ["", ""];
  let known = key === SERVED_BY_KEY && typeof id === "string" ? servedByTrailers.get(id) : null;
  if (known === undefined && servedByTrailers.size < SERVED_BY_SLOTS) {
    const fields = statusFields(0, "OK", trailer, false);
    known = { slot: OK_SLOT + 1 + servedByTrailers.size, fields, block: encodeHeaders(fields) };
    servedByTrailers.set(id as string, known);
  }
  if (known === undefined || known === null) {
    stream.sendTrailers(encodeHeaders(statusFields(0, "OK", trailer, false)));
    return;
  }
  // Indexed when they leave at once; a block that may wait behind DATA leaves the table alone.
  stream.sendTrailers(
    stream.queuedBytes === 0
      ? stream.connection.encoder.cached(known.slot, known.fields)
      : known.block,
  );
}
const UNSUPPORTED_MEDIA_TYPE = encodeHeaders([[":status", "415"]]);

/** A client's `:path` as an answer repeats it: at most 128 characters (it may be 64 KiB). */
function echoed(path: string): string {
  return path.length <= 128 ? path : `${path.slice(0, 128)}… (${path.length} characters)`;
}

/**
 * Whether a request's content-type is gRPC's over protobuf: `application/grpc`, or with the
 * `+proto` subtype, either with parameters after a `;` (grpc-go's rule; in any case, as media
 * types are). Anything else is answered 415: `application/grpcfoo` is not gRPC, and `+json` and
 * the like are codecs this server does not speak.
 */
function isGrpcProto(type: string | undefined): boolean {
  if (type === undefined) return false;
  const semi = type.indexOf(";");
  const media = (semi === -1 ? type : type.slice(0, semi)).trim().toLowerCase();
  return media === "application/grpc" || media === "application/grpc+proto";
}
/** Bytes an answer costs beyond its message: headers, trailers, frame headers. */
const ANSWER_OVERHEAD_BYTES = 64;
/**
 * A proxied stream stops reading its upstream while this much waits for the client's window, and
 * passes none of the client's messages upstream meanwhile (see proxy()).
 */
const PROXY_HIGH_WATER = 1 << 20;
/** The longest deadline passed upstream: 24 days, under the 2^31-1 ms a timer can wait. */
const MAX_UPSTREAM_TIMEOUT_MS = 24 * 86_400_000;

/** Unary calls waiting to run in this thread, as parallel arrays (not an object per call). */
interface Held {
  ids: number[];
  methods: number[];
  deadlines: number[];
  messages: Buffer[];
}
/**
 * What a connection's calls run in this thread may hold of its memory (direct only): with the
 * front end in this thread a call is answered as it runs, so a read of a thousand pipelined
 * Gets would otherwise run them all, and build every answer, before the output bound is looked
 * at. A connection runs its calls while its output is not backlogged and the answers it waits
 * for, at `estimate` bytes each, fit in a quarter of its output bound (where reading pauses);
 * the other calls are `held`, in order, until answers come back or the output drains. The
 * estimate is the largest recent answer of the connection (it decays by a quarter an answer;
 * a quarter of the room before the first), so a client of small answers pipelines up to its
 * streams' limit after two rounds of answers, and one of 1 MiB answers four calls at a time.
 *
 * A held call's request is still in memory, its header list and message: it counts in
 * `rpc.max_incoming_request_bytes` until it runs (countHeld), and waits at most
 * `rpc.request_receive_timeout_ms` (sweepArriving). Reading does not pause for DATA that waits
 * for the client's window, only for what the socket holds: a client that granted its answers no
 * window kept being read, and held 400 Gets of 4 MiB, counted nowhere (1.8 GiB).
 */
interface Answering {
  connection: ServerConnection;
  /** Whose bytes its held calls are (ConnectionSlots.incomingSource); undefined: not bounded. */
  readonly source: IncomingSource | undefined;
  /** Calls run and not yet answered (nor cancelled). */
  running: number;
  estimate: number;
  held: Held | null;
  /** A microtask will run the held calls that have room (see `answered`). */
  releasing: boolean;
}
/**
 * A peer's streaming call until its first message is whole (openPeerCall): what it holds of the
 * node's bounds, given back once by end(), when that message is whole or the call is gone.
 */
interface PeerOpening {
  /** The limit of the call's first message. */
  readonly max: number;
  /** Counts `bytes` more of the call's request; false: no room, and the call is answered. */
  take(bytes: number): boolean;
  end(): void;
}
/**
 * The memory node:http2 lets a proxied connection to this node's own server hold (its
 * maxSessionMemory, in MiB): far above what its streams' windows let in flight, but bounded.
 */
const UPSTREAM_SESSION_MEMORY_MIB = 256;
/**
 * The peers' service: its methods have their own receive limit (FrontEndLimits.peerMaxReceive;
 * InstallSnapshot's, after its header, FrontEndLimits.peerSnapshotMaxReceive).
 */
export const PEER_SERVICE = "/cairn.v1.Raft/";
/** The peers' snapshot call: a header (its opening), data chunks, a trailer. */
const INSTALL_SNAPSHOT = `${PEER_SERVICE}InstallSnapshot`;
/**
 * The most a peer's streaming call may send as its first message, the one that says who sends
 * it (src/replication/handshake.ts) and on which the receiver takes or refuses the call
 * (openPeerCall). A Stream's is its handshake frame: a cluster id, two node ids and a replica id,
 * under 500 bytes.
 */
const PEER_HANDSHAKE_MAX = 64 * 1024;
/**
 * The same for InstallSnapshot, whose first message is its header: the handshake and the
 * snapshot's metadata, whose configuration names each replica of the group by its replica id (up
 * to 145 bytes), every member for the meta group's (at most 1,024, src/node/join-admission.ts):
 * ~150 KB. Its data come in the later messages, each held to peerSnapshotMaxReceive (a data
 * chunk of at most 4 MiB), not to the peers' 128 MiB that a Stream's need.
 */
const SNAPSHOT_HEADER_MAX = 1024 * 1024;

/** Where the front end talks to the main thread's side (io-threads.ts): a MessagePort or a stand-in. */
export interface FrontEndPort {
  /** Also carries `{ kind: "event", event: FrontEndEvent }`: a connection to report. */
  postMessage(message: unknown, transfer?: readonly ArrayBuffer[]): void;
  on(
    event: "message",
    listener: (message: ReplyBatch | { kind: "shutdown"; deadlineMs: number }) => void,
  ): unknown;
}

/**
 * The main thread's side of the unary calls, called directly when the front end runs in the
 * main thread (no batches to pack: each call goes over as it is complete).
 */
export interface DirectCalls {
  call(
    id: number,
    method: number,
    deadline: number,
    message: Buffer,
    meta: MetadataPairs | null,
    peer: string,
    identity: TlsIdentity | null,
  ): void;
  cancel(id: number): void;
  /**
   * Opens a client-streaming call of method `method` in this thread (RawStreamHandler), or
   * answers null when that method has none: then the call is proxied.
   */
  stream(method: number, call: RawStreamCall): RawStreamSink | null;
}

/**
 * A shard worker's front end (worker-tunnel.ts): the connections that ask for another worker go
 * to it, and so do the streaming calls that name it in their `cairn-shard-worker` metadata.
 */
export interface WorkerTunnels {
  /** This worker's index, and the node's number of workers. */
  readonly index: number;
  readonly count: number;
  /**
   * Hands worker `to` a connection's descriptor, which this thread no longer uses, and the bytes
   * already read past its CONNECT; that worker serves it through its front end's `adopt`, or
   * closes it.
   */
  handOff(to: number, fd: number, rest: Buffer | null): void;
  /** The loopback address of worker `index`'s own gRPC server (its streaming calls). */
  streamAddress(index: number): string;
  /**
   * The path prefix of the peers' service ("/cairn.v1.Raft/"): its calls are served only on a
   * connection that named this worker, or (streams proxied to a worker) with the worker in
   * their metadata.
   */
  readonly peerService: string;
}

/** What the main thread's side calls directly when the front end runs in the main thread. */
export interface FrontEnd {
  /**
   * Writes what the connections have framed this turn now rather than after the turn (for a
   * caller about to block the thread on a synchronous write).
   */
  flushNow(): void;
  /** The answer of call `id`: a message (code OK) or a status, with trailing metadata. */
  answer(
    id: number,
    code: number,
    bytes: Uint8Array,
    details: string | null,
    trailer: MetadataPairs | null,
  ): void;
  /**
   * Serves a connection another worker accepted and handed over (WorkerTunnels.handOff): answers
   * its CONNECT and speaks HTTP/2 on it; closes it when this front end has shut down.
   */
  adopt(fd: number, rest: Buffer | null): void;
}

/**
 * Serves `setup.methods` on `setup.host:setup.port`, handing unary calls to `direct` when given,
 * else over `port` in batches; `port` carries the rest (listening, replies, shutdown).
 */
export function serveFrontEnd(
  setup: IoThreadSetup,
  port: FrontEndPort,
  direct?: DirectCalls,
  tunnels?: WorkerTunnels,
): FrontEnd {
  const limits: FrontEndLimits = { ...DEFAULT_FRONT_END_LIMITS, ...setup.limits };
  /**
   * The node's bounds, counted across its threads (connection-slots.ts: its connections, per
   * address too, clients' streams, bytes of requests still arriving); null: not bounded.
   */
  const nodeBounds = setup.connections === undefined ? null : ConnectionSlots.of(setup.connections);
  const clientMaxReceive =
    setup.serverOptions["grpc.max_receive_message_length"] ?? DEFAULT_MAX_MESSAGE;
  const maxSend = setup.serverOptions["grpc.max_send_message_length"] ?? DEFAULT_MAX_MESSAGE;
  const connectionOptions: ConnectionOptions = {
    receiveWindow: 1 << 20,
    maxHeaderListSize: 64 * 1024,
    maxConcurrentStreams: limits.maxConcurrentStreams,
    maxContinuationFrames: limits.maxContinuationFrames,
    maxResetsPerSecond: limits.maxResetsPerSecond,
    maxOutputBytes: limits.maxOutputBytes,
    writeStallTimeoutMs: limits.writeStallTimeoutMs,
    handshakeTimeoutMs: limits.handshakeTimeoutMs,
    goAwayGraceMs: limits.goAwayGraceMs,
    ...(nodeBounds === null
      ? {}
      : {
          headerBlockBudget: {
            take: (bytes: number) => nodeBounds.takePartialHeaders(bytes),
            release: (bytes: number) => nodeBounds.releasePartialHeaders(bytes),
          },
        }),
  };
  /**
   * Path → the method's index in setup.methods, whether it is unary, its receive limit (the
   * peers' own, InstallSnapshot's, or the clients'), whether only peers may call it, and who may
   * (authz.ts).
   */
  const methods = new Map(
    setup.methods.map((m, index) => {
      const peer = m.path.startsWith(PEER_SERVICE);
      const snapshot = m.path === INSTALL_SNAPSHOT;
      return [
        m.path,
        {
          index,
          unary: !m.requestStream && !m.responseStream,
          /** One request message (unary, server-streaming): its arrival is timed. */
          oneRequest: !m.requestStream,
          peer,
          cls: methodClassOf(m.path) satisfies MethodClass,
          // A snapshot's data chunks, not the peers' 128 MiB: a caller that only claims a
          // node's name and sends a header the receiver takes must not have the call hold more.
          maxReceive: snapshot
            ? limits.peerSnapshotMaxReceive
            : peer
              ? Math.max(limits.peerMaxReceive, clientMaxReceive)
              : clientMaxReceive,
          /** A peer's streaming call: the limit of its first message (openPeerCall). */
          openingMax: snapshot ? SNAPSHOT_HEADER_MAX : PEER_HANDSHAKE_MAX,
        },
      ];
    }),
  );

  function report(event: FrontEndEvent): void {
    port.postMessage({ kind: "event", event });
  }

  /** Ends `stream` with a status and no message (a trailers-only response). */
  function respondStatus(
    stream: ServerStream,
    code: number,
    details: string,
    pairs: MetadataPairs | null,
  ): void {
    if (stream.closed || stream.headersSent) return;
    stream.sendHeaders(encodeHeaders(statusFields(code, details, pairs, true)), true);
  }

  /**
   * Ends a call whose request the wire refused. A client's request past limits.max_message_bytes
   * is INVALID_ARGUMENT naming the limit (design.md §2), as a key or a value past theirs is:
   * grpc-js's RESOURCE_EXHAUSTED "Received message larger than max (5242892 vs. 4194304)"
   * named no setting, and read as the node's back-pressure. A peer's keeps grpc-js's answer.
   */
  function refuseWire(stream: ServerStream, err: WireError, client: boolean): void {
    if (!client || !(err instanceof MessageTooLargeError)) {
      respondStatus(stream, err.code, err.message, null);
      return;
    }
    const what =
      err.size === null ? `inflates to more than ${err.max} bytes` : `is ${err.size} bytes`;
    respondStatus(
      stream,
      status.INVALID_ARGUMENT,
      `the request message ${what}; the limit is ${err.max} bytes (limits.max_message_bytes)`,
      [[ERROR_CODE_KEY, "CAIRN_ERR_INVALID_ARGUMENT"]],
    );
  }

  // ── unary calls: handed to the main thread ───────────────────────────────────────────────────

  let nextId = 1;
  // IntMap, not Map: a Map's churn promotes what its entries reach (src/common/int-map.ts).
  const waiting = new IntMap<ServerStream>();
  let meta: (MetadataPairs | null)[] = [];
  let peers: string[] = [];
  let identities: (TlsIdentity | null)[] = [];
  let cancels: number[] = [];
  const calls = new BatchBuilder(() => {
    const { head, body } = calls.take();
    const batch: CallBatch = { kind: "calls", head, body, meta, peers, identities, cancels };
    meta = [];
    peers = [];
    identities = [];
    cancels = [];
    port.postMessage(batch, [head.buffer, body.buffer]);
  });

  /**
   * Calls complete in this read, dispatched at its end (onInputDone) so that a reset later in the
   * same read drops them unrun: with the front end in this thread a call runs as it is handed
   * over. In I/O threads they go in the turn's batch, where the main thread drops a call whose
   * cancel is in the same batch (io-threads.ts).
   */
  // Parallel arrays, not an object per call.
  let readyIds: number[] = [];
  let readyMethods: number[] = [];
  let readyDeadlines: number[] = [];
  let readyMessages: Buffer[] = [];

  const answering = new Map<ServerConnection, Answering>();
  /** The connection of each call run and not yet answered or cancelled. */
  const runningCalls = new IntMap<Answering>();
  // No output bound (0): no room to keep either.
  const answerRoom =
    limits.maxOutputBytes > 0 ? Math.max(1, Math.floor(limits.maxOutputBytes / 4)) : Infinity;

  function answeringOf(connection: ServerConnection): Answering {
    let state = answering.get(connection);
    if (state === undefined) {
      state = {
        connection,
        source: nodeBounds?.incomingSource(connection.socket.remoteAddress),
        running: 0,
        // Four calls run until the first answers say how large they are.
        estimate: answerRoom === Infinity ? 0 : Math.ceil(answerRoom / 4),
        held: null,
        releasing: false,
      };
      answering.set(connection, state);
    }
    return state;
  }

  function hasRoom(state: Answering): boolean {
    return (
      !state.connection.outputBacklogged &&
      (state.running === 0 || (state.running + 1) * state.estimate <= answerRoom)
    );
  }

  function dispatchReady(): void {
    if (readyIds.length === 0 || direct === undefined) return;
    const calls: Held = {
      ids: readyIds,
      methods: readyMethods,
      deadlines: readyDeadlines,
      messages: readyMessages,
    };
    readyIds = [];
    readyMethods = [];
    readyDeadlines = [];
    readyMessages = [];
    runCalls(calls);
  }

  /** A backlogged connection has room again: its held calls run, as far as it keeps room. */
  function onOutputRoom(connection: ServerConnection): void {
    const state = answering.get(connection);
    if (state !== undefined) runHeld(state);
  }

  function runHeld(state: Answering): void {
    const calls = state.held;
    if (calls === null) return;
    state.held = null;
    runCalls(calls);
  }

  /** A call of `state` was answered or cancelled: held calls run once there is room. */
  function answered(state: Answering): void {
    state.running--;
    if (state.held === null || state.releasing || !hasRoom(state)) return;
    // Not from here: a call that answers as it runs would recurse once per held call.
    state.releasing = true;
    queueMicrotask(() => {
      state.releasing = false;
      runHeld(state);
    });
  }

  /** What each held call counts in `rpc.max_incoming_request_bytes` (countHeld), by call id. */
  const heldBytes = new IntMap<number>();

  /**
   * Counts a call about to be held, its header list and `message`, in the node's incoming bytes
   * until it runs or its stream closes (uncountHeld); false when they have no room, and the
   * call is answered RESOURCE_EXHAUSTED unrun.
   */
  function countHeld(state: Answering, stream: ServerStream, id: number, message: Buffer): boolean {
    const bounds = nodeBounds;
    if (bounds === null) return true;
    const bytes = stream.headerBytes + message.length;
    const refusal = bounds.takeIncoming(bytes, state.source);
    if (refusal !== null) {
      refuseIncoming(stream, bounds, refusal);
      return false;
    }
    heldBytes.set(id, bytes);
    return true;
  }

  /** Gives back what call `id` of `connection` counted while it was held, if it was. */
  function uncountHeld(connection: ServerConnection, id: number): void {
    const bytes = heldBytes.get(id);
    if (bytes === undefined) return;
    heldBytes.delete(id);
    nodeBounds?.releaseIncoming(bytes, answering.get(connection)?.source);
  }

  function runCalls(calls: Held): void {
    if (direct === undefined) return;
    const { ids, methods: methodsOf, deadlines, messages } = calls;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i] as number;
      const stream = waiting.get(id);
      if (stream === undefined) continue; // reset before it was dispatched: never run
      const state = answeringOf(stream.connection);
      const message = messages[i] as Buffer;
      if (state.held !== null || !hasRoom(state)) {
        // Counted once: a held call that is held again when its turn comes still is.
        if (!heldBytes.has(id) && !countHeld(state, stream, id, message)) continue;
        const hold = (state.held ??= { ids: [], methods: [], deadlines: [], messages: [] });
        hold.ids.push(id);
        hold.methods.push(methodsOf[i] as number);
        hold.deadlines.push(deadlines[i] as number);
        hold.messages.push(message);
        continue;
      }
      uncountHeld(stream.connection, id);
      state.running++;
      runningCalls.set(id, state);
      direct.call(
        id,
        methodsOf[i] as number,
        deadlines[i] as number,
        message,
        headerPairs(stream.headers),
        stream.connection.peer,
        identityOfConnection.get(stream.connection) ?? null,
      );
    }
  }

  /** Hands a unary call's message to the main thread (see `ready`). */
  function dispatch(stream: ServerStream, method: number, deadline: number, message: Buffer): void {
    const id = nextId++;
    waiting.set(id, stream);
    if (direct !== undefined) {
      readyIds.push(id);
      readyMethods.push(method);
      readyDeadlines.push(deadline);
      readyMessages.push(message);
    } else {
      meta.push(headerPairs(stream.headers));
      peers.push(stream.connection.peer);
      identities.push(identityOfConnection.get(stream.connection) ?? null);
      calls.add([id, method, deadline], message);
    }
    stream.onClose = () => {
      if (!waiting.delete(id)) return; // answered, or never dispatched
      if (direct !== undefined) {
        const state = runningCalls.get(id);
        if (state === undefined) {
          // Held or ready: never run.
          uncountHeld(stream.connection, id);
          return;
        }
        runningCalls.delete(id);
        direct.cancel(id);
        answered(state);
        return;
      }
      cancels.push(id);
      calls.schedule();
    };
  }

  /** Compressed messages inflating (or queued) per connection: FrontEndLimits.maxDecompressions. */
  const inflating = new Map<ServerConnection, { active: number; queue: (() => boolean)[] }>();

  /**
   * Inflates a call's message off this thread, a bounded number at once per connection; the rest
   * wait in the connection's queue. `inflated` hears once the message is inflated or dropped
   * (its bytes leave the incoming budget then). Returns what drops it: a stream that closes
   * while its message waits leaves nothing in the queue but a closure, skipped at its turn.
   */
  function inflateThenDispatch(
    stream: ServerStream,
    method: number,
    deadline: number,
    body: Buffer,
    maxReceive: number,
    client: boolean,
    inflated: () => void,
  ): () => void {
    const connection = stream.connection;
    let state = inflating.get(connection);
    if (state === undefined) {
      state = { active: 0, queue: [] };
      inflating.set(connection, state);
    }
    const slots = state;
    let message: Buffer | null = body;
    const startNext = (): void => {
      for (let next = slots.queue.shift(); next !== undefined; next = slots.queue.shift()) {
        if (next()) return;
      }
      if (slots.active === 0) inflating.delete(connection);
    };
    const start = (): boolean => {
      const compressed = message;
      message = null;
      if (compressed === null || stream.closed) return false;
      slots.active++;
      inflateMessage(compressed, stream.header("grpc-encoding"), maxReceive, (err, plain) => {
        slots.active--;
        inflated();
        startNext();
        if (stream.closed) return;
        if (err !== null) refuseWire(stream, err, client);
        else dispatch(stream, method, deadline, plain as Buffer);
        dispatchReady();
        calls.schedule();
      });
      return true;
    };
    if (slots.active < limits.maxDecompressions) {
      if (!start()) startNext();
    } else slots.queue.push(start);
    return () => {
      message = null;
    };
  }

  /** `client`: not a peer's method (its size limit is limits.max_message_bytes). */
  function unary(stream: ServerStream, method: number, maxReceive: number, client: boolean): void {
    // A call's grpc-timeout counts from its headers, as its client counts it (and grpc-js's
    // server): from its last byte, a request slow to arrive (a large Put on a slow link) ran,
    // and a write applied, after its client had given up on it.
    const headersAt = deadlineClock();
    const chunks: Buffer[] = [];
    let size = 0;
    // The bytes held while the request arrives count against the node's
    // `rpc.max_incoming_request_bytes` (connection-slots.ts), its header list (up to 64 KiB)
    // with them, until it is whole (inflated, when compressed) or gone. Uncounted, the header
    // lists of requests that never end filled the heap: 65,000 streams of 60 KB of metadata
    // from one address ended a node (out of memory) in 35 s. One client address holds at most
    // a quarter of it, and a cluster's members have the last quarter to themselves.
    const bounds = nodeBounds;
    const from = bounds?.incomingSource(stream.connection.socket.remoteAddress);
    let counted = 0;
    if (bounds !== null) {
      const refusal = bounds.takeIncoming(stream.headerBytes, from);
      if (refusal !== null) {
        refuseIncoming(stream, bounds, refusal);
        return;
      }
      counted = stream.headerBytes;
    }
    stream.timedRequest = true;
    const release = (): void => {
      bounds?.releaseIncoming(counted, from);
      counted = 0;
    };
    let dropInflate: (() => void) | null = null;
    stream.onClose = () => {
      dropInflate?.();
      release();
    };
    stream.onData = (chunk) => {
      size += chunk.length;
      if (size > maxReceive + 5) return;
      if (bounds !== null) {
        const refusal = bounds.takeIncoming(chunk.length, from);
        if (refusal !== null) {
          release();
          chunks.length = 0;
          stream.onData = () => {};
          stream.onEnd = null;
          refuseIncoming(stream, bounds, refusal);
          return;
        }
        counted += chunk.length;
      }
      chunks.push(chunk);
    };
    stream.onEnd = () => {
      let framed: Buffer;
      try {
        if (size > maxReceive + 5) throw new MessageTooLargeError(size - 5, maxReceive);
        framed = unaryFramed(chunks, maxReceive);
      } catch (err) {
        release();
        if (err instanceof WireError) {
          refuseWire(stream, err, client);
        } else {
          respondStatus(
            stream,
            status.INTERNAL,
            `could not read the request: ${String(err)}`,
            null,
          );
        }
        return;
      } finally {
        // The stream lives until its answer, and this closure with it: the chunks go now.
        chunks.length = 0;
      }
      const timeout = stream.header("grpc-timeout");
      const now = deadlineClock();
      const deadline = deadlineOf(timeout, headersAt);
      if (Number.isNaN(deadline)) {
        release();
        respondStatus(stream, status.INTERNAL, invalidTimeoutDetails(timeout), null);
        return;
      }
      if (deadline <= now) {
        // A timeout of 0 (`0n`, `0S`), or one past before the request was whole: the client
        // gave up before the call arrived, so it is not run (a write it could only count as
        // failed, its outcome unknown).
        release();
        respondStatus(stream, status.DEADLINE_EXCEEDED, "Deadline exceeded", null);
        return;
      }
      if (framed[0] === 0) {
        release();
        dispatch(stream, method, deadline, framed.subarray(5));
      } else {
        // Still counted while it waits for its turn to inflate (a connection's compressed
        // requests queue behind rpc.max_decompressions), given back once inflated; dropped from
        // the queue if its stream closes first (its bytes then given back by onClose).
        dropInflate = inflateThenDispatch(
          stream,
          method,
          deadline,
          framed.subarray(5),
          maxReceive,
          client,
          release,
        );
      }
    };
  }

  function answer(
    id: number,
    code: number,
    bytes: Uint8Array,
    details: string | null,
    trailer: MetadataPairs | null,
  ): void {
    const stream = waiting.get(id);
    if (stream === undefined) return;
    waiting.delete(id);
    const state = runningCalls.get(id);
    if (state !== undefined) {
      runningCalls.delete(id);
      const size = bytes.length + ANSWER_OVERHEAD_BYTES;
      state.estimate = Math.max(size, state.estimate - (state.estimate >>> 2));
      answered(state);
    }
    if (stream.closed) return;
    if (code !== status.OK) {
      respondStatus(stream, code, details ?? "", trailer);
    } else if (bytes.length > maxSend) {
      respondStatus(
        stream,
        status.RESOURCE_EXHAUSTED,
        `Sent message larger than max (${bytes.length} vs. ${maxSend})`,
        null,
      );
    } else if (stream.connection.admitOutput(bytes.length + ANSWER_OVERHEAD_BYTES)) {
      sendResponseHeaders(stream);
      stream.sendData(frame(bytes));
      if (trailer === null) sendOkTrailers(stream);
      else sendOkTrailersWith(stream, trailer);
    }
  }

  function onReplies(batch: ReplyBatch): void {
    const { head, body } = batch;
    let at = 0;
    for (let i = 0, r = 0; i < head.length; i += REPLY_FIELDS, r++) {
      const length = head[i + 2] as number;
      answer(
        head[i] as number,
        head[i + 1] as number,
        body.subarray(at, at + length),
        batch.details[r] ?? null,
        batch.trailers[r] ?? null,
      );
      at += length;
    }
  }

  // ── client-streaming calls served in this thread (direct only) ──────────────────────────────

  /**
   * Serves `stream` with the main thread's RawStreamHandler; false when there is none. `opening`:
   * a peer's call, bounded until its first message is whole.
   */
  function rawStream(
    stream: ServerStream,
    method: number,
    maxReceive: number,
    opening: PeerOpening | null,
  ): boolean {
    if (direct === undefined) return false;
    let finished = false;
    const call: RawStreamCall = {
      peer: stream.connection.peer,
      sender: stream.header(PEER_KEY) ?? "",
      identity: identityOfConnection.get(stream.connection) ?? null,
      sendHeaders() {
        if (!finished && !stream.headersSent) sendResponseHeaders(stream);
      },
      finish(code, details, message, trailer = null) {
        if (finished) return;
        finished = true;
        if (stream.closed) return;
        if (!stream.headersSent) {
          if (code !== status.OK || message === null) {
            respondStatus(stream, code, details, trailer);
            return;
          }
          sendResponseHeaders(stream);
        }
        if (code === status.OK && message !== null) stream.sendData(frame(message));
        if (code === status.OK) sendOkTrailers(stream);
        else stream.sendTrailers(encodeHeaders(statusFields(code, details, trailer, false)));
      },
    };
    const sink = direct.stream(method, call);
    if (sink === null) return false;
    const reader = new MessageReader(maxReceive, opening?.max);
    const deliver = (message: Buffer): void => {
      // The handler takes or refuses a peer's call on its first message, at once.
      opening?.end();
      if (!finished) sink.message(message);
    };
    stream.onData = (chunk) => {
      if (finished) return;
      if (opening !== null && !opening.take(chunk.length)) {
        finished = true;
        sink.cancelled();
        return;
      }
      try {
        reader.push(chunk, deliver);
      } catch (err) {
        const wire = err instanceof WireError;
        call.finish(wire ? err.code : status.INTERNAL, wire ? err.message : String(err), null);
        sink.cancelled();
      }
    };
    stream.onEnd = () => {
      if (finished) return;
      if (!reader.pending) {
        sink.end();
        return;
      }
      call.finish(status.INTERNAL, "the request ended inside a message", null);
      sink.cancelled();
    };
    const closed = stream.onClose;
    stream.onClose = (complete) => {
      closed?.(complete);
      if (finished) return;
      finished = true;
      sink.cancelled();
    };
    return true;
  }

  // ── streaming calls: proxied to the main thread's own server ────────────────────────────────

  /** By address: this thread's own server, and with shard workers the other workers'. */
  const upstreams = new Map<string, ClientHttp2Session>();

  function upstreamSession(address: string): ClientHttp2Session {
    const current = upstreams.get(address);
    if (current !== undefined && !current.closed && !current.destroyed) return current;
    const session = http2.connect(`http://${address}`, {
      maxSessionMemory: UPSTREAM_SESSION_MEMORY_MIB,
      peerMaxConcurrentStreams: 1 << 20,
    });
    session.on("error", () => undefined); // its streams fail, and the next call reconnects
    session.once("close", () => {
      if (upstreams.get(address) === session) upstreams.delete(address);
    });
    upstreams.set(address, session);
    return session;
  }

  /** Where a streaming call is served: the worker its metadata names, else this thread. */
  function upstreamAddress(stream: ServerStream): string {
    if (tunnels === undefined) return setup.mainAddress;
    const named = stream.header(SHARD_WORKER_KEY);
    if (named === undefined) return setup.mainAddress;
    const index = Number(named);
    if (!Number.isInteger(index) || index < 0 || index >= tunnels.count) {
      throw new Error(`this node has no shard worker ${named} (it has ${tunnels.count})`);
    }
    return index === tunnels.index ? setup.mainAddress : tunnels.streamAddress(index);
  }

  /** A request's header list as node:http2 sends it upstream: pseudo-headers but :method, :path dropped. */
  function requestHeaders(list: HeaderList): OutgoingHttpHeaders {
    // No prototype: a header named `constructor` or `__proto__` is a header like any other.
    const out: OutgoingHttpHeaders = Object.create(null) as OutgoingHttpHeaders;
    for (let i = 0; i < list.length; i += 2) {
      const key = list[i] as string;
      if (key.charCodeAt(0) === 58 /* : */ && key !== ":method" && key !== ":path") continue;
      const value = list[i + 1] as string;
      const prior = out[key];
      if (prior === undefined) out[key] = value;
      else out[key] = Array.isArray(prior) ? [...prior, value] : [String(prior), value];
    }
    return out;
  }

  /** Headers node:http2 received upstream as fields to send on, pseudo-headers but `keep` dropped. */
  function fieldsOf(h: IncomingHttpHeaders, keep: string | null): Fields {
    const out: Fields = [];
    for (const key in h) {
      if (key.charCodeAt(0) === 58 /* : */ && key !== keep) continue;
      const value = h[key];
      if (value === undefined) continue;
      if (Array.isArray(value)) for (const v of value) out.push([key, v]);
      else out.push([key, String(value)]);
    }
    return out;
  }

  /**
   * Proxies a streaming call to the server that serves it, each direction at the other side's
   * pace. What the client sends is credited back as it is passed upstream. While the answers
   * wait for the client's window (past PROXY_HIGH_WATER on the stream), upstream is not read and
   * nothing more of the client's is passed to it: held here, uncredited, so the client's own
   * window bounds it. Passed on regardless, a client that reads nothing and pipelines requests
   * on a call that answers each (server reflection: an 18-byte request, a 2.4 KB answer) had the
   * node's server buffer the answers without bound (1.5 GB from one connection in 24 s). Every
   * answer's bytes count against the connection's output bound (admitOutput) as a unary
   * answer's do.
   */
  function proxy(stream: ServerStream, maxReceive: number, opening: PeerOpening | null): void {
    stream.autoCredit = false;
    // The main thread's server takes the peers' raised limit for every method: a client's
    // message is held to the method's own limit here, before it is passed on, and a peer's
    // first message to its opening's. The peers never compress: grpc-js would inflate a
    // compressed message in the main thread, up to the peers' limit.
    const guard = new MessageSizeGuard(
      maxReceive,
      opening === null ? {} : { first: opening.max, compressed: false },
    );
    let up: ClientHttp2Stream;
    try {
      const headers = requestHeaders(stream.headers);
      // Whatever the client sent under its name: the key is the node's to add.
      headers[INTERNAL_KEY] = setup.internalKey;
      // grpc-js's server times a call's deadline with setTimeout, which fires at once past
      // 2^31-1 ms: a watch asked to last a year (grpc-go's long timeouts) ended as it began.
      const timeout = headers["grpc-timeout"];
      if (typeof timeout === "string" && deadlineOf(timeout, 0) > MAX_UPSTREAM_TIMEOUT_MS) {
        headers["grpc-timeout"] = `${MAX_UPSTREAM_TIMEOUT_MS / 1000}S`;
      }
      up = upstreamSession(upstreamAddress(stream)).request(headers);
    } catch (err) {
      respondStatus(stream, status.UNAVAILABLE, `the node's main thread: ${String(err)}`, null);
      return;
    }
    let responded = false;
    let trailersOnly = false;
    let trailers: Fields | null = null;
    /** The client's bytes not passed upstream while its answers wait for its window. */
    let held: Buffer[] = [];
    let endHeld = false;
    const pass = (chunk: Buffer): void => {
      up.write(chunk, () => stream.consumed(chunk.length));
    };
    up.on("error", () => undefined); // its close follows
    up.on("response", (h: IncomingHttpHeaders, flags: number) => {
      if (stream.closed) return;
      responded = true;
      trailersOnly = (flags & NGHTTP2_FLAG_END_STREAM) !== 0;
      stream.sendHeaders(encodeHeaders(fieldsOf(h, ":status")), trailersOnly);
    });
    up.on("trailers", (t: IncomingHttpHeaders) => {
      trailers = fieldsOf(t, null);
    });
    // Messages both ways, each side at the other's pace.
    up.on("data", (chunk: Buffer) => {
      // Past the connection's output bound the connection ends, and with it this stream.
      if (stream.closed || !stream.connection.admitOutput(chunk.length)) return;
      stream.sendData(chunk);
      if (stream.queuedBytes > PROXY_HIGH_WATER) up.pause();
    });
    stream.onDrain = () => {
      if (!up.isPaused()) return;
      up.resume();
      if (up.closed || up.writableEnded) return;
      const chunks = held;
      held = [];
      for (const chunk of chunks) pass(chunk);
      if (endHeld) up.end();
    };
    stream.onData = (chunk) => {
      if (up.closed || up.writableEnded) {
        stream.consumed(chunk.length);
        return;
      }
      if (opening !== null && !opening.take(chunk.length)) {
        up.close(NGHTTP2_CANCEL);
        stream.consumed(chunk.length);
        return;
      }
      try {
        guard.check(chunk);
      } catch (err) {
        const wire = err as WireError;
        up.close(NGHTTP2_CANCEL);
        stream.consumed(chunk.length);
        if (stream.headersSent) stream.reset(ErrorCode.CANCEL);
        else refuseWire(stream, wire, opening === null); // a client's: INVALID_ARGUMENT
        return;
      }
      // Passed whole, a peer's first message is upstream's to take or refuse.
      if (guard.firstPassed) opening?.end();
      if (up.isPaused()) held.push(chunk);
      else pass(chunk);
    };
    stream.onEnd = () => {
      if (up.closed) return;
      if (held.length > 0) endHeld = true;
      else up.end();
    };
    up.on("end", () => {
      if (!responded || trailersOnly || stream.closed) return;
      stream.sendTrailers(
        encodeHeaders(
          trailers ?? statusFields(status.INTERNAL, "the call ended without a status", null, false),
        ),
      );
    });
    up.on("close", () => {
      if (stream.closed) return;
      if (!responded) {
        respondStatus(stream, status.UNAVAILABLE, "the node's main thread ended the call", null);
      } else if (
        up.rstCode !== undefined &&
        up.rstCode !== NGHTTP2_NO_ERROR &&
        !stream.localEnded
      ) {
        stream.reset(ErrorCode.INTERNAL_ERROR);
      }
    });
    const closed = stream.onClose;
    stream.onClose = (complete) => {
      closed?.(complete);
      if (!up.closed) up.close(NGHTTP2_CANCEL);
    };
  }

  /** When this front end last reported each of the node's bounds (connection-slots.ts). */
  const boundReportedAt = new Map<FrontEndEvent["code"], number>();

  /** Reports `code`'s event (made only then) at most once a second: a flood makes one a second. */
  function reportBound(
    code: FrontEndEvent["code"],
    event: () => Omit<FrontEndEvent, "code">,
  ): void {
    const now = performance.now();
    if (now - (boundReportedAt.get(code) ?? -Infinity) < 1000) return;
    boundReportedAt.set(code, now);
    report({ code, ...event() });
  }

  /** Answers a call past one of the node's bounds, RESOURCE_EXHAUSTED, and reports it. */
  function refuseCall(
    stream: ServerStream,
    code: "CAIRN_ERR_BACKPRESSURE" | "CAIRN_ERR_STREAMS_FULL" | "CAIRN_ERR_REQUEST_TOO_SLOW",
    message: string,
    refused: number,
  ): void {
    respondStatus(stream, status.RESOURCE_EXHAUSTED, message, [[ERROR_CODE_KEY, code]]);
    reportBound(code, () => ({
      peer: stream.connection.peer,
      message: `${message} (${refused} refused since start)`,
      method: stream.path,
    }));
  }

  /** Answers a request the node has no room to receive (`rpc.max_incoming_request_bytes`). */
  function refuseIncoming(stream: ServerStream, bounds: ConnectionSlots, refusal: Refusal): void {
    const message =
      refusal === "address"
        ? `this client address holds ${bounds.incomingPerAddress} bytes of requests still ` +
          `arriving or waiting to run (its share of rpc.max_incoming_request_bytes); try again later`
        : `the node holds rpc.max_incoming_request_bytes (${bounds.incomingBytes}) of requests ` +
          `still arriving or waiting to run; try again later`;
    refuseCall(stream, "CAIRN_ERR_BACKPRESSURE", message, bounds.refusedIncoming);
  }

  /** Answers a streaming call the node has no slot of `rpc.max_client_streams` for. */
  function refuseStream(stream: ServerStream, bounds: ConnectionSlots): void {
    const message = `the node holds rpc.max_client_streams (${bounds.streams}) streaming calls; try again later`;
    refuseCall(stream, "CAIRN_ERR_STREAMS_FULL", message, bounds.refusedStreams);
  }

  /**
   * Proxies a client's streaming call once it has one of the node's `rpc.max_client_streams`
   * slots, given back when the stream closes; answers RESOURCE_EXHAUSTED without one. A node
   * with no bounds proxies it as it is.
   */
  function proxyBounded(stream: ServerStream, maxReceive: number): void {
    const bounds = nodeBounds;
    if (bounds === null) {
      proxy(stream, maxReceive, null);
      return;
    }
    if (!bounds.takeStream()) {
      refuseStream(stream, bounds);
      return;
    }
    stream.onClose = () => bounds.releaseStream();
    proxy(stream, maxReceive, null);
  }

  /**
   * Opens a peer's streaming call (Stream, InstallSnapshot). Until its first message is whole
   * the call is anyone's: `cairn-peer` is only a claim, and the receiver looks at who sends it
   * in that message, at once. It took the peers' limit (128 MiB) from its first byte, uncounted
   * and untimed: one connection that announced 128 MiB first messages on 12 streams took a node
   * from 134 MiB to 2.3 GiB in 9 s, with up to 1,000 streams a connection. So until then the
   * call is held to `max` and counted as a client's: a slot of `rpc.max_client_streams` (but from
   * a member's address, whose streams clients that fill the slots must not keep out), its bytes
   * in `rpc.max_incoming_request_bytes`, and `rpc.request_receive_timeout_ms` to send it. Null:
   * refused (answered RESOURCE_EXHAUSTED).
   */
  function openPeerCall(stream: ServerStream, max: number): PeerOpening | null {
    const bounds = nodeBounds;
    const from = bounds?.incomingSource(stream.connection.socket.remoteAddress);
    const slot = bounds !== null && from?.member !== true;
    if (slot && !bounds.takeStream()) {
      refuseStream(stream, bounds);
      return null;
    }
    stream.timedRequest = true;
    let open = true;
    let counted = 0;
    const opening: PeerOpening = {
      max,
      take(bytes) {
        if (!open || bounds === null) return true;
        const refusal = bounds.takeIncoming(bytes, from);
        if (refusal === null) {
          counted += bytes;
          return true;
        }
        opening.end();
        refuseIncoming(stream, bounds, refusal);
        return false;
      },
      end() {
        if (!open) return;
        open = false;
        stream.timedRequest = false;
        bounds?.releaseIncoming(counted, from);
        if (slot) bounds.releaseStream();
      },
    };
    stream.onClose = () => opening.end();
    return opening.take(stream.headerBytes) ? opening : null;
  }

  // ── the server ─────────────────────────────────────────────────────────────────────────────

  function onStream(stream: ServerStream): void {
    if (stream.method !== "POST") {
      // gRPC is POST only; anything else is a malformed request, reset as nghttp2 resets one.
      stream.reset(ErrorCode.PROTOCOL_ERROR);
      return;
    }
    if (!isGrpcProto(stream.header("content-type"))) {
      stream.sendHeaders(UNSUPPORTED_MEDIA_TYPE, true);
      return;
    }
    const path = stream.path;
    const method = methods.get(path);
    const cls = method?.cls ?? methodClassOf(path);
    // With peer TLS, a peer method's caller that presented a certificate is checked by it below
    // (refusedPeer): a node's is a client's too when one CA signs both. One that presented none
    // is asked here first, so that a client's token is refused as a client's (PERMISSION_DENIED),
    // not for the certificate a peer lacks (UNAUTHENTICATED), and a bad token as a bad token.
    const byCertificate = cls === "peer" && peerTls && identityOfConnection.has(stream.connection);
    if (gate !== null && !byCertificate && refused(gate, stream, path, cls)) {
      // Answered, before anything else (an unknown method too: no credentials, no answer that
      // tells which methods exist); the call never reaches a handler.
    } else if (method === undefined) {
      respondStatus(
        stream,
        status.UNIMPLEMENTED,
        `The server does not implement the method ${echoed(path)}`,
        null,
      );
    } else if (method.peer && !isNodeId(stream.header(PEER_KEY))) {
      respondStatus(
        stream,
        status.PERMISSION_DENIED,
        `${path} is for the cluster's nodes only, and the call does not come from one (no ${PEER_KEY} metadata)`,
        null,
      );
    } else if (method.peer && peerTls && refusedPeer(stream, path)) {
      // answered
    } else if (misdirectedPeerCall(stream, path)) {
      // A peer's call must reach the worker that owns its groups: one that names none comes
      // from a node that runs no shard workers (a configuration mistake).
      respondStatus(
        stream,
        status.FAILED_PRECONDITION,
        `this node runs ${tunnels?.count ?? 1} shard workers: a peer's calls must name one (every member of a cluster must run the same shard_workers)`,
        null,
      );
    } else if (method.unary) {
      unary(stream, method.index, method.maxReceive, !method.peer);
    } else if (method.peer) {
      const opening = openPeerCall(stream, method.openingMax);
      if (opening !== null && !rawStream(stream, method.index, method.maxReceive, opening)) {
        proxy(stream, method.maxReceive, opening);
      }
    } else {
      // A server-streaming call (Meta.WatchCluster, health Watch) starts once its one request
      // has arrived: until then it holds a stream of the node's bound for nothing.
      stream.timedRequest = method.oneRequest;
      if (!rawStream(stream, method.index, method.maxReceive, null)) {
        proxyBounded(stream, method.maxReceive);
      }
    }
  }

  /**
   * Answers a call its caller may not make (call-auth.ts) with UNAUTHENTICATED or
   * PERMISSION_DENIED and reports it (counted and logged by the main thread); false when it may
   * run.
   */
  function refused(gate: CallGate, stream: ServerStream, path: string, cls: MethodClass): boolean {
    const refusal = gate.check(stream.connection, path, cls, stream.header("authorization"));
    if (refusal === null) return false;
    respondStatus(stream, refusal.code, refusal.reason, [[ERROR_CODE_KEY, refusal.errorCode]]);
    report({
      code: refusal.errorCode,
      peer: stream.connection.peer,
      message: refusal.reason,
      method: path,
    });
    return true;
  }

  /**
   * With peer TLS, a peer's call whose connection's certificate is not the peer CA's or does not
   * name the node the call says it comes from: answered (UNAUTHENTICATED without a certificate,
   * PERMISSION_DENIED otherwise) and reported; true when it was.
   */
  function refusedPeer(stream: ServerStream, path: string): boolean {
    const identity = identityOfConnection.get(stream.connection) ?? null;
    const sender = stream.header(PEER_KEY) as string;
    const refusal = peerIdentityRefusal(identity, sender);
    if (refusal === null) return false;
    respondStatus(
      stream,
      identity === null ? status.UNAUTHENTICATED : status.PERMISSION_DENIED,
      `${path} is refused: ${refusal}`,
      null,
    );
    report({
      code: "CAIRN_ERR_PEER_REFUSED",
      peer: stream.connection.peer,
      message: `a call of ${path} as node ${JSON.stringify(sender)}: ${refusal}`,
    });
    return true;
  }

  /**
   * A call of the peers' service that names no shard worker: not on a tunnel to this worker, nor
   * a stream with the worker in its metadata (a snapshot, proxied to it).
   */
  function misdirectedPeerCall(stream: ServerStream, path: string): boolean {
    return (
      tunnels !== undefined &&
      path.startsWith(tunnels.peerService) &&
      !tunneled.has(stream.connection) &&
      stream.header(SHARD_WORKER_KEY) === undefined
    );
  }

  const connections = new Set<ServerConnection>();
  let onConnectionsClosed: (() => void) | null = null;

  let shutDown = false;

  /** The connections that came through a tunnel to this worker (worker-tunnel.ts). */
  const tunneled = new WeakSet<ServerConnection>();
  /** What the verified certificate of each TLS connection that presented one says. */
  const identityOfConnection = new WeakMap<ServerConnection, TlsIdentity>();
  /** The peers' calls need a peer certificate (tls.peer_ca_file). */
  const peerTls = setup.tls?.peerCaFile !== undefined;

  function serveConnection(
    socket: Socket,
    throughTunnel: boolean,
    identity: TlsIdentity | null,
  ): void {
    const connection: ServerConnection = new ServerConnection(
      socket,
      {
        onStream,
        onClose: () => {
          connections.delete(connection);
          idle.delete(connection);
          answering.delete(connection);
          if (connections.size === 0) onConnectionsClosed?.();
        },
        onError: (err) =>
          report({
            code: "CAIRN_ERR_CONNECTION_INTERNAL",
            peer: connection.peer,
            message: err instanceof Error ? (err.stack ?? err.message) : String(err),
          }),
        onLimit: (what) =>
          report({ code: "CAIRN_ERR_CONNECTION_LIMIT", peer: connection.peer, message: what }),
        onInputDone: dispatchReady,
        onOutputRoom,
      },
      connectionOptions,
    );
    connections.add(connection);
    gate?.connected(connection, socket, identity);
    if (throughTunnel) tunneled.add(connection);
    if (identity !== null) identityOfConnection.set(connection, identity);
  }

  /**
   * The idle timeout (FrontEndLimits.idleTimeoutMs): a sweep every quarter of it notes each
   * connection with no stream open and none opened since the last sweep (its count of streams
   * opened, then); one still so a full timeout later gets GOAWAY and ends. No timer per call.
   */
  const idle = new Map<ServerConnection, { opened: number; since: number }>();
  const idleSweep = everyQuarterOf(limits.idleTimeoutMs, sweepIdle);

  function sweepIdle(): void {
    const now = performance.now();
    for (const c of connections) {
      const mark = idle.get(c);
      if (
        c.openStreams > 0 ||
        c.isDone ||
        (mark !== undefined && mark.opened !== c.streamsOpened)
      ) {
        idle.delete(c);
        if (c.openStreams === 0 && !c.isDone) idle.set(c, { opened: c.streamsOpened, since: now });
      } else if (mark === undefined) {
        idle.set(c, { opened: c.streamsOpened, since: now });
      } else if (now - mark.since >= limits.idleTimeoutMs) {
        idle.delete(c);
        c.goAway();
      }
    }
  }

  /**
   * The request receive timeout (FrontEndLimits.requestReceiveTimeoutMs): a request that does
   * not arrive whole holds its stream and its bytes (`rpc.max_incoming_request_bytes`), and its
   * connection is never idle; a server-streaming call's holds a slot of `rpc.max_client_streams`,
   * and so does a peer's streaming call until its first message is whole (openPeerCall).
   * A sweep every quarter of the timeout walks the open streams and notes when it first saw each
   * timed request (ServerStream.timedRequest) still arriving; one still arriving a full timeout
   * later is answered RESOURCE_EXHAUSTED unrun (its bytes given back as the stream closes).
   * The calls held behind their connection's answers (Answering) are walked the same way, and
   * one held a full timeout is answered the same. Nothing per call: a request that arrives (or
   * runs) between two sweeps is never seen. WeakMaps, looked up only from the walk: a Map kept
   * every stream it saw, and so the bytes of its request, until the next sweep (800 MiB of a
   * flood of 1 MiB Puts stayed reachable for 15 s).
   */
  let arriving = new WeakMap<ServerStream, number>();
  let waitingToRun = new WeakMap<ServerStream, number>();
  const arrivalSweep = everyQuarterOf(limits.requestReceiveTimeoutMs, sweepArriving);

  function sweepArriving(): void {
    const now = performance.now();
    const timeout = limits.requestReceiveTimeoutMs;
    const seen = new WeakMap<ServerStream, number>();
    for (const c of connections) {
      if (c.openStreams === 0) continue;
      for (const stream of c.openStreamList()) {
        if (!stream.timedRequest || stream.remoteEnded || stream.closed) continue;
        const since = arriving.get(stream) ?? now;
        if (now - since < timeout) seen.set(stream, since);
        else requestTooSlow(stream);
      }
    }
    arriving = seen;
    const held = new WeakMap<ServerStream, number>();
    for (const state of answering.values()) {
      for (const id of state.held?.ids ?? []) {
        const stream = waiting.get(id);
        if (stream === undefined) continue; // closed: its bytes given back
        const since = waitingToRun.get(stream) ?? now;
        if (now - since < timeout) held.set(stream, since);
        else heldTooLong(stream);
      }
    }
    waitingToRun = held;
  }

  /** A held call that waited a full timeout: answered unrun, its bytes given back as it closes. */
  function heldTooLong(stream: ServerStream): void {
    nodeBounds?.countTooSlow();
    refuseCall(
      stream,
      "CAIRN_ERR_REQUEST_TOO_SLOW",
      `the call waited over rpc.request_receive_timeout_ms (${limits.requestReceiveTimeoutMs} ms) for its connection's earlier calls to be answered and their answers read; it was not run`,
      nodeBounds?.tooSlow ?? 0,
    );
  }

  function requestTooSlow(stream: ServerStream): void {
    const ms = limits.requestReceiveTimeoutMs;
    nodeBounds?.countTooSlow();
    // Answered already (a handler that does not wait for its request): cut.
    if (stream.headersSent) stream.reset(ErrorCode.CANCEL);
    else
      refuseCall(
        stream,
        "CAIRN_ERR_REQUEST_TOO_SLOW",
        `the request did not arrive whole within rpc.request_receive_timeout_ms (${ms} ms); it was not run`,
        nodeBounds?.tooSlow ?? 0,
      );
  }

  /** Sockets whose first bytes are awaited (a CONNECT to a shard worker, or HTTP/2). */
  const sniffing = new Set<Socket>();

  /**
   * Reads a connection's first bytes: a CONNECT for a worker, or HTTP/2 to serve here. `workers`
   * is undefined for a node without shard workers, which refuses every CONNECT. `stage`:
   *
   * - "tcp": a new connection. With TLS on (`tls`) it must open a TLS handshake, handed to
   *   `tls`, whose TLS socket comes back here as "tls"; or, with shard workers, it may open with
   *   a peer's cleartext CONNECT (worker-tunnel.ts), whose answer is followed by TLS ("tunnel").
   * - "tunnel": a tunnel to this worker opened in cleartext on a TLS port: TLS must follow.
   * - "tls": the first decrypted bytes of a TLS connection; `identity`, its certificate's.
   */
  function sniff(
    socket: Socket,
    workers: WorkerTunnels | undefined,
    stage: "tcp" | "tunnel" | "tls",
    identity: TlsIdentity | null = null,
  ): void {
    sniffing.add(socket);
    let head: Buffer = Buffer.alloc(0);
    // A client that sends nothing (or a CONNECT that never ends) is not kept.
    const timer = setTimeout(() => socket.destroy(), limits.handshakeTimeoutMs);
    timer.unref();
    const stop = (): void => {
      clearTimeout(timer);
      socket.off("data", onData);
      sniffing.delete(socket);
    };
    const onData = (chunk: Buffer): void => {
      head = head.length === 0 ? chunk : Buffer.concat([head, chunk]);
      if (
        stage === "tunnel" ||
        (stage === "tcp" && (tls !== null || head[0] === TLS_HANDSHAKE_BYTE))
      ) {
        const tlsStarts = tls !== null && head[0] === TLS_HANDSHAKE_BYTE;
        // A peer's cleartext CONNECT to a shard worker, on a TLS port: TLS follows the answer.
        const clearConnect =
          stage === "tcp" && tls !== null && workers !== undefined && head[0] === CONNECT_BYTE;
        if (!clearConnect) {
          stop();
          socket.pause();
          if (tlsStarts) {
            socket.unshift(head);
            (tls as TlsFront).accept(socket, stage === "tunnel");
          } else {
            refuseMismatch(socket, head);
          }
          return;
        }
      }
      const request = readTunnelRequest(head);
      if (request.kind === "partial") return;
      stop();
      socket.pause();
      if (request.kind === "http2") {
        socket.unshift(head);
        serveConnection(socket, false, identity);
        socket.resume();
      } else if (request.kind === "refused") {
        socket.end(request.answer);
      } else if (request.count !== (workers?.count ?? 1)) {
        socket.end(
          tunnelAnswer(
            421,
            `this node runs ${workers?.count ?? 1} shard workers and the caller ${request.count}: every member of a cluster must run the same shard_workers`,
          ),
        );
      } else if (workers === undefined) {
        socket.end(tunnelAnswer(421, "this node runs no shard workers"));
      } else {
        // A cleartext client sends its HTTP/2 preface without waiting for the answer: what came
        // after the CONNECT goes with the connection. (A TLS client waits for the answer.)
        const rest =
          request.rest > 0 ? Buffer.from(head.subarray(head.length - request.rest)) : null;
        if (request.index === workers.index) {
          socket.write(TUNNEL_OPEN);
          if (rest !== null) socket.unshift(rest);
          if (stage === "tcp" && tls !== null) sniff(socket, workers, "tunnel");
          else serveConnection(socket, true, identity);
          socket.resume();
        } else if (stage === "tls") {
          // A TLS session lives in the thread that made it: its descriptor cannot be handed on.
          socket.end(
            tunnelAnswer(
              421,
              `this TLS connection reached shard worker ${workers.index}, not ${request.index}, and a TLS connection cannot be handed between workers: send the CONNECT in cleartext, then start TLS`,
            ),
          );
        } else {
          handOff(socket, request.index, rest, workers);
        }
      }
    };
    socket.on("data", onData);
    socket.on("error", () => undefined); // close follows
    socket.once("close", () => {
      clearTimeout(timer);
      sniffing.delete(socket);
    });
  }

  /**
   * A connection that speaks cleartext to this TLS port, or TLS to this cleartext one: closed at
   * once, with a word for the client where it can read one. An HTTP/2 client gets the server's
   * SETTINGS and GOAWAY INADEQUATE_SECURITY saying why; a CONNECT, an HTTP/1.1 answer; a TLS
   * client nothing (this port speaks no TLS), so it reports the connection closed before the
   * handshake ended.
   */
  function refuseMismatch(socket: Socket, head: Buffer): void {
    const peer = `${socket.remoteAddress ?? "unknown"}:${socket.remotePort ?? 0}`;
    if (tls === null) {
      report({
        code: "CAIRN_ERR_TLS_MISMATCH",
        peer,
        message:
          "a TLS handshake reached this cleartext rpc_addr (no tls.cert_file); its connection was closed: every member of a cluster must run with TLS, or none",
      });
      socket.destroy();
      return;
    }
    const why = "this node serves rpc_addr over TLS only (tls.cert_file): connect with TLS";
    report({
      code: "CAIRN_ERR_TLS_MISMATCH",
      peer,
      message: `a cleartext connection reached this TLS rpc_addr; it was refused (${why})`,
    });
    if (head[0] === 0x50 /* P, the preface's PRI */) {
      socket.end(goAwayInadequateSecurity(why));
    } else if (head[0] === 0x43 /* C, a CONNECT */) {
      socket.end(tunnelAnswer(421, why));
    } else {
      socket.destroy();
    }
  }

  /** Gives worker `to` the socket's connection: a copy of its descriptor, this one closed. */
  function handOff(socket: Socket, to: number, rest: Buffer | null, workers: WorkerTunnels): void {
    // The handle is net.Socket's own (a TCPWrap). This runs inside the read that delivered the
    // CONNECT's last bytes, and reading stops before the descriptor is copied: every later byte
    // is still in the kernel's buffer, for worker `to` to read; those read already go as `rest`.
    const handle = (socket as unknown as { _handle: { fd: number; readStop(): number } | null })
      ._handle;
    let copy = -1;
    try {
      if (handle === null || dupFd === undefined) throw new Error("no descriptor to hand over");
      handle.readStop();
      copy = dupFd(handle.fd);
    } catch (err) {
      socket.end(
        tunnelAnswer(503, `could not hand the connection to shard worker ${to}: ${String(err)}`),
      );
      return;
    }
    socket.destroy();
    workers.handOff(to, copy, rest);
  }

  function adopt(fd: number, rest: Buffer | null): void {
    if (shutDown) {
      closeSync(fd);
      return;
    }
    const socket = new Socket({ fd, readable: true, writable: true });
    // The worker that accepted it took a slot, and gave it back when it closed its copy.
    if (nodeBounds !== null) {
      const from = socket.remoteAddress;
      nodeBounds.adopt(from);
      socket.once("close", () => nodeBounds.release(from));
    }
    socket.setNoDelay(true);
    socket.setKeepAlive(true, 60_000);
    socket.write(TUNNEL_OPEN);
    if (rest !== null) socket.unshift(rest);
    // With TLS on, the tunnel was asked for in cleartext: TLS starts now, in this worker.
    if (tls !== null) sniff(socket, tunnels, "tunnel");
    else serveConnection(socket, true, null);
  }

  /** TLS on rpc_addr (tls-front.ts): null serves cleartext. */
  let tls: TlsFront | null = null;
  let tlsError: string | null = null;
  /** Who may call what (call-auth.ts): null when no authentication is configured (all open). */
  let gate: CallGate | null = null;
  let authError: string | null = null;
  if (setup.auth !== undefined) {
    try {
      gate = new CallGate(setup.auth, report);
    } catch (err) {
      authError = err instanceof Error ? err.message : String(err);
    }
  }
  if (setup.tls !== undefined) {
    try {
      tls = tlsFront(
        setup.tls,
        limits.handshakeTimeoutMs,
        (socket, identity, throughTunnel) => {
          if (throughTunnel) serveConnection(socket, true, identity);
          else sniff(socket, tunnels, "tls", identity);
        },
        report,
      );
    } catch (err) {
      tlsError = err instanceof Error ? err.message : String(err);
    }
  }

  /**
   * Closes a connection accepted past `rpc.max_connections` (`why`: "node") or past
   * `rpc.max_connections_per_ip` ("address") before it costs anything more.
   */
  function refuse(socket: Socket, open: ConnectionSlots, why: Refusal): void {
    const address = socket.remoteAddress ?? "";
    const peer = `${address}:${socket.remotePort ?? ""}`;
    socket.destroy();
    reportBound("CAIRN_ERR_CONNECTIONS_FULL", () => {
      const refused = open.refused;
      return {
        peer,
        message:
          (why === "node"
            ? `the node holds rpc.max_connections (${open.limit}) connections`
            : `${address} holds rpc.max_connections_per_ip (${open.perAddress}) connections`) +
          `; new ones are closed as they are accepted (refused since start: ${refused.node} for ` +
          `the node's bound, ${refused.address} for an address's)`,
      };
    });
  }

  const listener: NetServer = createServer({ noDelay: true }, (socket) => {
    if (nodeBounds !== null) {
      const from = socket.remoteAddress;
      const refusal = nodeBounds.take(from);
      if (refusal !== null) {
        refuse(socket, nodeBounds, refusal);
        return;
      }
      socket.once("close", () => nodeBounds.release(from));
    }
    // Dead clients are found by TCP keepalive (grpc-js's server would send HTTP/2 pings).
    socket.setKeepAlive(true, 60_000);
    sniff(socket, tunnels, "tcp");
  });
  listener.once("error", (err: NodeJS.ErrnoException) => {
    port.postMessage({ kind: "listen-error", code: err.code ?? null, message: err.message });
  });
  if (tlsError !== null) {
    gate?.close();
    port.postMessage({ kind: "listen-error", code: "CAIRN_ERR_TLS_FILE", message: tlsError });
  } else if (authError !== null) {
    port.postMessage({
      kind: "listen-error",
      code: "CAIRN_ERR_AUTH_TOKENS_FILE",
      message: authError,
    });
  } else {
    listener.listen({ host: setup.host, port: setup.port, reusePort: true }, () => {
      listener.removeAllListeners("error");
      const address = listener.address();
      port.postMessage({
        kind: "listening",
        port: typeof address === "object" && address !== null ? address.port : setup.port,
      });
    });
  }

  /** Stops accepting, lets the connections' calls finish (GOAWAY), cuts them at the deadline. */
  function shutdown(deadlineMs: number): void {
    shutDown = true;
    if (idleSweep !== null) clearInterval(idleSweep);
    if (arrivalSweep !== null) clearInterval(arrivalSweep);
    if (listener.listening) listener.close();
    tls?.close();
    gate?.close();
    for (const socket of sniffing) socket.destroy();
    sniffing.clear();
    const done = (): void => {
      onConnectionsClosed = null;
      clearTimeout(timer);
      for (const c of connections) c.destroy();
      for (const session of upstreams.values()) session.destroy();
      port.postMessage({ kind: "closed" });
    };
    const timer = setTimeout(done, deadlineMs);
    if (connections.size === 0) {
      done();
      return;
    }
    onConnectionsClosed = done;
    for (const c of connections) c.goAway();
  }

  port.on("message", (msg: ReplyBatch | { kind: "shutdown"; deadlineMs: number }) => {
    if (msg.kind === "replies") onReplies(msg);
    else shutdown(msg.deadlineMs);
  });

  function flushNow(): void {
    for (const c of connections) c.flushNow();
  }

  return { answer, flushNow, adopt };
}

/** Whether `value` is a node id (src/config: 1–128 of letters, digits, '.', '_', '-'). */
function isNodeId(value: string | undefined): boolean {
  if (value === undefined || value.length === 0 || value.length > 128) return false;
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    const ok =
      (c >= 0x61 && c <= 0x7a) ||
      (c >= 0x41 && c <= 0x5a) ||
      (c >= 0x30 && c <= 0x39) ||
      c === 0x2e ||
      c === 0x5f ||
      c === 0x2d;
    if (!ok) return false;
  }
  return true;
}
