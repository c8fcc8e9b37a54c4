/**
 * nextReplicaChange: how a group's leader replaces the replica of a node that rejoined with a
 * new data directory — remove the retired replica, add the new one as a learner, promote it once
 * caught up — and that a leader whose meta state is behind the group changes nothing.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  allocate,
  BUILD_VERSION,
  type MemberState,
  type MetaCommand,
  MetaState,
  nodeOfReplica,
  VERSION_DEMOTION,
  VERSION_MOVE_ORIGIN,
} from "../../src/cluster/index.ts";
import {
  LeaderMetaCheck,
  nextReplicaChange,
  type ReplicaEffects,
  replaceReplicas,
} from "../../src/node/replicas.ts";

const members = [1, 2, 3].map((i) => ({
  id: `n${i}`,
  rpcAddr: `127.0.0.1:700${i}`,
  httpAddr: `127.0.0.1:800${i}`,
  incarnation: `old${i}`,
}));
/** A fourth node, for the moves. */
const n4 = { id: "n4", rpcAddr: "127.0.0.1:7004", httpAddr: "127.0.0.1:8004", incarnation: "i4" };
const BOOT: MetaCommand = {
  op: "bootstrap",
  clusterId: "c1",
  totalShards: 16,
  replicationFactor: 3,
  members,
};

function state(...cmds: MetaCommand[]): MetaState {
  let s = MetaState.empty();
  for (const c of cmds) s = s.apply(c).state;
  return s;
}

const before = state(BOOT, { op: "create-shard", shard: 4, replicas: ["n1", "n2", "n3"] });
const after = state(
  BOOT,
  { op: "create-shard", shard: 4, replicas: ["n1", "n2", "n3"] },
  { op: "rejoin", id: "n1", incarnation: "new1" },
);
const never = (): boolean => false;
const always = (): boolean => true;

describe("nextReplicaChange", () => {
  it("leaves a group whose voters are its nodes' current replicas alone", () => {
    const group = { voters: ["n1@old1", "n2@old2", "n3@old3"], learners: [] };
    assert.equal(nextReplicaChange(before, 4, "n2@old2", group, always), null);
    assert.equal(nextReplicaChange(before, 9, "n2@old2", group, always), null, "not created");
  });

  it("removes the retired replica, adds the new one as a learner, promotes it once caught up", () => {
    const self = "n2@old2";
    let group = { voters: ["n1@old1", "n2@old2", "n3@old3"], learners: [] as string[] };
    assert.deepEqual(nextReplicaChange(after, 4, self, group, always), {
      type: "remove",
      node: "n1@old1",
    });
    group = { voters: ["n2@old2", "n3@old3"], learners: [] };
    assert.deepEqual(nextReplicaChange(after, 4, self, group, always), {
      type: "add-learner",
      node: "n1@new1",
    });
    group = { voters: ["n2@old2", "n3@old3"], learners: ["n1@new1"] };
    assert.equal(nextReplicaChange(after, 4, self, group, never), null, "not caught up yet");
    assert.deepEqual(nextReplicaChange(after, 4, self, group, always), {
      type: "add-voter",
      node: "n1@new1",
    });
    group = { voters: ["n1@new1", "n2@old2", "n3@old3"], learners: [] };
    assert.equal(nextReplicaChange(after, 4, self, group, always), null);
  });

  it("changes nothing while its meta state is behind the group", () => {
    // This leader has not applied the rejoin yet, but the group already holds the new replica:
    // acting on the old state would remove the new replica and add the retired one back.
    const group = { voters: ["n1@new1", "n2@old2", "n3@old3"], learners: [] };
    assert.equal(nextReplicaChange(before, 4, "n2@old2", group, always), null);
    const learning = { voters: ["n2@old2", "n3@old3"], learners: ["n1@new1"] };
    assert.equal(nextReplicaChange(before, 4, "n2@old2", learning, always), null);
  });

  it("never removes the leader's own replica", () => {
    const group = { voters: ["n1@old1", "n2@old2", "n3@old3"], learners: [] };
    const change = nextReplicaChange(after, 4, "n1@old1", group, always);
    assert.notDeepEqual(change, { type: "remove", node: "n1@old1" });
  });
});

