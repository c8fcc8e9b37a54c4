/**
 * The server side of one HTTP/2 connection (RFC 9113) over a socket, cleartext with prior
 * knowledge (what gRPC clients speak to an insecure server): frames, HPACK, flow control and
 * output batching are the core's (core.ts); this side adds the client's streams and their
 * states. The I/O threads serve gRPC on it (io-thread.ts) instead of node:http2, whose per-stream
 * objects (a Duplex stream, its listeners and header objects) cost more CPU than the rest of a
 * call: a stream here is a small object with callbacks, and every frame produced in one
 * event-loop turn leaves in one socket write.
 *
 * A request stream opens with the client's HEADERS (an odd id above every earlier one), receives
 * DATA until END_STREAM (or trailers, which gRPC clients never send), and ends with this side's
 * response: HEADERS, DATA, trailers. A response complete before its request is followed by
 * RST_STREAM NO_ERROR (RFC 9113 §8.1). Frames on a stream this side has closed are ignored.
 *
 * Not supported, as no gRPC client needs them: server push (never sent), priorities (parsed and
 * ignored), HTTP/1.1 upgrade, CONNECT requests. Errors follow the RFC: a malformed frame or
 * header block ends the connection with GOAWAY, a bad stream is reset with RST_STREAM, and a
 * malformed request (RFC 9113 §8.2–8.3: its fields, checked as HPACK decodes them, and its
 * pseudo-headers and connection-specific fields, readRequestLine) is reset PROTOCOL_ERROR
 * before its owner sees it, counted against the client's reset budget. A stream past
 * SETTINGS_MAX_CONCURRENT_STREAMS (default 1000) is refused (REFUSED_STREAM).
 */
import type { Socket } from "node:net";
import {
  ConnectionCore,
  ConnectionError,
  type CoreOptions,
  CoreStream,
  ErrorCode,
  Setting,
} from "./core.ts";
import type { HeaderList } from "./hpack.ts";

export { ErrorCode, FrameType } from "./core.ts";

export interface ConnectionOptions extends CoreOptions {
  /** SETTINGS_MAX_CONCURRENT_STREAMS: a stream past it is refused (REFUSED_STREAM). */
  readonly maxConcurrentStreams: number;
}

export const DEFAULT_CONNECTION_OPTIONS: ConnectionOptions = {
  receiveWindow: 1 << 20,
  maxHeaderListSize: 64 * 1024,
  maxConcurrentStreams: 1000,
  maxResetsPerSecond: 1000,
  handshakeTimeoutMs: 10_000,
  maxOutputBytes: 16 << 20,
  writeStallTimeoutMs: 10_000,
};

/**
 * One request stream. Callbacks are set by whoever handles the request; `onClose` is called once,
 * when the stream is done both ways, reset by either side, or its connection is gone
 * (`complete` is true only when it ended normally).
 */
export class ServerStream extends CoreStream {
  readonly headers: HeaderList;
  /** The request's `:method` and `:path` (a request has both: see requestMalformed). */
  readonly method: string;
  readonly path: string;
  readonly connection: ServerConnection;
  onData: ((chunk: Buffer) => void) | null = null;
  onEnd: (() => void) | null = null;
  onClose: ((complete: boolean) => void) | null = null;
  /** Called when queued DATA has left for the socket (see `queuedBytes`). */
  onDrain: (() => void) | null = null;
  headersSent = false;
  /** The request's `content-length`, -1 without one; its DATA must add up to it (§8.1.1). */
  readonly contentLength: number;
  /** DATA bytes received (counted only against a content-length). */
  received = 0;
  /**
   * Its request must arrive whole within the front end's `rpc.request_receive_timeout_ms`: a
   * call with one request message (unary or server-streaming), or a peer's streaming call until
   * its first message is whole (front-end.ts, openPeerCall). A client-streaming call's request
   * may otherwise last as long as the call.
   */
  timedRequest = false;
  /** Its header list's size (names, values, 32 bytes a field), as decoded. */
  readonly headerBytes: number;

  constructor(
    id: number,
    headers: HeaderList,
    method: string,
    path: string,
    connection: ServerConnection,
    sendWindow: number,
    contentLength: number,
    headerBytes: number,
  ) {
    super(id, sendWindow);
    this.headers = headers;
    this.headerBytes = headerBytes;
    this.method = method;
    this.path = path;
    this.connection = connection;
    this.contentLength = contentLength;
  }

  /** The first value of a header (names are lower case). */
  header(name: string): string | undefined {
    const h = this.headers;
    for (let i = 0; i < h.length; i += 2) if (h[i] === name) return h[i + 1];
    return undefined;
  }

