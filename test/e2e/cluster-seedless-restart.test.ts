/**
 * A member restarted gracefully (SIGTERM, as in a rolling restart) whose `cluster.seed_nodes`
 * name no live member any more (the first seeds decommissioned and removed since, as the
 * runbook does) comes back into gossip through the members its meta state records, with real
 * processes on loopback. Its peers hold it `left` after its graceful leave and never probe it:
 * before, it logged `no seed answered; retrying` for ever while it served, the meta group marked
 * it dead after `cluster.dead_after_ms` and re-created its replicas elsewhere, and the runbook
 * would have had an operator remove a healthy node.
 *
 * The nodes are started with `--seed-nodes` naming n1 only (no member re-contacts n3 as its
 * seed), and n3 is restarted with a seed nobody answers at.
 */
import assert from "node:assert/strict";
import dgram from "node:dgram";
import { describe, it } from "node:test";
import { eventually, type LocalCluster, withLocalCluster } from "../support/cluster-process.ts";
import { connect } from "../support/grpc-client.ts";
import { startServer } from "../support/server-process.ts";

const DEAD_AFTER_MS = 8_000;
const ENV = {
  CAIRN_CLUSTER_TOTAL_SHARDS: "16",
  CAIRN_CLUSTER_BOOTSTRAP_EXPECT: "3",
  CAIRN_CLUSTER_DEAD_AFTER_MS: String(DEAD_AFTER_MS),
};

/** Starts node `id` of `cluster` with `seeds` as its seed list (LocalCluster.start's, else). */
async function startWithSeeds(cluster: LocalCluster, id: string, seeds: string): Promise<void> {
  const n = cluster.node(id);
  n.server = await startServer({
    dataDir: n.dataDir,
    args: ["--node-id", n.id, "--rpc-addr", n.rpc, "--seed-nodes", seeds],
    env: ENV,
  });
  n.client = connect(n.rpc);
}

interface Member {
  id: string;
  state: string;
  member_state?: string;
}

/** `id` as the /health of node `from` lists it: its gossip state and its member state. */
async function seenBy(
  cluster: LocalCluster,
  from: string,
  id: string,
): Promise<Member | undefined> {
  const res = await fetch(`http://${cluster.node(from).server?.http}/health`);
  return ((await res.json()) as { nodes: Member[] }).nodes.find((m) => m.id === id);
}

describe("a member restarted gracefully with seeds that answer no more (real processes)", () => {
  it(
    "comes back into gossip through the members it records, and is never marked dead",
    { timeout: 150_000 },
    async () => {
      // A seed that is gone: a socket that reads and never answers.
      const gone = dgram.createSocket("udp4");
      await new Promise<void>((resolve) => gone.bind(0, "127.0.0.1", resolve));
      try {
        await withLocalCluster("seedless-restart", 3, ENV, async (cluster) => {
          const first = cluster.node("n1").rpc;
          await Promise.all(["n1", "n2", "n3"].map((id) => startWithSeeds(cluster, id, first)));
          await cluster.ready(60_000);
          for (const from of ["n1", "n2"]) {
            await eventually(`${from} has n3 alive and active`, async () => {
              const m = await seenBy(cluster, from, "n3");
              return m?.state === "alive" && m.member_state === "active";
            });
          }

          // A rolling restart of n3, its seed list naming only an address nobody answers at.
          await cluster.stop("n3", "SIGTERM");
          await eventually(
            "n1 has n3 left",
            async () => (await seenBy(cluster, "n1", "n3"))?.state === "left",
          );
          const stoppedAt = performance.now();
          await startWithSeeds(cluster, "n3", `127.0.0.1:${gone.address().port}`);
          await cluster.ready(60_000);
          for (const from of ["n1", "n2"]) {
            await eventually(
              `${from} has n3 alive again`,
              async () => (await seenBy(cluster, from, "n3"))?.state === "alive",
              DEAD_AFTER_MS,
            );
          }
          // Past dead_after_ms since it went: n3 stays alive and active in both views.
          const until = stoppedAt + DEAD_AFTER_MS + 4_000;
          for (let i = 0; i < 1_000 && performance.now() < until; i++) {
            for (const from of ["n1", "n2"]) {
              const m = await seenBy(cluster, from, "n3");
              assert.equal(m?.state, "alive", `${from}'s view of n3`);
              assert.equal(m?.member_state, "active", `${from}'s view of n3`);
            }
            await new Promise((r) => setTimeout(r, 250));
          }
          // Its meta state was loaded from disk before its membership started: its first join
          // attempt already went to the members it records.
          const n3 = cluster.node("n3").server?.lines ?? [];
          const at = (message: string): number =>
            n3.findIndex((l) => l.includes(`"message":"${message}"`));
          assert.ok(at("member of cluster") >= 0, "n3 loaded its meta state");
          assert.ok(at("member of cluster") < at("membership started"), "before its gossip");
          assert.ok(at("joined the cluster") > 0, "n3 joined the gossip");
        });
      } finally {
        gone.close();
      }
    },
  );
});
