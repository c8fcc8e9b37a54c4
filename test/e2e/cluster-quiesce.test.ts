/**
 * Idle groups sleep, on three real processes (docs/architecture.md, "Idle groups sleep"): a
 * cluster whose 1024 shards all exist costs almost no CPU once idle, the Raft traffic between
 * two nodes does not grow from 100 shards to 1024, a write after the idle spell is served at
 * once, and when the node leading a third of the sleeping groups is killed, SWIM's suspicion
 * wakes them on the two others, which elect new leaders (no request needed) and serve writes;
 * once SWIM declared it dead, those groups sleep again with its replicas behind (before
 * MultiRaftOptions.nodeDown they stayed awake until it came back), and when it is back they
 * catch it up and sleep on all three.
 *
 * CPU is read from /proc/<pid>/stat (user + system time, every thread of the process), the Raft
 * traffic from each node's /metrics (cairn_raft_frames_sent_total and
 * cairn_raft_heartbeats_sent_total, n1 to n2). Measured here: 0.2-1 % of a core per node and
 * no frame at all, with 101 shards as with 1024; the same cluster with raft.quiesce false used
 * 11-12 % of a core per node idle with 1024 shards, n1 sending n2 about 3000 heartbeats a second
 * (430 with 101 shards), coalesced in 20 frames a second either way.
 */
