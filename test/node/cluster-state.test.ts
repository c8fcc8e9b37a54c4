/**
 * ClusterState's placement answers and its guard against a node that lost its state: the meta
 * group records each member's data directory incarnation, and a node finding another one
 * recorded for its id stops (CAIRN_ERR_LOST_STATE).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { CairnError } from "../../src/common/errors.ts";
import {
  ClusterViewPublisher,
  type MetaCommand,
  type MetaMember,
  MetaState,
} from "../../src/cluster/index.ts";
import { loadConfig } from "../../src/config/index.ts";
import { ClusterState } from "../../src/node/cluster.ts";
import { silentLogger } from "../../src/ops/index.ts";

const config = loadConfig({
  env: { CAIRN_NODE_ID: "n2", CAIRN_SEED_NODES: "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003" },
});
const member = (i: number): MetaMember => ({
  id: `n${i}`,
  rpcAddr: `127.0.0.1:700${i}`,
  httpAddr: `127.0.0.1:800${i}`,
});
const members = [member(1), member(2), member(3)];
const BOOT: MetaCommand = {
  op: "bootstrap",
  clusterId: "c1",
  totalShards: 1024,
  replicationFactor: 3,
  members,
};

function state(...cmds: MetaCommand[]): MetaState {
  let s = MetaState.empty();
  for (const c of cmds) s = s.apply(c).state;
  return s;
}

function cluster(incarnation: string): { cs: ClusterState; lost: CairnError[] } {
  const lost: CairnError[] = [];
  const cs = new ClusterState(
    config,
    silentLogger,
    new ClusterViewPublisher(1024),
    incarnation,
    (err) => lost.push(err),
  );
  return { cs, lost };
}

describe("ClusterState", () => {
  it("knows no replicas before the meta group, then the committed assignment", () => {
    const { cs } = cluster("inc-a");
    assert.deepEqual(cs.replicasOf(0), []);
    assert.equal(cs.acceptsReplica(0), true);
    cs.applied(state(BOOT));
    assert.equal(cs.clusterId, "c1");
    assert.equal(cs.acceptsReplica(0), false);
    assert.deepEqual([...cs.replicasOf(0)].sort(), ["n1", "n2", "n3"]);
    assert.deepEqual(cs.replicasOf(5), [], "a shard is not created until the meta group says so");
    cs.applied(state(BOOT, { op: "create-shard", shard: 5, replicas: ["n3", "n1", "n2"] }));
    assert.deepEqual(cs.replicasOf(5), ["n3", "n1", "n2"]);
    assert.deepEqual(cs.createdShards().sort(), [0, 5]);
  });

  it("stops a node whose data directory is not the incarnation the cluster recorded", () => {
    const recorded = state(BOOT, {
      op: "set-member",
      member: { ...member(2), incarnation: "inc-a" },
    });
    const same = cluster("inc-a");
    same.cs.applied(recorded);
    assert.deepEqual(same.lost, []);

    const wiped = cluster("inc-b");
    wiped.cs.applied(recorded);
    assert.equal(wiped.lost.length, 1);
    assert.equal(wiped.lost[0]?.code, "CAIRN_ERR_LOST_STATE");
    assert.match(wiped.lost[0]?.message ?? "", /incarnation inc-a.*incarnation inc-b/);
    wiped.cs.applied(recorded);
    assert.equal(wiped.lost.length, 1, "reported once");
  });
});
