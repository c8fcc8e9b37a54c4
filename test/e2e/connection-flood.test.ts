/**
 * A node's file descriptors against its open-file limit and against clients that open
 * connections and hold them, on a real `cairn serve` process: every accepted connection and every
 * table kept open takes a descriptor, and a node out of them cannot flush a memtable, read a
 * table or open its next WAL segment. Seen failing before the bounds (src/api/connection-slots.ts,
 * src/node/open-files.ts):
 *
 * - 700 idle HTTP/2 connections to a node whose open-file limit was 600 ended it: the next flush
 *   failed with EMFILE ("fatal storage or consistency error ... EMFILE: too many open files,
 *   open '.../shards/468/000001.sst'") and the process exited (bd7e0d7, the first test below);
 * - with connections bounded but the tables' cache still at 4096, the same node ended with no
 *   client but the writer, at its 557th table ("EMFILE ... open '.../shards/286/000008.sst'":
 *   1f963b7, the second test below).
 *
 * Now the node splits what the limit leaves between its tables and its connections, closes
 * connections past their bound as they are accepted, and serves on.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { connect as connectTcp, type Socket } from "node:net";
import { tmpdir } from "node:os";
import { connect as connectTls } from "node:tls";
import { type ClientHttp2Session, type ClientHttp2Stream, connect as connectH2 } from "node:http2";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { eventually } from "../support/cluster-process.ts";
import { type Clients, connect } from "../support/grpc-client.ts";
import { grpcMessage, PREFACE, putRequest, settings } from "../support/h2-raw.ts";
import { metricValue, type ServerProcess, startServer } from "../support/server-process.ts";
import { makeCerts } from "../support/tls-certs.ts";

/** `host:port` split at its last colon. */
function hostPort(address: string): { host: string; port: number } {
  const colon = address.lastIndexOf(":");
  return { host: address.slice(0, colon), port: Number(address.slice(colon + 1)) };
}

/** Sockets a test opened and holds, and how many of them the server closed. */
interface Flood {
  readonly opened: number;
  /** Sockets the server closed (or reset) while the test held them. */
  closedByServer(): number;
  close(): void;
}

/**
 * Opens `count` connections to `address` (from `localAddress`, when given), `batch` at a time,
 * each sending `hello` (if any) and then nothing more; every answer is read and dropped, so none
 * is closed for output it leaves.
 */
async function flood(
  address: string,
  count: number,
  hello: Buffer | null,
  localAddress?: string,
): Promise<Flood> {
  const { host, port } = hostPort(address);
  const sockets: Socket[] = [];
  let closed = 0;
  let ending = false;
  const open = (): Promise<void> =>
    new Promise((resolve) => {
      const s = connectTcp({ port, host, ...(localAddress && { localAddress }) }, () => {
        if (hello !== null) s.write(hello);
        resolve();
      });
      s.on("data", () => {});
      s.on("error", () => resolve());
      s.once("close", () => {
        if (!ending) closed++;
        resolve();
      });
      sockets.push(s);
    });
  const batch = 50;
  for (let i = 0; i < count; i += batch) {
    await Promise.all(Array.from({ length: Math.min(batch, count - i) }, open));
  }
  return {
    opened: sockets.length,
    closedByServer: () => closed,
    close: () => {
      ending = true;
      for (const s of sockets) s.destroy();
    },
  };
}

/** What an HTTP/2 client sends first: the preface and an empty SETTINGS. */
const H2_HELLO = Buffer.concat([PREFACE, settings()]);

/**
 * A node:http2 session with `server` (from `localAddress`, when given), kept in `sessions` (for
 * the test to destroy).
 */
function h2Session(
  server: ServerProcess,
  sessions: ClientHttp2Session[],
  localAddress?: string,
): ClientHttp2Session {
  const { host, port } = hostPort(server.rpc);
  const session = connectH2(
    `http://${server.rpc}`,
    localAddress === undefined
      ? {}
      : { createConnection: () => connectTcp({ host, port, localAddress }) },
  );
  session.on("error", () => {});
  sessions.push(session);
  return session;
}

/** A gRPC call's stream on `session`, its request still open; `extra` headers beside. */
function grpcStream(
  session: ClientHttp2Session,
  path: string,
  extra: Record<string, string> = {},
): ClientHttp2Stream {
  const stream = session.request({
    ":method": "POST",
    ":path": path,
    "content-type": "application/grpc",
    te: "trailers",
    ...extra,
  });
  stream.on("error", () => {});
  return stream;
}

