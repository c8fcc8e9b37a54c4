/**
 * The server side of one HTTP/2 connection (RFC 9113) over a socket, cleartext with prior
 * knowledge (what gRPC clients speak to an insecure server): frames, HPACK (hpack.ts), stream
 * states and flow control both ways. The I/O threads serve gRPC on it (io-thread.ts) instead of
 * node:http2, whose per-stream objects (a Duplex stream, its listeners and header objects) cost
 * more CPU than the rest of a call: a stream here is a small object with callbacks, and every
 * frame produced in one event-loop turn leaves in one socket write.
 *
 * Not supported, as no gRPC client needs them: server push (never sent), priorities (parsed and
 * ignored), HTTP/1.1 upgrade. Errors follow the RFC: a malformed frame or header block ends the
 * connection with GOAWAY, a bad stream is reset with RST_STREAM.
 */
import type { Socket } from "node:net";
import { HpackDecoder, HpackError, type HeaderList } from "./hpack.ts";

export const FrameType = {
  DATA: 0x0,
  HEADERS: 0x1,
  PRIORITY: 0x2,
  RST_STREAM: 0x3,
  SETTINGS: 0x4,
  PUSH_PROMISE: 0x5,
  PING: 0x6,
  GOAWAY: 0x7,
  WINDOW_UPDATE: 0x8,
  CONTINUATION: 0x9,
} as const;

const FLAG_END_STREAM = 0x1;
const FLAG_ACK = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;

export const ErrorCode = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  ENHANCE_YOUR_CALM: 0xb,
} as const;

const SETTINGS_HEADER_TABLE_SIZE = 0x1;
const SETTINGS_ENABLE_PUSH = 0x2;
const SETTINGS_MAX_CONCURRENT_STREAMS = 0x3;
const SETTINGS_INITIAL_WINDOW_SIZE = 0x4;
const SETTINGS_MAX_FRAME_SIZE = 0x5;
const SETTINGS_MAX_HEADER_LIST_SIZE = 0x6;

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
const FRAME_HEADER = 9;
const DEFAULT_WINDOW = 65_535;
const MAX_WINDOW = 2 ** 31 - 1;
/** The largest frame payload this side accepts (the protocol's default; we do not raise it). */
const MAX_FRAME_SIZE = 16_384;

export interface ConnectionOptions {
  /** Flow-control window of each stream and of the connection for what the client sends. */
  readonly receiveWindow: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE: the largest header list a request may carry. */
  readonly maxHeaderListSize: number;
  /** SETTINGS_MAX_CONCURRENT_STREAMS. */
  readonly maxConcurrentStreams: number;
}

export const DEFAULT_CONNECTION_OPTIONS: ConnectionOptions = {
  receiveWindow: 1 << 20,
  maxHeaderListSize: 64 * 1024,
  maxConcurrentStreams: 65_536,
};

/**
 * One request stream. Callbacks are set by whoever handles the request; `onClose` is called once,
 * when the stream is done both ways, reset by either side, or its connection is gone
 * (`complete` is true only when it ended normally).
 */
export class ServerStream {
  readonly id: number;
  readonly headers: HeaderList;
  readonly connection: ServerConnection;
  onData: ((chunk: Buffer) => void) | null = null;
  onEnd: (() => void) | null = null;
  onClose: ((complete: boolean) => void) | null = null;
  /** Called when queued DATA has left for the socket (see `queuedBytes`). */
  onDrain: (() => void) | null = null;
  /**
   * Whether received DATA is credited back to the client as it arrives (the handler buffers it,
   * bounded by its own limit); false when the handler credits it with `consumed()` (a proxy
   * that credits what it could pass on).
   */
  autoCredit = true;
  /** The client sent END_STREAM. */
  remoteEnded = false;
  /** This side sent END_STREAM (or reset the stream). */
  localEnded = false;
  headersSent = false;
  closed = false;
  /** Send window (the client's credit for this stream). */
  sendWindow: number;
  /** DATA waiting for send window, and the trailers to send after it. */
  queue: Buffer[] = [];
  queuedBytes = 0;
  pendingTrailers: Buffer | null = null;
  /** Bytes received and not yet consumed (passed on, or buffered by the handler). */
  unconsumed = 0;
  /** Bytes received beyond what WINDOW_UPDATEs have credited: the client's window used. */
  outstanding = 0;
  /** Bytes consumed and not yet credited (credited in large steps, not per frame). */
  pendingCredit = 0;

