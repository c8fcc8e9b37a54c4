/**
 * Admin's member calls (src/node/members-admin.ts) on a node whose copy of the meta group trails
 * its leader: each answers the state its proposal set, and each refusal says what to do.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Metadata, type ServiceError, status } from "@grpc/grpc-js";
import { toServiceError } from "../../src/api/errors.ts";
import {
  allocate,
  ClusterViewPublisher,
  type MetaCommand,
  type MetaMember,
  MetaState,
} from "../../src/cluster/index.ts";
import { CairnError } from "../../src/common/errors.ts";
import { loadConfig } from "../../src/config/index.ts";
import { ClusterState, metaRefusal } from "../../src/node/cluster.ts";
import { memberAdmin } from "../../src/node/members-admin.ts";
import { silentLogger } from "../../src/ops/index.ts";
import { metaStateOf } from "./meta-fixtures.ts";

const config = loadConfig({
  env: { CAIRN_NODE_ID: "n1", CAIRN_SEED_NODES: "127.0.0.1:7001,127.0.0.1:7002,127.0.0.1:7003" },
});
const member = (i: number): MetaMember => ({
  id: `n${i}`,
  rpcAddr: `127.0.0.1:700${i}`,
  httpAddr: `127.0.0.1:800${i}`,
});

/** Five members, n4 decommissioning; this node's state and the meta leader's start alike. */
function setup(): { cs: ClusterState; leader: () => MetaState; founded: MetaState } {
  let s = MetaState.empty();
  const cmds: MetaCommand[] = [
    {
      op: "bootstrap",
      clusterId: "c1",
      totalShards: 64,
      replicationFactor: 3,
      members: [1, 2, 3, 4, 5].map(member),
    },
    { op: "set-state", id: "n4", state: "decommissioning" },
  ];
  for (const c of cmds) s = s.apply(c).state;
  const founded = MetaState.empty().apply(cmds[0] as MetaCommand).state;
  const cs = new ClusterState(config, silentLogger, new ClusterViewPublisher(64), "inc", () => {});
  cs.applied(s);
  let leader = s;
  // The meta leader is another node: a proposal resolves once applied there, not here.
  cs.attach({
    propose: (cmd) => {
      const r = leader.apply(cmd);
      if (r.outcome.kind === "rejected") return Promise.reject(metaRefusal(r.outcome));
      leader = r.state;
      return Promise.resolve();
    },
  });
  return { cs, leader: () => leader, founded };
}

