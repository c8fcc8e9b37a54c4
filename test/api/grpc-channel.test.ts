/**
 * The peers' gRPC channel (src/api/grpc-channel.ts), against a real @grpc/grpc-js server whose
 * methods pass bytes through (no protobuf), and node:http2 where grpc-js cannot misbehave on cue.
 */
import assert from "node:assert/strict";
import http2 from "node:http2";
import { createServer, type Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import { setTimeout as delay } from "node:timers/promises";
import * as grpc from "@grpc/grpc-js";
import { type CallResult, GrpcChannel } from "../../src/api/grpc-channel.ts";
import { CallCut } from "../../src/common/index.ts";
import { freePort } from "../support/cluster-process.ts";
import { bytesMethod } from "../support/grpc-client.ts";
import { deadlineClock } from "../../src/common/deadline-clock.ts";

const { status } = grpc;
const MAX = 1 << 20;

const method = (name: string, requestStream: boolean): grpc.MethodDefinition<Buffer, Buffer> =>
  bytesMethod("test.Peer", name, requestStream);

const SERVICE: grpc.ServiceDefinition = {
  Echo: method("Echo", false),
  Meta: method("Meta", false),
  Fail: method("Fail", false),
  Hang: method("Hang", false),
  Big: method("Big", false),
  Count: method("Count", true),
  Stall: method("Stall", true),
};

/** What the server's handlers saw, for the tests to wait on. */
class Seen {
  /** Hang calls: resolved with each call as it arrives, and when the client cancels it. */
  hung = Promise.withResolvers<grpc.ServerUnaryCall<Buffer, Buffer>>();
  hangCancelled = Promise.withResolvers<true>();
  /** The Stall call, which reads nothing until `resume`. */
  stalled = Promise.withResolvers<{ resume: () => void; received: () => number }>();
}

interface Peer {
  server: grpc.Server;
  port: number;
  seen: Seen;
}

async function startServer(port = 0): Promise<Peer> {
  const seen = new Seen();
  const server = new grpc.Server({
    "grpc.max_receive_message_length": 16 << 20,
    "grpc.max_send_message_length": 16 << 20,
  });
  server.addService(SERVICE, {
    Echo: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) =>
      cb(null, call.request),
    Meta: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      const map = call.metadata.getMap();
      const bin = map["x-bin"];
      const answer = {
        text: map["x-text"],
        bin: Buffer.isBuffer(bin) ? [...bin] : null,
        deadline: call.getDeadline() === Infinity ? "none" : "set",
      };
      cb(null, Buffer.from(JSON.stringify(answer)));
    },
    Fail: (_call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      const metadata = new grpc.Metadata();
      metadata.set("x-reason", "gone");
      metadata.set("x-detail-bin", Buffer.from([0, 1, 2, 255]));
      cb({ code: status.NOT_FOUND, details: "no such key: ünïcode 100%", metadata });
    },
    Hang: (call: grpc.ServerUnaryCall<Buffer, Buffer>) => {
      call.on("cancelled", () => seen.hangCancelled.resolve(true));
      seen.hung.resolve(call);
    },
    Big: (_call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) =>
      cb(null, Buffer.alloc(MAX + 1)),
    Count: (call: grpc.ServerReadableStream<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      let count = 0;
      let bytes = 0;
      call.on("data", (m: Buffer) => {
        count++;
        bytes += m.length;
      });
      call.on("end", () => cb(null, Buffer.from(JSON.stringify({ count, bytes }))));
    },
    Stall: (call: grpc.ServerReadableStream<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) => {
      let received = 0;
      call.on("end", () => cb(null, Buffer.from(String(received))));
      seen.stalled.resolve({
        resume: () => call.on("data", () => received++),
        received: () => received,
      });
    },
  });
  const bound = await new Promise<number>((resolve, reject) =>
    server.bindAsync(`127.0.0.1:${port}`, grpc.ServerCredentials.createInsecure(), (err, p) =>
      err === null ? resolve(p) : reject(err),
    ),
  );
  return { server, port: bound, seen };
}

