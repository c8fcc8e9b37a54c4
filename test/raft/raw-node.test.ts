import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { seededRng } from "../../src/common/rng.ts";
import type { ConfState, Message, NodeId, RaftStorage } from "../../src/raft/index.ts";
import type { ConfChange } from "../../src/raft/index.ts";
import {
  encodeConfChange,
  logIndex,
  MemoryStorage,
  nodeId,
  RawNode,
  term,
} from "../../src/raft/index.ts";

function single(storage: MemoryStorage = MemoryStorage.bootstrap([nodeId("a")])): {
  node: RawNode;
  storage: MemoryStorage;
} {
  const node = new RawNode({ id: nodeId("a"), storage, rng: seededRng(1) });
  return { node, storage };
}

/** Handle Ready the way a driver must, until there is none. */
function drain(node: RawNode, storage: MemoryStorage): void {
  for (let i = 0; i < 100 && node.hasReady(); i++) {
    const rd = node.ready();
    if (rd.snapshot !== null) storage.applySnapshot(rd.snapshot);
    storage.append(rd.entries);
    if (rd.hardState !== null) storage.setHardState(rd.hardState);
    node.advance();
  }
}

describe("RawNode", () => {
  it("a single voter elects itself and commits proposals on its own", () => {
    const { node, storage } = single();
    drain(node, storage);
    node.campaign();
    drain(node, storage);
    assert.equal(node.status().role, "leader");
    const { index } = node.propose(new TextEncoder().encode("x"));
    drain(node, storage);
    assert.equal(node.status().commit, index);
    assert.equal(node.status().applied, index);
  });

  it("refuses inputs between ready() and advance()", () => {
    const { node } = single();
    node.ready();
    assert.throws(() => node.tick(), { code: "CAIRN_ERR_RAFT_INVARIANT" });
    assert.throws(() => node.ready(), { code: "CAIRN_ERR_RAFT_INVARIANT" });
    node.advance();
    assert.throws(() => node.advance(), { code: "CAIRN_ERR_RAFT_INVARIANT" });
  });

  it("proposals, reads and transfers on a follower fail with NOT_LEADER", () => {
    const { node, storage } = single();
    drain(node, storage);
    assert.throws(() => node.propose(new Uint8Array([1])), {
      code: "CAIRN_ERR_NOT_LEADER",
      retryable: true,
    });
    assert.throws(() => node.readIndex(new Uint8Array([1])), { code: "CAIRN_ERR_NOT_LEADER" });
    assert.throws(() => node.transferLeader(nodeId("b")), { code: "CAIRN_ERR_NOT_LEADER" });
  });

  it("rejects bad configuration", () => {
    const storage = new MemoryStorage();
    assert.throws(() => new RawNode({ id: nodeId(""), storage, rng: seededRng(1) }), {
      code: "CAIRN_ERR_INVALID_RAFT_REQUEST",
    });
    assert.throws(
      () =>
        new RawNode({
          id: nodeId("a"),
          storage,
          rng: seededRng(1),
          electionTick: 2,
          heartbeatTick: 2,
        }),
      {
        code: "CAIRN_ERR_INVALID_RAFT_REQUEST",
      },
    );
    assert.throws(
      () => new RawNode({ id: nodeId("a"), storage, rng: seededRng(1), quiesceTicks: -1 }),
      { code: "CAIRN_ERR_INVALID_RAFT_REQUEST" },
    );
    // An in-flight window of 0 is always full: a follower in replicate would get no entry ever.
    for (const maxInflightMsgs of [0, -1, 0.5, Number.NaN]) {
      assert.throws(
        () => new RawNode({ id: nodeId("a"), storage, rng: seededRng(1), maxInflightMsgs }),
        { code: "CAIRN_ERR_INVALID_RAFT_REQUEST" },
        String(maxInflightMsgs),
      );
    }
    for (const maxInflightBytes of [0, -1, 0.5, Number.NaN]) {
      assert.throws(
        () => new RawNode({ id: nodeId("a"), storage, rng: seededRng(1), maxInflightBytes }),
        { code: "CAIRN_ERR_INVALID_RAFT_REQUEST" },
        String(maxInflightBytes),
      );
    }
  });

  it("a single voter quiesces when idle, sends nothing, and wakes on a proposal", () => {
    const storage = MemoryStorage.bootstrap([nodeId("a")]);
    const node = new RawNode({ id: nodeId("a"), storage, rng: seededRng(1), quiesceTicks: 2 });
    drain(node, storage);
    node.campaign();
    drain(node, storage);
    node.tick();
    assert.equal(node.quiesced, false);
    node.tick();
    assert.equal(node.quiesced, true);
    assert.equal(node.hasReady(), false, "no one to tell: no message");
    const { index } = node.propose(new TextEncoder().encode("x"));
    assert.equal(node.quiesced, false);
    drain(node, storage);
    assert.equal(node.status().applied, index);
    node.tick();
    node.tick();
    assert.equal(node.status().quiesced, true);
    assert.equal(node.status().role, "leader");
  });

  it("refuses a persisted commit index beyond the log (corrupt state)", () => {
    const storage = new MemoryStorage();
    storage.setHardState({ term: term(1), vote: null, commit: logIndex(5) });
    assert.throws(() => single(storage), { code: "CAIRN_ERR_RAFT_INVARIANT" });
  });

  it("restarts from storage: term, vote and configuration survive", () => {
    const { node, storage } = single();
    drain(node, storage);
    node.campaign();
    drain(node, storage);
    const before = node.status();
    const again = new RawNode({
      id: nodeId("a"),
      storage: storage as RaftStorage,
      rng: seededRng(2),
    });
    const after = again.status();
    assert.equal(after.term, before.term);
    assert.equal(after.vote, "a");
    assert.equal(after.commit, before.commit);
    assert.equal(after.role, "follower");
    drain(again, storage);
    assert.deepEqual(again.status().conf, { voters: ["a"], learners: [] });
  });

  it("an applied index given at restart re-derives the configuration without replaying it", () => {
    const { node, storage } = single(MemoryStorage.bootstrap([nodeId("a"), nodeId("b")]));
    drain(node, storage);
    const again = new RawNode({
      id: nodeId("a"),
      storage,
      rng: seededRng(3),
      applied: logIndex(2),
    });
    assert.deepEqual(again.status().conf, { voters: ["a", "b"], learners: [] });
    assert.equal(again.status().applied, 2);
    assert.equal(again.hasReady(), false);
  });

  it("ignores a snapshot whose configuration does not include it, and installs one that does", () => {
    const snapshot = (conf: ConfState): Message => ({
      type: "snapshot",
      from: nodeId("n1"),
      to: nodeId("n4"),
      term: term(2),
      snapshot: { meta: { index: logIndex(5), term: term(2), conf }, data: new Uint8Array(0) },
    });
    const storage = new MemoryStorage();
    const node = new RawNode({ id: nodeId("n4"), storage, rng: seededRng(1) });
    const voters = [nodeId("n1"), nodeId("n2"), nodeId("n3")];
    node.step(snapshot({ voters, learners: [] }));
    let rd = node.ready();
    assert.equal(rd.snapshot, null);
    // The answer tells the leader where this member really is: nowhere.
    assert.deepEqual(
      rd.messages.map((m) => (m.type === "append-resp" ? [m.type, m.index, m.reject] : m.type)),
      [["append-resp", 0, false]],
    );
    node.advance();
    assert.equal(node.status().commit, 0);
    assert.deepEqual(node.status().conf, { voters: [], learners: [] });

    node.step(snapshot({ voters, learners: [nodeId("n4")] }));
    rd = node.ready();
    assert.equal(rd.snapshot?.meta.index, 5);
    node.advance();
    assert.equal(node.status().commit, 5);
    assert.deepEqual(node.status().conf, { voters, learners: ["n4"] });
  });
});

