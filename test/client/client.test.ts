/** CairnClient against a real `cairn serve` process: the API, routing by the cluster view, restarts. */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import {
  CairnClient,
  InvalidRequestError,
  UnavailableError,
  VersionConflictError,
} from "../../src/client/index.ts";
import { shardForKey } from "../../src/cluster/index.ts";
import { type ServerProcess, startServer } from "../support/server-process.ts";

let dir: string;
let server: ServerProcess;

before(async () => {
  dir = mkdtempSync(join(tmpdir(), "cairn-client-"));
  server = await startServer({ dataDir: dir });
});

after(async () => {
  await server.stop();
  rmSync(dir, { recursive: true, force: true });
});

describe("CairnClient", () => {
  it("puts, gets, deletes and compares-and-sets", async () => {
    const c = new CairnClient({ endpoints: [server.rpc] });
    try {
      const v1 = await c.put("user/1", "alice");
      assert.ok(v1.index > 0);
      const got = await c.get("user/1");
      assert.ok(got !== null);
      assert.equal(got.text(), "alice");
      assert.ok(got.value instanceof Uint8Array);
      assert.deepEqual(got.version, v1);
      assert.equal(await c.getString("user/1", { consistency: "serializable" }), "alice");
      assert.equal(await c.get("missing"), null);

      const v2 = await c.put("user/1", "bob", { expectedVersion: v1 });
      assert.ok(v2.index > v1.index);
      const err = await c.put("user/1", "carol", { expectedVersion: v1 }).then(
        () => null,
        (e: unknown) => e,
      );
      assert.ok(err instanceof VersionConflictError);
      assert.deepEqual(err.current, v2);

      assert.equal((await c.delete("user/1")).deleted, true);
      assert.equal((await c.delete("user/1")).deleted, false);
      assert.equal(await c.get("user/1"), null);
    } finally {
      c.close();
    }
  });

  it("refuses an expected version that is no version (NaN, 2^64, a fraction) before sending it", async () => {
    // protobufjs writes a uint64 from any number, modulo 2^64 and truncated: NaN and 2^64 went
    // out as 0/0 ("the key must not exist"), so a compare-and-set with a version computed from
    // nothing created the key; 1.5/1 was compared as 1/1.
    const c = new CairnClient({ endpoints: [server.rpc], routing: false });
    try {
      for (const expectedVersion of [
        { index: Number.NaN, term: Number.NaN },
        { index: 2 ** 64, term: 2 ** 64 },
        { index: 1.5, term: 1 },
        { index: 1, term: -1 },
      ]) {
        const what = JSON.stringify(expectedVersion);
        await assert.rejects(c.put("cas-bad", "x", { expectedVersion }), InvalidRequestError, what);
        await assert.rejects(c.delete("cas-bad", { expectedVersion }), InvalidRequestError, what);
      }
      assert.equal(await c.get("cas-bad"), null, "nothing was written");
    } finally {
      c.close();
    }
  });

  it("text() and getString() keep a value's leading byte order mark", async () => {
    // U+FEFF is a character of the value like any other: TextDecoder dropped it by default.
    const c = new CairnClient({ endpoints: [server.rpc] });
    try {
      await c.put("bom", "\uFEFFhello");
      assert.equal(await c.getString("bom"), "\uFEFFhello");
      assert.equal((await c.get("bom"))?.text(), "\uFEFFhello");
    } finally {
      c.close();
    }
  });

  it("scans by prefix and range, paging up to a limit", async () => {
    const c = new CairnClient({ endpoints: [server.rpc] });
    try {
      for (let i = 0; i < 12; i++) await c.put(`scan/${String(i).padStart(2, "0")}`, `v${i}`);
      await c.put("scan0", "outside");
      const all = await c.scan({ prefix: "scan/" }, { pageSize: 5 });
      assert.equal(all.items.length, 12);
      assert.equal(all.more, false);
      assert.deepEqual(
        all.items.map((kv) => new TextDecoder().decode(kv.key)),
        Array.from({ length: 12 }, (_, i) => `scan/${String(i).padStart(2, "0")}`),
      );
      const limited = await c.scan({ prefix: "scan/" }, { limit: 7, pageSize: 3 });
      assert.equal(limited.items.length, 7);
      assert.equal(limited.more, true);
      const range = await c.scan({ start: "scan/03", end: "scan/06" });
      assert.equal(range.items.length, 3);
    } finally {
      c.close();
    }
  });

  it("refuses a scan limit or page size that is no count (NaN, negative, a fraction) before sending it", async () => {
    // protobufjs writes a uint32 from any number, truncated: a limit of 1.5 asked for one key,
    // then for 0.5 (sent as 0, the server's default page of 1,000) and kept none of that page,
    // failing as the server's fault ("holds no key but names a next page"); a negative or NaN
    // limit read every key, as no limit. A page size of -1 went out as 4,294,967,295.
    const c = new CairnClient({ endpoints: [server.rpc], routing: false });
    try {
      for (const k of ["lim/a", "lim/b", "lim/c"]) await c.put(k, "x");
      for (const options of [
        { limit: 1.5 },
        { limit: -1 },
        { limit: Number.NaN },
        { pageSize: 0.5 },
        { pageSize: -1 },
        { pageSize: 10_001 },
      ]) {
        const what = JSON.stringify(options);
        await assert.rejects(c.scan({ prefix: "lim/" }, options), InvalidRequestError, what);
        await assert.rejects(
          c.scanPages({ prefix: "lim/" }, options).next(),
          InvalidRequestError,
          what,
        );
      }
      const limited = await c.scan({ prefix: "lim/" }, { limit: 2, pageSize: 1 });
      assert.deepEqual(
        limited.items.map((kv) => new TextDecoder().decode(kv.key)),
        ["lim/a", "lim/b"],
      );
      assert.equal(limited.more, true);
    } finally {
      c.close();
    }
  });

  it("a page of large values is cut to fit a message: every key comes back, page by page", async () => {
    // 24 values of 256 KiB: 6 MiB, more than the 4 MiB message a default page of 1,000 keys
    // once had to fit in whole (the server failed the page: "Sent message larger than max").
    const c = new CairnClient({ endpoints: [server.rpc] });
    try {
      const value = (i: number): Uint8Array => new Uint8Array(256 * 1024).fill(i);
      const keys = Array.from({ length: 24 }, (_, i) => `large/${String(i).padStart(2, "0")}`);
      for (const [i, k] of keys.entries()) await c.put(k, value(i));
      const pages: string[][] = [];
      for await (const page of c.scanPages({ prefix: "large/" }))
        pages.push(page.items.map((kv) => new TextDecoder().decode(kv.key)));
      assert.deepEqual(pages.flat(), keys);
      assert.ok(pages.length >= 2, `${pages.length} page(s)`);
      const all = await c.scan({ prefix: "large/" });
      assert.equal(all.items.length, 24);
      for (const [i, kv] of all.items.entries()) assert.deepEqual(kv.value, value(i));
    } finally {
      c.close();
    }
  });

  it("routes with the WatchCluster view: the leader of a key's shard is this node", async () => {
    const c = new CairnClient({ endpoints: [server.rpc] });
    try {
      const it = c.watchCluster();
      const first = await it.next();
      await it.return(undefined);
      assert.ok(first.value !== undefined);
      const view = first.value;
      assert.equal(view.nodes.length, 1);
      assert.equal(view.nodes[0]?.rpcAddr, server.rpc);
      assert.ok(view.totalShards > 0);
      // A write lazily creates its shard; then the view names its leader, and the client routes to it.
      const key = "routed-key";
      await c.put(key, "x");
      const shard = shardForKey(new TextEncoder().encode(key), view.totalShards);
      for (let i = 0; i < 200; i++) {
        const s = c.view?.shards.find((x) => x.id === shard);
        if (s !== undefined && s.leader !== "") break;
        await new Promise((r) => setImmediate(r));
        await c.get(key);
      }
      assert.equal(c.view?.shards.find((x) => x.id === shard)?.leader, "n1");
      assert.equal(await c.getString(key), "x");
    } finally {
      c.close();
    }
  });

  it("close() ends a cluster watch its caller still reads (docs/client.md, watchCluster)", async () => {
    // The watch's stream outlived the client: grpc-js lets a call on a closed channel run on,
    // so a caller waiting for the next view waited for good, its connection kept open (and the
    // process alive) by a client that said it was closed.
    const c = new CairnClient({ endpoints: [server.rpc], routing: false });
    const views = c.watchCluster();
    const first = await views.next();
    assert.equal(first.done, false);
    const next = views.next();
    c.close();
    let bound: NodeJS.Timeout | undefined;
    // A view already on its way may still come; then the watch ends.
    const drained = async (): Promise<boolean> => {
      let r = await next;
      for (let i = 0; i < 100 && r.done !== true; i++) r = await views.next();
      return r.done === true;
    };
    const ended = await Promise.race([
      drained(),
      new Promise<boolean>((resolve) => (bound = setTimeout(() => resolve(false), 10_000))),
    ]);
    clearTimeout(bound);
    assert.ok(ended, "the watch ended when the client closed");
  });

  it("an endpoint that accepts and never answers, first of the endpoints, neither holds a call to its deadline nor keeps the client from routing", async () => {
    // The call waited there for a connection until its deadline passed, and the cluster watch
    // (opened to the first endpoint, with no deadline) waited for good: no view, no routing.
    const silent = createServer((socket) => socket.on("data", () => undefined));
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const first = `127.0.0.1:${(silent.address() as { port: number }).port}`;
    const c = new CairnClient({ endpoints: [first, server.rpc], connectTimeoutMs: 200 });
    try {
      const t0 = performance.now();
      await c.put("silent-first", "x", { timeoutMs: 10_000 });
      assert.equal(await c.getString("silent-first", { timeoutMs: 10_000 }), "x");
      assert.ok(performance.now() - t0 < 5000, "no call waited out its deadline");
      for (let i = 0; i < 300 && c.view === null; i++) await new Promise((r) => setTimeout(r, 10));
      assert.equal(c.view?.nodes[0]?.rpcAddr, server.rpc, "the client routes with the view");
    } finally {
      c.close();
      silent.close();
    }
  });

  it("a call to one node (a snapshot) goes to that node only: not to another endpoint when it is down", async () => {
    // A snapshot is of one node's replica. The endpoint's failure to connect sent the retry to
    // the next endpoint, which took its own snapshot and answered: success, on another node.
    const probe = createServer();
    await new Promise<void>((r) => probe.listen(0, "127.0.0.1", r));
    const dead = `127.0.0.1:${(probe.address() as { port: number }).port}`;
    await new Promise((r) => probe.close(r));
    const c = new CairnClient({ endpoints: [dead, server.rpc], routing: false, timeoutMs: 1000 });
    try {
      await assert.rejects(c.snapshotShard(0, { endpoint: dead }), UnavailableError);
      // Without one: the first endpoint, as documented.
      await assert.rejects(c.snapshotShard(0), UnavailableError);
      // (A snapshot flushes: more than the 1 s the failures above are given, on a loaded machine.)
      const snapshot = await c.snapshotShard(0, { endpoint: server.rpc, timeoutMs: 30_000 });
      assert.equal(snapshot.shardId, 0);
      // A call about the cluster, sent to a node, still goes on to the next when it is down
      // (which answers it: this single node is in no cluster).
      const answer = await c.getNode("n1", { endpoint: dead }).catch((e: unknown) => e);
      assert.ok(!(answer instanceof UnavailableError), String(answer));
    } finally {
      c.close();
    }
  });

  it("retries across a server restart", async () => {
    const port = server.rpc.split(":").at(-1) as string;
    const httpPort = server.http.split(":").at(-1) as string;
    // routing: false — an open WatchCluster stream holds the server's graceful stop until its
    // drain timeout (a server-side limitation), which would slow this test by ~10 s.
    const c = new CairnClient({ endpoints: [server.rpc], timeoutMs: 30_000, routing: false });
    try {
      await c.put("restart", "before");
      await server.stop();
      // Sent while the server is down: connection refused proves the write was not applied,
      // so the client retries it until the server is back.
      const pending = c.put("restart", "during");
      server = await startServer({
        dataDir: dir,
        args: ["--rpc-addr", `127.0.0.1:${port}`, "--http-addr", `127.0.0.1:${httpPort}`],
      });
      await pending;
      assert.equal(await c.getString("restart"), "during");
    } finally {
      c.close();
    }
  });
});