describe("memberAdmin", () => {
  it("answers the state a change set, before this node applied it", async () => {
    const { cs, leader } = setup();
    const admin = memberAdmin(cs);
    assert.equal((await admin.recommission("n4")).state, "active");
    assert.equal(leader().stateOf("n4"), "active");
    assert.equal((await admin.decommission("n3")).state, "decommissioning");
    assert.equal(leader().stateOf("n3"), "decommissioning");
    // Its own copy still has the states before: GetNode answers what this node knows.
    assert.equal((await admin.standing("n4")).state, "decommissioning");
  });

  it("decides on the state the meta group committed, not the one this node applied so far", async () => {
    const { cs, leader, founded } = setup();
    cs.applied(founded); // this node trails: n4 still active here, decommissioning at the leader
    let syncs = 0;
    const admin = memberAdmin(cs, () => {
      syncs++;
      cs.applied(leader());
      return Promise.resolve();
    });
    assert.equal((await admin.standing("n4")).state, "decommissioning");
    // Recommissioning found n4 active here and changed nothing; it is active again now.
    assert.equal((await admin.recommission("n4")).state, "active");
    assert.equal(leader().stateOf("n4"), "active");
    assert.equal(syncs, 2);
  });

  it("an unknown id is refused naming the members, not the removed ones among them", async () => {
    // "its members are n1, n2, n3, n4, n5, n6", n2 removed: the list called a retired id a
    // member (an audit, 2026-12-07).
    const { cs } = setup();
    const admin = memberAdmin(cs);
    // n5 joined, was lost before it held a replica, and was removed.
    const s = metaStateOf(
      {
        op: "bootstrap",
        clusterId: "c1",
        totalShards: 64,
        replicationFactor: 3,
        members: [1, 2, 3, 4].map(member),
      },
      { op: "join", member: { ...member(5), incarnation: "i5" } },
      { op: "set-state", id: "n5", state: "dead" },
      { op: "set-state", id: "n5", state: "removed" },
    );
    assert.equal(s.stateOf("n5"), "removed");
    cs.applied(s);
    await assert.rejects(admin.decommission("n9"), (e: CairnError) => {
      assert.equal(e.code, "CAIRN_ERR_INVALID_ARGUMENT");
      assert.equal(
        e.message,
        '"n9" is not a member of the cluster; its members are n1, n2, n3, n4 (removed: n5)',
      );
      return true;
    });
  });

  it("refuses what a member's life does not allow, saying what to do", async () => {
    const { cs } = setup();
    const admin = memberAdmin(cs);
    const refused = async (p: Promise<unknown>, re: RegExp): Promise<void> =>
      assert.rejects(
        p,
        (e: CairnError) => e.code === "CAIRN_ERR_INVALID_ARGUMENT" && re.test(e.message),
      );
    await refused(admin.remove("n2"), /member n2 is active: decommission it first/);
    await refused(admin.remove("n4"), /still decommissioning, 1 replica\(s\) left/);
    await refused(admin.recommission("n9"), /"n9" is not a member/);
    // An active member: recommissioning it changes nothing.
    assert.equal((await admin.recommission("n2")).state, "active");
  });

  it("through a node that does not lead the meta group: the leader's refusal and a wait that ran out answer as themselves, not INTERNAL", async () => {
    const { cs } = setup();
    // What a proposal through another node's ProposeMeta rejects with (peer-rpcs.ts callError).
    let answer: { code: number; details: string; cairnCode?: string } = {
      code: status.INVALID_ARGUMENT,
      details: "meta command refused: member n4 is decommissioned, not decommissioning",
      cairnCode: "CAIRN_ERR_INVALID_ARGUMENT",
    };
    cs.attach({
      propose: () => {
        const metadata = new Metadata();
        if (answer.cairnCode !== undefined) metadata.set("cairn-error-code", answer.cairnCode);
        const err = new Error(`${answer.code} ${status[answer.code]}: ${answer.details}`);
        return Promise.reject(Object.assign(err, { ...answer, metadata }));
      },
    });
    const admin = memberAdmin(cs);
    const answered = async (p: Promise<unknown>): Promise<Partial<ServiceError>> => {
      const err = await p.then(
        () => assert.fail("resolved"),
        (e: unknown) => e,
      );
      return toServiceError(err);
    };
    let got = await answered(admin.recommission("n4"));
    assert.equal(got.code, status.INVALID_ARGUMENT, got.details);
    assert.match(
      got.details ?? "",
      /the meta group's leader refused to record member n4 as active: .*n4 is decommissioned/,
    );
    got = await answered(admin.decommission("n3"));
    assert.equal(got.code, status.INVALID_ARGUMENT, got.details);
    answer = { code: status.UNAVAILABLE, details: "not the leader" };
    got = await answered(admin.decommission("n3"));
    assert.equal(got.code, status.DEADLINE_EXCEEDED, got.details);
    assert.match(got.details ?? "", /the meta group did not record member n3 as decommissioning/);
    assert.equal(got.metadata?.get("cairn-error-code")[0], "CAIRN_ERR_TIMEOUT");
  });
});

