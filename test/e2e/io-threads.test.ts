/**
 * The gRPC I/O threads (rpc.io_threads, src/api/io-threads.ts), against the real server process:
 * several threads share rpc_addr and every call, unary or streaming, reaches the main thread's
 * handlers whatever thread took its connection. kv.test.ts runs the KV suite with 0 and 1.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  Client,
  credentials,
  loadPackageDefinition,
  Metadata,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";
import { type Clients, connect, type Reply } from "../support/grpc-client.ts";
import { freePort } from "../support/cluster-process.ts";
import { ROOT, startServer } from "../support/server-process.ts";

const b = (s: string): Buffer => Buffer.from(s);

function firstView(c: Clients): Promise<Reply> {
  const stream = (
    c.meta as unknown as {
      WatchCluster: (r: Reply, o: { deadline: number }) => NodeJS.EventEmitter & { cancel(): void };
    }
  ).WatchCluster({}, { deadline: Date.now() + 10_000 });
  return new Promise<Reply>((resolve, reject) => {
    stream.once("data", (view: Reply) => {
      stream.on("error", () => {}); // the cancellation ends the stream with CANCELLED
      stream.cancel();
      resolve(view);
    });
    stream.once("error", reject);
  });
}

async function putCount(http: string): Promise<number> {
  const text = await (await fetch(`http://${http}/metrics`)).text();
  const line = text
    .split("\n")
    .find((l) => l.startsWith('kv_requests_total{operation="put",status="success"}'));
  return line === undefined ? 0 : Number(line.split(" ")[1]);
}

describe("gRPC I/O threads (real server process)", () => {
  it("several threads share rpc_addr: calls on many connections all reach the node", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-io-"));
    const server = await startServer({
      dataDir: dir,
      env: { CAIRN_RPC_IO_THREADS: "3", CAIRN_SHUTDOWN_DRAIN_TIMEOUT_MS: "30000" },
    });
    // One connection each: the kernel spreads them over the threads' listeners.
    const clients = Array.from({ length: 8 }, () => connect(server.rpc));
    try {
      await Promise.all(
        clients.map(async (c, i) => {
          for (let j = 0; j < 10; j++) {
            await c.call(c.kv, "Put", { key: b(`k-${i}-${j}`), value: b(`v-${i}-${j}`) });
          }
        }),
      );
      for (const [i, c] of clients.entries()) {
        const got = await c.callWithTrailer(c.kv, "Get", { key: b(`k-${i}-9`) });
        assert.equal((got.reply["value"] as Buffer).toString(), `v-${i}-9`);
        // The trailer naming the node crossed from the main thread to the connection's thread.
        assert.deepEqual(got.trailer.get("cairn-served-by"), ["n1"]);
        const view = await firstView(c);
        assert.equal(view["total_shards"], 1024);
      }
      const [first] = clients as [Clients];
      const scan = await first.call(first.kv, "Scan", { prefix: b("k-") });
      assert.equal((scan["items"] as Reply[]).length, 80);
      // The main thread ran every handler: its metrics count every Put.
      assert.equal(await putCount(server.http), 80);
    } finally {
      for (const c of clients) c.close();
      // Nothing is in flight: the threads stop at once, not at the drain deadline (seen failing:
      // a connection whose client had already sent GOAWAY held the shutdown for the deadline).
      const stopping = Date.now();
      const exit = await server.stop("SIGTERM");
      const tookMs = Date.now() - stopping;
      await rm(dir, { recursive: true, force: true });
      assert.deepEqual(exit, { code: 0, signal: null });
      assert.ok(tookMs < 15_000, `the shutdown took ${tookMs} ms of its 30 s drain deadline`);
    }
  });

  it("proxies a bidirectional stream: server reflection lists the services", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-io-bidi-"));
    const server = await startServer({ dataDir: dir, env: { CAIRN_RPC_IO_THREADS: "1" } });
    const protoFile = join(
      ROOT,
      "node_modules/@grpc/reflection/build/proto/grpc/reflection/v1/reflection.proto",
    );
    const pkg = loadPackageDefinition(loadSync(protoFile, { keepCase: true })) as unknown as {
      grpc: { reflection: { v1: { ServerReflection: new (a: string, c: unknown) => Client } } };
    };
    const client = new pkg.grpc.reflection.v1.ServerReflection(
      server.rpc,
      credentials.createInsecure(),
    );
    try {
      const stream = (
        client as unknown as {
          ServerReflectionInfo: () => NodeJS.EventEmitter & {
            write(r: Reply): void;
            end(): void;
          };
        }
      ).ServerReflectionInfo();
      const replies: Reply[] = [];
      const ended = new Promise<void>((resolve, reject) => {
        stream.on("data", (r: Reply) => replies.push(r));
        stream.on("end", resolve);
        stream.on("error", reject);
      });
      stream.write({ list_services: "" });
      stream.write({ list_services: "" });
      stream.end();
      await ended;
      assert.equal(replies.length, 2, "one answer per request, in both directions");
      const names = ((replies[0]?.["list_services_response"] as Reply)["service"] as Reply[]).map(
        (s) => s["name"],
      );
      assert.ok(names.includes("cairn.v1.KV"), `services: ${names.join(", ")}`);
    } finally {
      client.close();
      const exit = await server.stop("SIGTERM");
      await rm(dir, { recursive: true, force: true });
      assert.deepEqual(exit, { code: 0, signal: null });
    }
  });

  it("streams reach the main thread even when the environment names a gRPC proxy", async () => {
    // grpc-js follows grpc_proxy for its client channels; the threads' loopback hop to the main
    // thread must not (seen failing: WatchCluster and the peers' streams went to the proxy).
    const dead = await freePort();
    const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-io-proxy-"));
    const server = await startServer({
      dataDir: dir,
      env: { grpc_proxy: `http://127.0.0.1:${dead}`, CAIRN_RPC_IO_THREADS: "1" },
    });
    const c = connect(server.rpc);
    try {
      await c.call(c.kv, "Put", { key: b("through"), value: b("proxy-free") });
      const view = await firstView(c);
      assert.deepEqual(
        (view["nodes"] as Reply[]).map((n) => n["rpc_addr"]),
        [server.rpc],
      );
    } finally {
      c.close();
      const exit = await server.stop("SIGTERM");
      await rm(dir, { recursive: true, force: true });
      assert.deepEqual(exit, { code: 0, signal: null });
    }
  });

  it("answers protocol errors as gRPC statuses and takes compressed requests", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-io-wire-"));
    const server = await startServer({
      dataDir: dir,
      env: {
        CAIRN_RPC_IO_THREADS: "1",
        CAIRN_LIMITS_MAX_VALUE_BYTES: "16KiB",
        CAIRN_LIMITS_MAX_MESSAGE_BYTES: "64KiB",
      },
    });
    const raw = new Client(server.rpc, credentials.createInsecure());
    const call = (path: string, body: Buffer): Promise<Buffer> =>
      new Promise((resolve, reject) => {
        raw.makeUnaryRequest(
          path,
          (b: Buffer) => b,
          (b: Buffer) => b,
          body,
          new Metadata(),
          { deadline: Date.now() + 10_000 },
          (err: ServiceError | null, res?: Buffer) =>
            err === null ? resolve(res as Buffer) : reject(err),
        );
      });
    // A PutRequest by hand: key (field 1) and value (field 2), both bytes.
    const put = (key: string, value: Buffer): Buffer =>
      Buffer.concat([
        Buffer.from([0x0a, key.length]),
        b(key),
        Buffer.from([0x12]),
        varint(value.length),
        value,
      ]);
    const zipped = connect(server.rpc, { "grpc.default_compression_algorithm": 2 });
    try {
      const missing = (await call("/cairn.v1.KV/Nope", Buffer.alloc(0)).catch(
        (e: unknown) => e,
      )) as ServiceError;
      assert.equal(missing.code, status.UNIMPLEMENTED);
      const big = (await call("/cairn.v1.KV/Put", put("big", Buffer.alloc(100_000))).catch(
        (e: unknown) => e,
      )) as ServiceError;
      // A request past the configured limits.max_message_bytes: INVALID_ARGUMENT naming it.
      assert.equal(big.code, status.INVALID_ARGUMENT);
      assert.match(big.details, /the limit is 65536 bytes \(limits\.max_message_bytes\)/);
      assert.ok((await call("/cairn.v1.KV/Put", put("small", b("v")))).length > 0);
      // A client that compresses its requests (gzip).
      await zipped.call(zipped.kv, "Put", { key: b("zipped"), value: Buffer.alloc(1000, 7) });
      const got = await zipped.call(zipped.kv, "Get", { key: b("zipped") });
      assert.equal((got["value"] as Buffer).length, 1000);
    } finally {
      raw.close();
      zipped.close();
      const exit = await server.stop("SIGTERM");
      await rm(dir, { recursive: true, force: true });
      assert.deepEqual(exit, { code: 0, signal: null });
    }
  });
});

function varint(n: number): Buffer {
  const out: number[] = [];
  while (n > 0x7f) {
    out.push((n & 0x7f) | 0x80);
    n >>>= 7;
  }
  out.push(n);
  return Buffer.from(out);
}
