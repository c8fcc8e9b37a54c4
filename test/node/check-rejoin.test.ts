/**
 * A rejoin (a member's new incarnation) is refused while the incarnation the meta group records
 * for that member still answers at its address (src/node/cluster.ts, checkRejoin): a node
 * started with a live member's id must not evict it (issue 51, item 6). A member that is down is
 * replaced as before, and a restart's own incarnation or a retired one are the meta group's to
 * judge.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type MetaMember, MetaState } from "../../src/cluster/index.ts";
import { checkMemberUpdate, checkRejoin } from "../../src/node/cluster.ts";

function member(id: string, incarnation: string): MetaMember {
  return { id, rpcAddr: `${id}.example:7447`, httpAddr: `${id}.example:8080`, incarnation };
}

const state = MetaState.empty().apply({
  op: "bootstrap",
  clusterId: "c-1",
  totalShards: 16,
  replicationFactor: 3,
  members: [member("n1", "i1"), member("n2", "i2"), member("n3", "i3")],
}).state;

const rejoin = (incarnation: string) => ({ op: "rejoin", id: "n2", incarnation }) as const;

describe("checkRejoin", () => {
  it("refuses a new incarnation of a member whose recorded one answers", async () => {
    const asked: string[] = [];
    await assert.rejects(
      checkRejoin(state, rejoin("other"), (address) => {
        asked.push(address);
        return Promise.resolve({ incarnation: "i2" });
      }),
      {
        code: "CAIRN_ERR_DUPLICATE_NODE_ID",
        message:
          /node id n2 belongs to a live member at n2\.example:7447 \(data directory incarnation i2\)/,
      },
    );
    assert.deepEqual(asked, ["n2.example:7447"]);
  });

  it("lets a member that does not answer (or answers as another) be replaced", async () => {
    await checkRejoin(state, rejoin("other"), () => Promise.resolve(undefined));
    await checkRejoin(state, rejoin("other"), () => Promise.resolve({ incarnation: "zzz" }));
  });

  it("asks nothing for the recorded incarnation itself, or for other commands", async () => {
    const never = (): never => assert.fail("probed");
    await checkRejoin(state, rejoin("i2"), never);
    await checkRejoin(null, rejoin("other"), never);
    await checkRejoin(state, { op: "set-member", member: member("n4", "i4") }, never);
    // A join under an active member's id is the meta group's to refuse (already a member).
    await checkRejoin(state, { op: "join", member: member("n2", "other") }, never);
  });

  it("refuses a new node under a decommissioned member's id while that member still answers", async () => {
    const decommissioned = state
      .apply({ op: "move-shard", shard: 0, from: ["n1", "n2", "n3"], nodes: ["n1", "n3"] })
      .state.apply({ op: "set-state", id: "n2", state: "decommissioning" })
      .state.apply({ op: "set-state", id: "n2", state: "decommissioned" }).state;
    assert.equal(decommissioned.stateOf("n2"), "decommissioned");
    const join = { op: "join", member: member("n2", "fresh") } as const;
    await assert.rejects(
      checkRejoin(decommissioned, join, () => Promise.resolve({ incarnation: "i2" })),
      { code: "CAIRN_ERR_DUPLICATE_NODE_ID" },
    );
    // Stopped (it does not answer), the new node may start the id's new life.
    await checkRejoin(decommissioned, join, () => Promise.resolve(undefined));
  });
});

describe("checkMemberUpdate", () => {
  const addresses = (id: string) => ({ id, rpcAddr: "127.0.0.1:9", httpAddr: "127.0.0.1:9" });

  it("lets a node report its own addresses, disk, build, join and rejoin", () => {
    checkMemberUpdate(state, { op: "set-member", member: addresses("n2") }, "n2");
    checkMemberUpdate(state, { op: "set-disk", id: "n2", full: true }, "n2");
    checkMemberUpdate(state, { op: "set-build", id: "n2", build: 9 }, "n2");
    checkMemberUpdate(state, { op: "rejoin", id: "n2", incarnation: "fresh" }, "n2");
    checkMemberUpdate(state, { op: "join", member: member("n5", "i5") }, "n5");
    // Commands any member proposes about others are not this check's.
    checkMemberUpdate(state, { op: "set-state", id: "n3", state: "decommissioning" }, "n2");
  });

  it("refuses a report about another node, and a set-member of a node that is not a member", () => {
    for (const [cmd, from, message] of [
      [
        { op: "set-member", member: addresses("n1") },
        "n2",
        /set-member of node n1 proposed by node n2/,
      ],
      [{ op: "set-disk", id: "n1", full: true }, "n2", /set-disk of node n1 proposed by node n2/],
      [{ op: "set-build", id: "n1", build: 9 }, "", /proposed by a caller naming no node/],
      [{ op: "set-member", member: addresses("x9") }, "x9", /node x9, which is not a member/],
      // A member that did not answer the probe for 2 s was retired by another's rejoin of it.
      [
        { op: "rejoin", id: "n1", incarnation: "made-up" },
        "n2",
        /rejoin of node n1 proposed by node n2/,
      ],
      [
        { op: "join", member: member("n1", "made-up") },
        "n3",
        /join of node n1 proposed by node n3/,
      ],
    ] as const) {
      assert.throws(() => checkMemberUpdate(state, cmd, from), {
        code: "CAIRN_ERR_INVALID_ARGUMENT",
        message,
      });
    }
  });
});
