/**
 * Shard workers (shard_workers > 1, src/node/shard-workers.ts) against the real server process:
 * the workers share rpc_addr, each call reaches the worker that owns its key's shard whatever
 * worker took its connection, /health and /metrics gather every worker, a restart recovers every
 * worker's WAL, and a data directory keeps the number of workers it was written with.
 * kv.test.ts runs the whole KV suite with shard_workers 3.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { type Clients, connect, type Reply } from "../support/grpc-client.ts";
import { CATALOGUE, checkHistogram, familyTypes } from "../ops/prom-text.ts";
import { startServer } from "../support/server-process.ts";

const b = (s: string): Buffer => Buffer.from(s);

async function metric(http: string, prefix: string): Promise<string[]> {
  const text = await (await fetch(`http://${http}/metrics`)).text();
  return text.split("\n").filter((l) => l.startsWith(prefix));
}

async function putAll(clients: readonly Clients[], keys: number): Promise<void> {
  await Promise.all(
    clients.map(async (c, i) => {
      for (let j = 0; j < keys; j++) {
        await c.call(c.kv, "Put", { key: b(`k-${i}-${j}`), value: b(`v-${i}-${j}`) });
      }
    }),
  );
}

async function assertAll(clients: readonly Clients[], keys: number): Promise<void> {
  for (let i = 0; i < clients.length; i++) {
    // Read through another connection than the one that wrote (likely another worker).
    const reader = clients[(i + 1) % clients.length] as Clients;
    for (let j = 0; j < keys; j++) {
      const got = await reader.call(reader.kv, "Get", { key: b(`k-${i}-${j}`) });
      assert.equal((got["value"] as Buffer | undefined)?.toString(), `v-${i}-${j}`, `k-${i}-${j}`);
    }
  }
}

describe("shard workers (real server process)", () => {
  it("serve every shard from every connection; /health and /metrics gather every worker", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-workers-"));
    const server = await startServer({ dataDir: dir, env: { CAIRN_SHARD_WORKERS: "2" } });
    // One connection each: the kernel spreads them over the workers' listeners.
    const clients = Array.from({ length: 8 }, () => connect(server.rpc));
    try {
      await putAll(clients, 10);
      await assertAll(clients, 10);
      const [first] = clients as [Clients];
      const scan = await first.call(first.kv, "Scan", { prefix: b("k-") });
      const keys = (scan["items"] as Reply[]).map((i) => (i["key"] as Buffer).toString());
      assert.equal(keys.length, 80);
      assert.deepEqual(keys, [...keys].sort(), "one scan merges every worker's keys in order");

      const quick = await fetch(`http://${server.http}/health/quick`);
      assert.equal(quick.status, 200);
      const health = (await (await fetch(`http://${server.http}/health`)).json()) as {
        status: string;
        active_shards: number;
        shards: { id: number; status: string }[];
        nodes: { id: string }[];
      };
      assert.equal(health.status, "healthy");
      const ids = health.shards.map((s) => s.id);
      assert.deepEqual(
        ids,
        [...ids].sort((x, y) => x - y),
        "shards are listed by id",
      );
      assert.equal(health.active_shards, ids.length);
      assert.ok(ids.some((id) => id % 2 === 0) && ids.some((id) => id % 2 === 1), "both workers");
      assert.deepEqual(
        health.nodes.map((n) => n.id),
        ["n1"],
      );

      // One export, in the contract's format, with every family of the catalogue.
      const exported = await fetch(`http://${server.http}/metrics`);
      assert.equal(exported.headers.get("content-type"), "text/plain; version=0.0.4");
      const text = await exported.text();
      const types = familyTypes(text);
      for (const [name, type] of CATALOGUE) assert.equal(types.get(name), type, `family ${name}`);
      // Every series of the summed histogram: ordered buckets, cumulative, _count = +Inf.
      assert.equal(
        checkHistogram(text, "kv_request_duration_ms", [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]),
        29, // 4 operations × 7 statuses, found and not_found on successful gets
      );
      // Each worker counted the calls it served; the scrape sums them.
      const puts = await metric(server.http, 'kv_requests_total{operation="put",status="success"}');
      assert.deepEqual(puts, ['kv_requests_total{operation="put",status="success"} 80']);
      const tables = await metric(server.http, 'lsm_sstable_count{level="L0"');
      const shardsWithTables = tables.map((l) => Number(/shard_id="(\d+)"/.exec(l)?.[1]));
      assert.deepEqual(
        [...shardsWithTables].sort((x, y) => x - y),
        ids,
        "every worker's shards have their series",
      );
      // Process-wide series appear once, not once per worker.
      assert.equal((await metric(server.http, "process_cpu_seconds_total ")).length, 1);
      assert.deepEqual(await metric(server.http, "swim_cluster_size "), ["swim_cluster_size 1"]);
    } finally {
      for (const c of clients) c.close();
      const exit = await server.stop("SIGTERM");
      await rm(dir, { recursive: true, force: true });
      assert.deepEqual(exit, { code: 0, signal: null }, "a clean shutdown exits 0");
    }
  });

  it("a restart recovers every worker's shards; the data directory keeps its number of workers", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-workers-"));
    try {
      const first = await startServer({ dataDir: dir, env: { CAIRN_SHARD_WORKERS: "2" } });
      let clients = Array.from({ length: 4 }, () => connect(first.rpc));
      await putAll(clients, 25);
      for (const c of clients) c.close();
      assert.deepEqual(await first.stop("SIGTERM"), { code: 0, signal: null });

      // Started again with its two workers: every key is back (from each worker's WAL).
      const second = await startServer({ dataDir: dir, env: { CAIRN_SHARD_WORKERS: "2" } });
      clients = Array.from({ length: 4 }, () => connect(second.rpc));
      try {
        await assertAll(clients, 25);
      } finally {
        for (const c of clients) c.close();
        assert.deepEqual(await second.stop("SIGTERM"), { code: 0, signal: null });
      }

      // With another number of workers the node refuses to start, and changes nothing.
      for (const workers of ["1", "3"]) {
        await assert.rejects(
          startServer({ dataDir: dir, env: { CAIRN_SHARD_WORKERS: workers } }),
          new RegExp(`written with shard_workers 2, but shard_workers is ${workers}`),
        );
      }
      const third = await startServer({ dataDir: dir, env: { CAIRN_SHARD_WORKERS: "2" } });
      clients = Array.from({ length: 4 }, () => connect(third.rpc));
      try {
        await assertAll(clients, 25);
      } finally {
        for (const c of clients) c.close();
        assert.deepEqual(await third.stop("SIGTERM"), { code: 0, signal: null });
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("a data directory written without workers is refused with them", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-workers-"));
    try {
      const plain = await startServer({ dataDir: dir });
      const c = connect(plain.rpc);
      await c.call(c.kv, "Put", { key: b("kept"), value: b("yes") });
      c.close();
      assert.deepEqual(await plain.stop("SIGTERM"), { code: 0, signal: null });
      await assert.rejects(
        startServer({ dataDir: dir, env: { CAIRN_SHARD_WORKERS: "2" } }),
        /written with shard_workers 1, but shard_workers is 2/,
      );
      const again = await startServer({ dataDir: dir });
      const c2 = connect(again.rpc);
      try {
        const got = await c2.call(c2.kv, "Get", { key: b("kept") });
        assert.equal((got["value"] as Buffer).toString(), "yes");
      } finally {
        c2.close();
        assert.deepEqual(await again.stop("SIGTERM"), { code: 0, signal: null });
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
