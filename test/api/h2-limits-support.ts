/**
 * What the front end's limit tests (h2-limits.test.ts) share: a front end (io-threads.ts, in this
 * thread or in an I/O thread) serving a small test service, and a raw HTTP/2 client that sends
 * whatever frames a test builds and records what comes back, decoded.
 */
import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { type ServiceDefinition, status } from "@grpc/grpc-js";
import {
  type FrontEndEvent,
  type FrontEndLimits,
  IoThreads,
  MethodTable,
} from "../../src/api/io-threads.ts";
import { encodeHeaders, HpackDecoder } from "../../src/api/h2/hpack.ts";
import { type Frame, parseFrames, PREFACE, rawFrame } from "./h2-frames.ts";

export const UNARY = "/test.Limits/Unary";
export const PEER_UNARY = "/cairn.v1.Raft/ProposeMeta";
/** A server-streaming method: the front end proxies it to the main thread's server. */
export const STREAMING = "/test.Limits/Watch";

const bytes = (b: Buffer): Buffer => b;

function unaryDef(path: string, responseStream = false): ServiceDefinition[string] {
  return {
    path,
    requestStream: false,
    responseStream,
    requestSerialize: bytes,
    requestDeserialize: bytes,
    responseSerialize: bytes,
    responseDeserialize: bytes,
  } as unknown as ServiceDefinition[string];
}

/** What the test service saw: each call's request and metadata. */
export interface Seen {
  calls: { path: string; request: Buffer; metadata: Record<string, unknown> }[];
}

export interface TestFrontEnd {
  readonly port: number;
  readonly seen: Seen;
  readonly events: FrontEndEvent[];
  /** Resolve a held call (see `hold`): the answer is the request echoed. */
  readonly held: (() => void)[];
  close(): Promise<void>;
}

export interface FrontEndOptions {
  readonly ioThreads?: number;
  readonly serverOptions?: Record<string, number>;
  /** Calls are answered only when the test releases them (`held`). */
  readonly hold?: boolean;
  readonly limits?: Partial<FrontEndLimits>;
}

/** A front end on 127.0.0.1:0 serving UNARY (echo) and PEER_UNARY (echo). */
export async function startFrontEnd(options: FrontEndOptions = {}): Promise<TestFrontEnd> {
  const seen: Seen = { calls: [] };
  const held: (() => void)[] = [];
  const events: FrontEndEvent[] = [];
  const table = new MethodTable();
  const handler = (
    call: { request: Buffer; metadata: { getMap(): Record<string, unknown> }; getPath(): string },
    callback: (err: unknown, value?: unknown) => void,
  ): void => {
    seen.calls.push({
      path: call.getPath(),
      request: call.request,
      metadata: call.metadata.getMap(),
    });
    if (options.hold === true) held.push(() => callback(null, call.request));
    else callback(null, call.request);
  };
  table.add({ Unary: unaryDef(UNARY) }, { Unary: handler as never });
  table.add({ ProposeMeta: unaryDef(PEER_UNARY) }, { ProposeMeta: handler as never });
  table.add({ Watch: unaryDef(STREAMING, true) }, { Watch: (() => undefined) as never });
  const threads = new IoThreads({
    count: options.ioThreads ?? 0,
    host: "127.0.0.1",
    port: 0,
    mainAddress: "127.0.0.1:1",
    table,
    serverOptions: options.serverOptions ?? {},
    onFailure: (err) => {
      throw err;
    },
    onEvent: (event) => events.push(event),
    ...(options.limits === undefined ? {} : { limits: options.limits }),
  });
  const port = await threads.start();
  return { port, seen, events, held, close: () => threads.close(1000) };
}

/** A request's header block, as a gRPC client sends it (plus `extra`). */
export function requestBlock(
  path: string,
  extra: readonly (readonly [string, string])[] = [],
): Buffer {
  return encodeHeaders([
    [":method", "POST"],
    [":scheme", "http"],
    [":path", path],
    [":authority", "localhost"],
    ["content-type", "application/grpc"],
    ["te", "trailers"],
    ...extra,
  ]);
}

/** A gRPC message, length-prefixed. */
export function grpcMessage(body: Buffer, compressed = false): Buffer {
  const out = Buffer.alloc(5 + body.length);
  out[0] = compressed ? 1 : 0;
  out.writeUInt32BE(body.length, 1);
  body.copy(out, 5);
  return out;
}

export interface Decoded extends Frame {
  /** A HEADERS frame's fields (name, value, …). */
  headers?: string[];
}

/**
 * A raw HTTP/2 client: sends bytes as a test builds them, parses what the server sends back,
 * decoding header blocks (a server's are always whole frames here).
 */
