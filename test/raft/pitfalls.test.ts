/**
 * Pitfalls that real Raft implementations hit (etcd-io/raft's and tikv/raft-rs's fixed bugs and
 * regression tests), each checked against this core: a message the network duplicated,
 * reordered or delayed past newer ones; votes and campaigns by members that must not have a
 * say (learners, removed members, members in a leader's lease); a new leader that inherits an
 * unapplied configuration change; a leadership transfer that meets a configuration change.
 * Scenarios run on the golden scripts' environment; message-level ones step a RawNode directly.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { seededRng } from "../../src/common/rng.ts";
import type { Entry, Message, NodeId, ReadState } from "../../src/raft/index.ts";
import { logIndex, MemoryStorage, nodeId, RawNode, term } from "../../src/raft/index.ts";
import { parseCommand } from "../support/datadriven.ts";
import { Inflights, Progress } from "../../src/raft/progress.ts";
import { GoldenEnv } from "./support/golden-env.ts";
import { Host } from "./support/host.ts";

const enc = new TextEncoder();

/** Runs golden-script commands, one a line; returns their output. */
function run(env: GoldenEnv, script: string): string {
  const out: string[] = [];
  for (const line of script.split("\n")) {
    if (line.trim() === "") continue;
    const o = env.exec(parseCommand(line, 0));
    if (o !== "") out.push(o);
  }
  return out.join("\n");
}

/**
 * With 1 cut off, 2 campaigns and wins term 3 with 3's vote. 3 restarts first: a member ignores
 * campaigns for an election timeout after it heard from a leader, and a restarted one knows none.
 */
function elect2(env: GoldenEnv, stabilize = true): void {
  run(env, "crash 3\nrestart 3\ncampaign 2");
  if (stabilize) run(env, "stabilize 2 3");
}

/** A three-voter group (plus `extra` options) led by 1 in term 2, everything applied. */
function ledBy1(cluster = "cluster voters=1,2,3"): GoldenEnv {
  const env = new GoldenEnv();
  run(env, `${cluster}\ncampaign 1\nstabilize`);
  assert.match(run(env, "status 1"), /^1: leader term=2 /);
  return env;
}

