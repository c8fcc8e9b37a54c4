/**
 * A raw HTTP/2 client for tests that attack or probe a server below any HTTP/2 library: it writes
 * the frames it is given (valid or not), reads the server's, decodes their header blocks, and
 * waits on what has arrived with bounded deadlines. Its HPACK encoder is its own (literals
 * without indexing, names as given, octets as given): the tests must be able to send what a
 * correct encoder would refuse (upper-case names, CR/LF, non-ASCII).
 *
 * It plays the peer of a client under test too (`RawH2Client.accept`), and sends nothing of its
 * own accord when told (`passive`): a test that counts or withholds credit writes every frame.
 *
 * Used by the attack suite (test/e2e/front-end-attacks.test.ts), the conformance, differential,
 * fuzz and limit suites, the tests of src/api/h2/'s connections (test/api/h2-*.test.ts) and
 * scripts/fuzz-h2.ts.
 */
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { HpackDecoder } from "../../src/api/h2/hpack.ts";

export const PREFACE = Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", "latin1");

export const T = {
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

export const F = {
  END_STREAM: 0x1,
  ACK: 0x1,
  END_HEADERS: 0x4,
  PADDED: 0x8,
  PRIORITY: 0x20,
} as const;

export const E = {
  NO_ERROR: 0x0,
  PROTOCOL_ERROR: 0x1,
  INTERNAL_ERROR: 0x2,
  FLOW_CONTROL_ERROR: 0x3,
  SETTINGS_TIMEOUT: 0x4,
  STREAM_CLOSED: 0x5,
  FRAME_SIZE_ERROR: 0x6,
  REFUSED_STREAM: 0x7,
  CANCEL: 0x8,
  COMPRESSION_ERROR: 0x9,
  CONNECT_ERROR: 0xa,
  ENHANCE_YOUR_CALM: 0xb,
} as const;

export const S = {
  HEADER_TABLE_SIZE: 0x1,
  ENABLE_PUSH: 0x2,
  MAX_CONCURRENT_STREAMS: 0x3,
  INITIAL_WINDOW_SIZE: 0x4,
  MAX_FRAME_SIZE: 0x5,
  MAX_HEADER_LIST_SIZE: 0x6,
} as const;

export interface RawFrame {
  readonly type: number;
  readonly flags: number;
  readonly streamId: number;
  readonly payload: Buffer;
}

/** One frame's bytes. `length` overrides the header's length field (to lie about it). */
export function frame(
  type: number,
  flags: number,
  streamId: number,
  payload: Buffer = Buffer.alloc(0),
  length = payload.length,
): Buffer {
  const out = Buffer.alloc(9 + payload.length);
  out.writeUIntBE(length, 0, 3);
  out[3] = type;
  out[4] = flags;
  out.writeUInt32BE(streamId >>> 0, 5);
  payload.copy(out, 9);
  return out;
}

export function u32(n: number): Buffer {
  const b = Buffer.alloc(4);
  b.writeUInt32BE(n >>> 0, 0);
  return b;
}

/** A SETTINGS payload of (id, value) pairs. */
export function settings(...pairs: (readonly [number, number])[]): Buffer {
  const b = Buffer.alloc(6 * pairs.length);
  pairs.forEach(([id, value], i) => {
    b.writeUInt16BE(id, 6 * i);
    b.writeUInt32BE(value >>> 0, 6 * i + 2);
  });
  return b;
}

export function goAwayPayload(lastStreamId: number, code: number): Buffer {
  return Buffer.concat([u32(lastStreamId), u32(code)]);
}

/** The whole frames at the start of `data`, and where the rest (a frame cut short) begins. */
export function parseFrames(data: Buffer): { frames: RawFrame[]; used: number } {
  const frames: RawFrame[] = [];
  let at = 0;
  while (at + 9 <= data.length) {
    const length = data.readUIntBE(at, 3);
    if (at + 9 + length > data.length) break;
    frames.push({
      type: data[at + 3] as number,
      flags: data[at + 4] as number,
      streamId: data.readUInt32BE(at + 5) & 0x7fffffff,
      payload: Buffer.from(data.subarray(at + 9, at + 9 + length)),
    });
    at += 9 + length;
  }
  return { frames, used: at };
}

// ── HPACK, as a test needs it ─────────────────────────────────────────────────────────────────

function hpackInt(out: number[], flags: number, prefixBits: number, value: number): void {
  const max = (1 << prefixBits) - 1;
  if (value < max) {
    out.push(flags | value);
    return;
  }
  out.push(flags | max);
  let rest = value - max;
  while (rest >= 0x80) {
    out.push((rest % 0x80) | 0x80);
    rest = Math.floor(rest / 0x80);
  }
  out.push(rest);
}

function hpackString(out: number[], s: string | Buffer): void {
  const bytes = typeof s === "string" ? Buffer.from(s, "latin1") : s;
  hpackInt(out, 0x00, 7, bytes.length);
  for (const b of bytes) out.push(b);
}

/** A header field to encode: name and value as latin1 strings or raw octets. */
export type Field = readonly [string | Buffer, string | Buffer];

/**
 * A header block of literals without indexing with literal names (RFC 7541 §6.2.2): the octets
 * go on the wire as they are given, whatever they are.
 */
export function encodeBlock(fields: readonly Field[]): Buffer {
  const out: number[] = [];
  for (const [name, value] of fields) {
    out.push(0x00);
    hpackString(out, name);
    hpackString(out, value);
  }
  return Buffer.from(out);
}

// ── gRPC, as a test needs it ─────────────────────────────────────────────────────────────────

/** The request headers of a gRPC call to `path`, then `extra` fields. */
export function grpcRequest(path: string, extra: readonly Field[] = []): Field[] {
  return [
    [":method", "POST"],
    [":scheme", "http"],
    [":path", path],
    [":authority", "127.0.0.1"],
    ["content-type", "application/grpc"],
    ["te", "trailers"],
    ...extra,
  ];
}

/** A length-prefixed gRPC message (`compressed`: its flag byte says so). */
export function grpcMessage(body: Buffer, compressed = false): Buffer {
  const out = Buffer.alloc(5 + body.length);
  out[0] = compressed ? 1 : 0;
  out.writeUInt32BE(body.length, 1);
  body.copy(out, 5);
  return out;
}

function varint(n: number): Buffer {
  const out: number[] = [];
  while (n >= 0x80) {
    out.push((n & 0x7f) | 0x80);
    n = Math.floor(n / 0x80);
  }
  out.push(n);
  return Buffer.from(out);
}

/** A protobuf length-delimited field. */
export function pbBytes(field: number, bytes: Buffer): Buffer {
  return Buffer.concat([varint((field << 3) | 2), varint(bytes.length), bytes]);
}

/** cairn.v1.PutRequest{key, value}. */
export function putRequest(key: Buffer, value: Buffer): Buffer {
  return Buffer.concat([pbBytes(1, key), pbBytes(2, value)]);
}

/** cairn.v1.GetRequest{key}. */
export function getRequest(key: Buffer): Buffer {
  return pbBytes(1, key);
}

/**
 * The frames of a whole request on `streamId`: HEADERS (END_HEADERS) with `fields`, then `body`
 * in DATA frames of at most 16 KiB (a server's SETTINGS_MAX_FRAME_SIZE before it says more), the
 * last with END_STREAM.
 */
export function requestFrames(streamId: number, fields: readonly Field[], body: Buffer): Buffer {
  const frames = [frame(T.HEADERS, F.END_HEADERS, streamId, encodeBlock(fields))];
  for (let at = 0; ; at += 16_384) {
    const end = Math.min(body.length, at + 16_384);
    const last = end === body.length;
    frames.push(frame(T.DATA, last ? F.END_STREAM : 0, streamId, body.subarray(at, end)));
    if (last) return Buffer.concat(frames);
  }
}

/**
 * The frames of a whole unary call on `streamId`: HEADERS (END_HEADERS), then the message in DATA
 * frames (`requestFrames`).
 */
export function unaryCall(
  streamId: number,
  path: string,
  message: Buffer,
  extra: readonly Field[] = [],
): Buffer {
  return requestFrames(streamId, grpcRequest(path, extra), grpcMessage(message));
}

// ── the client ───────────────────────────────────────────────────────────────────────────────

/** What became of one stream, as the client saw it. */
export interface StreamOutcome {
  /** Decoded header blocks received on it, in order (response headers, then trailers). */
  readonly blocks: string[][];
  /** The RST_STREAM code received, if any. */
  rst: number | null;
  /** Bytes of DATA received. */
  dataBytes: number;
  /** END_STREAM received (on DATA or HEADERS). */
  ended: boolean;
}

/** A call's end as `grpcOutcome` tells it: its grpc-status (and grpc-message), or a reset. */
export interface CallOutcome {
  grpcStatus?: number;
  message?: string;
  reset?: number;
}

export interface RawClientOptions {
  /** Acknowledge the server's SETTINGS (true) or leave them unacknowledged. */
  readonly ackSettings?: boolean;
  /**
   * Send nothing of its own accord: no SETTINGS ACK, no WINDOW_UPDATE for DATA received, no PING
   * ACK (and `open` sends the preface and SETTINGS but waits for nothing). The test writes every
   * frame the peer sees.
   */
  readonly passive?: boolean;
  /** Do not read the socket at all (a peer that never reads): frames are never parsed. */
  readonly neverRead?: boolean;
  /**
   * Close this side on the server's FIN, as a plain socket does, so that `closed` follows the
   * server's close at once. By default the client keeps its side open (see `closed`).
   */
  readonly closeOnEnd?: boolean;
}

export class RawH2Client {
  readonly socket: Socket;
  readonly frames: RawFrame[] = [];
  readonly streams = new Map<number, StreamOutcome>();
  /** Bytes handed to the kernel so far (written and not waiting in this side's buffer). */
  bytesWritten = 0;
  /** An error decoding the server's header blocks (the server's encoder is at fault). */
  hpackError: unknown = null;
  /**
   * The socket is closed both ways. The client keeps its side open after the server's FIN
   * (allowHalfOpen, unless `closeOnEnd`): a server that only half-closes and goes on reading is
   * not "closed".
   */
  closed = false;
  /** The server's FIN has arrived. */
  remoteEnded = false;
  /** Resolves once the socket has closed (`closed`). */
  readonly whenClosed: Promise<void>;
  readonly #ack: boolean;
  readonly #passive: boolean;
  readonly #neverRead: boolean;
  readonly #decoder = new HpackDecoder(4096, 1 << 20);
  #rest = Buffer.alloc(0);
  /** Accepted sockets: the client's preface is still to be read (and dropped). */
  #prefaceDue: boolean;
  #block: { streamId: number; chunks: Buffer[]; end: boolean } | null = null;
  #waiters = new Set<() => void>();
  readonly #connected: Promise<void>;

  /** Connects to `port` (or takes a socket already connected: see `accept`). */
  constructor(port: number | Socket, options: RawClientOptions = {}) {
    this.#passive = options.passive ?? false;
    this.#ack = (options.ackSettings ?? true) && !this.#passive;
    this.#neverRead = options.neverRead ?? false;
    this.#prefaceDue = typeof port !== "number";
    if (typeof port === "number") {
      const allowHalfOpen = options.closeOnEnd !== true;
      this.socket = connect({ port, host: "127.0.0.1", noDelay: true, allowHalfOpen });
      this.#connected = new Promise((resolve, reject) => {
        this.socket.once("connect", resolve);
        this.socket.once("error", reject);
      });
    } else {
      this.socket = port;
      this.#connected = Promise.resolve();
    }
    this.whenClosed = new Promise((resolve) => this.socket.once("close", () => resolve()));
    this.socket.on("error", () => undefined); // close follows
    if (options.neverRead === true) this.socket.pause();
    else this.socket.on("data", (chunk: Buffer) => this.#onData(chunk));
    this.socket.on("end", () => {
      this.remoteEnded = true;
      this.#wake();
    });
    this.socket.on("close", () => {
      this.closed = true;
      this.#wake();
    });
  }

  /**
   * Connects, sends the preface and `initial` SETTINGS, and (unless it never reads, or is
   * passive) waits for the server's SETTINGS and acknowledges them: after it, the client sends
   * nothing of its own accord but answers to PINGs and credit for DATA, so a test's frames are
   * not interleaved.
   */
  static async open(
    port: number,
    options: RawClientOptions = {},
    initial: Buffer = Buffer.alloc(0),
  ): Promise<RawH2Client> {
    const c = new RawH2Client(port, options);
    await c.#connected;
    c.send(PREFACE, frame(T.SETTINGS, 0, 0, initial));
    if (options.neverRead !== true && options.passive !== true) {
      await c.waitFor(() => c.frames.some((f) => f.type === T.SETTINGS && f.flags === 0), 10_000);
    }
    return c;
  }

  /**
   * The server's end of `socket`, which a test's server accepted: the peer of a client under
   * test. It reads the client's preface, then its frames, and sends nothing of its own accord
   * (not even SETTINGS: the test writes them).
   */
  static accept(socket: Socket): RawH2Client {
    return new RawH2Client(socket, { passive: true });
  }

  connected(): Promise<void> {
    return this.#connected;
  }

  /** Writes bytes now (whether the kernel takes them or node's buffer holds them). */
  send(...bufs: Buffer[]): boolean {
    if (this.socket.destroyed) return false;
    const data = bufs.length === 1 ? (bufs[0] as Buffer) : Buffer.concat(bufs);
    return this.socket.write(data);
  }

  /**
   * Writes `data` and waits until node's buffer has drained into the kernel, or `deadlineMs`
   * passes, or the socket closes. Answers whether it drained (false: the server stopped
   * reading, or closed).
   */
  async write(data: Buffer, deadlineMs = 5000): Promise<boolean> {
    const drained = await this.#write(data, deadlineMs);
    // A turn of the event loop between writes: an attacker looping on writes the kernel takes at
    // once must not starve this process's other sockets (the probes measuring the server).
    await new Promise<void>((resolve) => setImmediate(resolve));
    return drained;
  }

  async #write(data: Buffer, deadlineMs: number): Promise<boolean> {
    if (this.socket.destroyed || this.closed) return false;
    if (this.socket.write(data)) {
      this.bytesWritten = this.socket.bytesWritten;
      return true;
    }
    const drained = await new Promise<boolean>((resolve) => {
      const timer = setTimeout(() => done(false), deadlineMs);
      const onDrain = (): void => done(true);
      const onClose = (): void => done(false);
      const done = (ok: boolean): void => {
        clearTimeout(timer);
        this.socket.off("drain", onDrain);
        this.socket.off("close", onClose);
        resolve(ok);
      };
      this.socket.once("drain", onDrain);
      this.socket.once("close", onClose);
    });
    this.bytesWritten = this.socket.bytesWritten;
    return drained;
  }

  /** Bytes the kernel has accepted from this socket (node's own buffer excluded). */
  get bytesAccepted(): number {
    return this.socket.bytesWritten - this.socket.writableLength;
  }

  #wake(): void {
    for (const w of [...this.#waiters]) w();
  }

  #onData(chunk: Buffer): void {
    let data = this.#rest.length === 0 ? chunk : Buffer.concat([this.#rest, chunk]);
    if (this.#prefaceDue) {
      if (data.length < PREFACE.length) {
        this.#rest = Buffer.from(data);
        return;
      }
      this.#prefaceDue = false;
      data = data.subarray(PREFACE.length);
    }
    const { frames, used } = parseFrames(data);
    this.#rest = Buffer.from(data.subarray(used));
    for (const f of frames) this.#onFrame(f);
    this.#wake();
  }

  #stream(id: number): StreamOutcome {
    let s = this.streams.get(id);
    if (s === undefined) {
      s = { blocks: [], rst: null, dataBytes: 0, ended: false };
      this.streams.set(id, s);
    }
    return s;
  }

  #onFrame(f: RawFrame): void {
    this.frames.push(f);
    switch (f.type) {
      case T.SETTINGS:
        if ((f.flags & F.ACK) === 0 && this.#ack) this.send(frame(T.SETTINGS, F.ACK, 0));
        break;
      case T.DATA: {
        const s = this.#stream(f.streamId);
        s.dataBytes += f.payload.length;
        if ((f.flags & F.END_STREAM) !== 0) s.ended = true;
        // Credit what arrived, so large answers keep coming.
        if (f.payload.length > 0 && !this.#passive) {
          this.send(
            frame(T.WINDOW_UPDATE, 0, 0, u32(f.payload.length)),
            frame(T.WINDOW_UPDATE, 0, f.streamId, u32(f.payload.length)),
          );
        }
        break;
      }
      case T.HEADERS: {
        let p = f.payload;
        if ((f.flags & F.PADDED) !== 0) p = p.subarray(1, p.length - (p[0] as number));
        if ((f.flags & F.PRIORITY) !== 0) p = p.subarray(5);
        this.#block = {
          streamId: f.streamId,
          chunks: [Buffer.from(p)],
          end: (f.flags & F.END_STREAM) !== 0,
        };
        if ((f.flags & F.END_HEADERS) !== 0) this.#endBlock();
        break;
      }
      case T.CONTINUATION:
        if (this.#block !== null) {
          this.#block.chunks.push(f.payload);
          if ((f.flags & F.END_HEADERS) !== 0) this.#endBlock();
        }
        break;
      case T.RST_STREAM:
        if (f.payload.length === 4) this.#stream(f.streamId).rst = f.payload.readUInt32BE(0);
        break;
      case T.PING:
        if ((f.flags & F.ACK) === 0 && !this.#passive) {
          this.send(frame(T.PING, F.ACK, 0, f.payload));
        }
        break;
      default:
        break;
    }
  }

  #endBlock(): void {
    const block = this.#block;
    this.#block = null;
    if (block === null) return;
    const s = this.#stream(block.streamId);
    try {
      s.blocks.push(this.#decoder.decode(Buffer.concat(block.chunks)));
    } catch (err) {
      this.hpackError ??= err;
    }
    if (block.end) s.ended = true;
  }

  /** The first GOAWAY received: its last stream id and error code. */
  get goAway(): { lastStreamId: number; code: number; debug: string } | null {
    const f = this.frames.find((x) => x.type === T.GOAWAY);
    if (f === undefined || f.payload.length < 8) return null;
    return {
      lastStreamId: f.payload.readUInt32BE(0) & 0x7fffffff,
      code: f.payload.readUInt32BE(4),
      debug: f.payload.subarray(8).toString("latin1"),
    };
  }

  /**
   * Waits until `cond` holds (checked on every arrival and on close), up to `timeoutMs`;
   * answers whether it held. Never throws: callers assert on the answer with what they know.
   */
  async waitFor(cond: () => boolean, timeoutMs: number): Promise<boolean> {
    if (cond()) return true;
    return new Promise<boolean>((resolve) => {
      const check = (): void => {
        if (cond()) done(true);
        else if (this.closed || this.remoteEnded) done(cond()); // nothing more will come
      };
      const timer = setTimeout(() => done(cond()), timeoutMs);
      const done = (ok: boolean): void => {
        clearTimeout(timer);
        this.#waiters.delete(check);
        resolve(ok);
      };
      this.#waiters.add(check);
    });
  }

  /**
   * Waits until `cond` holds over the frames received (checked on every arrival), however long
   * it takes (the test's timeout bounds it); fails the test if the socket closes first.
   */
  async until(cond: (frames: readonly RawFrame[]) => boolean, what: string): Promise<void> {
    while (!cond(this.frames)) {
      if (this.closed) assert.fail(`the connection closed before ${what}`);
      await this.#next();
    }
  }

  /** Resolves once the other side has ended its half (its FIN), or the socket has closed. */
  async ended(): Promise<void> {
    while (!this.remoteEnded && !this.closed) await this.#next();
  }

  /** The next arrival, end or close. */
  #next(): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = (): void => {
        this.#waiters.delete(wake);
        resolve();
      };
      this.#waiters.add(wake);
    });
  }

  /** The first frame of `type` received (on `streamId` when given), waited for with `until`. */
  async received(type: number, streamId?: number): Promise<RawFrame> {
    const match = (f: RawFrame): boolean =>
      f.type === type && (streamId === undefined || f.streamId === streamId);
    await this.until((fs) => fs.some(match), `a frame of type ${type}`);
    return this.frames.find(match) as RawFrame;
  }

  /** The first GOAWAY's error code, waited for with `until`. */
  async goAwayCode(): Promise<number> {
    return (await this.received(T.GOAWAY)).payload.readUInt32BE(4);
  }

  /** Bytes of DATA received on stream `id`. */
  dataBytes(id: number): number {
    return this.streams.get(id)?.dataBytes ?? 0;
  }

  /**
   * How the gRPC call on stream `id` ended, waited for with `until`: its grpc-status and
   * grpc-message (a status counts even if a RST_STREAM NO_ERROR follows it), or else the
   * RST_STREAM's code.
   */
  async grpcOutcome(id: number): Promise<CallOutcome> {
    const statusBlock = (): string[] | undefined =>
      this.streams.get(id)?.blocks.find((b) => headerValue(b, "grpc-status") !== undefined);
    // A GOAWAY with an error ends the connection: the stream will not end after it.
    const failed = (): boolean => (this.goAway?.code ?? 0) !== 0;
    await this.until(
      () =>
        statusBlock() !== undefined ||
        (this.streams.get(id)?.rst ?? null) !== null ||
        this.hpackError !== null ||
        failed(),
      `the end of stream ${id}`,
    );
    if (this.hpackError !== null) throw this.hpackError;
    const block = statusBlock();
    const rst = this.streams.get(id)?.rst ?? null;
    if (block === undefined && rst === null) {
      assert.fail(`GOAWAY ${JSON.stringify(this.goAway)} before stream ${id} ended`);
    }
    if (block === undefined) return { reset: rst as number };
    const message = headerValue(block, "grpc-message");
    return {
      grpcStatus: Number(headerValue(block, "grpc-status")),
      ...(message === undefined ? {} : { message: decodeURIComponent(message) }),
    };
  }

  /**
   * Waits up to `timeoutMs` for the server to close the connection: its FIN, and then a write
   * fails (a PING every 20 ms probes it), so a server that half-closes and reads on does not
   * count (a client that never reads probes from the start). Answers whether it closed.
   */
  async waitClosed(timeoutMs: number): Promise<boolean> {
    const end = performance.now() + timeoutMs;
    // A client that never reads sees no FIN: only its writes can find the socket closed.
    if (
      !this.#neverRead &&
      !(await this.waitFor(() => this.remoteEnded || this.closed, timeoutMs))
    ) {
      return false;
    }
    const ping = frame(T.PING, 0, 0, Buffer.alloc(8));
    while (!this.closed && performance.now() < end) {
      if (!this.socket.destroyed && this.socket.writableLength < 1 << 20) this.socket.write(ping);
      // The next probe after 20 ms, or at once on the close.
      await new Promise<void>((resolve) => {
        const socket = this.socket;
        const timer = setTimeout(done, 20);
        function done(): void {
          clearTimeout(timer);
          socket.off("close", done);
          resolve();
        }
        socket.once("close", done);
      });
    }
    return this.closed;
  }

  /** Waits until stream `id` is done: ended, reset, or the connection gone. */
  async streamDone(id: number, timeoutMs: number): Promise<StreamOutcome | null> {
    const s = (): StreamOutcome | undefined => this.streams.get(id);
    await this.waitFor(() => {
      const x = s();
      return (x !== undefined && (x.ended || x.rst !== null)) || this.goAway !== null;
    }, timeoutMs);
    return s() ?? null;
  }

  /** A PING with `tag` and its ACK: proof that the server has read everything sent before. */
  async roundTrip(tag: number, timeoutMs: number): Promise<boolean> {
    const payload = Buffer.alloc(8);
    payload.writeUInt32BE(tag >>> 0, 4);
    this.send(frame(T.PING, 0, 0, payload));
    return this.waitFor(
      () =>
        this.frames.some(
          (f) => f.type === T.PING && (f.flags & F.ACK) !== 0 && f.payload.equals(payload),
        ),
      timeoutMs,
    );
  }

  destroy(): void {
    this.socket.destroy();
  }
}

/** The value of header `name` in a decoded block (a flat name, value, … list). */
export function headerValue(
  block: readonly string[] | undefined,
  name: string,
): string | undefined {
  if (block === undefined) return undefined;
  for (let i = 0; i < block.length; i += 2) if (block[i] === name) return block[i + 1];
  return undefined;
}

/** A call's grpc-status: from its last header block, or null when it has none (reset). */
export function grpcStatus(outcome: StreamOutcome | null): number | null {
  if (outcome === null) return null;
  const value = headerValue(outcome.blocks.at(-1), "grpc-status");
  return value === undefined ? null : Number(value);
}
