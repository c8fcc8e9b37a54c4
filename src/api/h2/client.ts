/**
 * The client side of one HTTP/2 connection (RFC 9113) over a connected socket, cleartext with
 * prior knowledge: the counterpart of connection.ts, on the same core (core.ts), for the node's
 * gRPC calls to its peers (grpc-channel.ts). A stream is a small object whose events go to one
 * handler object (no closures or emitters per request); every frame of an event-loop turn leaves
 * in one socket write.
 *
 * A request opens a stream: HEADERS (the caller's HPACK block), DATA as the server's windows
 * allow, END_STREAM; the response comes back as HEADERS (1xx ones skipped), DATA, and trailers
 * (a second HEADERS with END_STREAM), or as one HEADERS with END_STREAM (trailers-only).
 *
 * Invariants:
 *
 * 1. Streams open (their HEADERS are framed) in the order of `request()`, with increasing odd
 *    ids, only once the server's first SETTINGS has arrived and while fewer than its
 *    MAX_CONCURRENT_STREAMS are open; the others wait in `#waiting`, their DATA queued with them.
 * 2. A stream that never opened was never seen by the server: it ends "refused". So does one the
 *    server refused before processing it (RST_STREAM REFUSED_STREAM before any response, or an
 *    id above the last one of its GOAWAY). Every other stream that ends unfinished ends "reset"
 *    (by the server), "cancelled" (by this side) or "lost" (the connection ended): the server
 *    may have processed it.
 * 3. `onClose` is called exactly once per stream, after every other event of it.
 * 4. After a GOAWAY (either way) or `close()`, no stream opens on this connection
 *    (`isOpen` is false); the socket ends once the open streams are done.
 * 5. `flushedBytes` counts a stream's DATA bytes handed to the socket; `onFlushed` follows each
 *    socket write that carried some (not synchronously from `sendData`).
 *
 * A dead peer is found by PINGs when `keepaliveMs` is set: one every `keepaliveMs` while the
 * connection is open, and none answered within `keepaliveTimeoutMs` destroys the connection
 * (its streams end "lost"). Without them a peer behind a network that silently drops packets
 * holds the connection until TCP gives up, many minutes later.
 *
 * Implementation caveats: no server push (SETTINGS_ENABLE_PUSH 0); a refused stream is not
 * retried here (the caller decides); the first request on a connection waits one round trip,
 * for the server's SETTINGS.
 */
import type { Socket } from "node:net";
import { ConnectionCore, ConnectionError, CoreStream, ErrorCode, Setting } from "./core.ts";
import type { HeaderList } from "./hpack.ts";

export interface ClientConnectionOptions {
  /** Flow-control window of each stream and of the connection for what the server sends. */
  readonly receiveWindow: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE: the largest header list a response may carry. */
  readonly maxHeaderListSize: number;
  /** A PING this often (ms); 0: none. */
  readonly keepaliveMs: number;
  /** A PING not answered within this long (ms) destroys the connection. */
  readonly keepaliveTimeoutMs: number;
  /** Opens a tunnel to this shard worker of the server first (CoreOptions.tunnel). */
  readonly tunnel?: string;
  /** TLS inside the tunnel, once it is open (CoreOptions.startTls). */
  readonly startTls?: (raw: Socket) => Socket;
}

/** How a connection's close reason starts when the server refused its tunnel (CONNECT). */
export const TUNNEL_REFUSED = "the server refused the tunnel";

export const DEFAULT_CLIENT_OPTIONS: ClientConnectionOptions = {
  receiveWindow: 1 << 20,
  maxHeaderListSize: 64 * 1024,
  keepaliveMs: 0,
  keepaliveTimeoutMs: 20_000,
};

/** How a stream ended (invariant 2). */
export type StreamEnd = "complete" | "reset" | "cancelled" | "refused" | "lost";

