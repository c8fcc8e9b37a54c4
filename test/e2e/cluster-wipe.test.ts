/**
 * A member whose data directory was wiped (issue 10): until rejoining as a new incarnation is
 * built, the node must not come back as the member it was — an empty voter that forgot the
 * votes it cast could elect two leaders in one term. Each member records its data directory's
 * incarnation in the meta group; a node that finds another incarnation recorded for its id stops
 * with exit code 1 and says why, and the two others keep serving.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { Clients } from "../support/grpc-client.ts";
import { eventually, LocalCluster, retryingKv } from "../support/cluster-process.ts";

describe("a member restarted with a wiped data directory (real processes)", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-e2e-wipe-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it(
    "is refused as that member (exit 1, CAIRN_ERR_LOST_STATE); the others keep serving",
    {
      timeout: 120_000,
    },
    async () => {
      const cluster = await LocalCluster.create(join(dir, "c"));
      try {
        await cluster.startAll();
        await cluster.ready();
        for (const n of cluster.nodes) {
          await eventually(`${n.id} recorded its incarnation`, async () =>
            (n.server?.lines ?? []).some((l) => l.includes("incarnation is recorded")),
          );
        }
        const n1 = cluster.node("n1").client as Clients;
        await retryingKv(n1, "Put", { key: Buffer.from("before"), value: Buffer.from("wipe") });

        const victim = cluster.node("n2");
        await cluster.stop("n2");
        await rm(victim.dataDir, { recursive: true, force: true });
        const back = await cluster.start("n2");
        const server = back.server;
        assert.ok(server !== null);
        const exit = await server.exited;
        assert.equal(exit.code, 1, "the wiped member stops");
        assert.ok(
          server.lines.some((l) => l.includes("CAIRN_ERR_LOST_STATE")),
          server.lines.join("\n"),
        );
        back.client?.close();
        back.client = null;
        back.server = null;

        // The two others still form a majority of every group.
        const got = await retryingKv(n1, "Get", { key: Buffer.from("before") });
        assert.equal((got["value"] as Buffer).toString(), "wipe");
        await retryingKv(n1, "Put", { key: Buffer.from("after"), value: Buffer.from("ok") });
        await cluster.stopAll();
      } finally {
        await cluster.killAll();
      }
    },
  );
});
