/**
 * What both ends of an HTTP/2 connection (RFC 9113) share, over a socket, cleartext with prior
 * knowledge: the frame layer of the server side (connection.ts) and of the client side
 * (client.ts). It parses frames, assembles header blocks from HEADERS and CONTINUATION and
 * decodes them (hpack.ts), exchanges SETTINGS, answers PINGs, keeps both flow-control windows of
 * the connection and of each stream, batches the credit it gives back, and sends what it is
 * given. What a HEADERS frame, an RST_STREAM or a GOAWAY mean to a stream depends on the side:
 * a subclass decides (the `handle*` hooks), and tells its streams' owners.
 *
 * Invariants (every subclass relies on them):
 *
 * 1. Every frame produced in one event-loop turn leaves in one socket write, after the turn
 *    (`#frame` queues, `#flushOutput` writes; nothing else writes to the socket). A gRPC call's
 *    frames, and a turn's worth of calls, cost one system call. The one exception: `flushNow()`
 *    writes what is queued at once, for an owner about to block the thread.
 * 2. No DATA beyond the peer's windows: a stream's `queue` leaves only as far as its window, the
 *    connection's and the peer's SETTINGS_MAX_FRAME_SIZE allow; a stream held back by the
 *    connection window waits in `#blocked` for a WINDOW_UPDATE. A stream's window follows the
 *    peer's INITIAL_WINDOW_SIZE changes.
 * 3. What the peer sends counts against this side's windows until it is consumed, and consumed
 *    bytes are credited back in large steps (half a stream window, a quarter of the connection
 *    window), never one WINDOW_UPDATE per frame.
 * 4. A header block is decoded whatever becomes of its stream: the decoder's dynamic table must
 *    follow the peer's encoder.
 * 5. A protocol error ends the connection with GOAWAY: frame handling throws ConnectionError (or
 *    HpackError), caught in one place, `#onData`; nothing this layer does throws out of a
 *    socket callback. After it, input is ignored and no more is read (the socket is paused, then
 *    destroyed after the grace period, `goAwayGraceMs`). Anything else thrown while the peer's
 *    frames are handled, or when the socket closes or the output is flushed (an owner's callback,
 *    a bug), ends that connection the same way, with INTERNAL_ERROR, and reaches
 *    `internalError` to be reported: never the process.
 * 7. What one peer can make this side spend is bounded (CoreOptions): CONTINUATION frames per
 *    header block, resets per second (its own and those its malformed requests cause,
 *    `chargeReset`), unsent output (reading pauses at a quarter of `maxOutputBytes`; the socket
 *    is destroyed past it or after a write stall), the time to its first SETTINGS. A SETTINGS
 *    frame walks the streams only when INITIAL_WINDOW_SIZE changes. Past a bound,
 *    `limitExceeded` hears why.
 * 6. `streamClosed` is called once per stream, when it is done both ways, reset, or the socket
 *    is gone; `connectionClosed` once, after every open stream's.
 *
 * Implementation caveats: priorities are parsed and ignored; server push is never used; frames
 * received are limited to 16 KiB (SETTINGS_MAX_FRAME_SIZE is never raised); SETTINGS are applied
 * without waiting for the peer's acknowledgement (ours only widen what the peer may do); padding
 * is never sent.
 */
import type { Socket } from "node:net";
import { IntMap, clearArray } from "../../common/index.ts";
import { HpackDecoder, HpackEncoder, HpackError, type HeaderList } from "./hpack.ts";

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

export const Setting = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

const FLAG_END_STREAM = 0x1;
const FLAG_ACK = 0x1;
const FLAG_END_HEADERS = 0x4;
const FLAG_PADDED = 0x8;
const FLAG_PRIORITY = 0x20;

const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");
const FRAME_HEADER = 9;
/** A frame payload up to this size is copied into the turn's output buffer (see #output). */
const COPY_MAX_BYTES = 4096;
/** The output buffer frames are copied into; a new one is taken when it is full. */
const OUTPUT_BUFFER_BYTES = 16 * 1024;
const DEFAULT_WINDOW = 65_535;
const MAX_WINDOW = 2 ** 31 - 1;
/** The largest frame payload this side accepts (the protocol's default; we do not raise it). */
const MAX_FRAME_SIZE = 16_384;
const EMPTY = Buffer.alloc(0);

/** The payload length in the frame header at `at` of `buf` (24 bits). */
function frameLength(buf: Buffer, at: number): number {
  return ((buf[at] as number) << 16) | ((buf[at + 1] as number) << 8) | (buf[at + 2] as number);
}

/** What the core needs to know of this side's settings. */
export interface CoreOptions {
  /** Flow-control window of each stream and of the connection for what the peer sends. */
  readonly receiveWindow: number;
  /** SETTINGS_MAX_HEADER_LIST_SIZE: the largest header list the peer may send. */
  readonly maxHeaderListSize: number;
  /**
   * A client's tunnel to one of the server's shard workers (src/api/worker-tunnel.ts): the
   * connection opens with `CONNECT <tunnel> HTTP/1.1`, its preface following at once, and reads
   * the server's HTTP/1.1 answer before any frame; an answer but 200 ends the connection.
   */
  readonly tunnel?: string;
  /**
   * With `tunnel`, TLS inside it: the CONNECT goes alone, and once its 200 has arrived (and
   * nothing after it: the server waits for the client's TLS handshake), the connection goes on
   * over the socket this returns, a TLSSocket over the raw one; the preface and the first frames
   * wait for it. (A TLS session cannot move between a server's threads, a raw descriptor can:
   * worker-tunnel.ts.)
   */
  readonly startTls?: (raw: Socket) => Socket;
  /** CONTINUATION frames a header block may take (default 16); past it, GOAWAY ENHANCE_YOUR_CALM. */
  readonly maxContinuationFrames?: number;
  /**
   * After this side ends the socket (GOAWAY sent), how long the peer has to close it before it
   * is destroyed (default 1000 ms). After a connection error nothing more is read meanwhile.
   */
  readonly goAwayGraceMs?: number;
  /** The peer's preface and first SETTINGS must arrive within this long (ms; 0: no limit). */
  readonly handshakeTimeoutMs?: number;
  /**
   * Streams the peer may reset per second (a token bucket of this many, refilled at this rate);
   * past it, GOAWAY ENHANCE_YOUR_CALM (Rapid Reset, CVE-2023-44487). 0: no limit. Resets this
   * side sends for the peer's faults (a malformed request) count too.
   */
  readonly maxResetsPerSecond?: number;
  /**
   * Output bytes the socket may hold unsent (the peer does not read): past a quarter of it
   * nothing more is read until it drains; past it, or when it has not drained for
   * `writeStallTimeoutMs`, the connection is destroyed. 0: no limit.
   */
  readonly maxOutputBytes?: number;
  readonly writeStallTimeoutMs?: number;
  /**
   * A budget the bytes of header blocks still arriving (a HEADERS frame without END_HEADERS,
   * then its CONTINUATIONs: a block is decoded whole, so it is held until it ends, up to
   * 2 × maxHeaderListSize + 16 KiB) are taken from, and given back to when the block ends or
   * the connection goes (the server's: shared by the node's connections). A block whose next
   * frame finds no room ends the connection (GOAWAY ENHANCE_YOUR_CALM): its decoding cannot be
   * skipped. Absent: not counted.
   */
  readonly headerBlockBudget?: {
    take(bytes: number): boolean;
    release(bytes: number): void;
  };
}