  /** Sends the response headers (an HPACK block); with endStream, a headers-only response. */
  sendHeaders(block: Buffer, endStream = false): void {
    if (this.localEnded || this.closed) return;
    this.headersSent = true;
    this.connection.sendHeaderBlock(this, block, endStream);
  }

  /** Sends DATA, as the client's flow control allows: what does not fit waits in `queue`. */
  sendData(data: Buffer): void {
    if (this.localEnded || this.closed || data.length === 0) return;
    this.connection.queueData(this, data);
  }

  /** Ends the response with trailers (an HPACK block), after any queued DATA. */
  sendTrailers(block: Buffer): void {
    if (this.localEnded || this.closed) return;
    this.pendingTrailers = block;
    this.connection.flushStream(this);
  }

  /** Resets the stream (RST_STREAM with `code`). */
  reset(code: number): void {
    if (this.closed) return;
    this.connection.resetStream(this, code);
  }

  /** Credits the client with `n` received bytes this side has passed on (when !autoCredit). */
  consumed(n: number): void {
    this.connection.credit(this, n);
  }
}

export interface ConnectionHandler {
  /** A new request: its headers are complete; DATA may follow. */
  onStream(stream: ServerStream): void;
  /** The connection is gone (every open stream has had onClose). */
  onClose(): void;
  /**
   * The handler's own code (or this layer's) threw while serving the connection's frames: the
   * connection ended with GOAWAY INTERNAL_ERROR; this hears why, to report it.
   */
  onError?(err: unknown): void;
  /** The client went past a limit (`what`): the connection is ending. */
  onLimit?(what: string): void;
  /** Every frame of a read from the socket has been handled. */
  onInputDone?(): void;
  /** The connection's output is no longer backlogged (ConnectionCore.outputBacklogged). */
  onOutputRoom?(connection: ServerConnection): void;
}

/** How many ranges of skipped stream ids a connection remembers (ServerConnection). */
const MAX_SKIPPED_RANGES = 16;

export class ServerConnection extends ConnectionCore<ServerStream> {
  readonly #handler: ConnectionHandler;
  readonly #maxConcurrentStreams: number;
  /** The remote address, for logs. */
  readonly peer: string;
  /** Streams opened so far (a front end's idle timeout watches it). */
  streamsOpened = 0;
  /**
   * The latest ranges of ids the client skipped, as [first, last] pairs (MAX_SKIPPED_RANGES at
   * most): what tells a HEADERS opening a stream below the newest (a connection error) from
   * trailers on a stream this side closed (ignored). Clients number their streams one after
   * another, so this stays empty; a client that skips more often loses only the detection of
   * its oldest skips, never memory.
   */
  readonly #skipped: number[] = [];

  constructor(socket: Socket, handler: ConnectionHandler, options = DEFAULT_CONNECTION_OPTIONS) {
    super(socket, "server", options, [
      [Setting.MAX_CONCURRENT_STREAMS, options.maxConcurrentStreams],
      [Setting.INITIAL_WINDOW_SIZE, options.receiveWindow],
      [Setting.MAX_HEADER_LIST_SIZE, options.maxHeaderListSize],
    ]);
    this.#handler = handler;
    this.#maxConcurrentStreams = options.maxConcurrentStreams;
    this.peer = `${socket.remoteAddress ?? "unknown"}:${socket.remotePort ?? 0}`;
  }

  /** Streams open now. */
  get openStreams(): number {
    return this.streams.size;
  }

  /** The streams open now (a snapshot: a front end's sweep walks it). */
  openStreamList(): ServerStream[] {
    return this.streams.values();
  }

  /** Whether the connection has ended or is ending (GOAWAY sent, or the socket gone). */
  get isDone(): boolean {
    return this.isClosed || this.goAwaySent;
  }

  protected override internalError(err: unknown): void {
    this.#handler.onError?.(err);
  }

  protected override limitExceeded(what: string): void {
    this.#handler.onLimit?.(what);
  }

  protected override inputDone(): void {
    this.#handler.onInputDone?.();
  }

  protected override outputRoom(): void {
    this.#handler.onOutputRoom?.(this);
  }

  /**
   * Graceful close: GOAWAY (no new streams past the last one seen); the socket ends once the
   * open streams are done.
   */
  goAway(): void {
    if (this.isClosed) return;
    if (!this.goAwaySent) this.sendGoAway(ErrorCode.NO_ERROR, "");
    if (this.streams.size === 0) this.endSocket();
  }

