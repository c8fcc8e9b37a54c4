import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { type AllocatorInput, allocate, isBalancingMove } from "../../src/cluster/allocator.ts";
import {
  type MetaCommand,
  type MetaMember,
  MetaState,
  rendezvousReplicas,
} from "../../src/cluster/index.ts";

function member(id: string): MetaMember {
  return { id, rpcAddr: `${id}:7447`, httpAddr: `${id}:8080`, incarnation: `inc-${id}` };
}

/** A founded cluster of `ids` with `shards` shards created by rendezvous placement. */
function cluster(ids: readonly string[], shards: number): MetaState {
  let s = MetaState.empty().apply({
    op: "bootstrap",
    clusterId: "c",
    totalShards: 1024,
    replicationFactor: 3,
    members: ids.map(member),
  }).state;
  for (let shard = 1; shard <= shards; shard++) {
    const replicas = rendezvousReplicas(shard, s.activeMembers(), 3);
    s = s.apply({ op: "create-shard", shard, replicas }).state;
  }
  return s;
}

function apply(s: MetaState, cmd: MetaCommand): MetaState {
  const r = s.apply(cmd);
  assert.notEqual(r.outcome.kind, "rejected", JSON.stringify({ cmd, outcome: r.outcome }));
  return r.state;
}

type World = Omit<AllocatorInput, "meta">;

/**
 * Runs allocator passes until one proposes nothing, each move settled before the next pass
 * (the group leaders' part, done at once here). Returns the final state and the moves made.
 */
function settle(
  start: MetaState,
  world: World,
  maxPasses = 2_000,
): { s: MetaState; moves: number } {
  let s = start;
  let moves = 0;
  for (let pass = 0; pass < maxPasses; pass++) {
    for (const shard of s.shards.keys()) {
      if (s.isMoving(shard)) s = apply(s, { op: "settle-shard", shard, nodes: s.nodesOf(shard) });
    }
    const cmds = allocate({ meta: s, ...world });
    if (cmds.length === 0) return { s, moves };
    for (const cmd of cmds) {
      s = apply(s, cmd);
      if (cmd.op === "move-shard") moves++;
    }
  }
  assert.fail(`no fixed point in ${maxPasses} passes`);
}

function loads(s: MetaState): Map<string, number> {
  const out = new Map(s.activeMembers().map((id) => [id, 0]));
  for (const shard of s.shards.keys()) {
    for (const n of s.nodesOf(shard)) if (out.has(n)) out.set(n, (out.get(n) ?? 0) + 1);
  }
  return out;
}

function assertPlaced(s: MetaState, tolerance: number): void {
  const active = new Set(s.activeMembers());
  for (const shard of s.shards.keys()) {
    const nodes = s.nodesOf(shard);
    const factor = shard === 0 ? Math.max(s.shards.get(0)?.length ?? 1, 3) : 3;
    const want = Math.min(factor, active.size);
    assert.equal(nodes.length, want, `shard ${shard}: ${nodes.join(",")}`);
    assert.equal(new Set(nodes).size, nodes.length, `shard ${shard} has a node twice`);
    for (const n of nodes) assert.ok(active.has(n), `shard ${shard} on ${n}, not active`);
  }
  const counts = [...loads(s).values()];
  assert.ok(Math.max(...counts) - Math.min(...counts) <= tolerance, `loads ${counts.join(",")}`);
}

/** Shards each active member alive should lead (MetaState.leaderWanted), by member. */
function leaders(s: MetaState, alive: ReadonlySet<string>): Map<string, number> {
  const out = new Map(
    s
      .activeMembers()
      .filter((id) => alive.has(id))
      .map((id) => [id, 0]),
  );
  for (const shard of s.shards.keys()) {
    const leader = s.leaderWanted(shard);
    if (leader !== undefined && out.has(leader)) out.set(leader, (out.get(leader) ?? 0) + 1);
  }
  return out;
}

function assertLeadersEven(s: MetaState, tolerance: number, alive: ReadonlySet<string>): void {
  const counts = [...leaders(s, alive).values()];
  assert.ok(
    Math.max(...counts) - Math.min(...counts) <= Math.max(1, tolerance),
    `leaders ${counts.join(",")}`,
  );
}