export const DEFAULT_MAX_CONTINUATION_FRAMES = 16;
export const DEFAULT_GOAWAY_GRACE_MS = 1000;

/** The longest answer to a tunnel's CONNECT that is read. */
const MAX_TUNNEL_ANSWER = 4096;

/** A connection-level failure: GOAWAY with this code, then the socket ends. */
export class ConnectionError extends Error {
  readonly code: number;
  constructor(code: number, message: string) {
    super(message);
    this.code = code;
  }
}

/**
 * The flow-control state of one stream, which the core reads and writes; a subclass adds what its
 * side's callers see.
 */
export class CoreStream {
  readonly id: number;
  /**
   * Whether received DATA is credited back to the peer as it arrives (the owner buffers it,
   * bounded by its own limit); false when the owner credits it with `consumed()` (a proxy that
   * credits what it could pass on).
   */
  autoCredit = true;
  /** The peer sent END_STREAM. */
  remoteEnded = false;
  /** This side sent END_STREAM (or reset the stream). */
  localEnded = false;
  closed = false;
  /** Send window (the peer's credit for this stream). */
  sendWindow: number;
  /** DATA waiting for send window, and the trailers to send after it. */
  queue: Buffer[] = [];
  /** Waiting in the connection's list of streams blocked on its send window. */
  blocked = false;
  queuedBytes = 0;
  pendingTrailers: Buffer | null = null;
  /** END_STREAM goes out with the last of `queue` (a client's end of its request). */
  endAfterData = false;
  /** Bytes received and not yet consumed (passed on, or buffered by the owner). */
  unconsumed = 0;
  /** Bytes received beyond what WINDOW_UPDATEs have credited: the peer's window used. */
  outstanding = 0;
  /** Bytes consumed and not yet credited (credited in large steps, not per frame). */
  pendingCredit = 0;

  constructor(id: number, sendWindow: number) {
    this.id = id;
    this.sendWindow = sendWindow;
  }
}

/** A timer (not holding the process) that destroys `socket`. */
function destroyAfter(socket: Socket, ms: number): NodeJS.Timeout {
  const timer = setTimeout(() => socket.destroy(), ms);
  timer.unref();
  return timer;
}

/** What this side's PINGs carry (the ACK echoes it; only one is outstanding at a time). */
const PING_PAYLOAD = Buffer.alloc(8);