/**
 * With `sessions` holding requests that never arrive whole on `server` (its
 * rpc.max_incoming_request_bytes 1 MiB), and `refusals` the answers they got: waits until `what`
 * holds more than `atLeast` bytes and `refused` requests were refused, then checks the budget
 * held, every refusal was CAIRN_ERR_BACKPRESSURE and counted, and a small Put still fits; closes
 * the sessions and waits until every byte is given back.
 */
async function budgetHolds(
  server: ServerProcess,
  c: Clients,
  sessions: ClientHttp2Session[],
  refusals: readonly string[],
  { what, atLeast, refused }: { what: string; atLeast: number; refused: number },
): Promise<void> {
  const held = (): Promise<number> => metricValue(server, "cairn_rpc_incoming_request_bytes");
  try {
    let last = "";
    await eventually(`${what} fill the budget`, async () => {
      const now = await held();
      last = `${now} bytes held, ${refusals.length} refused`;
      return now > atLeast && refusals.length >= refused;
    }).catch((err: unknown) => {
      throw new Error(`${(err as Error).message} (last seen: ${last}: ${refusals.join(", ")})`);
    });
    assert.ok((await held()) <= 1024 * 1024);
    assert.ok(
      refusals.every((r) => r === "8 CAIRN_ERR_BACKPRESSURE"),
      refusals.join(", "),
    );
    assert.equal(await metricValue(server, "cairn_rpc_incoming_refused_total"), refusals.length);
    // A small Put still fits beside them.
    await c.call(c.kv, "Put", { key: Buffer.from("small"), value: Buffer.from("v") });
  } finally {
    for (const s of sessions) s.destroy();
  }
  await eventually(`${what}' bytes given back`, async () => (await held()) === 0);
}

async function get(c: Clients, key: string): Promise<Buffer | null> {
  const r = (await c.call(c.kv, "Get", { key: Buffer.from(key) })) as {
    found?: boolean;
    value?: Buffer;
  };
  return r.found === true ? (r.value ?? Buffer.alloc(0)) : null;
}

function logLine(server: ServerProcess, code: string): Record<string, unknown> | undefined {
  for (const line of server.lines) {
    if (!line.includes(code)) continue;
    return JSON.parse(line) as Record<string, unknown>;
  }
  return undefined;
}

