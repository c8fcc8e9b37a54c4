/**
 * Messages no real member sends, from a caller posing as one (the peers' service takes a node
 * it does not know, so that a member the meta state here has not heard of yet is heard): the
 * core must neither fail nor take in what would wedge its group for good. A review of
 * 2026-12-06 proved each on a live cluster: a heartbeat's commit past the log failed the node,
 * a term near the highest left the group unable to elect, and a membership change that does
 * not decode failed the node at its apply and at every restart after.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { seededRng } from "../../src/common/rng.ts";
import type { Message } from "../../src/raft/index.ts";
import { logIndex, MemoryStorage, nodeId, term } from "../../src/raft/index.ts";
import { Host } from "./support/host.ts";

const A = nodeId("a");
const B = nodeId("b");
const C = nodeId("c");
const EVIL = nodeId("evil");

/** Member b of {a, b, c} after a's election and one committed entry, and what it sends. */
function follower(): { b: Host; sent: Message[]; step(m: Message): void } {
  const rng = seededRng(11);
  const hosts = new Map(
    [A, B, C].map((id) => [id, new Host(id, MemoryStorage.bootstrap([A, B, C]), {}, rng.fork())]),
  );
  let queue: Message[] = [];
  const deliver = (): void => {
    for (let round = 0; round < 50; round++) {
      for (const h of hosts.values()) while (h.raw.hasReady()) h.handleReady((m) => queue.push(m));
      const due = queue;
      queue = [];
      if (due.length === 0) return;
      for (const m of due) hosts.get(m.to)?.raw.step(m);
    }
    assert.fail("the group never went quiet");
  };
  const a = hosts.get(A) as Host;
  deliver(); // each member takes in its configuration
  a.raw.campaign();
  deliver();
  a.raw.propose(new TextEncoder().encode("x"));
  deliver();
  const b = hosts.get(B) as Host;
  assert.equal(b.raw.lead, A);
  const sent: Message[] = [];
  return {
    b,
    sent,
    step(m: Message): void {
      b.raw.step(m);
      while (b.raw.hasReady()) b.handleReady((out) => sent.push(out));
    },
  };
}

describe("the Raft core against a caller posing as a member", () => {
  it("takes no commit past its log from a heartbeat, and asks to be refilled instead of failing", () => {
    const { b, sent, step } = follower();
    const last = b.raw.status().lastIndex;
    const committed = b.raw.commitIndex;
    step({
      type: "heartbeat",
      from: EVIL,
      to: B,
      term: term(b.raw.term + 1),
      commit: logIndex(1e12),
      readSeq: 0,
      quiesce: false,
      noReply: false,
    });
    assert.equal(b.raw.commitIndex, committed, "nothing committed");
    assert.equal(b.raw.status().lastIndex, last);
    const answer = sent.find((m) => m.type === "append-resp" && m.to === EVIL);
    assert.ok(answer !== undefined && answer.type === "append-resp");
    assert.equal(answer.reject, true);
    assert.equal(answer.lost, true, "a real leader would forget its match and refill b");
  });

  it("drops a message whose term is more than 2^32 ahead of its own", () => {
    const { b, step } = follower();
    const before = b.raw.term;
    for (const t of [2 ** 52, before + 2 ** 32 + 1]) {
      step({
        type: "vote-resp",
        from: C,
        to: B,
        term: term(t),
        reject: true,
        commit: logIndex(0),
        commitTerm: term(0),
      });
      assert.equal(b.raw.term, before, `term ${t} not taken`);
      assert.equal(b.raw.lead, A, "still following a");
    }
    // A step up to 2^32 is taken: no real group is that far apart, and none is refused.
    step({
      type: "vote-resp",
      from: C,
      to: B,
      term: term(before + 2 ** 32),
      reject: true,
      commit: logIndex(0),
      commitTerm: term(0),
    });
    assert.equal(b.raw.term, before + 2 ** 32);
  });

  it("drops an append whose membership change does not decode", () => {
    const { b, step } = follower();
    const last = b.raw.status().lastIndex;
    const lastTerm = b.raw.term;
    /** a's append of one membership change, `text`, after b's last entry. */
    const change = (text: string): Message => ({
      type: "append",
      from: A,
      to: B,
      term: term(lastTerm),
      prevIndex: logIndex(last),
      prevTerm: term(lastTerm),
      entries: [
        {
          index: logIndex(last + 1),
          term: term(lastTerm),
          type: "conf-change",
          data: new TextEncoder().encode(text),
        },
      ],
      commit: logIndex(last + 1),
      noReply: false,
    });
    for (const text of ["garbage", "promote b", "add-voter", ""]) {
      step(change(text));
      assert.equal(b.raw.status().lastIndex, last, `${JSON.stringify(text)} not appended`);
    }
    // A well-formed one is taken (and applied: b's configuration now names d a learner).
    step(change("add-learner d"));
    assert.equal(b.raw.status().lastIndex, last + 1);
  });
});
