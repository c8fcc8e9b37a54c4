/**
 * A member restarted on its data directory at another RPC address (a pod whose IP changed)
 * reports it to the meta group (set-member), so that what reads the recorded address finds it
 * there. The duplicate node id check is one: a node started with the member's id and another
 * data directory asks to rejoin as its "new incarnation", and the meta leader lets it only when
 * the member's recorded address does not answer with the member's incarnation. Recorded at the
 * old address, the live member did not answer there, and the newcomer retired it: the member
 * stopped (CAIRN_ERR_LOST_STATE) and the newcomer took its place, empty.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { eventually, freePort, LocalCluster } from "../support/cluster-process.ts";
import { startServer } from "../support/server-process.ts";

describe("a member restarted at another address (real processes)", () => {
  let dir: string;
  before(async () => {
    dir = await mkdtemp(join(tmpdir(), "cairn-e2e-address-"));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it(
    "is recorded there: a node started with its id is refused, not let in to evict it",
    { timeout: 120_000 },
    async () => {
      const cluster = await LocalCluster.create(join(dir, "c"));
      let impostor: Awaited<ReturnType<typeof startServer>> | Error | null = null;
      try {
        await cluster.startAll();
        await cluster.ready();
        const n3 = cluster.node("n3");
        await cluster.stop("n3");
        (n3 as { rpc: string }).rpc = `127.0.0.1:${await freePort()}`;
        const back = await cluster.start("n3");
        await cluster.ready();
        // Its restart's rejoin, which confirms its incarnation, went through the meta leader.
        await eventually("n3 confirmed by the cluster", async () =>
          (back.server?.lines ?? []).some((l) =>
            l.includes("the cluster confirms this data directory's incarnation"),
          ),
        );

        // A node started by mistake with n3's id, on a new data directory and address.
        impostor = await startServer({
          dataDir: join(dir, "impostor"),
          args: [
            "--node-id",
            "n3",
            "--rpc-addr",
            `127.0.0.1:${await freePort()}`,
            "--seed-nodes",
            cluster.seeds,
          ],
        }).catch((err: unknown) => err as Error);
        const real = back.server;
        assert.ok(real !== null);
        const started = impostor;
        const first = await Promise.race([
          (started instanceof Error ? Promise.resolve(null) : started.exited).then(
            () => "impostor",
          ),
          real.exited.then(() => "n3"),
        ]);
        const impostorLog =
          started instanceof Error
            ? started.message
            : `${started.lines.join("\n")}\n${started.stderr()}`;
        assert.equal(
          first,
          "impostor",
          `the live member stopped, evicted by the newcomer: ${real.lines.filter((l) => l.includes("ERROR")).join("\n")}`,
        );
        assert.match(impostorLog, /CAIRN_ERR_DUPLICATE_NODE_ID/);
        assert.equal(real.proc.exitCode, null, "n3 still runs");
        await cluster.stopAll();
      } finally {
        if (impostor !== null && !(impostor instanceof Error)) await impostor.stop("SIGKILL");
        await cluster.killAll();
      }
    },
  );
});
