/**
 * An elastic cluster (design.md §5.2), with real processes on loopback: a cluster founded on one
 * node grows to four (each node started with the seeds joins, becomes active and takes its share;
 * every shard and the meta group grow to three replicas); a member is decommissioned through the
 * CLI (every replica moves off it, nothing acknowledged is lost), stopped, and removed for good:
 * its data directory never serves again, and a new node under its id (an empty data directory)
 * joins as a new member. A dead member's replicas are re-created. (Moves under SIGKILL at
 * each of their steps: cluster-move-crash.test.ts; growing 3 → 5 and shrinking back under a
 * checked workload: the chaos smoke's grow-shrink run.)
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { readdir, rm, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { describe, it } from "node:test";
import { type ClientReadableStream, Metadata } from "@grpc/grpc-js";
import {
  acknowledgedPuts,
  clusterView,
  eventually,
  type LocalCluster,
  readBackDifference,
  withLocalCluster,
} from "../support/cluster-process.ts";
import { CairnClient } from "../../src/client/index.ts";
import { samples } from "../ops/prom-text.ts";
import { grpcError } from "../support/grpc-client.ts";
import { cleanEnv, runCairn } from "../support/server-process.ts";

const ROOT = join(import.meta.dirname, "..", "..");
const CAIRN = join(ROOT, "bin", "cairn");

/** The view's members as `id=state` strings, and the replicas the cluster places on each. */
async function members(
  c: Parameters<typeof clusterView>[0],
): Promise<{ states: string[]; replicas: Map<string, number> }> {
  const view = (await clusterView(c)) as unknown as {
    nodes: { id: string; member_state: string; replicas: number }[];
  };
  return {
    states: view.nodes.map((n) => `${n.id}=${n.member_state}`).sort(),
    replicas: new Map(view.nodes.map((n) => [n.id, n.replicas])),
  };
}

async function memberStates(c: Parameters<typeof clusterView>[0]): Promise<string[]> {
  return (await members(c)).states;
}

/** The first line `cairn ARGS` prints (a watch's first view), then the process is stopped. */
function firstLine(args: readonly string[]): Promise<string> {
  const proc = spawn(CAIRN, [...args], { cwd: ROOT, env: cleanEnv({}) });
  let out = "";
  return new Promise((resolve, reject) => {
    proc.stdout.on("data", (d: Buffer) => {
      out += d.toString();
      const end = out.indexOf("\n");
      if (end < 0) return;
      proc.kill();
      resolve(out.slice(0, end));
    });
    proc.once("exit", (code) => reject(new Error(`cairn ${args.join(" ")} exited ${code}`)));
  });
}

/** The /health active shards of the node at `http`: the replicas it holds. */
async function activeShards(http: string | undefined): Promise<number> {
  const report = (await (await fetch(`http://${http}/health`)).json()) as { active_shards: number };
  return report.active_shards;
}

/** The peers a node's /metrics has series of (cairn_raft_*_sent_total{peer}), sorted. */
async function peerSeries(http: string | undefined): Promise<string[]> {
  const all = samples(await (await fetch(`http://${http}/metrics`)).text());
  const peers = all.flatMap((s) => (s.labels["peer"] === undefined ? [] : [s.labels["peer"]]));
  return [...new Set(peers)].sort();
}

/** The messages of a node's log lines about peer `peer` (a `peer` field), in order. */
function peerMessages(lines: readonly string[] | undefined, peer: string): string[] {
  return (lines ?? []).flatMap((line) => {
    try {
      const rec = JSON.parse(line) as { message?: string; fields?: Record<string, unknown> };
      return rec.fields?.["peer"] === peer && rec.message !== undefined ? [rec.message] : [];
    } catch {
      return [];
    }
  });
}

/** A node's cairn_cluster_shards_moving and cairn_cluster_shards_underreplicated. */
async function placementWork(
  http: string | undefined,
): Promise<{ moving: number; underReplicated: number }> {
  const all = samples(await (await fetch(`http://${http}/metrics`)).text());
  const gauge = (name: string): number => {
    const sample = all.find((x) => x.name === name);
    assert.ok(sample !== undefined, `${name} is exported`);
    return sample.value;
  };
  return {
    moving: gauge("cairn_cluster_shards_moving"),
    underReplicated: gauge("cairn_cluster_shards_underreplicated"),
  };
}

type Clients = NonNullable<LocalCluster["nodes"][number]["client"]>;

/** The client of running node `id`. */
function clientOf(cluster: LocalCluster, id: string): Clients {
  const c = cluster.node(id).client;
  assert.ok(c !== null, `${id} runs`);
  return c;
}

/**
 * Four node slots with `founders` (n1..n3 unless given) founding the cluster (16 shards, a
 * tolerance of one replica; `env` over that), `body` run on them, then every node killed and the
 * directory removed.
 */