export class RawClient {
  readonly socket: Socket;
  readonly frames: Decoded[] = [];
  #rest = Buffer.alloc(0);
  readonly #decoder = new HpackDecoder(4096, 1 << 20);
  #waiters: (() => void)[] = [];
  closed = false;
  readonly closedPromise: Promise<void>;

  private constructor(socket: Socket, read: boolean) {
    this.socket = socket;
    socket.on("error", () => undefined);
    this.closedPromise = new Promise((resolve) =>
      socket.on("close", () => {
        this.closed = true;
        resolve();
        this.#wake();
      }),
    );
    if (read) {
      socket.on("data", (chunk: Buffer) => {
        const { frames, rest } = parseFrames(Buffer.concat([this.#rest, chunk]));
        this.#rest = Buffer.from(rest);
        for (const f of frames) {
          const d: Decoded = { ...f, payload: Buffer.from(f.payload) };
          if (f.type === 0x1) d.headers = this.#decoder.decode(d.payload);
          this.frames.push(d);
        }
        this.#wake();
      });
    } else {
      socket.pause();
    }
  }

  /** Connects and sends the preface and an empty SETTINGS; `read: false` never reads. */
  static async open(port: number, read = true): Promise<RawClient> {
    const socket = connect(port, "127.0.0.1");
    await new Promise<void>((resolve, reject) => {
      socket.once("connect", resolve);
      socket.once("error", reject);
    });
    const client = new RawClient(socket, read);
    socket.write(Buffer.concat([PREFACE, rawFrame(0x4, 0, 0, Buffer.alloc(0))]));
    return client;
  }

  #wake(): void {
    const waiters = this.#waiters;
    this.#waiters = [];
    for (const w of waiters) w();
  }

  send(...frames: Buffer[]): void {
    this.socket.write(frames.length === 1 ? (frames[0] as Buffer) : Buffer.concat(frames));
  }

  /** Waits until `predicate` holds over the frames received (or the socket closes). */
  async until(predicate: (frames: Decoded[]) => boolean, what: string): Promise<void> {
    while (!predicate(this.frames)) {
      if (this.closed) assert.fail(`the connection closed before ${what}`);
      await new Promise<void>((resolve) => this.#waiters.push(resolve));
    }
  }

  /** The first frame of `type` (on `streamId` when given), waited for. */
  async frame(type: number, streamId?: number): Promise<Decoded> {
    const match = (f: Decoded): boolean =>
      f.type === type && (streamId === undefined || f.streamId === streamId);
    await this.until((fs) => fs.some(match), `a frame of type ${type}`);
    return this.frames.find(match) as Decoded;
  }

  /** The GOAWAY's error code, waited for. */
  async goAwayCode(): Promise<number> {
    const f = await this.frame(0x7);
    return f.payload.readUInt32BE(4);
  }

  /** A stream's outcome: its gRPC status (trailers), or the RST_STREAM code. */
  async outcome(
    streamId: number,
  ): Promise<{ grpcStatus?: number; reset?: number; message?: string }> {
    await this.until(
      (fs) =>
        fs.some(
          (f) =>
            f.streamId === streamId &&
            (f.type === 0x3 || (f.type === 0x1 && header(f, "grpc-status") !== undefined)),
        ),
      `the end of stream ${streamId}`,
    );
    // A status before any reset: the answer (a RST_STREAM NO_ERROR may follow it).
    const end = this.frames.find(
      (f) =>
        f.streamId === streamId &&
        (f.type === 0x3 || (f.type === 0x1 && header(f, "grpc-status") !== undefined)),
    ) as Decoded;
    if (end.type === 0x3) return { reset: end.payload.readUInt32BE(0) };
    const trailers = end;
    const message = header(trailers, "grpc-message");
    return {
      grpcStatus: Number(header(trailers, "grpc-status")),
      ...(message === undefined ? {} : { message: decodeURIComponent(message) }),
    };
  }

  close(): void {
    this.socket.destroy();
  }
}

export function header(f: Decoded, name: string): string | undefined {
  const h = f.headers ?? [];
  for (let i = 0; i < h.length; i += 2) if (h[i] === name) return h[i + 1];
  return undefined;
}

/** HEADERS (END_HEADERS) and one DATA frame with END_STREAM: a whole unary call. */
export function unaryCall(streamId: number, block: Buffer, message: Buffer): Buffer {
  const frames = [rawFrame(0x1, 0x4, streamId, block)];
  // DATA frames of at most 16 KiB (the server's SETTINGS_MAX_FRAME_SIZE), the last END_STREAM.
  for (let at = 0; ; at += 16_384) {
    const end = Math.min(message.length, at + 16_384);
    const last = end === message.length;
    frames.push(rawFrame(0x0, last ? 0x1 : 0, streamId, message.subarray(at, end)));
    if (last) break;
  }
  return Buffer.concat(frames);
}

export { status };
