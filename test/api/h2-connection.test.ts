/**
 * The I/O threads' HTTP/2 server connection (src/api/h2/connection.ts), against node:http2's
 * client (nghttp2: Huffman strings, a dynamic table, its own flow control) and raw frames.
 */
import assert from "node:assert/strict";
import http2, { type ClientHttp2Session, type IncomingHttpHeaders } from "node:http2";
import { createServer, type Server, type Socket } from "node:net";
import { Duplex } from "node:stream";
import { after, before, describe, it } from "node:test";
import { ErrorCode, ServerConnection, type ServerStream } from "../../src/api/h2/connection.ts";
import { encodeHeaders } from "../../src/api/h2/hpack.ts";
import {
  frame,
  PREFACE,
  type RawClientOptions,
  type RawFrame,
  RawH2Client,
  settings,
  u32,
} from "../support/h2-raw.ts";

/** A server whose streams are handled by `onStream`; it records how each stream closed. */
async function serve(
  onStream: (stream: ServerStream) => void,
): Promise<{ server: Server; port: number; connections: ServerConnection[]; closes: boolean[] }> {
  const connections: ServerConnection[] = [];
  const closes: boolean[] = [];
  const server = createServer((socket) => {
    connections.push(
      new ServerConnection(socket, {
        onStream: (stream) => {
          onStream(stream);
          const handlerClose = stream.onClose;
          stream.onClose = (complete) => {
            closes.push(complete);
            handlerClose?.(complete);
          };
        },
        onClose: () => undefined,
      }),
    );
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  return { server, port: address.port, connections, closes };
}

/**
 * Echo: answers with the request's body once it has ended, the request's `x-meta` values back in
 * the trailers (and `x-size`, the body's length).
 */
function echo(stream: ServerStream): void {
  const chunks: Buffer[] = [];
  stream.onData = (chunk) => chunks.push(chunk);
  stream.onEnd = () => {
    const body = Buffer.concat(chunks);
    const meta: [string, string][] = [];
    for (let i = 0; i < stream.headers.length; i += 2) {
      if (stream.headers[i] === "x-meta") meta.push(["x-meta", stream.headers[i + 1] as string]);
    }
    stream.sendHeaders(encodeHeaders([[":status", "200"]]));
    stream.sendData(body);
    stream.sendTrailers(encodeHeaders([["x-size", String(body.length)], ...meta]));
  };
}

interface Answer {
  headers: IncomingHttpHeaders;
  body: Buffer;
  trailers: IncomingHttpHeaders;
}

function request(
  session: ClientHttp2Session,
  headers: Record<string, string | string[]>,
  body: Buffer,
): Promise<Answer> {
  return new Promise((resolve, reject) => {
    const req = session.request({ ":method": "POST", ":path": "/echo", ...headers });
    let responseHeaders: IncomingHttpHeaders = {};
    let trailers: IncomingHttpHeaders = {};
    const chunks: Buffer[] = [];
    req.on("response", (h) => (responseHeaders = h));
    req.on("trailers", (t) => (trailers = t));
    req.on("data", (c: Buffer) => chunks.push(c));
    req.on("end", () =>
      resolve({ headers: responseHeaders, body: Buffer.concat(chunks), trailers }),
    );
    req.on("error", reject);
    req.end(body);
  });
}

describe("HTTP/2 server connection", { timeout: 30_000 }, () => {
  let echoServer: Awaited<ReturnType<typeof serve>>;
  before(async () => {
    echoServer = await serve(echo);
  });
  after(() => echoServer.server.close());

  it("serves many requests on one connection: headers through HPACK's table, bodies both ways", async () => {
    const session = http2.connect(`http://127.0.0.1:${echoServer.port}`);
    try {
      const answers = await Promise.all(
        Array.from({ length: 300 }, (_, i) =>
          request(
            session,
            // Values that change per request and repeat across them: literals, Huffman, indexing.
            { "x-meta": [`value-${i % 7}`, `other ${i}`], "grpc-timeout": `${i}m` },
            Buffer.from(`body ${i}`),
          ),
        ),
      );
      answers.forEach((a, i) => {
        assert.equal(a.headers[":status"], 200);
        assert.equal(a.body.toString(), `body ${i}`);
        assert.equal(a.trailers["x-size"], String(`body ${i}`.length));
        assert.equal(a.trailers["x-meta"], `value-${i % 7}, other ${i}`);
      });
    } finally {
      session.close();
    }
  });

  it("keeps both flow-control windows: 3 MiB each way through 64 KiB and 1 MiB windows", async () => {
    // The client's windows are node's defaults (64 KiB): the answer waits for its WINDOW_UPDATEs.
    const session = http2.connect(`http://127.0.0.1:${echoServer.port}`, {
      settings: { initialWindowSize: 65_535 },
    });
    try {
      const body = Buffer.alloc(3 << 20);
      for (let i = 0; i < body.length; i += 4) body.writeUInt32LE(i, i);
      const [a, b] = await Promise.all([
        request(session, {}, body),
        request(session, {}, body.subarray(0, 100_000)),
      ]);
      assert.ok(a.body.equals(body), "3 MiB echoed intact");
      assert.ok(b.body.equals(body.subarray(0, 100_000)));
      // Header blocks larger than a frame: CONTINUATION frames both ways.
      const big = "m".repeat(40_000);
      const c = await request(session, { "x-meta": big }, Buffer.from("x"));
      assert.equal(c.trailers["x-meta"], big);
    } finally {
      session.close();
    }
  });

  it("answers PINGs, and tells the handler of a stream the client reset", async () => {
    const opened = Promise.withResolvers<ServerStream>();
    const closed = Promise.withResolvers<boolean>();
    const { server, port } = await serve((stream) => {
      stream.onClose = (complete) => closed.resolve(complete);
      opened.resolve(stream);
    });
    const session = http2.connect(`http://127.0.0.1:${port}`);
    try {
      await new Promise((resolve) => session.once("connect", resolve));
      await new Promise<void>((resolve, reject) =>
        session.ping((err) => (err === null ? resolve() : reject(err))),
      );
      const req = session.request({ ":method": "POST", ":path": "/x" });
      req.on("error", () => undefined);
      req.write(Buffer.from("partial"));
      await opened.promise;
      req.close(http2.constants.NGHTTP2_CANCEL);
      assert.equal(await closed.promise, false, "a reset stream closes incomplete");
    } finally {
      session.close();
      server.close();
    }
  });

  it("answers before the request has ended, and resets the rest of the request (NO_ERROR)", async () => {
    const { server, port } = await serve((stream) => {
      stream.sendHeaders(encodeHeaders([[":status", "200"]]));
      stream.sendTrailers(encodeHeaders([["grpc-status", "3"]]));
    });
    const session = http2.connect(`http://127.0.0.1:${port}`);
    try {
      const req = session.request({ ":method": "POST", ":path": "/x" });
      req.write(Buffer.alloc(1000));
      const trailers = await new Promise<IncomingHttpHeaders>((resolve, reject) => {
        req.on("trailers", resolve);
        req.on("error", reject);
        req.resume();
      });
      assert.equal(trailers["grpc-status"], "3");
      await new Promise((resolve) => req.on("close", resolve));
      assert.equal(req.rstCode, http2.constants.NGHTTP2_NO_ERROR);
    } finally {
      session.close();
      server.close();
    }
  });

  it("goes away gracefully: the open stream finishes, a new one is refused, the socket ends", async () => {
    let held: ServerStream | null = null;
    const opened = Promise.withResolvers<true>();
    const { server, port, connections } = await serve((stream) => {
      held = stream;
      opened.resolve(true);
    });
    const session = http2.connect(`http://127.0.0.1:${port}`);
    const sessionClosed = new Promise((resolve) => session.on("close", resolve));
    session.on("error", () => undefined);
    try {
      const first = session.request({ ":method": "POST", ":path": "/x" });
      first.end();
      await opened.promise;
      const goaway = new Promise((resolve) => session.once("goaway", resolve));
      (connections[0] as ServerConnection).goAway();
      await goaway;
      const refused = session.request({ ":method": "POST", ":path": "/x" });
      const refusal = new Promise((resolve) => refused.on("error", resolve));
      refused.end();
      assert.ok(await refusal, "a stream opened after GOAWAY fails");
      (held as ServerStream | null)?.sendHeaders(encodeHeaders([[":status", "200"]]), true);
      const answer = await new Promise<IncomingHttpHeaders>((resolve) =>
        first.on("response", resolve),
      );
      assert.equal(answer[":status"], 200);
      await sessionClosed;
    } finally {
      session.destroy();
      server.close();
    }
  });

  it("sends no more DATA than the client's windows allow, and the rest on WINDOW_UPDATE", async () => {
    const { server, port } = await serve(echo);
    const client = new RawH2Client(port, RAW);
    try {
      // The client's stream window is 100 bytes; the connection's is the default 65,535.
      client.send(PREFACE, frame(0x4, 0, 0, settings([0x4, 100])));
      const headers = encodeHeaders([
        [":method", "POST"],
        [":scheme", "http"],
        [":path", "/echo"],
        [":authority", "x"],
      ]);
      client.send(frame(0x1, 0x4, 1, headers), frame(0x0, 0x1, 1, Buffer.alloc(1000, 7)));
      await client.until(() => client.dataBytes(1) >= 100, "the first 100 bytes");
      // Nothing more arrives within the window: the next frames the server sends are answers to
      // a PING, proof that it has processed everything before it.
      client.send(frame(0x6, 0, 0, Buffer.alloc(8)));
      await client.until((f) => f.some((x) => x.type === 0x6), "the PING's answer");
      assert.equal(client.dataBytes(1), 100);
      assert.ok(!client.frames.some((x) => x.type === 0x1 && (x.flags & 0x1) !== 0), "no trailers");
      client.send(frame(0x8, 0, 1, u32(900)));
      await client.until(
        (f) => f.some((x) => x.type === 0x1 && x.streamId === 1 && (x.flags & 0x1) !== 0),
        "the trailers",
      );
      assert.equal(client.dataBytes(1), 1000);
    } finally {
      client.destroy();
      server.close();
    }
  });

  it("keeps no stream the client reset while it waited for the connection window", async () => {
    const { server, port, connections } = await serve(echo);
    const client = new RawH2Client(port, RAW);
    try {
      client.send(PREFACE, frame(0x4, 0, 0, settings()));
      const headers = encodeHeaders([
        [":method", "POST"],
        [":scheme", "http"],
        [":path", "/echo"],
        [":authority", "x"],
      ]);
      // 70,000 bytes echoed take the whole connection window (65,535): every answer after it waits.
      client.send(frame(0x1, 0x4, 1, headers));
      for (let k = 0; k < 5; k++)
        client.send(frame(0x0, k === 4 ? 0x1 : 0, 1, Buffer.alloc(14_000)));
      await client.until(() => client.dataBytes(1) >= 65_535, "the connection window's worth");
      // The client never opens the connection window again; it opens streams and resets each
      // once answered (its header block is what such a stream held on to).
      for (let id = 3; id < 3 + 2 * 200; id += 2) {
        client.send(
          frame(0x1, 0x4, id, headers),
          frame(0x0, 0x1, id, Buffer.alloc(10, 1)),
          frame(0x3, 0, id, u32(0x8)),
        );
      }
      client.send(frame(0x6, 0, 0, Buffer.alloc(8)));
      await client.until((f) => f.some((x) => x.type === 0x6), "the PING's answer");
      const connection = connections[0];
      assert.ok(connection !== undefined);
      // Stream 1 waits still; the 200 reset ones were dropped (at most half of the list is
      // closed streams between compactions).
      assert.ok(connection.blockedStreams <= 2, `${connection.blockedStreams} streams held`);
      client.send(frame(0x8, 0, 0, u32(10_000)), frame(0x8, 0, 1, u32(10_000)));
      await client.until(
        (f) => f.some((x) => x.type === 0x1 && x.streamId === 1 && (x.flags & 0x1) !== 0),
        "stream 1's trailers",
      );
      assert.equal(client.dataBytes(1), 70_000);
    } finally {
      client.destroy();
      server.close();
    }
  });

  it("ignores the client's trailers on a stream it has already answered and reset", async () => {
    // RFC 9113 §5.1: frames the peer sent before it saw our RST_STREAM must be ignored.
    const { server, port } = await serve((stream) => {
      stream.sendHeaders(encodeHeaders([[":status", "200"]]), true); // before the request ends
    });
    const client = new RawH2Client(port, RAW);
    try {
      client.send(PREFACE, frame(0x4, 0, 0, Buffer.alloc(0)));
      const headers = encodeHeaders([
        [":method", "POST"],
        [":scheme", "http"],
        [":path", "/x"],
        [":authority", "x"],
      ]);
      client.send(frame(0x1, 0x4, 1, headers));
      await client.until(
        (f) => f.some((x) => x.type === 0x3 && x.streamId === 1),
        "the early answer's RST_STREAM",
      );
      client.send(
        frame(0x1, 0x5, 1, encodeHeaders([["x-trailer", "1"]])),
        frame(0x0, 0x1, 1, Buffer.from("late")),
        frame(0x6, 0, 0, Buffer.alloc(8)),
      );
      await client.until(
        (f) => f.some((x) => x.type === 0x6 && (x.flags & 0x1) !== 0),
        "the PING's answer",
      );
      assert.ok(!client.frames.some((x) => x.type === 0x7), "no GOAWAY");
    } finally {
      client.destroy();
      server.close();
    }
  });

  it("resets a stream the client sends HEADERS on after it ended it (STREAM_CLOSED), and lives on", async () => {
    // RFC 9113 §5.1, half-closed (remote): a stream error STREAM_CLOSED.
    const { server, port } = await serve(() => undefined); // never answers: stays half-closed
    const client = new RawH2Client(port, RAW);
    try {
      client.send(PREFACE, frame(0x4, 0, 0, Buffer.alloc(0)), frame(0x1, 0x5, 1, REQUEST));
      client.send(frame(0x1, 0x5, 1, encodeHeaders([["x-trailer", "1"]])));
      await client.until(
        (f) => f.some((x) => x.type === 0x3 && x.streamId === 1),
        "the stream's RST_STREAM",
      );
      const reset = client.frames.find((x) => x.type === 0x3 && x.streamId === 1);
      assert.equal(reset?.payload.readUInt32BE(0), ErrorCode.STREAM_CLOSED);
      // Trailers of a stream the client used are still ignored below the newest id.
      client.send(
        frame(0x1, 0x5, 3, REQUEST),
        frame(0x1, 0x5, 1, encodeHeaders([["x-trailer", "2"]])),
        frame(0x6, 0, 0, Buffer.alloc(8)),
      );
      await client.until(
        (f) => f.some((x) => x.type === 0x6 && (x.flags & 0x1) !== 0),
        "the PING's answer",
      );
      assert.ok(!client.frames.some((x) => x.type === 0x7), "no GOAWAY");
    } finally {
      client.destroy();
      server.close();
    }
  });

  it("resets a malformed request (RFC 9113 §8.1): pseudo-headers in trailers, a content-length its DATA does not match", async () => {
    const served: number[] = [];
    const { server, port } = await serve((stream) => {
      stream.onEnd = () => {
        served.push(stream.id);
        stream.sendHeaders(encodeHeaders([[":status", "200"]]), true);
      };
    });
    const client = new RawH2Client(port, RAW);
    const withLength = (n: string): Buffer =>
      encodeHeaders([
        [":method", "POST"],
        [":scheme", "http"],
        [":path", "/x"],
        ["content-length", n],
      ]);
    try {
      client.send(
        PREFACE,
        frame(0x4, 0, 0, Buffer.alloc(0)),
        // 1: pseudo-headers in trailers.
        frame(0x1, 0x4, 1, REQUEST),
        frame(0x0, 0, 1, Buffer.from("abc")),
        frame(0x1, 0x5, 1, encodeHeaders([[":path", "/y"]])),
        // 3: less DATA than announced; 5: more; 7: no DATA for 3 bytes; 9: exactly (served).
        frame(0x1, 0x4, 3, withLength("4")),
        frame(0x0, 0x1, 3, Buffer.from("abc")),
        frame(0x1, 0x4, 5, withLength("2")),
        frame(0x0, 0x1, 5, Buffer.from("abc")),
        frame(0x1, 0x5, 7, withLength("3")),
        frame(0x1, 0x4, 9, withLength("3")),
        frame(0x0, 0, 9, Buffer.from("ab")),
        frame(0x0, 0x1, 9, Buffer.from("c")),
        frame(0x6, 0, 0, Buffer.alloc(8)),
      );
      await client.until(
        (f) => f.some((x) => x.type === 0x6 && (x.flags & 0x1) !== 0),
        "the PING's answer",
      );
      for (const id of [1, 3, 5, 7]) {
        const reset = client.frames.find((x) => x.type === 0x3 && x.streamId === id);
        assert.equal(reset?.payload.readUInt32BE(0), ErrorCode.PROTOCOL_ERROR, `stream ${id}`);
      }
      assert.deepEqual(served, [9]);
      assert.ok(!client.frames.some((x) => x.type === 0x7), "no GOAWAY");
    } finally {
      client.destroy();
      server.close();
    }
  });

  it("ends the connection with GOAWAY on protocol errors", async () => {
    const { server, port } = await serve(echo);
    try {
      const settings = frame(0x4, 0, 0, Buffer.alloc(0));
      const cases: [string, Buffer, number][] = [
        ["not HTTP/2", Buffer.from("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ErrorCode.PROTOCOL_ERROR],
        [
          "no SETTINGS first",
          Buffer.concat([PREFACE, frame(0x6, 0, 0, Buffer.alloc(8))]),
          ErrorCode.PROTOCOL_ERROR,
        ],
        [
          "DATA on an idle stream",
          Buffer.concat([PREFACE, settings, frame(0x0, 0, 1, Buffer.from("x"))]),
          ErrorCode.PROTOCOL_ERROR,
        ],
        [
          "a frame over 16 KiB",
          Buffer.concat([PREFACE, settings, frame(0x0, 0, 1, Buffer.alloc(20_000))]),
          ErrorCode.FRAME_SIZE_ERROR,
        ],
        [
          "an even stream id",
          Buffer.concat([PREFACE, settings, frame(0x1, 0x5, 2, Buffer.from([0x83, 0x84]))]),
          ErrorCode.PROTOCOL_ERROR,
        ],
        [
          "a bad header block",
          Buffer.concat([PREFACE, settings, frame(0x1, 0x5, 1, Buffer.from([0x80]))]),
          ErrorCode.COMPRESSION_ERROR,
        ],
        [
          "a zero window increment",
          Buffer.concat([PREFACE, settings, frame(0x8, 0, 0, Buffer.alloc(4))]),
          ErrorCode.PROTOCOL_ERROR,
        ],
        [
          // RFC 9113 §5.1.1: stream 3 was never opened; 5 closed it, so HEADERS cannot be trailers.
          "a new stream with an id below one already opened",
          Buffer.concat([
            PREFACE,
            settings,
            frame(0x1, 0x5, 5, REQUEST),
            frame(0x1, 0x5, 3, REQUEST),
          ]),
          ErrorCode.PROTOCOL_ERROR,
        ],
      ];
      for (const [what, bytes, code] of cases) {
        const frames = await exchange(port, bytes);
        const goaway = frames.find((f) => f.type === 0x7);
        assert.ok(goaway !== undefined, `${what}: a GOAWAY`);
        assert.equal(goaway.payload.readUInt32BE(4), code, `${what}: its error code`);
      }
    } finally {
      server.close();
    }
  });
});

describe("HTTP/2 server connection: frames cut anywhere by the socket", () => {
  /**
   * A socket whose reads are the chunks the test hands it (net.Socket's events and calls the
   * connection uses), so that every cut is exactly where the test puts it: inside a frame's
   * header, in its payload, on its boundary. What the connection writes is kept.
   */
  function fakeSocket(): { socket: Socket; written: Buffer[]; feed(chunk: Buffer): void } {
    const written: Buffer[] = [];
    const duplex = new Duplex({
      read() {},
      write(chunk: Buffer, _encoding, done) {
        written.push(chunk);
        done();
      },
    });
    return {
      socket: duplex as unknown as Socket,
      written,
      feed: (chunk) => duplex.emit("data", chunk),
    };
  }

  /** A request with DATA frames of these sizes (the last one ends the stream). */
  function request(sizes: readonly number[]): { bytes: Buffer; body: Buffer } {
    const parts: Buffer[] = [PREFACE, frame(0x4, 0, 0), frame(0x1, 0x4, 1, REQUEST)];
    const body: Buffer[] = [];
    sizes.forEach((size, i) => {
      const data = Buffer.alloc(size);
      for (let j = 0; j < size; j++) data[j] = (i * 31 + j) & 0xff;
      body.push(data);
      parts.push(frame(0x0, i === sizes.length - 1 ? 0x1 : 0, 1, data));
    });
    return { bytes: Buffer.concat(parts), body: Buffer.concat(body) };
  }

  /** Feeds `bytes` in chunks of the sizes `cut` gives, in turn; returns the body the stream got. */
  function deliver(bytes: Buffer, cut: (i: number) => number): { body: Buffer; ended: boolean } {
    const { socket, feed } = fakeSocket();
    const chunks: Buffer[] = [];
    let ended = false;
    new ServerConnection(socket, {
      onStream: (stream) => {
        stream.onData = (chunk) => chunks.push(Buffer.from(chunk));
        stream.onEnd = () => {
          ended = true;
        };
      },
      onClose: () => undefined,
    });
    for (let at = 0, i = 0; at < bytes.length; i++) {
      const n = Math.max(1, cut(i));
      // A copy: the socket's buffer is the connection's to keep or drop.
      feed(Buffer.from(bytes.subarray(at, at + n)));
      at += n;
    }
    return { body: Buffer.concat(chunks), ended };
  }

  it("reads every frame whole whichever byte a chunk ends on", () => {
    const { bytes, body } = request([16_384, 1, 9_000, 0, 16_384, 700]);
    // Steady sizes 1..20 (every offset of a frame's 9-byte header is a cut), sizes around a
    // frame's, and a seeded mix of small and large.
    let seed = 7;
    const random = (): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed;
    };
    const cuts: ((i: number) => number)[] = [
      ...Array.from({ length: 20 }, (_, k) => () => k + 1),
      () => 16_393,
      () => 16_392,
      () => 16_394,
      () => 65_536,
      (i) => (i % 2 === 0 ? 5 : 30_000),
      () => (random() % 3 === 0 ? 1 + (random() % 12) : 1 + (random() % 40_000)),
    ];
    for (const [k, cut] of cuts.entries()) {
      const got = deliver(bytes, cut);
      assert.ok(got.ended, `cut ${k}: the stream ended`);
      assert.ok(got.body.equals(body), `cut ${k}: the body arrived intact`);
    }
  });

  it("refuses a frame over 16 KiB as soon as its header is whole, even when cut inside it", () => {
    for (const split of [1, 4, 8]) {
      const { socket, written, feed } = fakeSocket();
      new ServerConnection(socket, { onStream: () => undefined, onClose: () => undefined });
      feed(Buffer.concat([PREFACE, frame(0x4, 0, 0)]));
      const big = frame(0x0, 0, 1, Buffer.alloc(0), 1 << 20).subarray(0, 9);
      feed(big.subarray(0, split));
      feed(big.subarray(split));
      const out = Buffer.concat(written);
      const goaway = parseFrames(out).find((f) => f.type === 0x7);
      assert.ok(goaway !== undefined, `split at ${split}: a GOAWAY`);
      assert.equal(goaway.payload.readUInt32BE(4), ErrorCode.FRAME_SIZE_ERROR);
    }
  });
});

/** The frames in `bytes` (whole ones). */
function parseFrames(bytes: Buffer): { type: number; payload: Buffer }[] {
  const frames: { type: number; payload: Buffer }[] = [];
  for (let at = 0; at + 9 <= bytes.length;) {
    const length = bytes.readUIntBE(at, 3);
    frames.push({
      type: bytes[at + 3] as number,
      payload: bytes.subarray(at + 9, at + 9 + length),
    });
    at += 9 + length;
  }
  return frames;
}

/** A request's header block (HPACK without indexing: every block decodes on its own). */
const REQUEST = encodeHeaders([
  [":method", "POST"],
  [":scheme", "http"],
  [":path", "/x"],
  [":authority", "x"],
]);

/** A client that writes every frame the server sees (no preface of its own) and sees its close. */
const RAW: RawClientOptions = { passive: true, closeOnEnd: true };

/** Sends `bytes`, reads until the server closes the socket, and parses the frames it sent. */
async function exchange(port: number, bytes: Buffer): Promise<readonly RawFrame[]> {
  const client = new RawH2Client(port, RAW);
  client.send(bytes);
  await client.whenClosed;
  return client.frames;
}