export abstract class ConnectionCore<S extends CoreStream> {
  /** The connection's socket; a tunnel with `startTls` replaces it once, by its TLS socket. */
  socket: Socket;
  /**
   * The streams open on the wire (a client's streams waiting for a slot are not in it). An
   * IntMap, not a Map: a Map's churn promotes what its entries reach (src/common/int-map.ts).
   */
  protected readonly streams = new IntMap<S>();
  /** The highest stream id the peer has opened (a client's: 0, servers push nothing). */
  protected lastPeerStreamId = 0;
  /** The peer's SETTINGS_MAX_CONCURRENT_STREAMS (unlimited until it says otherwise). */
  protected peerMaxConcurrentStreams = Infinity;
  /** This side has sent GOAWAY. */
  protected goAwaySent = false;
  /**
   * The encoder of the header blocks this side indexes (HpackEncoder: only blocks framed at
   * once); it follows the peer's SETTINGS_HEADER_TABLE_SIZE, and every header block sent starts
   * with the size update it owes.
   */
  readonly encoder = new HpackEncoder();
  readonly #isClient: boolean;
  readonly #receiveWindow: number;
  /** The connection's receive window: the stream window, but never below the protocol's 65,535. */
  readonly #connectionWindow: number;
  readonly #maxHeaderListSize: number;
  readonly #decoder: HpackDecoder;
  /** Input not yet parsed (a partial frame). */
  #input: Buffer | null = null;
  /** A server waits for the client's preface; a client has none to read. */
  #prefaceSeen: boolean;
  /** A client's tunnel whose answer has not arrived: the bytes received so far; else null. */
  #tunnelAnswer: Buffer | null = null;
  /** TLS to start inside the tunnel once it is open (CoreOptions.startTls); output waits till then. */
  #startTls: ((raw: Socket) => Socket) | null = null;
  #holdOutput = false;
  readonly #onSocketData = (chunk: Buffer): void => this.#onData(chunk);
  readonly #onSocketDrain = (): void => this.#onDrain();
  readonly #onSocketClosed = (): void => this.#onSocketClose();
  #settingsSeen = false;
  /**
   * A header block in progress (HEADERS without END_HEADERS, then CONTINUATIONs): `size` bytes
   * held, taken from #headerBlockBudget (#dropHeaderBlock gives them back).
   */
  #headerBlock: {
    streamId: number;
    chunks: Buffer[];
    size: number;
    frames: number;
    endStream: boolean;
  } | null = null;
  readonly #headerBlockBudget: CoreOptions["headerBlockBudget"];
  readonly #maxContinuationFrames: number;
  readonly #goAwayGraceMs: number;
  /** Rapid Reset's budget: tokens left, refilled at #resetRate a second since #resetsAt. */
  readonly #resetRate: number;
  #resetTokens: number;
  #resetsAt = 0;
  readonly #maxOutputBytes: number;
  readonly #writeStallTimeoutMs: number;
  /** Reading is paused until the socket's output drains (the peer does not read). */
  #outputPaused = false;
  /** Bytes framed since the last write to the socket (what `#output` and `#outBuf` hold). */
  #framedBytes = 0;
  /** DATA queued in the streams for the peer's flow-control windows (Stream.queuedBytes). */
  #queuedBytes = 0;
  /** Each destroys the socket when it fires: the handshake, a write stall, the GOAWAY's grace. */
  #handshakeTimer: NodeJS.Timeout | null = null;
  #stallTimer: NodeJS.Timeout | null = null;
  #graceTimer: NodeJS.Timeout | null = null;
  // The peer's settings.
  #peerInitialWindow = DEFAULT_WINDOW;
  #peerMaxFrameSize = MAX_FRAME_SIZE;
  #sendWindow = DEFAULT_WINDOW;
  /** Connection-level: bytes received beyond the credit sent, and consumed but not credited. */
  #recvOutstanding = 0;
  #pendingCredit = 0;
  /**
   * Streams with DATA waiting for the connection's send window, in order (CoreStream.blocked;
   * a closed one is skipped). A list drained by swapping, not a Set: a Set's churn promotes
   * what it holds (src/common/int-map.ts).
   */
  #blocked: S[] = [];
  #spareBlocked: S[] = [];
  /**
   * Entries of `#blocked` closed since it was last drained or compacted (closeStream): past half
   * of it, it is compacted. A client that never opens the connection window again would otherwise
   * keep every stream it opened and reset since (each with its header list) in the list for good.
   */
  #blockedClosed = 0;
  /**
   * This turn's frames, to leave in one write: what is sealed in `#output`, in order, then the
   * region [#outStart, #outAt) of `#outBuf`. A frame's header, and its payload up to
   * COPY_MAX_BYTES, is copied into `#outBuf`: a call's three frames need no Buffer of their
   * own and no concatenation (a 9-byte header Buffer per frame and Buffer.concat cost ~3 µs a
   * call, 2–3 % of a replicated Put). Written regions of `#outBuf` are never written again
   * (the socket may still be sending them); a new one is taken when it is full.
   */
  #output: Buffer[] = [];
  #outBuf: Buffer | null = null;
  #outStart = 0;
  #outAt = 0;
  #outputScheduled = false;
  /** A connection error was sent: input is ignored. */
  #failed = false;
  /** The socket is ending (after a GOAWAY): nothing more is written. */
  #ending = false;
  #closed = false;

  /**
   * Starts the connection: a client's preface, then this side's `settings` (id, value pairs)
   * and the connection window raised to the receive window.
   */
  constructor(
    socket: Socket,
    side: "client" | "server",
    options: CoreOptions,
    settings: readonly (readonly [number, number])[],
  ) {
    this.socket = socket;
    this.#isClient = side === "client";
    this.#prefaceSeen = this.#isClient;
    this.#receiveWindow = options.receiveWindow;
    this.#connectionWindow = Math.max(options.receiveWindow, DEFAULT_WINDOW);
    this.#maxHeaderListSize = options.maxHeaderListSize;
    this.#decoder = new HpackDecoder(4096, options.maxHeaderListSize);
    this.#maxContinuationFrames = options.maxContinuationFrames ?? DEFAULT_MAX_CONTINUATION_FRAMES;
    this.#headerBlockBudget = options.headerBlockBudget;
    this.#goAwayGraceMs = options.goAwayGraceMs ?? DEFAULT_GOAWAY_GRACE_MS;
    this.#resetRate = options.maxResetsPerSecond ?? 0;
    this.#resetTokens = this.#resetRate;
    this.#maxOutputBytes = options.maxOutputBytes ?? 0;
    this.#writeStallTimeoutMs = options.writeStallTimeoutMs ?? 0;
    const handshakeMs = options.handshakeTimeoutMs ?? 0;
    if (handshakeMs > 0 && !this.#isClient) {
      this.#handshakeTimer = setTimeout(() => {
        this.limitExceeded(`no preface and SETTINGS within ${handshakeMs} ms`);
        this.socket.destroy();
      }, handshakeMs);
      this.#handshakeTimer.unref();
    }
    this.#listen(socket);
    if (this.#isClient && options.tunnel !== undefined) {
      const target = options.tunnel;
      const request = Buffer.from(`CONNECT ${target} HTTP/1.1\r\nHost: ${target}\r\n\r\n`);
      if (options.startTls === undefined) {
        this.#output.push(request);
      } else {
        socket.write(request);
        this.#startTls = options.startTls;
        this.#holdOutput = true;
      }
      this.#tunnelAnswer = Buffer.alloc(0);
    }
    if (this.#isClient) this.#output.push(PREFACE);
    const payload = Buffer.alloc(6 * settings.length);
    settings.forEach(([id, value], i) => {
      payload.writeUInt16BE(id, 6 * i);
      payload.writeUInt32BE(value, 6 * i + 2);
    });
    this.#frame(FrameType.SETTINGS, 0, 0, payload);
    if (this.#connectionWindow > DEFAULT_WINDOW) {
      this.#windowUpdate(0, this.#connectionWindow - DEFAULT_WINDOW);
    }
  }

  #listen(socket: Socket): void {
    socket.on("data", this.#onSocketData);
    if (this.#maxOutputBytes > 0) socket.on("drain", this.#onSocketDrain);
    socket.on("error", () => undefined); // close follows
    socket.on("close", this.#onSocketClosed);
  }

  /** The tunnel is open: TLS starts on its socket, and the output held for it leaves. */
  #upgrade(): void {
    const raw = this.socket;
    const startTls = this.#startTls as (raw: Socket) => Socket;
    this.#startTls = null;
    raw.off("data", this.#onSocketData);
    raw.off("drain", this.#onSocketDrain);
    raw.off("close", this.#onSocketClosed);
    const secure = startTls(raw);
    this.socket = secure;
    this.#listen(secure);
    this.socketReplaced();
    this.#holdOutput = false;
    this.#flushOutput();
  }

  /** Closes at once: every open stream is told it is gone. */
  destroy(): void {
    this.socket.destroy();
  }

  /** The socket has closed, or a connection error has ended the connection. */
  protected get isClosed(): boolean {
    return this.#closed || this.#ending;
  }

  /** The peer's first SETTINGS has arrived. */
  protected get settingsSeen(): boolean {
    return this.#settingsSeen;
  }

  /** The send window a stream opened now starts with. */
  protected get peerInitialWindow(): number {
    return this.#peerInitialWindow;
  }

  // ── hooks: what the frames mean to one side ──────────────────────────────────────────────

  /**
   * A complete header block, decoded (for any stream id but 0). `fault`: NO_ERROR, or the code
   * its stream is to be reset with, whatever else the block says: PROTOCOL_ERROR when it holds a
   * field RFC 9113 §8.2.1 forbids (HpackDecoder.malformed: the request is malformed), or
   * ENHANCE_YOUR_CALM when its list is past SETTINGS_MAX_HEADER_LIST_SIZE (HpackDecoder.tooLarge:
   * `headers` lacks its last fields), as node:http2 resets it and gRPC clients read as
   * RESOURCE_EXHAUSTED.
   */
  protected abstract handleHeaderBlock(
    streamId: number,
    headers: HeaderList,
    end: boolean,
    fault: number,
  ): void;
  /** Whether a stream id is idle: neither side has opened it yet. */
  protected abstract isIdle(streamId: number): boolean;
  /** The size of the header list handleHeaderBlock was last given (HpackDecoder.listSize). */
  protected get headerListSize(): number {
    return this.#decoder.listSize;
  }
  /** DATA on an open stream, its bytes already counted against the windows. */
  protected abstract handleData(stream: S, data: Buffer): void;
  /** The peer ended the stream with its DATA (END_STREAM on a DATA frame). */
  protected abstract handleRemoteEnd(stream: S): void;
  /** The peer reset an open stream. */
  protected abstract handleReset(stream: S, code: number): void;
  /** A GOAWAY from the peer (its payload unchecked). */
  protected abstract handleGoAway(payload: Buffer): void;
  /** This side ended a stream the peer has not ended. */
  protected abstract handleLocalEndFirst(stream: S): void;
  /** A stream is closed (invariant 6). */
  protected abstract streamClosed(stream: S, complete: boolean): void;
  /** The socket is gone, every stream closed (invariant 6). */
  protected abstract connectionClosed(): void;
  /** A stream's queue has drained (its trailers or END_STREAM, if any, gone with it). */
  protected drained(_stream: S): void {}
  /** `n` bytes of a stream's DATA were framed: they leave with this turn's write. */
  protected dataFramed(_stream: S, _n: number): void {}
  /** This turn's frames were handed to the socket. */
  protected outputFlushed(): void {}
  /** The peer acknowledged a PING this side sent (sendPing). */
  protected pingAcked(): void {}
  /** The peer's SETTINGS were applied (the first ones, or a change). */
  protected settingsApplied(): void {}
  /** The server refused the tunnel (`answer`: its status line); the socket is destroyed next. */
  protected tunnelRefused(_answer: string): void {}
  /** `socket` is now the TLS socket started inside the tunnel (CoreOptions.startTls). */
  protected socketReplaced(): void {}
  /**
   * Code of this side threw while handling the peer's frames: the connection ends (GOAWAY
   * INTERNAL_ERROR) and this hears why, once per error, to report it.
   */
  protected internalError(_err: unknown): void {}
  /**
   * Every frame of one read has been handled: what the owner deferred to the end of the read
   * (a call dispatched once a reset later in the same read could cancel it) may go now.
   */
  protected inputDone(): void {}
  /** The peer went past a limit (`what`): the connection ends (GOAWAY, or destroyed). */
  protected limitExceeded(_what: string): void {}
  /** The output is no longer backlogged (`outputBacklogged`): held work may go on. */
  protected outputRoom(): void {}

  // ── input ────────────────────────────────────────────────────────────────────────────────

  #onData(chunk: Buffer): void {
    if (this.#closed || this.#failed) return;
    if (this.#tunnelAnswer !== null) {
      const rest = this.#readTunnelAnswer(chunk);
      if (rest === null) return;
      if (this.#startTls !== null) {
        if (rest.length > 0) {
          this.tunnelRefused("bytes in cleartext after the answer, where TLS should start");
          this.socket.destroy();
          return;
        }
        this.#upgrade();
        return;
      }
      chunk = rest;
    }
    let buf = chunk;
    const partial = this.#input;
    this.#input = null;
    try {
      let at = 0;
      if (partial !== null) {
        if (this.#prefaceSeen) {
          // The last chunk ended inside a frame: only that frame's missing bytes are copied
          // to it, and the rest of this chunk is read in place. (Joining the whole chunk to
          // it copied every chunk a stream's frames straddle: a 64-KiB buffer a socket read,
          // which made a node receiving snapshots run a full GC several times a second.)
          const frame = this.#completeFrame(partial, chunk);
          if (frame === null) {
            buf = EMPTY; // all of it kept (#input)
          } else {
            buf = chunk.subarray(frame.length - partial.length);
            this.#readFrames(frame, 0);
          }
        } else {
          buf = Buffer.concat([partial, chunk]);
        }
      }
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
      at = this.#readFrames(buf, at);
      if (at < buf.length && !this.#failed) {
        // Keep the partial frame (copied when it is a view of a larger chunk).
        buf = buf.subarray(at);
        this.#input = at > 0 ? Buffer.from(buf) : buf;
      }
      if (!this.#failed) this.inputDone();
    } catch (err) {
      if (err instanceof ConnectionError) this.fail(err.code, err.message);
      else if (err instanceof HpackError) this.fail(ErrorCode.COMPRESSION_ERROR, err.message);
      else this.#failInternally(err);
    }
  }

  /**
   * Handles the whole frames of `buf` from `at`; returns where the first incomplete one starts.
   * Throws ConnectionError on a frame over MAX_FRAME_SIZE (before its payload has arrived).
   */
  #readFrames(buf: Buffer, at: number): number {
    while (buf.length - at >= FRAME_HEADER && !this.#closed && !this.#failed) {
      const length = frameLength(buf, at);
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
    return at;
  }

  /**
   * The frame `partial` (a prefix of one, kept from earlier chunks) completed with the first
   * bytes of `chunk`: a new buffer holding exactly that frame. null when `chunk` does not
   * complete it: what it had of the frame is kept for the next chunk. A header announcing a
   * frame over MAX_FRAME_SIZE is returned as is, for #readFrames to refuse.
   */
  #completeFrame(partial: Buffer, chunk: Buffer): Buffer | null {
    let head = partial;
    let used = 0;
    if (head.length < FRAME_HEADER) {
      const take = Math.min(FRAME_HEADER - head.length, chunk.length);
      head = Buffer.concat([head, chunk.subarray(0, take)]);
      used = take;
      if (head.length < FRAME_HEADER) {
        this.#input = head;
        return null;
      }
    }
    const length = frameLength(head, 0);
    if (length > MAX_FRAME_SIZE) return head;
    const missing = FRAME_HEADER + length - head.length;
    if (chunk.length - used < missing) {
      this.#input = Buffer.concat([head, chunk.subarray(used)]);
      return null;
    }
    return Buffer.concat([head, chunk.subarray(used, used + missing)]);
  }

  /**
   * Something this side's code threw while it handled the peer's frames (an owner's callback, a
   * bug): that connection ends (GOAWAY INTERNAL_ERROR), never the process (invariant 5).
   */
  #failInternally(err: unknown): void {
    this.fail(ErrorCode.INTERNAL_ERROR, "internal error");
    this.#input = null;
    try {
      this.internalError(err);
    } catch {
      // The report itself failed: the connection is ending anyway.
    }
  }

  /**
   * Reads the answer to the tunnel's CONNECT: null while it is incomplete or when it refused
   * (the socket is destroyed), else the bytes after it (the server's first frames).
   */
  #readTunnelAnswer(chunk: Buffer): Buffer | null {
    const answer = Buffer.concat([this.#tunnelAnswer as Buffer, chunk]);
    const end = answer.indexOf("\r\n\r\n");
    if (end < 0) {
      this.#tunnelAnswer = answer;
      if (answer.length > MAX_TUNNEL_ANSWER) {
        this.tunnelRefused("an answer to CONNECT that does not end");
        this.socket.destroy();
      }
      return null;
    }
    this.#tunnelAnswer = null;
    const line = answer.subarray(0, answer.indexOf("\r\n")).toString("latin1");
    if (!/^HTTP\/1\.[01] 200(?: |$)/.test(line)) {
      this.tunnelRefused(line);
      this.socket.destroy();
      return null;
    }
    return answer.subarray(end + 4);
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
        // A client never enables push; a server must never receive it.
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "an unexpected PUSH_PROMISE");
      case FrameType.PING:
        if (streamId !== 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "PING on a stream");
        if (payload.length !== 8) {
          throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "a PING frame's size");
        }
        if ((flags & FLAG_ACK) === 0)
          this.#frame(FrameType.PING, FLAG_ACK, 0, Buffer.from(payload));
        else this.pingAcked();
        return;
      case FrameType.GOAWAY:
        if (streamId !== 0)
          throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "GOAWAY on a stream");
        this.handleGoAway(payload);
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
      this.#takeBlockBytes(block.length);
      this.#headerBlock = {
        streamId,
        chunks: [Buffer.from(block)],
        size: block.length,
        frames: 0,
        endStream,
      };
      return;
    }
    // Decoded first, whatever happens to the stream (invariant 4).
    const headers = this.#decoder.decode(block);
    this.handleHeaderBlock(streamId, headers, endStream, this.#blockFault());
  }

  #onContinuation(flags: number, streamId: number, payload: Buffer): void {
    const pending = this.#headerBlock;
    if (pending === null || pending.streamId !== streamId) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "an unexpected CONTINUATION");
    }
    // A header block far beyond the list limit is refused before it is all buffered, and so is
    // one in too many frames (empty CONTINUATIONs cost the peer 9 bytes each and hold nothing).
    if (pending.size + payload.length > this.#maxHeaderListSize * 2 + MAX_FRAME_SIZE) {
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "a header block too large");
    }
    if (++pending.frames > this.#maxContinuationFrames) {
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "a header block in too many frames");
    }
    this.#takeBlockBytes(payload.length);
    pending.size += payload.length;
    if (payload.length > 0) pending.chunks.push(Buffer.from(payload));
    if ((flags & FLAG_END_HEADERS) === 0) return;
    const block = Buffer.concat(pending.chunks);
    this.#dropHeaderBlock();
    const headers = this.#decoder.decode(block);
    this.handleHeaderBlock(streamId, headers, pending.endStream, this.#blockFault());
  }

  /**
   * Takes `bytes` more of the header block still arriving from headerBlockBudget, or throws the
   * connection error that ends the connection (what the block took goes back as it closes).
   */
  #takeBlockBytes(bytes: number): void {
    if (bytes === 0 || this.#headerBlockBudget === undefined) return;
    if (!this.#headerBlockBudget.take(bytes)) {
      throw new ConnectionError(
        ErrorCode.ENHANCE_YOUR_CALM,
        "no room for another header block still arriving",
      );
    }
  }

  /** Forgets the header block in progress, if any, and gives its bytes back to the budget. */
  #dropHeaderBlock(): void {
    const pending = this.#headerBlock;
    if (pending === null) return;
    this.#headerBlock = null;
    this.#headerBlockBudget?.release(pending.size);
  }

  /** What makes the block just decoded a stream error (see handleHeaderBlock), or NO_ERROR. */
  #blockFault(): number {
    if (this.#decoder.tooLarge) return ErrorCode.ENHANCE_YOUR_CALM;
    return this.#decoder.malformed ? ErrorCode.PROTOCOL_ERROR : ErrorCode.NO_ERROR;
  }

  #onDataFrame(flags: number, streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on 0");
    // The whole frame (padding included) counts against the windows.
    this.#recvOutstanding += payload.length;
    if (this.#recvOutstanding > this.#connectionWindow) {
      throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "the connection window overrun");
    }
    const stream = this.streams.get(streamId);
    const data = this.#unpad(flags, payload);
    if (stream === undefined || stream.remoteEnded) {
      if (this.isIdle(streamId)) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "DATA on an idle stream");
      }
      // A stream this side has closed (reset, or answered): its DATA is dropped, credited back.
      this.#consumeConnection(payload.length);
      if (stream !== undefined) this.resetForFault(stream, ErrorCode.STREAM_CLOSED);
      return;
    }
    stream.unconsumed += payload.length;
    stream.outstanding += payload.length;
    if (stream.outstanding > this.#receiveWindow) {
      this.resetForFault(stream, ErrorCode.FLOW_CONTROL_ERROR); // its bytes are consumed at close
      return;
    }
    // Padding is consumed at once; so is everything when the owner buffers it itself.
    const credit = stream.autoCredit ? payload.length : payload.length - data.length;
    if (data.length > 0) {
      this.handleData(stream, data.length === payload.length ? data : Buffer.from(data));
    }
    if (credit > 0) this.credit(stream, credit);
    if ((flags & FLAG_END_STREAM) !== 0 && !stream.closed) this.handleRemoteEnd(stream);
  }

  #onReset(streamId: number, payload: Buffer): void {
    if (streamId === 0) throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on 0");
    if (payload.length !== 4) {
      throw new ConnectionError(ErrorCode.FRAME_SIZE_ERROR, "an RST_STREAM frame's size");
    }
    if (this.isIdle(streamId)) {
      throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "RST_STREAM on an idle stream");
    }
    if (!this.chargeReset()) {
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "too many streams reset");
    }
    const stream = this.streams.get(streamId);
    if (stream !== undefined) this.handleReset(stream, payload.readUInt32BE(0));
  }

  /**
   * Takes one reset from the peer's budget (maxResetsPerSecond): false when it is spent, and the
   * caller ends the connection (GOAWAY ENHANCE_YOUR_CALM).
   */
  protected chargeReset(): boolean {
    const rate = this.#resetRate;
    if (rate === 0) return true;
    if (this.#resetTokens < 1) {
      const now = performance.now();
      this.#resetTokens = Math.min(
        rate,
        this.#resetTokens + ((now - this.#resetsAt) * rate) / 1000,
      );
      this.#resetsAt = now;
      if (this.#resetTokens < 1) return false;
    } else if (this.#resetTokens === rate) {
      this.#resetsAt = performance.now();
    }
    this.#resetTokens--;
    return true;
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
    if (!this.#settingsSeen) {
      this.#settingsSeen = true;
      if (this.#handshakeTimer !== null) clearTimeout(this.#handshakeTimer);
      this.#handshakeTimer = null;
    }
    // INITIAL_WINDOW_SIZE is applied once a frame, after its entries: each entry walked every
    // open stream, and a frame of 2,730 entries flipping it cost 25–40 ms of CPU with 1,000
    // streams open. Applied in order, the entries leave each stream's window at the last value's
    // and overflow it, if at all, at the highest one's: the same checks, one walk each.
    const initial = this.#peerInitialWindow;
    let lastWindow = initial;
    let highestWindow = initial;
    for (let at = 0; at < payload.length; at += 6) {
      const id = payload.readUInt16BE(at);
      const value = payload.readUInt32BE(at + 2);
      switch (id) {
        case Setting.ENABLE_PUSH:
          // RFC 9113 §6.5.2: a server may only say 0.
          if (value > 1 || (value === 1 && this.#isClient)) {
            throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "ENABLE_PUSH");
          }
          break;
        case Setting.INITIAL_WINDOW_SIZE: {
          if (value > MAX_WINDOW) {
            throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "INITIAL_WINDOW_SIZE");
          }
          lastWindow = value;
          if (value > highestWindow) highestWindow = value;
          break;
        }
        case Setting.MAX_FRAME_SIZE:
          if (value < MAX_FRAME_SIZE || value > 16_777_215) {
            throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "MAX_FRAME_SIZE");
          }
          this.#peerMaxFrameSize = value;
          break;
        case Setting.MAX_CONCURRENT_STREAMS:
          this.peerMaxConcurrentStreams = value;
          break;
        case Setting.HEADER_TABLE_SIZE:
          this.encoder.setPeerTableSize(value);
          break;
        case Setting.MAX_HEADER_LIST_SIZE: // advisory; what we send is small
        default:
          break;
      }
    }
    // Only a change walks the streams: a SETTINGS frame costs the same whatever is open.
    const delta = lastWindow - initial;
    if (highestWindow > initial) {
      for (const s of this.streams.values()) {
        if (s.sendWindow + (highestWindow - initial) > MAX_WINDOW) {
          throw new ConnectionError(ErrorCode.FLOW_CONTROL_ERROR, "a stream window overflow");
        }
      }
    }
    if (delta !== 0) {
      this.#peerInitialWindow = lastWindow;
      for (const s of this.streams.values()) s.sendWindow += delta;
    }
    this.#frame(FrameType.SETTINGS, FLAG_ACK, 0, EMPTY);
    // A larger initial window may unblock queued DATA.
    if (delta > 0)
      for (const s of this.streams.values()) if (s.queuedBytes > 0) this.flushStream(s);
    this.settingsApplied();
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
      const blocked = this.#blocked;
      this.#blocked = this.#spareBlocked;
      this.#spareBlocked = blocked;
      this.#blockedClosed = 0;
      for (const s of blocked) {
        if (!s.blocked) continue;
        s.blocked = false;
        this.flushStream(s);
      }
      clearArray(blocked);
      return;
    }
    const stream = this.streams.get(streamId);
    if (stream === undefined) {
      if (this.isIdle(streamId)) {
        throw new ConnectionError(ErrorCode.PROTOCOL_ERROR, "WINDOW_UPDATE on an idle stream");
      }
      return;
    }
    if (increment === 0) {
      this.resetForFault(stream, ErrorCode.PROTOCOL_ERROR);
      return;
    }
    stream.sendWindow += increment;
    if (stream.sendWindow > MAX_WINDOW) {
      this.resetForFault(stream, ErrorCode.FLOW_CONTROL_ERROR);
      return;
    }
    this.flushStream(stream);
  }

  // ── output ───────────────────────────────────────────────────────────────────────────────

  /** Sends a header block (HEADERS, then CONTINUATIONs past the peer's frame size). */
  sendHeaderBlock(stream: S, block: Buffer, endStream: boolean): void {
    const update = this.encoder.takeSizeUpdate();
    if (update !== null) block = Buffer.concat([update, block]);
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
    if (endStream) this.endLocal(stream);
  }

  queueData(stream: S, data: Buffer): void {
    stream.queue.push(data);
    stream.queuedBytes += data.length;
    this.#queuedBytes += data.length;
    this.flushStream(stream);
  }

  /**
   * Sends what the windows allow of a stream's queued DATA (invariant 2), then what ends it once
   * it is all out: its trailers, or END_STREAM (on the last DATA frame when there is one).
   */
  flushStream(stream: S): void {
    if (stream.closed || this.#closed) return;
    const queue = stream.queue;
    let framed = 0;
    let ended = false;
    while (queue.length > 0) {
      const allowed = Math.min(stream.sendWindow, this.#sendWindow, this.#peerMaxFrameSize);
      if (allowed <= 0) {
        if (this.#sendWindow <= 0 && !stream.blocked) {
          stream.blocked = true;
          this.#blocked.push(stream);
        }
        break;
      }
      const head = queue[0] as Buffer;
      const piece = head.length <= allowed ? head : head.subarray(0, allowed);
      if (piece === head) queue.shift();
      else queue[0] = head.subarray(allowed);
      stream.queuedBytes -= piece.length;
      this.#queuedBytes -= piece.length;
      stream.sendWindow -= piece.length;
      this.#sendWindow -= piece.length;
      framed += piece.length;
      ended = queue.length === 0 && stream.endAfterData && stream.pendingTrailers === null;
      this.#frame(FrameType.DATA, ended ? FLAG_END_STREAM : 0, stream.id, piece);
    }
    if (framed > 0) this.dataFramed(stream, framed);
    if (queue.length > 0) return;
    const trailers = stream.pendingTrailers;
    if (trailers !== null) {
      stream.pendingTrailers = null;
      this.sendHeaderBlock(stream, trailers, true);
      return;
    }
    if (stream.endAfterData && !stream.localEnded) {
      if (!ended) this.#frame(FrameType.DATA, FLAG_END_STREAM, stream.id, EMPTY);
      this.endLocal(stream);
      return;
    }
    this.drained(stream);
  }

  /**
   * Marks `n` of a stream's received bytes consumed. Credit goes back in large steps (half the
   * stream window, a quarter of the connection's): a WINDOW_UPDATE per request would double the
   * frames of a call. A stream the peer has ended gets no more stream credit.
   */
  credit(stream: S, n: number): void {
    n = Math.min(n, stream.unconsumed);
    if (n <= 0) return;
    stream.unconsumed -= n;
    this.#consumeConnection(n);
    if (stream.remoteEnded || stream.closed) return;
    stream.pendingCredit += n;
    if (stream.pendingCredit >= this.#receiveWindow / 2) {
      this.#windowUpdate(stream.id, stream.pendingCredit);
      stream.outstanding -= stream.pendingCredit;
      stream.pendingCredit = 0;
    }
  }

  #consumeConnection(n: number): void {
    this.#pendingCredit += n;
    if (this.#pendingCredit >= this.#connectionWindow / 4) {
      this.#windowUpdate(0, this.#pendingCredit);
      this.#recvOutstanding -= this.#pendingCredit;
      this.#pendingCredit = 0;
    }
  }

  /**
   * Resets `stream` for the peer's stream error (RFC 9113 §5.4.2), charged to its reset budget
   * as its own resets are: a flood of resets it provokes (WINDOW_UPDATE 0, DATA or HEADERS on a
   * stream it ended) is a Rapid Reset by other means, and ran at 5,000 a second unchecked.
   */
  protected resetForFault(stream: S, code: number): void {
    if (!this.chargeReset()) {
      throw new ConnectionError(ErrorCode.ENHANCE_YOUR_CALM, "too many stream errors");
    }
    this.resetStream(stream, code);
  }

  /** Resets an open stream (RST_STREAM with `code`) and closes it. */
  resetStream(stream: S, code: number): void {
    this.sendReset(stream.id, code);
    this.closeStream(stream, false);
  }

  /** Sends a PING; its ACK reaches pingAcked(). */
  protected sendPing(): void {
    this.#frame(FrameType.PING, 0, 0, PING_PAYLOAD);
  }

  protected sendReset(streamId: number, code: number): void {
    const payload = Buffer.allocUnsafe(4);
    payload.writeUInt32BE(code, 0);
    this.#frame(FrameType.RST_STREAM, 0, streamId, payload);
  }

  protected endLocal(stream: S): void {
    stream.localEnded = true;
    if (stream.remoteEnded) this.closeStream(stream, true);
    else this.handleLocalEndFirst(stream);
  }

  protected closeStream(stream: S, complete: boolean): void {
    if (stream.closed) return;
    stream.closed = true;
    stream.localEnded = true;
    stream.queue = [];
    this.#queuedBytes -= stream.queuedBytes;
    stream.queuedBytes = 0;
    if (stream.blocked) {
      stream.blocked = false;
      if (++this.#blockedClosed * 2 > this.#blocked.length) this.#compactBlocked();
    }
    this.streams.delete(stream.id);
    // Whatever the peer sent and nobody consumed is credited back to the connection.
    if (stream.unconsumed > 0) {
      this.#consumeConnection(stream.unconsumed);
      stream.unconsumed = 0;
    }
    this.streamClosed(stream, complete);
  }

  /** Drops the closed streams from `#blocked`, keeping the order of the others. */
  #compactBlocked(): void {
    const list = this.#blocked;
    let kept = 0;
    for (const s of list) if (s.blocked) list[kept++] = s;
    list.length = kept;
    this.#blockedClosed = 0;
  }

  /** Streams waiting for the connection's send window (`#blocked`, closed ones not yet dropped). */
  get blockedStreams(): number {
    return this.#blocked.length;
  }

  #windowUpdate(streamId: number, increment: number): void {
    const payload = Buffer.allocUnsafe(4);
    payload.writeUInt32BE(increment, 0);
    this.#frame(FrameType.WINDOW_UPDATE, 0, streamId, payload);
  }

  /** GOAWAY: the peer's streams up to `lastPeerStreamId` are (or will be) processed, no more. */
  protected sendGoAway(code: number, debug: string): void {
    this.goAwaySent = true;
    const payload = Buffer.alloc(8 + Buffer.byteLength(debug));
    payload.writeUInt32BE(this.lastPeerStreamId, 0);
    payload.writeUInt32BE(code, 4);
    payload.write(debug, 8);
    this.#frame(FrameType.GOAWAY, 0, 0, payload);
  }

  /** A connection error: GOAWAY, then the socket ends and every stream is closed. */
  protected fail(code: number, message: string): void {
    if (this.#closed || this.#failed) return;
    this.#failed = true;
    if (code === ErrorCode.ENHANCE_YOUR_CALM) this.limitExceeded(message);
    this.sendGoAway(code, message); // not sent when the socket is already ending
    this.endSocket();
    // Nothing more is read: what the peer sends after a connection error waits in the kernel's
    // buffers (then in its own) until the socket is destroyed, at the latest after the grace.
    this.socket.pause();
  }

  /**
   * Writes what is queued and ends the socket (streams close when it has); the peer has the
   * grace period (goAwayGraceMs) to close its side, then the socket is destroyed.
   */
  protected endSocket(): void {
    if (this.#ending) return;
    this.#flushOutput();
    this.#ending = true;
    this.socket.end();
    if (!this.#closed) this.#graceTimer = destroyAfter(this.socket, this.#goAwayGraceMs);
  }

  /** Queues one frame; every frame of an event-loop turn leaves in one write (invariant 1). */
  #frame(type: number, flags: number, streamId: number, payload: Uint8Array): void {
    if (this.#closed || this.#ending) return;
    const length = payload.length;
    this.#framedBytes += FRAME_HEADER + length;
    const copied = length <= COPY_MAX_BYTES;
    const need = FRAME_HEADER + (copied ? length : 0);
    let buf = this.#outBuf;
    if (buf === null || this.#outAt + need > buf.length) {
      this.#sealOutput();
      buf = this.#outBuf = Buffer.allocUnsafe(Math.max(OUTPUT_BUFFER_BYTES, need));
      this.#outStart = this.#outAt = 0;
    }
    let at = this.#outAt;
    buf[at] = length >>> 16;
    buf[at + 1] = (length >>> 8) & 0xff;
    buf[at + 2] = length & 0xff;
    buf[at + 3] = type;
    buf[at + 4] = flags;
    buf[at + 5] = (streamId >>> 24) & 0xff;
    buf[at + 6] = (streamId >>> 16) & 0xff;
    buf[at + 7] = (streamId >>> 8) & 0xff;
    buf[at + 8] = streamId & 0xff;
    at += FRAME_HEADER;
    if (copied) {
      if (length > 0) buf.set(payload, at);
      this.#outAt = at + length;
    } else {
      this.#outAt = at;
      this.#sealOutput();
      this.#output.push(payload as Buffer);
    }
    if (!this.#outputScheduled) {
      this.#outputScheduled = true;
      setImmediate(() => {
        try {
          this.#flushOutput();
        } catch (err) {
          this.#failInternally(err);
        }
      });
    }
  }

  /**
   * Writes what this turn has framed now rather than after the turn (invariant 1's one
   * exception): for a caller about to block the thread (a synchronous disk write) whose frames
   * should travel meanwhile. Frames framed later in the turn leave after it, as ever.
   */
  flushNow(): void {
    if (this.#outputScheduled) this.#flushOutput();
  }

  /** Moves the frames copied into #outBuf since the last seal to the end of #output. */
  #sealOutput(): void {
    if (this.#outBuf === null || this.#outAt === this.#outStart) return;
    this.#output.push(this.#outBuf.subarray(this.#outStart, this.#outAt));
    this.#outStart = this.#outAt;
  }

  #flushOutput(): void {
    this.#outputScheduled = false;
    if (this.#holdOutput) return; // until TLS starts in the tunnel (#upgrade)
    this.#framedBytes = 0;
    this.#sealOutput();
    const out = this.#output;
    if (out.length === 0 || this.socket.destroyed) return;
    this.#output = [];
    this.socket.write(out.length === 1 ? (out[0] as Buffer) : Buffer.concat(out));
    if (this.#maxOutputBytes > 0) {
      this.#checkOutput();
      if (!this.#outputPaused && !this.socket.destroyed) this.outputRoom();
    }
    this.outputFlushed();
  }

  /**
   * Whether this side's output waits on the peer: its unsent output (#unsentBytes) is past a
   * quarter of maxOutputBytes (the bound at which reading pauses). An owner holds new work for
   * the connection meanwhile, until `outputRoom`.
   */
  get outputBacklogged(): boolean {
    return (
      this.#maxOutputBytes > 0 &&
      (this.#outputPaused || this.#unsentBytes > this.#maxOutputBytes / 4)
    );
  }

  /**
   * Output not yet taken by the peer: what the socket holds, what this turn framed, and the
   * DATA waiting in the streams for the peer's windows (a peer that grants no window does not
   * read either).
   */
  get #unsentBytes(): number {
    return this.socket.writableLength + this.#framedBytes + this.#queuedBytes;
  }

  /**
   * Whether `bytes` more output fit under maxOutputBytes with what this turn framed and what the
   * socket holds unsent. When they do not, the connection ends now (as it would when this turn's
   * output is written), its streams closed before this returns: an owner about to frame a large
   * answer learns at once that nobody will read it, and so do the calls still being answered,
   * whose answers are then never encoded (a client that pipelines hundreds of large reads and
   * reads nothing would otherwise have every answer built in one turn before the bound is seen).
   */
  admitOutput(bytes: number): boolean {
    if (this.#closed) return false;
    const unsent = this.#unsentBytes + bytes;
    if (this.#maxOutputBytes === 0 || unsent <= this.#maxOutputBytes) return true;
    this.limitExceeded(`${unsent} bytes of output the client does not read`);
    this.socket.destroy();
    this.#onSocketClose();
    return false;
  }

  /**
   * A peer that does not read: past a quarter of maxOutputBytes unsent, reading stops until the
   * socket drains (so control frames it asks for, ACKs of its PINGs and SETTINGS, cannot pile
   * up); past maxOutputBytes, or stalled for writeStallTimeoutMs, the connection is destroyed.
   */
  #checkOutput(): void {
    const unsent = this.socket.writableLength;
    if (unsent > this.#maxOutputBytes) {
      this.limitExceeded(`${unsent} bytes of output the client does not read`);
      this.socket.destroy();
      return;
    }
    if (this.#outputPaused || unsent <= this.#maxOutputBytes / 4) return;
    this.#outputPaused = true;
    this.socket.pause();
    if (this.#writeStallTimeoutMs > 0) {
      this.#stallTimer = setTimeout(() => {
        this.limitExceeded(`output the client has not read for ${this.#writeStallTimeoutMs} ms`);
        this.socket.destroy();
      }, this.#writeStallTimeoutMs);
      this.#stallTimer.unref();
    }
  }

  #onDrain(): void {
    if (!this.#outputPaused) return;
    this.#outputPaused = false;
    if (this.#stallTimer !== null) clearTimeout(this.#stallTimer);
    this.#stallTimer = null;
    if (!this.#failed) this.socket.resume();
    this.outputRoom();
  }

  #onSocketClose(): void {
    if (this.#closed) return;
    this.#closed = true;
    for (const timer of [this.#handshakeTimer, this.#stallTimer, this.#graceTimer]) {
      if (timer !== null) clearTimeout(timer);
    }
    this.#output = [];
    this.#outStart = this.#outAt;
    this.#dropHeaderBlock();
    // Every stream and the owner hear of the close even when one of them throws (reported).
    for (const stream of [...this.streams.values()]) {
      try {
        this.closeStream(stream, false);
      } catch (err) {
        this.#failInternally(err);
      }
    }
    try {
      this.connectionClosed();
    } catch (err) {
      this.#failInternally(err);
    }
  }
}