describe("raft pitfalls: members that must not have a say", () => {
  it("a candidate counts no vote of a learner", () => {
    const env = new GoldenEnv();
    run(env, "cluster voters=1,2,3 learners=4 prevote=false checkquorum=false\nisolate 1");
    run(env, "campaign 1\nstabilize 1");
    const candidate = env.hosts.get(nodeId("1"))?.raw as RawNode;
    const grant = (from: string): Message => ({
      type: "vote-resp",
      from: nodeId(from),
      to: nodeId("1"),
      term: term(2),
      reject: false,
      commit: logIndex(0),
      commitTerm: term(0),
    });
    // A learner grants a vote it is asked for (it may be a voter that does not know it yet, as
    // etcd-io/raft has it); counted, 1 would lead with one voter's vote of three.
    candidate.step(grant("4"));
    assert.match(run(env, "status 1"), /^1: candidate term=2 /);
    candidate.step(grant("2"));
    assert.match(run(env, "status 1"), /^1: leader term=2 /);
  });

  it("a learner promoted without knowing it votes, so the new configuration's quorum can elect (etcd-io/etcd#10998)", () => {
    const env = new GoldenEnv();
    run(env, "cluster voters=1,2 learners=3\ncampaign 1\nstabilize");
    // 1 and 2 apply the promotion of 3; 3 never hears of it. Then 1 is gone.
    run(env, "isolate 3\nconf-change 1 add-voter 3\nstabilize 1 2\nheal\ncrash 1");
    assert.match(run(env, "status 2"), /voters=\(1 2 3\)/);
    assert.match(run(env, "status 3"), /voters=\(1 2\) learners=\(3\)/);
    // 2 needs 3's vote (2 of 3). 3, in its leader's lease, ignores it until an election timeout
    // has passed without word from 1 (CheckQuorum); then it grants, a learner as far as it knows.
    run(env, "tick 3 n=10\ncampaign 2\nstabilize 2 3");
    assert.match(run(env, "status 2"), /^2: leader term=3 /);
    assert.match(run(env, "status 3"), /^3: follower term=3 lead=2 .*voters=\(1 2 3\)$/);
  });

  it("a learner never campaigns, and ignores a TimeoutNow", () => {
    const env = ledBy1("cluster voters=1,2,3 learners=4");
    run(env, "isolate 4\ntick 4 n=100\nstabilize");
    assert.match(run(env, "status 4"), /^4: follower term=2 /);
    run(env, "heal");
    env.hosts.get(nodeId("4"))?.raw.step({
      type: "timeout-now",
      from: nodeId("1"),
      to: nodeId("4"),
      term: term(2),
    });
    assert.doesNotMatch(run(env, "stabilize"), /became (pre-)?candidate/);
    assert.match(run(env, "status 1"), /^1: leader term=2 /);
  });

  for (const preVote of [true, false]) {
    it(`a removed member that missed its removal does not disrupt the group (prevote=${preVote})`, () => {
      const env = ledBy1(`cluster voters=1,2,3,4 prevote=${preVote}`);
      run(env, "isolate 4\nconf-change 1 remove 4\nstabilize 1 2 3\nheal");
      assert.match(run(env, "status 1"), /voters=\(1 2 3\)/);
      // 4 believes it is a voter still: it campaigns at every election timeout. The others,
      // in their leader's lease (CheckQuorum), ignore it, and no term changes.
      let campaigned = false;
      for (let i = 0; i < 10; i++) {
        campaigned =
          /4: became (pre-)?candidate/.test(run(env, "tick n=5\nstabilize")) || campaigned;
      }
      assert.ok(campaigned);
      for (const id of ["1", "2", "3"]) assert.match(run(env, `status ${id}`), / term=2 /);
      assert.match(run(env, "status 1"), /^1: leader /);
      assert.match(run(env, "propose 1 x\nstabilize 1 2 3"), /1: apply \[2\/7 "x"\]/);
    });
  }

  it("a pre-vote is refused in a leader's lease and granted once the lease is over", () => {
    const env = ledBy1();
    const prevote: Message = {
      type: "prevote",
      from: nodeId("3"),
      to: nodeId("2"),
      term: term(3),
      lastIndex: logIndex(4),
      lastTerm: term(2),
      transfer: false,
      commit: logIndex(4),
      commitTerm: term(2),
    };
    const two = env.hosts.get(nodeId("2"))?.raw as RawNode;
    // 2 heard from its leader 1 a few ticks ago: 3's pre-vote (3 was cut off, say) gets no answer.
    run(env, "tick 2 n=5");
    two.step(prevote);
    assert.doesNotMatch(run(env, "process-ready 2"), /prevote-resp/);
    // 1 is gone: once 2 has heard nothing for an election timeout, it grants.
    run(env, "crash 1\ntick 2 n=5");
    two.step(prevote);
    assert.match(run(env, "process-ready 2"), /^2->3 prevote-resp term=3$/m);
  });
});

/** Members on a network the test controls message by message. */
class Net {
  readonly hosts = new Map<NodeId, Host>();
  readonly readStates: { id: NodeId; read: ReadState }[] = [];
  queue: Message[] = [];

  constructor(voters: readonly string[]) {
    const ids = voters.map(nodeId);
    const rng = seededRng(5);
    for (const id of ids)
      this.hosts.set(id, new Host(id, MemoryStorage.bootstrap(ids), {}, rng.fork()));
    this.settle();
  }

  host(id: string): Host {
    return this.hosts.get(nodeId(id)) as Host;
  }

