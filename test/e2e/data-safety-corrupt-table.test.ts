/**
 * A shard's table found corrupt while the node runs (a block failing its checksum: bit rot, a
 * bad sector), on real processes. The node stops, as on any storage failure. A cluster member
 * moves the shard's directory to `<data_dir>/quarantine/` as it stops, and at its next start its
 * peers refill the shard (src/replication/corrupt-shard.ts): restarted as it was, it would serve
 * until the next read of the damaged block and stop again. One found as the node starts (its
 * engine opens the table) is moved aside and refilled in that start. A single node keeps its
 * directory: its tables are its only copy.
 */
import assert from "node:assert/strict";
import { mkdtemp, open, readdir, readFile, rename, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { shardForKey } from "../../src/cluster/index.ts";
import {
  acknowledgedPuts,
  eventually,
  everyReplicaHolds,
  healthReport,
  LocalCluster,
} from "../support/cluster-process.ts";
import { type Clients, connect } from "../support/grpc-client.ts";
import { startServer } from "../support/server-process.ts";

const TOTAL_SHARDS = 8;
let root: string;

/**
 * Overwrites a byte of every table in `dir`: inside its first block, where the keys are (met by
 * a read), or the footer's last (met as the engine opens).
 */
async function corruptTables(dir: string, where: "block" | "footer" = "block"): Promise<string[]> {
  const tables = (await readdir(dir)).filter((n) => n.endsWith(".sst"));
  for (const name of tables) {
    const file = await open(join(dir, name), "r+");
    try {
      const at = where === "block" ? 8 : (await file.stat()).size - 1;
      const byte = Buffer.alloc(1);
      await file.read(byte, 0, 1, at);
      byte[0] = (byte[0] as number) ^ 0xff;
      await file.write(byte, 0, 1, at);
    } finally {
      await file.close();
    }
  }
  return tables;
}

/** With its peers stopped, `node` serves every key of `keys` itself, as `acknowledged` has it. */
async function servesAlone(
  cluster: LocalCluster,
  node: string,
  keys: readonly string[],
  acknowledged: ReadonlyMap<string, string>,
): Promise<void> {
  for (const other of cluster.nodes) {
    if (other.id !== node) await cluster.stop(other.id);
  }
  const alone = cluster.node(node).client as Clients;
  for (const key of keys) {
    const got = await alone.call(alone.kv, "Get", {
      key: Buffer.from(key),
      consistency: "SERIALIZABLE",
    });
    assert.equal((got["value"] as Buffer | undefined)?.toString(), acknowledged.get(key), key);
  }
}

/**
 * A running 3-node cluster, 60 keys written through every node and held by every replica, and
 * the shard `pick` chooses flushed on node `on` (n2 unless said) into a table that is its only
 * copy there (its log compacted), in a cluster of `totalShards` (TOTAL_SHARDS unless said).
 * Returns the writes, that shard and its keys.
 */
async function filledCluster(
  cluster: LocalCluster,
  pick: (shards: readonly number[]) => number,
  on = "n2",
  totalShards = TOTAL_SHARDS,
): Promise<{
  acknowledged: Map<string, string>;
  put: (c: Clients, key: string, value: string) => Promise<void>;
  shard: number;
  ofShard: string[];
}> {
  await cluster.startAll();
  await cluster.ready();
  const { acknowledged, put } = acknowledgedPuts();
  for (let i = 0; i < 60; i++) {
    await put(cluster.nodes[i % 3]?.client as Clients, `before-${i}`, `v${i}`);
  }
  const shardOf = (k: string): number => shardForKey(Buffer.from(k), totalShards);
  const shard = pick([...acknowledged.keys()].map(shardOf));
  const ofShard = [...acknowledged.keys()].filter((k) => shardOf(k) === shard);
  await everyReplicaHolds(cluster, acknowledged);
  const c = cluster.node(on).client as Clients;
  const snap = await c.call(c.admin, "SnapshotShard", { shard_id: shard });
  assert.ok(Number(snap["index"]) > 1, `shard ${shard} compacted on ${on}`);
  return { acknowledged, put, shard, ofShard };
}

/**
 * The ERROR `lines` hold (`saying` in its message) that shard `shard`'s directory was moved
 * aside, into `<dataDir>/quarantine/`, with its damaged tables: where it went.
 */
async function movedAside(
  lines: readonly string[],
  saying: string,
  dataDir: string,
  shard: number,
): Promise<string> {
  const moved = lines.find(
    (l) => l.includes('"level":"ERROR"') && l.includes(saying) && l.includes(`"shard_id":${shard}`),
  );
  assert.ok(moved !== undefined, `no ERROR naming the moved shard:\n${lines.join("\n")}`);
  const into = (JSON.parse(moved) as { fields: { moved_to: string } }).fields.moved_to;
  assert.ok(into.startsWith(join(dataDir, "quarantine", `shard-${shard}-`)), into);
  assert.ok(
    (await readdir(into)).some((n) => n.endsWith(".sst")),
    "the damaged tables kept",
  );
  return into;
}

/** `lines` say shard `shard` was refilled from its peers. */
function reportsRefilled(lines: readonly string[], shard: number): void {
  assert.ok(
    lines.some((l) => l.includes("shard refilled") && l.includes(`"shard_id":${shard}`)),
    `shard ${shard} not reported refilled:\n${lines.join("\n")}`,
  );
}

describe("a shard's table found corrupt while the node runs (real processes)", () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "cairn-e2e-corrupt-table-"));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("a cluster member stops, moves the shard aside, and is refilled at its next start: nothing lost", async () => {
    const cluster = await LocalCluster.create(join(root, "cluster"), 3, {
      CAIRN_CLUSTER_TOTAL_SHARDS: String(TOTAL_SHARDS),
    });
    try {
      // n2 flushes the shard into a table and compacts its log: the table is its only copy here.
      const { acknowledged, put, shard, ofShard } = await filledCluster(
        cluster,
        (s) => s[0] as number,
      );
      const victim = cluster.node("n2");
      const server = victim.server;
      assert.ok(server !== null);
      const c2 = victim.client as Clients;
      const dir = join(victim.dataDir, "shards", String(shard));
      assert.ok((await corruptTables(dir)).length > 0, "n2 flushed a table");

      // Its own copy, read: the damaged block is met, and the node stops.
      await assert.rejects(
        c2.call(c2.kv, "Get", {
          key: Buffer.from(ofShard[0] as string),
          consistency: "SERIALIZABLE",
        }),
        /corruption/,
      );
      const exit = await server.exited;
      assert.equal(exit.code, 1, "the node stops on corrupt storage");
      await movedAside(server.lines, "its directory was moved aside", victim.dataDir, shard);
      await assert.rejects(readdir(dir), { code: "ENOENT" });
      await cluster.stop("n2", "SIGKILL");

      const n1 = cluster.node("n1").client as Clients;
      for (let i = 0; i < 20; i++) await put(n1, `during-${i}`, `d${i}`);

      // Started again as it is, it is refilled by its peers.
      const back = await cluster.start("n2");
      const again = back.server;
      assert.ok(again !== null);
      await cluster.ready(60_000);
      await eventually(
        "n2 /health is healthy (refilled)",
        async () => (await healthReport(again.http)).status === "healthy",
        60_000,
      );
      reportsRefilled(again.lines, shard);
      await everyReplicaHolds(cluster, acknowledged);

      // Its own copy: with its peers stopped, n2 serves every key of the refilled shard itself.
      await servesAlone(cluster, "n2", ofShard, acknowledged);
      await cluster.stopAll();
    } finally {
      await cluster.killAll();
    }
  });

  // With shard workers, a shard of the second: it learns the meta state from the first, which
  // opens shard 0 beside it. The meta group's own shard: its voters come from their record; on
  // n1, the first seed (which founded the cluster, and must not found another without it).
  // Shard 0's damage is in its first block, where the meta state starts. Of 1024 shards (the 60
  // keys create ~60), the meta state takes several blocks: the engine opens, the Raft
  // configuration (after the meta state) reads, and the meta state's load meets the damage.
  for (const [shape, workers, pick, victimId, total] of [
    ["", 1, (shards: readonly number[]) => shards.find((id) => id !== 0), "n2", TOTAL_SHARDS],
    [
      " (two shard workers, a shard of the second)",
      2,
      (s: readonly number[]) => s.find((id) => id % 2 === 1),
      "n2",
      TOTAL_SHARDS,
    ],
    [" (the meta group's own, shard 0, on the first seed)", 1, () => 0, "n1", 1024],
  ] as const) {
    it(`a cluster member that finds a shard's table corrupt as it starts moves the shard aside and is refilled in that start${shape}: nothing lost`, async () => {
      const cluster = await LocalCluster.create(
        join(root, `at-open-${workers}-${victimId}-${total}`),
        3,
        {
          CAIRN_CLUSTER_TOTAL_SHARDS: String(total),
          CAIRN_SHARD_WORKERS: String(workers),
        },
      );
      try {
        const { acknowledged, put, shard, ofShard } = await filledCluster(
          cluster,
          (shards) => pick(shards) as number,
          victimId,
          total,
        );
        const victim = cluster.node(victimId);
        await cluster.stop(victimId, "SIGKILL");
        // Damaged while the node is down: its start opens the table and finds it.
        const dir = join(victim.dataDir, "shards", String(shard));
        const where = shard === 0 ? "block" : "footer";
        assert.ok((await corruptTables(dir, where)).length > 0, `${victimId} flushed a table`);
        const n3 = cluster.node("n3").client as Clients;
        for (let i = 0; i < 20; i++) await put(n3, `during-${i}`, `d${i}`);

        if (shard === 0) {
          // The meta group's voters, recorded beside its directory: its state names no replica
          // once its tables are damaged. Without the record (a directory older than it), the
          // node refuses to start, naming the directory to move.
          const record = join(victim.dataDir, "meta-voters");
          assert.match(await readFile(record, "utf8"), /^n1\nn2\nn3\ncrc32c [0-9a-f]{8}\n$/);
          await rename(record, `${record}.aside`);
          await assert.rejects(
            cluster.start(victimId),
            new RegExp(`corruption in ${dir}/.*move ${dir} out of`),
          );
          await rename(`${record}.aside`, record);
        }
        // Before, it refused to start, naming the directory for the operator to move.
        const back = await cluster.start(victimId);
        const server = back.server;
        assert.ok(server !== null);
        await cluster.ready(60_000);
        await eventually(
          `${victimId} /health is healthy (refilled)`,
          async () => (await healthReport(server.http)).status === "healthy",
          60_000,
        );
        await movedAside(server.lines, "moved aside as the node started", victim.dataDir, shard);
        reportsRefilled(server.lines, shard);
        await everyReplicaHolds(cluster, acknowledged);
        await servesAlone(cluster, victimId, ofShard, acknowledged);
        await cluster.stopAll();
      } finally {
        await cluster.killAll();
      }
    });
  }

  it("a single node stops and keeps its directory: its tables are the only copy", async () => {
    const dataDir = join(root, "single");
    const server = await startServer({
      dataDir,
      env: { CAIRN_CLUSTER_TOTAL_SHARDS: String(TOTAL_SHARDS) },
    });
    try {
      const client = connect(server.rpc);
      try {
        const key = Buffer.from("k");
        const shard = shardForKey(key, TOTAL_SHARDS);
        await client.call(client.kv, "Put", { key, value: Buffer.from("v") });
        await client.call(client.admin, "SnapshotShard", { shard_id: shard });
        const dir = join(dataDir, "shards", String(shard));
        const tables = await corruptTables(dir);
        assert.ok(tables.length > 0);
        await assert.rejects(client.call(client.kv, "Get", { key }), /corruption/);
        const exit = await server.exited;
        assert.equal(exit.code, 1, "the node stops on corrupt storage");
        // Said on stderr too, beside the JSON log.
        assert.match(server.stderr(), /^cairn serve: corruption in .*\.sst at offset \d+/m);
        for (const name of tables) await readdir(dir).then((n) => assert.ok(n.includes(name)));
        await assert.rejects(readdir(join(dataDir, "quarantine")), { code: "ENOENT" });
        assert.ok(!server.lines.some((l) => l.includes("moved aside")));
      } finally {
        client.close();
      }
    } finally {
      await server.stop("SIGKILL");
    }
  });
});