async function withCluster(
  name: string,
  env: Readonly<Record<string, string>>,
  body: (cluster: LocalCluster) => Promise<void>,
  founders: readonly string[] = ["n1", "n2", "n3"],
): Promise<void> {
  const clusterEnv = {
    CAIRN_CLUSTER_TOTAL_SHARDS: "16",
    CAIRN_CLUSTER_REBALANCE_TOLERANCE: "1",
    // Balancing moves unpaced in practice (20 a second, within max_moves): the default 120 a
    // minute added ~3 s to each wait for a new member's share (the pacing is the allocator
    // loop's test's, test/node/allocator-loop.test.ts).
    CAIRN_CLUSTER_REBALANCE_MOVES_PER_MINUTE: "1200",
    CAIRN_CLUSTER_BOOTSTRAP_EXPECT: String(founders.length),
    ...env,
  };
  await withLocalCluster(name, 4, clusterEnv, async (cluster) => {
    await Promise.all(founders.map((id) => cluster.start(id)));
    await cluster.ready();
    await body(cluster);
  });
}

/** Every acknowledged write reads back through each of nodes `ids`. */
async function readsBack(
  cluster: LocalCluster,
  ids: readonly string[],
  acknowledged: ReadonlyMap<string, string>,
): Promise<void> {
  for (const id of ids) {
    assert.equal(
      await readBackDifference(clientOf(cluster, id), acknowledged),
      null,
      `through ${id}`,
    );
  }
}

/**
 * How a Meta.WatchCluster call on `c` ends (its views read and dropped): the error it ends with,
 * or code 0 if the node ends it cleanly.
 */
function watchEnd(c: Clients): Promise<ReturnType<typeof grpcError>> {
  return new Promise((resolve) => {
    const call = (
      c.meta as unknown as { WatchCluster(req: object): ClientReadableStream<unknown> }
    ).WatchCluster({});
    call.on("data", () => undefined);
    call.once("error", (err) => resolve(grpcError(err)));
    call.once("end", () => resolve({ code: 0, details: "", metadata: new Metadata() }));
  });
}

/** The long case below runs with CAIRN_ELASTIC_LONG=1 (npm run test:elastic-long). */
const LONG = process.env["CAIRN_ELASTIC_LONG"] === "1";