function channel(port: number, backoffMs = 1000): GrpcChannel {
  return new GrpcChannel(`127.0.0.1:${port}`, {
    maxMessageBytes: MAX,
    reconnectBackoffMs: backoffMs,
  });
}

const soon = (): number => deadlineClock() + 10_000;

describe("gRPC channel", { timeout: 30_000 }, () => {
  let peer: Peer;
  let ch: GrpcChannel;
  before(async () => {
    peer = await startServer();
    ch = channel(peer.port);
  });
  after(() => {
    ch.destroy();
    peer.server.forceShutdown();
  });

  it("makes unary calls: the answer, metadata and grpc-timeout sent, 200 at once", async () => {
    const one = await ch.unary("/test.Peer/Echo", Buffer.from("hello"), { deadline: soon() });
    assert.deepEqual(one, {
      code: status.OK,
      details: "OK",
      message: Buffer.from("hello"),
      trailers: [],
      sent: true,
    });
    const meta = await ch.unary("/test.Peer/Meta", Buffer.alloc(0), {
      deadline: soon(),
      metadata: [
        ["x-text", "plain"],
        ["x-bin", Buffer.from([9, 8, 7]).toString("base64")],
      ],
    });
    assert.equal(meta.code, status.OK);
    assert.deepEqual(JSON.parse(String(meta.message)), {
      text: "plain",
      bin: [9, 8, 7],
      deadline: "set",
    });
    const none = await ch.unary("/test.Peer/Meta", Buffer.alloc(0), { deadline: Infinity });
    assert.equal(JSON.parse(String(none.message)).deadline, "none");

    const results = await Promise.all(
      Array.from({ length: 200 }, (_, i) =>
        ch.unary("/test.Peer/Echo", Buffer.from(`m${i}`), { deadline: soon() }),
      ),
    );
    results.forEach((r, i) => {
      assert.equal(r.code, status.OK);
      assert.equal(String(r.message), `m${i}`);
    });
  });

  it("sends no RST_STREAM after a finished call: 3000 calls on one connection", async () => {
    // Servers limit the resets they take (node: a burst of 1000, then GOAWAY); a call done both
    // ways must not cost one.
    let next = 0;
    let failed: CallResult | null = null;
    await Promise.all(
      Array.from({ length: 64 }, async () => {
        while (next < 3000 && failed === null) {
          next++;
          const r = await ch.unary("/test.Peer/Echo", Buffer.from("x"), { deadline: soon() });
          if (r.code !== status.OK) failed = r;
        }
      }),
    );
    assert.equal(failed, null);
  });

  it("passes a status on: code, percent-decoded details, trailing metadata with -bin", async () => {
    const r = await ch.unary("/test.Peer/Fail", Buffer.from("x"), { deadline: soon() });
    assert.equal(r.code, status.NOT_FOUND);
    assert.equal(r.details, "no such key: ünïcode 100%");
    assert.equal(r.message, null);
    assert.ok(r.sent);
    const trailers = new Map(r.trailers);
    assert.equal(trailers.get("x-reason"), "gone");
    assert.deepEqual(
      [...Buffer.from(trailers.get("x-detail-bin") ?? "", "base64")],
      [0, 1, 2, 255],
    );
    assert.ok(!r.trailers.some(([k]) => k.startsWith("grpc-") || k.startsWith(":")));

    const missing = await ch.unary("/test.Peer/Nope", Buffer.from("x"), { deadline: soon() });
    assert.equal(missing.code, status.UNIMPLEMENTED);
  });

  it("enforces the deadline: DEADLINE_EXCEEDED, and the server sees the call cancelled", async () => {
    const started = Date.now();
    const r = await ch.unary("/test.Peer/Hang", Buffer.from("x"), {
      deadline: deadlineClock() + 200,
    });
    assert.equal(r.code, status.DEADLINE_EXCEEDED);
    assert.ok(r.sent, "the request had gone");
    assert.ok(Date.now() - started >= 190);
    await peer.seen.hangCancelled.promise;
    // A deadline already past: nothing is sent.
    const late = await ch.unary("/test.Peer/Echo", Buffer.from("x"), {
      deadline: deadlineClock() - 1,
    });
    assert.equal(late.code, status.DEADLINE_EXCEEDED);
    assert.equal(late.sent, false);
  });

  it("cancels when cut: CANCELLED, and the server sees it", async () => {
    const server = await startServer();
    const c = channel(server.port);
    try {
      const cut = new CallCut();
      const pending = c.unary("/test.Peer/Hang", Buffer.from("x"), {
        deadline: Infinity,
        cut,
      });
      await server.seen.hung.promise;
      cut.cut();
      const r = await pending;
      assert.equal(r.code, status.CANCELLED);
      assert.ok(r.sent);
      await server.seen.hangCancelled.promise;
    } finally {
      c.destroy();
      server.server.forceShutdown();
    }
  });

  it("a deadline further off than a timer reaches (24.8 days) is kept, not passed at once", async () => {
    // setTimeout fires at once past 2^31-1 ms: a call given 30 days failed DEADLINE_EXCEEDED as
    // it was sent. (A plain HTTP/2 server that never answers: grpc-js's server has the same
    // overflow in its own deadline timer.)
    const server = http2.createServer();
    const arrived = Promise.withResolvers<undefined>();
    server.on("stream", () => arrived.resolve(undefined));
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const c = channel((server.address() as { port: number }).port);
    try {
      const cut = new CallCut();
      let ended = false;
      const pending = c
        .unary("/test.Peer/Hang", Buffer.from("x"), {
          deadline: deadlineClock() + 30 * 86_400_000,
          cut,
        })
        .finally(() => (ended = true));
      await Promise.race([arrived.promise, pending]);
      // A call failed at once would have ended by now: its timer was due a millisecond after.
      await new Promise((resolve) => setTimeout(resolve, 50));
      assert.equal(ended, false, "the call is still waiting for its answer");
      cut.cut();
      assert.equal((await pending).code, status.CANCELLED);
    } finally {
      c.destroy();
      await new Promise((resolve) => server.close(resolve));
    }
  });

  it("checks message sizes both ways: RESOURCE_EXHAUSTED", async () => {
    const out = await ch.unary("/test.Peer/Echo", Buffer.alloc(MAX + 1), { deadline: soon() });
    assert.equal(out.code, status.RESOURCE_EXHAUSTED);
    assert.equal(out.sent, false);
    const back = await ch.unary("/test.Peer/Big", Buffer.from("x"), { deadline: soon() });
    assert.equal(back.code, status.RESOURCE_EXHAUSTED);
    assert.ok(back.sent);
    // Right at the limit, both ways, is fine.
    const atMax = await ch.unary("/test.Peer/Echo", Buffer.alloc(MAX, 1), { deadline: soon() });
    assert.equal(atMax.code, status.OK);
    assert.equal(atMax.message?.length, MAX);
  });

  it("fails fast, not sent, when nothing listens; calls in the backoff do not connect", async () => {
    const port = await freePort();
    const c = channel(port, 60_000);
    try {
      const started = Date.now();
      const r = await c.unary("/test.Peer/Echo", Buffer.from("x"), { deadline: soon() });
      assert.equal(r.code, status.UNAVAILABLE);
      assert.equal(r.sent, false);
      assert.match(r.details, /ECONNREFUSED/);
      assert.ok(Date.now() - started < 1000, "fast");
      // Within the backoff even a listening server is not tried.
      const listener = createServer((s) => s.destroy());
      let accepted = 0;
      listener.on("connection", () => accepted++);
      await new Promise<void>((resolve) => listener.listen(port, "127.0.0.1", resolve));
      try {
        const again = await c.unary("/test.Peer/Echo", Buffer.from("x"), { deadline: soon() });
        assert.equal(again.code, status.UNAVAILABLE);
        assert.equal(again.sent, false);
        assert.match(again.details, /backoff/);
        const stream = c.clientStream("/test.Peer/Count");
        const ended = new Promise<CallResult>((resolve) => (stream.onEnd = resolve));
        const writeErr = new Promise<Error | null>((resolve) =>
          stream.write(Buffer.from("x"), resolve),
        );
        assert.equal((await ended).code, status.UNAVAILABLE);
        assert.ok((await writeErr) instanceof Error);
        assert.equal(accepted, 0);
      } finally {
        listener.close();
      }
    } finally {
      c.destroy();
    }
  });

  it("times a silent server out: nothing is sent before its SETTINGS, so not sent", async () => {
    const sockets: Socket[] = [];
    const silent = createServer((socket) => sockets.push(socket)); // accepts, never answers
    await new Promise<void>((resolve) => silent.listen(0, "127.0.0.1", resolve));
    const address = silent.address();
    assert.ok(address !== null && typeof address === "object");
    const c = new GrpcChannel(`127.0.0.1:${address.port}`, {
      maxMessageBytes: MAX,
      connectTimeoutMs: 100,
    });
    try {
      const r = await c.unary("/test.Peer/Echo", Buffer.from("x"), { deadline: soon() });
      assert.equal(r.code, status.UNAVAILABLE);
      assert.equal(r.sent, false);
      assert.match(r.details, /timed out after 100 ms/);
    } finally {
      c.destroy();
      for (const s of sockets) s.destroy();
      silent.close();
    }
  });

  it("keepalive: a server that stops answering PINGs loses the connection, one that answers keeps it", async () => {
    // An HTTP/2 server in appearance only: its SETTINGS, then silence (a blackholed peer).
    const sockets: Socket[] = [];
    const mute = createServer((socket) => {
      sockets.push(socket);
      socket.on("data", () => undefined);
      socket.write(Buffer.from([0, 0, 0, 4, 0, 0, 0, 0, 0]));
    });
    await new Promise<void>((resolve) => mute.listen(0, "127.0.0.1", resolve));
    const address = mute.address();
    assert.ok(address !== null && typeof address === "object");
    const options = { maxMessageBytes: MAX, keepaliveMs: 20, keepaliveTimeoutMs: 100 };
    const lost = new GrpcChannel(`127.0.0.1:${address.port}`, options);
    const kept = new GrpcChannel(`127.0.0.1:${peer.port}`, options);
    try {
      const call = lost.clientStream("/test.Peer/Count");
      const ended = new Promise<CallResult>((resolve) => (call.onEnd = resolve));
      call.write(Buffer.from("x"));
      const r = await ended;
      assert.equal(r.code, status.UNAVAILABLE);
      assert.equal(r.sent, true);
      assert.match(r.details, /PING/);
      // grpc-js's server answers PINGs: a call idle for many keepalive periods lives on.
      const live = kept.clientStream("/test.Peer/Count");
      let end: CallResult | null = null;
      live.onEnd = (result) => (end = result);
      live.write(Buffer.from("y"));
      await delay(400);
      assert.equal(end, null, "the answered connection is kept");
      const finished = new Promise<CallResult>((resolve) => (live.onEnd = resolve));
      live.end();
      assert.equal((await finished).code, status.OK);
    } finally {
      lost.destroy();
      kept.destroy();
      for (const s of sockets) s.destroy();
      mute.close();
    }
  });

  it("a server killed mid-call: not OK, sent; then unavailable until it is back, after the backoff", async () => {
    const first = await startServer();
    const port = first.port;
    const backoff = 200;
    const c = channel(port, backoff);
    try {
      const pending = c.unary("/test.Peer/Hang", Buffer.from("x"), { deadline: soon() });
      await first.seen.hung.promise;
      first.server.forceShutdown();
      const killed = await pending;
      assert.notEqual(killed.code, status.OK);
      assert.ok(killed.sent, "it may have been applied");

      const refused = await c.unary("/test.Peer/Echo", Buffer.from("x"), { deadline: soon() });
      assert.equal(refused.code, status.UNAVAILABLE);
      assert.equal(refused.sent, false);
      const failedAt = Date.now();
      const second = await startServer(port);
      try {
        const during = await c.unary("/test.Peer/Echo", Buffer.from("x"), { deadline: soon() });
        if (Date.now() - failedAt < backoff) {
          assert.equal(during.code, status.UNAVAILABLE, "within the backoff");
          assert.equal(during.sent, false);
        }
        // The backoff is what is tested here: waiting it out is the behaviour, not a guess.
        await delay(backoff);
        const back = await c.unary("/test.Peer/Echo", Buffer.from("again"), { deadline: soon() });
        assert.equal(back.code, status.OK);
        assert.equal(String(back.message), "again");
      } finally {
        second.server.forceShutdown();
      }
    } finally {
      c.destroy();
    }
  });

  it("streams from the client: 1000 writes, each handed to the socket, then the answer", async () => {
    const call = ch.clientStream("/test.Peer/Count");
    const ended = new Promise<CallResult>((resolve) => (call.onEnd = resolve));
    let headers = 0;
    call.onHeaders = () => headers++;
    let done = 0;
    let bytes = 0;
    for (let i = 0; i < 1000; i++) {
      const m = Buffer.alloc(i % 50, i & 0xff);
      bytes += m.length;
      call.write(m, (err) => {
        assert.equal(err, null);
        done++;
      });
    }
    call.end();
    const r = await ended;
    assert.equal(r.code, status.OK);
    assert.deepEqual(JSON.parse(String(r.message)), { count: 1000, bytes });
    assert.equal(done, 1000, "every write called back before the end");
    assert.equal(headers, 1, "the response headers, once");
    assert.equal(call.bufferedBytes, 0);
  });

  it("holds writes back while the server does not read: buffered, callbacks waiting", async () => {
    const server = await startServer();
    const c = channel(server.port);
    try {
      const call = c.clientStream("/test.Peer/Stall");
      const ended = new Promise<CallResult>((resolve) => (call.onEnd = resolve));
      const message = Buffer.alloc(64 * 1024, 1);
      const count = 160; // 10 MiB
      let called = 0;
      for (let i = 0; i < count; i++) {
        call.write(message, (err) => {
          assert.equal(err, null);
          called++;
        });
      }
      call.end();
      const stalled = await server.seen.stalled.promise;
      // Round trips on the same connection until what the windows let through has settled.
      let before = -1;
      for (let i = 0; i < 50 && call.bufferedBytes !== before; i++) {
        before = call.bufferedBytes;
        const r = await c.unary("/test.Peer/Echo", Buffer.from("x"), { deadline: soon() });
        assert.equal(r.code, status.OK, "other calls go on meanwhile");
      }
      const total = count * (message.length + 5);
      assert.ok(
        call.bufferedBytes > total - (4 << 20),
        `buffered ${call.bufferedBytes} of ${total}`,
      );
      assert.ok(called < count - 60, `${called} callbacks`);
      stalled.resume();
      const r = await ended;
      assert.equal(r.code, status.OK);
      assert.equal(String(r.message), String(count));
      assert.equal(called, count);
    } finally {
      c.destroy();
      server.server.forceShutdown();
    }
  });

  it("cancels a stream: CANCELLED, waiting writes fail", async () => {
    const server = await startServer();
    const c = channel(server.port);
    try {
      const call = c.clientStream("/test.Peer/Stall");
      const ended = new Promise<CallResult>((resolve) => (call.onEnd = resolve));
      const big = Buffer.alloc(1 << 20);
      const results: (Error | null)[] = [];
      for (let i = 0; i < 4; i++) call.write(big, (err) => results.push(err));
      await server.seen.stalled.promise;
      call.cancel();
      const r = await ended;
      assert.equal(r.code, status.CANCELLED);
      assert.ok(r.sent);
      assert.equal(results.length, 4, "every callback called by the end");
      assert.ok(results.at(-1) instanceof Error, "the last write never left");
    } finally {
      c.destroy();
      server.server.forceShutdown();
    }
  });

  it("closes gracefully: the call in flight finishes, new calls are refused unsent", async () => {
    const server = await startServer();
    const c = channel(server.port);
    try {
      const call = c.clientStream("/test.Peer/Count");
      const ended = new Promise<CallResult>((resolve) => (call.onEnd = resolve));
      call.write(Buffer.from("one"));
      const ok = await c.unary("/test.Peer/Echo", Buffer.from("x"), { deadline: soon() });
      assert.equal(ok.code, status.OK);
      c.close();
      const refused = await c.unary("/test.Peer/Echo", Buffer.from("x"), { deadline: soon() });
      assert.equal(refused.code, status.UNAVAILABLE);
      assert.equal(refused.sent, false);
      call.write(Buffer.from("two"));
      call.end();
      const r = await ended;
      assert.equal(r.code, status.OK);
      assert.equal(JSON.parse(String(r.message)).count, 2);
    } finally {
      c.destroy();
      server.server.forceShutdown();
    }
  });

  it("against node:http2: its own deadline, compressed or extra answers, HTTP errors", async () => {
    const hung = Promise.withResolvers<{ timeout: string | undefined; rstCode: Promise<number> }>();
    const server = http2.createServer({ maxSendHeaderBlockLength: 1 << 20 });
    server.on("stream", (stream, headers) => {
      stream.on("error", () => undefined);
      switch (headers[":path"]) {
        case "/test.Peer/Hang": {
          // Never answers, whatever the grpc-timeout: the deadline is the client's to keep.
          const rstCode = new Promise<number>((resolve) =>
            stream.on("close", () => resolve(stream.rstCode)),
          );
          hung.resolve({ timeout: headers["grpc-timeout"] as string | undefined, rstCode });
          return;
        }
        case "/test.Peer/Two":
          stream.respond(
            { ":status": 200, "content-type": "application/grpc" },
            { waitForTrailers: true },
          );
          stream.on("wantTrailers", () => stream.sendTrailers({ "grpc-status": "0" }));
          stream.end(Buffer.from([0, 0, 0, 0, 1, 65, 0, 0, 0, 0, 1, 66])); // "A", then "B"
          return;
        case "/test.Peer/Http":
          stream.respond({ ":status": 503 });
          stream.end("<html>unavailable</html>");
          return;
        case "/test.Peer/Wide":
          // 70 KB of metadata (a 44 KB block, Huffman-coded): past the channel's 64 KiB.
          stream.respond({
            ":status": 200,
            "content-type": "application/grpc",
            "x-wide": "a".repeat(70_000),
          });
          stream.end(Buffer.from([0, 0, 0, 0, 0]));
          return;
        default:
          stream.respond({
            ":status": 200,
            "content-type": "application/grpc",
            "grpc-encoding": "gzip",
          });
          stream.end(Buffer.from([1, 0, 0, 0, 1, 0])); // flag 1: compressed
      }
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const address = server.address();
    assert.ok(address !== null && typeof address === "object");
    const c = channel(address.port);
    try {
      const late = await c.unary("/test.Peer/Hang", Buffer.from("x"), {
        deadline: deadlineClock() + 150,
      });
      assert.equal(late.code, status.DEADLINE_EXCEEDED);
      assert.ok(late.sent);
      const seen = await hung.promise;
      assert.match(seen.timeout ?? "", /^1[0-5]\dm$/, "grpc-timeout in ms");
      assert.equal(await seen.rstCode, http2.constants.NGHTTP2_CANCEL);

      const r = await c.unary("/test.Peer/Zip", Buffer.from("x"), { deadline: soon() });
      assert.equal(r.code, status.INTERNAL);
      assert.match(r.details, /compress/);
      const two = await c.unary("/test.Peer/Two", Buffer.from("x"), { deadline: soon() });
      assert.equal(two.code, status.UNIMPLEMENTED, "a unary call has one answer");
      const h = await c.unary("/test.Peer/Http", Buffer.from("x"), { deadline: soon() });
      assert.equal(h.code, status.UNAVAILABLE);
      assert.ok(h.sent);
      const wide = await c.unary("/test.Peer/Wide", Buffer.from("x"), { deadline: soon() });
      assert.equal(wide.code, status.RESOURCE_EXHAUSTED, wide.details);
      assert.match(wide.details, /metadata is larger/);
      assert.ok(wide.sent);
      const after = await c.unary("/test.Peer/Two", Buffer.from("x"), { deadline: soon() });
      assert.equal(after.code, status.UNIMPLEMENTED, "the connection serves on");
    } finally {
      c.destroy();
      server.close();
    }
  });
});