describe("nextReplicaChange: a move (design.md §5.2)", () => {
  const joined = state(
    BOOT,
    { op: "create-shard", shard: 4, replicas: ["n1", "n2", "n3"] },
    { op: "join", member: n4 },
  );
  const moving = state(
    BOOT,
    { op: "create-shard", shard: 4, replicas: ["n1", "n2", "n3"] },
    { op: "join", member: n4 },
    { op: "set-state", id: "n4", state: "active" },
    { op: "move-shard", shard: 4, from: ["n1", "n2", "n3"], nodes: ["n4", "n2", "n3"] },
  );

  it("adds the new node as a learner, promotes it, and only then removes the old voter", () => {
    const self = "n2@old2";
    let group = { voters: ["n1@old1", "n2@old2", "n3@old3"], learners: [] as string[] };
    assert.deepEqual(nextReplicaChange(moving, 4, self, group, always), {
      type: "add-learner",
      node: "n4@i4",
    });
    group = { voters: ["n1@old1", "n2@old2", "n3@old3"], learners: ["n4@i4"] };
    // Not caught up: the old voter stays (three caught-up voters, never fewer).
    assert.equal(nextReplicaChange(moving, 4, self, group, never), null);
    assert.deepEqual(nextReplicaChange(moving, 4, self, group, always), {
      type: "add-voter",
      node: "n4@i4",
    });
    group = { voters: ["n1@old1", "n2@old2", "n3@old3", "n4@i4"], learners: [] };
    assert.deepEqual(nextReplicaChange(moving, 4, self, group, always), {
      type: "remove",
      node: "n1@old1",
    });
    group = { voters: ["n2@old2", "n3@old3", "n4@i4"], learners: [] };
    assert.deepEqual(nextReplicaChange(moving, 4, self, group, always), {
      type: "settle",
      nodes: ["n4", "n2", "n3"],
    });
  });

  it("a leader leaving the shard hands leadership to its first node instead of removing itself", () => {
    const group = { voters: ["n1@old1", "n2@old2", "n3@old3", "n4@i4"], learners: [] };
    assert.deepEqual(nextReplicaChange(moving, 4, "n1@old1", group, always), {
      type: "transfer",
      to: "n4@i4",
    });
  });

  it("a leader leaving the shard hands leadership only to a caught-up, live voter, else keeps leading", () => {
    const group = { voters: ["n1@old1", "n2@old2", "n3@old3", "n4@i4"], learners: [] };
    // The first node (n4) is behind or dead: the next of the shard's nodes takes over.
    const behind = (r: string): boolean => r !== "n4@i4";
    assert.deepEqual(nextReplicaChange(moving, 4, "n1@old1", group, behind), {
      type: "transfer",
      to: "n2@old2",
    });
    const dead = (n: string): boolean => n !== "n4";
    assert.deepEqual(nextReplicaChange(moving, 4, "n1@old1", group, always, dead), {
      type: "transfer",
      to: "n2@old2",
    });
    // None can take it: the leader stays (and serves) until one can.
    assert.equal(nextReplicaChange(moving, 4, "n1@old1", group, never), null);
  });

  it("removes a dead old voter first, and a live one only if the voters left keep a majority alive", () => {
    // A move to n4 redirected to n5 after n4, promoted, died; then n1 fails too (not yet marked
    // dead). Five voters, three alive: removing n3 (live, first) left two of four alive, and
    // the group no quorum (an audit, 2026-12-05).
    const n5 = {
      id: "n5",
      rpcAddr: "127.0.0.1:7005",
      httpAddr: "127.0.0.1:8005",
      incarnation: "i5",
    };
    const redirected = state(
      BOOT,
      { op: "create-shard", shard: 4, replicas: ["n1", "n2", "n3"] },
      { op: "join", member: n4 },
      { op: "set-state", id: "n4", state: "active" },
      { op: "join", member: n5 },
      { op: "set-state", id: "n5", state: "active" },
      { op: "move-shard", shard: 4, from: ["n1", "n2", "n3"], nodes: ["n1", "n2", "n4"] },
      { op: "set-state", id: "n4", state: "dead" },
      { op: "move-shard", shard: 4, from: ["n1", "n2", "n4"], nodes: ["n1", "n2", "n5"] },
    );
    assert.deepEqual(redirected.nodesOf(4), ["n1", "n2", "n5"]);
    const voters = ["n1@old1", "n2@old2", "n3@old3", "n4@i4", "n5@i5"];
    const down =
      (...nodes: string[]) =>
      (n: string) =>
        !nodes.includes(n);
    const group = { voters, learners: [] };
    assert.deepEqual(nextReplicaChange(redirected, 4, "n2@old2", group, always, down("n1", "n4")), {
      type: "remove",
      node: "n4@i4",
    });
    // Both old voters alive but two others down: removing either leaves two of four alive. Wait.
    assert.equal(
      nextReplicaChange(redirected, 4, "n2@old2", group, always, down("n1", "n5")),
      null,
    );
    // With a majority left alive, the first goes.
    assert.deepEqual(nextReplicaChange(redirected, 4, "n2@old2", group, always, down("n1")), {
      type: "remove",
      node: "n3@old3",
    });
  });

  it("promotes a caught-up learner only while its node is alive: a dead one would cost the group its quorum", () => {
    // n1 died: the repair moves its replica to n4. n4's learner caught up (the shard is idle: its
    // commit index stays where n4 acknowledged it), then n4 died before its promotion. Promoted,
    // the group had four voters, two of them dead, and no quorum for good (a model of the groups'
    // steps, 2026-12-07): it could neither elect a leader nor be redirected off n4.
    const repair = state(
      BOOT,
      { op: "create-shard", shard: 4, replicas: ["n1", "n2", "n3"] },
      { op: "join", member: n4 },
      { op: "set-state", id: "n4", state: "active" },
      { op: "set-state", id: "n1", state: "dead" },
      { op: "move-shard", shard: 4, from: ["n1", "n2", "n3"], nodes: ["n4", "n2", "n3"] },
    );
    const group = { voters: ["n1@old1", "n2@old2", "n3@old3"], learners: ["n4@i4"] };
    const down =
      (...nodes: string[]) =>
      (n: string) =>
        !nodes.includes(n);
    assert.equal(nextReplicaChange(repair, 4, "n2@old2", group, always, down("n1", "n4")), null);
    // Alive, it is promoted (three of four voters alive), whether or not an old voter is.
    for (const alive of [down("n1"), always]) {
      assert.deepEqual(nextReplicaChange(repair, 4, "n2@old2", group, always, alive), {
        type: "add-voter",
        node: "n4@i4",
      });
    }
  });

  it("property: no step a group's leader takes leaves its voters without a majority alive, whatever dies meanwhile", () => {
    // Six nodes, a shard on three; members die and come back, the allocator moves the shard (a
    // repair, a rebalance, a redirect), and its leader takes the steps nextReplicaChange names,
    // its learners caught up or not (a learner that caught up stays so while the shard is idle,
    // dead or alive). A step may wait; it never turns a majority alive into none.
    const ids = ["n1", "n2", "n3", "n4", "n5", "n6"];
    const event = fc.record({ kind: fc.nat(9), a: fc.nat(), flag: fc.boolean() });
    fc.assert(
      fc.property(fc.array(event, { minLength: 10, maxLength: 120 }), (events) => {
        let s = state(
          BOOT,
          ...ids.slice(3).flatMap((id): MetaCommand[] => [
            { op: "join", member: { ...n4, id, incarnation: `i-${id}` } },
            { op: "set-state", id, state: "active" },
          ]),
          { op: "create-shard", shard: 4, replicas: ["n1", "n2", "n3"] },
        );
        const group = { voters: [...s.replicasNow(4)], learners: [] as string[] };
        const down = new Set<string>();
        const caughtUp = new Set<string>();
        const isAlive = (r: string): boolean => !down.has(nodeOfReplica(r));
        for (const e of events) {
          const id = ids[e.a % ids.length] as string;
          if (e.kind === 0) {
            if (down.has(id)) down.delete(id);
            else down.add(id);
          } else if (e.kind === 1) {
            for (const l of group.learners) caughtUp.add(l);
          } else if (e.kind === 2) {
            const alive = new Set(ids.filter((n) => !down.has(n)));
            const world = { alive, caughtUp: always, maxMoves: 4, balanceMoves: 4, tolerance: 1 };
            const unreachableLong = e.flag ? new Set(down) : new Set<string>();
            for (const cmd of allocate({ meta: s, unreachableLong, ...world })) {
              s = s.apply(cmd).state;
            }
          } else {
            const alive = group.voters.filter(isAlive);
            if (alive.length * 2 <= group.voters.length) continue; // no leader
            const self = alive[e.a % alive.length] as string;
            const step = nextReplicaChange(
              s,
              4,
              self,
              group,
              (r) => caughtUp.has(r) || group.voters.includes(r),
              (n) => !down.has(n),
            );
            if (step === null || step.type === "transfer") continue;
            if (step.type === "settle") {
              s = s.apply({ op: "settle-shard", shard: 4, nodes: [...step.nodes] }).state;
              continue;
            }
            group.voters = group.voters.filter((v) => v !== step.node);
            group.learners = group.learners.filter((l) => l !== step.node);
            if (step.type === "add-voter") group.voters.push(step.node);
            else if (step.type === "add-learner") group.learners.push(step.node);
            assert.ok(
              group.voters.filter(isAlive).length * 2 > group.voters.length,
              `${JSON.stringify(step)} left ${group.voters.join(",")} with ${[...down].join(",")} down`,
            );
          }
        }
      }),
      { numRuns: 300 },
    );
  });

  it("the meta group keeps a learner on a joining member, and never promotes it", () => {
    const group = { voters: ["n1@old1", "n2@old2", "n3@old3"], learners: [] as string[] };
    assert.deepEqual(nextReplicaChange(joined, 0, "n1@old1", group, always), {
      type: "add-learner",
      node: "n4@i4",
    });
    const withLearner = { voters: group.voters, learners: ["n4@i4"] };
    assert.equal(nextReplicaChange(joined, 0, "n1@old1", withLearner, always), null);
    // Other shards do not take it.
    assert.equal(nextReplicaChange(joined, 4, "n1@old1", group, always), null);
  });
});

