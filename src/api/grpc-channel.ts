/**
 * A gRPC channel to one peer node, for the node's own calls to the others (forwarded KV calls,
 * ReadIndex/ProposeMeta, the Raft client streams): gRPC over our own HTTP/2 client
 * (h2/client.ts), the counterpart of the front end's server, with no gRPC library in between.
 * grpc-js's client spends most of a small call's CPU in its interceptor and filter stacks and in
 * node:http2's per-stream objects; a call here is one object, a stream object and a few buffers.
 *
 * - **Connection.** One at a time, opened by the first call that needs it (TCP no-delay,
 *   keepalive 60 s), ready once the server's SETTINGS arrive. A connection that fails before it is
 *   ready (refused, timed out, not HTTP/2) starts a backoff: calls fail at once, UNAVAILABLE,
 *   until it expires; the next call then connects again. A connection the server sends GOAWAY
 *   on finishes its calls while the next call opens a new one.
 * - **Calls.** Request headers are HPACK-encoded once per path; a call adds its `grpc-timeout`
 *   and metadata. Messages are never compressed; a compressed response is an error (INTERNAL).
 *   Message sizes are checked both ways (RESOURCE_EXHAUSTED). Metadata values are strings; a
 *   `-bin` key's value is its base64 text, as on the wire.
 * - **Statuses.** A call always ends with a status, never an exception or a rejection: the
 *   server's (`grpc-status`, `grpc-message` percent-decoded, trailing metadata), or one of the
 *   client's own: DEADLINE_EXCEEDED (the deadline, enforced here as well as sent), CANCELLED,
 *   UNAVAILABLE (no connection, or it broke), INTERNAL (a malformed response).
 *
 * Invariant: `sent` is false only when no byte of the request can have reached the server — no
 * connection, the backoff, the call still waiting for a stream when it ended, or the server
 * refusing the stream unprocessed (REFUSED_STREAM, or above its GOAWAY's last stream id). A
 * caller may then tell its own client the request was not applied; any other failure may have
 * been applied.
 *
 * With `shardWorker`, each connection first asks the node for that shard worker (an HTTP CONNECT,
 * worker-tunnel.ts); a refusal fails the connection before it is ready, like a refused connect.
 *
 * With `tls` (peer TLS, src/common/peer-tls.ts), every connection is TLS (ALPN h2): the node's
 * certificate presented, the peer's checked against the peer CA and the node id dialed. With a
 * shard worker, the CONNECT and its answer go in cleartext and TLS starts after them
 * (CoreOptions.startTls). A handshake that fails fails the connection before it is ready, its
 * reason said (TLS_FAILED), and a peer that does not speak TLS is named as such.
 *
 * An HTTP CONNECT proxy named by the environment (`grpc_proxy`, `https_proxy`, `http_proxy`,
 * `no_grpc_proxy`, `no_proxy`, read as grpc-js reads them: proxy.ts) carries the connections.
 *
 * Implementation caveats: no retries (a refused call is the caller's to retry); no
 * name resolution beyond what net.connect does; no compression; no server-streaming calls (no
 * peer call needs them); a response's initial metadata is not surfaced, only its trailers.
 */
import { connect, type Socket } from "node:net";
import { connect as tlsConnect, type TLSSocket } from "node:tls";
import type { PeerDial } from "../common/peer-tls.ts";
import { type Proxy, proxyFor, tunnel } from "./proxy.ts";
import { workerAuthority } from "./worker-tunnel.ts";
import { PEER_KEY } from "./wire.ts";
import { Metadata as GrpcMetadata, status } from "@grpc/grpc-js";
import { frame } from "./grpc-wire.ts";
import {
  ClientConnection,
  type ClientConnectionOptions,
  TUNNEL_REFUSED,
  type ClientStream,
  DEFAULT_CLIENT_OPTIONS,
  type ClientStreamHandler,
  type StreamEnd,
} from "./h2/client.ts";
import { ErrorCode } from "./h2/core.ts";
import { encodeHeaders, type HeaderList } from "./h2/hpack.ts";
import { isProtocolHeader } from "./handoff.ts";
import { type CallCut, deadlineClock } from "../common/index.ts";