  protected handleHeaderBlock(
    streamId: number,
    headers: HeaderList,
    endStream: boolean,
    fault: number,
  ): void {
    const existing = this.streams.get(streamId);
    if (existing !== undefined) {
      // Half-closed (remote): the client ended the stream already (RFC 9113 §5.1), a stream
      // error; its header block was decoded, so the connection's HPACK state is intact.
      if (existing.remoteEnded) {
        this.resetForFault(existing, ErrorCode.STREAM_CLOSED);
        return;
      }
      // Trailers from the client: they must end the stream; gRPC clients send none worth reading.
      if (!endStream) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "HEADERS in the middle of a stream");
      }
      if (fault !== ErrorCode.NO_ERROR) {
        this.resetForFault(existing, fault);
        return;
      }
      // Trailers hold no pseudo-header (RFC 9113 §8.1): else the request is malformed.
      if (hasPseudoHeader(headers)) {
        this.#resetMalformed(existing);
        return;
      }
      this.handleRemoteEnd(existing);
      return;
    }
    if (streamId % 2 === 0) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, `a client stream with id ${streamId}`);
    }
    if (streamId <= this.lastPeerStreamId) {
      // An id the client skipped was never opened: this HEADERS would open a stream below one
      // already opened (RFC 9113 §5.1.1), not end one.
      if (this.#wasSkipped(streamId)) {
        throw new ConnectionError(
          ErrorCode.PROTOCOL_ERROR,
          `a new stream ${streamId} below stream ${this.lastPeerStreamId}, already opened`,
        );
      }
      // A stream this side has closed (answered, or reset while the client was still sending):
      // what the client sent before it learnt so is ignored (RFC 9113 §5.1), its block decoded.
      return;
    }
    this.#noteSkipped(streamId);
    this.lastPeerStreamId = streamId;
    if (this.goAwaySent || this.streams.size >= this.#maxConcurrentStreams) {
      // A refused stream costs this side a decoded block and a reset: a client that keeps
      // opening streams past the limit spends its reset budget as a Rapid Reset does.
      if (!this.chargeReset()) {
        throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "too many streams refused");
      }
      this.sendReset(streamId, ErrorCode.REFUSED_STREAM);
      return;
    }
    if (fault !== ErrorCode.NO_ERROR || !readRequestLine(headers)) {
      // A malformed request (RFC 9113 §8.1.1), or one whose header list is past the limit: a
      // stream error. The resets a client makes this side send count against its budget, like
      // its own (a flood of them is the same attack).
      if (!this.chargeReset()) {
        throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "too many malformed requests");
      }
      this.sendReset(streamId, fault !== ErrorCode.NO_ERROR ? fault : ErrorCode.PROTOCOL_ERROR);
      return;
    }
    this.streamsOpened++;
    const stream = new ServerStream(
      streamId,
      headers,
      requestMethod,
      requestPath,
      this,
      this.peerInitialWindow,
      requestContentLength,
      this.headerListSize,
    );
    this.streams.set(streamId, stream);
    this.#handler.onStream(stream);
    if (endStream && !stream.closed) this.handleRemoteEnd(stream);
  }

  protected isIdle(streamId: number): boolean {
    return streamId > this.lastPeerStreamId;
  }

  /**
   * A malformed request found after its stream opened: a stream error PROTOCOL_ERROR, its reset
   * charged to the client's budget as a malformed request's is.
   */
  #resetMalformed(stream: ServerStream): void {
    this.resetForFault(stream, ErrorCode.PROTOCOL_ERROR);
  }

  /** Before `streamId` opens: the ids between the last one opened and it were skipped. */
  #noteSkipped(streamId: number): void {
    const first = this.lastPeerStreamId === 0 ? 1 : this.lastPeerStreamId + 2;
    if (first > streamId - 2) return;
    this.#skipped.push(first, streamId - 2);
    if (this.#skipped.length > 2 * MAX_SKIPPED_RANGES) this.#skipped.splice(0, 2);
  }

  /** Whether the client skipped `streamId` (among the ranges still remembered). */
  #wasSkipped(streamId: number): boolean {
    const skipped = this.#skipped;
    for (let i = 0; i < skipped.length; i += 2) {
      if (streamId >= (skipped[i] as number) && streamId <= (skipped[i + 1] as number)) return true;
    }
    return false;
  }

  protected handleData(stream: ServerStream, data: Buffer): void {
    if (stream.contentLength >= 0) {
      stream.received += data.length;
      if (stream.received > stream.contentLength) {
        this.#resetMalformed(stream);
        return;
      }
    }
    stream.onData?.(data);
  }

  protected handleRemoteEnd(stream: ServerStream): void {
    // DATA that does not add up to the content-length: malformed (RFC 9113 §8.1.1).
    if (stream.contentLength >= 0 && stream.received !== stream.contentLength) {
      this.#resetMalformed(stream);
      return;
    }
    stream.remoteEnded = true;
    stream.onEnd?.();
    if (stream.localEnded) this.closeStream(stream, true);
  }

  protected handleReset(stream: ServerStream): void {
    this.closeStream(stream, false);
  }

  protected handleGoAway(): void {
    // The client opens no more streams; the open ones finish, then the socket ends.
    this.goAway();
  }

  protected handleLocalEndFirst(stream: ServerStream): void {
    // The response is complete before the request: the client may stop sending (RFC 9113 §8.1).
    this.sendReset(stream.id, ErrorCode.NO_ERROR);
    this.closeStream(stream, true);
  }

  protected override drained(stream: ServerStream): void {
    stream.onDrain?.();
  }

  protected streamClosed(stream: ServerStream, complete: boolean): void {
    stream.onClose?.(complete);
    if (this.goAwaySent && this.streams.size === 0) this.endSocket();
  }

  protected connectionClosed(): void {
    this.#handler.onClose();
  }
}