  /** Handles every member's Readies; their messages join the queue. */
  settle(): void {
    for (let i = 0; i < 5; i++)
      for (const h of this.hosts.values())
        while (h.raw.hasReady()) {
          const { readStates } = h.handleReady((m) => this.queue.push(m));
          for (const read of readStates) this.readStates.push({ id: h.id, read });
        }
  }

  /** Delivers queued messages until none is left; those `keep` refuses are returned, undelivered. */
  run(keep: (m: Message) => boolean = () => true): Message[] {
    const held: Message[] = [];
    for (let round = 0; round < 100; round++) {
      this.settle();
      const due = this.queue;
      if (due.length === 0) break;
      this.queue = [];
      for (const m of due)
        if (keep(m)) this.host(m.to).raw.step(m);
        else held.push(m);
    }
    return held;
  }

  /** The reads `id` released so far, as "context@index". */
  reads(id: string): string[] {
    const dec = new TextDecoder();
    return this.readStates
      .filter((r) => r.id === nodeId(id))
      .map((r) => `${dec.decode(r.read.context)}@${r.read.index}`);
  }
}

describe("raft pitfalls: ReadIndex", () => {
  it("a read is not confirmed by a delayed answer to an older round, even with the same context (etcd-io/raft#397)", () => {
    const net = new Net(["1", "2", "3"]);
    net.host("1").raw.campaign();
    net.run();
    assert.equal(net.host("1").raw.role, "leader");
    const commitA = net.host("1").raw.commitIndex;
    // Read A, twice with the same context (a client's retry); the answers to its rounds are held.
    net.host("1").raw.readIndex(enc.encode("A"));
    let delayed = net.run((m) => m.type !== "heartbeat-resp");
    net.host("1").raw.readIndex(enc.encode("A"));
    delayed = [...delayed, ...net.run((m) => m.type !== "heartbeat-resp")];
    assert.ok(delayed.filter((m) => m.type === "heartbeat-resp").length >= 4);
    assert.deepEqual(net.reads("1"), []);
    // 1 is cut off; 2 leads term 3 and commits a write. (3 restarts: no lease to wait out.)
    const cut = (m: Message): boolean => m.from !== nodeId("1") && m.to !== nodeId("1");
    net.host("3").restart();
    net.host("2").raw.campaign();
    net.run(cut);
    assert.equal(net.host("2").raw.role, "leader");
    net.host("2").raw.propose(enc.encode("w"));
    net.run(cut);
    const commitB = net.host("2").raw.commitIndex;
    assert.ok(commitB > commitA);
    // The stale leader 1 is asked read B; then the old answers arrive.
    assert.equal(net.host("1").raw.role, "leader");
    net.host("1").raw.readIndex(enc.encode("B"));
    net.run(() => false);
    for (const m of delayed) net.host(m.to).raw.step(m);
    net.settle();
    // A's reads are confirmed at the index they were taken at; B is not confirmed at all.
    assert.deepEqual(net.reads("1"), [`A@${commitA}`, `A@${commitA}`]);
  });
});

describe("raft pitfalls: ReadIndex and membership", () => {
  it("a read waiting for a quorum is confirmed when a removal shrinks the quorum (tikv/raft-rs test_read_when_quorum_becomes_less)", () => {
    const env = ledBy1("cluster voters=1,2,3,4");
    // The removal of 4 reaches 2 and 3, whose answers are on their way to 1.
    run(env, "conf-change 1 remove 4\nprocess-ready 1\ndeliver 2 3\nprocess-ready 2 3");
    // A read now: 3 and 4 are cut off, so only 1 and 2 confirm it, two of four voters. 1 steps
    // the answers to the removal and 2's confirmation together, before it applies the removal.
    run(env, "read-index 1 r\npartition 1 2 / 3 4\nprocess-ready 1\ndeliver 2\nprocess-ready 2");
    assert.doesNotMatch(run(env, "deliver 1"), /read/);
    // Applied, the removal leaves three voters, of which two confirmed: the read goes.
    const out = run(env, "process-ready 1\nprocess-ready 1");
    assert.match(out, /^1: conf voters=\(1 2 3\)$/m);
    assert.match(out, /^1: read "r" at 5$/m);
  });
});

