/**
 * The cluster version across a rolling upgrade, with real processes on loopback
 * (docs/operations.md, "Upgrading"). The testing-only CAIRN_TESTING_BUILD_VERSION makes a node's
 * build claim a higher cluster version than this build's, so that one checkout plays an old and
 * a new build: the cluster keeps its version while a member runs the old build, raises it once
 * the last one is restarted on the new build, and from then on a node of the old build neither
 * serves on a member's data directory nor joins; every acknowledged write reads back throughout.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { BUILD_VERSION } from "../../src/cluster/index.ts";
import {
  acknowledgedPuts,
  clusterView,
  eventually,
  healthReport,
  type LocalCluster,
  readBackDifference,
  withLocalCluster,
} from "../support/cluster-process.ts";
import type { Clients } from "../support/grpc-client.ts";
import { runCairn } from "../support/server-process.ts";

/** This build's version (the "old" build), and the "new" build's, one above. */
const OLD_V = BUILD_VERSION;
const NEW_V = BUILD_VERSION + 1;
const NEW = { CAIRN_TESTING_BUILD_VERSION: String(NEW_V) };

interface VersionedView {
  cluster_version: number;
  nodes: { id: string; build: number }[];
}

/** Node `c`'s cluster version and each member's build, as `v1 n1=2 n2=1 …`. */
async function versions(c: Clients): Promise<string> {
  const v = (await clusterView(c)) as unknown as VersionedView;
  const builds = v.nodes
    .map((n) => `${n.id}=${n.build}`)
    .sort()
    .join(" ");
  return `v${v.cluster_version} ${builds}`;
}

/** Waits up to 30 s for node `id`'s process to exit by itself; its exit code and log. */
async function exitOf(
  cluster: LocalCluster,
  id: string,
): Promise<{ code: number | null; log: string }> {
  const server = cluster.node(id).server;
  assert.ok(server !== null, `${id} was started`);
  const exit = await Promise.race([
    server.exited,
    new Promise<null>((resolve) => setTimeout(() => resolve(null), 30_000).unref()),
  ]);
  assert.ok(exit !== null, `${id} stops by itself within 30 s`);
  return { code: exit.code, log: server.lines.join("\n") };
}

describe("the cluster version (real processes)", () => {
  it(
    "is raised once the last member runs the new build, and then a node of the old build neither serves a member's data nor joins",
    { timeout: 240_000 },
    async () => {
      const { acknowledged, put } = acknowledgedPuts();
      await withLocalCluster(
        "version",
        4,
        { CAIRN_CLUSTER_TOTAL_SHARDS: "16" },
        async (cluster) => {
          // n1 and n2 run the new build, n3 the old one: the cluster stays at the old version.
          await Promise.all([
            cluster.start("n1", NEW),
            cluster.start("n2", NEW),
            cluster.start("n3"),
          ]);
          await cluster.ready();
          const c1 = cluster.node("n1").client as Clients;
          for (let i = 0; i < 32; i++) await put(c1, `k${i}`, `v${i}`);
          await eventually(
            `n1 and n2 report build ${NEW_V}`,
            async () => (await versions(c1)) === `v${OLD_V} n1=${NEW_V} n2=${NEW_V} n3=${OLD_V}`,
          );
          // `cairn cluster` shows the version, and which members run another one.
          const shown = await runCairn(["--endpoints", cluster.node("n1").rpc, "cluster"]);
          assert.equal(shown.code, 0, shown.err);
          assert.match(shown.out, new RegExp(`^cluster \\S+ \\(version ${OLD_V}\\), epoch`));
          assert.match(shown.out, new RegExp(`^n1\tactive,build-${NEW_V}\t`, "m"));
          assert.match(shown.out, /^n3\tactive\talive\t/m);

          // The rolling restart's last step: n3 on the new build. Every node then runs the new
          // version.
          await cluster.stop("n3");
          await cluster.start("n3", NEW);
          for (const id of ["n1", "n2", "n3"]) {
            const c = cluster.node(id).client as Clients;
            await eventually(`${id}'s view says version ${NEW_V}`, async () => {
              try {
                return (await versions(c)) === `v${NEW_V} n1=${NEW_V} n2=${NEW_V} n3=${NEW_V}`;
              } catch {
                return false; // n3 still starting
              }
            });
          }
          const health = await healthReport(cluster.node("n1").server?.http);
          assert.equal(health.cluster_version, NEW_V);
          assert.match(
            cluster.node("n2").server?.lines.join("\n") ?? "",
            new RegExp(`the cluster's version was raised.*"from":${OLD_V},"to":${NEW_V}`),
          );
          for (let i = 32; i < 48; i++) await put(c1, `k${i}`, `v${i}`);

          // Rolled back onto the old build, n2 stops rather than serve (its data stays).
          await cluster.stop("n2");
          await cluster.start("n2");
          const rolledBack = await exitOf(cluster, "n2");
          assert.equal(rolledBack.code, 1);
          assert.match(
            rolledBack.log,
            new RegExp(
              `this build is older than the cluster's version; it stops.*runs cluster version ${NEW_V}, and this build runs versions up to ${OLD_V}.*CAIRN_ERR_CLUSTER_VERSION`,
            ),
          );
          await cluster.stop("n2", "SIGKILL"); // exited already: keeps its log lines

          // A new node of the old build is refused, and stops; of the new build, it joins.
          await cluster.start("n4");
          const refused = await exitOf(cluster, "n4");
          assert.equal(refused.code, 1);
          assert.match(
            refused.log,
            new RegExp(
              `n4 runs a build with cluster versions up to ${OLD_V}, and the cluster runs version ${NEW_V}`,
            ),
          );
          assert.match(refused.log, /CAIRN_ERR_CLUSTER_VERSION/);
          await cluster.stop("n4", "SIGKILL");
          await cluster.start("n4", NEW);
          await eventually("n4 joins", async () => (await versions(c1)).includes(`n4=${NEW_V}`));

          // n2 back on the new build: it serves again, and nothing was lost.
          await cluster.start("n2", NEW);
          await eventually("every node is healthy", () => cluster.allHealthy(), 60_000);
          for (const id of ["n1", "n2", "n3", "n4"]) {
            const c = cluster.node(id).client as Clients;
            assert.equal(await readBackDifference(c, acknowledged), null, `through ${id}`);
          }
        },
      );
    },
  );
});
