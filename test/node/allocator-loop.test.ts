/**
 * The allocator's driver on the meta leader (src/node/allocator-loop.ts): when a member is
 * declared dead (clocks kept as a follower too, restarted by a cut-off), that one batch of
 * proposals is in flight at a time, and that a batch with a committed proposal asks for the
 * next pass at once (`proposed`).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type MetaCommand,
  type MetaMember,
  MetaState,
  rendezvousReplicas,
  STALLED_AFTER_MS,
} from "../../src/cluster/index.ts";
import { type AllocatorHost, AllocatorLoop } from "../../src/node/allocator-loop.ts";
import { silentLogger } from "../../src/ops/index.ts";

function member(id: string): MetaMember {
  return { id, rpcAddr: `${id}:7447`, httpAddr: `${id}:8080`, incarnation: `inc-${id}` };
}

/** Four active members, eight shards on the first three (n4 joined and holds nothing). */
function fourMembers(): MetaState {
  let s = MetaState.empty().apply({
    op: "bootstrap",
    clusterId: "c",
    totalShards: 1024,
    replicationFactor: 3,
    members: ["n1", "n2", "n3"].map(member),
  }).state;
  for (let shard = 1; shard <= 8; shard++) {
    const replicas = rendezvousReplicas(shard, s.activeMembers(), 3);
    s = s.apply({ op: "create-shard", shard, replicas }).state;
  }
  s = s.apply({ op: "join", member: member("n4") }).state;
  return s.apply({ op: "set-state", id: "n4", state: "active" }).state;
}

interface Harness {
  readonly loop: AllocatorLoop;
  readonly proposals: MetaCommand[];
  /** Settles the pending proposals in order: `ok` commits one (applied to the state). */
  settle(ok: boolean): Promise<void>;
  readonly batches: { proposed: number };
  alive: Set<string>;
  state: MetaState;
  /** Whether this node leads the meta group. */
  leads: boolean;
}

function harness(
  deadAfterMs: number,
  opts: { readonly maxMoves?: number; readonly movesPerMinute?: number } = {},
): Harness {
  const pending: { cmd: MetaCommand; resolve: () => void; reject: (e: Error) => void }[] = [];
  const h: Harness = {
    proposals: [],
    batches: { proposed: 0 },
    alive: new Set(["n1", "n2", "n3", "n4"]),
    state: fourMembers(),
    leads: true,
    async settle(ok) {
      while (pending.length > 0) {
        const p = pending.shift();
        if (p === undefined) break;
        if (ok) {
          h.state = h.state.apply(p.cmd).state;
          p.resolve();
        } else p.reject(new Error("stale"));
        // Let #proposeAll go on to its next command.
        await new Promise<void>((resolve) => setImmediate(resolve));
      }
      await new Promise<void>((resolve) => setImmediate(resolve));
    },
    loop: undefined as unknown as AllocatorLoop,
  };
  const host: AllocatorHost = {
    nodeId: "n1",
    deadAfterMs,
    maxMoves: opts.maxMoves ?? 2,
    // Unpaced unless a test paces it (a move a millisecond).
    movesPerMinute: opts.movesPerMinute ?? 60_000,
    tolerance: 1,
    meta: () => h.state,
    leadsMeta: () => h.leads,
    alive: () => h.alive,
    // Members p1, p2, ... asked to join and never came: they never catch up.
    metaCaughtUp: (node) => !node.startsWith("p"),
    propose: (cmd) => {
      h.proposals.push(cmd);
      return new Promise<void>((resolve, reject) => pending.push({ cmd, resolve, reject }));
    },
    proposed: () => h.batches.proposed++,
    log: silentLogger,
  };
  return Object.assign(h, { loop: new AllocatorLoop(host) });
}

/** Whether the loop proposed marking `id` (any member when omitted) dead. */
function markedDead(h: Harness, id?: string): boolean {
  return h.proposals.some(
    (c) => c.op === "set-state" && c.state === "dead" && (id === undefined || c.id === id),
  );
}