describe("raft pitfalls: stale and lower-term messages", () => {
  for (const [opts, answered] of [
    ["", true],
    [" prevote=false", true],
    [" checkquorum=false", true],
    [" prevote=false checkquorum=false", false],
  ] as const) {
    it(`a heartbeat from a deposed leader${opts} ${answered ? "is answered with the new term, and it steps down" : "is ignored"}`, () => {
      const env = ledBy1(`cluster voters=1,2,3 election=10${opts}`);
      // 2 and 3 elect 2 in term 3 while 1 is cut off; 1 leads on (less than an election timeout).
      run(env, "isolate 1");
      elect2(env);
      assert.match(run(env, "status 2"), /^2: leader term=3 /);
      run(env, "heal");
      assert.match(run(env, "status 1"), /^1: leader term=2 /);
      const out = run(env, "tick 1\nprocess-ready 1\ndeliver 3\nprocess-ready 3");
      assert.match(out, /^1->3 heartbeat term=2 /m);
      if (answered) {
        assert.match(out, /^3->1 append-resp term=3 /m);
        run(env, "deliver 1");
        assert.match(run(env, "status 1"), /^1: follower term=3 /);
      } else {
        assert.doesNotMatch(out, /^3->1 /m);
        assert.match(run(env, "status 3"), /^3: follower term=3 lead=2 /);
      }
    });
  }
});

describe("raft pitfalls: a leader re-elected meets the answer to its heartbeat of an earlier term", () => {
  it("takes it for no acknowledgement: it does not stream its whole log to the follower", () => {
    const net = new Net(["1", "2", "3"]);
    const [one, two, three] = [nodeId("1"), nodeId("2"), nodeId("3")];
    net.host("1").raw.campaign();
    net.run();
    for (const d of ["a", "b", "c"]) net.host("1").raw.propose(enc.encode(d));
    net.run();
    // A heartbeat of term 2 to 3, delayed for long.
    net.host("1").raw.tick();
    const late = net.run((m) => !(m.type === "heartbeat" && m.to === three));
    assert.equal(late.length, 1);
    // Leadership goes to 2 (term 3) and back to 1 (term 4); 1's first appends to 3 are slow.
    net.host("1").raw.transferLeader(two);
    net.run();
    assert.equal(net.host("2").raw.role, "leader");
    net.host("2").raw.transferLeader(one);
    const slow = net.run((m) => !(m.from === one && m.to === three && m.type === "append"));
    assert.equal(net.host("1").raw.role, "leader");
    assert.equal(net.host("1").raw.term, 4);
    // The old heartbeat reaches 3, whose answer tells its term: 1 is in it already.
    net.host("3").raw.step(late[0] as Message);
    net.settle();
    const answer = net.queue.splice(0);
    assert.deepEqual(
      answer.map((m) => `${m.type} ${m.term}`),
      ["append-resp 4"],
    );
    net.host("1").raw.step(answer[0] as Message);
    net.settle();
    // 3 holds the whole log; nothing from index 1 on is sent to it again.
    const resent = net.queue.filter((m) => m.type === "append" && m.to === three);
    assert.deepEqual(
      resent.map((m) => (m.type === "append" ? m.prevIndex : -1)).filter((i) => i === 0),
      [],
    );
    assert.ok(slow.length > 0);
  });
});

