/**
 * ClusterState's placement answers and its guard against an old copy of a member's state: a node
 * is its replica id (node id @ incarnation), and a data directory whose incarnation the cluster
 * retired (the member rejoined with a new one) stops the node (CAIRN_ERR_LOST_STATE).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Metadata, status } from "@grpc/grpc-js";
import type { CairnError } from "../../src/common/errors.ts";
import {
  ClusterViewPublisher,
  type MetaCommand,
  type ShardView,
  type MetaMember,
  MetaState,
  rendezvousReplicas,
} from "../../src/cluster/index.ts";
import { loadConfig } from "../../src/config/index.ts";
import {
  ClusterState,
  leaderProposer,
  metaRefusal,
  spreadLeaders,
  transferLeadership,
} from "../../src/node/cluster.ts";
import { SharedViews } from "../../src/node/siblings.ts";
import { silentLogger } from "../../src/ops/index.ts";
import { InvalidRaftRequestError, NotLeaderError } from "../../src/raft/index.ts";
import type { Membership } from "../../src/membership/index.ts";
import type { GrpcTransport, MultiRaft } from "../../src/replication/index.ts";

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

/** Shard 5 created on n1..n3, then moved from n2 to n4 (a fourth member), then settled. */
const MOVE_N2_TO_N4: Record<"four" | "created" | "move" | "settle", MetaCommand> = {
  four: { ...BOOT, members: [...members, member(4)] },
  created: { op: "create-shard", shard: 5, replicas: ["n1", "n2", "n3"] },
  move: { op: "move-shard", shard: 5, from: ["n1", "n2", "n3"], nodes: ["n1", "n4", "n3"] },
  settle: { op: "settle-shard", shard: 5, nodes: ["n1", "n4", "n3"] },
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
    assert.equal(cs.replicaId, "n2@inca");
    assert.deepEqual(cs.replicasOf(0), []);
    assert.equal(cs.acceptsReplica(0), true);
    assert.equal(cs.acceptsReplica(5), false);
    cs.applied(state(BOOT));
    assert.equal(cs.clusterId, "c1");
    assert.deepEqual([...cs.replicasOf(0)].sort(), ["n1", "n2", "n3"]);
    assert.equal(cs.acceptsReplica(0), true, "n2 replicates the meta group");
    assert.deepEqual(cs.replicasOf(5), [], "a shard is not created until the meta group says so");
    assert.equal(cs.acceptsReplica(5), false);
    cs.applied(state(BOOT, { op: "create-shard", shard: 5, replicas: ["n3", "n1", "n2"] }));
    assert.deepEqual(cs.replicasOf(5), ["n3", "n1", "n2"]);
    assert.deepEqual(cs.nodesOf(5), ["n3", "n1", "n2"]);
    assert.equal(cs.acceptsReplica(5), true);
    assert.deepEqual(cs.createdShards().sort(), [0, 5]);
  });

  it("names each other member that leaves for good (decommissioned, removed) once, as it leaves; not one only dead", () => {
    const five = [1, 2, 3, 4, 5].map(member);
    const { cs } = cluster("inc-a");
    const left: string[] = [];
    cs.onMemberLeft = (node) => left.push(node);
    const steps: [MetaCommand, string[]][] = [
      [{ ...BOOT, members: five }, []],
      [{ op: "set-state", id: "n4", state: "decommissioning" }, []],
      [
        {
          op: "move-shard",
          shard: 0,
          from: five.map((m) => m.id),
          nodes: ["n1", "n2", "n3", "n5"],
        },
        [],
      ],
      [{ op: "settle-shard", shard: 0, nodes: ["n1", "n2", "n3", "n5"] }, []],
      [{ op: "set-state", id: "n4", state: "decommissioned" }, ["n4"]],
      [{ op: "set-state", id: "n4", state: "removed" }, ["n4"]],
      [{ op: "set-state", id: "n3", state: "dead" }, ["n4"]],
      [
        { op: "move-shard", shard: 0, from: ["n1", "n2", "n3", "n5"], nodes: ["n1", "n2", "n5"] },
        ["n4"],
      ],
      [{ op: "settle-shard", shard: 0, nodes: ["n1", "n2", "n5"] }, ["n4"]],
      [{ op: "set-state", id: "n3", state: "removed" }, ["n4", "n3"]],
      [{ op: "set-state", id: "n5", state: "dead" }, ["n4", "n3"]],
      [{ op: "set-state", id: "n5", state: "active" }, ["n4", "n3"]],
    ];
    let meta = MetaState.empty();
    for (const [cmd, expected] of steps) {
      const { state: next, outcome } = meta.apply(cmd);
      assert.notEqual(outcome.kind, "rejected", JSON.stringify(outcome));
      meta = next;
      cs.applied(meta);
      assert.deepEqual(left, expected, `after ${cmd.op}`);
    }
    // A node that starts on a state in which they left already hears of them once.
    const { cs: restarted } = cluster("inc-a");
    const heard: string[] = [];
    restarted.onMemberLeft = (node) => heard.push(node);
    restarted.applied(meta);
    restarted.applied(meta);
    assert.deepEqual(heard.sort(), ["n3", "n4"]);
  });

  it("takes no shard placed on other nodes", () => {
    const wide = state(
      { ...BOOT, members: [...members, member(4)] },
      { op: "create-shard", shard: 7, replicas: ["n1", "n3", "n4"] },
    );
    const { cs } = cluster("inc-a");
    cs.applied(wide);
    assert.equal(cs.acceptsReplica(7), false);
  });

  it("tells a group that misses the current replica of one of its nodes", () => {
    const inc = (i: number): string => `inc-${i}`;
    const boot: MetaCommand = {
      ...BOOT,
      members: members.map((m, i) => ({ ...m, incarnation: inc(i + 1) })),
    };
    const { cs } = cluster("inc-2");
    cs.applied(state(boot));
    assert.equal(cs.lacksReplica(0, ["n1@inc1", "n2@inc2", "n3@inc3"]), false);
    cs.applied(state(boot, { op: "rejoin", id: "n1", incarnation: "inc-9" }));
    assert.equal(cs.lacksReplica(0, ["n1@inc1", "n2@inc2", "n3@inc3"]), true);
    assert.equal(cs.lacksReplica(0, ["n2@inc2", "n3@inc3"]), true);
    assert.equal(cs.lacksReplica(0, ["n1@inc9", "n2@inc2", "n3@inc3"]), false);
  });

  it("stops a node whose data directory is an incarnation the cluster retired", () => {
    const boot: MetaCommand = {
      ...BOOT,
      members: members.map((m) => (m.id === "n2" ? { ...m, incarnation: "inc-a" } : m)),
    };
    const rejoined = state(boot, { op: "rejoin", id: "n2", incarnation: "inc-b" });
    const current = cluster("inc-b");
    current.cs.applied(rejoined);
    assert.deepEqual(current.lost, []);

    const old = cluster("inc-a");
    old.cs.applied(rejoined);
    assert.equal(old.lost.length, 1);
    assert.equal(old.lost[0]?.code, "CAIRN_ERR_LOST_STATE");
    assert.match(old.lost[0]?.message ?? "", /incarnation inc-a of member n2.*retired/);
    old.cs.applied(rejoined);
    assert.equal(old.lost.length, 1, "reported once");
  });

  it("shows a shard moved off this node where the meta group places it once the move settles, and calls onMovesChanged", async () => {
    const views = new ClusterViewPublisher(1024);
    const cs = new ClusterState(config, silentLogger, views, "inc-a", () => undefined);
    let movesChanged = 0;
    cs.onMovesChanged = () => movesChanged++;
    const { four, created, move, settle } = MOVE_N2_TO_N4;
    cs.applied(state(four, created));
    // n2's replica saw the move's configuration (n4 added, n2 not yet removed), and no more.
    views.setShard({ id: 5, leader: "n2", replicas: ["n1", "n2", "n3", "n4"], term: 3 });
    cs.applied(state(four, created, move));
    assert.equal(movesChanged, 1, "a move started");
    cs.applied(state(four, created, move, settle));
    assert.equal(movesChanged, 2, "a move settled");
    await new Promise((resolve) => setImmediate(resolve));
    const shown = views.current().shards.find((v) => v.id === 5);
    assert.deepEqual(shown, { id: 5, leader: "", replicas: ["n1", "n4", "n3"], term: 3 });
  });

  it("keeps showing a settled shard where the meta group places it when the replica moved off speaks again or is deleted", async () => {
    const views = new ClusterViewPublisher(1024);
    const cs = new ClusterState(config, silentLogger, views, "inc-a", () => undefined);
    const { four, created, move, settle } = MOVE_N2_TO_N4;
    const shown = async (): Promise<unknown> => {
      await new Promise((resolve) => setImmediate(resolve));
      return views.current().shards.find((v) => v.id === 5);
    };
    cs.applied(state(four, created));
    const during = { id: 5, leader: "n4", replicas: ["n1", "n2", "n3", "n4"], term: 3 };
    // While the move is under way, the replica here is what the view shows.
    cs.applied(state(four, created, move));
    assert.deepEqual(cs.placedView(during), during);
    views.setShard(cs.placedView(during));
    cs.applied(state(four, created, move, settle));
    const settled = { id: 5, leader: "n4", replicas: ["n1", "n4", "n3"], term: 3 };
    assert.deepEqual(await shown(), settled);
    // The replica moved off n2 never learnt it was removed: its election timeout fires, it has
    // no leader and still the move's four voters. The view keeps the placement and the leader.
    const lost = { id: 5, leader: "", replicas: ["n1", "n2", "n3", "n4"], term: 3 };
    views.setShard(cs.placedView(lost));
    assert.deepEqual(await shown(), settled);
    // A shard still placed here shows its replica's own view, unchanged.
    const other = { id: 0, leader: "", replicas: ["n1", "n2", "n3"], term: 7 };
    assert.equal(cs.placedView(other), other);
    // Replica GC deletes the old replica after a view that was not set through placedView.
    views.setShard(lost);
    cs.replicaRemoved(5);
    assert.deepEqual(await shown(), { ...settled, leader: "" });
  });

  it("lists a shard it holds no replica of where the meta group places it, leader unknown, through its moves", async () => {
    const views = new ClusterViewPublisher(1024);
    const cs = new ClusterState(config, silentLogger, views, "inc-a", () => undefined);
    const five: MetaCommand = { ...BOOT, members: [...members, member(4), member(5)] };
    const created: MetaCommand[] = [
      { op: "create-shard", shard: 5, replicas: ["n1", "n2", "n3"] },
      { op: "create-shard", shard: 6, replicas: ["n1", "n3", "n4"] },
    ];
    const shown = async (): Promise<unknown[]> => {
      await new Promise((resolve) => setImmediate(resolve));
      return views.current().shards.map((v) => ({ ...v }));
    };
    // Each state after the first derives from the one before, as the meta group applies them
    // (the node then redoes only the shard each one changed: MetaState.shardsChangedSince).
    let meta = state(five, ...created);
    const apply = (cmd: MetaCommand): void => {
      meta = meta.apply(cmd).state;
      cs.applied(meta);
    };
    cs.applied(meta);
    assert.deepEqual(
      await shown(),
      [],
      "nothing listed before the node says which shards it holds",
    );
    // n2 holds shard 0 and shard 5; its replica's own view lists them (showShard).
    const held = new Set([0, 5]);
    cs.listUnheld((shard) => !held.has(shard));
    assert.deepEqual(await shown(), [{ id: 6, leader: "", replicas: ["n1", "n3", "n4"], term: 0 }]);
    // A move among other nodes: the view follows the placement (its new nodes from its start).
    apply({ op: "move-shard", shard: 6, from: ["n1", "n3", "n4"], nodes: ["n1", "n3", "n5"] });
    assert.deepEqual(await shown(), [{ id: 6, leader: "", replicas: ["n1", "n3", "n5"], term: 0 }]);
    // A leader this node's view knew (its replica, since removed, had seen n1 lead) is kept
    // while it is one of the shard's nodes, dropped once it is not.
    views.setShard({ id: 6, leader: "n1", replicas: ["n1", "n3", "n5"], term: 4 });
    apply({ op: "settle-shard", shard: 6, nodes: ["n1", "n3", "n5"] });
    assert.deepEqual(await shown(), [
      { id: 6, leader: "n1", replicas: ["n1", "n3", "n5"], term: 4 },
    ]);
    apply({ op: "move-shard", shard: 6, from: ["n1", "n3", "n5"], nodes: ["n4", "n3", "n5"] });
    apply({ op: "settle-shard", shard: 6, nodes: ["n4", "n3", "n5"] });
    assert.deepEqual(await shown(), [{ id: 6, leader: "", replicas: ["n4", "n3", "n5"], term: 4 }]);
    // A shard created later is listed as soon as the meta group records it.
    apply({ op: "create-shard", shard: 7, replicas: ["n3", "n4", "n5"] });
    assert.deepEqual(
      ((await shown()) as { id: number }[]).map((v) => v.id),
      [6, 7],
    );
    // The same placements in a state that does not derive from the last one (a snapshot of
    // the meta group, a restart): the node goes over every shard, and changes nothing.
    cs.applied(MetaState.load(meta.records()));
    assert.deepEqual(
      ((await shown()) as { id: number }[]).map((v) => v.id),
      [6, 7],
    );
  });

  it("forgets a gone member's leaderships of the shards it knows second-hand, not of its own", async () => {
    const views = new ClusterViewPublisher(1024);
    const cs = new ClusterState(config, silentLogger, views, "inc-a", () => undefined);
    const five: MetaCommand = { ...BOOT, members: [...members, member(4), member(5)] };
    cs.applied(
      state(
        five,
        { op: "create-shard", shard: 5, replicas: ["n1", "n2", "n3"] },
        { op: "create-shard", shard: 6, replicas: ["n3", "n4", "n5"] },
        { op: "create-shard", shard: 7, replicas: ["n1", "n4", "n5"] },
      ),
    );
    cs.listUnheld((shard) => shard !== 0 && shard !== 5);
    // n2 (this node) learnt n3 and n1 leading shards 6 and 7 while it held replicas of them.
    views.setShard({ id: 5, leader: "n3", replicas: ["n1", "n2", "n3"], term: 2 });
    views.setShard({ id: 6, leader: "n3", replicas: ["n3", "n4", "n5"], term: 4 });
    views.setShard({ id: 7, leader: "n1", replicas: ["n1", "n4", "n5"], term: 3 });
    cs.forgetLeader("n3");
    await new Promise((resolve) => setImmediate(resolve));
    const leaders = views.current().shards.map((v) => [v.id, v.leader, v.term]);
    assert.deepEqual(leaders, [
      [5, "n3", 2], // its replica here says who leads: Raft finds out, not gossip
      [6, "", 4], // the others elect a leader this node does not see
      [7, "n1", 3],
    ]);
  });

  it("a shard worker sets no view of another worker's shard: its copy of one, older than the owner's, was passed back and undid it (chaos seed 7401)", async () => {
    // Worker 0 of this node (n2); shard 5 is worker 1's (its owner drives its view and shares
    // it). Worker 0's copy is the last share that reached it: the move's four voters.
    const views = new SharedViews(1024);
    const passed: ShardView[] = [];
    views.attach([
      { shareShard: (v: ShardView) => passed.push(v), shareMembers: () => {} } as never,
    ]);
    const cs = new ClusterState(config, silentLogger, views, "inc-a", () => undefined);
    cs.ownShards((shard) => shard % 2 === 0);
    const { four, created, move, settle } = MOVE_N2_TO_N4;
    cs.applied(state(four, created, move));
    views.applyShared([{ id: 5, leader: "n1", replicas: ["n1", "n2", "n3", "n4"], term: 3 }], null);
    // The move settles (worker 1's replica applied the removal meanwhile, its share on its way),
    // and gossip finds the leader gone: neither is worker 0's to show for shard 5.
    cs.applied(state(four, created, move, settle));
    cs.forgetLeader("n1");
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(
      passed.filter((v) => v.id === 5),
      [],
      "worker 0 passed its copy of worker 1's shard back to it",
    );
  });

  it("works a shard's current replicas out again only when its placement or a member changed", () => {
    const { cs } = cluster("inc-2");
    const inc = (i: number): string => `inc-${i}`;
    const four: MetaCommand = {
      ...BOOT,
      members: [...members, member(4)].map((m, i) => ({ ...m, incarnation: inc(i + 1) })),
    };
    const shards: MetaCommand[] = [5, 6].map((shard) => ({
      op: "create-shard",
      shard,
      replicas: ["n1", "n2", "n3"],
    }));
    const move: MetaCommand = {
      op: "move-shard",
      shard: 5,
      from: ["n1", "n2", "n3"],
      nodes: ["n1", "n4", "n3"],
    };
    // Each state derives from the one before, as the meta group applies them.
    const created = state(four, ...shards);
    const moved = created.apply(move).state;
    const settled = moved.apply({ op: "settle-shard", shard: 5, nodes: ["n1", "n4", "n3"] }).state;
    const back = settled.apply({
      op: "move-shard",
      shard: 5,
      from: ["n1", "n4", "n3"],
      nodes: ["n1", "n4", "n2"],
    }).state;
    const rejoined = back.apply({ op: "rejoin", id: "n3", incarnation: "inc-9" }).state;
    cs.applied(created);
    const five = cs.replicasNow(5);
    const six = cs.replicasNow(6);
    assert.deepEqual(five, ["n1@inc1", "n2@inc2", "n3@inc3"]);
    cs.applied(moved);
    assert.deepEqual(cs.replicasNow(5), ["n1@inc1", "n4@inc4", "n3@inc3"], "moved");
    assert.equal(cs.replicasNow(6), six, "kept: its placement did not change");
    cs.applied(settled);
    cs.applied(back);
    assert.deepEqual(cs.replicasNow(5), ["n1@inc1", "n4@inc4", "n2@inc2"], "moved again");
    cs.applied(rejoined);
    assert.deepEqual(cs.replicasNow(6), ["n1@inc1", "n2@inc2", "n3@inc9"], "n3 rejoined");
    assert.deepEqual(cs.replicasNow(5), ["n1@inc1", "n4@inc4", "n2@inc2"]);
  });

  it(
    "ends its rejoin loop at once when closed (a stopping node waits for it)",
    { timeout: 5000 },
    async () => {
      const { cs } = cluster("inc-a");
      // No peer alive: the loop waits between checks, never proposing.
      const membership = { members: () => [] } as unknown as Membership;
      const loop = cs.rejoinLoop(membership, () => false);
      await new Promise((resolve) => setImmediate(resolve));
      const started = performance.now();
      cs.close();
      await loop;
      assert.ok(performance.now() - started < 1000, "not after the loop's 2 s wait");
    },
  );

  it(
    "asks the live peers in turn to admit it: another joining node does not hold it forever",
    { timeout: 20_000 },
    async () => {
      const { cs } = cluster("inc-a");
      // Gossip lists n3 first: a node joining too, which knows no cluster; n5 is a member.
      const alive = (id: string) => ({ meta: { id }, state: "alive" });
      const membership = { members: () => [alive("n3"), alive("n5")] } as unknown as Membership;
      const asked: string[] = [];
      let joined: (() => void) | null = null;
      const join = new Promise<void>((resolve) => {
        joined = resolve;
      });
      cs.attach({
        propose: (cmd, _timeoutMs, first) => {
          asked.push(`${cmd.op} via ${first ?? "-"}`);
          if (first === "n3") {
            return Promise.reject(
              Object.assign(new Error("node n3 is not a member of a cluster yet"), {
                code: status.UNAVAILABLE,
              }),
            );
          }
          if (cmd.op === "rejoin") {
            return Promise.reject(
              Object.assign(new Error("node n2 is not a member of cluster c1"), {
                code: status.PERMISSION_DENIED,
              }),
            );
          }
          joined?.();
          return Promise.resolve();
        },
      });
      const loop = cs.rejoinLoop(membership, () => false);
      // A deadline, not a wait: it passes at the loop's second offer, 2 s in.
      let deadline: NodeJS.Timeout | undefined;
      await Promise.race([join, new Promise((r) => (deadline = setTimeout(r, 12_000)))]);
      clearTimeout(deadline);
      cs.close();
      await loop;
      assert.deepEqual(asked.slice(0, 3), ["rejoin via n3", "rejoin via n5", "join via n5"]);
    },
  );

  it("places a shard again when the meta group refused a placement on a member no longer active", async () => {
    const { cs } = cluster("inc2");
    const four = state(MOVE_N2_TO_N4.four);
    cs.applied(four);
    // The meta group has n1 decommissioning; this node has not applied that yet, and places a
    // shard of n1's on it.
    let leader = four.apply({ op: "set-state", id: "n1", state: "decommissioning" }).state;
    const ids = ["n1", "n2", "n3", "n4"];
    const shard = [...Array(64).keys()].find(
      (id) => id > 0 && rendezvousReplicas(id, ids, 3).includes("n1"),
    ) as number;
    const proposed: MetaCommand[] = [];
    cs.attach({
      propose: (cmd) => {
        if (cmd.op === "create-shard") proposed.push(cmd);
        const r = leader.apply(cmd);
        if (r.outcome.kind === "rejected") {
          // Refused; this node applies the meta group's state a moment later.
          setTimeout(() => cs.applied(leader), 5);
          return Promise.reject(metaRefusal(r.outcome));
        }
        leader = r.state;
        setTimeout(() => cs.applied(leader), 5);
        return Promise.resolve();
      },
    });
    await cs.ensureShard(shard, 5_000);
    assert.equal(proposed.length, 2, "proposed again once refused");
    assert.ok(JSON.stringify(proposed[0]).includes('"n1"'), "the first placement names n1");
    assert.equal(cs.nodesOf(shard).length, 3);
    assert.ok(!cs.nodesOf(shard).includes("n1"), `placed on ${cs.nodesOf(shard).join()}`);
  });

  it("fails a shard's creation at once, with no timer set in the past, when proposing it took the whole timeout", async () => {
    const { cs } = cluster("inc2");
    cs.applied(state(BOOT));
    // This node leads the meta group; the proposal is applied there only after the timeout.
    const store = {
      shardInfo: () => ({ leader: null }),
      proposeMeta: () =>
        new Promise((resolve) => setTimeout(() => resolve({ kind: "applied" }), 20)),
      nodeId: "n2",
    } as unknown as MultiRaft;
    cs.attach(leaderProposer(store, null as unknown as GrpcTransport));
    const warnings: string[] = [];
    const onWarning = (w: Error): void => void warnings.push(w.name);
    process.on("warning", onWarning);
    try {
      await assert.rejects(
        cs.ensureShard(7, 1),
        (err: CairnError) => err.code === "CAIRN_ERR_SHARD_CREATION",
      );
      await new Promise((resolve) => setImmediate(resolve)); // warnings are emitted on a tick
    } finally {
      process.off("warning", onWarning);
    }
    assert.deepEqual(warnings, []);
  });
});

