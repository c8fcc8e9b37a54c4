/**
 * The wire between a gRPC I/O thread (io-thread.ts) and the main thread (io-threads.ts): unary
 * calls go to the main thread in batches, one message per event-loop turn, and their answers come
 * back the same way. A batch packs every request's bytes into one buffer (a structured clone of a
 * Buffer view would copy the whole pool it points into) and its numbers into one Float64Array.
 */
import { Metadata } from "@grpc/grpc-js";
import type { TlsFiles } from "../common/tls-files.ts";
import type { TlsIdentity } from "../common/peer-tls.ts";
import type { SharedConnectionSlots } from "./connection-slots.ts";

/** A gRPC method as an I/O thread registers it (its serializers pass bytes through). */
export interface MethodInfo {
  readonly path: string;
  readonly requestStream: boolean;
  readonly responseStream: boolean;
}

/** What the main thread gives an I/O thread at start (workerData). */
export interface IoThreadSetup {
  /** Where to listen (SO_REUSEPORT): every I/O thread of the node binds the same address. */
  readonly host: string;
  readonly port: number;
  /** The main thread's own gRPC server on loopback, which serves the streaming methods. */
  readonly mainAddress: string;
  /** The process's internal key, on every call proxied to mainAddress (wire.ts INTERNAL_KEY). */
  readonly internalKey: string;
  readonly methods: readonly MethodInfo[];
  /**
   * The gRPC server's options, the same as the main thread's: `grpc.max_send_message_length`,
   * and `grpc.max_receive_message_length`, the receive limit of every method but the peers'.
   */
  readonly serverOptions: Readonly<Record<string, number>>;
  /** What a hostile client meets (FrontEndLimits); absent fields take their defaults. */
  readonly limits?: Partial<FrontEndLimits>;
  /** TLS on `port` (tls-front.ts): each thread reads the files itself; absent, cleartext. */
  readonly tls?: TlsFiles;
  /** Who may call what (call-auth.ts): absent when no authentication is configured (all open). */
  readonly auth?: AuthSetup;
  /**
   * The node's count of open connections (`rpc.max_connections`, connection-slots.ts), shared
   * by every front end of the node; absent, connections are not bounded.
   */
  readonly connections?: SharedConnectionSlots;
}

/** What a front end checks callers with (call-auth.ts, authz.ts). */
export interface AuthSetup {
  /** `auth.tokens_file`: each thread reads it and looks at it every second. */
  readonly tokensFile?: string | undefined;
  /** `tls.client_ca_file` is set: a client certificate's subject is an identity. */
  readonly clientCerts: boolean;
}

/**
 * The front end's limits per connection (front-end.ts; docs/operations.md, `rpc.*`). Each bounds
 * what one client can make a node spend; what happens past each is in docs/architecture.md.
 */
export interface FrontEndLimits {
  /** SETTINGS_MAX_CONCURRENT_STREAMS: streams past it are refused (REFUSED_STREAM). */
  readonly maxConcurrentStreams: number;
  /** CONTINUATION frames one header block may take; past it, GOAWAY ENHANCE_YOUR_CALM. */
  readonly maxContinuationFrames: number;
  /** Streams a client may reset a second (burst as many); past it, GOAWAY ENHANCE_YOUR_CALM. */
  readonly maxResetsPerSecond: number;
  /** Unsent output a connection may hold (reading stops at a quarter); past it, destroyed. */
  readonly maxOutputBytes: number;
  /** How long output may wait for a client that does not read before it is destroyed (ms). */
  readonly writeStallTimeoutMs: number;
  /** The preface and first SETTINGS must arrive within this long (ms). */
  readonly handshakeTimeoutMs: number;
  /** A connection with no stream open this long gets GOAWAY and is closed (ms; 0: never). */
  readonly idleTimeoutMs: number;
  /**
   * A one-message request (unary, server-streaming) and a peer's streaming call's first message
   * must arrive whole within this long of their HEADERS, and a call held behind its connection's
   * unread answers may wait this long to run (ms; 0: never).
   */
  readonly requestReceiveTimeoutMs: number;
  /** After GOAWAY and the socket's end, how long the client has to close (ms). */
  readonly goAwayGraceMs: number;
  /** Compressed messages one connection may have inflating at once; past it, queued. */
  readonly maxDecompressions: number;
  /** The receive limit of the peers' methods (cairn.v1.Raft: snapshots, Raft rounds). */
  readonly peerMaxReceive: number;
  /**
   * The receive limit of InstallSnapshot's messages after its header: data chunks and the
   * trailer, the largest a SnapshotChunk of MAX_SNAPSHOT_CHUNK_BYTES of data
   * (src/replication/snapshot-transfer.ts, MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES), which a receiver
   * refuses larger anyway. Held to peerMaxReceive (128 MiB), a caller that claims a node's name
   * and sends a header the receiver takes could have each such stream buffer 128 MiB.
   */
  readonly peerSnapshotMaxReceive: number;
}