describe("RawNode.leadWithoutElection (a new group's designated first leader)", () => {
  const ids = [nodeId("a"), nodeId("b"), nodeId("c")];

  /**
   * Three founding voters whose founding hard state holds a vote for `vote` in term 1; with
   * `confIndex`, their founding conf changes up to it take effect at construction.
   */
  function founded(
    vote: string | null,
    confIndex?: number,
    learners: readonly NodeId[] = [],
  ): Map<string, { node: RawNode; storage: MemoryStorage }> {
    const group = new Map<string, { node: RawNode; storage: MemoryStorage }>();
    for (const [i, id] of ids.entries()) {
      const storage = MemoryStorage.bootstrap(ids, learners);
      const hs = storage.initialState().hardState;
      storage.setHardState({ ...hs, vote: vote === null ? null : nodeId(vote) });
      const node = new RawNode({
        id,
        storage,
        rng: seededRng(i + 1),
        ...(confIndex === undefined ? {} : { confIndex: logIndex(confIndex) }),
      });
      group.set(id, { node, storage });
    }
    return group;
  }

  /** Handles every Ready and delivers every message, until the group is still. */
  function settle(group: Map<string, { node: RawNode; storage: MemoryStorage }>): Message[] {
    const sent: Message[] = [];
    for (let round = 0; round < 100; round++) {
      const outbox: Message[] = [];
      for (const { node, storage } of group.values()) {
        if (!node.hasReady()) continue;
        const rd = node.ready();
        storage.append(rd.entries);
        if (rd.hardState !== null) storage.setHardState(rd.hardState);
        outbox.push(...rd.messages);
        node.advance();
      }
      if (outbox.length === 0) return sent;
      sent.push(...outbox);
      for (const m of outbox) group.get(m.to)?.node.step(m);
    }
    throw new Error("the group did not settle");
  }

  it("leads the founding term at once and commits there, with no vote asked or given", () => {
    const group = founded("a");
    settle(group); // the founding configuration is applied
    const a = group.get("a")?.node;
    assert.ok(a !== undefined);
    a.leadWithoutElection();
    const sent = settle(group);
    assert.equal(a.status().role, "leader");
    assert.equal(a.term, 1);
    const { index } = a.propose(new TextEncoder().encode("x"));
    sent.push(...settle(group));
    for (const { node } of group.values()) {
      assert.equal(node.term, 1, "no election");
      assert.ok(node.status().commit >= index, "committed everywhere");
      assert.equal(node.lead, "a");
    }
    assert.deepEqual(
      sent.filter((m) => m.type.includes("vote")),
      [],
      "no vote or pre-vote message",
    );
  });

  it("is refused to a member that did not vote for itself in its term, or already follows a leader", () => {
    const group = founded("a");
    settle(group);
    assert.throws(() => group.get("b")?.node.leadWithoutElection(), {
      code: "CAIRN_ERR_INVALID_RAFT_REQUEST",
    });
    const unvoted = founded(null);
    settle(unvoted);
    assert.throws(() => unvoted.get("a")?.node.leadWithoutElection(), {
      code: "CAIRN_ERR_INVALID_RAFT_REQUEST",
    });
    group.get("a")?.node.leadWithoutElection();
    settle(group);
    // A second call, now that it leads, is refused too: it never re-founds its term.
    assert.throws(() => group.get("a")?.node.leadWithoutElection(), {
      code: "CAIRN_ERR_INVALID_RAFT_REQUEST",
    });
  });

  it("waits for the founding configuration: before it is applied the member is no voter", () => {
    const group = founded("a");
    assert.throws(() => group.get("a")?.node.leadWithoutElection(), {
      code: "CAIRN_ERR_INVALID_RAFT_REQUEST",
    });
  });

  it("leads at once when its founding configuration took effect at construction (confIndex)", () => {
    const group = founded("a", 3);
    const a = group.get("a")?.node;
    assert.ok(a !== undefined);
    a.leadWithoutElection();
    const { index } = a.propose(new TextEncoder().encode("x"));
    assert.equal(index, 5, "after the three founding entries and the leader's empty entry");
    // The founding entries still reach the state machine: taking effect early skips no apply.
    const rd = a.ready();
    assert.deepEqual(
      rd.committedEntries.map((e) => [e.index, e.type]),
      [
        [1, "conf-change"],
        [2, "conf-change"],
        [3, "conf-change"],
      ],
    );
    const storage = group.get("a")?.storage;
    storage?.append(rd.entries);
    if (rd.hardState !== null) storage?.setHardState(rd.hardState);
    const sent = [...rd.messages];
    a.advance();
    for (const m of rd.messages) group.get(m.to)?.node.step(m);
    sent.push(...settle(group));
    for (const { node } of group.values()) {
      assert.equal(node.term, 1, "no election");
      assert.ok(node.status().commit >= index, "committed everywhere");
      assert.deepEqual(node.status().conf.voters.toSorted(), ["a", "b", "c"]);
    }
    assert.deepEqual(
      sent.filter((m) => m.type.includes("vote")),
      [],
      "no vote or pre-vote message",
    );
  });

  it("still waits for a committed conf change past confIndex, and refuses a confIndex past the commit", () => {
    // Bootstrapped with a learner: its add-learner entry (index 4) is committed too.
    const d = nodeId("d");
    const early = founded("a", 3, [d]);
    assert.throws(() => early.get("a")?.node.leadWithoutElection(), {
      code: "CAIRN_ERR_INVALID_RAFT_REQUEST",
      message: /founding configuration is applied/,
    });
    const all = founded("a", 4, [d]);
    all.get("a")?.node.leadWithoutElection();
    assert.equal(all.get("a")?.node.status().role, "leader");
    assert.throws(() => founded("a", 4), {
      code: "CAIRN_ERR_INVALID_RAFT_REQUEST",
      message: /confIndex 4 is past the commit index 3/,
    });
  });
});

