/**
 * Three `cairn serve` processes on loopback form one cluster (design.md §5.1): the first seed
 * founds the meta group, every shard touched gets three replicas on three nodes, any node
 * accepts any request (forwarding to the shard's leader), and a linearizable read through any
 * node sees every acknowledged write.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { shardForKey } from "../../src/cluster/index.ts";
import { type Clients, grpcError } from "../support/grpc-client.ts";
import {
  clusterView,
  eventually,
  LocalCluster,
  retryingKv,
  type ViewMessage,
} from "../support/cluster-process.ts";

const b = (s: string): Buffer => Buffer.from(s);

/** A key of `shard` (of the default 1024). */
function keyOfShard(shard: number): string {
  for (let i = 0; ; i++) {
    const key = `fwd-${i}`;
    if (shardForKey(b(key), 1024) === shard) return key;
  }
}

/** `kv_requests_total{operation="put",status="not_leader"}` in a /metrics text. */
function kvCount(metrics: string): number {
  const line = metrics
    .split("\n")
    .find(
      (l) =>
        l.startsWith("kv_requests_total{") &&
        l.includes('operation="put"') &&
        l.includes('status="not_leader"'),
    );
  return line === undefined ? 0 : Number(line.split(" ").at(-1));
}

describe("a three-node cluster (real processes)", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-e2e-cluster-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("replicates every shard on three nodes; any node takes any request", async () => {
    const cluster = await LocalCluster.create(join(dir, "basic"));
    try {
      await cluster.startAll();
      await cluster.ready();
      const clients = cluster.nodes.map((n) => n.client as Clients);
      const [c1, c2, c3] = clients as [Clients, Clients, Clients];

      // One cluster id, the same on every node.
      const ids = await Promise.all(clients.map(async (c) => (await clusterView(c)).cluster_id));
      assert.notEqual(ids[0], "");
      assert.deepEqual(new Set(ids).size, 1, `cluster ids ${ids.join(", ")}`);

      // A Put through each node; a linearizable Get through every node sees it.
      const keys = Array.from({ length: 12 }, (_, i) => `key-${i}`);
      for (const [i, key] of keys.entries()) {
        const via = clients[i % 3] as Clients;
        await retryingKv(via, "Put", { key: b(key), value: b(`value-${i}`) });
      }
      for (const [i, key] of keys.entries()) {
        for (const c of clients) {
          const got = await retryingKv(c, "Get", { key: b(key) });
          assert.equal(got["found"], true, key);
          assert.equal((got["value"] as Buffer).toString(), `value-${i}`);
        }
      }

      // A linearizable scan through any node sees every key, wherever its shard's leader is.
      for (const c of clients) {
        const page = await retryingKv(c, "Scan", { prefix: b("key-"), limit: 100 });
        const items = page["items"] as { key: Buffer; value: Buffer }[];
        assert.deepEqual(
          items.map((i) => i.key.toString()),
          [...keys].sort(),
        );
      }

      // Compare-and-set through another node than the write: the version is the cluster's.
      const put = await retryingKv(c1, "Put", { key: b("cas"), value: b("one") });
      const version = put["version"] as { index: number; term: number };
      await retryingKv(c2, "Put", { key: b("cas"), value: b("two"), expected_version: version });
      await assert.rejects(
        retryingKv(c3, "Put", { key: b("cas"), value: b("three"), expected_version: version }),
        (err) => grpcError(err).code === 9, // FAILED_PRECONDITION
      );
      const cas = await retryingKv(c3, "Get", { key: b("cas") });
      assert.equal((cas["value"] as Buffer).toString(), "two");

      // Every shard touched has three replicas on three distinct nodes, and one leader that
      // every node agrees on.
      await eventually(
        "every node sees every touched shard with 3 replicas and a leader",
        async () => {
          const views = await Promise.all(clients.map((c) => clusterView(c)));
          const touched = views[0]?.shards.filter((s) => s.id !== 0) ?? [];
          if (touched.length === 0) return false;
          for (const v of views) {
            for (const s of touched) {
              const mine = v.shards.find((x) => x.id === s.id);
              if (mine === undefined || mine.leader === "") return false;
              if ([...mine.replicas].sort().join() !== "n1,n2,n3") return false;
              if (mine.leader !== s.leader) return false;
            }
          }
          return true;
        },
      );

      // Leaders spread: each group ends up led by its preferred leader (its first-ranked
      // replica by rendezvous hashing, or the one the allocator named to even the leaders), not
      // by the node that happened to create it: every member leads its share, within the
      // tolerance (2, the default).
      await eventually("every touched shard led, the leaders spread", async () => {
        const v = await clusterView(c1);
        const led = new Map(["n1", "n2", "n3"].map((id) => [id, 0]));
        for (const s of v.shards) {
          if (!led.has(s.leader)) return false;
          led.set(s.leader, (led.get(s.leader) ?? 0) + 1);
        }
        const counts = [...led.values()];
        return Math.max(...counts) - Math.min(...counts) <= 2;
      });
      // Admin.TransferLeader, sent to a third node, moves a shard's leadership to another
      // replica, and it stays there: leader spreading follows the preferred leader it recorded.
      {
        const v = await clusterView(c1);
        const shard = v.shards.find((s) => s.id !== 0 && s.leader !== "");
        assert.ok(shard !== undefined);
        const target = ["n1", "n2", "n3"].find((n) => n !== shard.leader) as string;
        const via = cluster.nodes.findIndex((n) => n.id !== shard.leader && n.id !== target);
        const admin = clients[via] as Clients;
        const reply = await admin.call(admin.admin, "TransferLeader", {
          shard_id: shard.id,
          node_id: target,
        });
        assert.equal(reply["leader"], target);
        for (let i = 0; i < 8; i++) {
          // Four leader-spreading passes (every 2 s on each node) must leave it there.
          await new Promise((r) => setTimeout(r, 1_000));
          const view: ViewMessage = await clusterView(c1);
          const now: ViewMessage["shards"][number] | undefined = view.shards.find(
            (s) => s.id === shard.id,
          );
          assert.equal(now?.leader, target, `shard ${shard.id} after ${i + 1} s`);
        }
        await assert.rejects(
          admin.call(admin.admin, "TransferLeader", {
            shard_id: shard.id,
            node_id: "n9",
          }),
          (err) => grpcError(err).code === 3, // INVALID_ARGUMENT
        );
      }

      // Forwarding: a Put sent to a node that does not lead the key's shard succeeds, and that
      // node counts it as not_leader (the leader counts it by its outcome).
      const view = await clusterView(c1);
      const led = view.shards.find((s) => s.id !== 0 && s.leader !== "");
      assert.ok(led !== undefined);
      const fkey = keyOfShard(led.id);
      const followerIndex = cluster.nodes.findIndex((n) => n.id !== led.leader);
      const follower = cluster.nodes[followerIndex];
      assert.ok(follower !== undefined);
      const notLeader = async (): Promise<number> =>
        kvCount(await (await fetch(`http://${follower.server?.http}/metrics`)).text());
      const before = await notLeader();
      await retryingKv(clients[followerIndex] as Clients, "Put", { key: b(fkey), value: b("f") });
      assert.equal(await notLeader(), before + 1, `${follower.id} forwarded to ${led.leader}`);
      const read = await retryingKv(c1, "Get", { key: b(fkey) });
      assert.equal((read["value"] as Buffer).toString(), "f");
      await cluster.stopAll();
    } finally {
      await cluster.killAll();
    }
  });
});