describe("nextReplicaChange: the meta group's voter on a member that leaves shard 0", () => {
  /**
   * Shard 0 (and shard 4) moving from n1 to n4, n1 then gone through `states`, in a cluster at
   * this build's version (VERSION_DEMOTION or later).
   */
  const movedOff = (...states: MemberState[]): MetaState => movedOffAt(BUILD_VERSION, ...states);
  const movedOffAt = (version: number, ...states: MemberState[]): MetaState =>
    state(
      BOOT,
      { op: "create-shard", shard: 4, replicas: ["n1", "n2", "n3"] },
      { op: "join", member: n4 },
      { op: "set-state", id: "n4", state: "active" },
      // Every member runs a build of `version`, and the meta leader raised the cluster's to it.
      ...["n1", "n2", "n3", "n4"].map((id): MetaCommand => ({
        op: "set-build",
        id,
        build: version,
      })),
      { op: "set-version", version },
      { op: "move-shard", shard: 0, from: ["n1", "n2", "n3"], nodes: ["n4", "n2", "n3"] },
      { op: "move-shard", shard: 4, from: ["n1", "n2", "n3"], nodes: ["n4", "n2", "n3"] },
      ...states.map((s): MetaCommand => ({ op: "set-state", id: "n1", state: s })),
    );
  const group = { voters: ["n1@old1", "n2@old2", "n3@old3", "n4@i4"], learners: [] };

  it("demotes the voter of a member that stays a meta holder, in one change, rather than removing it", () => {
    // Removed, then added back as a learner a pass later, n1's copy of the cluster's metadata
    // stopped following the group in between: its Admin calls, synced through it, timed out.
    for (const states of [["decommissioning"], []] as MemberState[][]) {
      const meta = movedOff(...states);
      assert.equal(meta.stateOf("n1"), states[0] ?? "active");
      assert.deepEqual(nextReplicaChange(meta, 0, "n2@old2", group, always), {
        type: "add-learner",
        node: "n1@old1",
      });
      // Demoted, it is the learner step 5 keeps: the move is done.
      const demoted = { voters: ["n2@old2", "n3@old3", "n4@i4"], learners: ["n1@old1"] };
      assert.deepEqual(nextReplicaChange(meta, 0, "n2@old2", demoted, always), {
        type: "settle",
        nodes: ["n4", "n2", "n3"],
      });
      // Other shards keep no learner: their old voter is removed.
      assert.deepEqual(nextReplicaChange(meta, 4, "n2@old2", group, always), {
        type: "remove",
        node: "n1@old1",
      });
      // The leader never demotes itself: it hands leadership over first.
      assert.deepEqual(nextReplicaChange(meta, 0, "n1@old1", group, always), {
        type: "transfer",
        to: "n4@i4",
      });
    }
  });

  it("removes it, and adds it back as a learner, while the cluster runs a version before demotions", () => {
    // A replica of an older build ignores an add-learner naming a voter: it would keep n1 a
    // voter where the others demoted it.
    assert.ok(BUILD_VERSION >= VERSION_DEMOTION);
    const meta = movedOffAt(VERSION_DEMOTION - 1, "decommissioning");
    assert.deepEqual(nextReplicaChange(meta, 0, "n2@old2", group, always), {
      type: "remove",
      node: "n1@old1",
    });
    const removed = { voters: ["n2@old2", "n3@old3", "n4@i4"], learners: [] };
    assert.deepEqual(nextReplicaChange(meta, 0, "n2@old2", removed, always), {
      type: "add-learner",
      node: "n1@old1",
    });
  });

  it("removes the voter of a member that holds no meta learner any more (dead, removed, decommissioned)", () => {
    for (const states of [
      ["dead"],
      ["dead", "removed"],
      ["decommissioning", "decommissioned"],
    ] as MemberState[][]) {
      // From VERSION_MOVE_ORIGIN on, the meta group neither removes nor decommissions a member
      // while a move off it is under way; a cluster may still hold one an older version did.
      const left = states.includes("removed") || states.includes("decommissioned");
      const meta = movedOffAt(left ? VERSION_MOVE_ORIGIN - 1 : BUILD_VERSION, ...states);
      assert.equal(meta.stateOf("n1"), states.at(-1));
      assert.deepEqual(nextReplicaChange(meta, 0, "n2@old2", group, always), {
        type: "remove",
        node: "n1@old1",
      });
    }
  });
});

