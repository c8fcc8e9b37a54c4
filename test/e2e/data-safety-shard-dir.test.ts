/**
 * A removed (or emptied) shard directory on a cluster member (issue 51, item 4), on real
 * processes: the node starts, logs at ERROR naming the directory, and its peers refill the shard
 * (docs/operations.md, "Running a cluster"); afterwards its own copy serves every acknowledged
 * key, with its peers stopped. The member compacted both logs first, so its tables held what its
 * WAL dropped: the directories' loss is a loss of acknowledged state, which a single node refuses
 * to start on (test/e2e/data-safety-wal.test.ts). Shard 0, the meta group, is the one removed.
 */
import assert from "node:assert/strict";
import { mkdtemp, readdir, rm } from "node:fs/promises";
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
import type { Clients } from "../support/grpc-client.ts";

const TOTAL_SHARDS = 8;
let root: string;

describe("a cluster member whose shard directory was removed (real processes)", () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "cairn-e2e-shard-dir-"));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("starts, logs the lost directory at ERROR, and is refilled by its peers: nothing lost", async () => {
    const cluster = await LocalCluster.create(root, 3, {
      CAIRN_CLUSTER_TOTAL_SHARDS: String(TOTAL_SHARDS),
    });
    try {
      await cluster.startAll();
      await cluster.ready();
      const { acknowledged, put } = acknowledgedPuts();
      for (let i = 0; i < 60; i++) {
        await put(cluster.nodes[i % 3]?.client as Clients, `before-${i}`, `v${i}`);
      }
      const shard = shardForKey(Buffer.from("before-0"), TOTAL_SHARDS);
      const lost = [0, shard];
      await everyReplicaHolds(cluster, acknowledged);

      // n2 flushes both shards and compacts their logs, then stops; the directories go.
      const victim = cluster.node("n2");
      const c2 = victim.client as Clients;
      for (const id of lost) {
        const snap = await c2.call(c2.admin, "SnapshotShard", { shard_id: id });
        assert.ok(Number(snap["index"]) > 1, `shard ${id} compacted on n2`);
      }
      await cluster.stop("n2");
      // Shard 0's directory is removed, the other one emptied.
      await rm(join(victim.dataDir, "shards", "0"), { recursive: true });
      const emptied = join(victim.dataDir, "shards", String(shard));
      for (const name of await readdir(emptied)) await rm(join(emptied, name), { recursive: true });
      const n1 = cluster.node("n1").client as Clients;
      for (let i = 0; i < 20; i++) await put(n1, `during-${i}`, `d${i}`);

      const back = await cluster.start("n2");
      const server = back.server;
      assert.ok(server !== null);
      for (const id of lost) {
        const path = join(victim.dataDir, "shards", String(id));
        assert.ok(
          server.lines.some(
            (l) =>
              l.includes('"level":"ERROR"') &&
              l.includes("a shard's directory is missing") &&
              l.includes(`"shard_id":${id}`) &&
              l.includes(`"path":"${path}"`),
          ),
          `no ERROR naming ${path}:\n${server.lines.join("\n")}`,
        );
      }
      await cluster.ready(60_000);
      await eventually(
        "n2 /health is healthy (refilled)",
        async () => (await healthReport(server.http)).status === "healthy",
        60_000,
      );
      for (const id of lost) {
        assert.ok(
          server.lines.some((l) => l.includes("shard refilled") && l.includes(`"shard_id":${id}`)),
          `shard ${id} not reported refilled`,
        );
      }
      await put(back.client as Clients, "after", "ok");
      await everyReplicaHolds(cluster, acknowledged);

      // Its own copy: with its peers stopped, n2 serves every key of the refilled shard itself.
      await cluster.stop("n1");
      await cluster.stop("n3");
      const alone = back.client as Clients;
      for (const [key, value] of acknowledged) {
        if (shardForKey(Buffer.from(key), TOTAL_SHARDS) !== shard) continue;
        const got = await alone.call(alone.kv, "Get", {
          key: Buffer.from(key),
          consistency: "SERIALIZABLE",
        });
        assert.equal((got["value"] as Buffer | undefined)?.toString(), value, key);
      }
      await cluster.stopAll();
    } finally {
      await cluster.killAll();
    }
  });
});