/** Request metadata: lower-case names; a `-bin` name's value is base64. */
export type Metadata = readonly (readonly [string, string])[];

export interface GrpcChannelOptions {
  /** The largest message sent or received; beyond it the call fails RESOURCE_EXHAUSTED. */
  readonly maxMessageBytes: number;
  /** How long calls fail at once after a connection attempt failed (default 1000 ms). */
  readonly reconnectBackoffMs?: number;
  /** How long a connection may take to be ready: TCP, then the server's SETTINGS (default 20 s). */
  readonly connectTimeoutMs?: number;
  /**
   * An HTTP/2 PING this often on the connection, which is destroyed when one goes unanswered for
   * `keepaliveTimeoutMs` (default 20 s): its calls fail UNAVAILABLE and the next one reconnects.
   * Default 0: none (TCP keepalive after 60 s idle).
   */
  readonly keepaliveMs?: number;
  readonly keepaliveTimeoutMs?: number;
  /**
   * Talk to shard worker `index` of the node, which runs `count` of them as this one does
   * (worker-tunnel.ts): each connection opens with a CONNECT naming it. Absent: the node runs
   * no shard workers.
   */
  readonly shardWorker?: { readonly index: number; readonly count: number };
  /**
   * This node's id, for a channel to a peer: every call carries it (`cairn-peer`), as a node's
   * front end asks of the peers' methods.
   */
  readonly peerId?: string;
  /**
   * TLS: how to dial the peer now (PeerTls.dial, with the node id its certificate must name).
   * Absent: cleartext.
   */
  readonly tls?: () => PeerDial;
}

/** How a connection's close reason starts when its TLS handshake failed. */
export const TLS_FAILED = "TLS with the peer failed";

/**
 * Why a TLS connection that never completed its handshake ended, in an operator's words: a peer
 * that answered in cleartext, or closed on the handshake, does not speak TLS.
 */
function tlsFailure(reason: string): string {
  const cleartext =
    /wrong version number|packet length too long|unknown protocol|record layer failure|disconnected before secure TLS|ECONNRESET|socket hang up|before the server's SETTINGS/i.test(
      reason,
    );
  return cleartext
    ? `${TLS_FAILED}: the peer did not speak TLS (${reason}); every member of a cluster with TLS needs tls.cert_file, tls.key_file and tls.peer_ca_file`
    : `${TLS_FAILED}: ${reason}`;
}

export interface UnaryOptions {
  /** Epoch ms; Infinity for none. */
  readonly deadline: number;
  readonly metadata?: Metadata;
  /** Cancels the call when cut (CANCELLED). */
  readonly cut?: CallCut;
}

export interface StreamOptions {
  readonly metadata?: Metadata;
  /** Epoch ms; Infinity (the default) for none. */
  readonly deadline?: number;
  readonly cut?: CallCut;
}

/** How a call ended. */
export interface CallResult {
  /** The gRPC status code. */
  readonly code: number;
  readonly details: string;
  /** The response message, when `code` is OK. */
  readonly message: Buffer | null;
  /** Trailing metadata (for a trailers-only response, its only metadata), without gRPC's own. */
  readonly trailers: readonly [string, string][];
  /** False only when the server cannot have seen any of the request (see the module doc). */
  readonly sent: boolean;
}

export type UnaryResult = CallResult;

/** A long-lived client-streaming call. */
export interface ClientCall {
  /**
   * Sends one message. `cb` is called once its bytes are handed to the socket, or with the error
   * that ended the call first; the caller bounds what it writes by `bufferedBytes`.
   */
  write(message: Uint8Array, cb?: (err: Error | null) => void): void;
  /** Bytes written and not yet handed to the socket (most waiting for the server's window). */
  readonly bufferedBytes: number;
  /** Half-closes: the server's answer follows. */
  end(): void;
  /** Ends the call at once, CANCELLED (the server sees RST_STREAM). */
  cancel(): void;
  /** The server accepted the call (its response headers arrived); not called for an error-only answer. */
  onHeaders: (() => void) | null;
  /** The call ended; called exactly once, in a later tick than what ended it. */
  onEnd: ((result: CallResult) => void) | null;
}