describe("raft pitfalls: a follower's log against duplicated, reordered and stale messages", () => {
  const [a, b, c] = [nodeId("a"), nodeId("b"), nodeId("c")];

  /** b, a founding voter of (a, b, c) in term 1 that follows a, its founding (1..3) applied. */
  function follower(): { node: RawNode; storage: MemoryStorage; sent: Message[] } {
    const storage = MemoryStorage.bootstrap([a, b, c]);
    storage.setHardState({ ...storage.initialState().hardState, vote: a });
    const node = new RawNode({ id: b, storage, rng: seededRng(1), confIndex: logIndex(3) });
    const sent: Message[] = [];
    drain(node, storage, sent);
    return { node, storage, sent };
  }

  function drain(node: RawNode, storage: MemoryStorage, sent: Message[]): void {
    for (let i = 0; i < 100 && node.hasReady(); i++) {
      const rd = node.ready();
      if (rd.snapshot !== null) storage.applySnapshot(rd.snapshot);
      storage.append(rd.entries);
      if (rd.hardState !== null) storage.setHardState(rd.hardState);
      sent.push(...rd.messages);
      node.advance();
    }
  }

  function entries(from: number, to: number, t = 1): Entry[] {
    const out: Entry[] = [];
    for (let i = from; i <= to; i++)
      out.push({ index: logIndex(i), term: term(t), type: "normal", data: enc.encode(`e${i}`) });
    return out;
  }

  function append(prevIndex: number, prevTerm: number, ents: Entry[], commit: number): Message {
    return {
      type: "append",
      from: a,
      to: b,
      term: term(1),
      prevIndex: logIndex(prevIndex),
      prevTerm: term(prevTerm),
      entries: ents,
      commit: logIndex(commit),
      noReply: false,
    };
  }

  it("a duplicated, delayed append carrying a prefix of the log truncates nothing", () => {
    const { node, storage, sent } = follower();
    const first = append(3, 1, entries(4, 5), 3);
    node.step(first);
    node.step(append(5, 1, entries(6, 8), 7));
    drain(node, storage, sent);
    assert.equal(node.status().lastIndex, 8);
    assert.equal(node.status().commit, 7);
    sent.length = 0;
    // The first append again, overtaken by the second: entries 6..8 stay (the leader may count
    // them), and its answer names only what it vouched for.
    node.step(first);
    drain(node, storage, sent);
    assert.equal(node.status().lastIndex, 8);
    assert.equal(node.status().commit, 7);
    const resp = sent.find((m) => m.type === "append-resp");
    assert.ok(resp?.type === "append-resp" && !resp.reject && resp.index === 7);
  });

  it("a delayed append from before the commit index is answered with the commit index", () => {
    const { node, storage, sent } = follower();
    node.step(append(3, 1, entries(4, 6), 6));
    drain(node, storage, sent);
    sent.length = 0;
    // An append after entry 4, of a term the log does not hold there: taken, it would conflict
    // with committed entries (and a refusal would send the leader probing below its match).
    node.step(append(4, 1, entries(5, 5), 4));
    drain(node, storage, sent);
    assert.equal(node.status().lastIndex, 6);
    const resp = sent.find((m) => m.type === "append-resp");
    assert.ok(resp?.type === "append-resp" && !resp.reject && resp.index === 6);
  });

  it("a snapshot at or below the commit index is ignored, and one the log holds only commits", () => {
    const { node, storage, sent } = follower();
    node.step(append(3, 1, entries(4, 8), 5));
    drain(node, storage, sent);
    sent.length = 0;
    const snapshot = (index: number): Message => ({
      type: "snapshot",
      from: a,
      to: b,
      term: term(1),
      snapshot: {
        meta: { index: logIndex(index), term: term(1), conf: { voters: [a, b, c], learners: [] } },
        data: new Uint8Array(0),
      },
    });
    node.step(snapshot(4));
    drain(node, storage, sent);
    assert.equal(node.status().firstIndex, 1);
    assert.equal(node.status().lastIndex, 8);
    assert.equal(node.status().commit, 5);
    let resp = sent.find((m) => m.type === "append-resp");
    assert.ok(resp?.type === "append-resp" && !resp.reject && resp.index === 5);
    sent.length = 0;
    // The log holds 1/7: the snapshot tells it 7 is committed, and 8 stays.
    node.step(snapshot(7));
    drain(node, storage, sent);
    assert.equal(node.status().firstIndex, 1);
    assert.equal(node.status().lastIndex, 8);
    assert.equal(node.status().commit, 7);
    resp = sent.find((m) => m.type === "append-resp");
    assert.ok(resp?.type === "append-resp" && !resp.reject && resp.index === 7);
  });
});

