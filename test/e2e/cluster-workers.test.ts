/**
 * A cluster whose nodes run shard workers (docs/architecture.md, "Using every core"): three real
 * processes of two workers each. Worker i of a node owns the shards with id mod 2 = i and talks
 * to worker i of every peer over connections that name it (src/api/worker-tunnel.ts); worker 0
 * holds the meta group and the others follow its state.
 *
 * The first cluster runs with TLS between its peers and mutual TLS for its clients (issue 54),
 * so that the peers' traffic into and out of each worker is TLS started inside the worker after
 * the tunnel's cleartext CONNECT: Raft streams, forwarded calls, snapshots (a node SIGKILLed,
 * written past, a shard of each worker compacted, restarted: it installs their snapshots),
 * and the refusals on a worker's tunnel of an impostor (a certificate the peer CA signed for
 * another node) and of a node with the wrong certificate. Keys of both workers' shards are
 * written and read through every node, scanned, a leadership moved. Peer TLS without workers is
 * cluster-tls.test.ts; cleartext tunnels are the second cluster here and
 * test/api/worker-tunnel.test.ts. The second cluster: a member started with another number of
 * workers is refused, with the reason in the logs.
 *
 * Every other cluster test runs with workers by hand: CLUSTER_SHARD_WORKERS=2 (LocalCluster).
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { type CallResult, GrpcChannel } from "../../src/api/grpc-channel.ts";
import { deadlineClock } from "../../src/common/deadline-clock.ts";
import { shardForKey } from "../../src/cluster/index.ts";
import { nativeAddonMissing } from "../../src/common/index.ts";
import { PeerTls } from "../../src/common/peer-tls.ts";
import type { Clients } from "../support/grpc-client.ts";
import {
  clusterView,
  eventually,
  everyReplicaHolds,
  healthReport,
  LocalCluster,
  retryingKv,
} from "../support/cluster-process.ts";
import { clusterCerts, nodeCert, refusedCertificates } from "../support/tls-certs.ts";

const TOTAL_SHARDS = 1024;
const WORKERS = { CAIRN_SHARD_WORKERS: "2" };
const b = (s: string): Buffer => Buffer.from(s);

/**
 * A call of the peers' service as node `as`, on a connection to shard worker `index` of the node
 * at `address` (its tunnel, then TLS with `tls`, expecting the node to be `dialed`).
 */
async function tunnelledPeerCall(
  address: string,
  index: number,
  tls: PeerTls,
  dialed: string,
  as: string,
): Promise<CallResult> {
  const channel = new GrpcChannel(address, {
    maxMessageBytes: 1 << 20,
    shardWorker: { index, count: 2 },
    tls: () => tls.dial(dialed),
    peerId: as,
  });
  try {
    return await channel.unary("/cairn.v1.Raft/ReadIndex", Buffer.alloc(0), {
      deadline: deadlineClock() + 10_000,
    });
  } finally {
    channel.destroy();
  }
}

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

  it("serves keys of both workers' shards through any node over TLS, refuses impostors on a worker's tunnel, and keeps the keys across a kill -9 and snapshots", async () => {
    const certs = clusterCerts(join(dir, "certs"), ["n1", "n2", "n3"]);
    const impostor = nodeCert(dirname(certs.peerCa), "n9");
    const cluster = await LocalCluster.create(join(dir, "basic"), 3, WORKERS);
    cluster.useTls(certs);
    const impostorTls = new PeerTls({
      certFile: impostor.cert,
      keyFile: impostor.key,
      peerCaFile: certs.peerCa,
    });
    try {
      // One after another: three TLS nodes of two workers starting at once on a loaded 2-core
      // machine can take longer than a start's 30 s each.
      for (const n of cluster.nodes) await cluster.start(n.id);
      await cluster.ready(60_000);
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
      // The cluster version, which worker 0 knows, is in the node's merged report.
      for (const n of cluster.nodes) {
        const r = await healthReport(n.server?.http);
        assert.equal(typeof r.cluster_version, "number", `${n.id}: ${JSON.stringify(r)}`);
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

      // On each worker's tunnel of n1: an impostor (n9's certificate) calling as n2 is refused,
      // and a node dialing n2 there refuses n1's certificate.
      const n1 = cluster.node("n1");
      const refusedBefore = await refusedCertificates(n1.server?.http);
      for (const index of [0, 1]) {
        const asN2 = await tunnelledPeerCall(n1.rpc, index, impostorTls, "n1", "n2");
        assert.equal(asN2.code, status.PERMISSION_DENIED, `worker ${index}: ${asN2.details}`);
        assert.match(asN2.details, /names \["n9".*not node "n2"/);
        const wrong = await tunnelledPeerCall(n1.rpc, index, impostorTls, "n2", "n9");
        assert.equal(wrong.code, status.UNAVAILABLE, `worker ${index}: ${wrong.details}`);
        assert.match(wrong.details, /names \["n1".*not node "n2" that was dialed/);
      }
      assert.equal(await refusedCertificates(n1.server?.http), refusedBefore + 2);

      // SIGKILL the node that leads the most shards, write on, compact the logs of one written
      // shard of each worker on the others, restart it: it catches up on those by snapshot, in
      // both workers, and on the rest by log; nothing is lost.
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
      const compacted = [0, 1].map((w) => written.find((id) => id % 2 === w) as number);
      for (const c of survivors) {
        for (const id of compacted) await c.call(c.admin, "SnapshotShard", { shard_id: id });
      }
      const back = await cluster.start(victim);
      await cluster.ready();
      await eventually(`${victim} installs snapshots in both workers`, async () => {
        const installed = new Set<number>();
        for (const l of back.server?.lines ?? []) {
          const m = /installed from the leader's snapshot.*"shard_id":(\d+)/.exec(l);
          if (m !== null) installed.add(Number(m[1]));
        }
        return compacted.every((id) => installed.has(id));
      });
      await everyReplicaHolds(cluster, acknowledged);
      for (const n of cluster.nodes) {
        const errors = (n.server?.lines ?? []).filter((l) => l.includes('"level":"ERROR"'));
        assert.deepEqual(errors, [], `${n.id} logged no error`);
      }
      await cluster.stopAll();
    } finally {
      impostorTls.close();
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
