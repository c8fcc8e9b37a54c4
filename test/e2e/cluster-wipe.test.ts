/**
 * A member whose data directory was wiped (issue 10) rejoins as a new replica and is refilled by
 * snapshots; nothing acknowledged is lost. The node comes back with the same node id and a new
 * incarnation, so inside every group it is a new replica (`n2@<new tag>`): it never answers for
 * the old one (which forgot its votes and acknowledgements), asks the meta group to record it as
 * rejoined, and each group's leader removes the old replica, adds the new one as a learner and
 * promotes it once caught up. The logs are compacted before the wipe, so the refill must come by
 * snapshot. Then an old copy of the wiped directory, restored by mistake, must not serve: the
 * node stops with CAIRN_ERR_LOST_STATE.
 */
import assert from "node:assert/strict";
import { cp, mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { shardForKey } from "../../src/cluster/index.ts";
import type { Clients } from "../support/grpc-client.ts";
import {
  acknowledgedPuts,
  clusterView,
  eventually,
  everyReplicaHolds,
  healthReport,
  LocalCluster,
  readBackDifference,
} from "../support/cluster-process.ts";

const TOTAL_SHARDS = 1024;
const KEYS = 120;

async function health(http: string | undefined): Promise<string> {
  return (await healthReport(http)).status;
}

/**
 * Samples a rejoining node's /health until stopped: whenever it reads `healthy`, every shard the
 * cluster places on the node (by `placer`'s view) must be there and healthy. Returns the reports
 * that broke this.
 */
function sampleHealth(
  node: string,
  http: string | undefined,
  placer: Clients,
): { stop: () => Promise<string[]> } {
  const broken: string[] = [];
  let stopped = false;
  const loop = (async () => {
    // Every 20 ms: the window in which a new replica of the meta group holds no state yet (before
    // the leader's snapshot is installed) lasts only tens of milliseconds.
    for (let i = 0; i < 5_000 && !stopped; i++) {
      try {
        const [r, view] = await Promise.all([healthReport(http), clusterView(placer)]);
        if (r.status === "healthy") {
          const here = new Map(r.shards.map((s) => [s.id, s.status]));
          const placed = view.shards.filter((s) => s.replicas.includes(node)).map((s) => s.id);
          const missing = placed.filter((id) => here.get(id) !== "healthy");
          if (missing.length > 0) {
            broken.push(`healthy while shards ${missing.slice(0, 10).join(",")} are not here`);
          }
        }
      } catch {
        // The node restarting or busy: the next sample.
      }
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  return {
    stop: async () => {
      stopped = true;
      await loop;
      return broken;
    },
  };
}

/**
 * Starts `id` and waits for it to stop with exit code 1 and CAIRN_ERR_LOST_STATE, whether it
 * finds out before it has started or after.
 */
async function assertStopsOnLostState(cluster: LocalCluster, id: string): Promise<void> {
  let output: string;
  let code: number | null;
  try {
    const n = await cluster.start(id);
    const server = n.server;
    assert.ok(server !== null);
    const timer = setTimeout(() => server.proc.kill("SIGKILL"), 30_000);
    const exit = await server.exited;
    clearTimeout(timer);
    n.client?.close();
    n.client = null;
    n.server = null;
    code = exit.code;
    output = `${server.lines.join("\n")}\n${server.stderr()}`;
  } catch (err) {
    output = err instanceof Error ? err.message : String(err);
    code = /server exited \(1\)/.test(output) ? 1 : null;
  }
  assert.equal(code, 1, `the old copy must stop with exit code 1:\n${output.slice(-3000)}`);
  assert.match(output, /CAIRN_ERR_LOST_STATE/);
}

describe("a member restarted with a wiped data directory (real processes)", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-e2e-wipe-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it(
    "rejoins as a new replica, is refilled by snapshots, and nothing is lost",
    { timeout: 180_000 },
    async () => {
      const cluster = await LocalCluster.create(join(dir, "c"));
      try {
        await cluster.startAll();
        await cluster.ready();
        const { acknowledged, put } = acknowledgedPuts();
        for (let i = 0; i < KEYS; i++) {
          const via = cluster.nodes[i % 3]?.client as Clients;
          await put(via, `before-${i}`, `v${i}`);
        }
        const shards = new Set([
          0,
          ...[...acknowledged.keys()].map((k) => shardForKey(Buffer.from(k), TOTAL_SHARDS)),
        ]);

        const victim = cluster.node("n2");
        const oldIncarnation = (await clusterView(victim.client as Clients)).incarnation;
        assert.notEqual(oldIncarnation, "");
        await cluster.stop("n2");
        // An operator's backup of n2's volume, restored later by mistake.
        const oldCopy = join(dir, "n2-old-copy");
        await cp(victim.dataDir, oldCopy, { recursive: true });
        const n1 = cluster.node("n1").client as Clients;
        const n3 = cluster.node("n3").client as Clients;
        // Writes while it is down, then every log compacted: the refill must be by snapshot.
        for (let i = 0; i < 40; i++) await put(i % 2 === 0 ? n1 : n3, `during-${i}`, `d${i}`);
        for (const c of [n1, n3]) {
          for (const shard of shards) {
            await c.call(c.admin, "SnapshotShard", { shard_id: shard });
          }
        }
        await rm(victim.dataDir, { recursive: true, force: true });
        const back = await cluster.start("n2");
        const c2 = back.client as Clients;
        const sampler = sampleHealth("n2", back.server?.http, n1);
        const view = await clusterView(c2);
        assert.notEqual(view.incarnation, oldIncarnation, "a wiped directory is a new incarnation");

        // It rejoins: the meta group, then every shard it replicates, takes it back, and every
        // node's /health returns to healthy (a shard missing a replica is degraded).
        await cluster.ready(60_000);
        for (const n of cluster.nodes) {
          await eventually(
            `${n.id} /health is healthy`,
            async () => (await health(n.server?.http)) === "healthy",
            90_000,
          );
        }
        const broken = await sampler.stop();
        assert.deepEqual(broken, [], "the rejoining node read healthy before it was refilled");
        assert.ok(
          back.server?.lines.some((l) =>
            l.includes("the cluster records this node's new incarnation"),
          ),
          "the node asked to rejoin",
        );
        const installs = (back.server?.lines ?? []).filter((l) =>
          l.includes("installed from the leader's snapshot"),
        );
        assert.ok(installs.length >= shards.size, `${installs.length} snapshot installs`);
        assert.ok(
          !back.server?.lines.some((l) => l.includes('"level":"ERROR"')),
          back.server?.lines.filter((l) => l.includes('"level":"ERROR"')).join("\n"),
        );

        // Writes go on through the rejoined node, and every acknowledged write is on every
        // replica, read from each node's own copy (serializable).
        await put(c2, "after", "ok");
        await everyReplicaHolds(cluster, acknowledged);
        // Each shard's group lists three replicas on three nodes, the rejoined one among them.
        const shardsView = (await clusterView(c2)).shards.filter((s) => shards.has(s.id));
        assert.equal(shardsView.length, shards.size);
        for (const s of shardsView)
          assert.deepEqual([...s.replicas].sort(), ["n1", "n2", "n3"], `shard ${s.id}`);

        // The old copy restored after the rejoin: its incarnation is retired, and the node
        // stops with CAIRN_ERR_LOST_STATE (exit 1) instead of serving stale state.
        await cluster.stop("n2");
        await rm(victim.dataDir, { recursive: true, force: true });
        await cp(oldCopy, victim.dataDir, { recursive: true });
        await assertStopsOnLostState(cluster, "n2");
        await everyReplicaHolds(cluster, acknowledged);
        await cluster.stopAll();
      } finally {
        await cluster.killAll();
      }
    },
  );

  it(
    "the first seed, wiped, rejoins its cluster: it does not found a second one",
    { timeout: 120_000 },
    async () => {
      const cluster = await LocalCluster.create(join(dir, "first-seed"));
      try {
        await cluster.startAll();
        await cluster.ready();
        const n2 = cluster.node("n2").client as Clients;
        const { acknowledged, put } = acknowledgedPuts();
        await put(n2, "before", "v");
        const clusterId = (await clusterView(n2)).cluster_id;
        assert.notEqual(clusterId, "");

        const first = cluster.node("n1");
        await cluster.stop("n1");
        await rm(first.dataDir, { recursive: true, force: true });
        // bootstrap_expect 1, as on a cluster founded on one node and grown by joins: the first
        // seed sees enough members at once, itself, before gossip reached the others.
        const back = await cluster.start("n1", { CAIRN_CLUSTER_BOOTSTRAP_EXPECT: "1" });
        const c1 = back.client as Clients;
        let joined = "";
        await eventually(
          "n1 knows a cluster",
          async () => {
            joined = (await clusterView(c1)).cluster_id;
            return joined !== "";
          },
          60_000,
        );
        assert.equal(joined, clusterId, "n1 founded a second cluster beside its seeds'");
        assert.ok(
          !back.server?.lines.some((l) => l.includes("founded the cluster")),
          "n1 founded a cluster again",
        );
        // It serves the cluster's data, not an empty copy of its own.
        await cluster.ready(60_000);
        assert.equal(await readBackDifference(c1, acknowledged), null);
        await cluster.stopAll();
      } finally {
        await cluster.killAll();
      }
    },
  );
});