describe("replaceReplicas", () => {
  /**
   * A stand-in for the driver of a node leading shard 4 (what replaceReplicas asks of it):
   * the pass's calls and callbacks are the point here, the groups' own work is the driver's
   * (test/replication/multi-raft-removal.test.ts runs real ones).
   */
  function leaderOf4(group: { voters: string[]; learners: string[] }, caughtUp: () => boolean) {
    return {
      replicaId: "n2@old2",
      startGroup: () => null,
      shardIds: () => [4, 7],
      leads: (id: number) => id === 4,
      shardInfo: (id: number) => (id === 4 ? { role: "leader", ...group } : null),
      isCaughtUp: caughtUp,
      changeMembership: (_id: number, cc: { type: string; node: string }) => {
        if (cc.type === "remove") group.voters = group.voters.filter((v) => v !== cc.node);
        if (cc.type === "add-learner") group.learners = [...group.learners, cc.node];
        if (cc.type === "add-voter") {
          group.learners = group.learners.filter((l) => l !== cc.node);
          group.voters = [...group.voters, cc.node];
        }
        return Promise.resolve();
      },
      transferLeader: () => Promise.resolve(),
    } as unknown as Parameters<typeof replaceReplicas>[0];
  }

  it("tells the caller of a wiped node's replica being replaced, not only of moves, so that it passes again soon", async () => {
    const group = { voters: ["n1@old1", "n2@old2", "n3@old3"], learners: [] as string[] };
    let caughtUp = false;
    const store = leaderOf4(group, () => caughtUp);
    const calls: string[] = [];
    const effects: ReplicaEffects = {
      settle: () => Promise.resolve(),
      stepped: (shard, step) => calls.push(`stepped ${shard} ${step.type}`),
      waiting: (shard) => calls.push(`waiting ${shard}`),
      idle: (shard) => calls.push(`idle ${shard}`),
    };
    const underWay = new Set<number>();
    const pass = async (): Promise<void> => {
      replaceReplicas(store, after, underWay, (_s, err) => assert.fail(String(err)), effects);
      await new Promise((resolve) => setImmediate(resolve)); // the step's promise settles
    };
    assert.equal(after.isMoving(4), false, "a replacement is not a move");
    await pass();
    assert.deepEqual(calls.splice(0).sort(), ["idle 7", "stepped 4 remove"]);
    await pass();
    assert.deepEqual(calls.splice(0).sort(), ["idle 7", "stepped 4 add-learner"]);
    await pass();
    assert.deepEqual(calls.splice(0).sort(), ["idle 7", "waiting 4"], "the new replica catches up");
    caughtUp = true;
    await pass();
    assert.deepEqual(calls.splice(0).sort(), ["idle 7", "stepped 4 add-voter"]);
    await pass();
    assert.deepEqual(calls.splice(0).sort(), ["idle 4", "idle 7"], "done");
    assert.deepEqual(group, { voters: ["n2@old2", "n3@old3", "n1@new1"], learners: [] });
  });

  it("takes no step on a meta state that may be older than its group's placement, until a sync after it became leader (a settled move is not undone)", async () => {
    // The review's case: shard 4 moved from n1 n2 n3 to n2 n3 n4 and settled; n2 then leads
    // it on a meta state from before the move (restarted, or cut off from the meta leader).
    // Every member is a current replica there, so nothing looked behind: it added n1 back and
    // removed n4, while n1, knowing the move settled, deleted its replica, now a voter.
    const old = state(
      BOOT,
      { op: "create-shard", shard: 4, replicas: ["n1", "n2", "n3"] },
      { op: "join", member: n4 },
      { op: "set-state", id: "n4", state: "active" },
    );
    const settled = old
      .apply({ op: "move-shard", shard: 4, from: ["n1", "n2", "n3"], nodes: ["n4", "n2", "n3"] })
      .state.apply({ op: "settle-shard", shard: 4, nodes: ["n4", "n2", "n3"] }).state;
    assert.equal(settled.isMoving(4), false);
    const group = { voters: ["n2@old2", "n3@old3", "n4@i4"], learners: [] as string[] };
    const store = leaderOf4(group, () => true);
    let meta = old;
    let synced: (() => void) | null = null;
    let syncs = 0;
    let passes = 0;
    const check = new LeaderMetaCheck({
      sync: () => {
        syncs++;
        return new Promise<void>((resolve) => {
          synced = () => {
            meta = settled; // what the sync brings: the meta group's commit
            resolve();
          };
        });
      },
      onSynced: () => passes++,
      onError: (err) => assert.fail(String(err)),
    });
    const steps: string[] = [];
    const effects: ReplicaEffects = {
      settle: () => Promise.resolve(),
      stepped: (_shard, step) => steps.push(step.type),
      metaFresh: (shard, term) => check.fresh(shard, term),
    };
    const underWay = new Set<number>();
    const pass = async (): Promise<void> => {
      replaceReplicas(store, meta, underWay, (_s, err) => assert.fail(String(err)), effects);
      await new Promise((resolve) => setImmediate(resolve));
    };
    await pass();
    await pass();
    assert.deepEqual(steps, [], "no step on the old state");
    assert.equal(syncs, 1, "one sync asked, not one a pass");
    assert.deepEqual(group, { voters: ["n2@old2", "n3@old3", "n4@i4"], learners: [] });
    (synced as unknown as () => void)();
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(passes, 1, "the caller is told to pass again");
    await pass();
    assert.deepEqual(steps, [], "synced: the move is settled, nothing to do");
    assert.deepEqual(group, { voters: ["n2@old2", "n3@old3", "n4@i4"], learners: [] });
  });
});

