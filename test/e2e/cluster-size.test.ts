/**
 * swim_cluster_size counts the cluster's members: a node started after the founding counts
 * once the meta group has admitted it (design.md §5.2), and /health lists each member with its
 * state in the cluster.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { eventually, LocalCluster } from "../support/cluster-process.ts";

async function gauge(http: string, name: string): Promise<number> {
  const text = await (await fetch(`http://${http}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${name} `));
  return Number(line?.split(" ")[1]);
}

describe("swim_cluster_size (real processes)", () => {
  it(
    "counts a node started after the founding once it is admitted",
    { timeout: 120_000 },
    async () => {
      const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-size-"));
      // Four addresses; the first three found the cluster (bootstrap_expect 3), n4 comes later.
      const cluster = await LocalCluster.create(dir, 4);
      try {
        await Promise.all(["n1", "n2", "n3"].map((id) => cluster.start(id)));
        await cluster.ready();
        await cluster.start("n4");
        const n1 = cluster.node("n1").server;
        assert.ok(n1 !== null);
        await eventually("n1 lists n4 as a member", async () => {
          const report = (await (await fetch(`http://${n1.http}/health`)).json()) as {
            nodes: { id: string; state: string; member_state?: string }[];
          };
          const n4 = report.nodes.find((m) => m.id === "n4");
          return n4?.state === "alive" && n4.member_state !== undefined;
        });
        await eventually(
          "swim_cluster_size counts n4",
          async () => (await gauge(n1.http, "swim_cluster_size")) === 4,
        );
      } finally {
        await cluster.killAll();
        await rm(dir, { recursive: true, force: true });
      }
    },
  );
});