export const DEFAULT_FRONT_END_LIMITS: FrontEndLimits = {
  maxConcurrentStreams: 1000,
  maxContinuationFrames: 16,
  maxResetsPerSecond: 1000,
  maxOutputBytes: 16 * 1024 * 1024,
  writeStallTimeoutMs: 10_000,
  handshakeTimeoutMs: 10_000,
  idleTimeoutMs: 300_000,
  requestReceiveTimeoutMs: 60_000,
  goAwayGraceMs: 1000,
  maxDecompressions: 2,
  peerMaxReceive: 4 * 1024 * 1024,
  // MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES (4 MiB of data, 5 bytes of tag and length), which
  // server.ts sets; this side of src/api does not import src/replication.
  peerSnapshotMaxReceive: 4 * 1024 * 1024 + 5,
};

/**
 * What a front end reports to the main thread: a connection that its own code failed on (a bug:
 * logged at ERROR), one ended for going past a limit (WARN), connections refused because the
 * node holds `rpc.max_connections` (WARN, at most one event a second from each front end),
 * clients' streaming calls refused because it holds `rpc.max_client_streams` (the same),
 * requests refused because it holds `rpc.max_incoming_request_bytes` still arriving (the same),
 * requests that did not arrive whole within `rpc.request_receive_timeout_ms` (the same),
 * a client whose certificate mutual TLS refused (WARN), a peer's call refused for its certificate (WARN, counted as a refused
 * peer call), a connection that spoke cleartext to a TLS port or TLS to a cleartext one (WARN),
 * the TLS files or the tokens file reloaded (INFO) or changed but unusable (ERROR), a call
 * refused for its credentials (UNAUTHENTICATED) or its role (PERMISSION_DENIED; counted, logged
 * at WARN without secrets). `code` is stable.
 */
export interface FrontEndEvent {
  readonly code:
    | "CAIRN_ERR_CONNECTION_INTERNAL"
    | "CAIRN_ERR_CONNECTION_LIMIT"
    | "CAIRN_ERR_CONNECTIONS_FULL"
    | "CAIRN_ERR_STREAMS_FULL"
    | "CAIRN_ERR_BACKPRESSURE"
    | "CAIRN_ERR_REQUEST_TOO_SLOW"
    | "CAIRN_ERR_TLS_CLIENT_REFUSED"
    | "CAIRN_ERR_PEER_REFUSED"
    | "CAIRN_ERR_TLS_MISMATCH"
    | "CAIRN_ERR_TLS_RELOAD"
    | "CAIRN_TLS_RELOADED"
    | "CAIRN_ERR_UNAUTHENTICATED"
    | "CAIRN_ERR_PERMISSION_DENIED"
    | "CAIRN_ERR_AUTH_RELOAD"
    | "CAIRN_AUTH_RELOADED";
  /** The client's address (host:port); "" for an event of no connection. */
  readonly peer: string;
  readonly message: string;
  /** A refused call's method path. */
  readonly method?: string;
}

/**
 * A client-streaming call served in the main thread without the loopback proxy (front-end.ts,
 * with the front end in the main thread): the front end passes each whole gRPC message as it
 * arrives and the handler answers once. What the peers' Raft streams use: a frame reaches the
 * driver without another HTTP/2 hop or a protobuf object in between.
 */
export interface RawStreamCall {
  /** The client's address, as grpc-js's `getPeer()` gives it. */
  readonly peer: string;
  /** The node the call says it comes from (its `cairn-peer` metadata; "" without). */
  readonly sender: string;
  /** What its connection's verified certificate says; null without one (or without TLS). */
  readonly identity: TlsIdentity | null;
  /** Sends the response headers now (the call is accepted); at most once, before finish(). */
  sendHeaders(): void;
  /**
   * Ends the call: OK with `message` as its answer, or a status (then `message` is null), with
   * `trailer` (a refusal's `cairn-error-code`) when given.
   */
  finish(
    code: number,
    details: string,
    message: Uint8Array | null,
    trailer?: MetadataPairs | null,
  ): void;
}

