/**
 * SWIM inside real nodes: two `cairn serve` processes find each other through a seed, report each
 * other in /health and swim_cluster_size, and one sees the other dead after a SIGKILL. A node
 * whose total_shards differs is refused and stops.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { eventually } from "../support/cluster-process.ts";
import {
  CAIRN,
  cleanEnv,
  metricValue,
  ROOT,
  type ServerProcess,
  startServer,
} from "../support/server-process.ts";

let dir: string;

interface Member {
  id: string;
  state: string;
}

async function members(server: ServerProcess): Promise<Member[]> {
  const report = (await (await fetch(`http://${server.http}/health`)).json()) as {
    nodes: Member[];
  };
  return report.nodes;
}

describe("membership in the node, end to end", () => {
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-e2e-swim-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it("joins through a seed, reports members, and detects a killed member", async () => {
    const a = await startServer({ dataDir: join(dir, "a"), args: ["--node-id", "a"] });
    let b: ServerProcess | null = null;
    try {
      b = await startServer({
        dataDir: join(dir, "b"),
        args: ["--node-id", "b", "--seed-nodes", a.rpc],
      });
      const bb = b;
      for (const node of [a, bb]) {
        await eventually("both members alive on both nodes", async () => {
          const m = await members(node);
          return m.length === 2 && m.every((x) => x.state === "alive");
        });
        assert.equal(await metricValue(node, "swim_cluster_size"), 2);
      }
      assert.deepEqual((await members(a)).map((m) => m.id).sort(), ["a", "b"]);

      bb.proc.kill("SIGKILL");
      await bb.exited;
      await eventually("a declares b dead", async () =>
        (await members(a)).some((m) => m.id === "b" && m.state === "dead"),
      );
      assert.equal(await metricValue(a, "swim_cluster_size"), 1);
      assert.equal(await metricValue(a, "swim_failed_members_total"), 1);
    } finally {
      await b?.stop("SIGKILL");
      await a.stop();
    }
  });

  it("shows a gracefully stopped member as left, not dead, in /health and cairn cluster", async () => {
    const a = await startServer({ dataDir: join(dir, "a2"), args: ["--node-id", "a"] });
    let b: ServerProcess | null = null;
    try {
      b = await startServer({
        dataDir: join(dir, "b2"),
        args: ["--node-id", "b", "--seed-nodes", a.rpc],
      });
      await eventually("a sees b alive", async () =>
        (await members(a)).some((m) => m.id === "b" && m.state === "alive"),
      );
      assert.deepEqual(await b.stop("SIGTERM"), { code: 0, signal: null });
      await eventually("a shows b as left", async () =>
        (await members(a)).some((m) => m.id === "b" && m.state === "left"),
      );
      const cluster = spawnSync(CAIRN, ["cluster", "--endpoints", a.rpc], {
        cwd: ROOT,
        env: cleanEnv(),
        encoding: "utf8",
      });
      assert.equal(cluster.status, 0, cluster.stderr);
      // MEMBER, its state in the cluster, then gossip's: left.
      assert.match(cluster.stdout, /^\s*b\t\S+\tleft\t/m);
      assert.equal(await metricValue(a, "swim_failed_members_total"), 0, "leaving is not failing");
    } finally {
      await b?.stop("SIGKILL");
      await a.stop();
    }
  });

  it("refuses a node whose total_shards differs from the cluster's", async () => {
    const a = await startServer({ dataDir: join(dir, "c"), args: ["--node-id", "c"] });
    try {
      const odd = await startServer({
        dataDir: join(dir, "d"),
        args: ["--node-id", "d", "--seed-nodes", a.rpc],
        env: { CAIRN_CLUSTER_TOTAL_SHARDS: "128" },
      });
      const exit = await odd.exited;
      assert.equal(exit.code, 1);
      assert.ok(
        odd.lines.some((l) => l.includes("refused") && l.includes("total_shards")),
        odd.lines.join("\n"),
      );
    } finally {
      await a.stop();
    }
  });
});