describe("AllocatorLoop", () => {
  it("declares a member dead once unseen for dead_after_ms, counted from when this leader last saw it alive", async () => {
    const h = harness(10_000);
    h.loop.pass(0);
    await h.settle(true); // the rebalance onto n4
    h.loop.pass(5_000); // n3 last seen alive
    h.proposals.length = 0;
    h.alive.delete("n3");
    h.loop.pass(14_999);
    await h.settle(true);
    const dead = (): boolean => markedDead(h, "n3");
    assert.ok(!dead(), JSON.stringify(h.proposals));
    h.loop.pass(15_000);
    await h.settle(true);
    assert.ok(dead(), JSON.stringify(h.proposals));
  });

  it("a new meta leader waits a whole dead_after_ms for a member it never saw alive", async () => {
    const h = harness(10_000);
    h.alive.delete("n3");
    h.loop.pass(100_000); // this node's first pass as leader
    await h.settle(true);
    h.loop.pass(109_999);
    await h.settle(true);
    const dead = (): boolean => markedDead(h, "n3");
    assert.ok(!dead(), JSON.stringify(h.proposals));
    h.loop.pass(110_000);
    await h.settle(true);
    assert.ok(dead(), JSON.stringify(h.proposals));
  });

  it("a node that takes the meta leadership counts from when it saw the member alive as a follower (chaos seed 616)", async () => {
    const h = harness(10_000);
    h.leads = false;
    h.loop.pass(0); // a follower: n3 alive
    h.alive.delete("n3");
    h.loop.pass(4_000);
    h.loop.pass(8_000);
    assert.equal(h.proposals.length, 0, "a follower proposes nothing");
    h.leads = true; // the leader was killed: this node leads now
    h.loop.pass(9_999);
    await h.settle(true);
    const dead = (): boolean => markedDead(h, "n3");
    assert.ok(!dead(), JSON.stringify(h.proposals));
    h.loop.pass(10_000);
    await h.settle(true);
    assert.ok(dead(), "dead 10 s after it was last seen, not 10 s after this node took over");
  });

  it("a node cut off from the others restarts its clocks: the time it was cut off is not time they were dead", async () => {
    const h = harness(10_000);
    h.leads = false;
    h.loop.pass(0);
    h.alive = new Set(["n1"]); // cut off: it sees none of the other three
    h.loop.pass(5_000);
    h.loop.pass(8_000);
    // The cut heals, and this node wins the meta group's election at once; its gossip has n2
    // and n4 alive again, n3 not yet.
    h.alive = new Set(["n1", "n2", "n4"]);
    h.leads = true;
    h.loop.pass(12_000);
    await h.settle(true);
    h.loop.pass(17_999);
    await h.settle(true);
    assert.ok(!markedDead(h), JSON.stringify(h.proposals));
    h.loop.pass(18_000); // 10 s after the last pass that saw it cut off
    await h.settle(true);
    assert.ok(markedDead(h, "n3"), JSON.stringify(h.proposals));
  });

  it("members joining that never show up do not make it cut off: they and a dead member are marked dead", async () => {
    const h = harness(10_000);
    // Five nodes asked to join and never came (crashed at once, or a flood of join requests):
    // counted as members to see, four of nine in sight looked like this node being cut off.
    for (const id of ["p1", "p2", "p3", "p4", "p5"]) {
      h.state = h.state.apply({ op: "join", member: member(id) }).state;
    }
    h.loop.pass(0);
    await h.settle(true);
    h.alive.delete("n3");
    h.proposals.length = 0;
    h.loop.pass(9_999);
    await h.settle(true);
    assert.ok(!markedDead(h), JSON.stringify(h.proposals));
    h.loop.pass(10_000);
    await h.settle(true);
    for (const id of ["n3", "p1", "p5"])
      assert.ok(markedDead(h, id), `${id} marked dead: ${JSON.stringify(h.proposals)}`);
  });

  it("a new node under a retired member's id gets a whole dead_after_ms to show up, however long ago the old one was seen", async () => {
    const h = harness(10_000);
    h.leads = false;
    h.loop.pass(0); // n4 alive (it holds no replica)
    h.alive.delete("n4");
    for (const state of ["decommissioning", "decommissioned", "removed"] as const) {
      h.state = h.state.apply({ op: "set-state", id: "n4", state }).state;
    }
    h.loop.pass(50_000);
    // A StatefulSet's pod comes back on an empty volume under the old name: a new life, joining,
    // before this node's gossip has it alive.
    const joined = h.state.apply({ op: "join", member: { ...member("n4"), incarnation: "new" } });
    assert.equal(joined.state.stateOf("n4"), "joining");
    h.state = joined.state;
    h.leads = true;
    h.loop.pass(100_000);
    await h.settle(true);
    h.loop.pass(109_999);
    await h.settle(true);
    assert.ok(!markedDead(h, "n4"), JSON.stringify(h.proposals));
    h.loop.pass(110_000); // never seen alive in this life: dead 10 s after it was admitted
    await h.settle(true);
    assert.ok(markedDead(h, "n4"), JSON.stringify(h.proposals));
  });

  it("keeps one batch in flight, and asks for the next pass once a batch commits", async () => {
    const h = harness(60_000);
    h.loop.pass(0);
    const first = h.proposals.length;
    assert.ok(first > 0, "n4 holds nothing: the allocator moves replicas to it");
    h.loop.pass(1); // the batch is still in flight: nothing more
    assert.equal(h.proposals.length, first);
    await h.settle(true);
    assert.equal(h.batches.proposed, 1);

    // A batch that is refused whole (a stale move) does not ask for another pass at once.
    const before = h.proposals.length;
    h.state = fourMembers(); // the moves never happened: the allocator proposes them again
    h.loop.pass(2);
    assert.ok(h.proposals.length > before);
    await h.settle(false);
    assert.equal(h.batches.proposed, 1);
  });

  it("paces balancing moves at movesPerMinute (a burst of two seconds' worth), whatever maxMoves and the passes", async () => {
    // 40 shards on n1-n3, n4 empty: 30 balancing moves to make; 8 may be under way at once.
    const h = harness(60_000, { maxMoves: 8, movesPerMinute: 60 });
    for (let shard = 9; shard <= 40; shard++) {
      const replicas = rendezvousReplicas(shard, ["n1", "n2", "n3"], 3);
      h.state = h.state.apply({ op: "create-shard", shard, replicas }).state;
    }
    const started = (): number => h.proposals.filter((c) => c.op === "move-shard").length;
    // Passes every 100 ms for 10 s, each move settled at once (its steps done).
    for (let now = 0; now <= 10_000; now += 100) {
      h.loop.pass(now);
      await h.settle(true);
      for (const shard of h.state.shards.keys()) {
        if (h.state.isMoving(shard)) {
          h.state = h.state.apply({
            op: "settle-shard",
            shard,
            nodes: h.state.nodesOf(shard),
          }).state;
        }
      }
      // One a second, after a first burst of two.
      assert.ok(started() <= 2 + Math.floor(now / 1_000), `${started()} moves by ${now} ms`);
    }
    assert.equal(started(), 12);
  });

  it("moves_per_minute 0 starts no balancing move, and does not hold back a dead member's repairs", async () => {
    const h = harness(10_000, { maxMoves: 4, movesPerMinute: 0 });
    h.loop.pass(0);
    await h.settle(true);
    // (Leaders are evened among n1-n3, on the placement as it is: n4 holds no replica.)
    assert.ok(!h.proposals.some((c) => c.op !== "prefer-leader"), JSON.stringify(h.proposals));
    h.proposals.length = 0;
    h.alive.delete("n3");
    h.loop.pass(10_000);
    await h.settle(true); // n3 marked dead
    assert.ok(markedDead(h, "n3"));
    h.loop.pass(10_100);
    await h.settle(true);
    const repairs = h.proposals.filter((c) => c.op === "move-shard");
    assert.equal(repairs.length, 4, JSON.stringify(h.proposals));
    for (const c of repairs) assert.ok(c.op === "move-shard" && c.from.includes("n3"));
  });

  it("moves_per_minute 0 stops balancing moves without holding back the leaders' evening, as max_moves 0 does", async () => {
    const h = harness(60_000, { maxMoves: 4, movesPerMinute: 0 });
    // 40 shards on n1-n3; n4 took the last replica of four that n1 leads before the pace was
    // set to 0 (a restart).
    for (let shard = 9; shard <= 40; shard++) {
      const replicas = rendezvousReplicas(shard, ["n1", "n2", "n3"], 3);
      h.state = h.state.apply({ op: "create-shard", shard, replicas }).state;
    }
    const led = [...h.state.shards.keys()].filter((k) => k > 0 && h.state.leaderWanted(k) === "n1");
    for (const shard of led.slice(0, 4)) {
      const from = h.state.nodesOf(shard);
      const nodes = from.map((n, i) => (i === 2 ? "n4" : n));
      h.state = h.state.apply({ op: "move-shard", shard, from, nodes }).state;
      h.state = h.state.apply({ op: "settle-shard", shard, nodes }).state;
    }
    h.loop.pass(0);
    await h.settle(true);
    // No balancing move: moves_per_minute 0 starts none, and none waits for the pace.
    assert.ok(!h.proposals.some((c) => c.op === "move-shard"), JSON.stringify(h.proposals));
    // The leaders are evened on the placement as it is (n4 leads none of its four shards).
    assert.ok(
      h.proposals.some((c) => c.op === "prefer-leader" && c.node === "n4"),
      `no leader evened: ${JSON.stringify(h.proposals)}`,
    );
  });

  it("a move seen under way, unchanged, for STALLED_AFTER_MS no longer takes a move slot (its group lost its quorum)", async () => {
    const h = harness(10_000, { maxMoves: 1 });
    // Shard 1's move from its third node onto n4 never settles (as when its group has no
    // leader), and that node is being decommissioned: its seven other shards wait for the one
    // move slot.
    const [a, b, c] = h.state.nodesOf(1) as [string, string, string];
    h.state = h.state.apply({
      op: "move-shard",
      shard: 1,
      from: [a, b, c],
      nodes: [a, b, "n4"],
    }).state;
    h.state = h.state.apply({ op: "set-state", id: c, state: "decommissioning" }).state;
    const moves = (): MetaCommand[] => h.proposals.filter((p) => p.op === "move-shard");
    h.loop.pass(0);
    await h.settle(true);
    h.loop.pass(STALLED_AFTER_MS - 1);
    await h.settle(true);
    assert.deepEqual(moves(), [], "the slot is taken");
    h.loop.pass(STALLED_AFTER_MS);
    await h.settle(true);
    assert.equal(moves().length, 1, JSON.stringify(h.proposals));
    assert.ok(h.state.isMoving(1), "the stalled move is left to finish");
  });
});