describe("connections past the node's descriptors (real process)", { timeout: 180_000 }, () => {
  const dirs: string[] = [];
  const servers: ServerProcess[] = [];
  const clients: Clients[] = [];
  after(async () => {
    for (const c of clients) c.close();
    await Promise.all(servers.map((s) => s.stop("SIGKILL")));
    await Promise.all(dirs.map((d) => rm(d, { recursive: true, force: true })));
  });

  async function start(
    args: readonly string[],
    opts: { openFileLimit?: number; env?: Record<string, string> } = {},
  ): Promise<ServerProcess> {
    const dir = await mkdtemp(join(tmpdir(), "cairn-conn-flood-"));
    dirs.push(dir);
    const server = await startServer({ dataDir: dir, args, ...opts });
    servers.push(server);
    return server;
  }

  function client(server: ServerProcess): Clients {
    const c = connect(server.rpc);
    clients.push(c);
    return c;
  }

  it("700 idle connections to a node limited to 600 files: it flushes and serves on", async () => {
    // 64 KiB memtables: the writes below flush dozens of tables, each a new file.
    const server = await start([], {
      openFileLimit: 600,
      env: { CAIRN_STORAGE_MEMTABLE_BYTES: "64KiB" },
    });
    // 600 − 512 = 88 left: 44 wanted for connections, the tables' 64 at least, 24 connections.
    const warning = logLine(server, "CAIRN_ERR_OPEN_FILE_LIMIT");
    assert.ok(warning !== undefined, "the node warns that the open-file limit is low");
    const fields = warning["fields"] as Record<string, unknown>;
    assert.equal(fields["open_file_limit"], 600);
    assert.equal(fields["connections_taken"], 24);
    assert.equal(fields["table_files"], 64);

    const c = client(server);
    await c.call(c.kv, "Put", { key: Buffer.from("warm"), value: Buffer.from("x") });
    const attack = await flood(server.rpc, 700, H2_HELLO);
    try {
      await eventually("the node refuses connections past its bound", async () => {
        return (
          (await metricValue(server, 'cairn_rpc_connections_refused_total{reason="node"}')) >= 500
        );
      });
      assert.ok((await metricValue(server, "cairn_rpc_connections")) <= 24);
      // 300 Puts of 16 KiB over 30 keys, on the connection made before the flood.
      const last = new Map<string, Buffer>();
      for (let i = 0; i < 300; i++) {
        const key = `k-${i % 30}`;
        const value = Buffer.alloc(16 * 1024, i & 255);
        await c.call(c.kv, "Put", { key: Buffer.from(key), value });
        last.set(key, value);
      }
      assert.equal(server.proc.exitCode, null, "the node still runs");
      for (const [key, value] of last) assert.deepEqual(await get(c, key), value, key);
      assert.ok(attack.closedByServer() >= 500, `closed ${attack.closedByServer()} of 700`);
      assert.ok(
        server.lines.some((l) => l.includes("CAIRN_ERR_CONNECTIONS_FULL")),
        "the refusals are logged",
      );
    } finally {
      attack.close();
    }
    // The flood gone, new clients are taken again.
    const fresh = client(server);
    await eventually("a new client is served after the flood", async () => {
      return (await get(fresh, "k-29"))?.equals(Buffer.alloc(16 * 1024, 299 & 255)) === true;
    });
    assert.ok(!server.lines.some((l) => l.includes("fatal storage")), "no fatal storage error");
  });

  it("a node limited to 600 files flushes a thousand tables and reads every key back", async () => {
    // 64 KiB memtables and 70 KB values: each Put flushes a table of its own.
    const server = await start([], {
      openFileLimit: 600,
      env: { CAIRN_STORAGE_MEMTABLE_BYTES: "64KiB" },
    });
    const c = client(server);
    const keys = 250;
    const rounds = 4;
    const valueOf = (round: number, key: number): Buffer => Buffer.alloc(70_000, round * 7 + key);
    for (let round = 0; round < rounds; round++) {
      for (let key = 0; key < keys; key++) {
        await c.call(c.kv, "Put", { key: Buffer.from(`key-${key}`), value: valueOf(round, key) });
      }
    }
    for (let key = 0; key < keys; key++) {
      assert.deepEqual(await get(c, `key-${key}`), valueOf(rounds - 1, key), `key-${key}`);
    }
    assert.equal(server.proc.exitCode, null, "the node still runs");
    assert.ok(!server.lines.some((l) => l.includes("fatal storage")), "no fatal storage error");
  });

  for (const [shape, args, env] of [
    ["the main thread", [], {}],
    ["two I/O threads", [], { CAIRN_RPC_IO_THREADS: "2" }],
    ["two shard workers", ["--shard-workers", "2"], {}],
  ] as const) {
    it(`rpc.max_connections 16 holds across ${shape}: 40 more refused, then taken again`, async () => {
      const server = await start(["--rpc-max-connections", "16", ...args], { env });
      const c = client(server);
      await c.call(c.kv, "Put", { key: Buffer.from("a"), value: Buffer.from("1") });
      const attack = await flood(server.rpc, 40, H2_HELLO);
      try {
        // The client's connection and 15 of the flood's; the other 25 closed as accepted.
        await eventually("25 connections refused", async () => {
          return (
            (await metricValue(server, 'cairn_rpc_connections_refused_total{reason="node"}')) === 25
          );
        });
        assert.equal(await metricValue(server, "cairn_rpc_connections"), 16);
        await eventually("the server closed the 25", async () => attack.closedByServer() === 25);
        // The connection made before the flood is served.
        assert.deepEqual(await get(c, "a"), Buffer.from("1"));
      } finally {
        attack.close();
      }
      await eventually("the flood's connections released", async () => {
        return (await metricValue(server, "cairn_rpc_connections")) === 1;
      });
      const fresh = client(server);
      assert.deepEqual(await get(fresh, "a"), Buffer.from("1"));
    });
  }

  it("rpc.max_connections_per_ip 8: a client past it is refused, another address is not", async () => {
    const server = await start(["--rpc-max-connections-per-ip", "8"]);
    const c = client(server);
    await c.call(c.kv, "Put", { key: Buffer.from("a"), value: Buffer.from("1") });
    const byAddress = 'cairn_rpc_connections_refused_total{reason="address"}';
    // From 127.0.0.1, as the client: 7 taken, 13 refused.
    const one = await flood(server.rpc, 20, H2_HELLO);
    // From 127.0.0.2 (loopback too): all 5 taken.
    const other = await flood(server.rpc, 5, H2_HELLO, "127.0.0.2");
    try {
      await eventually("13 refused for their address", async () => {
        return (await metricValue(server, byAddress)) === 13;
      });
      // The other address's five are connected on the client's side; the node may accept
      // them a moment later.
      await eventually("the other address's 5 taken", async () => {
        return (await metricValue(server, "cairn_rpc_connections")) === 8 + 5;
      });
      assert.equal(
        await metricValue(server, 'cairn_rpc_connections_refused_total{reason="node"}'),
        0,
      );
      await eventually("the server closed the 13", async () => one.closedByServer() === 13);
      assert.equal(other.closedByServer(), 0);
      assert.deepEqual(await get(c, "a"), Buffer.from("1"));
      assert.ok(
        server.lines.some((l) => l.includes("holds rpc.max_connections_per_ip (8)")),
        "the refusal is logged with its reason",
      );
    } finally {
      one.close();
      other.close();
    }
    await eventually("the floods' slots released", async () => {
      return (await metricValue(server, "cairn_rpc_connections")) === 1;
    });
    assert.deepEqual(await get(client(server), "a"), Buffer.from("1"));
  });

  it("with TLS, every connection closed gives its slot back (handshakes done, or refused)", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-conn-flood-certs-"));
    dirs.push(dir);
    const certs = makeCerts(dir);
    const server = await start(["--rpc-max-connections", "16"], {
      env: { CAIRN_TLS_CERT_FILE: certs.nodeCert, CAIRN_TLS_KEY_FILE: certs.nodeKey },
    });
    const port = Number(server.rpc.split(":").at(-1));
    // 40 handshakes one after another, each closed by the client (and the next one made once
    // the node has closed its side): a slot kept by any would leave fewer than 16 for the last.
    for (let i = 0; i < 40; i++) {
      await new Promise<void>((resolve, reject) => {
        const s = connectTls(
          {
            host: "127.0.0.1",
            port,
            servername: "localhost",
            ca: readFileSync(certs.ca),
            ALPNProtocols: ["h2"],
          },
          () => s.end(),
        );
        s.on("data", () => {});
        s.once("error", reject);
        s.once("close", () => resolve());
      });
    }
    // 12 cleartext HTTP/2 connections at once, which the TLS port closes itself (fewer than 16:
    // on a loaded machine all of them may be open before the first is closed).
    const cleartext = await flood(server.rpc, 12, H2_HELLO);
    await eventually("the node closed the cleartext ones", async () => {
      return cleartext.closedByServer() === 12;
    });
    await eventually("every slot given back", async () => {
      return (await metricValue(server, "cairn_rpc_connections")) === 0;
    });
    assert.equal(
      await metricValue(server, 'cairn_rpc_connections_refused_total{reason="node"}'),
      0,
    );
  });

  for (const [shape, env] of [
    ["the main thread", {}],
    ["two I/O threads", { CAIRN_RPC_IO_THREADS: "2" }],
  ] as const) {
    it(`rpc.max_client_streams 16 on ${shape}: 40 WatchCluster streams, 24 refused RESOURCE_EXHAUSTED`, async () => {
      // Unbounded, 20,000 watches (20 connections of 1000) took 440 MiB of the node.
      const server = await start(["--rpc-max-client-streams", "16"], { env });
      const sessions: ClientHttp2Session[] = [];
      const outcomes: Promise<string>[] = [];
      for (let s = 0; s < 2; s++) {
        const session = h2Session(server, sessions);
        for (let i = 0; i < 20; i++) {
          const stream = grpcStream(session, "/cairn.v1.Meta/WatchCluster");
          // "view": the stream's first message came; else its status and error code.
          outcomes.push(
            new Promise((resolve) => {
              stream.once("data", () => resolve("view"));
              stream.once("response", (h) => {
                if (h["grpc-status"] !== undefined)
                  resolve(`${String(h["grpc-status"])} ${String(h["cairn-error-code"])}`);
              });
            }),
          );
          stream.end(Buffer.alloc(5));
        }
      }
      try {
        const all = await Promise.all(outcomes);
        assert.equal(all.filter((o) => o === "view").length, 16, all.join(", "));
        assert.equal(
          all.filter((o) => o === "8 CAIRN_ERR_STREAMS_FULL").length,
          24,
          all.join(", "),
        );
        assert.equal(await metricValue(server, "cairn_rpc_client_streams"), 16);
        assert.equal(await metricValue(server, "cairn_rpc_client_streams_refused_total"), 24);
        assert.ok(
          server.lines.some((l) => l.includes("CAIRN_ERR_STREAMS_FULL")),
          "logged",
        );
      } finally {
        for (const s of sessions) s.destroy();
      }
      await eventually("the streams' slots given back", async () => {
        return (await metricValue(server, "cairn_rpc_client_streams")) === 0;
      });
      // A watch is taken again.
      const c = client(server);
      const view = await new Promise<unknown>((resolve, reject) => {
        const call = (
          c.meta as unknown as { WatchCluster(r: object): NodeJS.EventEmitter & { cancel(): void } }
        ).WatchCluster({});
        call.once("data", (v: unknown) => {
          call.cancel();
          resolve(v);
        });
        call.once("error", (err: Error) =>
          err.message.includes("Cancelled") ? undefined : reject(err),
        );
      });
      assert.ok(view !== undefined);
    });
  }

  it("rpc.max_incoming_request_bytes 1 MiB: stalled half-sent requests hold no more, one address no more than its share", async () => {
    // Unbounded, 300 connections that each announced a 4 MiB Put, sent 1 MiB and stalled took
    // 467 MiB of the node.
    const server = await start(["--rpc-max-incoming-request-bytes", "1MiB"], {
      env: { CAIRN_LIMITS_MAX_VALUE_BYTES: "256KiB", CAIRN_LIMITS_MAX_MESSAGE_BYTES: "512KiB" },
    });
    const sessions: ClientHttp2Session[] = [];
    const refusals: string[] = [];
    const messages: string[] = [];
    const stall = (localAddress: string, count: number): void => {
      for (let i = 0; i < count; i++) {
        const session = h2Session(server, sessions, localAddress);
        const stream = grpcStream(session, "/cairn.v1.KV/Put");
        stream.once("response", (h) => {
          refusals.push(`${String(h["grpc-status"])} ${String(h["cairn-error-code"])}`);
          messages.push(decodeURIComponent(String(h["grpc-message"])));
        });
        // A 500,000-byte message announced, 200,000 bytes of it sent.
        const head = Buffer.alloc(5);
        head.writeUInt32BE(500_000, 1);
        stream.write(Buffer.concat([head, Buffer.alloc(200_000, 1)]));
      }
    };
    const held = (): Promise<number> => metricValue(server, "cairn_rpc_incoming_request_bytes");
    // One address holds its share at most: 576 KiB here (a quarter of the budget is less than
    // one whole request of 512 KiB with its headers): two of its requests, the others refused.
    stall("127.0.0.1", 8);
    await eventually("one address's share taken", async () => refusals.length >= 6);
    assert.ok((await held()) <= 576 * 1024, String(await held()));
    assert.ok(
      messages.every((m) => m.includes("this client address holds 589824 bytes")),
      messages.join(" | "),
    );
    // A whole request from another address still arrives (before, the first address's stalled
    // requests held the node's whole budget, and this one was refused).
    const other = grpcStream(h2Session(server, sessions, "127.0.0.2"), "/cairn.v1.KV/Put");
    const answered = new Promise<string>((resolve) => {
      other.once("response", (h) => {
        if (h["grpc-status"] !== undefined) resolve(String(h["grpc-status"]));
      });
      other.once("trailers", (t) => resolve(String(t["grpc-status"])));
      other.resume();
    });
    other.end(grpcMessage(putRequest(Buffer.from("other"), Buffer.alloc(200_000, 3))));
    assert.equal(await answered, "0");
    // Two more addresses: now the node's budget is what stops them. One stream at a time, each
    // settled (held whole, or refused) before the next: sent together, partial requests compete
    // for the budget, and which of them it ends up holding whole (two or three) is the race's.
    // One at a time, it holds three whole requests of the four addresses' whatever the first
    // address's race left (one or two of its own: its share is 2.9 requests), and refuses 19.
    for (const address of ["127.0.0.2", "127.0.0.3"]) {
      for (let i = 0; i < 8; i++) {
        const [before, refusedBefore] = [await held(), refusals.length];
        stall(address, 1);
        await eventually(`stream ${i + 1} of ${address} held whole or refused`, async () => {
          return refusals.length > refusedBefore || (await held()) >= before + 200_000;
        });
      }
    }
    const c = client(server);
    await budgetHolds(server, c, sessions, refusals, {
      what: "the stalled requests",
      atLeast: 1024 * 1024 - 200_000,
      refused: 19,
    });
    assert.ok(messages.some((m) => m.includes("the node holds rpc.max_incoming_request_bytes")));
    await c.call(c.kv, "Put", { key: Buffer.from("big"), value: Buffer.alloc(200_000, 2) });
    assert.deepEqual(await get(c, "big"), Buffer.alloc(200_000, 2));
  });

  it("answers a request whose bytes are no message INVALID_ARGUMENT (CAIRN_ERR_INVALID_ARGUMENT), not INTERNAL", async () => {
    // INTERNAL says a server bug (docs/errors.md); a truncated field is the client's.
    const server = await start([]);
    const sessions: ClientHttp2Session[] = [];
    try {
      const stream = grpcStream(h2Session(server, sessions), "/cairn.v1.KV/Put");
      const trailers = new Promise<Record<string, unknown>>((resolve) => {
        stream.once("trailers", (t) => resolve(t));
        stream.once("response", (h) => {
          if (h["grpc-status"] !== undefined) resolve(h);
        });
      });
      stream.resume();
      // Field 1 (key), length-delimited, its length a varint cut short.
      const body = Buffer.from([0x0a, 0xff]);
      const head = Buffer.alloc(5);
      head.writeUInt32BE(body.length, 1);
      stream.end(Buffer.concat([head, body]));
      const t = await trailers;
      assert.equal(t["grpc-status"], String(status.INVALID_ARGUMENT), JSON.stringify(t));
      assert.equal(t["cairn-error-code"], "CAIRN_ERR_INVALID_ARGUMENT");
      assert.match(
        decodeURIComponent(String(t["grpc-message"])),
        /not a valid \/cairn\.v1\.KV\/Put message/,
      );
    } finally {
      for (const s of sessions) s.destroy();
    }
  });

  it("rpc.max_incoming_request_bytes 1 MiB: the header lists of requests still arriving count too", async () => {
    // Uncounted, 65,000 streams that each sent 60 KB of metadata and no body, from one address,
    // filled the node's heap in 35 s (out of memory).
    const server = await start(["--rpc-max-incoming-request-bytes", "1MiB"], {
      env: { CAIRN_LIMITS_MAX_VALUE_BYTES: "256KiB", CAIRN_LIMITS_MAX_MESSAGE_BYTES: "512KiB" },
    });
    const sessions: ClientHttp2Session[] = [];
    const refusals: string[] = [];
    const pad = { "x-pad": "p".repeat(40_000) };
    // From four addresses: one holds its share at most (576 KiB here).
    for (let i = 0; i < 4; i++) {
      const session = h2Session(server, sessions, `127.0.0.${i + 1}`);
      for (let j = 0; j < 10; j++) {
        const stream = grpcStream(session, "/cairn.v1.KV/Put", pad);
        stream.once("response", (h) => {
          refusals.push(`${String(h["grpc-status"])} ${String(h["cairn-error-code"])}`);
        });
      }
    }
    // 40 × 40 KB: about 1.6 MB of header lists; a quarter or more past the budget.
    await budgetHolds(server, client(server), sessions, refusals, {
      what: "the header lists",
      atLeast: 1024 * 1024 - 41_000,
      refused: 10,
    });
  });

  for (const [shape, env] of [
    ["the main thread", {}],
    ["two I/O threads", { CAIRN_RPC_IO_THREADS: "2" }],
  ] as const) {
    it(`rpc.request_receive_timeout_ms 1 s on ${shape}: half-sent requests (and a watch's) are answered unrun; a started watch is not cut`, async () => {
      // Before the timeout, a request that never arrived whole held its stream and its bytes
      // for as long as its connection lived (an open stream keeps a connection from idling).
      const server = await start(["--rpc-request-receive-timeout-ms", "1000"], { env });
      const sessions: ClientHttp2Session[] = [];
      const session = h2Session(server, sessions);
      const c = client(server);
      await c.call(c.kv, "Put", { key: Buffer.from("before"), value: Buffer.from("1") });
      // A watch: a streaming call, which lasts longer than the timeout.
      const watch = grpcStream(session, "/cairn.v1.Meta/WatchCluster");
      let watchEnded = false;
      watch.once("close", () => (watchEnded = true));
      const viewed = new Promise<void>((resolve) => watch.once("data", () => resolve()));
      watch.end(Buffer.alloc(5));
      await viewed;

      const started = performance.now();
      const answered = (stream: ClientHttp2Stream): Promise<{ outcome: string; ms: number }> =>
        new Promise((resolve) => {
          stream.once("response", (h) => {
            resolve({
              outcome: `${String(h["grpc-status"])} ${String(h["cairn-error-code"])}`,
              ms: performance.now() - started,
            });
          });
          stream.once("close", () => resolve({ outcome: "closed", ms: -1 }));
          // Unanswered (the node before the timeout), the test fails now, not at its own timeout.
          setTimeout(() => resolve({ outcome: "unanswered after 15 s", ms: -1 }), 15_000).unref();
        });
      // Headers and nothing more.
      const silent = grpcStream(session, "/cairn.v1.KV/Put");
      // A 500-byte message announced, 100 bytes of it sent.
      const stalled = grpcStream(session, "/cairn.v1.KV/Put");
      const head = Buffer.alloc(5);
      head.writeUInt32BE(500, 1);
      stalled.write(Buffer.concat([head, Buffer.alloc(100, 1)]));
      // The same, sent on a byte at a time every 50 ms: it progresses, but not to the end in time.
      const trickle = grpcStream(session, "/cairn.v1.KV/Put");
      trickle.write(head);
      // A watch whose one request is sent but never ended: it never starts, and would hold a
      // slot of rpc.max_client_streams for nothing.
      const unstarted = grpcStream(session, "/cairn.v1.Meta/WatchCluster");
      unstarted.write(Buffer.alloc(5));
      const outcomes = [
        answered(silent),
        answered(stalled),
        answered(trickle),
        answered(unstarted),
      ];
      let trickling = true;
      void outcomes[2]?.then(() => (trickling = false));
      for (let i = 0; i < 400 && trickling; i++) {
        trickle.write(Buffer.alloc(1, 2));
        await new Promise((resolve) => setTimeout(resolve, 50));
      }
      try {
        const all = await Promise.all(outcomes);
        for (const { outcome, ms } of all) {
          assert.equal(outcome, "8 CAIRN_ERR_REQUEST_TOO_SLOW", JSON.stringify(all));
          // Cut between the timeout and 1.5 times it (a sweep every quarter), with room for a
          // loaded box.
          assert.ok(ms >= 1000 && ms < 10_000, `answered after ${ms} ms`);
        }
        assert.equal(await metricValue(server, "cairn_rpc_requests_too_slow_total"), 4);
        assert.equal(await metricValue(server, "cairn_rpc_incoming_request_bytes"), 0);
        assert.equal(await metricValue(server, "cairn_rpc_client_streams"), 1, "the watch's");
        assert.ok(logLine(server, "CAIRN_ERR_REQUEST_TOO_SLOW") !== undefined, "logged");
        assert.ok(!watchEnded, "the watch is still open");
        // The connection serves on: a whole Put on the same session.
        const put = grpcStream(session, "/cairn.v1.KV/Put");
        const whole = new Promise<string>((resolve) => {
          put.on("data", () => {});
          put.once("trailers", (t) => resolve(String(t["grpc-status"])));
          put.once("close", () => resolve("closed"));
        });
        put.end(grpcMessage(putRequest(Buffer.from("k"), Buffer.from("v"))));
        assert.equal(await whole, "0");
        assert.deepEqual(await get(c, "k"), Buffer.from("v"));
        assert.deepEqual(await get(c, "before"), Buffer.from("1"));
      } finally {
        for (const s of sessions) s.destroy();
      }
    });
  }

  it("the operators' HTTP server holds at most 128 connections; gRPC is not affected", async () => {
    const server = await start([]);
    const c = client(server);
    await c.call(c.kv, "Put", { key: Buffer.from("a"), value: Buffer.from("1") });
    const attack = await flood(server.http, 200, null);
    try {
      await eventually("72 connections closed", async () => attack.closedByServer() >= 72);
      assert.deepEqual(await get(c, "a"), Buffer.from("1"));
    } finally {
      attack.close();
    }
    await eventually("GET /health/quick answers after the flood", async () => {
      const r = await fetch(`http://${server.http}/health/quick`);
      await r.arrayBuffer();
      return r.ok;
    });
  });
});
