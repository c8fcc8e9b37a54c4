/**
 * Connections aimed at one shard worker (src/api/worker-tunnel.ts): two front ends share one
 * port (SO_REUSEPORT), as two shard workers do, here in one thread; the kernel picks which one
 * accepts each connection, and a connection's calls must reach the worker its CONNECT named.
 * Real sockets, the real descriptor hand-over (the native addon's dupFd).
 */
import assert from "node:assert/strict";
import { connect } from "node:net";
import { after, before, describe, it } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { type CallResult, GrpcChannel } from "../../src/api/grpc-channel.ts";
import type { WorkerTunnels } from "../../src/api/front-end.ts";
import { SHARD_WORKER_KEY } from "../../src/api/wire.ts";
import { IoThreads, MethodTable } from "../../src/api/io-threads.ts";
import { readTunnelRequest, workerAuthority } from "../../src/api/worker-tunnel.ts";
import { dupFd } from "../../src/common/index.ts";
import { bytesMethod } from "../support/grpc-client.ts";
import { deadlineClock } from "../../src/common/deadline-clock.ts";

const id = (b: Buffer): Buffer => b;
const method = (name: string, requestStream: boolean): grpc.MethodDefinition<Buffer, Buffer> =>
  bytesMethod("test.Worker", name, requestStream);
const SERVICE: grpc.ServiceDefinition = {
  Whoami: method("Whoami", false),
  Count: method("Count", true),
  Raw: method("Raw", true),
};

/** One "worker": its front end on the shared port, its own grpc-js server for streams. */
interface TestWorker {
  readonly threads: IoThreads;
  readonly server: grpc.Server;
  readonly internal: string;
  /** How many connections this worker's front end adopted from the other. */
  adopted: number;
}

/** A Raw stream of three messages on `channel`. */
function rawCall(channel: GrpcChannel): Promise<CallResult> {
  return new Promise((resolve) => {
    const call = channel.clientStream("/test.Worker/Raw", { deadline: deadlineClock() + 5000 });
    call.onEnd = resolve;
    for (let i = 0; i < 3; i++) call.write(Buffer.from("x"));
    call.end();
  });
}