describe("memberAdmin on a node that was decommissioned", () => {
  it("refuses at once, UNAVAILABLE naming why and where to ask, instead of waiting for the meta group", async () => {
    // n1 (this node) joined, was decommissioned and still runs: it is out of the meta group, and
    // a sync through its own replica of it never ends. A call waited for it 10 s, then answered
    // DEADLINE_EXCEEDED "the meta group did not confirm its state": past the CLI's 5 s, cairn
    // node remove said "write outcome unknown ... read the key to find out", exit 6.
    const s = metaStateOf(
      {
        op: "bootstrap",
        clusterId: "c1",
        totalShards: 64,
        replicationFactor: 3,
        members: [2, 3, 4].map(member),
      },
      { op: "join", member: { ...member(1), incarnation: "inc1" } },
      { op: "set-state", id: "n1", state: "active" },
      { op: "set-state", id: "n1", state: "decommissioning" },
      { op: "set-state", id: "n1", state: "decommissioned" },
    );
    const cs = new ClusterState(
      config,
      silentLogger,
      new ClusterViewPublisher(64),
      "inc1",
      () => {},
    );
    cs.applied(s);
    let syncs = 0;
    const admin = memberAdmin(cs, () => {
      syncs++;
      return new Promise<void>(() => undefined);
    });
    const calls = await Promise.allSettled([
      admin.standing("n1"),
      admin.decommission("n2"),
      admin.recommission("n2"),
      admin.remove("n1"),
    ]);
    for (const call of calls) {
      assert.equal(call.status, "rejected");
      const answer = toServiceError((call as PromiseRejectedResult).reason);
      assert.equal(answer.code, status.UNAVAILABLE, answer.details);
      assert.equal(answer.metadata?.get("cairn-error-code")[0], "CAIRN_ERR_NOT_MEMBER");
      // For good: a client stops asking this node (it gives up at once with no other).
      assert.equal(answer.metadata?.get("cairn-left-cluster")[0], "true");
      assert.match(
        answer.details ?? "",
        /node n1 was decommissioned from cluster c1: .*another node/,
      );
    }
    assert.equal(syncs, 0, "no wait for the meta group");
    assert.equal(s.stateOf("n1"), "decommissioned");
  });
});