  constructor(id: number, headers: HeaderList, connection: ServerConnection, sendWindow: number) {
    this.id = id;
    this.headers = headers;
    this.connection = connection;
    this.sendWindow = sendWindow;
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
}

/** A connection-level failure: GOAWAY with this code, then the socket ends. */
class ConnectionError extends Error {
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

export class ServerConnection {
  readonly socket: Socket;
  readonly #handler: ConnectionHandler;
  readonly #options: ConnectionOptions;
  readonly #decoder: HpackDecoder;
  readonly #streams = new Map<number, ServerStream>();
  /** Input not yet parsed (a partial frame). */
  #input: Buffer | null = null;
  #prefaceSeen = false;
  #settingsSeen = false;
  #lastStreamId = 0;
  /** A header block in progress (HEADERS without END_HEADERS, then CONTINUATIONs). */
  #headerBlock: { streamId: number; chunks: Buffer[]; size: number; endStream: boolean } | null =
    null;
  // The client's settings.
  #peerInitialWindow = DEFAULT_WINDOW;
  #peerMaxFrameSize = MAX_FRAME_SIZE;
  #sendWindow = DEFAULT_WINDOW;
  /** Connection-level: bytes received beyond the credit sent, and consumed but not credited. */
  #recvOutstanding = 0;
  #pendingCredit = 0;
  /** Streams with DATA waiting for the connection's send window, in order. */
  readonly #blocked = new Set<ServerStream>();
  #output: Buffer[] = [];
  #outputScheduled = false;
  #goawaySent = false;
  #closed = false;
  /** The remote address, for logs. */
  readonly peer: string;