describe("LeaderMetaCheck", () => {
  function harness() {
    let now = 0;
    const pending: Array<{ resolve: () => void; reject: (err: Error) => void }> = [];
    const events: string[] = [];
    const check = new LeaderMetaCheck({
      sync: () =>
        new Promise<void>((resolve, reject) => {
          events.push(`sync@${now}`);
          pending.push({ resolve, reject });
        }),
      onSynced: () => events.push("synced"),
      onError: (err) => events.push(`error ${(err as Error).message}`),
      now: () => now,
    });
    const settle = async (ok = true): Promise<void> => {
      const p = pending.shift();
      assert.ok(p !== undefined, "a sync under way");
      if (ok) p.resolve();
      else p.reject(new Error("no meta leader"));
      await new Promise((resolve) => setImmediate(resolve));
    };
    return { check, events, settle, at: (t: number) => (now = t) };
  }

  it("is fresh for a term only after a sync that began once the group was seen led in it", async () => {
    const h = harness();
    h.at(10);
    assert.equal(h.check.fresh(4, 2), false);
    assert.equal(h.check.fresh(5, 7), false, "a second group waits for the same sync");
    assert.deepEqual(h.events, ["sync@10"]);
    await h.settle();
    assert.equal(h.check.fresh(4, 2), true);
    assert.equal(h.check.fresh(5, 7), true);
    h.at(20);
    assert.equal(h.check.fresh(4, 3), false, "a new term asks again");
    assert.equal(h.check.fresh(5, 7), true, "the other group's term did not change");
    assert.deepEqual(h.events, ["sync@10", "synced", "sync@20"]);
  });

  it("does not count a sync that began before the group was seen led, and asks again after a failure", async () => {
    const h = harness();
    h.at(10);
    assert.equal(h.check.fresh(4, 2), false);
    h.at(15);
    assert.equal(h.check.fresh(6, 1), false, "seen after the sync under way began");
    await h.settle();
    assert.equal(h.check.fresh(4, 2), true);
    assert.equal(h.check.fresh(6, 1), false, "that sync began before it: another is asked");
    await h.settle(false);
    assert.equal(h.check.fresh(6, 1), false);
    await h.settle();
    assert.equal(h.check.fresh(6, 1), true);
    assert.deepEqual(h.events, [
      "sync@10",
      "synced",
      "sync@15",
      "error no meta leader",
      "sync@15",
      "synced",
    ]);
  });
});