/** Receives one stream's events; every method gets the stream, so one object can serve many. */
export interface ClientStreamHandler {
  /** The response's HEADERS (not 1xx ones); with `endStream` a trailers-only response. */
  onResponse(stream: ClientStream, headers: HeaderList, endStream: boolean): void;
  onData(stream: ClientStream, chunk: Buffer): void;
  /** The server ended its side: with its trailers, or null (ended by DATA, or trailers-only). */
  onRemoteEnd(stream: ClientStream, trailers: HeaderList | null): void;
  /** Some of the stream's DATA was handed to the socket (`flushedBytes` grew). */
  onFlushed(stream: ClientStream): void;
  /** The stream is closed (invariant 3); `stream.resetCode` says more for "reset"/"cancelled". */
  onClose(stream: ClientStream, end: StreamEnd): void;
}

export interface ClientConnectionHandler {
  /** The server's first SETTINGS arrived: it speaks HTTP/2, streams open from now on. */
  onReady(): void;
  /** The server sent GOAWAY: no new streams here (`code` is its error code, 0 when graceful). */
  onGoAway(code: number): void;
  /** The socket is gone (every stream has had onClose). */
  onClose(): void;
}

const MAX_STREAM_ID = 2 ** 31 - 1;

export class ClientStream extends CoreStream {
  readonly connection: ClientConnection;
  handler: ClientStreamHandler | null;
  /** The request's HPACK block until its HEADERS are framed. */
  block: Buffer | null;
  /** The request has no body (END_STREAM on its HEADERS). */
  readonly headersOnly: boolean;
  /** Its HEADERS were framed: the server may have seen the request. */
  opened = false;
  /** The response's HEADERS arrived. */
  responseSeen = false;
  /** How it ended, once closed. */
  end: StreamEnd | null = null;
  /** The RST_STREAM code of a "reset" or "cancelled" stream (-1 when there was none). */
  resetCode = -1;
  /** DATA bytes framed, and of those handed to the socket (invariant 5). */
  framedBytes = 0;
  flushedBytes = 0;

  constructor(
    id: number,
    connection: ClientConnection,
    block: Buffer,
    headersOnly: boolean,
    handler: ClientStreamHandler | null,
  ) {
    super(id, 0);
    this.connection = connection;
    this.block = block;
    this.headersOnly = headersOnly;
    this.handler = handler;
  }

  /** Sends DATA (with `endStream`, the last of the request), as the server's windows allow. */
  sendData(data: Buffer, endStream = false): void {
    if (this.localEnded || this.closed || this.endAfterData || this.headersOnly) return;
    if (data.length > 0) {
      this.queue.push(data);
      this.queuedBytes += data.length;
    }
    if (endStream) this.endAfterData = true;
    if (this.opened) this.connection.flushStream(this);
  }

  /** Ends the request (END_STREAM after any queued DATA). */
  finish(): void {
    this.sendData(EMPTY, true);
  }

  /** Cancels the stream: RST_STREAM with `code` once opened, nothing on the wire before. */
  reset(code: number = ErrorCode.CANCEL): void {
    if (this.closed) return;
    this.connection.resetStream(this, code);
  }

  /** Credits the server with `n` received bytes this side has passed on (when !autoCredit). */
  consumed(n: number): void {
    this.connection.credit(this, n);
  }
}

export class ClientConnection extends ConnectionCore<ClientStream> {
  readonly #handler: ClientConnectionHandler;
  #nextStreamId = 1;
  /** The highest id whose HEADERS were framed: ids above it are idle. */
  #lastOpenedId = 0;
  /** Streams waiting to open (invariant 1), from `#waitingHead` on. */
  #waiting: ClientStream[] = [];
  #waitingHead = 0;
  /** Streams whose DATA was framed since the last socket write. */
  #framed: ClientStream[] = [];
  #ready = false;
  #goAwayReceived = false;
  #closing = false;
  /** Why the connection ended or refused streams, for error messages. */
  closeReason: string | null = null;

