/**
 * VersionUpkeep (src/node/version-upkeep.ts): each node reports its build's cluster version when
 * its member record says another, and the meta leader raises the cluster version one at a time
 * once every member that may serve again has the next one, over a real meta state that the
 * proposals change. The processes' side: test/e2e/cluster-version.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type MetaCommand, MetaState } from "../../src/cluster/index.ts";
import { VersionUpkeep } from "../../src/node/version-upkeep.ts";
import { silentLogger } from "../../src/ops/index.ts";

const member = (id: string) => ({ id, rpcAddr: `${id}:7447`, httpAddr: `${id}:8080` });

/** Upkeeps of nodes n1..n3 running `builds`, n1 leading the meta group, over one meta state. */
function cluster(builds: Record<string, number>) {
  const world = {
    meta: MetaState.empty().apply({
      op: "bootstrap",
      clusterId: "c",
      totalShards: 16,
      replicationFactor: 3,
      members: ["n1", "n2", "n3"].map(member),
    }).state,
    proposed: [] as MetaCommand[],
  };
  const upkeeps = Object.entries(builds).map(
    ([nodeId, build]) =>
      new VersionUpkeep({
        nodeId,
        build,
        meta: () => world.meta,
        leadsMeta: () => nodeId === "n1",
        propose: (cmd) => {
          world.proposed.push(cmd);
          const r = world.meta.apply(cmd);
          if (r.outcome.kind === "rejected") return Promise.reject(new Error(r.outcome.reason));
          world.meta = r.state;
          return Promise.resolve();
        },
        log: silentLogger,
      }),
  );
  const passes = async (): Promise<void> => {
    for (const u of upkeeps) await u.pass();
  };
  return { world, passes };
}

describe("VersionUpkeep", () => {
  it("proposes nothing while every member runs this build", async () => {
    const { world, passes } = cluster({ n1: 1, n2: 1, n3: 1 });
    await passes();
    assert.deepEqual(world.proposed, []);
  });

  it("reports each build, then raises the version one at a time once every member has it", async () => {
    const { world, passes } = cluster({ n1: 3, n2: 3, n3: 1 });
    await passes();
    assert.deepEqual(world.proposed, [
      { op: "set-build", id: "n1", build: 3 },
      { op: "set-build", id: "n2", build: 3 },
    ]);
    await passes();
    assert.equal(world.meta.version, 1, "n3 runs version 1 only");
    assert.equal(world.proposed.length, 2);

    // n3 upgraded: it reports, and the leader raises 1 → 2 → 3, a pass each.
    const upgraded = cluster({ n1: 3, n2: 3, n3: 3 });
    upgraded.world.meta = world.meta;
    await upgraded.passes();
    assert.deepEqual(upgraded.world.proposed, [{ op: "set-build", id: "n3", build: 3 }]);
    await upgraded.passes();
    assert.equal(upgraded.world.meta.version, 2);
    await upgraded.passes();
    assert.equal(upgraded.world.meta.version, 3);
    await upgraded.passes();
    assert.equal(upgraded.world.proposed.length, 3, "nothing more to do");
  });

  it("reports a rollback to an older build, which holds the version back; never one older than the cluster's", async () => {
    const { world, passes } = cluster({ n1: 2, n2: 2, n3: 2 });
    await passes();
    // n3 rolled back to build 1 reports before the leader's next pass (a pass each goes in
    // the order given): the version stays.
    const rolledBack = cluster({ n3: 1, n1: 2, n2: 2 });
    rolledBack.world.meta = world.meta;
    await rolledBack.passes();
    assert.deepEqual(rolledBack.world.proposed, [{ op: "set-build", id: "n3", build: 1 }]);
    await rolledBack.passes();
    assert.equal(rolledBack.world.meta.version, 1);

    // Once the cluster runs version 2, a node of build 1 reports nothing: it stops instead.
    const again = cluster({ n1: 2, n2: 2, n3: 2 });
    again.world.meta = rolledBack.world.meta;
    await again.passes();
    await again.passes();
    assert.equal(again.world.meta.version, 2);
    const old = cluster({ n1: 2, n2: 2, n3: 1 });
    old.world.meta = again.world.meta;
    await old.passes();
    assert.deepEqual(old.world.proposed, []);
  });
});
