/**
 * A leader that removes itself steps down once it applies its removal. With two voters the one
 * left needs the removed leader's vote until it learns that the removal committed (a
 * configuration takes effect when applied), and the removed member grants it only to a log at
 * least as up to date as its own: whatever the leader appended after its removal, and the
 * other voter lacks, would refuse it that vote for ever. A leader that demotes itself to
 * learner (add-learner on itself) leaves the voters just the same, and is held to the same.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { seededRng } from "../../src/common/rng.ts";
import type { ConfChange, Message, NodeId } from "../../src/raft/index.ts";
import { MemoryStorage, nodeId, ProposalDroppedError } from "../../src/raft/index.ts";
import { Host } from "./support/host.ts";

const A = nodeId("a");
const B = nodeId("b");
const enc = new TextEncoder();

/** Members a and b (both voters) on a network the test controls. */
class Pair {
  readonly hosts = new Map<NodeId, Host>();
  queue: Message[] = [];

  constructor() {
    const rng = seededRng(3);
    for (const id of [A, B])
      this.hosts.set(id, new Host(id, MemoryStorage.bootstrap([A, B]), {}, rng.fork()));
    this.settle();
  }

  host(id: NodeId): Host {
    return this.hosts.get(id) as Host;
  }

  /** Handles every member's Readies; their messages join the queue. */
  settle(): void {
    for (let i = 0; i < 5; i++)
      for (const h of this.hosts.values())
        while (h.raw.hasReady()) h.handleReady((m) => this.queue.push(m));
  }

  /** Delivers the queued messages that `keep` lets through until none is left. */
  run(keep: (m: Message) => boolean = () => true): void {
    for (let round = 0; round < 100; round++) {
      this.settle();
      const due = this.queue;
      if (due.length === 0) return;
      this.queue = [];
      for (const m of due) if (keep(m)) this.host(m.to).raw.step(m);
    }
  }

  /** Takes the queued messages out, undelivered. */
  take(): Message[] {
    this.settle();
    const due = this.queue;
    this.queue = [];
    return due;
  }
}

for (const [leaves, type] of [
  ["removes", "remove"],
  ["demotes", "add-learner"],
] as const) {
  describe(`a leader that ${leaves} itself from two voters`, () => {
    const leave = (node: NodeId): ConfChange => ({ type, node });
    /** The configuration once `node` left the voters `voters`. */
    const left = (voters: NodeId[], node: NodeId) => ({
      voters,
      learners: type === "remove" ? [] : [node],
    });

    it("appends nothing after its removal, so the voter left can be elected", () => {
      const g = new Pair();
      const a = g.host(A);
      const b = g.host(B);
      a.raw.campaign();
      g.run();
      assert.equal(a.raw.role, "leader");
      const removal = a.raw.proposeConfChange(leave(A));
      const carriesRemoval = g.take().filter((m) => m.type === "append" && m.to === B);
      // A write proposed after the removal (refused now) would never reach b: its append is lost.
      try {
        a.raw.propose(enc.encode("x"));
      } catch (err) {
        if (!(err instanceof ProposalDroppedError)) throw err;
      }
      g.take();
      for (const m of carriesRemoval) b.raw.step(m);
      // b acknowledges the removal; a commits it, applies it and steps down; its commit broadcast
      // to b is lost.
      for (const m of g.take()) g.host(m.to).raw.step(m);
      g.take();
      assert.equal(a.raw.role, "follower");
      assert.deepEqual(a.raw.status().conf, left([B], A));
      assert.ok(b.raw.commitIndex < removal.index, "b does not know the removal committed");
      // b, still by the configuration of a and b, needs a's vote: it gets it and is elected.
      for (let t = 0; t < 100 && b.raw.role !== "leader"; t++) {
        for (const h of g.hosts.values()) h.raw.tick();
        g.run();
      }
      assert.equal(b.raw.role, "leader", `b is ${b.raw.role} in term ${b.raw.term}`);
      b.raw.propose(enc.encode("y"));
      g.run();
      assert.deepEqual(b.raw.status().conf, left([B], A));
      assert.deepEqual(
        b.sm.entries.map((e) => new TextDecoder().decode(e.data)),
        ["y"],
      );
    });

    it("takes no proposal either when elected with its removal, by an earlier leader, unapplied", () => {
      const g = new Pair();
      const a = g.host(A);
      const b = g.host(B);
      a.raw.campaign();
      g.run();
      const removal = a.raw.proposeConfChange(leave(B));
      // b holds the removal of itself; its acknowledgement is lost, and a restarts.
      g.run((m) => m.type !== "append-resp");
      a.restart();
      g.settle();
      g.queue = [];
      b.raw.campaign();
      g.run((m) => m.type !== "append-resp");
      assert.equal(b.raw.role, "leader");
      assert.ok(b.raw.commitIndex < removal.index, "b's removal is not committed yet");
      assert.throws(() => b.raw.propose(enc.encode("x")), ProposalDroppedError);
      // Once it commits (on a heartbeat's answer), b applies its removal and steps down; a is
      // the one voter left.
      b.raw.tick();
      g.run();
      assert.equal(b.raw.role, "follower");
      for (let t = 0; t < 100 && a.raw.role !== "leader"; t++) {
        for (const h of g.hosts.values()) h.raw.tick();
        g.run();
      }
      assert.equal(a.raw.role, "leader");
      assert.deepEqual(a.raw.status().conf, left([A], B));
    });
  });
}
