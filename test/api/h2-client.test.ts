/**
 * The HTTP/2 client connection (src/api/h2/client.ts), against node:http2's server (nghttp2:
 * Huffman strings, a dynamic table, its own flow control and stream limits) and, where node
 * cannot be made to misbehave on cue (GOAWAY with streams in flight, frame sizes, credit), a
 * plain socket that speaks raw frames.
 */
import assert from "node:assert/strict";
import http2, { type Http2Server, type Http2Session, type ServerHttp2Stream } from "node:http2";
import { connect, createServer, type Server } from "node:net";
import { after, before, describe, it } from "node:test";
import {
  ClientConnection,
  type ClientConnectionOptions,
  type ClientStream,
  DEFAULT_CLIENT_OPTIONS,
  type StreamEnd,
} from "../../src/api/h2/client.ts";
import { ErrorCode } from "../../src/api/h2/connection.ts";
import { encodeHeaders, type HeaderList } from "../../src/api/h2/hpack.ts";
import { freePort } from "../support/cluster-process.ts";
import { frame, type RawFrame, RawH2Client, settings, u32 } from "../support/h2-raw.ts";

const { NGHTTP2_INTERNAL_ERROR, NGHTTP2_REFUSED_STREAM } = http2.constants;

interface Outcome {
  response: HeaderList | null;
  trailersOnly: boolean;
  body: Buffer;
  trailers: HeaderList | null;
  end: StreamEnd;
  resetCode: number;
}

/** One request's events, gathered until the stream closes. */
function exchange(
  connection: ClientConnection,
  body: Buffer | null,
  extra: [string, string][] = [],
  path = "/echo",
  endRequest = true,
): { stream: ClientStream; outcome: Promise<Outcome> } {
  const block = encodeHeaders([
    [":method", "POST"],
    [":scheme", "http"],
    [":path", path],
    [":authority", "localhost"],
    ...extra,
  ]);
  const done = Promise.withResolvers<Outcome>();
  const chunks: Buffer[] = [];
  let response: HeaderList | null = null;
  let trailersOnly = false;
  let trailers: HeaderList | null = null;
  const stream = connection.request(block, body === null, {
    onResponse: (_s, headers, endStream) => {
      response = headers;
      trailersOnly = endStream;
    },
    onData: (_s, chunk) => chunks.push(chunk),
    onRemoteEnd: (_s, t) => (trailers = t),
    onFlushed: () => undefined,
    onClose: (s, end) =>
      done.resolve({
        response,
        trailersOnly,
        body: Buffer.concat(chunks),
        trailers,
        end,
        resetCode: s.resetCode,
      }),
  });
  if (body !== null) stream.sendData(body, endRequest);
  return { stream, outcome: done.promise };
}

function header(list: HeaderList | null, name: string): string | undefined {
  if (list === null) return undefined;
  for (let i = 0; i < list.length; i += 2) if (list[i] === name) return list[i + 1];
  return undefined;
}

interface Client {
  connection: ClientConnection;
  ready: Promise<true>;
  goaway: Promise<number>;
  closed: Promise<true>;
}

function client(port: number, options: ClientConnectionOptions = DEFAULT_CLIENT_OPTIONS): Client {
  const ready = Promise.withResolvers<true>();
  const goaway = Promise.withResolvers<number>();
  const closed = Promise.withResolvers<true>();
  const socket = connect({ port, host: "127.0.0.1", noDelay: true });
  const connection = new ClientConnection(
    socket,
    {
      onReady: () => ready.resolve(true),
      onGoAway: goaway.resolve,
      onClose: () => closed.resolve(true),
    },
    options,
  );
  return { connection, ready: ready.promise, goaway: goaway.promise, closed: closed.promise };
}