describe("RawNode: a peer's message is checked against the log before it is believed", () => {
  const [a, b, c, d] = [nodeId("a"), nodeId("b"), nodeId("c"), nodeId("d")];
  const enc = new TextEncoder();

  /** `id`, a founding voter of (a, b, c) in term 1 that voted for a, its founding applied. */
  function member(id: NodeId, preVote = true): { node: RawNode; storage: MemoryStorage } {
    const storage = MemoryStorage.bootstrap([a, b, c]);
    storage.setHardState({ ...storage.initialState().hardState, vote: a });
    const node = new RawNode({ id, storage, rng: seededRng(1), confIndex: logIndex(3), preVote });
    drain(node, storage);
    return { node, storage };
  }

  /** An append from leader a (term 1) after 1/3, the last founding entry. */
  function append(entries: { index: number; term: number }[], commit: number): Message {
    return {
      type: "append",
      from: a,
      to: b,
      term: term(1),
      prevIndex: logIndex(3),
      prevTerm: term(1),
      entries: entries.map((e) => ({
        index: logIndex(e.index),
        term: term(e.term),
        type: "normal",
        data: enc.encode("x"),
      })),
      commit: logIndex(commit),
      noReply: false,
    };
  }

  it("drops an append whose entries do not follow its previous entry one by one", () => {
    const { node, storage } = member(b);
    // Two entries both numbered 4: taken by position, the second became index 5 while saying 4.
    node.step(
      append(
        [
          { index: 4, term: 1 },
          { index: 4, term: 1 },
        ],
        0,
      ),
    );
    drain(node, storage);
    assert.equal(node.status().lastIndex, 3);
    // An entry numbered 5 right after 3, with a commit index naming it: the member threw.
    assert.doesNotThrow(() => node.step(append([{ index: 5, term: 1 }], 5)));
    // An entry of a term above the leader's own (its log would outrank every real one).
    node.step(append([{ index: 4, term: 9 }], 0));
    drain(node, storage);
    assert.equal(node.status().lastIndex, 3);
    assert.equal(node.status().commit, 3);
    // A well-formed one is taken.
    node.step(
      append(
        [
          { index: 4, term: 1 },
          { index: 5, term: 1 },
        ],
        5,
      ),
    );
    drain(node, storage);
    assert.equal(node.status().lastIndex, 5);
    assert.deepEqual(
      (node.entries(logIndex(4), logIndex(6)) ?? []).map((e) => e.index),
      [4, 5],
    );
    assert.equal(node.status().commit, 5);
  });

  it("believes the commit index of a vote request or refusal only where the logs agree, and not as leader", () => {
    const refusal = (to: NodeId, commit: number, commitTerm: number): Message => ({
      type: "prevote-resp",
      from: c,
      to,
      term: term(1),
      reject: true,
      commit: logIndex(commit),
      commitTerm: term(commitTerm),
    });
    const { node, storage } = member(b);
    node.step(
      append(
        [
          { index: 4, term: 1 },
          { index: 5, term: 1 },
        ],
        3,
      ),
    );
    drain(node, storage);
    assert.equal(node.status().commit, 3);
    // c's entry 5 is of term 2: c's log is not b's up to 5, so b's 5 may never commit.
    node.step(refusal(b, 5, 2));
    // An index past b's log (a forged or corrupt answer: a refusal names at most the candidate's
    // last index) is believed neither, nor does it throw.
    assert.doesNotThrow(() => node.step(refusal(b, 7, 1)));
    drain(node, storage);
    assert.equal(node.status().commit, 3);
    // c's 4 is b's 4: committed on c, so on b.
    node.step(refusal(b, 4, 1));
    drain(node, storage);
    assert.equal(node.status().commit, 4);
    assert.equal(node.status().applied, 4);
    // A candidate's request says the same of its own commit index (c's 5 is b's 5). In b's term:
    // one of a later term b would ignore, in the lease of its leader a.
    node.step({
      type: "prevote",
      from: c,
      to: b,
      term: term(1),
      lastIndex: logIndex(5),
      lastTerm: term(1),
      transfer: false,
      commit: logIndex(5),
      commitTerm: term(1),
    });
    drain(node, storage);
    assert.equal(node.status().commit, 5);

    // A leader's commit index moves only by counting its own term's entries.
    const lead = member(a);
    lead.node.leadWithoutElection(); // its empty entry is 1/4, acknowledged by nobody yet
    drain(lead.node, lead.storage);
    lead.node.step(refusal(a, 4, 1));
    drain(lead.node, lead.storage);
    assert.equal(lead.node.status().commit, 3);
  });

  it("a leader counts no acknowledgement of an index beyond its log", () => {
    const { node, storage } = member(a);
    node.leadWithoutElection(); // its empty entry is 1/4
    drain(node, storage);
    // b acknowledges 7, which a has not written yet (a forged or corrupt answer).
    node.step({
      type: "append-resp",
      from: b,
      to: a,
      term: term(1),
      index: logIndex(7),
      reject: false,
      hintIndex: logIndex(0),
      hintTerm: term(0),
      lost: false,
    });
    drain(node, storage);
    for (const d of ["5", "6", "7"]) node.propose(enc.encode(d));
    drain(node, storage);
    // Nobody but a holds 4..7: none of them is committed.
    assert.equal(node.status().commit, 3);
    assert.equal(node.matchOf(b), 0);
  });

  it("a leader counts no confirmation of a read round it has not started", () => {
    const ids = ["a", "b", "c", "d", "e"].map(nodeId);
    const storage = MemoryStorage.bootstrap(ids);
    storage.setHardState({ ...storage.initialState().hardState, vote: a });
    const node = new RawNode({ id: a, storage, rng: seededRng(1), confIndex: logIndex(5) });
    drain(node, storage);
    node.leadWithoutElection(); // its empty entry is 1/6
    const ack = (from: NodeId, index: number): Message => ({
      type: "append-resp",
      from,
      to: a,
      term: term(1),
      index: logIndex(index),
      reject: false,
      hintIndex: logIndex(0),
      hintTerm: term(0),
      lost: false,
    });
    node.step(ack(b, 6));
    node.step(ack(c, 6));
    drain(node, storage);
    assert.equal(node.status().commit, 6);
    // b confirms round 99 before any read (a forged or corrupt answer)…
    node.step({ type: "heartbeat-resp", from: b, to: a, term: term(1), readSeq: 99 });
    node.readIndex(enc.encode("r"));
    drain(node, storage);
    // …then c confirms the read's round, 1: a and c are two of five, no quorum.
    node.step({ type: "heartbeat-resp", from: c, to: a, term: term(1), readSeq: 1 });
    assert.deepEqual(readStates(), []);
    // d's confirmation makes three.
    node.step({ type: "heartbeat-resp", from: d, to: a, term: term(1), readSeq: 1 });
    assert.deepEqual(readStates(), [6]);

    /** The read states of the Readies now due (handled as a driver does). */
    function readStates(): number[] {
      const out: number[] = [];
      while (node.hasReady()) {
        const rd = node.ready();
        storage.append(rd.entries);
        if (rd.hardState !== null) storage.setHardState(rd.hardState);
        out.push(...rd.readStates.map((r) => r.index));
        node.advance();
      }
      return out;
    }
  });

  it("ignores a term so high that the group could hold no election after it", () => {
    const { node, storage } = member(b, false);
    // Adopted, its next campaigns were at 2^53 both (term + 1 no longer exact), which no peer
    // decodes either: the group could elect no leader again.
    node.step({
      type: "vote-resp",
      from: c,
      to: b,
      term: term(Number.MAX_SAFE_INTEGER),
      reject: true,
      commit: logIndex(0),
      commitTerm: term(0),
    });
    drain(node, storage);
    assert.equal(node.term, 1);
    node.campaign();
    drain(node, storage);
    const first = node.term;
    node.campaign();
    drain(node, storage);
    assert.ok(Number.isSafeInteger(node.term) && node.term > first, `term ${node.term}`);
  });
});