  constructor(
    socket: Socket,
    handler: ClientConnectionHandler,
    options: ClientConnectionOptions = DEFAULT_CLIENT_OPTIONS,
  ) {
    super(socket, "client", options, [
      [Setting.ENABLE_PUSH, 0],
      [Setting.INITIAL_WINDOW_SIZE, options.receiveWindow],
      [Setting.MAX_HEADER_LIST_SIZE, options.maxHeaderListSize],
    ]);
    this.#handler = handler;
    socket.on("error", (err: Error) => {
      this.closeReason ??= err.message;
    });
    this.#socketErrors = (err: Error) => {
      this.closeReason ??= err.message;
    };
    if (options.keepaliveMs > 0) {
      const { keepaliveMs, keepaliveTimeoutMs } = options;
      this.#keepalive = setInterval(
        () => {
          if (this.isClosed) return;
          if (this.#pingSentAt === 0) {
            this.#pingSentAt = performance.now();
            this.sendPing();
          } else if (performance.now() - this.#pingSentAt >= keepaliveTimeoutMs) {
            this.destroy(`no answer to a PING in ${keepaliveTimeoutMs} ms`);
          }
        },
        Math.min(keepaliveMs, keepaliveTimeoutMs),
      ).unref();
    }
  }

  /** The keepalive timer, while the connection lives. */
  #keepalive: NodeJS.Timeout | null = null;
  /** When the PING waiting for its ACK left (0: none waits). */
  #pingSentAt = 0;

  protected override pingAcked(): void {
    this.#pingSentAt = 0;
  }

  /** Whether `request()` may be called: no GOAWAY either way, not closing, ids left. */
  get isOpen(): boolean {
    return (
      !this.isClosed &&
      !this.#goAwayReceived &&
      !this.#closing &&
      !this.goAwaySent &&
      this.#nextStreamId <= MAX_STREAM_ID
    );
  }

  /** Streams open on the wire, and waiting to open. */
  get activeStreams(): number {
    return this.streams.size + this.#waiting.length - this.#waitingHead;
  }

  /**
   * Starts a request: `block` is its HPACK-encoded headers, `endStream` says it has no body.
   * The stream opens now, or as soon as the server allows (invariant 1). Throws when !isOpen.
   */
  request(
    block: Buffer,
    endStream: boolean,
    handler: ClientStreamHandler | null = null,
  ): ClientStream {
    if (!this.isOpen) throw new Error("the HTTP/2 connection takes no new streams");
    const stream = new ClientStream(this.#nextStreamId, this, block, endStream, handler);
    this.#nextStreamId += 2;
    if (this.#waiting.length === this.#waitingHead && this.#hasSlot()) this.#open(stream);
    else this.#waiting.push(stream);
    return stream;
  }

  /** Graceful close: no new streams; once the open and waiting ones are done, GOAWAY, socket end. */
  close(): void {
    this.#closing = true;
    this.#maybeEnd();
  }

  /** Closes at once: every stream ends ("lost" once opened, "refused" before). */
  override destroy(reason?: string): void {
    if (reason !== undefined) this.closeReason ??= reason;
    super.destroy();
  }

  override resetStream(stream: ClientStream, code: number): void {
    if (stream.closed) return;
    if (!stream.opened) {
      // Still idle on the wire (an RST_STREAM would be a protocol error): it just never opens.
      const at = this.#waiting.indexOf(stream, this.#waitingHead);
      if (at >= 0) this.#waiting.splice(at, 1);
      stream.end = "cancelled";
      this.closeStream(stream, false);
      return;
    }
    stream.end ??= stream.remoteEnded ? "complete" : "cancelled";
    stream.resetCode = code;
    super.resetStream(stream, code);
  }

  readonly #socketErrors: (err: Error) => void;

  protected override socketReplaced(): void {
    this.socket.on("error", this.#socketErrors);
  }

  protected override tunnelRefused(answer: string): void {
    this.closeReason ??= `${TUNNEL_REFUSED}: ${answer}`;
  }

  protected override fail(code: number, message: string): void {
    this.closeReason ??= `HTTP/2 protocol error: ${message}`;
    super.fail(code, message);
  }

  #hasSlot(): boolean {
    return (
      this.settingsSeen &&
      !this.isClosed &&
      !this.#goAwayReceived &&
      this.streams.size < this.peerMaxConcurrentStreams
    );
  }

  #open(stream: ClientStream): void {
    const block = stream.block as Buffer;
    stream.block = null;
    stream.opened = true;
    stream.sendWindow = this.peerInitialWindow;
    this.streams.set(stream.id, stream);
    this.#lastOpenedId = stream.id;
    this.sendHeaderBlock(stream, block, stream.headersOnly);
    if (stream.queuedBytes > 0 || stream.endAfterData) this.flushStream(stream);
  }

  #openWaiting(): void {
    const waiting = this.#waiting;
    while (this.#waitingHead < waiting.length && this.#hasSlot()) {
      const stream = waiting[this.#waitingHead++] as ClientStream;
      if (!stream.closed) this.#open(stream);
    }
    // Dropped from the front in large steps: a connection kept at its limit never empties it.
    if (this.#waitingHead === waiting.length) {
      if (waiting.length > 0) this.#waiting = [];
      this.#waitingHead = 0;
    } else if (this.#waitingHead > 1024 && this.#waitingHead * 2 > waiting.length) {
      this.#waiting = waiting.slice(this.#waitingHead);
      this.#waitingHead = 0;
    }
  }

  /** Ends every waiting stream "refused" (invariant 2). */
  #refuseWaiting(): void {
    const waiting = this.#waiting;
    this.#waiting = [];
    for (let i = this.#waitingHead; i < waiting.length; i++) {
      const stream = waiting[i] as ClientStream;
      if (stream.closed) continue;
      stream.end = "refused";
      this.closeStream(stream, false);
    }
    this.#waitingHead = 0;
  }

  /** Ends the socket once nothing is left to finish after a GOAWAY or close() (invariant 4). */
  #maybeEnd(): void {
    if (this.isClosed || this.activeStreams > 0) return;
    if (this.#goAwayReceived) {
      this.endSocket();
    } else if (this.#closing) {
      this.sendGoAway(ErrorCode.NO_ERROR, "");
      this.endSocket();
    }
  }

  // ── the core's hooks ─────────────────────────────────────────────────────────────────────

  protected handleHeaderBlock(
    streamId: number,
    headers: HeaderList,
    endStream: boolean,
    fault: number,
  ): void {
    if (this.isIdle(streamId)) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, `HEADERS on idle stream ${streamId}`);
    }
    const stream = this.streams.get(streamId);
    // A stream this side has closed (cancelled): what the server sent meanwhile is ignored.
    if (stream === undefined) return;
    if (stream.remoteEnded) {
      this.resetStream(stream, ErrorCode.STREAM_CLOSED);
      return;
    }
    // A response whose header list is past this side's limit is refused, not read in part. (A
    // field HTTP/2 calls malformed is let through: its value is the owner's to judge.)
    if (fault === ErrorCode.ENHANCE_YOUR_CALM) {
      this.resetStream(stream, fault);
      return;
    }
    if (!stream.responseSeen) {
      const status = headers[0] === ":status" ? headers[1] : undefined;
      if (status === undefined || status.length !== 3) {
        this.resetStream(stream, ErrorCode.PROTOCOL_ERROR); // a response must start with :status
        return;
      }
      if (status.charCodeAt(0) === 49 /* 1xx */) {
        if (endStream) this.resetStream(stream, ErrorCode.PROTOCOL_ERROR);
        return; // informational: the real response follows
      }
      stream.responseSeen = true;
      stream.handler?.onResponse(stream, headers, endStream);
      if (endStream && !stream.closed) this.#endRemote(stream, null);
      return;
    }
    if (!endStream) {
      this.resetStream(stream, ErrorCode.PROTOCOL_ERROR); // trailers must end the stream
      return;
    }
    this.#endRemote(stream, headers);
  }

  #endRemote(stream: ClientStream, trailers: HeaderList | null): void {
    stream.remoteEnded = true;
    stream.handler?.onRemoteEnd(stream, trailers);
    if (!stream.closed && stream.localEnded) this.closeStream(stream, true);
  }

  protected isIdle(streamId: number): boolean {
    // Even ids are the server's, and it opens none (no push).
    return streamId % 2 === 0 || streamId > this.#lastOpenedId;
  }

  protected handleData(stream: ClientStream, data: Buffer): void {
    if (!stream.responseSeen) {
      this.resetStream(stream, ErrorCode.PROTOCOL_ERROR); // DATA before the response's HEADERS
      return;
    }
    stream.handler?.onData(stream, data);
  }

  protected handleRemoteEnd(stream: ClientStream): void {
    this.#endRemote(stream, null);
  }

  protected handleReset(stream: ClientStream, code: number): void {
    // RFC 9113 §8.7: REFUSED_STREAM means the request was not processed.
    if (stream.remoteEnded) stream.end = "complete";
    else
      stream.end = code === ErrorCode.REFUSED_STREAM && !stream.responseSeen ? "refused" : "reset";
    stream.resetCode = code;
    this.closeStream(stream, false);
  }

  protected handleGoAway(payload: Buffer): void {
    if (payload.length < 8) {
      throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a GOAWAY frame's size");
    }
    const lastStreamId = payload.readUInt32BE(0) & 0x7fffffff;
    const code = payload.readUInt32BE(4);
    if (code !== ErrorCode.NO_ERROR) {
      const debug = payload.subarray(8).toString("latin1");
      this.closeReason ??= `GOAWAY with error code ${code}${debug === "" ? "" : `: ${debug}`}`;
    }
    this.#goAwayReceived = true;
    // Streams above the last id were not processed, and the waiting ones never will be (RFC 9113
    // §6.8): both are refused. A later GOAWAY may lower the last id (a graceful shutdown's second).
    for (const stream of [...this.streams.values()]) {
      if (stream.id > lastStreamId) {
        stream.end = "refused";
        this.closeStream(stream, false);
      }
    }
    this.#refuseWaiting();
    this.#handler.onGoAway(code);
    this.#maybeEnd();
  }

  protected handleLocalEndFirst(): void {
    // The request is complete before its response: the stream waits, half-closed, for it.
  }

  protected override dataFramed(stream: ClientStream, n: number): void {
    if (stream.framedBytes === stream.flushedBytes) this.#framed.push(stream);
    stream.framedBytes += n;
  }

  protected override outputFlushed(): void {
    if (this.#framed.length === 0) return;
    const framed = this.#framed;
    this.#framed = [];
    for (const stream of framed) {
      stream.flushedBytes = stream.framedBytes;
      stream.handler?.onFlushed(stream);
    }
  }

  protected override settingsApplied(): void {
    this.#openWaiting();
    if (!this.#ready) {
      this.#ready = true;
      this.#handler.onReady();
    }
  }

  protected streamClosed(stream: ClientStream, complete: boolean): void {
    const end = stream.end ?? (complete || stream.remoteEnded ? "complete" : "lost");
    stream.end = end;
    stream.handler?.onClose(stream, end);
    this.#openWaiting();
    this.#maybeEnd();
  }

  protected connectionClosed(): void {
    if (this.#keepalive !== null) clearInterval(this.#keepalive);
    this.#keepalive = null;
    this.#framed = [];
    this.#refuseWaiting();
    this.#handler.onClose();
  }
}

const EMPTY = Buffer.alloc(0);