describe("a member's addresses", () => {
  it("are reported to the meta group when the member restarted on others (same data directory)", () => {
    const boot: MetaCommand = {
      ...BOOT,
      members: members.map((m, i) => ({ ...m, incarnation: `inc-${i + 1}` })),
    };
    // The meta group's state, which applies what this node proposes and hands it back.
    let leader = state(boot);
    const proposed: MetaCommand[] = [];
    const { cs } = cluster("inc-2");
    cs.applied(leader);
    cs.attach({
      propose: (cmd) => {
        proposed.push(cmd);
        leader = leader.apply(cmd).state;
        cs.applied(leader);
        return Promise.resolve();
      },
    });
    // n2 restarted on its data directory, on other ports than the ones the meta group recorded
    // (a pod whose IP changed): the duplicate node id probe (checkRejoin), the peers' fallback
    // address of a member gossip holds dead and the members' connection reserve all read the
    // recorded ones.
    cs.setSelf({ rpcAddr: "127.0.0.1:7102", httpAddr: "127.0.0.1:8102" });
    assert.deepEqual(proposed, [
      {
        op: "set-member",
        member: {
          id: "n2",
          rpcAddr: "127.0.0.1:7102",
          httpAddr: "127.0.0.1:8102",
          incarnation: "inc-2",
        },
      },
    ]);
    assert.equal(leader.members.get("n2")?.rpcAddr, "127.0.0.1:7102");
    assert.equal(leader.members.get("n2")?.httpAddr, "127.0.0.1:8102");
    assert.equal(leader.members.get("n2")?.incarnation, "inc-2");

    // A member on the addresses recorded proposes nothing.
    const same = cluster("inc-2");
    const none: MetaCommand[] = [];
    same.cs.applied(state(boot));
    same.cs.attach({ propose: (cmd) => (none.push(cmd), Promise.resolve()) });
    same.cs.setSelf({ rpcAddr: "127.0.0.1:7002", httpAddr: "127.0.0.1:8002" });
    assert.deepEqual(none, []);
  });
});