describe("worker tunnels", () => {
  const workers: TestWorker[] = [];
  let port = 0;

  before(async () => {
    for (let index = 0; index < 2; index++) {
      const server = new grpc.Server();
      const implementation = {
        Whoami: (
          call: grpc.ServerUnaryCall<Buffer, Buffer>,
          cb: grpc.sendUnaryData<Buffer>,
        ): void => cb(null, Buffer.from(`worker ${index}: ${call.request.toString()}`)),
        Count: (
          call: grpc.ServerReadableStream<Buffer, Buffer>,
          cb: grpc.sendUnaryData<Buffer>,
        ) => {
          let n = 0;
          call.on("data", () => n++);
          call.on("end", () => cb(null, Buffer.from(`worker ${index} counted ${n}`)));
        },
        Raw: (_call: grpc.ServerReadableStream<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) =>
          cb(null, Buffer.from("not served raw")),
      };
      server.addService(SERVICE, implementation);
      const internalPort = await new Promise<number>((resolve, reject) =>
        server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) =>
          err === null ? resolve(p) : reject(err),
        ),
      );
      const table = new MethodTable();
      table.add(SERVICE, implementation);
      // Served in the front end, as the peers' Raft streams are.
      table.addRawStream("/test.Worker/Raw", (call) => {
        let n = 0;
        return {
          message: () => n++,
          end: () => call.finish(0, "OK", Buffer.from(`worker ${index} took ${n} raw`)),
          cancelled: () => undefined,
        };
      });
      const tunnels: WorkerTunnels = {
        index,
        count: 2,
        handOff: (to, fd, rest) => {
          const target = workers[to] as TestWorker;
          target.adopted++;
          target.threads.adopt(fd, rest);
        },
        streamAddress: (i) => (workers[i] as TestWorker).internal,
        peerService: "/test.Worker/Raw",
      };
      const threads = new IoThreads({
        count: 0,
        host: "127.0.0.1",
        port,
        ...(index > 0 ? { joinsPort: true } : {}),
        mainAddress: `127.0.0.1:${internalPort}`,
        internalKey: "test",
        table,
        serverOptions: {},
        onFailure: (err) => assert.fail(err),
        tunnels,
      });
      port = await threads.start();
      workers.push({ threads, server, internal: `127.0.0.1:${internalPort}`, adopted: 0 });
    }
  });

  after(async () => {
    for (const w of workers) {
      await w.threads.close(1000);
      w.server.forceShutdown();
    }
  });

  it("reads CONNECT requests: the worker, HTTP/2, partial and refused ones", () => {
    assert.deepEqual(readTunnelRequest(Buffer.from("PRI * HTTP/2.0\r\n")), { kind: "http2" });
    assert.deepEqual(readTunnelRequest(Buffer.from("CONNECT cairn-shard")), { kind: "partial" });
    assert.deepEqual(
      readTunnelRequest(
        Buffer.from(`CONNECT ${workerAuthority(7, 8)} HTTP/1.1\r\nHost: x\r\n\r\nPRI`),
      ),
      { kind: "worker", index: 7, count: 8, rest: 3 },
    );
    const refused = (head: string): string => {
      const r = readTunnelRequest(Buffer.from(head));
      assert.equal(r.kind, "refused");
      return r.kind === "refused" ? r.answer : "";
    };
    assert.match(refused("CONNECT example.com:443 HTTP/1.1\r\n\r\n"), /^HTTP\/1\.1 404 /);
    assert.match(refused("CONNECTED\r\n\r\n"), /^HTTP\/1\.1 400 /);
    assert.match(refused(`C${"x".repeat(2000)}`), /^HTTP\/1\.1 400 /);
    assert.match(
      refused(`CONNECT ${workerAuthority(3, 3)} HTTP/1.1\r\n\r\n`),
      /^HTTP\/1\.1 400 there is no shard worker 3 of 3\r\n/,
    );
  });

  it("a connection's calls reach the worker it named, whichever worker accepted it", async (t) => {
    if (dupFd === undefined) return t.skip("the native addon is not built");
    // Each channel opens its own connection; with 2 workers about half land on the other one.
    for (let round = 0; round < 24; round++) {
      const want = round % 2;
      const channel = new GrpcChannel(`127.0.0.1:${port}`, {
        maxMessageBytes: 1 << 20,
        shardWorker: { index: want, count: 2 },
      });
      for (let call = 0; call < 3; call++) {
        const result = await channel.unary("/test.Worker/Whoami", Buffer.from(`${call}`), {
          deadline: deadlineClock() + 5000,
        });
        assert.equal(result.code, grpc.status.OK, result.details);
        assert.equal(result.message?.toString(), `worker ${want}: ${call}`);
      }
      // A stream served in the front end itself, on the worker the connection named.
      const raw = await rawCall(channel);
      assert.equal(raw.code, grpc.status.OK, raw.details);
      assert.equal(raw.message?.toString(), `worker ${want} took 3 raw`);
      channel.destroy();
    }
    const adopted = workers.map((w) => w.adopted);
    assert.ok(
      adopted.every((n) => n > 0),
      `connections handed over: ${adopted.join(", ")}`,
    );
  });

  it("without a tunnel, a connection is served where it landed", async () => {
    const seen = new Set<string>();
    for (let round = 0; round < 24 && seen.size < 2; round++) {
      const channel = new GrpcChannel(`127.0.0.1:${port}`, { maxMessageBytes: 1 << 20 });
      const result = await channel.unary("/test.Worker/Whoami", Buffer.from("x"), {
        deadline: deadlineClock() + 5000,
      });
      assert.equal(result.code, grpc.status.OK, result.details);
      seen.add(result.message?.toString() ?? "");
      channel.destroy();
    }
    assert.deepEqual([...seen].sort(), ["worker 0: x", "worker 1: x"]);
  });

  it("a caller with another number of workers: the connection fails before any call is sent", async () => {
    const channel = new GrpcChannel(`127.0.0.1:${port}`, {
      maxMessageBytes: 1 << 20,
      shardWorker: { index: 1, count: 3 },
    });
    const result = await channel.unary("/test.Worker/Whoami", Buffer.from("x"), {
      deadline: deadlineClock() + 5000,
    });
    assert.equal(result.code, grpc.status.UNAVAILABLE);
    assert.equal(result.sent, false);
    assert.match(
      result.details,
      /refused the tunnel: HTTP\/1\.1 421 this node runs 2 shard workers and the caller 3: every member of a cluster must run the same shard_workers/,
    );
    channel.destroy();
  });

  it("a stream served in the front end is refused on a connection that named no worker", async () => {
    const channel = new GrpcChannel(`127.0.0.1:${port}`, { maxMessageBytes: 1 << 20 });
    const raw = await rawCall(channel);
    assert.equal(raw.code, grpc.status.FAILED_PRECONDITION);
    assert.match(raw.details, /this node runs 2 shard workers: a peer's calls must name one/);
    channel.destroy();
  });

  it("a CONNECT for another host, or a malformed one, is refused and closed", async () => {
    const exchange = (request: string): Promise<string> =>
      new Promise((resolve, reject) => {
        const socket = connect({ host: "127.0.0.1", port });
        let answer = "";
        socket.on("data", (d) => (answer += d.toString("latin1")));
        socket.on("end", () => resolve(answer));
        socket.on("error", reject);
        socket.write(request);
      });
    assert.match(await exchange("CONNECT\r\n\r\n"), /^HTTP\/1\.1 400 not a CONNECT request\r\n/);
    assert.match(await exchange("CONNECT example.com:80 HTTP/1.1\r\n\r\n"), /^HTTP\/1\.1 404 /);
  });

  it("a streaming call naming a worker in its metadata is served by that worker", async () => {
    for (const want of [0, 1, 0, 1]) {
      const client = new grpc.Client(`127.0.0.1:${port}`, grpc.credentials.createInsecure());
      const metadata = new grpc.Metadata();
      metadata.set(SHARD_WORKER_KEY, String(want));
      const answer = await new Promise<string>((resolve, reject) => {
        const call = client.makeClientStreamRequest<Buffer, Buffer>(
          "/test.Worker/Count",
          id,
          id,
          metadata,
          (err, value) => (err === null ? resolve(value?.toString() ?? "") : reject(err)),
        );
        for (let i = 0; i < 5; i++) call.write(Buffer.from("x"));
        call.end();
      });
      assert.equal(answer, `worker ${want} counted 5`);
      client.close();
    }
  });
});