describe("raft pitfalls: the leader's view of a follower after stale answers", () => {
  it("a stale refusal (answering an append older than an acknowledgement) moves nothing back", () => {
    const env = ledBy1("cluster voters=1,2,3 inflight=8");
    run(env, "propose 1 a\npropose 1 b\nstabilize");
    assert.match(run(env, "progress 1"), /^2: replicate match=6 next=7$/m);
    const leader = env.hosts.get(nodeId("1"))?.raw as RawNode;
    const refusal = (index: number): Message => ({
      type: "append-resp",
      from: nodeId("2"),
      to: nodeId("1"),
      term: term(2),
      index: logIndex(index),
      reject: true,
      hintIndex: logIndex(index - 1),
      hintTerm: term(1),
      lost: false,
    });
    // In replicate: a refusal of index 4 (≤ match 6) is old news.
    leader.step(refusal(4));
    assert.match(run(env, "progress 1"), /^2: replicate match=6 next=7$/m);
    // In probe: a refusal of anything but next - 1 answers an older probe.
    run(env, "report-unreachable 1 2");
    assert.match(run(env, "progress 1"), /^2: probe match=6 next=7$/m);
    leader.step(refusal(5));
    assert.match(run(env, "progress 1"), /^2: probe match=6 next=7$/m);
    run(env, "tick 1\nstabilize");
    assert.match(run(env, "progress 1"), /^2: replicate match=6 next=7$/m);
  });
});

describe("raft pitfalls: flow control", () => {
  it("a delayed refusal, its hint below the match, probes again from the match (tikv/raft-rs test_log_replication_with_reordered_message)", () => {
    const net = new Net(["1", "2"]);
    net.host("1").raw.campaign();
    net.run();
    const leader = net.host("1").raw;
    const take = (): Message[] => {
      net.settle();
      const q = net.queue;
      net.queue = [];
      return q;
    };
    leader.propose(enc.encode("a"));
    const [req1] = take();
    leader.propose(enc.encode("b"));
    const [req2] = take();
    assert.ok(req1?.type === "append" && req2?.type === "append");
    // 2 gets the second append first, and refuses it (a gap); then the first.
    const follower = net.host("2").raw;
    follower.step(req2);
    const [resp2] = take();
    assert.ok(resp2?.type === "append-resp" && resp2.reject);
    follower.step(req1);
    const [resp1] = take();
    assert.ok(resp1?.type === "append-resp" && !resp1.reject);
    leader.step(resp1);
    take();
    const match = leader.matchOf(nodeId("2")) as number;
    leader.reportUnreachable(nodeId("2"));
    // The refusal names next - 1, so it is not recognised as stale; its hint is below the match.
    leader.step({ ...resp2, index: logIndex(match), hintIndex: logIndex(0), hintTerm: term(0) });
    const resent = take().find((m) => m.type === "append");
    assert.ok(resent?.type === "append");
    assert.equal(resent.prevIndex, match);
  });

  it("the in-flight window's bytes start over with its messages on every state change (etcd-io/raft e419ba5)", () => {
    const inflights = new Inflights(10, 100);
    let index = 0;
    for (let round = 0; round < 20; round++) {
      inflights.reset();
      for (let i = 0; i < 3; i++) {
        assert.equal(inflights.isFull(), false);
        inflights.add(logIndex(++index), 30);
      }
      // Two of three are acknowledged; the last stays in flight when the window is reset.
      inflights.freeLE(logIndex(index - 1));
      assert.equal(inflights.count, 1);
      assert.equal(inflights.isFull(), false);
    }
    // Through Progress: probe after a refusal, then replicate again, with an empty window.
    const pr = new Progress(logIndex(1), 4, 100, true);
    pr.becomeReplicate();
    for (let i = 1; i <= 4; i++) pr.inflights.add(logIndex(i), 50);
    assert.equal(pr.isPaused(), true);
    assert.equal(pr.maybeDecrTo(logIndex(3), logIndex(0)), true);
    pr.becomeProbe();
    assert.equal(pr.next, 1);
    pr.becomeReplicate();
    assert.equal(pr.isPaused(), false);
    assert.equal(pr.inflights.count, 0);
  });
});

