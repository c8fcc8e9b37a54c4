/**
 * isRemovable, replica GC's rule (src/node/replica-gc.ts): a replica goes only once the
 * committed meta state places its shard elsewhere with no move under way, never shard 0, and
 * never when unsure (no meta state, a shard not created). hasLeftForGood: a decommissioned or
 * removed node needs no sync before it deletes.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type MetaCommand, MetaState } from "../../src/cluster/index.ts";
import { metaStateOf } from "./meta-fixtures.ts";
import { hasLeftForGood, isRemovable } from "../../src/node/replica-gc.ts";

const members = [1, 2, 3, 4].map((i) => ({
  id: `n${i}`,
  rpcAddr: `127.0.0.1:700${i}`,
  httpAddr: `127.0.0.1:800${i}`,
  incarnation: `i${i}`,
}));

const BOOT: MetaCommand = {
  op: "bootstrap",
  clusterId: "c1",
  totalShards: 16,
  replicationFactor: 3,
  members,
};
const CREATED: MetaCommand = { op: "create-shard", shard: 4, replicas: ["n1", "n2", "n3"] };
const MOVE: MetaCommand = {
  op: "move-shard",
  shard: 4,
  from: ["n1", "n2", "n3"],
  nodes: ["n1", "n2", "n4"],
};
const SETTLE: MetaCommand = { op: "settle-shard", shard: 4, nodes: ["n1", "n2", "n4"] };

describe("isRemovable (replica GC's rule)", () => {
  it("keeps a replica the shard is placed on, and everything when unsure", () => {
    const created = metaStateOf(BOOT, CREATED);
    assert.equal(isRemovable(created, 4, "n3"), false);
    assert.equal(isRemovable(created, 4, "n4"), true, "never placed on n4: nothing to keep");
    assert.equal(isRemovable(null, 4, "n3"), false);
    assert.equal(isRemovable(MetaState.empty(), 4, "n3"), false);
    assert.equal(isRemovable(created, 5, "n3"), false, "a shard not created");
    assert.equal(isRemovable(created, 4, "n9"), false, "a node that is not a member");
  });

  it("keeps the old replica while its move is under way, removes it once settled", () => {
    const moving = metaStateOf(BOOT, CREATED, MOVE);
    assert.equal(isRemovable(moving, 4, "n3"), false);
    assert.equal(isRemovable(moving, 4, "n4"), false);
    const settled = metaStateOf(BOOT, CREATED, MOVE, SETTLE);
    assert.equal(isRemovable(settled, 4, "n3"), true);
    for (const n of ["n1", "n2", "n4"]) assert.equal(isRemovable(settled, 4, n), false, n);
    // Moved back onto n3: its replica is needed again (while moving and after).
    const back: MetaCommand = {
      op: "move-shard",
      shard: 4,
      from: ["n1", "n2", "n4"],
      nodes: ["n1", "n2", "n3"],
    };
    assert.equal(isRemovable(metaStateOf(BOOT, CREATED, MOVE, SETTLE, back), 4, "n3"), false);
  });

  it("never removes the meta group's replica", () => {
    const n5 = {
      id: "n5",
      rpcAddr: "127.0.0.1:7005",
      httpAddr: "127.0.0.1:8005",
      incarnation: "i5",
    };
    const decommissioned = metaStateOf(
      BOOT,
      { op: "join", member: n5 },
      { op: "set-state", id: "n5", state: "active" },
      { op: "set-state", id: "n5", state: "decommissioning" },
      { op: "set-state", id: "n5", state: "decommissioned" },
    );
    assert.equal(isRemovable(decommissioned, 0, "n5"), false);
    assert.equal(hasLeftForGood(decommissioned, "n5"), true);
    assert.equal(hasLeftForGood(decommissioned, "n1"), false);
    assert.equal(hasLeftForGood(null, "n1"), false);
    assert.equal(isRemovable(decommissioned, 0, "n1"), false);
  });
});