describe("RawNode: a leader's appends in flight to a follower are bounded in bytes", () => {
  const [a, b, c] = [nodeId("a"), nodeId("b"), nodeId("c")];
  const MIB = 1 << 20;

  /** Leader a of (a, b, c), founded in term 1 (its empty entry is 1/4); b has not answered yet. */
  function leader(config: { maxMsgBytes?: number; maxInflightBytes?: number } = {}): {
    node: RawNode;
    storage: MemoryStorage;
  } {
    const storage = MemoryStorage.bootstrap([a, b, c]);
    storage.setHardState({ ...storage.initialState().hardState, vote: a });
    const node = new RawNode({
      id: a,
      storage,
      rng: seededRng(1),
      confIndex: logIndex(3),
      ...config,
    });
    drain(node, storage);
    node.leadWithoutElection();
    return { node, storage };
  }

  const ack = (from: NodeId, index: number): Message => ({
    type: "append-resp",
    from,
    to: a,
    term: term(1),
    index: logIndex(index),
    reject: false,
    hintIndex: logIndex(0),
    hintTerm: term(0),
    lost: false,
  });

  /** Handles the Readies now due as a driver does; returns the entry bytes of b's appends. */
  function sentToB(node: RawNode, storage: MemoryStorage): number {
    let bytes = 0;
    while (node.hasReady()) {
      const rd = node.ready();
      storage.append(rd.entries);
      if (rd.hardState !== null) storage.setHardState(rd.hardState);
      for (const m of rd.messages)
        if (m.to === b && m.type === "append") for (const e of m.entries) bytes += e.data.length;
      node.advance();
    }
    return bytes;
  }

  it("a follower catching up gets a window's bytes at a time, not maxInflightMsgs messages (the driver's defaults)", () => {
    const { node, storage } = leader();
    sentToB(node, storage);
    node.step(ack(c, 4));
    // 64 MiB of writes, one a round, committed with c while b is silent (one probe out).
    const value = new Uint8Array(MIB);
    for (let i = 0; i < 64; i++) {
      node.propose(value);
      sentToB(node, storage);
      node.step(ack(c, 5 + i));
    }
    sentToB(node, storage);
    assert.equal(node.status().commit, 68);
    // b answers the probe: the leader streams the rest of the log to it. Before the byte bound
    // the whole 64 MiB went in one burst (maxInflightMsgs is 256 appends of up to 1 MiB each:
    // 256 MiB per follower per group).
    node.step(ack(b, 4));
    let inFlight = sentToB(node, storage);
    assert.ok(inFlight <= 9 * MIB, `${inFlight / MIB} MiB in flight to b`);
    // Each acknowledgement frees room for as much again, never more.
    let acked = 4;
    while (acked < 68) {
      acked += 4;
      node.step(ack(b, acked));
      inFlight += sentToB(node, storage) - 4 * MIB;
      assert.ok(inFlight <= 9 * MIB, `${inFlight / MIB} MiB in flight to b at ${acked}`);
    }
    assert.equal(node.matchOf(b), 68);
  });

  it("maxInflightBytes: the window is full once its appends carry that many bytes", () => {
    const { node, storage } = leader({ maxMsgBytes: 100, maxInflightBytes: 250 });
    sentToB(node, storage);
    node.step(ack(b, 4));
    node.step(ack(c, 4));
    sentToB(node, storage);
    // Three appends of 100 bytes fill it (300 ≥ 250); the fourth waits for an answer.
    let sent = 0;
    for (let i = 0; i < 4; i++) {
      node.propose(new Uint8Array(100));
      sent += sentToB(node, storage);
    }
    assert.equal(sent, 300);
    node.step(ack(b, 5));
    assert.equal(sentToB(node, storage), 100);
  });
});

