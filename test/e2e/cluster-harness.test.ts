/**
 * The test harness's own failure path (test/support/cluster-process.ts): when one node of a
 * LocalCluster cannot start, startAll leaves no other node running. A CI run once hung for half
 * an hour on a node that finished starting after its cluster's cleanup had run.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { LocalCluster } from "../support/cluster-process.ts";

describe("LocalCluster.startAll (real processes)", () => {
  it("kills the nodes that started when another could not", { timeout: 60_000 }, async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-harness-"));
    const cluster = await LocalCluster.create(join(dir, "c"), 3);
    // n1's RPC port is taken: it exits at once, the other two start.
    const [host, port] = cluster.node("n1").rpc.split(":") as [string, string];
    const blocker = createServer();
    await new Promise<void>((r) => blocker.listen(Number(port), host, r));
    try {
      await assert.rejects(cluster.startAll(), /already in use/);
      assert.deepEqual(cluster.running(), []);
    } finally {
      blocker.close();
      await cluster.killAll();
      await rm(dir, { recursive: true, force: true });
    }
  });
});