describe("raft pitfalls: configuration changes and leadership", () => {
  it("a new leader whose log holds an unapplied conf change takes no other until it applies it", () => {
    const env = ledBy1();
    // 1 proposes a change that reaches 2 only, and is cut off before it commits.
    run(env, "conf-change 1 add-learner 4\nprocess-ready 1\ndeliver 2\nprocess-ready 2\nisolate 1");
    elect2(env, false);
    // Pre-vote, then vote: 2 leads, and has sent nothing as leader yet.
    for (let i = 0; i < 2; i++) run(env, "process-ready 2\ndeliver 3\nprocess-ready 3\ndeliver 2");
    assert.match(run(env, "status 2"), /^2: leader term=3 .* last=6 /);
    // 2's log holds the change at 5, committed nowhere yet: a second one would make two at once.
    assert.match(
      run(env, "conf-change 2 remove 3"),
      /error .*configuration change at 5 not yet applied/,
    );
    run(env, "stabilize 2 3");
    assert.match(run(env, "status 2"), /applied=6 .* voters=\(1 2 3\) learners=\(4\)/);
    assert.match(run(env, "conf-change 2 remove 3"), /2: proposed 3\/7 conf remove 3/);
  });

  it("no conf change is taken while a leadership transfer runs", () => {
    const env = ledBy1();
    run(env, "isolate 3");
    assert.match(run(env, "transfer-leader 1 3"), /transfer to 3 requested/);
    assert.match(
      run(env, "conf-change 1 remove 2"),
      /error .*leadership transfer to 3 in progress/,
    );
  });

  it("a transfer to a member whose removal the leader applies is abandoned at once", () => {
    const env = ledBy1();
    run(env, "isolate 3\nconf-change 1 remove 3\ntransfer-leader 1 3\nstabilize 1 2");
    assert.match(run(env, "status 1"), /^1: leader term=2 .*voters=\(1 2\)/);
    // Not after an election timeout: proposals go through at once.
    assert.match(run(env, "propose 1 x"), /^1: proposed 2\/6$/);
  });
  it("no transfer goes to a member whose removal is in the leader's log, not yet applied", () => {
    const env = ledBy1("cluster voters=1,2,3,4,5");
    // The removal of 5 (at 7) reaches 5 alone: it is not committed, and 5 holds the whole log.
    run(env, "conf-change 1 remove 5\npartition 1 5 / 2 3 4\nstabilize 1 5");
    // Elected by its TimeoutNow, 5 would lead only until it applies its own removal, and the
    // group would wait an election timeout more for its next leader.
    assert.match(
      run(env, "transfer-leader 1 5"),
      /^1: error .*to 5: its removal from the voters at 7 not yet applied/,
    );
    assert.doesNotMatch(run(env, "stabilize 1 5"), /timeout-now/);
    // Demotion is removal from the voters as well.
    run(env, "heal\ntick 1\nstabilize");
    assert.match(run(env, "status 1"), /voters=\(1 2 3 4\)/);
    run(env, "conf-change 1 add-learner 4\npartition 1 4 / 2 3");
    run(env, "stabilize 1 4");
    assert.match(
      run(env, "transfer-leader 1 4"),
      /^1: error .*to 4: its removal from the voters at 8 not yet applied/,
    );
  });

  it("asking again for the same transfer does not extend it (etcd TestLeaderTransferSecondTransferToSameNode)", () => {
    const env = ledBy1();
    run(env, "isolate 3\ntransfer-leader 1 3\ntick 1 n=5\ntransfer-leader 1 3\ntick 1 n=4");
    assert.match(run(env, "propose 1 x"), /error .*leadership transfer to 3 in progress/);
    // The election timeout (10 ticks) counts from the first request.
    run(env, "tick 1");
    assert.match(run(env, "propose 1 x"), /^1: proposed 2\/5$/);
  });

  it("a transfer to a member that needs a snapshot completes once it installed it (etcd TestLeaderTransferAfterSnapshot)", () => {
    const env = ledBy1();
    run(env, "isolate 3\npropose 1 a\npropose 1 b\nstabilize 1 2\ncompact 1\nheal");
    run(env, "transfer-leader 1 3");
    const out = run(env, "stabilize");
    assert.match(out, /^1->3 snapshot /m);
    assert.match(out, /^1->3 timeout-now term=2$/m);
    assert.match(run(env, "status 3"), /^3: leader term=3 /);
  });
});