/** The handler's side of a RawStreamCall; nothing more is delivered after finish() or cancelled(). */
export interface RawStreamSink {
  /** One whole message of the client's (uncompressed, within the receive limit). */
  message(bytes: Buffer): void;
  /** The client half-closed. */
  end(): void;
  /** The call ended before the handler finished it (reset, connection lost, shutdown). */
  cancelled(): void;
}

/** Serves one RawStreamCall. */
export type RawStreamHandler = (call: RawStreamCall) => RawStreamSink;

/** Metadata as structured-clonable pairs; -bin values are bytes. */
export type MetadataPairs = [string, string | Uint8Array][];

/** Headers that HTTP/2 or gRPC set themselves, never application metadata. */
const PROTOCOL_HEADERS = new Set([
  "content-type",
  "te",
  "user-agent",
  "host",
  "accept-encoding",
  "content-length",
]);

/** Whether a header is the protocol's (a pseudo-header, grpc-*, transport), not metadata. */
export function isProtocolHeader(key: string): boolean {
  return key.charCodeAt(0) === 58 /* : */ || key.startsWith("grpc-") || PROTOCOL_HEADERS.has(key);
}

/** The application metadata of `md` (null when there is none, the common case). */
export function metadataPairs(md: Metadata): MetadataPairs | null {
  let out: MetadataPairs | null = null;
  for (const key of Object.keys(md.getMap())) {
    if (isProtocolHeader(key)) continue;
    out ??= [];
    // A -bin value may be a view of a larger pool: copied, so the clone carries only its bytes.
    for (const v of md.get(key)) out.push([key, typeof v === "string" ? v : new Uint8Array(v)]);
  }
  return out;
}

/**
 * Pairs as grpc-js Metadata. Never throws: the front end passes only valid pairs
 * (grpc-wire.ts headerPairs), and one grpc-js would refuse all the same is dropped, as its own
 * server drops it (a request's bytes must never raise an exception in the main thread).
 */
export function toMetadata(pairs: MetadataPairs | null): Metadata {
  const md = new Metadata();
  if (pairs !== null) {
    for (const [k, v] of pairs) {
      try {
        md.add(k, typeof v === "string" ? v : Buffer.from(v));
      } catch {
        // dropped (see above)
      }
    }
  }
  return md;
}

/** Numbers per call in CallBatch.head: id, method index, deadline (deadlineClock()), byte length. */
export const CALL_FIELDS = 4;
/** Numbers per reply in ReplyBatch.head: id, gRPC status code (0 = OK), byte length. */
export const REPLY_FIELDS = 3;

/** I/O thread → main thread, one per event-loop turn. */
export interface CallBatch {
  readonly kind: "calls";
  readonly head: Float64Array;
  readonly body: Uint8Array;
  /** Per call: its application metadata, and the client's address (for logs). */
  readonly meta: (MetadataPairs | null)[];
  readonly peers: string[];
  /** Per call: its connection's TlsIdentity (null without a verified certificate). */
  readonly identities: (TlsIdentity | null)[];
  /** Calls the client cancelled (their answers are no longer wanted). */
  readonly cancels: number[];
}

/** Main thread → I/O thread. */
export interface ReplyBatch {
  readonly kind: "replies";
  readonly head: Float64Array;
  readonly body: Uint8Array;
  /** Per reply: the status details (null when OK) and the trailing metadata. */
  readonly details: (string | null)[];
  readonly trailers: (MetadataPairs | null)[];
}

/** Collects items of one event-loop turn and hands them over in one batch at setImmediate. */
export class BatchBuilder {
  #head: number[] = [];
  #chunks: Uint8Array[] = [];
  #bytes = 0;
  #scheduled = false;
  readonly #flush: () => void;

  constructor(flush: () => void) {
    this.#flush = flush;
  }

  get empty(): boolean {
    return this.#head.length === 0;
  }

  /** Adds one item's numbers (its byte length is appended) and bytes. */
  add(fields: readonly number[], bytes: Uint8Array): void {
    for (const f of fields) this.#head.push(f);
    this.#head.push(bytes.length);
    this.#chunks.push(bytes);
    this.#bytes += bytes.length;
    this.schedule();
  }

  schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(() => {
      this.#scheduled = false;
      this.#flush();
    });
  }

  /** The batch so far, packed; the builder starts empty again. */
  take(): { head: Float64Array<ArrayBuffer>; body: Uint8Array<ArrayBuffer> } {
    const head = Float64Array.from(this.#head);
    const body = new Uint8Array(this.#bytes);
    let at = 0;
    for (const c of this.#chunks) {
      body.set(c, at);
      at += c.length;
    }
    this.#head = [];
    this.#chunks = [];
    this.#bytes = 0;
    return { head, body };
  }
}