describe("RawNode.stateApplied (a state machine ahead of the log it kept)", () => {
  const [a, b, c, d] = [nodeId("a"), nodeId("b"), nodeId("c"), nodeId("d")];
  // The group's log: founded by a, b, c; a removed; d added as a learner. In force at 5:
  // voters b, c and learner d.
  const changes: ConfChange[] = [
    { type: "add-voter", node: a },
    { type: "add-voter", node: b },
    { type: "add-voter", node: c },
    { type: "remove", node: a },
    { type: "add-learner", node: d },
  ];
  const atFive: ConfState = { voters: [b, c], learners: [d] };

  /** Leader b's append of entries from..to (term 1) after from - 1, committing `commit`. */
  function append(from: number, to: number, commit: number): Message {
    return {
      type: "append",
      from: b,
      to: d,
      term: term(1),
      prevIndex: logIndex(from - 1),
      prevTerm: term(from === 1 ? 0 : 1),
      entries: changes.slice(from - 1, to).map((cc, i) => ({
        index: logIndex(from + i),
        term: term(1),
        type: "conf-change" as const,
        data: encodeConfChange(cc),
      })),
      commit: logIndex(commit),
      noReply: false,
    };
  }

  it("applies no conf change at or below it again when the leader re-sends the log", () => {
    // d installed a snapshot at 5 durably in its engine; its log lost the snapshot's mark, so it
    // starts with an empty log, commit 0, and the configuration of 5 (the engine's).
    const storage = new MemoryStorage({
      meta: { index: logIndex(0), term: term(0), conf: atFive },
      data: new Uint8Array(0),
    });
    const node = new RawNode({ id: d, storage, rng: seededRng(1), stateApplied: logIndex(5) });
    drain(node, storage);
    assert.equal(node.hasUnappliedConfChange(), false);
    // The leader finds d's log empty and sends it all, in two appends.
    node.step(append(1, 3, 3));
    drain(node, storage);
    assert.equal(node.status().applied, 3);
    // Replayed onto the configuration of 5, "add-voter a" made a, removed at 4, a voter again.
    assert.deepEqual(node.status().conf, atFive);
    assert.equal(node.hasUnappliedConfChange(), false);
    node.step(append(4, 5, 5));
    drain(node, storage);
    assert.equal(node.status().applied, 5);
    assert.deepEqual(node.status().conf, atFive);
  });

  it("replays no conf change onto a configuration as of a later index", () => {
    // d's engine applied through 6, d's promotion (its configuration: voters b, c, d), while
    // its log's hard state kept commit 5. Replayed up to 5 onto that configuration, the
    // log's "add-learner d" demoted d, and the promotion, in effect already, was not applied
    // again: d stayed a learner for good.
    const log: ConfChange[] = [...changes, { type: "add-voter", node: d }];
    const atSix: ConfState = { voters: [b, c, d], learners: [] };
    const storage = new MemoryStorage({
      meta: { index: logIndex(0), term: term(0), conf: atSix },
      data: new Uint8Array(0),
    });
    storage.append(
      log.map((cc, i) => ({
        index: logIndex(i + 1),
        term: term(1),
        type: "conf-change" as const,
        data: encodeConfChange(cc),
      })),
    );
    storage.setHardState({ term: term(1), vote: null, commit: logIndex(5) });
    const node = new RawNode({
      id: d,
      storage,
      rng: seededRng(1),
      applied: logIndex(5),
      stateApplied: logIndex(6),
    });
    assert.deepEqual(node.status().conf, atSix);
    // The leader's commit reaches 6: its entry is delivered and changes nothing.
    node.step({
      type: "append",
      from: b,
      to: d,
      term: term(1),
      prevIndex: logIndex(6),
      prevTerm: term(1),
      entries: [],
      commit: logIndex(6),
      noReply: false,
    });
    drain(node, storage);
    assert.equal(node.status().applied, 6);
    assert.deepEqual(node.status().conf, atSix);
  });

  it("applies the conf changes past a snapshot below it", () => {
    // d's engine applied through 6, d's promotion, and a power cut tore its log's record of it:
    // d starts with an empty log. A leader whose apply lags its commit (one just elected, say)
    // sends it a snapshot at 5, when d was a learner, and then entry 6. The snapshot replaced
    // the configuration with that of 5, and 6, taken to be in effect already (at or below
    // stateApplied), was not applied again: d's core held d a learner for good, while its
    // driver, which applies every entry past the snapshot, held it a voter.
    const atSix: ConfState = { voters: [b, c, d], learners: [] };
    const storage = new MemoryStorage({
      meta: { index: logIndex(0), term: term(0), conf: atSix },
      data: new Uint8Array(0),
    });
    const node = new RawNode({ id: d, storage, rng: seededRng(1), stateApplied: logIndex(6) });
    node.step({
      type: "snapshot",
      from: b,
      to: d,
      term: term(1),
      snapshot: {
        meta: { index: logIndex(5), term: term(1), conf: atFive },
        data: new Uint8Array(0),
      },
    });
    drain(node, storage);
    assert.deepEqual(node.status().conf, atFive);
    node.step({
      type: "append",
      from: b,
      to: d,
      term: term(1),
      prevIndex: logIndex(5),
      prevTerm: term(1),
      entries: [
        {
          index: logIndex(6),
          term: term(1),
          type: "conf-change",
          data: encodeConfChange({ type: "add-voter", node: d }),
        },
      ],
      commit: logIndex(6),
      noReply: false,
    });
    drain(node, storage);
    assert.equal(node.status().applied, 6);
    assert.deepEqual(node.status().conf, atSix);
  });

  it("applies the conf changes past it", () => {
    const storage = new MemoryStorage({
      meta: { index: logIndex(0), term: term(0), conf: { voters: [a, b, c], learners: [] } },
      data: new Uint8Array(0),
    });
    const node = new RawNode({ id: d, storage, rng: seededRng(1), stateApplied: logIndex(3) });
    node.step(append(1, 5, 5));
    drain(node, storage);
    assert.deepEqual(node.status().conf, atFive);
  });
});