describe("CairnClient against a node whose message limit is exactly the largest Put's", () => {
  it("scans past the largest key with the largest value: a page of one item and its token fits a message", async () => {
    // limits.max_message_bytes at the least the configuration takes: max_key_bytes (4096) +
    // max_value_bytes + 1024. Such a Put fits; a page of that item, with a page token naming
    // its key again, did not (RESOURCE_EXHAUSTED "Sent message larger than max"), and no scan
    // or backup could go past it.
    const dir2 = mkdtempSync(join(tmpdir(), "cairn-client-edge-"));
    const message = 64 * 1024;
    const node = await startServer({
      dataDir: dir2,
      env: {
        CAIRN_LIMITS_MAX_MESSAGE_BYTES: String(message),
        CAIRN_LIMITS_MAX_VALUE_BYTES: String(message - 4096 - 1024),
      },
    });
    const c = new CairnClient({ endpoints: [node.rpc], routing: false });
    try {
      const key = Buffer.alloc(4096, "k");
      const value = Buffer.alloc(message - 4096 - 1024, "v");
      await c.put(key, value);
      await c.put("z", "after it");
      const all = await c.scan();
      assert.deepEqual(
        all.items.map((it) => it.key.length),
        [4096, 1],
      );
    } finally {
      c.close();
      await node.stop();
      rmSync(dir2, { recursive: true, force: true });
    }
  });
});

describe("CairnClient against a node with larger limits", () => {
  it("reads back a value larger than gRPC's default 4 MiB message that the node took", async () => {
    const big = mkdtempSync(join(tmpdir(), "cairn-client-big-"));
    const node = await startServer({
      dataDir: big,
      env: { CAIRN_LIMITS_MAX_VALUE_BYTES: "8MiB", CAIRN_LIMITS_MAX_MESSAGE_BYTES: "12MiB" },
    });
    const c = new CairnClient({ endpoints: [node.rpc] });
    try {
      const value = new Uint8Array(6_000_000).map((_, i) => i % 251);
      await c.put("six-megabytes", value);
      const got = await c.get("six-megabytes");
      assert.ok(got !== null);
      assert.deepEqual(got.value, value);
      const page = await c.scan({ prefix: "six" });
      assert.deepEqual(page.items[0]?.value, value, "a page of one item larger than 4 MiB");
    } finally {
      c.close();
      await node.stop();
      rmSync(big, { recursive: true, force: true });
    }
  });
});