/** A node:http2 server with `settings`, its streams handled by `onStream`. */
async function h2Server(
  settings: http2.Settings,
  onStream: (stream: ServerHttp2Stream, headers: http2.IncomingHttpHeaders) => void,
): Promise<{ server: Http2Server; port: number; sessions: Http2Session[] }> {
  const sessions: Http2Session[] = [];
  const server = http2.createServer({ settings });
  server.on("session", (s) => {
    sessions.push(s);
    s.on("error", () => undefined);
  });
  server.on("stream", (stream, headers) => {
    stream.on("error", () => undefined);
    onStream(stream, headers);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  return { server, port: address.port, sessions };
}

function stop(s: { server: Http2Server | Server; sessions?: Http2Session[] }): void {
  for (const session of s.sessions ?? []) session.destroy();
  s.server.close();
}

/** Echo: the request's body back, then trailers with its size and its x-meta header. */
function echo(stream: ServerHttp2Stream, headers: http2.IncomingHttpHeaders): void {
  const chunks: Buffer[] = [];
  stream.on("data", (c: Buffer) => chunks.push(c));
  stream.on("end", () => {
    const body = Buffer.concat(chunks);
    stream.respond({ ":status": 200 }, { waitForTrailers: true });
    stream.on("wantTrailers", () =>
      stream.sendTrailers({ "x-size": String(body.length), "x-meta": headers["x-meta"] ?? "" }),
    );
    stream.end(body);
  });
}

describe("HTTP/2 client connection", { timeout: 30_000 }, () => {
  let echoServer: Awaited<ReturnType<typeof h2Server>>;
  before(async () => {
    // Small windows for what the client sends: 16 KiB per stream, 64 KiB for the connection.
    echoServer = await h2Server({ initialWindowSize: 16_384 }, echo);
  });
  after(() => stop(echoServer));

  it("runs many requests at once: bodies both ways, responses through HPACK's table, trailers", async () => {
    const { connection } = client(echoServer.port);
    try {
      const outcomes = await Promise.all(
        Array.from(
          { length: 300 },
          (_, i) =>
            exchange(connection, Buffer.from(`body ${i}`), [["x-meta", `value ${i % 7}`]]).outcome,
        ),
      );
      outcomes.forEach((o, i) => {
        assert.equal(o.end, "complete");
        assert.equal(header(o.response, ":status"), "200");
        assert.equal(o.body.toString(), `body ${i}`);
        assert.equal(header(o.trailers, "x-size"), String(`body ${i}`.length));
        assert.equal(header(o.trailers, "x-meta"), `value ${i % 7}`);
      });
    } finally {
      connection.destroy();
    }
  });

  it("keeps both flow-control windows: 3 MiB each way through 16 KiB and 64 KiB windows", async () => {
    // The client receives through 64 KiB windows: the server waits for its credit.
    const { connection } = client(echoServer.port, {
      ...DEFAULT_CLIENT_OPTIONS,
      receiveWindow: 65_535,
    });
    try {
      const body = Buffer.alloc(3 << 20);
      for (let i = 0; i < body.length; i += 4) body.writeUInt32LE(i, i);
      const [a, b] = await Promise.all([
        exchange(connection, body).outcome,
        exchange(connection, body.subarray(0, 100_000)).outcome,
      ]);
      assert.equal(a.end, "complete");
      assert.ok(a.body.equals(body), "3 MiB echoed intact");
      assert.ok(b.body.equals(body.subarray(0, 100_000)));
      // Header blocks larger than a frame: CONTINUATION frames both ways.
      const big = "m".repeat(20_000);
      const c = await exchange(connection, Buffer.from("x"), [["x-meta", big]]).outcome;
      assert.equal(header(c.trailers, "x-meta"), big);
    } finally {
      connection.destroy();
    }
  });

  it("opens no more streams than the server's MAX_CONCURRENT_STREAMS: the rest wait", async () => {
    let open = 0;
    let most = 0;
    const server = await h2Server({ maxConcurrentStreams: 2 }, (stream, headers) => {
      open++;
      most = Math.max(most, open);
      stream.on("close", () => open--);
      echo(stream, headers);
    });
    // Every request is made before the server's SETTINGS arrive: none may open before them.
    const { connection } = client(server.port);
    try {
      const outcomes = await Promise.all(
        Array.from({ length: 20 }, (_, i) => exchange(connection, Buffer.from(`r${i}`)).outcome),
      );
      outcomes.forEach((o, i) => {
        assert.equal(o.end, "complete", `request ${i}`);
        assert.equal(o.body.toString(), `r${i}`);
      });
      assert.equal(most, 2);
    } finally {
      connection.destroy();
      stop(server);
    }
  });

  it("follows the server's INITIAL_WINDOW_SIZE changes on open streams", async () => {
    // A window of 0: no DATA can leave until the server raises it for the open stream.
    const server = await h2Server({ initialWindowSize: 0 }, (stream, headers) => {
      stream.session?.settings({ initialWindowSize: 1 << 20 });
      echo(stream, headers);
    });
    const { connection } = client(server.port);
    try {
      const body = Buffer.alloc(50_000, 3);
      const o = await exchange(connection, body).outcome;
      assert.equal(o.end, "complete");
      assert.ok(o.body.equals(body));
    } finally {
      connection.destroy();
      stop(server);
    }
  });

  it("tells trailers-only responses and resets apart; REFUSED_STREAM means not processed", async () => {
    const server = await h2Server({}, (stream, headers) => {
      switch (headers[":path"]) {
        case "/trailers-only":
          stream.respond({ ":status": 200, "grpc-status": "5" }, { endStream: true });
          return;
        case "/reset":
          // Before any response: node would end a stream it has answered before resetting it.
          stream.close(NGHTTP2_INTERNAL_ERROR);
          return;
        case "/refuse":
          stream.close(NGHTTP2_REFUSED_STREAM);
          return;
      }
    });
    const { connection } = client(server.port);
    try {
      const only = await exchange(connection, null, [], "/trailers-only").outcome;
      assert.equal(only.end, "complete");
      assert.ok(only.trailersOnly);
      assert.equal(header(only.response, "grpc-status"), "5");
      assert.equal(only.trailers, null);

      const reset = await exchange(connection, Buffer.from("x"), [], "/reset", false).outcome;
      assert.equal(reset.end, "reset");
      assert.equal(reset.resetCode, ErrorCode.INTERNAL_ERROR);

      const refused = await exchange(connection, Buffer.from("x"), [], "/refuse").outcome;
      assert.equal(refused.end, "refused");
      assert.equal(refused.resetCode, ErrorCode.REFUSED_STREAM);
      assert.ok(connection.isOpen, "a reset stream leaves the connection usable");
    } finally {
      connection.destroy();
      stop(server);
    }
  });

  it("fails every stream when the server closes the socket: lost once opened, refused before", async () => {
    const held: ServerHttp2Stream[] = [];
    const opened = Promise.withResolvers<true>();
    const server = await h2Server({ maxConcurrentStreams: 2 }, (stream) => {
      held.push(stream);
      if (held.length === 2) opened.resolve(true);
    });
    const c = client(server.port);
    try {
      const pending = Array.from({ length: 3 }, () => exchange(c.connection, Buffer.from("x")));
      await opened.promise;
      (server.sessions[0] as Http2Session).socket.destroy();
      const outcomes = await Promise.all(pending.map((p) => p.outcome));
      assert.deepEqual(
        outcomes.map((o) => o.end),
        ["lost", "lost", "refused"],
      );
      await c.closed;
      assert.ok(!c.connection.isOpen);
      assert.throws(() => exchange(c.connection, null));
    } finally {
      c.connection.destroy();
      stop(server);
    }
  });

  it("refuses at once what waits when the connection cannot be made, with the reason", async () => {
    const closedPort = await freePort();
    const c = client(closedPort);
    const o = await exchange(c.connection, Buffer.from("x")).outcome;
    assert.equal(o.end, "refused");
    assert.match(c.connection.closeReason ?? "", /ECONNREFUSED/);
    await c.closed;
  });

  it("on GOAWAY: streams above its last id are refused, those below finish, nothing new opens", async () => {
    const peer = await rawServer([[0x3, 3]]); // MAX_CONCURRENT_STREAMS 3
    const c = client(peer.port);
    try {
      const streams = Array.from({ length: 4 }, () => exchange(c.connection, Buffer.from("x")));
      const raw = await peer.accepted;
      await raw.until(
        (f) => f.filter((x) => x.type === 0x1).length === 3,
        "the three streams' HEADERS",
      );
      assert.deepEqual(
        raw.frames.filter((x) => x.type === 0x1).map((x) => x.streamId),
        [1, 3, 5],
      );
      raw.send(frame(0x7, 0, 0, Buffer.concat([u32(3), u32(0)]))); // GOAWAY, last stream 3
      const [third, fourth] = await Promise.all([
        (streams[2] as { outcome: Promise<Outcome> }).outcome,
        (streams[3] as { outcome: Promise<Outcome> }).outcome,
      ]);
      assert.equal(third.end, "refused", "above the last id: not processed");
      assert.equal(fourth.end, "refused", "never opened");
      assert.equal(await c.goaway, 0);
      assert.ok(!c.connection.isOpen);
      assert.throws(() => exchange(c.connection, null), /no new streams/);
      // Streams 1 and 3 finish; then the client ends the socket.
      for (const id of [1, 3]) {
        raw.send(
          frame(0x1, 0x4, id, encodeHeaders([[":status", "200"]])),
          frame(0x0, 0, id, Buffer.from(`answer ${id}`)),
          frame(0x1, 0x5, id, encodeHeaders([["x-done", "1"]])),
        );
      }
      const [first, second] = await Promise.all([
        (streams[0] as { outcome: Promise<Outcome> }).outcome,
        (streams[1] as { outcome: Promise<Outcome> }).outcome,
      ]);
      assert.equal(first.end, "complete");
      assert.equal(first.body.toString(), "answer 1");
      assert.equal(header(second.trailers, "x-done"), "1");
      await raw.ended();
      assert.ok(!raw.frames.some((x) => x.type === 0x1 && x.streamId > 5), "no stream after it");
    } finally {
      c.connection.destroy();
      peer.server.close();
    }
  });

  it("a GOAWAY's streams below the last id are lost when the socket closes before they finish", async () => {
    const peer = await rawServer([]);
    const c = client(peer.port);
    try {
      const s = exchange(c.connection, Buffer.from("x"));
      const raw = await peer.accepted;
      await raw.until((f) => f.some((x) => x.type === 0x1), "the HEADERS");
      raw.send(frame(0x7, 0, 0, Buffer.concat([u32(1), u32(ErrorCode.INTERNAL_ERROR)])));
      await c.goaway;
      raw.socket.destroy();
      const o = await s.outcome;
      assert.equal(o.end, "lost", "it may have been processed");
      assert.match(c.connection.closeReason ?? "", /GOAWAY with error code 2/);
    } finally {
      c.connection.destroy();
      peer.server.close();
    }
  });

  it("writes a turn's frames after the turn, or at once on flushNow()", async () => {
    const c = client(echoServer.port);
    try {
      await c.ready;
      const socket = c.connection.socket;
      const before = socket.bytesWritten;
      const later = exchange(c.connection, Buffer.from("later"));
      assert.equal(socket.bytesWritten, before, "queued until the turn ends");
      await new Promise((r) => setImmediate(r));
      const afterTurn = socket.bytesWritten;
      assert.ok(afterTurn > before, "written after the turn");
      const now = exchange(c.connection, Buffer.from("now"));
      c.connection.flushNow();
      assert.ok(socket.bytesWritten > afterTurn, "written within the turn");
      assert.equal((await later.outcome).body.toString(), "later");
      assert.equal((await now.outcome).body.toString(), "now");
    } finally {
      c.connection.destroy();
    }
  });

  it("sends DATA within the server's MAX_FRAME_SIZE and windows, and credits in large steps", async () => {
    // The server allows frames of 20,000 bytes and a stream window of 1 MiB; the connection's
    // stays 65,535 until it sends a WINDOW_UPDATE.
    const peer = await rawServer([
      [0x5, 20_000],
      [0x4, 1 << 20],
    ]);
    const c = client(peer.port, { ...DEFAULT_CLIENT_OPTIONS, receiveWindow: 65_535 });
    try {
      const s = exchange(c.connection, Buffer.alloc(100_000, 1));
      const raw = await peer.accepted;
      await raw.until(() => raw.dataBytes(1) === 65_535, "a connection window of DATA");
      // Nothing more leaves without credit: a PING's answer comes after everything sent before.
      raw.send(frame(0x6, 0, 0, Buffer.alloc(8)));
      await raw.until((f) => f.some((x) => x.type === 0x6 && x.flags === 1), "the PING's answer");
      assert.equal(raw.dataBytes(1), 65_535);
      const sizes = raw.frames.filter((x) => x.type === 0x0).map((x) => x.payload.length);
      assert.equal(Math.max(...sizes), 20_000);
      raw.send(frame(0x8, 0, 0, u32(100_000)));
      await raw.until(
        (f) => f.some((x) => x.type === 0x0 && (x.flags & 0x1) !== 0),
        "the END_STREAM",
      );
      assert.equal(raw.dataBytes(1), 100_000);

      // The response: 10,000 bytes earn no credit yet (a quarter of the connection window is
      // 16,384, half the stream's 32,768); 40,000 do, on both.
      raw.send(frame(0x1, 0x4, 1, encodeHeaders([[":status", "200"]])));
      raw.send(frame(0x0, 0, 1, Buffer.alloc(10_000)), frame(0x6, 0, 0, Buffer.alloc(8)));
      await raw.until(
        (f) => f.filter((x) => x.type === 0x6).length === 2,
        "the second PING's answer",
      );
      assert.ok(!raw.frames.some((x) => x.type === 0x8), "no WINDOW_UPDATE for 10,000 bytes");
      raw.send(frame(0x0, 0, 1, Buffer.alloc(16_000)), frame(0x0, 0, 1, Buffer.alloc(14_000)));
      raw.send(frame(0x6, 0, 0, Buffer.alloc(8)));
      await raw.until(
        (f) => f.filter((x) => x.type === 0x6).length === 3,
        "the third PING's answer",
      );
      const updates = raw.frames.filter((x) => x.type === 0x8);
      assert.deepEqual(
        updates.map((x) => x.streamId).sort(),
        [0, 1],
        "one WINDOW_UPDATE each for the connection and the stream",
      );
      raw.send(frame(0x1, 0x5, 1, encodeHeaders([["x-done", "1"]])));
      const o = await s.outcome;
      assert.equal(o.end, "complete");
      assert.equal(o.body.length, 40_000);
    } finally {
      c.connection.destroy();
      peer.server.close();
    }
  });

  it("a reset in the middle of a response: reset, with what came before; complete after END_STREAM", async () => {
    const peer = await rawServer([]);
    const c = client(peer.port);
    try {
      const first = exchange(c.connection, Buffer.from("x"));
      const second = exchange(c.connection, Buffer.from("x"), [], "/echo", false); // still sending
      const raw = await peer.accepted;
      await raw.until((f) => f.filter((x) => x.type === 0x1).length === 2, "both HEADERS");
      const ok = encodeHeaders([[":status", "200"]]);
      raw.send(
        frame(0x1, 0x4, 1, ok),
        frame(0x0, 0, 1, Buffer.from("partial")),
        frame(0x3, 0, 1, u32(ErrorCode.CANCEL)),
        // An answer complete before its RST_STREAM (NO_ERROR, RFC 9113 §8.1) is complete.
        frame(0x1, 0x4, 3, ok),
        frame(0x0, 0x1, 3, Buffer.from("whole")),
        frame(0x3, 0, 3, u32(ErrorCode.NO_ERROR)),
      );
      const [a, b] = await Promise.all([first.outcome, second.outcome]);
      assert.equal(a.end, "reset");
      assert.equal(a.resetCode, ErrorCode.CANCEL);
      assert.equal(a.body.toString(), "partial");
      assert.equal(b.end, "complete");
      assert.equal(b.body.toString(), "whole");
      assert.ok(c.connection.isOpen);
    } finally {
      c.connection.destroy();
      peer.server.close();
    }
  });

  it("refuses a response whose header list is past its limit: that stream reset, the connection serving on", async () => {
    const peer = await rawServer([]);
    const c = client(peer.port, { ...DEFAULT_CLIENT_OPTIONS, maxHeaderListSize: 4096 });
    try {
      const big = exchange(c.connection, Buffer.from("x"));
      const next = exchange(c.connection, Buffer.from("x"));
      const raw = await peer.accepted;
      await raw.until((f) => f.filter((x) => x.type === 0x1).length === 2, "both HEADERS");
      // 5 KB of headers over HEADERS and a CONTINUATION, then the next answer on the same
      // table: the refused block was still decoded whole.
      const block = encodeHeaders([
        [":status", "200"],
        ["x-big", "b".repeat(5000)],
      ]);
      raw.send(
        frame(0x1, 0, 1, block.subarray(0, 3000)),
        frame(0x9, 0x4, 1, block.subarray(3000)),
        frame(0x1, 0x4, 3, encodeHeaders([[":status", "200"]])),
        frame(0x0, 0x1, 3, Buffer.from("whole")),
      );
      const [a, b] = await Promise.all([big.outcome, next.outcome]);
      assert.equal(a.end, "cancelled");
      assert.equal(a.resetCode, ErrorCode.ENHANCE_YOUR_CALM);
      assert.equal(a.response, null, "no part of the refused response is passed on");
      await raw.until(
        (f) => f.some((x) => x.type === 0x3 && x.streamId === 1),
        "the client's RST_STREAM",
      );
      assert.equal(b.end, "complete");
      assert.equal(b.body.toString(), "whole");
      assert.ok(c.connection.isOpen);
    } finally {
      c.connection.destroy();
      peer.server.close();
    }
  });

  it("ends the connection with GOAWAY on a server's protocol error; its streams are lost", async () => {
    const peer = await rawServer([]);
    const c = client(peer.port);
    try {
      const s = exchange(c.connection, Buffer.from("x"));
      const raw = await peer.accepted;
      await raw.until((f) => f.some((x) => x.type === 0x1), "the HEADERS");
      raw.send(frame(0x0, 0, 7, Buffer.from("x"))); // DATA on a stream never opened
      await raw.until((f) => f.some((x) => x.type === 0x7), "the client's GOAWAY");
      const goaway = raw.frames.find((x) => x.type === 0x7) as RawFrame;
      assert.equal(goaway.payload.readUInt32BE(4), ErrorCode.PROTOCOL_ERROR);
      await raw.ended();
      raw.socket.destroy();
      assert.equal((await s.outcome).end, "lost");
      await c.closed;
    } finally {
      c.connection.destroy();
      peer.server.close();
    }
  });
});

// ── raw frames ─────────────────────────────────────────────────────────────────────────────

/**
 * A plain TCP server whose first connection is a raw peer (the server's end: the client's frames,
 * with waits on what has arrived) that sends SETTINGS of `pairs` and nothing of its own accord.
 */
async function rawServer(
  pairs: [number, number][],
): Promise<{ server: Server; port: number; accepted: Promise<RawH2Client> }> {
  const accepted = Promise.withResolvers<RawH2Client>();
  const server = createServer((socket) => {
    const peer = RawH2Client.accept(socket);
    peer.send(frame(0x4, 0, 0, settings(...pairs)));
    accepted.resolve(peer);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  return { server, port: address.port, accepted: accepted.promise };
}
