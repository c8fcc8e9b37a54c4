/**
 * Issue 49: hostile clients against a real `cairn serve` process, frame by frame (raw sockets,
 * test/support/h2-raw.ts), one test per row of the issue's table and per limit. Each attack
 * asserts three things: the attacking connection gets the right GOAWAY or RST_STREAM; the node
 * keeps serving a well-behaved grpc-js client and /health/quick with a p99 within BOUNDS (1 s); and its
 * RSS (/proc/<pid>/status VmRSS) grows by at most the bound the test states.
 *
 * Bounds, generous for a loaded 2-core CI box: probe p99 ≤ 1 s; RSS growth ≤ 128 MiB (the
 * unhardened node grew by 900 MB in 10 s under the CONTINUATION flood, by the attacker's bytes
 * under PING floods). An attack stops early when the node's RSS passes its bound by 64 MiB, so a
 * node that grows without limit fails quickly instead of exhausting the machine.
 *
 * One node is shared by the tests of a describe (a node an attack killed is started again for the
 * next test, and the test that killed it fails saying how it died).
 *
 * Against the unhardened front end (c5c8789), run before the fixes:
 * - bad metadata, each of the 7 cases, rpc.io_threads 0 and 1 (14 tests): the node process
 *   exited (grpc-js Metadata.add threw out of the socket callback, core.ts #onDataFrame; with an
 *   I/O thread the worker's error ended the process).
 * - zero-length CONTINUATION flood: no GOAWAY; RSS passed the 192 MiB ceiling after 11 MiB sent.
 * - 16 KiB CONTINUATIONs: GOAWAY, but the socket stayed open: 64 MiB more were taken after it.
 * - PING flood, never reading: not closed; RSS past the ceiling after 240 MiB sent (14 s).
 * - SETTINGS flood, never reading: not closed within 15 s (211 MiB taken).
 * - Rapid Reset: no GOAWAY after 10,000 reset Puts (the issue saw all 70,000 of its executed).
 * - SETTINGS_MAX_CONCURRENT_STREAMS was 65,536.
 * - SETTINGS on 20,000 open streams: the probes timed out (p99 over 7 s; /health/quick too).
 *   (Measured over the SETTINGS only: opening 20,000 streams, 19,000 of them refused, stalls
 *   the hardened node too, ~0.8 s.)
 * - gzip bombs: answered INTERNAL (the inflate limit's RangeError), not RESOURCE_EXHAUSTED.
 * - malformed requests: all 11 served (no :path: UNIMPLEMENTED), none reset.
 * - malformed grpc-timeout: all 7 served OK.
 * - a client that never reads 1 MiB answers: the connection was never closed.
 * - HPACK: every response's headers and trailers took 102 bytes, the third as the first.
 * - Raft/* from a plain client: ProposeMeta INTERNAL, ReadIndex/ConfirmTerms/ScanShards OK.
 * - a 6 MiB Put in cluster mode: INVALID_ARGUMENT from the value check (128 MiB let it in).
 *
 * - handshake timeout (nothing, half a preface, no SETTINGS) and idle timeout: never closed.
 *
 * Every test failed there (32 of 32).
 */