describe("raft pitfalls: a leader's log that cannot commit", () => {
  it("refuses proposals past maxUncommittedBytes, retryably, and takes them again once they commit (etcd's MaxUncommittedEntriesSize)", () => {
    // A proposal whose caller gave up leaves its entry in the log: a leader that kept its
    // quorum but could not commit grew its log at the clients' retry rate, without bound.
    const env = ledBy1("cluster voters=1,2,3 uncommitted=30");
    run(env, "isolate 1");
    const ten = "0123456789";
    assert.deepEqual(
      [1, 2, 3].map(() => run(env, `propose 1 ${ten}`)),
      ["1: proposed 2/5", "1: proposed 2/6", "1: proposed 2/7"],
    );
    assert.match(
      run(env, `propose 1 ${ten}`),
      /^1: error .*30 bytes of proposals not committed yet \(at most 30\)/,
    );
    run(env, "heal\nstabilize");
    assert.match(run(env, "status 1"), /^1: leader term=2 .*commit=7/);
    assert.equal(run(env, `propose 1 ${ten}`), "1: proposed 2/8", "taken again once committed");
  });

  it("takes a proposal larger than the limit when nothing is uncommitted, and no other after it", () => {
    const env = ledBy1("cluster voters=1,2,3 uncommitted=30");
    run(env, "isolate 1");
    assert.equal(run(env, `propose 1 ${"x".repeat(40)}`), "1: proposed 2/5");
    assert.match(run(env, "propose 1 y"), /^1: error .*40 bytes of proposals not committed yet/);
  });

  it("forgets what it counted when it steps down: leading again, it starts from nothing", () => {
    const env = ledBy1("cluster voters=1,2,3 uncommitted=30 prevote=false checkquorum=false");
    run(env, "isolate 1");
    run(env, `propose 1 ${"x".repeat(30)}`);
    assert.match(run(env, "propose 1 y"), /^1: error /);
    // Its appends are lost; 2 leads term 3 (1's entry is overwritten), then hands its
    // leadership back.
    run(env, "process-ready 1\nheal\ncampaign 2\nstabilize");
    assert.match(run(env, "status 1 2"), /^1: follower term=3 .*\n2: leader term=3 /);
    // The transfer stepped until 1 leads term 4, before it commits anything in it (a commit
    // would take the old count off too).
    run(env, "transfer-leader 2 1\nprocess-ready 2\ndeliver 1\nprocess-ready 1");
    run(env, "deliver 2\ndeliver 3\nprocess-ready 2 3\ndeliver 1");
    assert.match(run(env, "status 1"), /^1: leader term=4 .*commit=5 applied=5 last=6 /);
    assert.match(
      run(env, `propose 1 ${"z".repeat(30)}`),
      /^1: proposed 4\//,
      "taken: what it counted in term 2 is forgotten",
    );
  });
});
