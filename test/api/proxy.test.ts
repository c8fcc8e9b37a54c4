/**
 * HTTP CONNECT proxies for the node's gRPC client (src/api/proxy.ts): the environment read as
 * grpc-js reads it, and GrpcChannel's calls through a real proxy on 127.0.0.1 (the chaos
 * harness's fault-injecting network is one).
 */
import assert from "node:assert/strict";
import { createServer, connect, type Server, type Socket } from "node:net";
import { after, before, describe, it } from "node:test";
import * as grpc from "@grpc/grpc-js";
import { GrpcChannel } from "../../src/api/grpc-channel.ts";
import { proxyFor } from "../../src/api/proxy.ts";
import { deadlineClock } from "../../src/common/deadline-clock.ts";

describe("HTTP CONNECT proxies (environment)", () => {
  it("takes grpc_proxy, then https_proxy, then http_proxy; http URLs only, port 80 by default", () => {
    assert.deepEqual(
      proxyFor("10.0.0.1", { grpc_proxy: "http://p:3128", http_proxy: "http://q" }),
      {
        host: "p",
        port: 3128,
        credentials: null,
      },
    );
    assert.deepEqual(proxyFor("10.0.0.1", { https_proxy: "http://q", http_proxy: "http://r:1" }), {
      host: "q",
      port: 80,
      credentials: null,
    });
    assert.equal(proxyFor("10.0.0.1", { http_proxy: "https://secure:443" }), null);
    assert.equal(proxyFor("10.0.0.1", { grpc_proxy: "not a url" }), null);
    assert.equal(proxyFor("10.0.0.1", {}), null);
    assert.equal(
      proxyFor("10.0.0.1", { grpc_proxy: "http://u%40x:p%3A@p:1" })?.credentials,
      "u@x:p:",
    );
  });

  it("bypasses no_grpc_proxy (else no_proxy): IPv4 ranges and host suffixes", () => {
    const env = { grpc_proxy: "http://p:1", no_grpc_proxy: "10.1.0.0/16,.internal", no_proxy: "*" };
    assert.equal(proxyFor("10.1.2.3", env), null);
    assert.notEqual(proxyFor("10.2.2.3", env), null);
    assert.equal(proxyFor("db.internal", env), null);
    assert.notEqual(proxyFor("db.external", env), null);
    assert.equal(proxyFor("10.2.2.3", { grpc_proxy: "http://p:1", no_proxy: "10.2.2.3" }), null);
    assert.equal(proxyFor("10.9.9.9", { grpc_proxy: "http://p:1", no_proxy: "0.0.0.0/0" }), null);
    // A range without its length (or with a blank one) is no range, as grpc-js reads it: not /0.
    for (const range of ["10.0.0.0/", "10.0.0.0/ ", "10.0.0.0/0x8"])
      assert.notEqual(proxyFor("192.0.2.7", { grpc_proxy: "http://p:1", no_proxy: range }), null);
  });
});

/** A CONNECT proxy that relays to the target, or answers `refuse` when set; counts tunnels. */
async function startProxy(): Promise<{
  port: number;
  tunnels: string[];
  refuse: string | null;
  close(): void;
}> {
  const sockets = new Set<Socket>();
  const state = {
    port: 0,
    tunnels: [] as string[],
    refuse: null as string | null,
    close: () => {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
  const server: Server = createServer((client) => {
    sockets.add(client);
    let head = Buffer.alloc(0);
    const onData = (chunk: Buffer): void => {
      head = Buffer.concat([head, chunk]);
      const end = head.indexOf("\r\n\r\n");
      if (end < 0) return;
      client.off("data", onData);
      const [method, target] = head.subarray(0, head.indexOf("\r\n")).toString().split(" ");
      if (method !== "CONNECT" || target === undefined || state.refuse !== null) {
        client.end(`HTTP/1.1 ${state.refuse ?? "400 Bad Request"}\r\n\r\n`);
        return;
      }
      state.tunnels.push(target);
      const colon = target.lastIndexOf(":");
      const upstream = connect({
        host: target.slice(0, colon),
        port: Number(target.slice(colon + 1)),
      });
      sockets.add(upstream);
      upstream.once("connect", () => {
        // The answer and the first tunnelled bytes leave together, as a proxy may send them.
        client.write("HTTP/1.1 200 Connection established\r\n\r\n");
        const rest = head.subarray(end + 4);
        if (rest.length > 0) upstream.write(rest);
        client.pipe(upstream).pipe(client);
      });
      upstream.on("error", () => client.destroy());
      client.on("error", () => upstream.destroy());
    };
    client.on("data", onData);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  state.port = address.port;
  return state;
}

describe("GrpcChannel through an HTTP CONNECT proxy", () => {
  const echo: grpc.MethodDefinition<Buffer, Buffer> = {
    path: "/test.Peer/Echo",
    requestStream: false,
    responseStream: false,
    requestSerialize: (b) => b,
    requestDeserialize: (b) => b,
    responseSerialize: (b) => b,
    responseDeserialize: (b) => b,
  };
  let server: grpc.Server;
  let port = 0;
  before(async () => {
    server = new grpc.Server();
    server.addService(
      { Echo: echo },
      {
        Echo: (call: grpc.ServerUnaryCall<Buffer, Buffer>, cb: grpc.sendUnaryData<Buffer>) =>
          cb(null, call.request),
      },
    );
    port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", grpc.ServerCredentials.createInsecure(), (err, p) =>
        err === null ? resolve(p) : reject(err),
      ),
    );
  });
  after(() => server.forceShutdown());

  /** A channel made while `grpc_proxy` names the proxy (read when the channel is made). */
  function channelVia(proxyPort: number): GrpcChannel {
    const saved = process.env["grpc_proxy"];
    process.env["grpc_proxy"] = `http://127.0.0.1:${proxyPort}`;
    try {
      return new GrpcChannel(`127.0.0.1:${port}`, {
        maxMessageBytes: 1 << 20,
        reconnectBackoffMs: 10,
      });
    } finally {
      if (saved === undefined) delete process.env["grpc_proxy"];
      else process.env["grpc_proxy"] = saved;
    }
  }

  it("tunnels every call through the proxy", async () => {
    const proxy = await startProxy();
    const ch = channelVia(proxy.port);
    try {
      const results = await Promise.all(
        Array.from({ length: 50 }, (_, i) =>
          ch.unary("/test.Peer/Echo", Buffer.from(`m${i}`), { deadline: deadlineClock() + 5000 }),
        ),
      );
      results.forEach((r, i) => {
        assert.equal(r.code, grpc.status.OK, r.details);
        assert.equal(String(r.message), `m${i}`);
      });
      assert.deepEqual(proxy.tunnels, [`127.0.0.1:${port}`], "one tunnel, to the target");
    } finally {
      ch.destroy();
      proxy.close();
    }
  });

  it("a proxy that refuses the tunnel fails the call UNAVAILABLE, not sent", async () => {
    const proxy = await startProxy();
    proxy.refuse = "403 Forbidden";
    const ch = channelVia(proxy.port);
    try {
      const r = await ch.unary("/test.Peer/Echo", Buffer.from("x"), {
        deadline: deadlineClock() + 5000,
      });
      assert.equal(r.code, grpc.status.UNAVAILABLE);
      assert.equal(r.sent, false);
      assert.match(r.details, /403 Forbidden/);
    } finally {
      ch.destroy();
      proxy.close();
    }
  });
});