describe("memberAdmin: two decommissions at once", () => {
  /**
   * Four active members, replication factor 3: one may be decommissioned, not two. With
   * `cancelFails`, a proposal making a member active again finds no meta leader in time.
   */
  function four(cancelFails = false): {
    leader: () => MetaState;
    admin: () => ReturnType<typeof memberAdmin>;
  } {
    let leader = MetaState.empty().apply({
      op: "bootstrap",
      clusterId: "c1",
      totalShards: 64,
      replicationFactor: 3,
      members: [1, 2, 3, 4].map(member),
    }).state;
    // Each admin is another node's: its own copy of the meta group, synced from the leader's.
    const admin = (): ReturnType<typeof memberAdmin> => {
      const cs = new ClusterState(
        config,
        silentLogger,
        new ClusterViewPublisher(64),
        "inc",
        () => {},
      );
      cs.applied(leader);
      cs.attach({
        propose: async (cmd) => {
          await new Promise((resolve) => setImmediate(resolve)); // the meta group's round trip
          if (cancelFails && cmd.op === "set-state" && cmd.state === "active") {
            throw new CairnError("CAIRN_ERR_NOT_LEADER", "no meta leader", { retryable: true });
          }
          const r = leader.apply(cmd);
          if (r.outcome.kind === "rejected") throw metaRefusal(r.outcome);
          leader = r.state;
        },
      });
      return memberAdmin(cs, () => {
        cs.applied(leader);
        return Promise.resolve();
      });
    };
    return { leader: () => leader, admin };
  }

  it("through one node: the second is refused, the first goes on", async () => {
    // Both passed the check, made on the state before either applied: two active members were
    // left for three replicas, and neither decommission could ever finish (an audit).
    const { leader, admin } = four();
    const one = admin();
    const [first, second] = await Promise.allSettled([
      one.decommission("n3"),
      one.decommission("n4"),
    ]);
    assert.equal(first.status, "fulfilled");
    assert.equal(second.status, "rejected");
    assert.match(String((second as PromiseRejectedResult).reason), /would leave 2 active member/);
    assert.deepEqual(leader().activeMembers(), ["n1", "n2", "n4"]);
  });

  it("through two nodes: a decommission that leaves too few with the other's is cancelled, and says so", async () => {
    const { leader, admin } = four();
    const results = await Promise.allSettled([
      admin().decommission("n3"),
      admin().decommission("n4"),
    ]);
    const refusals = results.filter((r) => r.status === "rejected");
    assert.ok(refusals.length >= 1, "at least one refused");
    for (const r of refusals) {
      assert.match(
        String(r.reason),
        /began decommissioning at the same time\); n[34]'s decommission was cancelled/,
      );
    }
    assert.ok(
      leader().activeMembers().length >= 3,
      `active: ${leader().activeMembers().join(", ")}`,
    );
    const decommissioning = ["n3", "n4"].filter((n) => leader().stateOf(n) === "decommissioning");
    assert.equal(decommissioning.length, 2 - refusals.length, "each one not refused stands");
  });

  it("through two nodes: a cancel that fails says the decommission may stand, and is not retried", async () => {
    // Answered as the cancel's own failure (a retryable timeout), a client retried the
    // decommission, which now found the member decommissioning and reported it under way: two
    // members leaving, too few left, and the operator told nothing (an audit).
    const { leader, admin } = four(true);
    const results = await Promise.allSettled([
      admin().decommission("n3"),
      admin().decommission("n4"),
    ]);
    const refusals = results.flatMap((r) => (r.status === "rejected" ? [r.reason] : []));
    assert.ok(refusals.length >= 1, "at least one refused");
    for (const reason of refusals) {
      assert.ok(reason instanceof CairnError, String(reason));
      assert.equal(reason.code, "CAIRN_ERR_PRECONDITION", reason.message);
      assert.equal(reason.retryable, false);
      assert.match(
        reason.message,
        /would leave 2 active member.*began decommissioning at the same time\); cancelling (n[34])'s decommission failed \(.*no meta leader\): \1 may still be decommissioning; run `cairn node recommission \1`/,
      );
    }
    assert.deepEqual(
      ["n3", "n4"].filter((n) => leader().stateOf(n) === "decommissioning"),
      ["n3", "n4"],
    );
  });

  it("through two nodes: the other's counts once it is decommissioned already (it held no replica)", async () => {
    // n1..n3 founded the cluster (shard 0 on them); n4 joined and holds no replica yet. Each
    // decommission leaves three active members, the two together two. The allocator's next pass
    // makes n4, empty, decommissioned at once: here between n4's decommission and n1's, both
    // checked on the state before either. n1's found no other member *decommissioning* then,
    // and stood: n1 could never be emptied, two active members left for three replicas.
    let leader = MetaState.empty();
    const cmds: MetaCommand[] = [
      {
        op: "bootstrap",
        clusterId: "c1",
        totalShards: 64,
        replicationFactor: 3,
        members: [1, 2, 3].map(member),
      },
      { op: "join", member: { ...member(4), incarnation: "inc4" } },
      { op: "set-state", id: "n4", state: "active" },
    ];
    for (const c of cmds) leader = leader.apply(c).state;
    /** The allocator's pass on the meta leader, every member alive: its members' lives only. */
    const allocatorPass = (): void => {
      const lives = allocate({
        meta: leader,
        unreachableLong: new Set(),
        alive: new Set(leader.members.keys()),
        caughtUp: () => true,
        maxMoves: 0,
        balanceMoves: 0,
        tolerance: 1,
      }).filter((c) => c.op === "set-state");
      for (const c of lives) leader = leader.apply(c).state;
    };
    const admin = (): ReturnType<typeof memberAdmin> => {
      const cs = new ClusterState(
        config,
        silentLogger,
        new ClusterViewPublisher(64),
        "i",
        () => {},
      );
      cs.applied(leader);
      cs.attach({
        propose: async (cmd) => {
          await new Promise((resolve) => setImmediate(resolve));
          const r = leader.apply(cmd);
          if (r.outcome.kind === "rejected") throw metaRefusal(r.outcome);
          leader = r.state;
          allocatorPass();
        },
      });
      return memberAdmin(cs, () => {
        cs.applied(leader);
        return Promise.resolve();
      });
    };
    const [empty, full] = await Promise.allSettled([
      admin().decommission("n4"),
      admin().decommission("n1"),
    ]);
    assert.equal(empty.status, "fulfilled");
    assert.equal(leader.stateOf("n4"), "decommissioned");
    assert.equal(full.status, "rejected", "n1's decommission stood");
    assert.match(
      String((full as PromiseRejectedResult).reason),
      /\(n4 began decommissioning at the same time\); n1's decommission was cancelled/,
    );
    assert.deepEqual(leader.activeMembers(), ["n1", "n2", "n3"]);
  });
});
