/**
 * The chaos harness's client of a node process (cluster.ts, nodeClient): the client made for a
 * node's next start reaches it at once, whatever the client of its last start left behind.
 *
 * The trap it avoids (chaos seed 101): a grpc-js channel closed in the same turn of the event
 * loop as its first call leaks a subchannel that retries the address for good, its backoff
 * growing (to 120 s) while nothing listens there; in grpc-js's global subchannel pool the next
 * channel to that address takes it over mid-backoff, and fails every call at once until the
 * backoff ends. Here the node is a grpc-js server answering KV.Get, the dead node a listener
 * that drops every connection.
 */
import assert from "node:assert/strict";
import { createServer, type Socket } from "node:net";
import { describe, it } from "node:test";
import { Server, ServerCredentials } from "@grpc/grpc-js";
import { freePort } from "../support/cluster-process.ts";
import { bytesMethod } from "../support/grpc-client.ts";
import { nodeClient } from "./cluster.ts";

/** A node that answers KV.Get with an empty GetResponse (key not found). */
async function serveKv(address: string): Promise<Server> {
  const get = bytesMethod("cairn.v1.KV", "Get", false);
  const server = new Server();
  server.addService(
    { Get: get },
    {
      Get: (_call: unknown, done: (err: null, res: Buffer) => void) => done(null, Buffer.alloc(0)),
    },
  );
  await new Promise<void>((resolve, reject) =>
    server.bindAsync(address, ServerCredentials.createInsecure(), (err) =>
      err === null ? resolve() : reject(err),
    ),
  );
  return server;
}

describe("chaos cluster: a node's client", () => {
  it("reaches the node's next start at once after the last start's client leaked a subchannel", async () => {
    const port = await freePort();
    const address = `127.0.0.1:${port}`;
    // The node is down: whatever connects is dropped, and each connection is counted.
    let attempts = 0;
    const sockets = new Set<Socket>();
    const down = createServer((s) => {
      attempts++;
      sockets.add(s);
      s.destroy();
    });
    await new Promise<void>((resolve) => down.listen(port, "127.0.0.1", resolve));

    // The last start's client: its first call and its close in one turn (a kill queued behind
    // the start, while a poll already called through it).
    const old = nodeClient(address);
    const first = old.call(old.kv, "Get", { key: Buffer.from("k") }, 30_000).then(
      () => "answered",
      (err: unknown) => String(err),
    );
    old.close();
    assert.match(await first, /closed/i);

    // The leaked subchannel retries; after four failed attempts its backoff (grpc-js's
    // default: 1 s, 1.6 s, 2.6 s, 4.1 s) would hold a channel sharing it for seconds.
    const deadline = performance.now() + 30_000;
    while (attempts < 4 && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.ok(attempts >= 4, `the leaked subchannel retried ${attempts} times in 30 s`);
    await new Promise<void>((resolve) => {
      for (const s of sockets) s.destroy();
      down.close(() => resolve());
    });

    // The node's next start, and its new client: the first call is answered.
    const server = await serveKv(address);
    const client = nodeClient(address);
    try {
      const res = await client.call(client.kv, "Get", { key: Buffer.from("k") }, 3_000);
      assert.equal(res["found"], false);
    } finally {
      client.close();
      server.forceShutdown();
    }
  });
});