describe("spreadLeaders", () => {
  it("hands a group's leadership to its preferred leader's current replica, never to a retired one", () => {
    const inc = (i: number): string => `inc-${i}`;
    const boot: MetaCommand = {
      ...BOOT,
      members: members.map((m, i) => ({ ...m, incarnation: inc(i + 1) })),
    };
    // Shard 5's preferred leader is n1, whose data directory was wiped: the meta group records
    // its new incarnation, and n2 leads the shard's group, which still has n1's old replica as
    // a voter (n2's upkeep has not replaced it yet).
    const created = state(boot, { op: "create-shard", shard: 5, replicas: ["n1", "n2", "n3"] });
    const rejoined = created.apply({ op: "rejoin", id: "n1", incarnation: "inc-9" }).state;
    const transfers: string[] = [];
    let voters = ["n1@inc1", "n2@inc2", "n3@inc3"];
    const store = {
      shardIds: () => [5],
      leads: () => true,
      shardInfo: () => ({ leader: "n2", role: "leader", voters }),
      transferLeader: (id: number, to: string) => {
        transfers.push(`${id}:${to}`);
        return Promise.resolve();
      },
    } as unknown as MultiRaft;
    const { cs } = cluster("inc-2");
    cs.applied(created);
    assert.equal(spreadLeaders(store, cs, "n2", new Set(["n1", "n3"])), 1);
    assert.deepEqual(transfers, ["5:n1@inc1"], "n1's current replica leads");
    transfers.length = 0;
    cs.applied(rejoined);
    // n1@inc1 is gone for good: a transfer to it can only stall the group's writes until it is
    // abandoned (an election timeout), at every pass, until the retired replica is replaced.
    assert.equal(spreadLeaders(store, cs, "n2", new Set(["n1", "n3"])), 0);
    assert.deepEqual(transfers, [], "no transfer to a retired replica");
    // Once the group has n1's new replica as a voter, it gets the leadership.
    voters = ["n2@inc2", "n3@inc3", "n1@inc9"];
    assert.equal(spreadLeaders(store, cs, "n2", new Set(["n1", "n3"])), 1);
    assert.deepEqual(transfers, ["5:n1@inc9"]);
  });
});