import assert from "node:assert/strict";
import { gzipSync } from "node:zlib";
import { after, describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import {
  assertUnharmed,
  type Bounds,
  NodeUnderAttack,
  probeDuring,
} from "../support/node-under-attack.ts";
import {
  E,
  encodeBlock,
  F,
  type Field,
  frame,
  getRequest,
  grpcMessage,
  grpcRequest,
  headerValue,
  grpcStatus,
  putRequest,
  RawH2Client,
  requestFrames,
  S,
  settings,
  T,
  u32,
  unaryCall,
} from "../support/h2-raw.ts";

// 1 s: at 500 ms the hardened node failed once in three runs on a 2-core box at load 11 (one
// probe of a handful over); the unhardened node's probes took 5 s and more, or it died.
const BOUNDS: Bounds = { p99Ms: 1000, rssGrowthMiB: 128 };
const RSS_CEILING_MIB = BOUNDS.rssGrowthMiB + 64;
const PUT = "/cairn.v1.KV/Put";
const GET = "/cairn.v1.KV/Get";
const REFLECTION = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo";
/** Request bytes a client that reads no answer may get taken on reflection streams (test below). */
const MAX_TAKEN = 24 << 20;
const b = (s: string): Buffer => Buffer.from(s, "latin1");
/** How long a server may take to answer what a test waits for (a loaded box). */
const ANSWER_MS = 10_000;

/**
 * Writes `batch()` over and over until the socket closes, `maxBytes` have gone, `deadline` passes
 * or the attack is aborted (the node's RSS ceiling). A write that does not drain within 250 ms
 * (the server stopped reading) is followed by the next: the attacker keeps pushing.
 */
async function flood(
  client: RawH2Client,
  batch: () => Buffer,
  opts: { maxBytes: number; deadlineMs: number; abort: AbortSignal; stopWhen?: () => boolean },
): Promise<{ sent: number; reason: string }> {
  const end = performance.now() + opts.deadlineMs;
  let sent = 0;
  for (;;) {
    if (client.closed) return { sent, reason: "closed" };
    if (opts.abort.aborted) return { sent, reason: `aborted: ${String(opts.abort.reason)}` };
    if (opts.stopWhen?.() === true) return { sent, reason: "stopWhen" };
    if (sent >= opts.maxBytes) return { sent, reason: "maxBytes" };
    if (performance.now() > end) return { sent, reason: "deadline" };
    const data = batch();
    await client.write(data, 250);
    sent += data.length;
  }
}

/** Streams 1, 3, 5, … */
function streamIds(): () => number {
  let next = 1;
  return () => {
    const id = next;
    next += 2;
    return id;
  };
}

/** A unary Get of `key` on a fresh stream of `client`: its grpc-status, or null if reset. */
async function getOn(client: RawH2Client, id: number, key: string): Promise<number | null> {
  client.send(unaryCall(id, GET, getRequest(b(key))));
  return grpcStatus(await client.streamDone(id, ANSWER_MS));
}

/** How many keys start with `prefix` (KV.Scan pages through a grpc-js client). */
async function countKeys(node: NodeUnderAttack, prefix: string): Promise<number> {
  const c = await node.client();
  let n = 0;
  let token: Buffer = Buffer.alloc(0);
  for (let page = 0; page < 100; page++) {
    const r = await c.call(c.kv, "Scan", { prefix: b(prefix), limit: 10_000, page_token: token });
    n += (r["items"] as unknown[]).length;
    token = r["next_page_token"] as Buffer;
    if (token.length === 0) return n;
  }
  assert.fail("Scan paged more than 100 times");
}

/** Counts keys until two reads in a row agree (Puts dispatched before a reset may still apply). */
async function settledCount(node: NodeUnderAttack, prefix: string): Promise<number> {
  let last = await countKeys(node, prefix);
  for (let i = 0; i < 20; i++) {
    const c = await node.client();
    await c.call(c.kv, "Put", { key: b(`${prefix}~barrier`), value: b("x") });
    const now = (await countKeys(node, prefix)) - 1;
    if (now === last) return now;
    last = now;
  }
  return last;
}

const METADATA_CASES: [string, Field][] = [
  ["a non-ASCII byte (x-user: café, UTF-8)", ["x-user", Buffer.from("café", "utf8")]],
  ["a CR in a value", ["x-user", "a\rb"]],
  ["a LF in a value", ["x-user", "a\nb"]],
  ["a NUL in a value", ["x-user", "a\0b"]],
  ["a TAB in a value", ["x-user", "a\tb"]],
  ["a space in a key", ["x user", "v"]],
  ["an empty key", ["", "v"]],
];

/** Bad metadata: the node survives, the call is answered (a status, or a reset as malformed). */
function metadataTests(node: NodeUnderAttack): void {
  for (const [what, field] of METADATA_CASES) {
    it(`metadata with ${what}: the call is answered or reset, the node keeps serving`, async () => {
      await node.ensure();
      const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async () => {
        const client = await RawH2Client.open(node.port);
        try {
          client.send(unaryCall(1, PUT, putRequest(b("md"), b("v")), [field]));
          const outcome = await client.streamDone(1, ANSWER_MS);
          // The connection still serves a well-formed call.
          const next = client.closed || client.remoteEnded ? null : await getOn(client, 3, "md");
          return { outcome, goAway: client.goAway, next };
        } finally {
          client.destroy();
        }
      });
      await node.assertAlive();
      const { outcome, goAway, next } = result;
      assert.equal(goAway, null, "no GOAWAY: bad metadata is one call's problem");
      assert.ok(outcome !== null, "the call got an answer");
      const answered = grpcStatus(outcome) !== null;
      assert.ok(
        answered || outcome.rst === E.PROTOCOL_ERROR,
        `a status or RST_STREAM PROTOCOL_ERROR (got status ${grpcStatus(outcome)}, rst ${outcome.rst})`,
      );
      assert.equal(next, status.OK, "the connection serves the next call");
      await assertUnharmed(node, report, BOUNDS);
    });
  }
}