describe("elastic cluster (real processes)", () => {
  it(
    "a cluster founded on one node grows to four and evens its replicas; a member is decommissioned and removed (it stops by itself), and a new node takes its id",
    { timeout: 240_000 },
    async () => {
      const grow = async (cluster: LocalCluster): Promise<void> => {
        const n1 = cluster.node("n1");
        const c1 = n1.client;
        assert.ok(c1 !== null && n1.server !== null);
        const { acknowledged, put } = acknowledgedPuts();
        // Founded alone: one replica a shard, the meta group a single voter.
        for (let i = 0; i < 64; i++) await put(c1, `k${i}`, `v${i}`);
        assert.ok((await clusterView(c1)).shards.every((s) => s.replicas.length === 1));

        // n2..n4 join: admitted, caught up on the meta group, active. Each shard, the meta
        // group too, grows to the replication factor (3), and the replicas even out.
        // n4 is configured with another replication factor: the cluster's, fixed at its
        // founding, applies, and n4 says so.
        await Promise.all([
          cluster.start("n2"),
          cluster.start("n3"),
          cluster.start("n4", { CAIRN_CLUSTER_REPLICATION_FACTOR: "5" }),
        ]);
        const n4 = cluster.node("n4");
        assert.ok(n4.client !== null && n4.server !== null);
        await eventually(
          "n2..n4 are active members",
          async () => (await memberStates(c1)).join() === "n1=active,n2=active,n3=active,n4=active",
          60_000,
        );
        const warned = n4.server.lines.find((l) => l.includes("replication_factor, fixed at"));
        assert.ok(warned !== undefined, n4.server.lines.join("\n"));
        assert.match(warned, /"level":"WARN"/);
        assert.match(warned, /"cluster_replication_factor":3,"replication_factor":5/);
        // 16 shards × 3 replicas over 4 nodes, within the tolerance (1): 12 or 13 each, in
        // every node's view: a node a shard moved off shows it where the meta group places it
        // (its old replica, removed, may lose its leader and keep the move's configuration).
        const evenEverywhere = async (): Promise<boolean> => {
          const counts = [...(await members(c1)).replicas.values()];
          for (const id of ["n1", "n2", "n3", "n4"]) {
            const shards = (await clusterView(clientOf(cluster, id))).shards;
            const three = shards.every(
              (s) => s.replicas.length === 3 && new Set(s.replicas).size === 3,
            );
            if (!shards.some((s) => s.id === 0) || !three) return false;
          }
          return counts.length === 4 && Math.max(...counts) - Math.min(...counts) <= 1;
        };
        await eventually(
          "every shard on three distinct nodes, replicas even, in every node's view",
          evenEverywhere,
          120_000,
        );
        assert.ok((await activeShards(n4.server?.http)) >= 8, "n4's /health counts its replicas");
        // Every node is healthy: a replica moved away (dormant on its old node) is not counted.
        await eventually("every node is healthy", () => cluster.allHealthy(), 30_000);
        // Writes go on, through the new node too; every acknowledged key reads back everywhere.
        for (let i = 64; i < 96; i++) await put(n4.client, `k${i}`, `v${i}`);
        await readsBack(cluster, ["n1", "n2", "n3", "n4"], acknowledged);
        // Every node's view lists every shard, those it holds no replica of (a quarter of them)
        // where the meta group places them; `cairn cluster` names each one's leader, asking the
        // other members for those n1 does not know, and counts each member's leaders.
        const ids = async (id: string): Promise<string> =>
          (await clusterView(clientOf(cluster, id))).shards.map((s) => s.id).join();
        // (Asserted rather than answered false, so that a timeout says what each node listed.)
        await eventually("every node's view lists every shard", async () => {
          const all = await Promise.all(["n1", "n2", "n3", "n4"].map(ids));
          assert.ok(
            all.every((v) => v === all[0]),
            `views' shards: ${all.map((v, i) => `n${i + 1} [${v}]`).join("; ")}`,
          );
          return true;
        });
        await eventually("cairn cluster names every shard's leader, leaders even", async () => {
          const shown = await runCairn(["cluster", "--endpoints", n1.rpc, "--output", "json"]);
          assert.equal(shown.code, 0, shown.err);
          const v = JSON.parse(shown.out) as {
            node: string;
            merged_from: { node: string; epoch: number }[];
            nodes: { leaders: number }[];
            shards: { id: number; leader: string }[];
          };
          // n1's view (its epoch), with the leaders it does not know from the others' views.
          assert.equal(v.node, "n1");
          assert.ok(v.merged_from.every((m) => m.node !== "n1" && m.epoch > 0));
          const led = v.nodes.reduce((sum, n) => sum + n.leaders, 0);
          const unled = v.shards.filter((s) => s.leader === "").map((s) => s.id);
          assert.ok(
            v.shards.length === 16 && unled.length === 0 && led === v.shards.length,
            `${v.shards.length} shards, no leader: [${unled.join()}], members' leaders ${led}`,
          );
          // Leaders even too, within the tolerance (the allocator's prefer-leader, then leader
          // spreading): answered false until then, a transfer may be under way.
          const leads = v.nodes.map((n) => n.leaders);
          return leads.length === 4 && Math.max(...leads) - Math.min(...leads) <= 1;
        });
        // A watch follows the other members beside n1: its first view names every leader too.
        await eventually("cairn cluster --watch names every shard's leader", async () => {
          const line = await firstLine(["cluster", "--watch", "--endpoints", n1.rpc, "-w", "json"]);
          const v = JSON.parse(line) as { shards: { leader: string }[] };
          return v.shards.length === 16 && v.shards.every((s) => s.leader !== "");
        });
        // The client library's transferLeader with no endpoint asks the shard's leader: n1, the
        // client's one endpoint, holds no replica of a quarter of the shards and refuses those.
        // Two such shards there and back, four calls: a call sent to any member in turn (as one
        // with no key was) would have come to n1 once. The leaders stay as even as they were.
        const lib = new CairnClient({ endpoints: [n1.rpc], timeoutMs: 15_000 });
        try {
          type Led = { id: number; leader: string; replicas: readonly string[] };
          let away: Led[] = [];
          await eventually("the client's view has two led shards with no replica on n1", () => {
            away = (lib.view?.shards ?? []).filter(
              (s) => s.leader !== "" && !s.replicas.includes("n1"),
            );
            return Promise.resolve(away.length >= 2);
          });
          for (const { id, leader, replicas } of away.slice(0, 2)) {
            const to = replicas.find((r) => r !== leader);
            assert.ok(to !== undefined);
            assert.equal(await lib.transferLeader(id, to), to);
            assert.equal(await lib.transferLeader(id, leader), leader);
          }
        } finally {
          lib.close();
        }

        // A decommission cancelled: n3 decommissioning, then active again. (Through the Admin
        // API, one call after the other: the recommission commits long before n3's dozen
        // replicas could all have moved, four at a time, each a learner caught up and promoted.)
        const decommissioning = await c1.call(c1.admin, "DecommissionNode", { node_id: "n3" });
        assert.equal(decommissioning["state"], "decommissioning");
        const recommissioned = await c1.call(c1.admin, "RecommissionNode", { node_id: "n3" });
        assert.equal(recommissioned["state"], "active");
        // Asked again, or its standing asked, nothing changes.
        for (const action of ["recommission", "status"]) {
          const run = await runCairn(["node", action, "n3", "--endpoints", n1.rpc, "-w", "json"]);
          assert.equal(run.code, 0, run.err);
          assert.equal((JSON.parse(run.out) as { state: string }).state, "active");
        }
        // An active member is not removed: the refusal says what to do first.
        const early = await runCairn(["node", "remove", "n3", "--endpoints", n1.rpc]);
        assert.notEqual(early.code, 0);
        assert.match(early.err, /member n3 is active: decommission it first/);
        // The replicas moved off it meanwhile even out again.
        await eventually("n3 active, replicas even again", evenEverywhere, 120_000);

        // n1 has sent n2 Raft frames: its per-peer series name n2 (until n2 leaves for good).
        assert.ok((await peerSeries(n1.server.http)).includes("n2"), "n1's series of n2");
        // A client watching n2's view: once n2 is decommissioned (out of the meta group, its
        // view no longer changes), the watch ends UNAVAILABLE, CAIRN_ERR_NOT_MEMBER.
        const n2Watch = watchEnd(clientOf(cluster, "n2"));
        // Decommission n2 through the CLI, asking n2 itself; it waits until n2 holds no replica.
        // (Its polls went to n2, which stopped answering them once it left the meta group: the
        // wait ended in a timeout, exit 3. They go to another member now.)
        const endpoints = ["--endpoints", n1.rpc];
        const decommission = await runCairn([
          "node",
          "decommission",
          "n2",
          "--wait",
          "--endpoints",
          cluster.node("n2").rpc,
        ]);
        assert.equal(decommission.code, 0, `${decommission.err}\n${decommission.out}`);
        assert.match(decommission.out, /n2: decommissioned, 0 replica\(s\) left/);
        // n1's view follows the meta state it applied within its publishing interval (100 ms).
        await eventually("n1's view has n2 decommissioned", async () =>
          (await memberStates(c1)).includes("n2=decommissioned"),
        );
        // Gone for good, n2 takes n1's link to it with it: its connections closed, nothing of
        // it kept (members that come and go leave nothing behind).
        await eventually("n1 dropped its link to n2", async () =>
          peerMessages(n1.server?.lines, "n2").includes(
            "raft peer left the cluster; its connections closed",
          ),
        );
        for (const ended of [await n2Watch, await watchEnd(clientOf(cluster, "n2"))]) {
          assert.equal(ended.code, 14, ended.details);
          assert.equal(ended.metadata.get("cairn-error-code")[0], "CAIRN_ERR_NOT_MEMBER");
          assert.match(ended.details, /n2 was decommissioned .*watch another node/);
        }
        // It serves nothing, so its readiness probe says so (a StatefulSet stops routing to it).
        const n2Quick = await fetch(`http://${cluster.node("n2").server?.http}/health/quick`);
        assert.equal(n2Quick.status, 503, "a decommissioned node's /health/quick");
        const staleView = await runCairn(["cluster", "--endpoints", cluster.node("n2").rpc]);
        assert.notEqual(staleView.code, 0);
        assert.match(staleView.err, /n2 was decommissioned/);
        const nextEndpoint = await runCairn([
          "cluster",
          "--endpoints",
          `${cluster.node("n2").rpc},${n1.rpc}`,
        ]);
        assert.equal(nextEndpoint.code, 0, nextEndpoint.err);
        assert.match(nextEndpoint.out, /^n2\tdecommissioned\t/m);
        // A member command asked of n2 is refused at once, naming why: n2 no longer follows the
        // meta group. (It waited 10 s for a sync that never came, and the client's 5 s ran out
        // first: status said "unavailable: Deadline exceeded after 4.945s", and remove, a write,
        // "write outcome unknown ... read the key to find out", exit 6. Then the client asked
        // n2 again and again until its time ran out, refused the same each time: the trailer
        // cairn-left-cluster ends it at the first answer, well before a 60 s --timeout.)
        for (const action of ["status", "remove"]) {
          const t0 = performance.now();
          const asked = await runCairn([
            "node",
            action,
            "n2",
            "--endpoints",
            cluster.node("n2").rpc,
            "--timeout",
            "60000",
          ]);
          assert.ok(performance.now() - t0 < 30_000, `${action} asked n2 until its timeout`);
          assert.equal(asked.code, 3, `${action}: ${asked.err}`);
          assert.match(
            asked.err,
            /unavailable: node n2 was decommissioned from cluster .*another node/,
          );
        }
        // Too late to cancel: it has left the meta group, and comes back only as a new member.
        const late = await runCairn(["node", "recommission", "n2", ...endpoints]);
        assert.notEqual(late.code, 0);
        assert.match(late.err, /member n2 is decommissioned: its decommission is complete/);
        // Its replicas moved off are deleted (replica GC): it says so in its log, and its
        // shards/ directory keeps only the meta group's (shard 0). (An engine makes its
        // directory at its first flush: with this little data there may be none at all.)
        const n2Shards = join(cluster.node("n2").dataDir, "shards");
        const n2Log = (): string => cluster.node("n2").server?.lines.join("\n") ?? "";
        await eventually(
          "n2 removed its moved-off replicas",
          async () =>
            /replica moved off this node removed/.test(n2Log()) &&
            (await readdir(n2Shards).catch(() => [])).every((name) => name === "0"),
          60_000,
        );
        // Removed for good while it still runs (the operator skipped "stop it first"): not
        // listed, and n2 learns it from its peers' views and stops by itself, as etcd's
        // removed member does.
        const remove = await runCairn(["node", "remove", "n2", ...endpoints, "--output", "json"]);
        assert.equal(remove.code, 0, remove.err);
        assert.equal((JSON.parse(remove.out) as { state: string }).state, "removed");
        await eventually(
          "n2 is not listed",
          async () => !(await memberStates(c1)).some((m) => m.startsWith("n2=")),
        );
        const removed = cluster.node("n2");
        const removedExit = await Promise.race([
          removed.server?.exited,
          new Promise<null>((resolve) => setTimeout(() => resolve(null), 30_000).unref()),
        ]);
        assert.equal(removedExit?.code, 1, "the removed n2 stops by itself within 30 s");
        assert.match(
          removed.server?.lines.join("\n") ?? "",
          /this node was removed from its cluster; it stops.*CAIRN_ERR_NODE_REMOVED/,
        );
        await cluster.stop("n2", "SIGKILL"); // exited already: keeps its log lines
        // Gone for good, n2 left no series on the others' /metrics: members that come and go
        // do not each leave theirs for ever.
        for (const id of ["n1", "n3", "n4"]) {
          const peers = await peerSeries(cluster.node(id).server?.http);
          assert.ok(peers.length > 0 && !peers.includes("n2"), `${id}'s peers: ${peers.join()}`);
        }
        // Nothing was lost, and the three left take writes.
        for (let i = 96; i < 112; i++) await put(c1, `k${i}`, `v${i}`);
        await readsBack(cluster, ["n1", "n3", "n4"], acknowledged);
        // n2 restarted on its old data directory: that member is retired for good, it stops.
        const back = await cluster.start("n2");
        const exit = await back.server?.exited;
        assert.equal(exit?.code, 1);
        assert.match(back.server?.lines.join("\n") ?? "", /CAIRN_ERR_NODE_REMOVED/);
        back.server = null;
        back.client?.close();
        back.client = null;
        const again = await runCairn(["node", "decommission", "n3", ...endpoints]);
        assert.notEqual(again.code, 0, "decommissioning would leave 2 active members");
        assert.match(again.err, /would leave 2 active member/);

        // A new node under the id n2 (an empty data directory: a StatefulSet's pod scaled down
        // and up again, its volume deleted) joins as a new member, takes its share and serves.
        await rm(back.dataDir, { recursive: true, force: true });
        const reborn = await cluster.start("n2");
        await eventually(
          "the new n2 is active and holds its share",
          async () => {
            const m = await members(c1);
            const counts = [...m.replicas.values()].filter((n) => n > 0);
            return (
              m.states.join() === "n1=active,n2=active,n3=active,n4=active" &&
              counts.length === 4 &&
              Math.max(...counts) - Math.min(...counts) <= 1
            );
          },
          120_000,
        );
        assert.match(
          reborn.server?.lines.join("\n") ?? "",
          /admitted this node as a joining member/,
        );
        // n1 reaches the new n2 on a new link, connected after the old one was dropped.
        const aboutN2 = peerMessages(n1.server.lines, "n2");
        const dropped = aboutN2.lastIndexOf("raft peer left the cluster; its connections closed");
        assert.ok(
          dropped >= 0 && aboutN2.indexOf("raft peer connected", dropped) > dropped,
          aboutN2.join("; "),
        );
        assert.ok(reborn.client !== null);
        for (let i = 112; i < 120; i++) await put(reborn.client, `k${i}`, `v${i}`);
        await readsBack(cluster, ["n1", "n2", "n3", "n4"], acknowledged);
      };
      await withCluster("elastic", { CAIRN_CLUSTER_REBALANCE_MAX_MOVES: "4" }, grow, ["n1"]);
    },
  );

  it(
    "a member killed for good is marked dead after dead_after; its replicas are re-created, and a second failure loses nothing",
    { timeout: 240_000 },
    async () => {
      await withCluster("dead", { CAIRN_CLUSTER_DEAD_AFTER_MS: "3000" }, async (cluster) => {
        const c1 = (): Clients => clientOf(cluster, "n1");
        const { acknowledged, put } = acknowledgedPuts();
        for (let i = 0; i < 48; i++) await put(c1(), `d${i}`, `v${i}`);
        await cluster.start("n4");
        await eventually(
          "n4 holds its share",
          async () => {
            const counts = [...(await members(c1())).replicas.values()];
            return counts.length === 4 && Math.max(...counts) - Math.min(...counts) <= 1;
          },
          90_000,
        );
        await cluster.stop("n4", "SIGKILL");
        await eventually(
          "n4 is dead and holds nothing",
          async () => {
            const m = await members(c1());
            return m.states.includes("n4=dead") && m.replicas.get("n4") === 0;
          },
          60_000,
        );
        // Every shard is back on three live replicas (n1, n2 and n3 hold them all): in every
        // live node's view, since a node lists a shard it does not hold yet where the meta group
        // places it from its repair's start, and only the holders list the group's voters (a
        // repair still under way has n4 among them, and a second failure then leaves the shard
        // one voter of three: seen 2 in 7 runs when this waited on n1's view alone).
        await eventually(
          "every shard has three live replicas",
          async () => {
            const listed = new Set<number>();
            for (const id of ["n1", "n2", "n3"]) {
              const view = (await clusterView(clientOf(cluster, id))) as unknown as {
                shards: { id: number; replicas: string[] }[];
              };
              const repaired = view.shards.every(
                (s) => s.replicas.length === 3 && !s.replicas.includes("n4"),
              );
              if (view.shards.length === 0 || !repaired) return false;
              listed.add(view.shards.length);
              // The nodes' metrics say the same: no move under way, no shard left to repair.
              const work = await placementWork(cluster.node(id).server?.http);
              if (work.moving !== 0 || work.underReplicated !== 0) return false;
            }
            return listed.size === 1;
          },
          90_000,
        );
        // A member restarted since n4 died never heard of n4 by gossip: its view still lists
        // n4, dead, as the meta group records it (else no view shows the member to remove once
        // every node restarted: chaos seed 203).
        await cluster.stop("n1", "SIGKILL");
        await cluster.start("n1");
        await eventually(
          "n1's view lists n4 dead",
          async () => {
            const view = (await clusterView(clientOf(cluster, "n1"))) as unknown as {
              nodes: { id: string; state: string; member_state: string }[];
            };
            const n4 = view.nodes.find((n) => n.id === "n4");
            return n4?.state === "dead" && n4.member_state === "dead";
          },
          60_000,
        );
        // A second failure: two of three replicas remain, and nothing is unavailable or lost.
        await cluster.stop("n3", "SIGKILL");
        for (let i = 48; i < 56; i++) await put(c1(), `d${i}`, `v${i}`);
        // Shards created once n3 is dead are placed on n1 and n2 only: one replica short of the
        // factor too (not counted so in the gauge below before: CI, 2026-12-05).
        await eventually(
          "n1's view lists n3 dead",
          async () => {
            const view = (await clusterView(c1())) as unknown as {
              nodes: { id: string; member_state: string }[];
            };
            return view.nodes.find((n) => n.id === "n3")?.member_state === "dead";
          },
          60_000,
        );
        for (let i = 56; i < 72; i++) await put(c1(), `d${i}`, `v${i}`);
        await readsBack(cluster, ["n1", "n2"], acknowledged);
        // Once n3 is dead too, no third active member can take its replicas: every shard, the
        // meta group included, stays under-replicated, and n1's and n2's metrics say so.
        await eventually(
          "n1 and n2 count every shard under-replicated",
          async () => {
            for (const id of ["n1", "n2"]) {
              const shards = (await clusterView(clientOf(cluster, id))).shards.length;
              const work = await placementWork(cluster.node(id).server?.http);
              if (work.moving !== 0 || work.underReplicated !== shards) return false;
            }
            return true;
          },
          60_000,
        );
        const removed = await runCairn([
          "node",
          "remove",
          "n4",
          "--endpoints",
          cluster.node("n1").rpc,
        ]);
        assert.equal(removed.code, 0, removed.err);
        assert.match(removed.out, /n4: removed, 0 replica\(s\) left/);
      });
    },
  );
  it(
    "a node whose disk is nearly full takes no new replica until it has room again",
    { timeout: 180_000 },
    async () => {
      await withCluster("disk", {}, async (cluster) => {
        const c1 = clientOf(cluster, "n1");
        const http1 = cluster.node("n1").server?.http;
        // n4's disk reads 97 % used (a file stands in for statfs: testing only).
        const usage = join(cluster.node("n4").dataDir, "..", "n4-disk-used");
        await writeFile(usage, "97\n");
        const n4 = await cluster.start("n4", { CAIRN_TESTING_DISK_USED_PERCENT_FILE: usage });
        assert.ok(n4.client !== null);
        type Node = { id: string; member_state: string; replicas: number; disk_full?: boolean };
        const n4Seen = async (): Promise<Node | undefined> =>
          ((await clusterView(c1)) as unknown as { nodes: Node[] }).nodes.find(
            (n) => n.id === "n4",
          );
        await eventually(
          "n4 active, its disk recorded full",
          async () => {
            const m = await n4Seen();
            return m?.member_state === "active" && m.disk_full === true;
          },
          60_000,
        );
        assert.match(n4.server?.lines.join("\n") ?? "", /disk usage read from a file/);
        // Shown in /health's nodes[], the metric, and `cairn cluster`'s STATE.
        const health = (await (await fetch(`http://${http1}/health`)).json()) as { nodes: Node[] };
        assert.equal(health.nodes.find((n) => n.id === "n4")?.disk_full, true);
        assert.equal(health.nodes.find((n) => n.id === "n2")?.disk_full, undefined);
        const metric = samples(await (await fetch(`http://${http1}/metrics`)).text()).find(
          (x) => x.name === "cairn_cluster_members_disk_full",
        );
        assert.equal(metric?.value, 1);
        const shown = await runCairn(["cluster", "--endpoints", cluster.node("n1").rpc]);
        // (",build-N" while the cluster version still climbs to the members' builds, a version
        // a pass: docs/operations.md, "Upgrading".)
        assert.match(shown.out, /\nn4\tactive,disk-full(,build-\d+)?\talive\t0\t/);
        // A decommission whose replicas could only go to n4 is refused, naming why.
        const stuck = await runCairn(["node", "decommission", "n2", "--endpoints", n4.rpc]);
        assert.notEqual(stuck.code, 0);
        assert.match(
          stuck.err,
          /would leave 2 active member\(s\) with room on their disk .*full: n4/,
        );
        // Every shard created now goes on the three members with room (there were none but the
        // meta group's before: nothing could move onto n4 before its report).
        const { acknowledged, put } = acknowledgedPuts();
        for (let i = 0; i < 64; i++) await put(c1, `k${i}`, `v${i}`);
        const created = (await clusterView(c1)).shards.filter((s) => s.id !== 0);
        assert.ok(created.length >= 12, `${created.length} shards`);
        for (const s of created) assert.ok(!s.replicas.includes("n4"), `shard ${s.id} on n4`);
        // (That no move picks it either is the allocator's, test/cluster/allocator.test.ts.)
        assert.equal((await n4Seen())?.replicas, 0);
        // Room again: n4 reports it, and takes its share (48 replicas over 4, tolerance 1).
        await writeFile(usage, "40\n");
        await eventually(
          "n4 has room and holds its share",
          async () => {
            const m = await n4Seen();
            const work = await placementWork(http1);
            return (
              m !== undefined &&
              m.disk_full !== true &&
              m.replicas >= 11 &&
              work.moving === 0 &&
              work.underReplicated === 0
            );
          },
          120_000,
        );
        await readsBack(cluster, ["n4"], acknowledged);
      });
    },
  );
  it(
    "a member decommissioned while it is down and restarted on its data directory serves nothing, is not counted, and stops once removed",
    { timeout: 240_000 },
    async () => {
      await withCluster("decommissioned-down", {}, async (cluster) => {
        const c1 = clientOf(cluster, "n1");
        const { acknowledged, put } = acknowledgedPuts();
        // Shards are created by their first write: then n4 joins, and takes its share.
        for (let i = 0; i < 32; i++) await put(c1, `d${i}`, `v${i}`);
        await cluster.start("n4");
        await eventually(
          "n4 is active and holds replicas",
          async () =>
            (await memberStates(c1)).includes("n4=active") &&
            ((await members(c1)).replicas.get("n4") ?? 0) > 0,
          60_000,
        );
        await readsBack(cluster, ["n4"], acknowledged);

        // n4 goes down, and is decommissioned meanwhile: its replicas are re-created elsewhere.
        await cluster.stop("n4", "SIGKILL");
        const endpoints = ["--endpoints", cluster.node("n1").rpc];
        const decommission = await runCairn(["node", "decommission", "n4", "--wait", ...endpoints]);
        assert.equal(decommission.code, 0, decommission.err + "\nOUT:" + decommission.out);
        assert.match(decommission.out, /n4: decommissioned, 0 replica\(s\) left/);
        // Writes n4's old replicas never see.
        for (let i = 0; i < 32; i++) await put(c1, `d${i}`, `after-${i}`);

        // Restarted on its data directory (which still says active), it learns from the meta
        // group that it left, and serves nothing: not its stale copy, not a write.
        const back = await cluster.start("n4");
        const c4 = clientOf(cluster, "n4");
        await eventually(
          "n4 refuses requests: it was decommissioned",
          async () => {
            try {
              await c4.call(c4.kv, "Get", { key: Buffer.from("d0"), consistency: "SERIALIZABLE" });
              return false;
            } catch (err) {
              return /n4 was decommissioned/.test(grpcError(err).details);
            }
          },
          30_000,
        );
        const log = (): string => back.server?.lines.join("\n") ?? "";
        assert.match(log(), /decommissioned while it was down: it serves no requests/);
        for (const method of ["Get", "Put"] as const) {
          const err = await c4
            .call(c4.kv, method, { key: Buffer.from("d1"), value: Buffer.from("x") })
            .then(() => null, grpcError);
          assert.match(err?.details ?? "served", /n4 was decommissioned/, method);
        }
        // It is no member: n1 does not count it though gossip sees it alive.
        await eventually("n1 counts 3 live members", async () => {
          const all = samples(
            await (await fetch(`http://${cluster.node("n1").server?.http}/metrics`)).text(),
          );
          return all.find((x) => x.name === "swim_cluster_size")?.value === 3;
        });

        // Removed for good while it runs: it stops by itself, as one decommissioned running.
        const remove = await runCairn(["node", "remove", "n4", ...endpoints]);
        assert.equal(remove.code, 0, remove.err);
        const exit = await Promise.race([
          back.server?.exited,
          new Promise<null>((resolve) => setTimeout(() => resolve(null), 30_000).unref()),
        ]);
        assert.equal(exit?.code, 1, "the removed n4 stops by itself within 30 s");
        assert.match(log(), /CAIRN_ERR_NODE_REMOVED/);
        await cluster.stop("n4", "SIGKILL");
        await readsBack(cluster, ["n1", "n2", "n3"], acknowledged);
      });
    },
  );
  it(
    "a member paused long enough to be marked dead and removed stops by itself once it runs again",
    { timeout: 240_000 },
    async () => {
      await withCluster(
        "paused-removed",
        { CAIRN_CLUSTER_DEAD_AFTER_MS: "3000" },
        async (cluster) => {
          const c1 = clientOf(cluster, "n1");
          const { acknowledged, put } = acknowledgedPuts();
          for (let i = 0; i < 32; i++) await put(c1, `p${i}`, `v${i}`);
          await cluster.start("n4");
          await eventually(
            "n4 is active and holds replicas",
            async () =>
              (await memberStates(c1)).includes("n4=active") &&
              ((await members(c1)).replicas.get("n4") ?? 0) > 0,
            60_000,
          );
          // n4 is paused (a frozen VM, SIGSTOP): marked dead, its replicas re-created on n1..n3,
          // and removed by an operator who took it for gone.
          const paused = cluster.node("n4").server;
          assert.ok(paused !== null);
          paused.proc.kill("SIGSTOP");
          try {
            await eventually(
              "n4 dead, its replicas re-created",
              async () => {
                const m = await members(c1);
                const work = await placementWork(cluster.node("n1").server?.http);
                return (
                  m.states.includes("n4=dead") &&
                  m.replicas.get("n4") === 0 &&
                  work.moving === 0 &&
                  work.underReplicated === 0
                );
              },
              120_000,
            );
            const remove = await runCairn([
              "node",
              "remove",
              "n4",
              "--endpoints",
              cluster.node("n1").rpc,
            ]);
            assert.equal(remove.code, 0, remove.err);
            for (let i = 0; i < 32; i++) await put(c1, `p${i}`, `after-${i}`);
          } finally {
            paused.proc.kill("SIGCONT");
          }
          // Running again, its own state (out of the meta group once dead) still says active: it
          // ran on for good, /health/quick 200. Its peers' views tell it it was removed.
          const exit = await Promise.race([
            paused.exited,
            new Promise<null>((resolve) => setTimeout(() => resolve(null), 30_000).unref()),
          ]);
          assert.equal(
            exit?.code,
            1,
            "the removed n4 stops by itself within 30 s of running again",
          );
          assert.match(paused.lines.join("\n"), /CAIRN_ERR_NODE_REMOVED/);
          await cluster.stop("n4", "SIGKILL");
          await readsBack(cluster, ["n1", "n2", "n3"], acknowledged);
        },
      );
    },
  );
  it(
    "a member down while a node joins, which then leads the meta group, catches up once restarted (chaos seed 103)",
    { timeout: 300_000, skip: !LONG && "long run: npm run test:elastic-long" },
    async () => {
      await withCluster("behind", { CAIRN_CLUSTER_DEAD_AFTER_MS: "3000" }, async (cluster) => {
        const { acknowledged, put } = acknowledgedPuts();
        for (let i = 0; i < 32; i++) await put(clientOf(cluster, "n2"), `b${i}`, `v${i}`);
        // n1 is away while n4 joins: its meta state will not know n4.
        await cluster.stop("n1", "SIGKILL");
        await cluster.start("n4");
        // n1's replicas move off it; shard 0's go to n4 first (rendezvous placement of n1..n4),
        // which then leads the meta group: the log n1 must catch up on is n4's to send.
        await eventually(
          "n4 active and leading the meta group, n1 dead",
          async () => {
            const view = (await clusterView(clientOf(cluster, "n2"))) as unknown as {
              nodes: { id: string; member_state: string }[];
              shards: { id: number; leader: string }[];
            };
            const state = (id: string): string | undefined =>
              view.nodes.find((n) => n.id === id)?.member_state;
            return (
              state("n4") === "active" &&
              state("n1") === "dead" &&
              view.shards.find((s) => s.id === 0)?.leader === "n4"
            );
          },
          120_000,
        );
        await cluster.start("n1");
        // n1 takes n4's stream though its meta state does not know n4, and answers it at the
        // address gossip has: it learns of n4 from the meta log, and its replicas serve again.
        await eventually(
          "n1 knows n4 as active",
          async () => (await memberStates(clientOf(cluster, "n1"))).includes("n4=active"),
          60_000,
        );
        await eventually(
          "n1 healthy",
          async () =>
            (
              (await (await fetch(`http://${cluster.node("n1").server?.http}/health`)).json()) as {
                status: string;
              }
            ).status === "healthy",
          90_000,
        );
        await readsBack(cluster, ["n1", "n4"], acknowledged);
      });
    },
  );
});