describe("transferLeadership", () => {
  /**
   * Node n2's ClusterState on `meta`, whose prefer-leader proposals apply to it (or fail with
   * `refuse`), those made, and a store whose shard 5 is `group` here (null: no replica here), which
   * records the transfers asked for (refused with `transferRefusal` when given).
   */
  function transferSetup(
    meta: MetaState,
    group: { leader: string; role: string; voters: string[]; learners: string[] } | null,
    options: { refuse?: unknown; transferRefusal?: unknown } = {},
  ): { cs: ClusterState; store: MultiRaft; proposed: MetaCommand[]; targets: string[] } {
    const { cs } = cluster("inc-2");
    let now = meta;
    cs.applied(now);
    const proposed: MetaCommand[] = [];
    cs.attach({
      propose: (cmd) => {
        // (Its own rejoin, which n2 proposes as it is attached, aside.)
        if (cmd.op !== "prefer-leader") return Promise.resolve();
        proposed.push(cmd);
        if (options.refuse !== undefined) return Promise.reject(options.refuse);
        now = now.apply(cmd).state;
        cs.applied(now);
        return Promise.resolve();
      },
    });
    const targets: string[] = [];
    const store = {
      shardInfo: (id: number) => (id === 5 ? group : null),
      transferLeader: (_id: number, to: string) => {
        targets.push(to);
        return options.transferRefusal === undefined
          ? Promise.resolve()
          : Promise.reject(options.transferRefusal);
      },
    } as unknown as MultiRaft;
    return { cs, store, proposed, targets };
  }

  const refusedWith =
    (code: string, message: RegExp) =>
    (err: CairnError): boolean => {
      assert.equal(err.code, code, err.message);
      assert.match(err.message, message);
      return true;
    };

  it("a node that holds no replica of the shard refuses at once, naming those that do, and records nothing", async () => {
    // Four members, shard 5 on n1, n3 and n4: n2 cannot see its leader, nor leadership move.
    const meta = state(
      { ...BOOT, members: [...members, member(4)] },
      { op: "create-shard", shard: 5, replicas: ["n1", "n3", "n4"] },
    );
    const { cs, store, proposed, targets } = transferSetup(meta, null);
    const started = performance.now();
    await assert.rejects(
      transferLeadership(cs, store, 5, "n3", 10_000),
      refusedWith(
        "CAIRN_ERR_PRECONDITION",
        /n2 holds no replica of shard 5.*ask one that does: n1, n3, n4/,
      ),
    );
    assert.ok(performance.now() - started < 5_000, "refused, not timed out");
    assert.deepEqual(proposed, [], "no preferred leader recorded");
    assert.deepEqual(targets, []);
  });

  it("a leader whose group has no voter on the node yet (a move under way) refuses, and records nothing", async () => {
    // Shard 5 moves from n1 to n4: n4 is one of its nodes, its replica a learner still.
    const meta = state(
      { ...BOOT, members: [...members, member(4)] },
      { op: "create-shard", shard: 5, replicas: ["n1", "n2", "n3"] },
      { op: "move-shard", shard: 5, from: ["n1", "n2", "n3"], nodes: ["n4", "n2", "n3"] },
    );
    const group = { leader: "n2", role: "leader", voters: ["n1", "n2", "n3"], learners: ["n4"] };
    const { cs, store, proposed, targets } = transferSetup(meta, group);
    await assert.rejects(
      transferLeadership(cs, store, 5, "n4", 10_000),
      refusedWith(
        "CAIRN_ERR_PRECONDITION",
        /shard 5's group has no voter on n4 yet.*its voters are n1, n2, n3/,
      ),
    );
    assert.deepEqual(proposed, []);
    assert.deepEqual(targets, []);
  });

  it("never hands leadership to a retired replica still in the group: refused until the group has the node's current one", async () => {
    const boot: MetaCommand = {
      ...BOOT,
      members: members.map((m, i) => ({ ...m, incarnation: `inc-${i + 1}` })),
    };
    // n1 rejoined on a wiped data directory; the group of shard 5, led by n2 here, still has
    // n1's old replica as a voter (its leader has not replaced it yet). An operator asks for n1
    // to lead shard 5.
    const meta = state(
      boot,
      { op: "create-shard", shard: 5, replicas: ["n2", "n1", "n3"] },
      { op: "rejoin", id: "n1", incarnation: "inc-9" },
    );
    const voters = ["n2@inc2", "n1@inc1", "n3@inc3"];
    const { cs, store, proposed, targets } = transferSetup(meta, {
      leader: "n2",
      role: "leader",
      voters,
      learners: [],
    });
    // A transfer to n1@inc1, which no node runs any more, held the group's writes until
    // abandoned (an election timeout).
    await assert.rejects(
      transferLeadership(cs, store, 5, "n1", 10_000),
      refusedWith("CAIRN_ERR_PRECONDITION", /shard 5's group has no voter on n1 yet/),
    );
    assert.deepEqual(proposed, []);
    assert.deepEqual(targets, []);
  });

  it("the meta group's refusal of the preferred leader, here or at its leader, is said as such; only a proposal that found no meta leader in time is a timeout", async () => {
    const meta = state(BOOT, { op: "create-shard", shard: 5, replicas: ["n1", "n2", "n3"] });
    const group = { leader: "n1", role: "follower", voters: ["n1", "n2", "n3"], learners: [] };
    // Refused by the meta group here (its state changed since n2's checks).
    const here = transferSetup(meta, group, {
      refuse: metaRefusal({ reason: "n3 is not a replica of shard 5" }),
    });
    await assert.rejects(
      transferLeadership(here.cs, here.store, 5, "n3", 10_000),
      refusedWith("CAIRN_ERR_INVALID_ARGUMENT", /n3 is not a replica of shard 5/),
    );
    // Refused by the meta leader on another node (ProposeMeta's answer).
    const metadata = new Metadata();
    metadata.set("cairn-error-code", "CAIRN_ERR_INVALID_ARGUMENT");
    const remote = Object.assign(new Error("3 INVALID_ARGUMENT: n3 is not a replica of shard 5"), {
      code: status.INVALID_ARGUMENT,
      details: "n3 is not a replica of shard 5",
      metadata,
    });
    const there = transferSetup(meta, group, { refuse: remote });
    await assert.rejects(
      transferLeadership(there.cs, there.store, 5, "n3", 10_000),
      refusedWith("CAIRN_ERR_INVALID_ARGUMENT", /n3 is not a replica of shard 5/),
    );
    // No meta leader answered before the deadline: that is a timeout.
    const none = transferSetup(meta, group, { refuse: new NotLeaderError(null) });
    await assert.rejects(
      transferLeadership(none.cs, none.store, 5, "n3", 10_000),
      refusedWith("CAIRN_ERR_TIMEOUT", /did not record n3 as shard 5's preferred leader/),
    );
  });

  it("a leader whose transfer the group refuses says why at once; one the group takes and that does not happen in time is a timeout", async () => {
    const meta = state(BOOT, { op: "create-shard", shard: 5, replicas: ["n1", "n2", "n3"] });
    const group = { leader: "n2", role: "leader", voters: ["n1", "n2", "n3"], learners: [] };
    // The group's configuration changed between the check and the transfer.
    const refused = transferSetup(meta, group, {
      transferRefusal: new InvalidRaftRequestError("cannot transfer leadership to n3: not a voter"),
    });
    const started = performance.now();
    await assert.rejects(
      transferLeadership(refused.cs, refused.store, 5, "n3", 10_000),
      refusedWith("CAIRN_ERR_INVALID_RAFT_REQUEST", /not a voter/),
    );
    assert.ok(performance.now() - started < 5_000, "refused, not timed out");
    // Taken, but n3 never leads (it is down, say).
    const slow = transferSetup(meta, group);
    await assert.rejects(
      transferLeadership(slow.cs, slow.store, 5, "n3", 300),
      refusedWith("CAIRN_ERR_TIMEOUT", /leadership had not moved there within 300 ms/),
    );
    assert.ok(slow.targets.length > 0);
  });
});