describe("front end under attack (real node, rpc.io_threads 0)", { timeout: 300_000 }, () => {
  // Shorter timeouts than the defaults, to test them and to finish the floods sooner: a write
  // stalled for 2 s (not 10 s) ends a connection, so do 1 s without a handshake (not 10 s) and
  // 1.5 s without a stream (not 5 min; the probes' grpc-js client reconnects between tests).
  const node = new NodeUnderAttack({
    CAIRN_RPC_IO_THREADS: "0",
    CAIRN_RPC_WRITE_STALL_TIMEOUT_MS: "2000",
    CAIRN_RPC_HANDSHAKE_TIMEOUT_MS: "1000",
    CAIRN_RPC_IDLE_TIMEOUT_MS: "1500",
  });
  after(() => node.stop());

  metadataTests(node);

  it("HEADERS without END_HEADERS then zero-length CONTINUATIONs: GOAWAY, closed, RSS bounded", async () => {
    await node.ensure();
    const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async (abort) => {
      const client = await RawH2Client.open(node.port);
      try {
        const block = encodeBlock(grpcRequest(PUT));
        client.send(frame(T.HEADERS, 0, 1, block.subarray(0, 10)));
        const empty = frame(T.CONTINUATION, 0, 1);
        const batch = Buffer.concat(Array.from({ length: 7000 }, () => empty));
        const f = await flood(client, () => batch, {
          maxBytes: 128 << 20,
          deadlineMs: 15_000,
          abort,
          stopWhen: () => client.goAway !== null,
        });
        const closed = await client.waitClosed(5000);
        return { f, goAway: client.goAway, closed, accepted: client.bytesAccepted };
      } finally {
        client.destroy();
      }
    });
    assert.ok(
      result.goAway !== null,
      `a GOAWAY (flood ended: ${result.f.reason} after ${(result.f.sent / 2 ** 20).toFixed(1)} MiB)`,
    );
    assert.ok(
      result.goAway.code === E.ENHANCE_YOUR_CALM || result.goAway.code === E.PROTOCOL_ERROR,
      `GOAWAY ENHANCE_YOUR_CALM or PROTOCOL_ERROR, got ${result.goAway.code}`,
    );
    assert.ok(result.closed, "the socket is closed after the GOAWAY");
    assert.ok(
      result.accepted < 16 << 20,
      `the server took ${(result.accepted / 2 ** 20).toFixed(1)} MiB before closing`,
    );
    await assertUnharmed(node, report, BOUNDS);
  });

  it("16 KiB CONTINUATIONs past the header limit: GOAWAY and the socket closed promptly", async () => {
    await node.ensure();
    const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async (abort) => {
      const client = await RawH2Client.open(node.port);
      try {
        // A block that only grows: one literal whose value is longer than any limit.
        const head = Buffer.from([0x00, 0x01, 0x78, 0x7f, 0xff, 0xff, 0xff, 0x0f]);
        client.send(frame(T.HEADERS, 0, 1, head));
        const cont = frame(T.CONTINUATION, 0, 1, Buffer.alloc(16_384, 0x61));
        const batch = Buffer.concat(Array.from({ length: 4 }, () => cont));
        let atGoAway = -1;
        const f = await flood(client, () => batch, {
          maxBytes: 96 << 20,
          deadlineMs: 15_000,
          abort,
          stopWhen: () => {
            if (client.goAway !== null && atGoAway < 0) atGoAway = client.bytesAccepted;
            // Past the GOAWAY, push 64 MiB more: a closed socket takes at most its buffers.
            return atGoAway >= 0 && client.bytesAccepted - atGoAway > 64 << 20;
          },
        });
        const closed = await client.waitClosed(5000);
        return {
          f,
          goAway: client.goAway,
          closed,
          afterGoAway: atGoAway < 0 ? -1 : client.bytesAccepted - atGoAway,
        };
      } finally {
        client.destroy();
      }
    });
    assert.ok(result.goAway !== null, `a GOAWAY (flood ended: ${result.f.reason})`);
    assert.ok(
      result.goAway.code === E.ENHANCE_YOUR_CALM ||
        result.goAway.code === E.PROTOCOL_ERROR ||
        result.goAway.code === E.COMPRESSION_ERROR,
      `GOAWAY for a block too large, got code ${result.goAway.code}`,
    );
    assert.ok(
      result.closed,
      `the socket is closed (the server took ${(result.afterGoAway / 2 ** 20).toFixed(1)} MiB after its GOAWAY)`,
    );
    // Loopback socket buffers hold a few MiB: beyond them the server itself was still reading.
    assert.ok(
      result.afterGoAway < 16 << 20,
      `the server took ${(result.afterGoAway / 2 ** 20).toFixed(1)} MiB after its GOAWAY`,
    );
    await assertUnharmed(node, report, BOUNDS);
  });

  for (const [what, unit] of [
    ["PING", frame(T.PING, 0, 0, Buffer.alloc(8))],
    ["SETTINGS", frame(T.SETTINGS, 0, 0)],
  ] as const) {
    it(`a ${what} flood from a client that never reads: closed within 15 s, RSS bounded`, async () => {
      await node.ensure();
      const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async (abort) => {
        const client = await RawH2Client.open(node.port, { neverRead: true });
        try {
          const batch = Buffer.concat(Array.from({ length: 4096 }, () => unit));
          const t = performance.now();
          const f = await flood(client, () => batch, {
            maxBytes: 512 << 20,
            deadlineMs: 15_000,
            abort,
          });
          return { f, ms: performance.now() - t, accepted: client.bytesAccepted };
        } finally {
          client.destroy();
        }
      });
      assert.equal(
        result.f.reason,
        "closed",
        `the server closed the connection (flood ended: ${result.f.reason} after ${(result.accepted / 2 ** 20).toFixed(0)} MiB taken, ${result.ms.toFixed(0)} ms)`,
      );
      await assertUnharmed(node, report, BOUNDS);
    });
  }

  it("Rapid Reset (HEADERS+DATA+RST_STREAM): GOAWAY ENHANCE_YOUR_CALM, reset Puts not executed", async () => {
    await node.ensure();
    const prefix = `rr-${process.pid}-${Date.now()}-`;
    const TOTAL = 10_000;
    const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async (abort) => {
      const client = await RawH2Client.open(node.port);
      try {
        const next = streamIds();
        let i = 0;
        const f = await flood(
          client,
          () => {
            const parts: Buffer[] = [];
            for (let k = 0; k < 200 && i < TOTAL; k++, i++) {
              const id = next();
              parts.push(
                unaryCall(id, PUT, putRequest(b(`${prefix}${i}`), b("v"))),
                frame(T.RST_STREAM, 0, id, u32(E.CANCEL)),
              );
            }
            return Buffer.concat(parts);
          },
          {
            maxBytes: Infinity,
            deadlineMs: 30_000,
            abort,
            stopWhen: () => i >= TOTAL || client.goAway !== null,
          },
        );
        await client.waitFor(() => client.goAway !== null, 5000);
        return { f, sent: i, goAway: client.goAway };
      } finally {
        client.destroy();
      }
    });
    const executed = await settledCount(node, prefix);
    assert.ok(result.goAway !== null, `a GOAWAY (${result.sent} reset Puts sent)`);
    assert.equal(result.goAway.code, E.ENHANCE_YOUR_CALM, "GOAWAY ENHANCE_YOUR_CALM");
    // A Put dispatched before its reset arrived may run; thousands may not.
    assert.ok(
      executed <= 1000,
      `${executed} of the ${result.sent} reset Puts were executed (at most 1000 may be)`,
    );
    await assertUnharmed(node, report, BOUNDS);
  });

  it("advertises SETTINGS_MAX_CONCURRENT_STREAMS ≤ 1000 and refuses streams past it", async () => {
    await node.ensure();
    const client = await RawH2Client.open(node.port);
    try {
      assert.ok(
        await client.waitFor(
          () => client.frames.some((f) => f.type === T.SETTINGS && f.flags === 0),
          ANSWER_MS,
        ),
        "the server's SETTINGS",
      );
      const s = client.frames.find((f) => f.type === T.SETTINGS && f.flags === 0);
      let max = Infinity;
      for (let at = 0; s !== undefined && at + 6 <= s.payload.length; at += 6) {
        if (s.payload.readUInt16BE(at) === S.MAX_CONCURRENT_STREAMS) {
          max = s.payload.readUInt32BE(at + 2);
        }
      }
      assert.ok(max <= 1000 && max >= 100, `SETTINGS_MAX_CONCURRENT_STREAMS is ${max}`);
      // Open max + 10 streams that never end their requests: the last 10 are refused.
      const open: Buffer[] = [];
      for (let k = 0; k < max + 10; k++) {
        open.push(frame(T.HEADERS, F.END_HEADERS, 2 * k + 1, encodeBlock(grpcRequest(PUT))));
      }
      client.send(Buffer.concat(open));
      const last = 2 * (max + 9) + 1;
      assert.ok(
        await client.waitFor(() => (client.streams.get(last)?.rst ?? null) !== null, ANSWER_MS),
        "the stream past the limit is reset",
      );
      const rst = client.streams.get(last)?.rst;
      assert.ok(
        rst === E.REFUSED_STREAM || rst === E.PROTOCOL_ERROR,
        `REFUSED_STREAM (or PROTOCOL_ERROR), got ${rst}`,
      );
      assert.equal(client.streams.get(1)?.rst ?? null, null, "the first stream is open");
    } finally {
      client.destroy();
    }
  });

  it("SETTINGS frames on a connection with many open streams are processed quickly", async () => {
    await node.ensure();
    // First (not measured) as many requests as the server allows opened and never ended (a
    // client that keeps opening streams past the limit is cut off: the next test).
    const client = await RawH2Client.open(node.port);
    try {
      const block = encodeBlock(grpcRequest(PUT));
      const batch: Buffer[] = [];
      for (let j = 0; j < 1000; j++) batch.push(frame(T.HEADERS, F.END_HEADERS, 2 * j + 1, block));
      await client.write(Buffer.concat(batch), ANSWER_MS);
      assert.ok(await client.roundTrip(1, 30_000), "the streams are open");
      const open = [...client.streams.values()].filter((x) => x.rst === null).length;
      // Then, measured, 3,000 SETTINGS frames, none of them changing INITIAL_WINDOW_SIZE.
      const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async () => {
        const one = frame(T.SETTINGS, 0, 0, settings([S.MAX_FRAME_SIZE, 16_384]));
        for (let k = 0; k < 3; k++) {
          await client.write(Buffer.concat(Array.from({ length: 1000 }, () => one)), ANSWER_MS);
        }
        return client.roundTrip(2, 60_000);
      });
      assert.ok(result, `the server got through the SETTINGS within 60 s (${open} streams open)`);
      await assertUnharmed(node, report, BOUNDS);
    } finally {
      client.destroy();
    }
  });

  it("streams opened past the limit again and again: GOAWAY ENHANCE_YOUR_CALM", async () => {
    await node.ensure();
    const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async () => {
      const client = await RawH2Client.open(node.port);
      try {
        // 20,000 requests never ended: past the 1,000 open, each is refused, and each refusal
        // spends the connection's reset budget (rpc.max_resets_per_second).
        const block = encodeBlock(grpcRequest(PUT));
        for (let k = 0; k < 20_000 && client.goAway === null && !client.closed; k += 1000) {
          const batch: Buffer[] = [];
          for (let j = k; j < k + 1000; j++) {
            batch.push(frame(T.HEADERS, F.END_HEADERS, 2 * j + 1, block));
          }
          await client.write(Buffer.concat(batch), ANSWER_MS);
        }
        await client.waitFor(() => client.goAway !== null, 10_000);
        return { goAway: client.goAway };
      } finally {
        client.destroy();
      }
    });
    assert.ok(result.goAway !== null, "a GOAWAY");
    assert.equal(result.goAway.code, E.ENHANCE_YOUR_CALM, "GOAWAY ENHANCE_YOUR_CALM");
    await assertUnharmed(node, report, BOUNDS);
  });

  it("gzip bombs (6 KB gzip → 6 MiB): refused with INVALID_ARGUMENT, other clients unaffected", async () => {
    await node.ensure();
    const inflated = putRequest(b("bomb"), Buffer.alloc(6 << 20));
    const bomb = gzipSync(inflated, { level: 9 });
    assert.ok(bomb.length < 8 * 1024, `the bomb is ${bomb.length} bytes`);
    const CONNECTIONS = 4;
    const IN_FLIGHT = 8;
    const PER_CONNECTION = 24;
    const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async (abort) => {
      const statuses: (number | null)[] = [];
      await Promise.all(
        Array.from({ length: CONNECTIONS }, async () => {
          const client = await RawH2Client.open(node.port);
          try {
            const next = streamIds();
            const send = (): number => {
              const id = next();
              client.send(
                frame(
                  T.HEADERS,
                  F.END_HEADERS,
                  id,
                  encodeBlock(grpcRequest(PUT, [["grpc-encoding", "gzip"]])),
                ),
                frame(T.DATA, F.END_STREAM, id, grpcMessage(bomb, true)),
              );
              return id;
            };
            const pending = new Set<number>();
            let sent = 0;
            while ((sent < PER_CONNECTION || pending.size > 0) && !abort.aborted) {
              while (pending.size < IN_FLIGHT && sent < PER_CONNECTION) {
                pending.add(send());
                sent++;
              }
              const ok = await client.waitFor(
                () => [...pending].some((id) => client.streams.get(id)?.ended === true),
                ANSWER_MS,
              );
              if (!ok) break;
              for (const id of [...pending]) {
                const s = client.streams.get(id);
                if (s === undefined || !(s.ended || s.rst !== null)) continue;
                statuses.push(grpcStatus(s));
                pending.delete(id);
              }
            }
          } finally {
            client.destroy();
          }
        }),
      );
      return statuses;
    });
    assert.equal(result.length, CONNECTIONS * PER_CONNECTION, "every bomb was answered");
    // Past limits.max_message_bytes once inflated: the client's mistake (design.md §2).
    for (const code of result) assert.equal(code, status.INVALID_ARGUMENT);
    await assertUnharmed(node, report, BOUNDS);
  });

  const MALFORMED: [string, Field[]][] = [
    ["an upper-case header name", grpcRequest(GET, [["X-Upper", "1"]])],
    [
      "a pseudo-header after a regular header",
      [
        [":method", "POST"],
        [":scheme", "http"],
        ["content-type", "application/grpc"],
        [":path", GET],
        [":authority", "x"],
        ["te", "trailers"],
      ],
    ],
    ["a connection: header", grpcRequest(GET, [["connection", "keep-alive"]])],
    ["te: gzip", grpcRequest(GET).map(([k, v]) => (k === "te" ? ["te", "gzip"] : [k, v]) as Field)],
    ["no :method", grpcRequest(GET).filter(([k]) => k !== ":method")],
    ["no :scheme", grpcRequest(GET).filter(([k]) => k !== ":scheme")],
    ["no :path", grpcRequest(GET).filter(([k]) => k !== ":path")],
    ["a duplicate :path", grpcRequest(GET, [[":path", GET]])],
    ["an unknown pseudo-header", grpcRequest(GET, [[":foo", "bar"]])],
    ["a response pseudo-header (:status)", grpcRequest(GET, [[":status", "200"]])],
    [
      "GET",
      grpcRequest(GET).map(([k, v]) => (k === ":method" ? [":method", "GET"] : [k, v]) as Field),
    ],
  ];

  it("malformed requests (RFC 9113 §8.2–8.3) are reset with PROTOCOL_ERROR, the connection kept", async () => {
    await node.ensure();
    const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async () => {
      const client = await RawH2Client.open(node.port);
      const seen: { what: string; rst: number | null; status: number | null }[] = [];
      try {
        const next = streamIds();
        for (const [what, fields] of MALFORMED) {
          const id = next();
          client.send(
            frame(T.HEADERS, F.END_HEADERS, id, encodeBlock(fields)),
            frame(T.DATA, F.END_STREAM, id, grpcMessage(getRequest(b("k")))),
          );
          const outcome = await client.streamDone(id, ANSWER_MS);
          seen.push({ what, rst: outcome?.rst ?? null, status: grpcStatus(outcome) });
        }
        const good = await getOn(client, next(), "k");
        return { seen, good, goAway: client.goAway };
      } finally {
        client.destroy();
      }
    });
    const wrong = result.seen.filter((s) => s.rst !== E.PROTOCOL_ERROR);
    assert.deepEqual(
      wrong.map((s) => `${s.what}: rst ${s.rst}, status ${s.status}`),
      [],
      "every malformed request is reset with PROTOCOL_ERROR",
    );
    assert.equal(result.goAway, null, "no GOAWAY: a malformed request is a stream error");
    assert.equal(result.good, status.OK, "a well-formed call on the same connection is served");
    await assertUnharmed(node, report, BOUNDS);
  });

  it("a malformed grpc-timeout is rejected, not taken as no deadline", async () => {
    await node.ensure();
    const client = await RawH2Client.open(node.port);
    try {
      const next = streamIds();
      const seen: string[] = [];
      for (const value of ["1x", "abc", "123456789S", "", "-1S", "1.5S", "S"]) {
        const id = next();
        client.send(unaryCall(id, GET, getRequest(b("k")), [["grpc-timeout", value]]));
        const outcome = await client.streamDone(id, ANSWER_MS);
        const code = grpcStatus(outcome);
        if (code === status.OK || (code === null && outcome?.rst === null)) {
          seen.push(`grpc-timeout ${JSON.stringify(value)}: status ${code}`);
        }
      }
      assert.deepEqual(seen, [], "each is refused (a non-OK status, or a reset)");
      assert.equal(
        await getOn(client, next(), "k"),
        status.OK,
        "a call with no grpc-timeout is served",
      );
      const id = next();
      client.send(unaryCall(id, GET, getRequest(b("k")), [["grpc-timeout", "10S"]]));
      assert.equal(grpcStatus(await client.streamDone(id, ANSWER_MS)), status.OK, "10S is served");
    } finally {
      client.destroy();
    }
    await node.assertAlive();
  });

  // protobufjs reads a field by the number its tag names, whatever its wire type says, and
  // skips field 0: each of these Puts wrote key/value before (strict-wire.ts).
  const BAD_WIRE: [string, Buffer][] = [
    ["the key tagged as a varint", Buffer.from([0x08, 0x01, 0x61, 0x12, 0x01, 0x62])],
    ["the key under wire type 6", Buffer.from([0x0e, 0x01, 0x61, 0x12, 0x01, 0x62])],
    ["a field 0 first", Buffer.from([0x00, 0x05, 0x0a, 0x01, 0x61, 0x12, 0x01, 0x62])],
    ["a group", Buffer.from([0x0a, 0x01, 0x61, 0x12, 0x01, 0x62, 0x1b, 0x1c])],
    ["wire type 7", Buffer.from([0x0a, 0x01, 0x61, 0x12, 0x01, 0x62, 0x27])],
    [
      "expected_version's index length-delimited",
      Buffer.from([0x0a, 0x01, 0x61, 0x12, 0x01, 0x62, 0x1a, 0x03, 0x0a, 0x01, 0x00]),
    ],
  ];

  it("a Put whose bytes break protobuf's wire rules is refused INVALID_ARGUMENT, nothing written", async () => {
    await node.ensure();
    const client = await RawH2Client.open(node.port);
    const wrong: string[] = [];
    try {
      const next = streamIds();
      for (const [what, body] of BAD_WIRE) {
        const id = next();
        client.send(unaryCall(id, PUT, body));
        const outcome = await client.grpcOutcome(id);
        if (outcome.grpcStatus !== status.INVALID_ARGUMENT) {
          wrong.push(`${what}: ${JSON.stringify(outcome)}`);
        } else if (!/not a valid \/cairn\.v1\.KV\/Put message/.test(outcome.message ?? "")) {
          wrong.push(`${what}: ${String(outcome.message)}`);
        }
      }
      // An unknown field is skipped, as protobuf skips it: a newer client's Put is served.
      const id = next();
      client.send(
        unaryCall(
          id,
          PUT,
          Buffer.concat([putRequest(b("wire-ok"), b("v")), Buffer.from([0xf8, 0x06, 0x01])]),
        ),
      );
      assert.equal((await client.grpcOutcome(id)).grpcStatus, status.OK);
    } finally {
      client.destroy();
    }
    assert.deepEqual(wrong, [], "every malformed Put is refused INVALID_ARGUMENT");
    const c = await node.client();
    const got = await c.call(c.kv, "Get", { key: b("a") });
    assert.equal(got["found"], false, "no malformed Put wrote key a");
    assert.equal((await c.call(c.kv, "Get", { key: b("wire-ok") }))["found"], true);
  });

  it("an unknown method is answered UNIMPLEMENTED, its path echoed at most 128 characters", async () => {
    await node.ensure();
    const client = await RawH2Client.open(node.port);
    try {
      const path = `/cairn.v1.KV/${"x".repeat(10_000)}`;
      client.send(unaryCall(1, path, getRequest(b("k"))));
      const outcome = await client.grpcOutcome(1);
      assert.equal(outcome.grpcStatus, status.UNIMPLEMENTED);
      assert.equal(
        outcome.message,
        `The server does not implement the method ${path.slice(0, 128)}… (${path.length} characters)`,
      );
      client.send(unaryCall(3, "/cairn.v1.KV/Nope", getRequest(b("k"))));
      assert.equal(
        (await client.grpcOutcome(3)).message,
        "The server does not implement the method /cairn.v1.KV/Nope",
      );
    } finally {
      client.destroy();
    }
  });

  it("a content-type other than gRPC's is answered 415; application/grpc+proto and parameters are served", async () => {
    await node.ensure();
    const client = await RawH2Client.open(node.port);
    const seen: string[] = [];
    try {
      const next = streamIds();
      const types = [
        ["application/grpcfoo", "415"],
        ["application/grpc+json", "415"],
        ["application/grpc-web", "415"],
        ["text/plain", "415"],
        ["application/grpc+proto", "200"],
        ["application/grpc;charset=utf-8", "200"],
        ["application/grpc+proto; x=1", "200"],
      ];
      for (const [type, want] of types) {
        const id = next();
        const fields = grpcRequest(GET).map(
          ([k, v]) => (k === "content-type" ? [k, type] : [k, v]) as Field,
        );
        client.send(requestFrames(id, fields, grpcMessage(getRequest(b("k")))));
        const outcome = await client.streamDone(id, ANSWER_MS);
        const got = headerValue(outcome?.blocks[0], ":status");
        if (got !== want) seen.push(`${type}: :status ${String(got)}, wanted ${want}`);
      }
    } finally {
      client.destroy();
    }
    assert.deepEqual(seen, []);
  });

  it("a client that never reads its answers: output bounded, the connection closed", async () => {
    await node.ensure();
    const c = await node.client();
    const value = Buffer.alloc(1 << 20, 0x5a);
    await c.call(c.kv, "Put", { key: b("big-answer"), value });
    const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async (abort) => {
      // Windows as large as the protocol allows: only the server's own bound holds its output.
      const client = await RawH2Client.open(
        node.port,
        { neverRead: true },
        settings([S.INITIAL_WINDOW_SIZE, 0x7fffffff]),
      );
      try {
        client.send(frame(T.WINDOW_UPDATE, 0, 0, u32(0x7fffffff - 65_535)));
        const next = streamIds();
        const t = performance.now();
        let calls = 0;
        // All 600 in one write: the node reads them in one go, and must not run them all (and
        // build 600 answers) before it sees that nobody reads (1 GiB of RSS before that fix).
        const f = await flood(
          client,
          () => {
            const parts: Buffer[] = [];
            for (; calls < 600; calls++) {
              parts.push(unaryCall(next(), GET, getRequest(b("big-answer"))));
            }
            return Buffer.concat(parts);
          },
          { maxBytes: Infinity, deadlineMs: 15_000, abort, stopWhen: () => calls >= 600 },
        );
        // Every Get asked for has been read, or the server stopped reading: it must now close.
        const closed =
          f.reason === "closed" || (await client.waitClosed(15_000 - (performance.now() - t)));
        return { f, calls, closed };
      } finally {
        client.destroy();
      }
    });
    assert.ok(
      result.closed,
      `the server closed the connection (${result.calls} Gets of 1 MiB sent, flood ended: ${result.f.reason})`,
    );
    // The node reads and frames up to its output bound of 1 MiB answers before it stops: on a
    // CI machine running two test files, that work alone reached 1–3 s of probe p99 (5.4 s
    // before calls of a backlogged connection were held). 4 s still fails the unbounded case.
    await assertUnharmed(node, report, { ...BOUNDS, p99Ms: 4000 });
  });

  it("a client that grants no flow-control window: its calls wait, memory bounded; granted, all are answered", async () => {
    await node.ensure();
    const c = await node.client();
    const value = Buffer.alloc(256 << 10, 0x33);
    await c.call(c.kv, "Put", { key: b("quarter-answer"), value });
    const CALLS = 200;
    const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async () => {
      // Stream windows of 0: every answer's DATA waits in the node for a WINDOW_UPDATE.
      const client = await RawH2Client.open(node.port, {}, settings([S.INITIAL_WINDOW_SIZE, 0]));
      try {
        const next = streamIds();
        const ids = Array.from({ length: CALLS }, () => next());
        client.send(
          Buffer.concat(ids.map((id) => unaryCall(id, GET, getRequest(b("quarter-answer"))))),
        );
        const begun = (): number =>
          ids.filter((id) => (client.streams.get(id)?.blocks.length ?? 0) > 0).length;
        assert.ok(await client.waitFor(() => begun() > 0, ANSWER_MS), "the first answers began");
        // A call on another connection: the node has had its turns to run more of them.
        await c.call(c.kv, "Get", { key: b("probe") });
        const begunBeforeWindows = begun();
        // Now it reads: windows for the connection and every stream (the client credits what
        // arrives from then on).
        client.send(
          frame(T.WINDOW_UPDATE, 0, 0, u32(0x7fffffff - 65_535)),
          ...ids.map((id) => frame(T.WINDOW_UPDATE, 0, id, u32(1 << 20))),
        );
        const done = await client.waitFor(
          () => ids.every((id) => client.streams.get(id)?.ended === true),
          30_000,
        );
        const answered = ids.filter((id) => {
          const s = client.streams.get(id);
          return s !== undefined && grpcStatus(s) === status.OK && s.dataBytes > value.length;
        }).length;
        return { begunBeforeWindows, done, answered };
      } finally {
        client.destroy();
      }
    });
    // At ~256 KiB an answer, about 16 fill a quarter of the connection's 16 MiB output bound;
    // without the hold all 200 ran, and 50 MiB of answers waited for windows.
    assert.ok(
      result.begunBeforeWindows <= 40,
      `${result.begunBeforeWindows} of ${CALLS} calls answered with no window to send them`,
    );
    assert.ok(result.done, "every call ended once the client granted windows");
    assert.equal(result.answered, CALLS, "every held call ran and was answered in full");
    await assertUnharmed(node, report, BOUNDS);
  });

  it("a client that reads no answer and pipelines server reflection requests: the node stops taking them, memory bounded", async () => {
    // Each request (18 bytes) is answered with cairn.v1's file descriptor (2.4 KB), on a
    // two-way stream the front end proxies to the node's grpc-js server. Before the fix the
    // node credited every request as it passed it on, and grpc-js buffered every answer: 1.5 GB
    // of RSS from this one connection in 24 s.
    await node.ensure();
    const STREAMS = 10;
    const { result, report } = await probeDuring(node, RSS_CEILING_MIB, async (abort) => {
      const client = await RawH2Client.open(node.port, {}, settings([S.INITIAL_WINDOW_SIZE, 0]));
      try {
        const ids = Array.from({ length: STREAMS }, (_, i) => 1 + 2 * i);
        for (const id of ids) {
          client.send(frame(T.HEADERS, F.END_HEADERS, id, encodeBlock(grpcRequest(REFLECTION))));
        }
        const request = grpcMessage(Buffer.concat([Buffer.from([0x22, 11]), b("cairn.v1.KV")]));
        const payload = Buffer.concat(Array.from({ length: 800 }, () => request));
        // The windows the node grants: its SETTINGS' initial stream window (65,535 without
        // one), the connection's 65,535, and each WINDOW_UPDATE since.
        const initialStream = (): number => {
          let w = 65_535;
          for (const f of client.frames) {
            if (f.type !== T.SETTINGS || (f.flags & 0x1) !== 0) continue;
            for (let at = 0; at + 6 <= f.payload.length; at += 6) {
              if (f.payload.readUInt16BE(at) === S.INITIAL_WINDOW_SIZE) {
                w = f.payload.readUInt32BE(at + 2);
              }
            }
          }
          return w;
        };
        const granted = (id: number): number =>
          client.frames
            .filter((f) => f.type === T.WINDOW_UPDATE && f.streamId === id)
            .reduce((a, f) => a + (f.payload.readUInt32BE(0) & 0x7fffffff), 0);
        const sentOn = new Map<number, number>();
        let sent = 0;
        let lastProgress = performance.now();
        const end = performance.now() + 60_000;
        let reason = "deadline";
        while (performance.now() < end) {
          if (client.closed || client.remoteEnded) {
            reason = "closed";
            break;
          }
          if (abort.aborted) {
            reason = `aborted: ${String(abort.reason)}`;
            break;
          }
          if (sent > MAX_TAKEN) {
            reason = "taken";
            break;
          }
          // 2 s with no window to send anything: the node stopped taking requests.
          if (performance.now() - lastProgress > 2000) {
            reason = "stalled";
            break;
          }
          let progressed = false;
          for (const id of ids) {
            const streamRoom = initialStream() + granted(id) - (sentOn.get(id) ?? 0);
            const connRoom = 65_535 + granted(0) - sent;
            if (streamRoom < payload.length || connRoom < payload.length) continue;
            await client.write(frame(T.DATA, 0, id, payload), 250);
            sentOn.set(id, (sentOn.get(id) ?? 0) + payload.length);
            sent += payload.length;
            progressed = true;
          }
          if (progressed) lastProgress = performance.now();
          else await client.waitFor(() => false, 20); // a WINDOW_UPDATE may come
        }
        return { sent, reason };
      } finally {
        client.destroy();
      }
    });
    assert.ok(
      result.reason === "stalled" || result.reason === "closed",
      `the node went on taking requests it could not answer: ${(result.sent / 2 ** 20).toFixed(1)} MiB of them (${result.reason})`,
    );
    await assertUnharmed(node, report, BOUNDS);
  });

  for (const [what, bytes] of [
    ["sends nothing", Buffer.alloc(0)],
    ["sends half a preface", Buffer.from("PRI * HTTP/2.0\r\n")],
    ["sends a preface and no SETTINGS", Buffer.from("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")],
  ] as const) {
    it(`a connection that ${what} is closed after rpc.handshake_timeout_ms (1 s)`, async () => {
      await node.ensure();
      const client = new RawH2Client(node.port);
      try {
        await client.connected();
        if (bytes.length > 0) client.send(bytes);
        assert.ok(await client.waitClosed(6000), "closed within 6 s");
      } finally {
        client.destroy();
      }
      await node.assertAlive();
    });
  }

  it("an idle connection is closed after rpc.idle_timeout_ms (1.5 s)", async () => {
    await node.ensure();
    const client = await RawH2Client.open(node.port);
    try {
      assert.equal(await getOn(client, 1, "k"), status.OK);
      assert.ok(await client.waitClosed(8000), "closed within 8 s of its last call");
      if (client.goAway !== null) assert.equal(client.goAway.code, E.NO_ERROR);
    } finally {
      client.destroy();
    }
  });

  it("the HPACK encoder indexes the headers every response repeats", async () => {
    await node.ensure();
    const client = await RawH2Client.open(node.port);
    try {
      const sizes: number[] = [];
      for (const id of [1, 3, 5]) {
        assert.equal(await getOn(client, id, "k"), status.OK);
        const headers = client.frames.filter((f) => f.type === T.HEADERS && f.streamId === id);
        sizes.push((headers[0]?.payload.length ?? 0) + (headers[1]?.payload.length ?? 0));
      }
      assert.equal(client.hpackError, null, "the server's header blocks decode");
      assert.ok(
        (sizes[2] as number) <= 16,
        `a third response's headers and trailers take ${sizes[2]} bytes (first: ${sizes[0]})`,
      );
    } finally {
      client.destroy();
    }
  });
});