/** Pseudo-header bits, to find a duplicate or a missing one. */
const METHOD = 1;
const SCHEME = 2;
const PATH = 4;
const AUTHORITY = 8;

/** What readRequestLine read last (module state: no object per request). */
let requestMethod = "";
let requestPath = "";
let requestContentLength = -1;

/** Whether a header list holds a pseudo-header (one that trailers must not). */
function hasPseudoHeader(headers: HeaderList): boolean {
  for (let i = 0; i < headers.length; i += 2) {
    if ((headers[i] as string).charCodeAt(0) === 58 /* : */) return true;
  }
  return false;
}

/** A content-length's value as a number; -2 when it is not one (digits only, safe integer). */
function contentLengthOf(value: string): number {
  if (!/^[0-9]{1,15}$/.test(value)) return -2;
  return Number(value);
}

/**
 * Reads a request's `:method`, `:path` and `content-length` (-1 without one) into
 * requestMethod, requestPath and requestContentLength; false when its header list is malformed
 * as RFC 9113 §8.1.1–8.3 says (a content-length that is not a number, or repeated unequal) (the fields themselves are checked by the decoder: HpackDecoder.malformed): a
 * pseudo-header after a regular field, unknown, a response's or repeated; `:method`, `:scheme`
 * or a non-empty `:path` missing (CONNECT is not served); a connection-specific field
 * (`connection`, `keep-alive`, `proxy-connection`, `transfer-encoding`, `upgrade`), or `te`
 * other than `trailers`. One pass over the names, comparing strings only where their first
 * character matches.
 */
function readRequestLine(headers: HeaderList): boolean {
  let seen = 0;
  let regular = false;
  let method = "";
  let path = "";
  let contentLength = -1;
  for (let i = 0; i < headers.length; i += 2) {
    const name = headers[i] as string;
    const first = name.charCodeAt(0);
    if (first === 58 /* : */) {
      if (regular) return false;
      let bit: number;
      if (name === ":method") {
        bit = METHOD;
        method = headers[i + 1] as string;
      } else if (name === ":path") {
        bit = PATH;
        path = headers[i + 1] as string;
      } else if (name === ":scheme") bit = SCHEME;
      else if (name === ":authority") bit = AUTHORITY;
      else return false;
      if ((seen & bit) !== 0) return false;
      seen |= bit;
      continue;
    }
    regular = true;
    switch (first) {
      case 99 /* c */:
        if (name === "connection") return false;
        if (name === "content-length") {
          const length = contentLengthOf(headers[i + 1] as string);
          // Repeated, it must say the same each time (RFC 9110 §8.6).
          if (length < 0 || (contentLength >= 0 && length !== contentLength)) return false;
          contentLength = length;
        }
        break;
      case 107 /* k */:
        if (name === "keep-alive") return false;
        break;
      case 112 /* p */:
        if (name === "proxy-connection") return false;
        break;
      case 116 /* t */:
        if (name === "transfer-encoding") return false;
        if (name === "te" && headers[i + 1] !== "trailers") return false;
        break;
      case 117 /* u */:
        if (name === "upgrade") return false;
        break;
      default:
        break;
    }
  }
  if ((seen & (METHOD | SCHEME | PATH)) !== (METHOD | SCHEME | PATH) || path === "") return false;
  requestMethod = method;
  requestPath = path;
  requestContentLength = contentLength;
  return true;
}
