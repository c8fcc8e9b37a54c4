/**
 * A cluster whose nodes run shard workers (docs/architecture.md, "Using every core"): three real
 * processes of two workers each. Worker i of a node owns the shards with id mod 2 = i and talks
 * to worker i of every peer over connections that name it (src/api/worker-tunnel.ts); worker 0
 * holds the meta group and the others follow its state. Keys of both workers' shards are written
 * and read through every node, scanned, a leadership moved, a node killed and restarted; and a
 * member started with another number of workers is refused, with the reason in the logs.
 *
 * Every other cluster test runs with workers by hand: CLUSTER_SHARD_WORKERS=2 (LocalCluster).
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { shardForKey } from "../../src/cluster/index.ts";
import { nativeAddonMissing } from "../../src/common/index.ts";
import type { Clients } from "../support/grpc-client.ts";
import {
  clusterView,
  eventually,
  everyReplicaHolds,
  healthReport,
  LocalCluster,
  retryingKv,
} from "../support/cluster-process.ts";

const TOTAL_SHARDS = 1024;
const WORKERS = { CAIRN_SHARD_WORKERS: "2" };
const b = (s: string): Buffer => Buffer.from(s);

// Shard workers in a cluster hand peers' connections between threads with the native addon
// (dupFd), and a node refuses to start without it: where it was not built (no C compiler; the
// nodes load the same file as this process), these tests are skipped, saying why.
const skip =
  nativeAddonMissing === null
    ? false
    : `needs the native addon for shard workers in a cluster, and it is ${nativeAddonMissing}`;

describe("a cluster of nodes with two shard workers each (real processes)", { skip }, () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-e2e-cworkers-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("serves keys of both workers' shards through any node, and keeps them across a kill -9", async () => {
    const cluster = await LocalCluster.create(join(dir, "basic"), 3, WORKERS);
    try {
      await cluster.startAll();
      await cluster.ready();
      const clients = cluster.nodes.map((n) => n.client as Clients);
      const keys = Array.from({ length: 40 }, (_, i) => `key-${i}`);
      const shards = new Set(keys.map((k) => shardForKey(b(k), TOTAL_SHARDS) % 2));
      assert.deepEqual([...shards].sort(), [0, 1], "the keys fall in both workers' shards");

      const acknowledged = new Map<string, string>();
      for (const [i, key] of keys.entries()) {
        await retryingKv(clients[i % 3] as Clients, "Put", { key: b(key), value: b(`v${i}`) });
        acknowledged.set(key, `v${i}`);
      }
      // Linearizable reads and scans through every node.
      for (const c of clients) {
        for (const [key, value] of acknowledged) {
          const got = await retryingKv(c, "Get", { key: b(key) });
          assert.equal((got["value"] as Buffer | undefined)?.toString(), value, key);
        }
        const page = await retryingKv(c, "Scan", { prefix: b("key-"), limit: 100 });
        const items = page["items"] as { key: Buffer }[];
        assert.deepEqual(
          items.map((i) => i.key.toString()),
          [...keys].sort(),
        );
      }

      // Every node sees every written shard with three replicas and a leader, and its health
      // (gathered from both workers) lists the shards of both.
      const written = [...new Set(keys.map((k) => shardForKey(b(k), TOTAL_SHARDS)))];
      await eventually(
        "every written shard has three replicas and a leader everywhere",
        async () => {
          for (const c of clients) {
            const view = await clusterView(c);
            for (const id of written) {
              const s = view.shards.find((x) => x.id === id);
              if (s === undefined || s.leader === "" || s.replicas.length !== 3) return false;
            }
          }
          return true;
        },
      );
      for (const n of cluster.nodes) {
        await eventually(`${n.id} is healthy with the shards of both workers`, async () => {
          const r = await healthReport(n.server?.http);
          const ids = new Set(r.shards.map((s) => s.id));
          return r.status === "healthy" && written.every((id) => ids.has(id)) && ids.has(0);
        });
      }

      // Admin.TransferLeader of a shard of worker 1, through a third node: it moves and stays.
      const view = await clusterView(clients[0] as Clients);
      const shard = view.shards.find((s) => s.id % 2 === 1 && s.leader !== "");
      assert.ok(shard !== undefined);
      const target = ["n1", "n2", "n3"].find((n) => n !== shard.leader) as string;
      const via = cluster.nodes.findIndex((n) => n.id !== shard.leader && n.id !== target);
      const admin = clients[via] as Clients;
      const reply = await admin.call(admin.admin, "TransferLeader", {
        shard_id: shard.id,
        node_id: target,
      });
      assert.equal(reply["leader"], target);

      // SIGKILL the node that leads the most shards, write on, restart it: nothing is lost.
      const leads = new Map<string, number>();
      for (const s of (await clusterView(clients[0] as Clients)).shards) {
        leads.set(s.leader, (leads.get(s.leader) ?? 0) + 1);
      }
      const victim = [...leads].sort((x, y) => y[1] - x[1])[0]?.[0] ?? "n1";
      await cluster.stop(victim, "SIGKILL");
      const survivors = cluster.running().map((n) => n.client as Clients);
      for (const [i, key] of keys.entries()) {
        await retryingKv(survivors[i % 2] as Clients, "Put", {
          key: b(key),
          value: b(`after-${i}`),
        });
        acknowledged.set(key, `after-${i}`);
      }
      await cluster.start(victim);
      await cluster.ready();
      await everyReplicaHolds(cluster, acknowledged);
      await cluster.stopAll();
    } finally {
      await cluster.killAll();
    }
  });

  it("a member with another number of workers: its peers and it refuse each other's streams, and say why", async () => {
    const cluster = await LocalCluster.create(join(dir, "mismatch"), 3, WORKERS);
    try {
      await Promise.all([
        cluster.start("n1"),
        cluster.start("n2"),
        // n3 alone runs one worker: its groups are sliced otherwise.
        cluster.start("n3", { CAIRN_SHARD_WORKERS: "1" }),
      ]);
      const logged = (id: string, message: string, reason: RegExp): Promise<void> =>
        eventually(`${id} logs "${message}": ${reason.source}`, async () => {
          const lines = cluster.node(id).server?.lines ?? [];
          return lines.some((l) => l.includes(message) && reason.test(l));
        });
      // n3's peers cannot reach it (their connections name a worker it does not run), and it
      // cannot reach them (its calls name none): each side says why.
      await logged(
        "n1",
        "raft peer refused the stream",
        /421 this node runs 1 shard workers and the caller 2: every member of a cluster must run the same shard_workers/,
      );
      await logged(
        "n3",
        "rejoining failed",
        /this node runs 2 shard workers: a peer's calls must name one \(every member of a cluster must run the same shard_workers\)/,
      );
      // A node that cannot join stops promptly: its rejoin attempts end with it (they held the
      // process for a proposal's 10 s of retries).
      const stopping = performance.now();
      await cluster.stop("n3");
      assert.ok(performance.now() - stopping < 5_000, "n3 stopped within 5 s");
      await cluster.stopAll();
    } finally {
      await cluster.killAll();
    }
  });
});