import assert from "node:assert/strict";
import { mkdtemp, readFile, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { shardForKey } from "../../src/cluster/index.ts";
import type { Clients } from "../support/grpc-client.ts";
import {
  type ClusterNode,
  clusterView,
  eventually,
  LocalCluster,
  retryingKv,
} from "../support/cluster-process.ts";

const TOTAL_SHARDS = 1024;
/** Shards created before the first measurement. */
const FIRST = 100;
const IDS = ["n1", "n2", "n3"];
/** Clock ticks per second of /proc/<pid>/stat (USER_HZ: 100 on Linux). */
const USER_HZ = 100;

/** One key per shard 1..TOTAL_SHARDS-1 (shard 0 is the meta group, created at the founding). */
function keyPerShard(): Map<number, string> {
  const keys = new Map<number, string>();
  for (let i = 0; keys.size < TOTAL_SHARDS - 1; i++) {
    const key = `quiet-${i}`;
    const shard = shardForKey(Buffer.from(key), TOTAL_SHARDS);
    if (shard !== 0 && !keys.has(shard)) keys.set(shard, key);
  }
  return keys;
}

/** Creates shards [from, to) with one Put each, 32 at a time, through every node in turn. */
async function createShards(
  clients: readonly Clients[],
  keys: ReadonlyMap<number, string>,
  from: number,
  to: number,
): Promise<void> {
  const queue = [...keys].filter(([shard]) => shard >= from && shard < to);
  const worker = async (): Promise<void> => {
    for (let e = queue.shift(); e !== undefined; e = queue.shift()) {
      const [shard, key] = e;
      const via = clients[shard % clients.length] as Clients;
      await retryingKv(via, "Put", { key: Buffer.from(key), value: Buffer.from("v") });
    }
  };
  await Promise.all(Array.from({ length: 32 }, worker));
}

/** The sum of a metric's samples on a node's /metrics, for one peer or all. */
async function metric(node: ClusterNode, name: string, peer?: string): Promise<number> {
  const text = await (await fetch(`http://${node.server?.http}/metrics`)).text();
  let sum = 0;
  for (const line of text.split("\n")) {
    if (!line.startsWith(`${name}{`) && !line.startsWith(`${name} `)) continue;
    if (peer !== undefined && !line.includes(`peer="${peer}"`)) continue;
    sum += Number(line.slice(line.lastIndexOf(" ") + 1));
  }
  return sum;
}

/** CPU seconds (user + system) the process has used so far. */
async function cpuSeconds(node: ClusterNode): Promise<number> {
  const stat = await readFile(`/proc/${node.server?.proc.pid}/stat`, "utf8");
  // Fields after the command name (which may hold spaces) start at field 3; utime is 14.
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return (Number(fields[11]) + Number(fields[12])) / USER_HZ;
}

/**
 * Waits until the cluster is idle: n1's view holds `shards` shards, each led, the leaders even
 * (the allocator's leader balance and the leader spreading are done), and no node has a group
 * awake.
 */
async function idle(cluster: LocalCluster, c1: Clients, shards: number): Promise<void> {
  await eventually(
    `${shards} shards, leaders spread, every group asleep`,
    async () => {
      const view = await clusterView(c1);
      if (view.shards.length < shards) return false;
      // Every shard led, the members' leaders within the allocator's tolerance (2, the
      // default: it evens them once no replica moves, and leader spreading hands them over).
      const led = new Map(IDS.map((id) => [id, 0]));
      for (const s of view.shards)
        if (led.has(s.leader)) led.set(s.leader, (led.get(s.leader) ?? 0) + 1);
      const counts = [...led.values()];
      const total = counts.reduce((a, b) => a + b, 0);
      if (total !== view.shards.length || Math.max(...counts) - Math.min(...counts) > 2)
        return false;
      for (const n of cluster.running()) {
        if ((await metric(n, "cairn_raft_awake_groups")) !== 0) return false;
      }
      return true;
    },
    60_000,
  );
}

interface Sample {
  /** Per node, the share of one core used. */
  readonly cpu: number[];
  /** n1 → n2, per second. */
  readonly frames: number;
  readonly heartbeats: number;
}

async function measure(cluster: LocalCluster, ms: number): Promise<Sample> {
  const nodes = cluster.running();
  const n1 = cluster.node("n1");
  const cpu0 = await Promise.all(nodes.map(cpuSeconds));
  const frames0 = await metric(n1, "cairn_raft_frames_sent_total", "n2");
  const heartbeats0 = await metric(n1, "cairn_raft_heartbeats_sent_total", "n2");
  const started = performance.now();
  await new Promise((r) => setTimeout(r, ms));
  const cpu1 = await Promise.all(nodes.map(cpuSeconds));
  const frames1 = await metric(n1, "cairn_raft_frames_sent_total", "n2");
  const heartbeats1 = await metric(n1, "cairn_raft_heartbeats_sent_total", "n2");
  const secs = (performance.now() - started) / 1000;
  return {
    cpu: cpu1.map((c, i) => (c - (cpu0[i] ?? 0)) / secs),
    frames: (frames1 - frames0) / secs,
    heartbeats: (heartbeats1 - heartbeats0) / secs,
  };
}

const show = (s: Sample): string =>
  `cpu ${s.cpu.map((c) => `${(c * 100).toFixed(1)}%`).join(" ")}, n1→n2 ${s.frames.toFixed(1)} frames/s, ${s.heartbeats.toFixed(1)} heartbeats/s`;

describe("idle groups sleep (three real processes, 1024 shards)", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-e2e-quiesce-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it(
    "an idle cluster costs almost no CPU and sends no heartbeats; sleeping groups wake for writes and elect when their leader dies",
    { timeout: 180_000 },
    async () => {
      const cluster = await LocalCluster.create(join(dir, "c"));
      try {
        await cluster.startAll();
        await cluster.ready();
        const clients = cluster.nodes.map((n) => n.client as Clients);
        const c1 = clients[0] as Clients;
        const keys = keyPerShard();

        await createShards(clients, keys, 1, FIRST + 1);
        await idle(cluster, c1, FIRST + 1);
        const small = await measure(cluster, 5_000);
        console.log(`idle with ${FIRST + 1} shards: ${show(small)}`);

        await createShards(clients, keys, FIRST + 1, TOTAL_SHARDS);
        await idle(cluster, c1, TOTAL_SHARDS);
        const large = await measure(cluster, 10_000);
        console.log(`idle with ${TOTAL_SHARDS} shards: ${show(large)}`);

        for (const [i, cpu] of large.cpu.entries()) {
          assert.ok(cpu <= 0.05, `n${i + 1} used ${(cpu * 100).toFixed(1)}% of a core idle`);
        }
        // The traffic between two nodes does not grow with the shards (awake, n1 would send n2
        // a heartbeat per group it leads, ten times a second, in ten frames).
        assert.ok(large.heartbeats <= small.heartbeats * 2 + 1, "heartbeats grew with the shards");
        assert.ok(large.frames <= small.frames * 2 + 1, "frames grew with the shards");

        // A write after the idle spell wakes its group and is served at once.
        const wrote = performance.now();
        await retryingKv(c1, "Put", {
          key: Buffer.from(keys.get(500) ?? ""),
          value: Buffer.from("late"),
        });
        const putMs = performance.now() - wrote;
        console.log(`a put after the idle spell took ${putMs.toFixed(0)} ms`);
        assert.ok(putMs < 2_000, `the put took ${putMs.toFixed(0)} ms`);

        // Kill the node leading the most sleeping groups (n1 stays: it takes the requests).
        const view = await clusterView(c1);
        const ledBy = (id: string): number[] =>
          view.shards.filter((s) => s.leader === id && s.id !== 0).map((s) => s.id);
        const victim = (ledBy("n2").length >= ledBy("n3").length ? "n2" : "n3") as string;
        const led = ledBy(victim);
        assert.ok(led.length > 100, `${victim} leads ${led.length} groups`);
        const killed = performance.now();
        await cluster.stop(victim, "SIGKILL");

        // No request touches those groups: only SWIM's suspicion of the victim wakes them.
        await eventually(
          `every group ${victim} led has a new leader`,
          async () => {
            const v = await clusterView(c1);
            return led.every((id) => {
              const leader = v.shards.find((s) => s.id === id)?.leader ?? "";
              return leader !== "" && leader !== victim;
            });
          },
          30_000,
        );
        const electedMs = performance.now() - killed;
        console.log(`the ${led.length} groups ${victim} led elected in ${electedMs.toFixed(0)} ms`);

        // And they serve writes.
        for (const id of led.slice(0, 20)) {
          await retryingKv(c1, "Put", {
            key: Buffer.from(keys.get(id) ?? ""),
            value: Buffer.from("after"),
          });
          const got = await retryingKv(c1, "Get", { key: Buffer.from(keys.get(id) ?? "") });
          assert.equal((got["value"] as Buffer).toString(), "after");
        }

        // The groups that wrote since (the elections' entries, the writes) sleep too, once
        // SWIM declared the victim dead, its replicas behind: they do not heartbeat it until it
        // is back (MultiRaftOptions.nodeDown).
        const survivors = cluster.running();
        const asleep = async (nodes: readonly ClusterNode[]): Promise<boolean> => {
          for (const n of nodes)
            if ((await metric(n, "cairn_raft_awake_groups")) !== 0) return false;
          return true;
        };
        await eventually(
          `every group asleep on the survivors, ${victim} down`,
          () => asleep(survivors),
          30_000,
        );
        const down = await measure(cluster, 3_000);
        console.log(`idle with ${victim} down: ${show(down)}`);

        // Back, the victim is caught up (a group sleeps only once every live replica holds its
        // whole log), and it holds the writes made while it was down.
        await cluster.start(victim);
        await eventually(
          "every group asleep on all three, the victim caught up",
          () => asleep(cluster.running()),
          60_000,
        );
        await cluster.stopAll();
      } finally {
        await cluster.killAll();
      }
    },
  );
});