describe("front end under attack (real node, rpc.io_threads 1)", { timeout: 120_000 }, () => {
  const node = new NodeUnderAttack({ CAIRN_RPC_IO_THREADS: "1" });
  after(() => node.stop());
  metadataTests(node);
});

describe(
  "peer-only methods and receive limits (real node in cluster mode)",
  { timeout: 120_000 },
  () => {
    // A one-node cluster (its own seed): the peers' service is registered, and the receive limit
    // was raised for it.
    const node = new NodeUnderAttack({ CAIRN_RPC_IO_THREADS: "0" }, { cluster: true });
    after(() => node.stop());

    it("refuses cairn.v1.Raft/* from a connection that has not completed the peer handshake", async () => {
      await node.ensure();
      const client = await RawH2Client.open(node.port);
      try {
        const next = streamIds();
        const seen: string[] = [];
        for (const method of ["ProposeMeta", "ReadIndex", "ConfirmTerms", "ScanShards", "Stream"]) {
          const id = next();
          client.send(unaryCall(id, `/cairn.v1.Raft/${method}`, Buffer.alloc(0)));
          const outcome = await client.streamDone(id, ANSWER_MS);
          const code = grpcStatus(outcome);
          if (code !== status.PERMISSION_DENIED && code !== status.UNAUTHENTICATED) {
            seen.push(`${method}: status ${code}, rst ${outcome?.rst}`);
          }
        }
        assert.deepEqual(seen, [], "each is refused with PERMISSION_DENIED or UNAUTHENTICATED");
      } finally {
        client.destroy();
      }
      await node.assertAlive();
    });

    it("bounds a client's KV call by limits.max_message_bytes, not the peers' snapshot limit", async () => {
      await node.ensure();
      const c = await node.client();
      const err = await c
        .call(c.kv, "Put", { key: b("large"), value: Buffer.alloc(6 << 20) })
        .then(() => null)
        .catch((e: unknown) => e as { code: number; details: string });
      assert.ok(err !== null, "a 6 MiB Put fails");
      assert.equal(err.code, status.INVALID_ARGUMENT, err.details);
      assert.match(err.details, /the limit is 4194304 bytes \(limits\.max_message_bytes\)/);
      await node.assertAlive();
    });
  },
);