const calm: World = {
  unreachableLong: new Set(),
  alive: new Set(["n1", "n2", "n3", "n4", "n5", "n6"]),
  caughtUp: () => true,
  maxMoves: 4,
  balanceMoves: Number.POSITIVE_INFINITY,
  tolerance: 2,
};

describe("allocator", () => {
  it("admits joining members once caught up, then spreads replicas onto them", () => {
    let s = cluster(["n1", "n2", "n3"], 60);
    for (const id of ["n4", "n5"]) s = apply(s, { op: "join", member: member(id) });
    // Not caught up: nothing moves to them (the three may even their leaders meanwhile).
    assert.deepEqual(
      allocate({ meta: s, ...calm, caughtUp: () => false }).filter(
        (c) => c.op !== "prefer-leader" || c.node === "n4" || c.node === "n5",
      ),
      [],
    );
    const { s: end, moves } = settle(s, calm);
    assert.equal(end.stateOf("n4"), "active");
    assert.equal(end.stateOf("n5"), "active");
    assertPlaced(end, calm.tolerance);
    assertLeadersEven(end, calm.tolerance, calm.alive);
    // 61 shards × 3 replicas over 5 nodes: about 2/5 of the replicas had to move, not many more.
    assert.ok(moves >= 60 && moves <= 80, `moves ${moves}`);
  });

  it("does not admit a joining member that caught up and then died: it waits, then goes dead", () => {
    let s = cluster(["n1", "n2", "n3"], 30);
    s = apply(s, { op: "join", member: member("n4") });
    // n4 caught up on the meta log, then stopped: gossip has it unreachable, not yet for
    // cluster.dead_after. Admitted, the allocator would start moves onto a node that runs none.
    const down: World = { ...calm, alive: new Set(["n1", "n2", "n3"]) };
    const cmds = allocate({ meta: s, ...down });
    assert.deepEqual(
      cmds.filter((c) => c.op === "set-state" || c.op === "move-shard"),
      [],
      JSON.stringify(cmds),
    );
    // Unreachable past cluster.dead_after: dead, never active.
    const gone: World = { ...down, unreachableLong: new Set(["n4"]) };
    const after = settle(s, gone).s;
    assert.equal(after.stateOf("n4"), "dead");
    // Back before then, it is admitted as usual.
    assert.equal(settle(s, calm).s.stateOf("n4"), "active");
  });

  it("a cluster founded on one member grows every shard, the meta group too, to the factor as members join", () => {
    let s = cluster(["n1"], 12);
    assert.deepEqual(s.nodesOf(0), ["n1"]);
    assert.deepEqual(s.nodesOf(5), ["n1"]);
    s = apply(s, { op: "join", member: member("n2") });
    const two = settle(s, calm).s;
    for (const shard of two.shards.keys()) assert.equal(two.nodesOf(shard).length, 2);
    let three = apply(two, { op: "join", member: member("n3") });
    three = apply(three, { op: "join", member: member("n4") });
    const { s: end } = settle(three, calm);
    assert.deepEqual(end.nodesOf(0).length, 3, "the meta group has three voters");
    assertPlaced(end, calm.tolerance);
    for (const shard of end.shards.keys()) assert.equal(end.nodesOf(shard).length, 3);
  });

  it("evens leaders too, within the tolerance, once no replica moves: 1,023 shards, 3 to 7 members", () => {
    // A member leads the shards it is first-ranked in, which rendezvous hashing spreads only
    // about evenly (136 to 156 of 1,023 over seven members, an audit): the allocator records
    // preferred leaders (prefer-leader) on shards that have none, from the most to the least.
    let s = cluster(["n1", "n2", "n3"], 1023);
    const world: World = { ...calm, alive: new Set(["n1", "n2", "n3", "n4", "n5", "n6", "n7"]) };
    s = settle(s, world).s;
    assertLeadersEven(s, world.tolerance, world.alive);
    for (const id of ["n4", "n5", "n6", "n7"]) s = apply(s, { op: "join", member: member(id) });
    // An operator's choice (Admin.TransferLeader) stands.
    const chosen = s.nodesOf(7)[2] as string;
    s = apply(s, { op: "prefer-leader", shard: 7, node: chosen });
    const end = settle(s, { ...world, maxMoves: 64 }).s;
    assertPlaced(end, world.tolerance);
    assertLeadersEven(end, world.tolerance, world.alive);
    if (end.nodesOf(7).includes(chosen)) assert.equal(end.leaderWanted(7), chosen);
    // Not while replicas move: a leadership handed over is a pause in the shard's writes.
    let growing = apply(end, { op: "join", member: member("n8") });
    growing = apply(growing, { op: "set-state", id: "n8", state: "active" });
    const first = allocate({
      meta: growing,
      ...world,
      alive: new Set([...world.alive, "n8"]),
      maxMoves: 4,
    });
    assert.ok(first.some((c) => c.op === "move-shard"));
    assert.ok(!first.some((c) => c.op === "prefer-leader"), "no leader moved beside replicas");
  });

  it("evens leaders within the tolerance on 30 members too: not only between the one that leads the most and the one that leads the fewest", () => {
    // On many members a shard's other replicas are a few of many: the member that leads the
    // fewest often holds none of the shards the one that leads the most leads (and has not given
    // away yet). Only that pair was tried: the evening stopped there, leaders 29 to 38 apart with
    // a tolerance of 2 (13 to 27 on 50 members), while other members could still take some.
    const ids = Array.from({ length: 30 }, (_, i) => `n${i + 1}`);
    const s = cluster(ids, 1023);
    const world: World = { ...calm, alive: new Set(ids) };
    const end = settle(s, world).s;
    assertPlaced(end, world.tolerance);
    assertLeadersEven(end, world.tolerance, world.alive);
  });

  it("moves nothing onto a member the same pass marks dead", () => {
    // The meta group refused such a move once the member's death applied: a wasted proposal.
    let s = cluster(["n1", "n2", "n3"], 40);
    s = apply(s, { op: "join", member: member("n4") });
    s = apply(s, { op: "set-state", id: "n4", state: "active" });
    const world: World = {
      ...calm,
      unreachableLong: new Set(["n4"]),
      alive: new Set(["n1", "n2", "n3"]),
    };
    const cmds = allocate({ meta: s, ...world });
    assert.deepEqual(cmds[0], { op: "set-state", id: "n4", state: "dead" });
    for (const c of cmds) s = apply(s, c);
    assert.ok(
      !cmds.some((c) => c.op === "move-shard" && c.nodes.includes("n4")),
      JSON.stringify(cmds),
    );
  });

  it("never moves more than maxMoves shards at once", () => {
    let s = cluster(["n1", "n2", "n3"], 40);
    s = apply(s, { op: "join", member: member("n4") });
    s = apply(s, { op: "set-state", id: "n4", state: "active" });
    const cmds = allocate({ meta: s, ...calm, maxMoves: 3 });
    assert.equal(cmds.filter((c) => c.op === "move-shard").length, 3);
    for (const c of cmds) s = apply(s, c);
    // Three under way: the next pass starts none.
    assert.deepEqual(allocate({ meta: s, ...calm, maxMoves: 3 }), []);
  });

  it("starts at most balanceMoves balancing moves a pass within maxMoves; repairs are not paced", () => {
    let s = cluster(["n1", "n2", "n3"], 40);
    s = apply(s, { op: "join", member: member("n4") });
    s = apply(s, { op: "set-state", id: "n4", state: "active" });
    const balancing = (cmds: readonly MetaCommand[]): number =>
      cmds.filter((c) => isBalancingMove(s, c)).length;
    assert.equal(balancing(allocate({ meta: s, ...calm, maxMoves: 4, balanceMoves: 1 })), 1);
    assert.equal(balancing(allocate({ meta: s, ...calm, maxMoves: 4, balanceMoves: 3 })), 3);
    assert.equal(balancing(allocate({ meta: s, ...calm, maxMoves: 2, balanceMoves: 3 })), 2);
    assert.deepEqual(allocate({ meta: s, ...calm, maxMoves: 4, balanceMoves: 0 }), []);
    // n3 is dead: its replicas move to n4 whatever the pace, up to maxMoves, and none of
    // those moves counts as balancing.
    s = apply(s, { op: "set-state", id: "n3", state: "dead" });
    const gone = { ...calm, alive: new Set(["n1", "n2", "n4"]), unreachableLong: new Set(["n3"]) };
    const repairs = allocate({ meta: s, ...gone, maxMoves: 4, balanceMoves: 0 });
    assert.equal(repairs.filter((c) => c.op === "move-shard").length, 4);
    assert.equal(balancing(repairs), 0);
    for (const c of repairs) {
      assert.ok(c.op === "move-shard" && c.from.includes("n3") && c.nodes.includes("n4"));
    }
  });

  it("evens no leaders while balancing moves wait for the pace: only once the replicas are even", () => {
    let s = cluster(["n1", "n2", "n3"], 40);
    s = apply(s, { op: "join", member: member("n4") });
    s = apply(s, { op: "set-state", id: "n4", state: "active" });
    // n4 takes a few replicas, each move settled (several paced passes).
    for (let pass = 0; pass < 3; pass++) {
      for (const c of allocate({ meta: s, ...calm, maxMoves: 4, balanceMoves: 2 })) s = apply(s, c);
      for (const shard of s.shards.keys()) {
        if (s.isMoving(shard)) s = apply(s, { op: "settle-shard", shard, nodes: s.nodesOf(shard) });
      }
    }
    assert.equal(loads(s).get("n4"), 6);
    // The pace has no move to give this pass: nothing is proposed, leaders neither (they
    // would be evened on a placement the next moves change again).
    assert.deepEqual(allocate({ meta: s, ...calm, maxMoves: 4, balanceMoves: 0 }), []);
    // With max_moves 0 (every move stopped, not waiting for a slot) the leaders are evened on
    // the placement as it is, as before the pace.
    const stopped = allocate({ meta: s, ...calm, maxMoves: 0 });
    assert.ok(stopped.length > 0, "leaders evened with every move stopped");
    assert.ok(
      stopped.every((c) => c.op === "prefer-leader"),
      JSON.stringify(stopped),
    );
    // So with moves_per_minute 0: no balancing move will come to wait for.
    const unpaced = allocate({ meta: s, ...calm, balanceMoves: 0, balancingStopped: true });
    assert.deepEqual(unpaced, stopped);
    // Paced to the end, the replicas even out, then the leaders.
    const end = settle(s, { ...calm, balanceMoves: 2 }).s;
    assertPlaced(end, calm.tolerance);
    assertLeadersEven(end, calm.tolerance, calm.alive);
  });

  it("redirects a move whose new member died before it caught up, even with no moves to spare", () => {
    let s = cluster(["n1", "n2", "n3"], 12);
    s = apply(s, { op: "join", member: member("n4") });
    s = apply(s, { op: "set-state", id: "n4", state: "active" });
    // Moves onto n4 start, and never finish: n4 dies.
    for (const c of allocate({ meta: s, ...calm, maxMoves: 2 })) s = apply(s, c);
    const stuck = [...s.shards.keys()].filter((k) => s.isMoving(k));
    assert.equal(stuck.length, 2);
    s = apply(s, { op: "set-state", id: "n4", state: "dead" });
    const gone = { ...calm, alive: new Set(["n1", "n2", "n3"]) };
    const redirected = allocate({ meta: s, ...gone, maxMoves: 2 });
    assert.deepEqual(
      redirected.filter((c) => c.op === "move-shard").map((c) => c.shard),
      stuck,
    );
    for (const c of redirected) s = apply(s, c);
    for (const k of stuck) assert.ok(!s.nodesOf(k).includes("n4"), `shard ${k}`);
  });

  it("repairs a dead member's shards before it drains a decommissioning member: fewest replicas alive first", () => {
    // Seven members, 1,023 shards: n7 is being decommissioned when n6 dies. n6's shards run on
    // two replicas, n7's on three: n6's repairs take the move slots first. Before, both went in
    // shard order, half of the slots drained n7, and n6's 438 shards took 216 passes to repair
    // (at most 4 moves each) rather than 110.
    // (The meta group on n1-n3, its factor: on all seven, it would keep six voters running.)
    const ids = ["n1", "n2", "n3", "n4", "n5", "n6", "n7"];
    let s = cluster(["n1", "n2", "n3"], 0);
    for (const id of ids.slice(3)) {
      s = apply(s, { op: "join", member: member(id) });
      s = apply(s, { op: "set-state", id, state: "active" });
    }
    for (let shard = 1; shard <= 1023; shard++) {
      s = apply(s, { op: "create-shard", shard, replicas: rendezvousReplicas(shard, ids, 3) });
    }
    s = apply(s, { op: "set-state", id: "n7", state: "decommissioning" });
    s = apply(s, { op: "set-state", id: "n6", state: "dead" });
    const world: World = { ...calm, alive: new Set(ids.filter((id) => id !== "n6")) };
    const dead = s.replicaCounts().get("n6") ?? 0;
    let passes = 0;
    while ((s.replicaCounts().get("n6") ?? 0) > 0) {
      const moves = allocate({ meta: s, ...world }).filter((c) => c.op === "move-shard");
      for (const c of moves) s = apply(s, c);
      // A move off n7 only in a pass that started the last of n6's repairs.
      const drains = moves.filter((c) => !c.from.includes("n6") || c.nodes.includes("n6"));
      assert.ok(
        drains.length === 0 || s.replicaCounts().get("n6") === 0,
        `pass ${passes}: ${JSON.stringify(drains)} before n6's repairs`,
      );
      for (const shard of s.movingShards()) {
        s = apply(s, { op: "settle-shard", shard, nodes: s.nodesOf(shard) });
      }
      passes++;
    }
    assert.equal(passes, Math.ceil(dead / world.maxMoves));
    // Then n7 is drained.
    const end = settle(s, world).s;
    assert.equal(end.stateOf("n7"), "decommissioned");
  });

  it("drains a decommissioning member, then marks it decommissioned", () => {
    let s = cluster(["n1", "n2", "n3", "n4"], 50);
    s = settle(s, calm).s;
    s = apply(s, { op: "set-state", id: "n2", state: "decommissioning" });
    const end = settle(s, calm).s;
    assert.equal(end.stateOf("n2"), "decommissioned");
    for (const shard of end.shards.keys()) assert.ok(!end.nodesOf(shard).includes("n2"));
    assertPlaced(end, calm.tolerance);
    // Then it may be removed for good.
    assert.equal(
      end.apply({ op: "set-state", id: "n2", state: "removed" }).outcome.kind,
      "state-changed",
    );
  });

  it("keeps a decommissioning member unreachable for dead_after decommissioning: drained, decommissioned, or back and still leaving", () => {
    let s = cluster(["n1", "n2", "n3", "n4"], 50);
    s = settle(s, calm).s;
    s = apply(s, { op: "set-state", id: "n2", state: "decommissioning" });
    const away: World = {
      ...calm,
      unreachableLong: new Set(["n2"]),
      alive: new Set(["n1", "n3", "n4"]),
    };
    // Some passes while it is away: not dead (a dead member seen again came back active, its
    // decommission forgotten).
    let mid = s;
    for (let pass = 0; pass < 3; pass++) {
      for (const cmd of allocate({ meta: mid, ...away })) mid = apply(mid, cmd);
    }
    assert.equal(mid.stateOf("n2"), "decommissioning");
    assert.ok(mid.movingCount() > 0, "its replicas move off it meanwhile");
    // Back before it is drained: still decommissioning, and drained as asked.
    const back = settle(mid, calm).s;
    assert.equal(back.stateOf("n2"), "decommissioned");
    // Never back: drained without it, and decommissioned all the same.
    const gone = settle(s, away).s;
    assert.equal(gone.stateOf("n2"), "decommissioned");
    for (const shard of gone.shards.keys()) assert.ok(!gone.nodesOf(shard).includes("n2"));
    assertPlaced(gone, calm.tolerance);
  });

  it("marks a member long unreachable dead and re-creates its replicas elsewhere", () => {
    let s = cluster(["n1", "n2", "n3", "n4", "n5"], 50);
    s = settle(s, calm).s;
    const world: World = {
      ...calm,
      unreachableLong: new Set(["n3"]),
      alive: new Set(["n1", "n2", "n4", "n5"]),
    };
    const end = settle(s, world).s;
    assert.equal(end.stateOf("n3"), "dead");
    assertPlaced(end, calm.tolerance);
    // Seen alive again: active, and it takes its share back.
    const back = settle(end, calm).s;
    assert.equal(back.stateOf("n3"), "active");
    assertPlaced(back, calm.tolerance);
  });

  it("with tolerance 0 stops once loads differ by one: a move then only swaps them", () => {
    // 9 shards × 3 replicas over 4 members cannot be even: moving one replica from a member
    // with 7 to one with 6 makes another pair 7 and 6, and the moves never ended (found by the
    // driver simulation with moves, test/replication/sim/moves.ts).
    let s = cluster(["n1", "n2", "n3"], 8);
    s = apply(s, { op: "join", member: member("n4") });
    const { s: end } = settle(s, { ...calm, tolerance: 0 });
    assertPlaced(end, 1);
  });

  it("moves no replica onto a member whose disk is full; it may give some away, and takes its share once it has room", () => {
    let s = cluster(["n1", "n2", "n3"], 60);
    s = apply(s, { op: "join", member: member("n4") });
    s = apply(s, { op: "set-disk", id: "n4", full: true });
    // Admitted (active), but no move targets it: the three others are even already.
    const { s: full, moves } = settle(s, calm);
    assert.equal(full.stateOf("n4"), "active");
    assert.equal(loads(full).get("n4"), 0);
    assert.equal(moves, 0);
    // A repair does not pick it either: n3 dies, and with n4 full no member can take n3's
    // replicas (the shards keep their factor: nothing shrinks).
    const dying: World = {
      ...calm,
      unreachableLong: new Set(["n3"]),
      alive: new Set(["n1", "n2", "n4"]),
    };
    const dead = settle(full, dying).s;
    assert.equal(dead.stateOf("n3"), "dead");
    assert.equal(loads(dead).get("n4"), 0, "no repair onto a full disk");
    assert.ok(dead.underReplicatedCount() > 0);
    // Room again: the repairs and the balancing place replicas on n4.
    const roomy = settle(apply(dead, { op: "set-disk", id: "n4", full: false }), dying).s;
    assert.equal(roomy.underReplicatedCount(), 0);
    assertPlaced(roomy, calm.tolerance);
    // The most loaded member's disk fills: it keeps what it holds, but no move brings it more,
    // and a newcomer's share comes from the others and from it alike.
    let busy = settle(roomy, calm).s;
    const top = [...loads(busy)].sort((a, b) => b[1] - a[1])[0]?.[0] as string;
    busy = apply(busy, { op: "set-disk", id: top, full: true });
    const before = loads(busy).get(top) ?? 0;
    busy = apply(busy, { op: "join", member: member("n5") });
    const grown = settle(busy, calm).s;
    assert.ok((loads(grown).get(top) ?? 0) <= before, "a full member never gains replicas");
    assert.ok((loads(grown).get("n5") ?? 0) > 0);
  });

  it("does not shrink a shard below its factor when no member can take a replica", () => {
    let s = cluster(["n1", "n2", "n3"], 10);
    s = apply(s, { op: "set-state", id: "n3", state: "decommissioning" });
    assert.deepEqual(
      allocate({ meta: s, ...calm }).filter((c) => c.op === "move-shard"),
      [],
    );
  });

  it("property: from any mix of joins, decommissions and deaths it reaches a valid placement", () => {
    const ids = ["n1", "n2", "n3", "n4", "n5", "n6"];
    const event = fc.record({
      id: fc.constantFrom(...ids),
      what: fc.constantFrom("join", "decommission", "die", "revive"),
    });
    fc.assert(
      fc.property(
        fc.array(event, { maxLength: 8 }),
        fc.integer({ min: 1, max: 30 }),
        (events, n) => {
          let s = cluster(["n1", "n2", "n3"], n);
          const down = new Set<string>();
          for (const e of events) {
            const state = s.stateOf(e.id);
            if (e.what === "join" && state === undefined) {
              s = apply(s, { op: "join", member: member(e.id) });
            } else if (e.what === "decommission" && state === "active") {
              // An operator keeps three active members (the CLI warns otherwise).
              if (s.activeMembers().length > 3)
                s = apply(s, { op: "set-state", id: e.id, state: "decommissioning" });
            } else if (e.what === "die" && state === "active" && s.activeMembers().length > 3) {
              down.add(e.id);
            } else if (e.what === "revive") {
              down.delete(e.id);
            }
            const world: World = {
              ...calm,
              unreachableLong: down,
              alive: new Set(ids.filter((id) => !down.has(id))),
            };
            s = settle(s, world).s;
          }
          assertPlaced(s, calm.tolerance);
        },
      ),
      { numRuns: 60 },
    );
  });

  it("starts no move on a shard that lost its quorum: two members dead at once, the shards that lost one replica are all repaired", () => {
    // Seven members, 1,023 shards; n6 and n7 die together. The shards on both have one voter
    // alive: no leader, so no move of theirs can finish. Before, their repairs came first (in
    // shard order), took the four move slots for good, and no other shard was ever repaired.
    const ids = ["n1", "n2", "n3", "n4", "n5", "n6", "n7"];
    let s = cluster(ids, 1023);
    s = apply(s, { op: "set-state", id: "n6", state: "dead" });
    s = apply(s, { op: "set-state", id: "n7", state: "dead" });
    const alive = new Set(["n1", "n2", "n3", "n4", "n5"]);
    const world: World = { ...calm, alive };
    const lostQuorum = [...s.shards.keys()].filter((shard) => {
      const nodes = s.nodesOf(shard);
      return nodes.filter((n) => alive.has(n)).length * 2 <= nodes.length;
    });
    assert.ok(lostQuorum.length > 10, `${lostQuorum.length} shards on both`);
    // Each move settles only if its group had a quorum alive when it began (the group leaders'
    // part); one that began without never does.
    const origin = new Map<number, readonly string[]>();
    for (let pass = 0; pass < 2_000; pass++) {
      for (const shard of s.movingShards()) {
        const was = origin.get(shard) ?? [];
        if (was.filter((n) => alive.has(n)).length * 2 > was.length) {
          s = apply(s, { op: "settle-shard", shard, nodes: s.nodesOf(shard) });
          origin.delete(shard);
        }
      }
      const cmds = allocate({ meta: s, ...world });
      if (cmds.length === 0) break;
      for (const cmd of cmds) {
        if (cmd.op === "move-shard" && !origin.has(cmd.shard)) origin.set(cmd.shard, cmd.from);
        s = apply(s, cmd);
      }
    }
    const active = new Set(s.activeMembers());
    for (const shard of s.shards.keys()) {
      const nodes = s.nodesOf(shard);
      if (lostQuorum.includes(shard)) {
        assert.ok(!s.isMoving(shard), `shard ${shard} left as it is`);
        continue;
      }
      // (The meta group, founded on all seven, keeps five.)
      assert.ok(
        nodes.length === (shard === 0 ? 5 : 3) && nodes.every((n) => active.has(n)),
        `shard ${shard} repaired: ${nodes.join(",")}`,
      );
    }
  });

  it("a stalled move takes no move slot", () => {
    const ids = ["n1", "n2", "n3", "n4", "n5"];
    let s = cluster(ids, 40);
    // n5 died; its first shards' repairs began, and then their groups lost their quorum.
    s = apply(s, { op: "set-state", id: "n5", state: "dead" });
    const world: World = { ...calm, alive: new Set(["n1", "n2", "n3", "n4"]), maxMoves: 2 };
    const first = allocate({ meta: s, ...world }).filter((c) => c.op === "move-shard");
    assert.equal(first.length, 2);
    for (const cmd of first) s = apply(s, cmd);
    assert.deepEqual(allocate({ meta: s, ...world }), [], "both slots taken");
    const stalled = new Set(s.movingShards());
    const next = allocate({ meta: s, ...world, stalled }).filter((c) => c.op === "move-shard");
    assert.equal(next.length, 2, "two more repairs");
    assert.ok(next.every((c) => c.op === "move-shard" && !stalled.has(c.shard)));
    // Those two go unchanged too (a move whose snapshot is big and slow looks so, as much as
    // one that cannot finish): no more start. Before, each STALLED_AFTER_MS let maxMoves more
    // start beside them, without end, each slower for the others' snapshots.
    for (const cmd of next) s = apply(s, cmd);
    const all = new Set(s.movingShards());
    assert.equal(all.size, 4);
    const more = allocate({ meta: s, ...world, stalled: all }).filter((c) => c.op === "move-shard");
    assert.deepEqual(more, [], "at most twice maxMoves under way");
  });
});
