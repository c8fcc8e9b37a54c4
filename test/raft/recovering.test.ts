/**
 * A member that lost its log (its shard's directory was removed: state machine and log gone,
 * term and vote kept) and restarts recovering (RaftConfig.recoveringUntil): it must not help
 * elect a candidate that lacks an entry it acknowledged, must not campaign, must be refilled by
 * its leader (whose match index for it is wrong), and must vote as any member once its log is
 * as up to date as the one it lost.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { seededRng } from "../../src/common/rng.ts";
import type { Message, NodeId, TestingBugs } from "../../src/raft/index.ts";
import { logIndex, MemoryStorage, nodeId, RawNode, term } from "../../src/raft/index.ts";
import { Host } from "./support/host.ts";

const enc = new TextEncoder();
const dec = new TextDecoder();
const A = nodeId("a");
const B = nodeId("b");
const C = nodeId("c");

/** Three members on a network the test controls: messages wait until delivered. */
class Group {
  readonly hosts = new Map<NodeId, Host>();
  readonly down = new Set<NodeId>();
  queue: Message[] = [];

  constructor(bugs: TestingBugs = {}, quiesceTicks = 0) {
    const rng = seededRng(7);
    for (const id of [A, B, C]) {
      const storage = MemoryStorage.bootstrap([A, B, C]);
      this.hosts.set(id, new Host(id, storage, { testingBugs: bugs, quiesceTicks }, rng.fork()));
    }
    this.settle();
  }

  host(id: NodeId): Host {
    return this.hosts.get(id) as Host;
  }

  /** Handles every live member's Readies; their messages join the queue. */
  settle(): void {
    for (let i = 0; i < 10; i++) {
      for (const [id, h] of this.hosts) {
        if (this.down.has(id)) continue;
        while (h.raw.hasReady()) h.handleReady((m) => this.queue.push(m));
      }
    }
  }

  /**
   * Delivers the queued messages between members of `among` (every live member by default)
   * until none is left; the others' messages are dropped.
   */
  run(among: readonly NodeId[] = [A, B, C]): void {
    for (let round = 0; round < 200; round++) {
      this.settle();
      const due = this.queue;
      if (due.length === 0) return;
      this.queue = [];
      for (const m of due) {
        if (this.down.has(m.to) || !among.includes(m.to) || !among.includes(m.from)) continue;
        this.host(m.to).raw.step(m);
      }
    }
    assert.fail("the group never went quiet");
  }

  /** The messages of type `type` sent so far (and still queued). */
  sent(type: Message["type"], from: NodeId): Message[] {
    return this.queue.filter((m) => m.type === type && m.from === from);
  }

  leader(): Host | undefined {
    return [...this.hosts.values()].find((h) => !this.down.has(h.id) && h.raw.role === "leader");
  }

  propose(at: NodeId, data: string): { index: number; term: number } {
    return this.host(at).raw.propose(enc.encode(data));
  }

  applied(id: NodeId): string[] {
    return this.host(id).sm.entries.map((e) => dec.decode(e.data));
  }
}

/**
 * a leads; E is committed on {a, b} only (c is cut off while it commits); then b loses its log
 * and a goes down. c lacks E.
 */
function committedOnAAndB(bugs: TestingBugs = {}): {
  g: Group;
  e: { index: number; term: number };
} {
  const g = new Group(bugs);
  g.host(A).raw.campaign();
  g.run();
  assert.equal(g.leader()?.id, A);
  const e = g.propose(A, "E");
  g.run([A, B]);
  assert.ok(g.host(A).raw.commitIndex >= e.index, "E is committed on a and b");
  assert.ok(g.host(C).raw.status().lastIndex < e.index, "c lacks E");
  return { g, e };
}