/**
 * Trailing metadata as grpc-js carries it, for callers that pass it on (a -bin value decoded).
 * Never throws: the pairs come from a peer (a server's trailers, a RaftFrame.reply), and one
 * grpc-js refuses (a key with capitals, a value with a newline) is dropped, as toMetadata
 * (handoff.ts) drops it; thrown, it failed a forward's promise, which nothing catches.
 */
export function metadataOf(trailers: readonly (readonly [string, string])[]): GrpcMetadata {
  const metadata = new GrpcMetadata();
  for (const [key, value] of trailers) {
    try {
      if (key.endsWith("-bin")) metadata.add(key, Buffer.from(value, "base64"));
      else metadata.add(key, value);
    } catch {
      // dropped (see above)
    }
  }
  return metadata;
}

/** The error a ClientCall's write callbacks get when the call ended before their bytes left. */
export class CallEndedError extends Error {
  /** The call's gRPC status code. */
  readonly code: number;
  constructor(code: number, details: string) {
    super(`the call ended (${status[code] ?? code}): ${details}`);
    this.code = code;
  }
}

/** The longest a Node.js timer waits: past it setTimeout fires at once. */
const MAX_TIMER_MS = 0x7fffffff;
const DEFAULT_BACKOFF_MS = 1000;
const DEFAULT_CONNECT_TIMEOUT_MS = 20_000;
/** Messages at least this large are queued after their prefix rather than copied behind it. */
const COPY_LIMIT = 64 * 1024;
const TIMEOUT_NAME = Buffer.from("\x00\x0cgrpc-timeout", "latin1");
const NO_TRAILERS: readonly [string, string][] = Object.freeze([]) as readonly [string, string][];

export class GrpcChannel {
  /** "host:port", as given. */
  readonly address: string;
  readonly #host: string;
  readonly #port: number;
  readonly #maxMessageBytes: number;
  readonly #peerId: string | undefined;
  readonly #backoffMs: number;
  readonly #connectTimeoutMs: number;
  /** The connection new calls go to (null until needed, or after it failed or went away). */
  #current: ClientConnection | null = null;
  /** Every connection not yet closed, the current one and those finishing after a GOAWAY. */
  readonly #connections = new Set<ClientConnection>();
  /** While performance.now() is below it, calls fail at once (0: no backoff). */
  #backoffUntil = 0;
  #connectError = "";
  #closed = false;
  /** Per path, the HPACK block of the headers every call to it sends. */
  readonly #blocks = new Map<string, Buffer>();
  readonly #connectionOptions: ClientConnectionOptions;
  /** The HTTP CONNECT proxy the connections go through, or null. */
  readonly #proxy: Proxy | null;
  readonly #tls: (() => PeerDial) | undefined;