  constructor(socket: Socket, handler: ConnectionHandler, options = DEFAULT_CONNECTION_OPTIONS) {
    this.socket = socket;
    this.#handler = handler;
    this.#options = options;
    this.#decoder = new HpackDecoder(4096, options.maxHeaderListSize);
    this.peer = `${socket.remoteAddress ?? "unknown"}:${socket.remotePort ?? 0}`;
    socket.on("data", (chunk: Buffer) => this.#onData(chunk));
    socket.on("error", () => undefined); // close follows
    socket.on("close", () => this.#onSocketClose());
    // Our settings, and the connection window raised to the receive window.
    const settings = Buffer.alloc(18);
    settings.writeUInt16BE(SETTINGS_MAX_CONCURRENT_STREAMS, 0);
    settings.writeUInt32BE(options.maxConcurrentStreams, 2);
    settings.writeUInt16BE(SETTINGS_INITIAL_WINDOW_SIZE, 6);
    settings.writeUInt32BE(options.receiveWindow, 8);
    settings.writeUInt16BE(SETTINGS_MAX_HEADER_LIST_SIZE, 12);
    settings.writeUInt32BE(options.maxHeaderListSize, 14);
    this.#frame(FrameType.SETTINGS, 0, 0, settings);
    if (options.receiveWindow > DEFAULT_WINDOW) {
      this.#windowUpdate(0, options.receiveWindow - DEFAULT_WINDOW);
    }
  }

  /**
   * Graceful close: GOAWAY (no new streams past the last one seen); the socket ends once the
   * open streams are done.
   */
  goAway(): void {
    if (this.#closed) return;
    if (!this.#goawaySent) this.#sendGoAway(ErrorCode.NO_ERROR, "");
    if (this.#streams.size === 0) this.#endSocket();
  }

  /** Closes at once: every open stream is told it is gone. */
  destroy(): void {
    this.socket.destroy();
  }

  // ── input ────────────────────────────────────────────────────────────────────────────────

  #onData(chunk: Buffer): void {
    if (this.#closed) return;
    let buf = this.#input === null ? chunk : Buffer.concat([this.#input, chunk]);
    this.#input = null;
    try {
      let at = 0;
      if (!this.#prefaceSeen) {
        if (buf.length < PREFACE.length) {
          if (!PREFACE.subarray(0, buf.length).equals(buf)) {
            throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "not an HTTP/2 preface");
          }
          this.#input = buf;
          return;
        }
        if (!buf.subarray(0, PREFACE.length).equals(PREFACE)) {
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "not an HTTP/2 preface");
        }
        this.#prefaceSeen = true;
        at = PREFACE.length;
      }
      while (buf.length - at >= FRAME_HEADER && !this.#closed) {
        const length =
          ((buf[at] as number) << 16) | ((buf[at + 1] as number) << 8) | (buf[at + 2] as number);
        if (length > MAX_FRAME_SIZE) {
          throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, `a frame of ${length} bytes`);
        }
        if (buf.length - at < FRAME_HEADER + length) break;
        const type = buf[at + 3] as number;
        const flags = buf[at + 4] as number;
        const streamId = buf.readUInt32BE(at + 5) & 0x7fffffff;
        const payload = buf.subarray(at + FRAME_HEADER, at + FRAME_HEADER + length);
        at += FRAME_HEADER + length;
        this.#onFrame(type, flags, streamId, payload);
      }
      if (at < buf.length) {
        // Keep the partial frame (copied when it is a view of a larger chunk).
        buf = buf.subarray(at);
        this.#input = at > 0 ? Buffer.from(buf) : buf;
      }
    } catch (err) {
      if (err instanceof ConnectionError) this.#fail(err.code, err.message);
      else if (err instanceof HpackError) this.#fail(ErrorCode.COMPRESSION_ERROR, err.message);
      else throw err;
    }
  }

  #onFrame(type: number, flags: number, streamId: number, payload: Buffer): void {
    if (!this.#settingsSeen && type !== FrameType.SETTINGS) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "the first frame must be SETTINGS");
    }
    if (this.#headerBlock !== null && type !== FrameType.CONTINUATION) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "a header block was interrupted");
    }
    switch (type) {
      case FrameType.DATA:
        this.#onDataFrame(flags, streamId, payload);
        return;
      case FrameType.HEADERS:
        this.#onHeaders(flags, streamId, payload);
        return;
      case FrameType.CONTINUATION:
        this.#onContinuation(flags, streamId, payload);
        return;
      case FrameType.PRIORITY:
        if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "PRIORITY on 0");
        if (payload.length !== 5) {
          throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a PRIORITY frame's size");
        }
        return;
      case FrameType.RST_STREAM:
        this.#onReset(streamId, payload);
        return;
      case FrameType.SETTINGS:
        this.#onSettings(flags, streamId, payload);
        return;
      case FrameType.PUSH_PROMISE:
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "a client sent PUSH_PROMISE");
      case FrameType.PING:
        if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "PING on a stream");
        if (payload.length !== 8) {
          throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a PING frame's size");
        }
        if ((flags & FLAG_ACK) === 0)
          this.#frame(FrameType.PING, FLAG_ACK, 0, Buffer.from(payload));
        return;
      case FrameType.GOAWAY:
        if (streamId !== 0)
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream");
        // The client opens no more streams; the open ones finish, then the socket ends.
        this.goAway();
        return;
      case FrameType.WINDOW_UPDATE:
        this.#onWindowUpdate(streamId, payload);
        return;
      default:
        return; // unknown frame types are ignored (RFC 9113 §4.1)
    }
  }