describe("a member that lost its log (RaftConfig.recoveringUntil)", () => {
  it("helps elect no candidate lacking an entry it acknowledged: a committed entry survives", () => {
    const { g, e } = committedOnAAndB();
    g.host(B).loseLog();
    assert.equal(g.host(B).raw.recovering, true);
    g.down.add(A);
    g.queue = [];
    // c campaigns again and again: b's vote would elect it, without E.
    for (let i = 0; i < 5; i++) {
      g.host(C).raw.campaign();
      g.run([B, C]);
      assert.notEqual(
        g.leader()?.id,
        C,
        `c was elected (term ${g.host(C).raw.term}) lacking committed entry ${e.term}/${e.index}`,
      );
    }
    // a, which holds E, comes back and is elected with b's vote; it refills b and c.
    g.down.delete(A);
    g.host(A).restart();
    g.settle(); // applies its configuration again
    g.host(A).raw.campaign();
    g.run();
    assert.equal(g.leader()?.id, A);
    g.propose(A, "after");
    g.run();
    for (const id of [A, B, C]) assert.deepEqual(g.applied(id), ["E", "after"], id);
    assert.equal(g.host(B).raw.recovering, false, "refilled: b's log holds what it lost");
  });

  it("the planted bug (votes by the log it has) elects a leader lacking the committed entry", () => {
    const { g, e } = committedOnAAndB({ votesWithLostLog: true });
    g.host(B).loseLog();
    g.down.add(A);
    g.queue = [];
    g.host(C).raw.campaign();
    g.run([B, C]);
    assert.equal(g.leader()?.id, C);
    assert.ok(g.host(C).raw.status().lastIndex < e.index + 1, "c leads without E");
  });

  it("does not campaign, however long it hears from no leader", () => {
    const { g, e } = committedOnAAndB();
    const b = g.host(B);
    b.loseLog();
    // Refilled through its configuration (a voter again), not through what it lost.
    const refill = g.host(A).raw.entries(logIndex(1), logIndex(e.index)) ?? [];
    b.storage.append(refill);
    b.storage.setHardState({ ...b.storage.hardState(), commit: logIndex(e.index - 1) });
    b.restart();
    g.settle();
    assert.ok(b.raw.voters.has(B), "b is a voter");
    assert.equal(b.raw.recovering, true);
    g.down.add(A);
    g.queue = [];
    for (let i = 0; i < 100; i++) {
      g.host(B).raw.tick();
      g.settle();
    }
    assert.deepEqual(
      g.queue.filter((m) => m.from === B).map((m) => m.type),
      [],
      "b asked for no vote",
    );
    g.host(B).raw.campaign();
    g.settle();
    assert.deepEqual(g.sent("prevote", B), []);
    assert.deepEqual(g.sent("vote", B), []);
  });

  it("is refilled by the live leader, whose match index for it was wrong, then votes again", () => {
    const { g, e } = committedOnAAndB();
    g.run();
    // a counts b as holding E and more: heartbeats carry that commit, appends start past it.
    g.host(B).loseLog();
    for (let i = 0; i < 3; i++) {
      for (const id of [A, B, C]) g.host(id).raw.tick();
      g.run();
    }
    assert.equal(g.host(B).raw.recovering, false, "b caught up through what it lost");
    assert.deepEqual(g.applied(B), ["E"]);
    assert.ok(g.host(B).raw.commitIndex >= e.index);
    // b votes again: with a down, c (now holding E) is elected with b's vote, or b with c's.
    g.down.add(A);
    g.queue = [];
    for (let i = 0; i < 40 && g.leader() === undefined; i++) {
      for (const id of [B, C]) g.host(id).raw.tick();
      g.run([B, C]);
    }
    assert.ok(g.leader() !== undefined, "b and c elect a leader");
    if (g.leader()?.id !== C) g.host(g.leader()?.id as NodeId).raw.transferLeader(C);
    g.run([B, C]);
    assert.equal(g.leader()?.id, C);
    g.propose(C, "by c");
    g.run([B, C]);
    assert.deepEqual(g.applied(B), ["E", "by c"]);
  });

  it("stays recovering across a restart until refilled; a log as up to date is not recovering", () => {
    const { g } = committedOnAAndB();
    g.host(B).loseLog();
    g.host(B).restart();
    assert.equal(g.host(B).raw.recovering, true, "the lost log's last entry is on disk");
    g.down.add(A);
    g.queue = [];
    g.host(C).raw.campaign();
    g.run([B, C]);
    assert.notEqual(g.leader()?.id, C);

    // A member whose log is already as up to date as the one named is not recovering.
    const storage = MemoryStorage.bootstrap([A, B, C]);
    const whole = new RawNode({
      id: B,
      storage,
      rng: seededRng(1),
      recoveringUntil: { index: logIndex(3), term: term(1) },
    });
    assert.equal(whole.recovering, false);
    const behind = new RawNode({
      id: B,
      storage: MemoryStorage.bootstrap([A, B, C]),
      rng: seededRng(1),
      recoveringUntil: { index: logIndex(4), term: term(1) },
    });
    assert.equal(behind.recovering, true);
  });

  it("a leader that lost its log while its group slept wakes its followers, which elect and refill it", () => {
    const g = new Group({}, 2);
    g.host(A).raw.campaign();
    g.run();
    g.propose(A, "E");
    g.run();
    for (let i = 0; i < 5; i++) {
      for (const id of [A, B, C]) g.host(id).raw.tick();
      g.run();
    }
    for (const id of [A, B, C]) assert.equal(g.host(id).raw.quiesced, true, `${id} sleeps`);
    g.host(A).loseLog();
    g.settle();
    // Its driver asks the others to wake their leader (RoundLoop's askToRefill): they follow a,
    // which leads no more, so they wake.
    for (const to of [B, C]) {
      g.host(to).raw.step({ type: "wake", from: A, to, term: g.host(A).raw.term });
    }
    assert.equal(g.host(B).raw.quiesced, false, "b woke");
    for (let i = 0; i < 60 && g.leader() === undefined; i++) {
      for (const id of [A, B, C]) g.host(id).raw.tick();
      g.run();
    }
    assert.ok(g.leader() !== undefined && g.leader()?.id !== A, "b or c leads");
    g.propose(g.leader()?.id as NodeId, "after");
    g.run();
    assert.deepEqual(g.applied(A), ["E", "after"]);
    assert.equal(g.host(A).raw.recovering, false);
  });

  it("votes for a candidate that holds what it lost (a later last term), and marks its refusals", () => {
    const { g } = committedOnAAndB();
    g.host(B).loseLog();
    const a = g.host(A).raw;
    // A candidate whose last term is above the lost log's holds every entry b acknowledged.
    g.host(B).raw.step({
      type: "vote",
      from: C,
      to: B,
      term: term(a.term + 5),
      lastIndex: logIndex(1),
      lastTerm: term(a.term + 1),
      transfer: false,
      commit: logIndex(0),
      commitTerm: term(0),
    });
    g.settle();
    const answer = g.queue.find((m) => m.type === "vote-resp" && m.from === B);
    assert.ok(answer?.type === "vote-resp" && !answer.reject, "granted");
    g.queue = [];
    // An append b cannot match: the refusal says its log was lost.
    const last = a.status().lastIndex;
    g.host(B).raw.step({
      type: "append",
      from: A,
      to: B,
      term: term(a.term + 5),
      prevIndex: last,
      prevTerm: a.term,
      entries: [],
      commit: a.commitIndex,
      noReply: false,
    });
    g.settle();
    const refusal = g.queue.find((m) => m.type === "append-resp" && m.from === B);
    assert.ok(refusal?.type === "append-resp" && refusal.reject && refusal.lost, "marked lost");
  });
});