  constructor(address: string, options: GrpcChannelOptions) {
    const colon = address.lastIndexOf(":");
    const port = Number(address.slice(colon + 1));
    if (colon <= 0 || !Number.isInteger(port) || port <= 0 || port > 65_535) {
      throw new Error(`not a host:port address: ${address}`);
    }
    this.address = address;
    this.#host = address.slice(0, colon).replace(/^\[(.*)\]$/, "$1");
    this.#port = port;
    this.#maxMessageBytes = options.maxMessageBytes;
    this.#peerId = options.peerId;
    this.#backoffMs = options.reconnectBackoffMs ?? DEFAULT_BACKOFF_MS;
    this.#connectTimeoutMs = options.connectTimeoutMs ?? DEFAULT_CONNECT_TIMEOUT_MS;
    this.#proxy = proxyFor(this.#host);
    this.#tls = options.tls;
    this.#connectionOptions = {
      ...DEFAULT_CLIENT_OPTIONS,
      keepaliveMs: options.keepaliveMs ?? 0,
      keepaliveTimeoutMs: options.keepaliveTimeoutMs ?? DEFAULT_CLIENT_OPTIONS.keepaliveTimeoutMs,
      ...(options.shardWorker === undefined
        ? {}
        : { tunnel: workerAuthority(options.shardWorker.index, options.shardWorker.count) }),
    };
  }

  /** A unary call; the promise never rejects. */
  unary(path: string, message: Uint8Array, options: UnaryOptions): Promise<UnaryResult> {
    const call = new UnaryCall(this.#maxMessageBytes);
    const result = call.promise;
    if (message.length > this.#maxMessageBytes) {
      call.conclude(status.RESOURCE_EXHAUSTED, this.#tooLarge(message.length), false);
    } else if (this.#start(call, path, options.deadline, options.metadata, options.cut)) {
      sendMessage(call.stream as ClientStream, message, true);
    }
    return result;
  }

  /** A client-streaming call; it ends through its `onEnd`. */
  clientStream(path: string, options: StreamOptions = {}): ClientCall {
    const call = new StreamingCall(this.#maxMessageBytes);
    this.#start(call, path, options.deadline ?? Infinity, options.metadata, options.cut);
    return call;
  }

  /**
   * Hands what this turn's calls have framed to the socket now instead of after the turn (for a
   * caller about to block the thread on a synchronous write).
   */
  flush(): void {
    for (const connection of this.#connections) connection.flushNow();
  }

  /** Graceful close: no new calls (UNAVAILABLE, not sent); the calls in flight finish. */
  close(): void {
    this.#closed = true;
    this.#current = null;
    for (const connection of this.#connections) connection.close();
  }

  /** Closes at once: every call in flight fails (UNAVAILABLE; sent if it had been). */
  destroy(): void {
    this.#closed = true;
    this.#current = null;
    for (const connection of [...this.#connections]) {
      connection.destroy(`the channel to ${this.address} was destroyed`);
    }
  }

  /** Starts a call on a stream; false when it ended at once (not sent). */
  #start(
    call: Call,
    path: string,
    deadline: number,
    metadata: Metadata | undefined,
    cut: CallCut | undefined,
  ): boolean {
    if (cut?.isCut === true) {
      call.conclude(status.CANCELLED, "Cancelled on client", false);
      return false;
    }
    let timeoutMs = -1;
    if (deadline !== Infinity) {
      timeoutMs = Math.ceil(deadline - deadlineClock());
      if (timeoutMs <= 0) {
        call.conclude(status.DEADLINE_EXCEEDED, "Deadline exceeded", false);
        return false;
      }
    }
    const connection = this.#connection();
    if (connection === null) {
      const details = this.#closed
        ? `the channel to ${this.address} is closed`
        : `${this.#connectError} (reconnecting after a backoff)`;
      call.conclude(status.UNAVAILABLE, details, false);
      return false;
    }
    const block = this.#headerBlock(path, timeoutMs, metadata);
    call.stream = connection.request(block, false, call);
    if (timeoutMs > 0) call.setTimer(timeoutMs);
    if (cut !== undefined) call.listen(cut);
    return true;
  }

  #connection(): ClientConnection | null {
    const current = this.#current;
    if (current !== null && current.isOpen) return current;
    if (this.#closed) return null;
    if (this.#backoffUntil !== 0) {
      if (performance.now() < this.#backoffUntil) return null;
      this.#backoffUntil = 0;
    }
    return this.#connect();
  }

  #connect(): ClientConnection {
    let ready = false;
    const dial = this.#tls;
    /** The TLS handshake completed (with `tls`). */
    let secured = false;
    /** TLS over `under`, or (null) over a TCP connection of its own. */
    const startTls = (under: Socket | null): TLSSocket => {
      const d = (dial as () => PeerDial)();
      const secure =
        under === null
          ? tlsConnect({ ...d, host: this.#host, port: this.#port })
          : tlsConnect({ ...d, socket: under });
      if (under === null) {
        secure.setNoDelay(true);
        secure.setKeepAlive(true, 60_000);
      }
      secure.once("secureConnect", () => (secured = true));
      // Before the connection's own listener: the handshake's failure, in an operator's words.
      secure.on("error", (err: Error) => {
        if (!secured) connection.closeReason ??= tlsFailure(err.message);
      });
      return secure;
    };
    const tcp = (): Socket =>
      // Through an HTTP CONNECT proxy when the environment names one (proxy.ts), as grpc-js does.
      this.#proxy === null
        ? connect({
            host: this.#host,
            port: this.#port,
            noDelay: true,
            keepAlive: true,
            keepAliveInitialDelay: 60_000,
          })
        : (tunnel(this.#proxy, this.address) as unknown as Socket);
    let socket: Socket;
    let options = this.#connectionOptions;
    if (dial === undefined) {
      socket = tcp();
    } else if (options.tunnel !== undefined) {
      // The CONNECT in cleartext, TLS once it is answered (CoreOptions.startTls).
      socket = tcp();
      options = { ...options, startTls };
    } else {
      socket = startTls(this.#proxy === null ? null : tcp());
    }
    const timer = setTimeout(() => {
      connection.destroy(`connect timed out after ${this.#connectTimeoutMs} ms`);
    }, this.#connectTimeoutMs);
    const connection: ClientConnection = new ClientConnection(
      socket,
      {
        onReady: () => {
          ready = true;
          clearTimeout(timer);
        },
        onGoAway: () => {
          if (this.#current === connection) this.#current = null;
        },
        onClose: () => {
          clearTimeout(timer);
          this.#connections.delete(connection);
          if (this.#current === connection) this.#current = null;
          if (!ready && !this.#closed) {
            // A failed attempt: calls fail fast until the backoff expires (module doc).
            this.#backoffUntil = performance.now() + this.#backoffMs;
            const reason = connection.closeReason ?? "closed before the server's SETTINGS";
            this.#connectError = `connecting to ${this.address} failed: ${
              dial !== undefined &&
              !secured &&
              !reason.startsWith(TUNNEL_REFUSED) &&
              !reason.startsWith(TLS_FAILED)
                ? tlsFailure(reason)
                : reason
            }`;
          }
        },
      },
      options,
    );
    this.#current = connection;
    this.#connections.add(connection);
    return connection;
  }

  /** The request's header block: the path's constant block, then grpc-timeout and metadata. */
  #headerBlock(path: string, timeoutMs: number, metadata: Metadata | undefined): Buffer {
    let base = this.#blocks.get(path);
    if (base === undefined) {
      base = encodeHeaders([
        [":method", "POST"],
        [":scheme", this.#tls === undefined ? "http" : "https"],
        [":path", path],
        [":authority", this.address],
        ["content-type", "application/grpc"],
        ["te", "trailers"],
        ...(this.#peerId === undefined ? [] : [[PEER_KEY, this.#peerId] as const]),
      ]);
      this.#blocks.set(path, base);
    }
    const extra = metadata === undefined || metadata.length === 0 ? null : encodeHeaders(metadata);
    if (timeoutMs < 0 && extra === null) return base;
    const timeout = timeoutMs < 0 ? "" : timeoutValue(timeoutMs);
    const timeoutBytes = timeoutMs < 0 ? 0 : TIMEOUT_NAME.length + 1 + timeout.length;
    const out = Buffer.allocUnsafe(base.length + timeoutBytes + (extra?.length ?? 0));
    let at = base.copy(out, 0);
    if (timeoutMs >= 0) {
      at += TIMEOUT_NAME.copy(out, at);
      out[at++] = timeout.length; // < 127: a one-byte length
      at += out.write(timeout, at, "latin1");
    }
    if (extra !== null) extra.copy(out, at);
    return out;
  }

  #tooLarge(length: number): string {
    return `Sent message larger than max (${length} vs. ${this.#maxMessageBytes})`;
  }
}

/** A grpc-timeout value (at most 8 digits, RFC-style units), rounded up. */
function timeoutValue(ms: number): string {
  if (ms < 100_000_000) return `${ms}m`;
  const s = Math.ceil(ms / 1000);
  if (s < 100_000_000) return `${s}S`;
  return `${Math.min(Math.ceil(s / 3600), 99_999_999)}H`;
}

/** Queues a length-prefixed message; a large one is not copied (its prefix goes before it). */
function sendMessage(stream: ClientStream, message: Uint8Array, endStream: boolean): void {
  if (message.length < COPY_LIMIT) {
    stream.sendData(frame(message), endStream);
    return;
  }
  const prefix = Buffer.allocUnsafe(5);
  prefix[0] = 0;
  prefix.writeUInt32BE(message.length, 1);
  stream.sendData(prefix);
  stream.sendData(Buffer.from(message.buffer, message.byteOffset, message.length), endStream);
}

/** The gRPC code of an HTTP status without grpc-status (gRPC's http-grpc-status-mapping.md). */
function codeOfHttpStatus(httpStatus: number): number {
  switch (httpStatus) {
    case 400:
      return status.INTERNAL;
    case 401:
      return status.UNAUTHENTICATED;
    case 403:
      return status.PERMISSION_DENIED;
    case 404:
      return status.UNIMPLEMENTED;
    case 429:
    case 502:
    case 503:
    case 504:
      return status.UNAVAILABLE;
    default:
      return status.UNKNOWN;
  }
}

/** The gRPC code of a stream the server reset (what grpc-js makes of each RST_STREAM code). */
function codeOfReset(code: number): number {
  switch (code) {
    case ErrorCode.REFUSED_STREAM:
      return status.UNAVAILABLE;
    case ErrorCode.CANCEL:
      return status.CANCELLED;
    case ErrorCode.ENHANCE_YOUR_CALM:
      return status.RESOURCE_EXHAUSTED;
    default:
      return status.INTERNAL;
  }
}

function percentDecode(s: string): string {
  if (!s.includes("%")) return s;
  try {
    return decodeURIComponent(s);
  } catch {
    return s;
  }
}

function expire(call: Call): void {
  call.conclude(status.DEADLINE_EXCEEDED, "Deadline exceeded", call.stream?.opened === true);
}

/**
 * One call's side of its stream: it reads the response (one message, a status) and ends the call
 * exactly once, with the server's status or its own. Subclasses say what ending means.
 */
abstract class Call implements ClientStreamHandler {
  /** The largest message either way. */
  protected readonly max: number;
  stream: ClientStream | null = null;
  done = false;
  #timer: NodeJS.Timeout | null = null;
  #cut: CallCut | null = null;
  /** The response so far: its HTTP status, gRPC status (-1 until read) and trailers. */
  #httpStatus = 0;
  #code = -1;
  #details = "";
  #trailers: readonly [string, string][] = NO_TRAILERS;
  #message: Buffer | null = null;
  /** Bytes of a message not yet complete, and how many it needs in all (-1: its prefix first). */
  #parts: Buffer[] = [];
  #partsBytes = 0;
  #need = -1;

  constructor(max: number) {
    this.max = max;
  }

  setTimer(ms: number): void {
    // A timer fires at once past 2^31-1 ms (24.8 days): a deadline further off waits in steps.
    if (ms > MAX_TIMER_MS) {
      this.#timer = setTimeout(() => this.setTimer(ms - MAX_TIMER_MS), MAX_TIMER_MS);
      return;
    }
    this.#timer = setTimeout(expire, ms, this);
  }

  listen(cut: CallCut): void {
    this.#cut = cut;
    cut.listen(() =>
      this.conclude(status.CANCELLED, "Cancelled on client", this.stream?.opened === true),
    );
  }

  /** Ends the call (once): the stream is cancelled if still open, then `settle`. */
  conclude(
    code: number,
    details: string,
    sent: boolean,
    message: Buffer | null = null,
    trailers: readonly [string, string][] = NO_TRAILERS,
  ): void {
    if (this.done) return;
    this.done = true;
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#cut?.listen(null);
    // A stream done both ways is closing already (onRemoteEnd comes before its close); one still
    // sending, or not answered, is cancelled: RST_STREAM, which servers limit, only then.
    const stream = this.stream;
    if (stream !== null && !stream.closed && !(stream.remoteEnded && stream.localEnded)) {
      stream.reset(ErrorCode.CANCEL);
    }
    this.settle({ code, details, message, trailers, sent });
  }

  protected abstract settle(result: CallResult): void;
  /** The response headers of a call that goes on. */
  protected accepted(): void {}
  onFlushed(_stream: ClientStream): void {}

  onResponse(_stream: ClientStream, headers: HeaderList, endStream: boolean): void {
    this.#httpStatus = Number(headers[1]);
    if (endStream) this.#readStatus(headers);
    else if (this.#httpStatus === 200) this.accepted();
  }

  onData(_stream: ClientStream, chunk: Buffer): void {
    // The body of an HTTP error (a proxy's, say) is not gRPC: the status says it all.
    if (this.done || this.#httpStatus !== 200) return;
    this.#parts.push(chunk);
    this.#partsBytes += chunk.length;
    while (!this.done) {
      if (this.#need < 0) {
        if (this.#partsBytes < 5) return;
        let head = this.#parts[0] as Buffer;
        if (head.length < 5) {
          head = Buffer.concat(this.#parts, this.#partsBytes);
          this.#parts = [head];
        }
        const length = head.readUInt32BE(1);
        if (head[0] !== 0) {
          this.conclude(
            status.INTERNAL,
            "a compressed response (compression is not supported)",
            true,
          );
          return;
        }
        if (length > this.max) {
          const details = `Received message larger than max (${length} vs. ${this.max})`;
          this.conclude(status.RESOURCE_EXHAUSTED, details, true);
          return;
        }
        this.#need = 5 + length;
      }
      if (this.#partsBytes < this.#need) return;
      const parts = this.#parts;
      const all =
        parts.length === 1 ? (parts[0] as Buffer) : Buffer.concat(parts, this.#partsBytes);
      const message = all.subarray(5, this.#need);
      const rest = all.subarray(this.#need);
      this.#parts = rest.length > 0 ? [rest] : [];
      this.#partsBytes = rest.length;
      this.#need = -1;
      if (this.#message !== null) {
        this.conclude(status.UNIMPLEMENTED, "Too many responses received", true);
        return;
      }
      this.#message = message;
    }
  }

  onRemoteEnd(_stream: ClientStream, trailers: HeaderList | null): void {
    if (this.done) return;
    if (trailers !== null) this.#readStatus(trailers);
    let code = this.#code;
    let details = this.#details;
    if (code === -1) {
      code = this.#httpStatus === 200 ? status.UNKNOWN : codeOfHttpStatus(this.#httpStatus);
      details =
        this.#httpStatus === 200
          ? "the response ended without a status"
          : `Received HTTP status code ${this.#httpStatus}`;
    } else if (code === status.OK) {
      if (this.#partsBytes > 0) {
        code = status.INTERNAL;
        details = "the response ended within a message";
      } else if (this.#message === null) {
        code = status.UNIMPLEMENTED;
        details = "No message received";
      }
    }
    const message = code === status.OK ? this.#message : null;
    this.conclude(code, details, true, message, this.#trailers);
  }

  onClose(stream: ClientStream, end: StreamEnd): void {
    if (this.done) return;
    const reason = stream.connection.closeReason;
    switch (end) {
      case "refused":
        this.conclude(
          status.UNAVAILABLE,
          reason ?? "the server refused the call before processing it",
          false,
        );
        return;
      case "reset":
        this.conclude(
          codeOfReset(stream.resetCode),
          `Received RST_STREAM with code ${stream.resetCode}`,
          true,
        );
        return;
      case "lost":
        this.conclude(status.UNAVAILABLE, `the connection was lost: ${reason ?? "closed"}`, true);
        return;
      case "cancelled": // by the connection, for a malformed response
        if (stream.resetCode === ErrorCode.ENHANCE_YOUR_CALM) {
          this.conclude(
            status.RESOURCE_EXHAUSTED,
            "the response's metadata is larger than this side's SETTINGS_MAX_HEADER_LIST_SIZE",
            true,
          );
          return;
        }
        this.conclude(status.INTERNAL, `HTTP/2 stream error ${stream.resetCode}`, true);
        return;
      case "complete": // without onRemoteEnd: cannot happen
        this.conclude(status.INTERNAL, `HTTP/2 stream error ${stream.resetCode}`, true);
        return;
    }
  }

  /** grpc-status, grpc-message and the application metadata of a trailers block. */
  #readStatus(headers: HeaderList): void {
    let trailers: [string, string][] | null = null;
    for (let i = 0; i < headers.length; i += 2) {
      const name = headers[i] as string;
      const value = headers[i + 1] as string;
      if (name === "grpc-status") {
        const code = /^\d{1,2}$/.test(value) ? Number(value) : -1;
        this.#code = code >= 0 && code <= 16 ? code : status.UNKNOWN;
      } else if (name === "grpc-message") {
        this.#details = percentDecode(value);
      } else if (!isProtocolHeader(name)) {
        (trailers ??= []).push([name, value]);
      }
    }
    if (trailers !== null) this.#trailers = trailers;
  }
}

class UnaryCall extends Call {
  readonly promise: Promise<UnaryResult>;
  readonly #resolve: (result: UnaryResult) => void;

  constructor(max: number) {
    super(max);
    const { promise, resolve } = Promise.withResolvers<UnaryResult>();
    this.promise = promise;
    this.#resolve = resolve;
  }

  protected settle(result: CallResult): void {
    this.#resolve(result);
  }
}

class StreamingCall extends Call implements ClientCall {
  onHeaders: (() => void) | null = null;
  onEnd: ((result: CallResult) => void) | null = null;
  #ended = false;
  /** DATA bytes written in all. */
  #written = 0;
  /**
   * Write callbacks waiting, from `#cbHead` on, each with the byte count it waits for. A slot is
   * emptied once its callback is called: this queue lives as long as the call (a peer stream
   * lives for hours), and a callback left in it, with all it reaches (a forwarded request, its
   * promise), stayed alive until the compaction, long enough to be promoted.
   */
  #cbs: (((err: Error | null) => void) | undefined)[] = [];
  #cbAt: number[] = [];
  #cbHead = 0;
  #error: CallEndedError | null = null;

  get bufferedBytes(): number {
    return this.done ? 0 : this.#written - (this.stream?.flushedBytes ?? 0);
  }

  write(message: Uint8Array, cb?: (err: Error | null) => void): void {
    if (this.done || this.#ended) {
      const err = this.#error ?? new Error("write after end()");
      if (cb !== undefined) process.nextTick(cb, err);
      return;
    }
    if (message.length > this.max) {
      this.conclude(
        status.RESOURCE_EXHAUSTED,
        `Sent message larger than max (${message.length} vs. ${this.max})`,
        this.stream?.opened === true,
      );
      if (cb !== undefined) process.nextTick(cb, this.#error);
      return;
    }
    this.#written += 5 + message.length;
    if (cb !== undefined) {
      this.#cbs.push(cb);
      this.#cbAt.push(this.#written);
    }
    sendMessage(this.stream as ClientStream, message, false);
  }

  end(): void {
    if (this.done || this.#ended) return;
    this.#ended = true;
    this.stream?.finish();
  }

  cancel(): void {
    this.conclude(status.CANCELLED, "Cancelled on client", this.stream?.opened === true);
  }

  protected override accepted(): void {
    this.onHeaders?.();
  }

  override onFlushed(stream: ClientStream): void {
    const flushed = stream.flushedBytes;
    const cbs = this.#cbs;
    const at = this.#cbAt;
    let head = this.#cbHead;
    while (head < cbs.length && (at[head] as number) <= flushed && !this.done) {
      const cb = cbs[head] as (err: Error | null) => void;
      cbs[head] = undefined;
      head++;
      this.#cbHead = head;
      cb(null);
    }
    this.#cbHead = head;
    if (head > 1024 && head * 2 > cbs.length) {
      this.#cbs = cbs.slice(head);
      this.#cbAt = at.slice(head);
      this.#cbHead = 0;
    }
  }

  protected settle(result: CallResult): void {
    this.#error = new CallEndedError(result.code, result.details);
    process.nextTick(deliver, this, result);
  }

  /** Called after settle, in a later tick: the write callbacks, then onEnd. */
  deliver(result: CallResult): void {
    const flushed = this.stream?.flushedBytes ?? 0;
    const cbs = this.#cbs;
    for (let i = this.#cbHead; i < cbs.length; i++) {
      (cbs[i] as (err: Error | null) => void)(
        (this.#cbAt[i] as number) <= flushed ? null : this.#error,
      );
    }
    this.#cbs = [];
    this.#cbAt = [];
    this.#cbHead = 0;
    this.onEnd?.(result);
  }
}

function deliver(call: StreamingCall, result: CallResult): void {
  call.deliver(result);
}