  /** The payload without its padding (PADDED flag). */
  #unpad(flags: number, payload: Buffer): Buffer {
    if ((flags & FLAG_PADDED) === 0) return payload;
    if (payload.length < 1) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "padding");
    const pad = payload[0] as number;
    if (pad >= payload.length) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "padding longer than the frame");
    }
    return payload.subarray(1, payload.length - pad);
  }

  #onHeaders(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "HEADERS on 0");
    let block = this.#unpad(flags, payload);
    if ((flags & FLAG_PRIORITY) !== 0) {
      if (block.length < 5) throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "priority");
      block = block.subarray(5);
    }
    const endStream = (flags & FLAG_END_STREAM) !== 0;
    if ((flags & FLAG_END_HEADERS) === 0) {
      this.#headerBlock = { streamId, chunks: [Buffer.from(block)], size: block.length, endStream };
      return;
    }
    this.#onHeaderBlock(streamId, block, endStream);
  }

  #onContinuation(flags: number, streamId: number, payload: Buffer): void {
    const pending = this.#headerBlock;
    if (pending === null || pending.streamId !== streamId) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "an unexpected CONTINUATION");
    }
    pending.size += payload.length;
    // A header block far beyond the list limit is refused before it is all buffered.
    if (pending.size > this.#options.maxHeaderListSize * 2 + MAX_FRAME_SIZE) {
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "a header block too large");
    }
    pending.chunks.push(Buffer.from(payload));
    if ((flags & FLAG_END_HEADERS) === 0) return;
    this.#headerBlock = null;
    this.#onHeaderBlock(streamId, Buffer.concat(pending.chunks), pending.endStream);
  }

  #onHeaderBlock(streamId: number, block: Buffer, endStream: boolean): void {
    // Decoded first, whatever happens to the stream: the decoder's table must follow the peer's.
    const headers = this.#decoder.decode(block);
    const existing = this.#streams.get(streamId);
    if (existing !== undefined) {
      // Trailers from the client: they must end the stream; gRPC clients send none worth reading.
      if (!endStream || existing.remoteEnded) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "HEADERS in the middle of a stream");
      }
      this.#endRemote(existing);
      return;
    }
    if (streamId % 2 === 0) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, `a client stream with id ${streamId}`);
    }
    // A stream this side has closed (answered, or reset while the client was still sending): what
    // the client sent before it learnt so is ignored (RFC 9113 §5.1), its header block decoded.
    if (streamId <= this.#lastStreamId) return;
    this.#lastStreamId = streamId;
    if (this.#goawaySent) {
      this.#rst(streamId, ErrorCode.REFUSED_STREAM);
      return;
    }
    if (this.#streams.size >= this.#options.maxConcurrentStreams) {
      this.#rst(streamId, ErrorCode.REFUSED_STREAM);
      return;
    }
    const stream = new ServerStream(streamId, headers, this, this.#peerInitialWindow);
    this.#streams.set(streamId, stream);
    this.#handler.onStream(stream);
    if (endStream && !stream.closed) this.#endRemote(stream);
  }

  #onDataFrame(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on 0");
    // The whole frame (padding included) counts against the windows.
    this.#recvOutstanding += payload.length;
    if (this.#recvOutstanding > this.#options.receiveWindow) {
      throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "the connection window overrun");
    }
    const stream = this.#streams.get(streamId);
    const data = this.#unpad(flags, payload);
    if (stream === undefined || stream.remoteEnded) {
      if (streamId > this.#lastStreamId) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on an idle stream");
      }
      // A stream this side has closed (reset, or answered): its DATA is dropped, credited back.
      this.#consumeConnection(payload.length);
      if (stream !== undefined) this.resetStream(stream, ErrorCode.STREAM_CLOSED);
      return;
    }
    stream.unconsumed += payload.length;
    stream.outstanding += payload.length;
    if (stream.outstanding > this.#options.receiveWindow) {
      this.resetStream(stream, ErrorCode.FLOW_CONTROL_ERROR); // its bytes are consumed at close
      return;
    }
    // Padding is consumed at once; so is everything when the handler buffers it itself.
    const credit = stream.autoCredit ? payload.length : payload.length - data.length;
    if (data.length > 0) stream.onData?.(data.length === payload.length ? data : Buffer.from(data));
    if (credit > 0) this.credit(stream, credit);
    if ((flags & FLAG_END_STREAM) !== 0 && !stream.closed) this.#endRemote(stream);
  }

  #endRemote(stream: ServerStream): void {
    stream.remoteEnded = true;
    stream.onEnd?.();
    if (stream.localEnded) this.#close(stream, true);
  }

  #onReset(streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on 0");
    if (payload.length !== 4) {
      throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "an RST_STREAM frame's size");
    }
    if (streamId > this.#lastStreamId) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on an idle stream");
    }
    const stream = this.#streams.get(streamId);
    if (stream !== undefined) this.#close(stream, false);
  }

  #onSettings(flags: number, streamId: number, payload: Buffer): void {
    if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "SETTINGS on a stream");
    if ((flags & FLAG_ACK) !== 0) {
      if (payload.length !== 0)
        throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "SETTINGS ack");
      return;
    }
    if (payload.length % 6 !== 0) {
      throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a SETTINGS frame's size");
    }
    this.#settingsSeen = true;
    for (let at = 0; at < payload.length; at += 6) {
      const id = payload.readUInt16BE(at);
      const value = payload.readUInt32BE(at + 2);
      switch (id) {
        case SETTINGS_ENABLE_PUSH:
          if (value > 1) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "ENABLE_PUSH");
          break;
        case SETTINGS_INITIAL_WINDOW_SIZE: {
          if (value > MAX_WINDOW) {
            throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE");
          }
          const delta = value - this.#peerInitialWindow;
          this.#peerInitialWindow = value;
          for (const s of this.#streams.values()) {
            s.sendWindow += delta;
            if (s.sendWindow > MAX_WINDOW) {
              throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "a stream window overflow");
            }
          }
          break;
        }
        case SETTINGS_MAX_FRAME_SIZE:
          if (value < MAX_FRAME_SIZE || value > 16_777_215) {
            throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "MAX_FRAME_SIZE");
          }
          this.#peerMaxFrameSize = value;
          break;
        case SETTINGS_HEADER_TABLE_SIZE: // our encoder never indexes: any size suits it
        case SETTINGS_MAX_CONCURRENT_STREAMS: // this side opens no streams
        case SETTINGS_MAX_HEADER_LIST_SIZE: // advisory; our responses are small
        default:
          break;
      }
    }
    this.#frame(FrameType.SETTINGS, FLAG_ACK, 0, EMPTY);
    // A larger initial window may unblock queued DATA.
    for (const s of this.#streams.values()) if (s.queuedBytes > 0) this.flushStream(s);
  }

  #onWindowUpdate(streamId: number, payload: Buffer): void {
    if (payload.length !== 4) {
      throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a WINDOW_UPDATE frame's size");
    }
    const increment = payload.readUInt32BE(0) & 0x7fffffff;
    if (streamId === 0) {
      if (increment === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "a zero increment");
      this.#sendWindow += increment;
      if (this.#sendWindow > MAX_WINDOW) {
        throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "the connection window overflow");
      }
      const blocked = [...this.#blocked];
      this.#blocked.clear();
      for (const s of blocked) this.flushStream(s);
      return;
    }
    const stream = this.#streams.get(streamId);
    if (stream === undefined) {
      if (streamId > this.#lastStreamId) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
      }
      return;
    }
    if (increment === 0) {
      this.resetStream(stream, ErrorCode.PROTOCOL_ERROR);
      return;
    }
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW) {
      this.resetStream(stream, ErrorCode.FLOW_CONTROL_ERROR);
      return;
    }
    this.flushStream(stream);
  }

  // ── output ───────────────────────────────────────────────────────────────────────────────

  sendHeaderBlock(stream: ServerStream, block: Buffer, endStream: boolean): void {
    let flags = endStream ? FLAG_END_STREAM : 0;
    const max = this.#peerMaxFrameSize;
    if (block.length <= max) {
      this.#frame(FrameType.HEADERS, flags | FLAG_END_HEADERS, stream.id, block);
    } else {
      this.#frame(FrameType.HEADERS, flags, stream.id, block.subarray(0, max));
      for (let at = max; at < block.length; at += max) {
        flags = at + max >= block.length ? FLAG_END_HEADERS : 0;
        this.#frame(FrameType.CONTINUATION, flags, stream.id, block.subarray(at, at + max));
      }
    }
    if (endStream) this.#endLocal(stream);
  }

  queueData(stream: ServerStream, data: Buffer): void {
    stream.queue.push(data);
    stream.queuedBytes += data.length;
    this.flushStream(stream);
  }

  /** Sends what the windows allow of a stream's queued DATA, then its trailers once it is all out. */
  flushStream(stream: ServerStream): void {
    if (stream.closed || this.#closed) return;
    while (stream.queue.length > 0) {
      const allowed = Math.min(stream.sendWindow, this.#sendWindow, this.#peerMaxFrameSize);
      if (allowed <= 0) {
        if (this.#sendWindow <= 0) this.#blocked.add(stream);
        return;
      }
      const head = stream.queue[0] as Buffer;
      const piece = head.length <= allowed ? head : head.subarray(0, allowed);
      if (piece === head) stream.queue.shift();
      else stream.queue[0] = head.subarray(allowed);
      stream.queuedBytes -= piece.length;
      stream.sendWindow -= piece.length;
      this.#sendWindow -= piece.length;
      this.#frame(FrameType.DATA, 0, stream.id, piece);
    }
    const trailers = stream.pendingTrailers;
    if (trailers !== null) {
      stream.pendingTrailers = null;
      this.sendHeaderBlock(stream, trailers, true);
      return;
    }
    stream.onDrain?.();
  }

  /**
   * Marks `n` of a stream's received bytes consumed. Credit goes back in large steps (half the
   * stream window, a quarter of the connection's): a WINDOW_UPDATE per request would double the
   * frames of a call. A stream the client has ended gets no more stream credit.
   */
  credit(stream: ServerStream, n: number): void {
    n = Math.min(n, stream.unconsumed);
    if (n <= 0) return;
    stream.unconsumed -= n;
    this.#consumeConnection(n);
    if (stream.remoteEnded || stream.closed) return;
    stream.pendingCredit += n;
    if (stream.pendingCredit >= this.#options.receiveWindow / 2) {
      this.#windowUpdate(stream.id, stream.pendingCredit);
      stream.outstanding -= stream.pendingCredit;
      stream.pendingCredit = 0;
    }
  }

  #consumeConnection(n: number): void {
    this.#pendingCredit += n;
    if (this.#pendingCredit >= this.#options.receiveWindow / 4) {
      this.#windowUpdate(0, this.#pendingCredit);
      this.#recvOutstanding -= this.#pendingCredit;
      this.#pendingCredit = 0;
    }
  }

  resetStream(stream: ServerStream, code: number): void {
    this.#rst(stream.id, code);
    this.#close(stream, false);
  }

  #rst(streamId: number, code: number): void {
    const payload = Buffer.allocUnsafe(4);
    payload.writeUInt32BE(code, 0);
    this.#frame(FrameType.RST_STREAM, 0, streamId, payload);
  }

  #endLocal(stream: ServerStream): void {
    stream.localEnded = true;
    if (stream.remoteEnded) {
      this.#close(stream, true);
    } else {
      // The response is complete before the request: the client may stop sending (RFC 9113 §8.1).
      this.#rst(stream.id, ErrorCode.NO_ERROR);
      this.#close(stream, true);
    }
  }

  #close(stream: ServerStream, complete: boolean): void {
    if (stream.closed) return;
    stream.closed = true;
    stream.localEnded = true;
    stream.queue = [];
    stream.queuedBytes = 0;
    this.#blocked.delete(stream);
    this.#streams.delete(stream.id);
    // Whatever the client sent and nobody consumed is credited back to the connection.
    if (stream.unconsumed > 0) {
      this.#consumeConnection(stream.unconsumed);
      stream.unconsumed = 0;
    }
    stream.onClose?.(complete);
    if (this.#goawaySent && this.#streams.size === 0) this.#endSocket();
  }

  #windowUpdate(streamId: number, increment: number): void {
    const payload = Buffer.allocUnsafe(4);
    payload.writeUInt32BE(increment, 0);
    this.#frame(FrameType.WINDOW_UPDATE, 0, streamId, payload);
  }

  #sendGoAway(code: number, debug: string): void {
    this.#goawaySent = true;
    const payload = Buffer.alloc(8 + Buffer.byteLength(debug));
    payload.writeUInt32BE(this.#lastStreamId, 0);
    payload.writeUInt32BE(code, 4);
    payload.write(debug, 8);
    this.#frame(FrameType.GOAWAY, 0, 0, payload);
  }

  /** A connection error: GOAWAY, then the socket ends and every stream is closed. */
  #fail(code: number, message: string): void {
    if (this.#closed) return;
    this.#sendGoAway(code, message);
    this.#endSocket();
  }

  #endSocket(): void {
    this.#flushOutput();
    this.socket.end();
  }

  /** Queues one frame; every frame of an event-loop turn leaves in one write. */
  #frame(type: number, flags: number, streamId: number, payload: Uint8Array): void {
    if (this.#closed) return;
    const header = Buffer.allocUnsafe(FRAME_HEADER);
    const length = payload.length;
    header[0] = length >>> 16;
    header[1] = (length >>> 8) & 0xff;
    header[2] = length & 0xff;
    header[3] = type;
    header[4] = flags;
    header.writeUInt32BE(streamId, 5);
    this.#output.push(header);
    if (length > 0) this.#output.push(payload as Buffer);
    if (!this.#outputScheduled) {
      this.#outputScheduled = true;
      setImmediate(() => this.#flushOutput());
    }
  }

  #flushOutput(): void {
    this.#outputScheduled = false;
    const out = this.#output;
    if (out.length === 0 || this.socket.destroyed) return;
    this.#output = [];
    this.socket.write(out.length === 1 ? (out[0] as Buffer) : Buffer.concat(out));
  }

  #onSocketClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#output = [];
    for (const stream of [...this.#streams.values()]) this.#close(stream, false);
    this.#handler.onClose();
  }
}

const EMPTY = Buffer.alloc(0);
