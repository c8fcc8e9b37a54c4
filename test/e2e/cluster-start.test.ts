/**
 * The start-order race (issue 10): whatever order three nodes start in, or all at once, there is
 * exactly one meta group (one cluster id, the same voters on every node) and no shard gets two
 * groups (every node reports the same replicas for every shard, and the shard's data written
 * through one node is read through the others).
 *
 * `npm test` runs the four orders below once; `CLUSTER_START_RUNS=20` repeats them.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type Clients } from "../support/grpc-client.ts";
import { clusterView, eventually, LocalCluster, retryingKv } from "../support/cluster-process.ts";

const RUNS = Number(process.env["CLUSTER_START_RUNS"] ?? 1);
const ORDERS: readonly (readonly string[] | "together")[] = [
  "together",
  ["n1", "n2", "n3"],
  ["n3", "n2", "n1"],
  ["n2", "n3", "n1"],
];

describe("three nodes started in any order form one cluster (real processes)", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-e2e-start-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  for (let run = 0; run < RUNS; run++) {
    for (const order of ORDERS) {
      const name = order === "together" ? "all at once" : order.join(", then ");
      it(`${name}${RUNS > 1 ? ` (run ${run + 1})` : ""}`, { timeout: 120_000 }, async () => {
        const cluster = await LocalCluster.create(join(dir, `${run}-${name.replace(/\W+/g, "-")}`));
        try {
          if (order === "together") await cluster.startAll();
          else for (const id of order) await cluster.start(id);
          await cluster.ready();
          const clients = cluster.nodes.map((n) => n.client as Clients);

          for (const [i, c] of clients.entries()) {
            await retryingKv(c, "Put", { key: Buffer.from(`k${i}`), value: Buffer.from(`v${i}`) });
          }
          for (const c of clients) {
            for (let i = 0; i < clients.length; i++) {
              const got = await retryingKv(c, "Get", { key: Buffer.from(`k${i}`) });
              assert.equal((got["value"] as Buffer).toString(), `v${i}`);
            }
          }
          await eventually(
            "one cluster id, and the same replicas for every shard on every node",
            async () => {
              const views = await Promise.all(clients.map((c) => clusterView(c)));
              const ids = new Set(views.map((v) => v.cluster_id));
              if (ids.size !== 1 || ids.has("")) return false;
              const replicas = new Map<number, string>();
              for (const v of views) {
                for (const s of v.shards) {
                  const r = [...s.replicas].sort().join();
                  if (r !== "n1,n2,n3") return false;
                  const seen = replicas.get(s.id);
                  if (seen !== undefined && seen !== r) return false;
                  replicas.set(s.id, r);
                }
              }
              // Shard 0 (the meta group) and the shards written are on every node.
              return views.every((v) => v.shards.some((s) => s.id === 0));
            },
          );
          await cluster.stopAll();
        } finally {
          await cluster.killAll();
        }
      });
    }
  }
});
