import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { seededRng } from "../../src/common/index.ts";
import {
  decodeMessage,
  describeMessage,
  encodeMessage,
  incarnation,
  MAX_RELAYS,
  type Message,
  memberId,
  MembershipConfigError,
  Swim,
  type Update,
} from "../../src/membership/core/index.ts";
import { cluster, metaOf, TinyNet } from "./tiny-net.ts";

/** Hands `swim` a gossip message of `updates` from member `from` (at `from`.test:7447). */
function gossipFrom(swim: Swim, from: string): (updates: Update[]) => void {
  return (updates) =>
    swim.handle(`${from}.test:7447`, {
      type: "gossip",
      from: memberId(from),
      totalShards: 1024,
      gossip: updates,
    });
}

describe("SWIM core", () => {
  it("joins through a seed with one push-pull exchange", () => {
    const net = new TinyNet(1);
    net.add("a");
    net.add("b");
    net.get("b").join(["a.test:7447", "b.test:7447"]);
    net.flush();
    assert.equal(net.stateOf("a", "b"), "alive");
    assert.equal(net.stateOf("b", "a"), "alive");
    assert.deepEqual(net.kinds("a", "b"), ["joined"]);
    assert.equal(net.get("b").pushPullReplies, 1);
  });

  it("spreads a join to members the joiner never contacted", () => {
    const net = cluster(["a", "b", "c", "d", "e"]);
    net.add("f").join(["e.test:7447"]);
    net.tick(30);
    for (const n of ["a", "b", "c", "d", "e"]) assert.equal(net.stateOf(n, "f"), "alive", n);
  });

  it("declares a crashed member dead after the suspicion timeout, then forgets it", () => {
    const net = cluster(["a", "b", "c"]);
    net.crashed.add("c");
    net.tick(20);
    assert.ok(["suspect", "alive"].includes(net.stateOf("a", "c")));
    net.tick(60);
    assert.equal(net.stateOf("a", "c"), "dead");
    assert.equal(net.stateOf("b", "c"), "dead");
    assert.deepEqual(net.kinds("a", "c").slice(-2), ["suspect", "dead"]);
    assert.equal(net.get("a").liveCount, 2);
    net.tick(3000);
    assert.equal(net.stateOf("a", "c"), "unknown", "tombstone forgotten");
  });

  it("lets a suspected member refute with a higher incarnation", () => {
    const net = cluster(["a", "b", "c"]);
    // c is unreachable for a while (long enough to be suspected, not to be declared dead).
    net.drop = (from, to) => from === "c" || to === "c";
    for (let i = 0; i < 60 && net.stateOf("a", "c") !== "suspect"; i++) net.tick();
    assert.equal(net.stateOf("a", "c"), "suspect");
    const before = net.get("c").incarnation;
    net.drop = () => false;
    net.tick(30);
    assert.ok(net.get("c").incarnation > before, "c raised its incarnation");
    assert.equal(net.stateOf("a", "c"), "alive");
    assert.equal(net.stateOf("b", "c"), "alive");
    assert.ok(net.kinds("a", "c").includes("alive"));
    assert.ok(!net.kinds("a", "c").includes("dead"));
  });

  it("probes indirectly: a member unreachable from one peer only is never suspected", () => {
    const net = cluster(["a", "b", "c", "d"]);
    net.drop = (from, to) => (from === "a" && to === "d") || (from === "d" && to === "a");
    net.tick(600);
    for (const n of ["a", "b", "c"]) assert.equal(net.stateOf(n, "d"), "alive", n);
    assert.ok(!net.kinds("a", "d").includes("suspect"));
  });

  it("announces a graceful leave", () => {
    const net = cluster(["a", "b", "c"]);
    net.get("c").leave();
    net.flush();
    net.crashed.add("c");
    assert.equal(net.stateOf("a", "c"), "left");
    assert.equal(net.stateOf("b", "c"), "left");
    net.tick(100);
    assert.ok(!net.kinds("a", "c").includes("dead"));
  });

  it("a restarted member outbids its own tombstone and is alive again", () => {
    const net = cluster(["a", "b", "c"]);
    net.crashed.add("c");
    net.tick(100);
    assert.equal(net.stateOf("a", "c"), "dead");
    const deadAt = net.get("a").member(memberId("c"))?.incarnation ?? -1;
    net.add("c").join(["a.test:7447"]);
    net.tick(30);
    assert.equal(net.stateOf("a", "c"), "alive");
    assert.equal(net.stateOf("b", "c"), "alive");
    assert.ok(net.get("c").incarnation > deadAt);
    assert.deepEqual(net.kinds("b", "c").slice(-1), ["alive"]);
  });

  it("heals a partition: both sides refute and reconverge", () => {
    const net = cluster(["a", "b", "c", "d"]);
    const side = (n: string): number => (n === "a" || n === "b" ? 0 : 1);
    net.drop = (from, to) => side(from) !== side(to);
    net.tick(400);
    assert.equal(net.stateOf("a", "c"), "dead");
    assert.equal(net.stateOf("c", "a"), "dead");
    net.drop = () => false;
    net.tick(100);
    for (const x of ["a", "b", "c", "d"]) {
      for (const y of ["a", "b", "c", "d"]) {
        if (x !== y) assert.equal(net.stateOf(x, y), "alive", `${x} sees ${y}`);
      }
    }
  });

  it("refuses a node with another total_shards on both sides", () => {
    const net = new TinyNet(3);
    net.add("a", 1024);
    net.add("b", 128).join(["a.test:7447"]);
    net.flush();
    net.tick(20);
    assert.equal(net.stateOf("a", "b"), "unknown");
    assert.equal(net.stateOf("b", "a"), "unknown");
    const [ours] = net.errors.get("a") ?? [];
    const [theirs] = net.errors.get("b") ?? [];
    assert.equal(ours?.code, "CAIRN_ERR_SHARD_COUNT_MISMATCH");
    assert.equal(theirs?.code, "CAIRN_ERR_SHARD_COUNT_MISMATCH");
    assert.match(theirs?.message ?? "", /this node has 128, a at a\.test:7447 has 1024/);
  });

  it("reports two live members with one id, once each member", () => {
    const net = new TinyNet(4);
    net.add("a");
    net.add("b", 1024, "dup").join(["a.test:7447"]);
    net.add("c", 1024, "dup").join(["a.test:7447", "d.test:7447"]);
    net.add("d").join(["a.test:7447"]);
    net.flush();
    // Each refutes the other's claim as the drivers' periodic exchanges with the seeds carry it.
    for (let round = 0; round < 3; round++) {
      for (const name of ["b", "c"]) net.get(name).pushPull("a.test:7447");
      net.flush();
      net.tick(10);
    }
    const reports = [...net.errors].flatMap(([name, errors]) =>
      errors.filter((e) => e.code === "CAIRN_ERR_DUPLICATE_NODE_ID").map((e) => ({ name, e })),
    );
    assert.ok(reports.length > 0, "nobody reported the duplicate id");
    for (const { name, e } of reports) {
      assert.match(
        e.message,
        /node id dup is used by two live nodes, (one|this one) at [bc]\.test:7447 and another at [bc]\.test:7447/,
      );
      // Once per member.
      assert.equal(reports.filter((r) => r.name === name).length, 1, name);
    }
  });

  it("a member back at an address it left long ago is no duplicate", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    const gossip = gossipFrom(swim, "z");
    const at = (host: string, inc: number): Update => ({
      kind: "alive",
      incarnation: incarnation(inc),
      meta: { ...metaOf("x"), rpcAddr: `${host}:7447` },
    });
    const duplicates = (): string[] =>
      swim
        .takeReady()
        .errors.filter((e) => e.code === "CAIRN_ERR_DUPLICATE_NODE_ID")
        .map((e) => e.message);
    // x restarts at another address (a pod given a new IP) and outbids its old record.
    gossip([at("10.0.0.1", 0)]);
    gossip([at("10.0.0.2", 1)]);
    assert.deepEqual(duplicates(), []);
    // Ten minutes on, alive all along (its pings answered), it restarts again and is given its
    // first address back: a move, as the one before, not a second node flipping it back.
    for (let t = 0; t < 6000; t++) {
      swim.tick();
      for (const out of swim.takeReady().messages) {
        const m = out.message;
        if (m.type !== "ping") continue;
        swim.handle(out.to, {
          type: "ack",
          from: m.target,
          totalShards: 1024,
          seq: m.seq,
          gossip: [],
        });
      }
    }
    assert.equal(swim.member(memberId("x"))?.state, "alive");
    gossip([at("10.0.0.1", 2)]);
    assert.deepEqual(duplicates(), []);
    assert.equal(swim.member(memberId("x"))?.meta.rpcAddr, "10.0.0.1:7447");
  });

  it("takes a record of its own id at another address, refuted once, for a previous life", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    swim.handle("b.test:7447", {
      type: "push-pull",
      from: memberId("b"),
      totalShards: 1024,
      reply: true,
      join: false,
      first: true,
      records: [
        {
          meta: { ...metaOf("old"), id: memberId("a") },
          state: "alive",
          incarnation: incarnation(3),
        },
      ],
    });
    assert.deepEqual(swim.takeReady().errors, []);
  });

  it("does not answer a ping meant for another member id", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    swim.handle("b.test:7447", {
      type: "ping",
      from: memberId("b"),
      totalShards: 1024,
      seq: 1,
      target: memberId("old-owner"),
      gossip: [],
    });
    const acks = () => swim.takeReady().messages.filter((o) => o.message.type === "ack");
    assert.deepEqual(acks(), []);
    swim.handle("b.test:7447", {
      type: "ping",
      from: memberId("b"),
      totalShards: 1024,
      seq: 2,
      target: memberId("a"),
      gossip: [],
    });
    const [ack] = acks();
    assert.equal(ack?.to, "b.test:7447");
    assert.equal(describeMessage(ack?.message ?? assert.fail()), "ack a seq=2");
  });

  it("introduces itself, once, to a sender it does not know", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    const ping = (seq: number): Message => ({
      type: "ping",
      from: memberId("z"),
      totalShards: 1024,
      seq,
      target: memberId("a"),
      gossip: [],
    });
    const types = () => swim.takeReady().messages.map((o) => `${o.message.type}→${o.to}`);
    swim.handle("z.test:7447", ping(1));
    assert.deepEqual(types(), ["push-pull→z.test:7447", "ack→z.test:7447"]);
    swim.handle("z.test:7447", ping(2));
    assert.deepEqual(types(), ["ack→z.test:7447"], "not again within five probe periods");
  });

  it("keeps incarnations monotonic against stale gossip", () => {
    const net = cluster(["a", "b"]);
    const a = net.get("a");
    const alive = (inc: number) => ({
      kind: "alive" as const,
      incarnation: incarnation(inc),
      meta: metaOf("b"),
    });
    const ping = (gossip: ReturnType<typeof alive>[]) => ({
      type: "ping" as const,
      from: memberId("z"),
      totalShards: 1024,
      seq: 1,
      target: memberId("a"),
      gossip,
    });
    a.handle("z.test:7447", ping([alive(5)]));
    a.handle("z.test:7447", ping([alive(2)]));
    assert.equal(a.member(memberId("b"))?.incarnation, 5);
    a.handle("z.test:7447", {
      ...ping([]),
      gossip: [
        { kind: "dead", id: memberId("b"), incarnation: incarnation(4), from: memberId("z") },
      ],
    });
    assert.equal(a.member(memberId("b"))?.state, "alive", "dead for an older incarnation ignored");
  });

  it("refuses wildcard or malformed advertised addresses and bad settings", () => {
    const make = (rpcAddr: string) => () =>
      new Swim({ self: { ...metaOf("a"), rpcAddr }, rng: seededRng(1) });
    for (const bad of ["0.0.0.0:7447", "[::]:7447", ":7447", "host", "host:0", "host:70000"]) {
      assert.throws(make(bad), MembershipConfigError, bad);
    }
    assert.doesNotThrow(make("[::1]:7447"));
    assert.doesNotThrow(make("db-1.example:7447"));
    assert.throws(
      () => new Swim({ self: metaOf("a"), rng: seededRng(1), config: { ackTimeoutTicks: 10 } }),
      MembershipConfigError,
    );
  });
});

describe("SWIM core against a flood (unauthenticated UDP)", () => {
  const alive = (id: string, inc = 0): Update => ({
    kind: "alive",
    incarnation: incarnation(inc),
    meta: metaOf(id),
  });

  it("remembers at most maxMembers members: updates naming more are ignored and counted", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1), config: { maxMembers: 50 } });
    // 5,000 made-up members, in gossip datagrams of 20 updates.
    for (let d = 0; d < 250; d++) {
      swim.handle("x.test:7447", {
        type: "gossip",
        from: memberId("x"),
        totalShards: 1024,
        gossip: Array.from({ length: 20 }, (_, i) => alive(`fake-${d * 20 + i}`)),
      });
    }
    swim.takeReady();
    assert.equal(swim.members().length, 51, "itself and 50 others");
    assert.equal(swim.refusedMembers, 5000 - 50);
    // Members it remembers still change: fake-0 refutes at a higher incarnation.
    swim.handle("x.test:7447", {
      type: "gossip",
      from: memberId("x"),
      totalShards: 1024,
      gossip: [alive("fake-0", 7)],
    });
    assert.equal(swim.member(memberId("fake-0"))?.incarnation, 7);
  });

  it("a full table makes room for the cluster's members: the longest dead fake goes first, then a live one", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1), config: { maxMembers: 50 } });
    const gossip = gossipFrom(swim, "x");
    gossip(Array.from({ length: 60 }, (_, i) => alive(`fake-${i}`)));
    // Two of the fakes die (fake-3 first), as fakes that never answer do.
    gossip([
      { kind: "dead", id: memberId("fake-3"), incarnation: incarnation(0), from: memberId("x") },
    ]);
    swim.tick();
    gossip([
      { kind: "dead", id: memberId("fake-7"), incarnation: incarnation(0), from: memberId("x") },
    ]);
    swim.takeReady();
    assert.equal(swim.members().length, 51);

    // Before the node's meta state names it, a real member is kept out like any other.
    gossip([alive("n5")]);
    assert.equal(swim.member(memberId("n5")), undefined);
    const refused = swim.refusedMembers;

    swim.reserve(new Set(["n2", "n5", "n6"]));
    gossip([alive("n5")]);
    assert.equal(swim.member(memberId("n5"))?.state, "alive", "n5 takes a fake's place");
    assert.equal(swim.member(memberId("fake-3")), undefined, "the longest dead fake went");
    assert.ok(swim.member(memberId("fake-7")) !== undefined);
    gossip([alive("n6")]);
    assert.equal(swim.member(memberId("fake-7")), undefined, "then the other dead one");
    assert.equal(swim.members().length, 51, "still at most maxMembers others");
    assert.equal(swim.refusedMembers, refused);

    // No dead fake left: a live one goes, reported dead; a new fake is still refused.
    swim.reserve(new Set(["n2", "n5", "n6", "n7"]));
    gossip([alive("n7")]);
    assert.equal(swim.member(memberId("n7"))?.state, "alive");
    const events = swim.takeReady().events;
    assert.equal(events.filter((e) => e.kind === "dead").length, 1);
    gossip([alive("fake-999")]);
    assert.equal(swim.member(memberId("fake-999")), undefined);
    assert.equal(swim.refusedMembers, refused + 1);
    assert.equal(swim.members().length, 51);
  });

  it("forgets the queued updates of a member it forgets: the queue stays within maxMembers", () => {
    const swim = new Swim({
      self: metaOf("a"),
      rng: seededRng(1),
      config: { maxMembers: 10, tombstoneTicks: 20 },
    });
    const gossip = gossipFrom(swim, "x");
    // Five waves of ten made-up members, declared dead and forgotten while a has no live peer
    // (nothing it queues about them goes out).
    for (let wave = 0; wave < 5; wave++) {
      const ids = Array.from({ length: 10 }, (_, i) => `fake-${wave}-${i}`);
      gossip(ids.map((id) => alive(id)));
      gossip(
        ids.map((id) => ({
          kind: "dead" as const,
          id: memberId(id),
          incarnation: incarnation(0),
          from: memberId("x"),
        })),
      );
      for (let t = 0; t < 20; t++) swim.tick();
      assert.equal(swim.members().length, 1, `wave ${wave} forgotten`);
    }
    swim.takeReady();
    // A real peer appears: what a gossips to it is about members it remembers, not 50 others.
    gossip([alive("b")]);
    const subjects = new Set<string>();
    for (let t = 0; t < 40; t++) {
      swim.tick();
      for (const out of swim.takeReady().messages) {
        const m = out.message;
        if (m.type === "push-pull" || m.type === "refuse") continue;
        for (const u of m.gossip) subjects.add(u.kind === "alive" ? u.meta.id : u.id);
      }
    }
    const forgotten = [...subjects].filter((id) => id.startsWith("fake-"));
    assert.deepEqual(forgotten, [], "updates about forgotten members still sent");
  });

  it("a member forgotten is new when it comes back: a duplicate id in its new life is reported again", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1), config: { tombstoneTicks: 20 } });
    const gossip = gossipFrom(swim, "z");
    const at = (host: string, inc: number): Update => ({
      kind: "alive",
      incarnation: incarnation(inc),
      meta: { ...metaOf("x"), rpcAddr: `${host}:7447` },
    });
    const reports = (): number =>
      swim.takeReady().errors.filter((e) => e.code === "CAIRN_ERR_DUPLICATE_NODE_ID").length;
    // Two live nodes claim x: its address flips back to the one it had.
    const flips = (from: number): void => {
      gossip([at("x1.test", from)]);
      gossip([at("x2.test", from + 1)]);
      gossip([at("x1.test", from + 2)]);
    };
    flips(0);
    assert.equal(reports(), 1);
    // x dies and is forgotten (what a flood of made-up ids does too: each one remembered for good).
    gossip([{ kind: "dead", id: memberId("x"), incarnation: incarnation(2), from: memberId("z") }]);
    for (let t = 0; t < 20; t++) swim.tick();
    assert.equal(swim.member(memberId("x")), undefined);
    swim.takeReady();
    // The new life outbids the incarnation x was forgotten at (an alive at 2 would be old news).
    flips(3);
    assert.equal(reports(), 1, "the new life's duplicate is reported");
  });

  it(`relays at most ${MAX_RELAYS} ping-reqs at once`, () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    const pings = (): number =>
      swim.takeReady().messages.filter((o) => o.message.type === "ping").length;
    const flood = (from: number): void => {
      for (let i = from; i < from + 1000; i++) {
        swim.handle("x.test:7447", {
          type: "ping-req",
          from: memberId("x"),
          totalShards: 1024,
          seq: i,
          target: memberId(`victim-${i}`),
          // IP literals: a host name is relayed to only as the target's address in the table.
          targetAddr: `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:7447`,
          gossip: [],
        });
      }
    };
    flood(0);
    assert.equal(pings(), MAX_RELAYS, "one ping a relay, the rest not relayed");
    // Relays expire after a probe period (no ack came): then there is room again.
    for (let t = 0; t < 10; t++) swim.tick();
    swim.takeReady();
    flood(1000);
    assert.equal(pings(), MAX_RELAYS);
  });

  it("a member declared dead and alive again and again takes one turn a round: every other member is still probed", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    const gossip = gossipFrom(swim, "x");
    gossip([alive("b"), alive("c"), alive("f")]);
    // The sender runs f (and answers its pings): it declares f dead and alive again 5,000 times,
    // ten times a datagram, each time a step above the last (far within MAX_INCARNATION_STEP).
    // Each revival put f in the probe order once more, the order grew with every datagram, and
    // b and c waited behind thousands of turns of f: a crash of theirs went unseen here.
    let inc = 0;
    for (let d = 0; d < 500; d++) {
      const updates: Update[] = [];
      for (let i = 0; i < 10; i++) {
        updates.push({
          kind: "dead",
          id: memberId("f"),
          incarnation: incarnation(inc),
          from: memberId("x"),
        });
        inc += 1;
        updates.push(alive("f", inc));
      }
      gossip(updates);
    }
    swim.takeReady();
    assert.equal(swim.member(memberId("f"))?.state, "alive");
    // Two rounds of three members: each is probed, its ping answered.
    const probed = new Map<string, number>();
    for (let t = 0; t < 6 * 10; t++) {
      swim.tick();
      for (const out of swim.takeReady().messages) {
        const m = out.message;
        if (m.type !== "ping") continue;
        probed.set(m.target, (probed.get(m.target) ?? 0) + 1);
        swim.handle(out.to, {
          type: "ack",
          from: m.target,
          totalShards: 1024,
          seq: m.seq,
          gossip: [],
        });
      }
    }
    assert.deepEqual([...probed.keys()].sort(), ["b", "c", "f"], "members probed in six periods");
    assert.ok((probed.get("f") ?? 0) <= 3, `f probed ${probed.get("f")} times of 6`);
  });
});

/** A core whose probes are all answered, fed with hand-made datagrams from member `z`. */
function lone(members: string[]): { swim: Swim; tick: (n: number) => void } {
  const swim = new Swim({ self: metaOf("a"), rng: seededRng(5) });
  swim.handle("z.test:7447", {
    type: "gossip",
    from: memberId("z"),
    totalShards: 1024,
    gossip: members.map((m) => ({ kind: "alive", incarnation: incarnation(0), meta: metaOf(m) })),
  });
  const answer = (): void => {
    for (const out of swim.takeReady().messages) {
      const m = out.message;
      if (m.type === "ping") {
        swim.handle(out.to, {
          type: "ack",
          from: m.target,
          totalShards: 1024,
          seq: m.seq,
          gossip: [],
        });
      }
    }
  };
  answer();
  return {
    swim,
    tick: (n) => {
      for (let i = 0; i < n; i++) {
        swim.tick();
        answer();
      }
    },
  };
}

const from = (name: string, gossip: Update[]): Message => ({
  type: "gossip",
  from: memberId(name),
  totalShards: 1024,
  gossip,
});
const suspect = (id: string, inc: number, by: string): Update => ({
  kind: "suspect",
  id: memberId(id),
  incarnation: incarnation(inc),
  from: memberId(by),
});

describe("SWIM core: suspicion confirmations and corrections", () => {
  it("push-pull records do not count as confirmations; independent suspicions do", () => {
    const { swim, tick } = lone(["b", "c", "d", "e", "f"]);
    swim.handle("c.test:7447", from("c", [suspect("b", 0, "c")]));
    assert.equal(swim.member(memberId("b"))?.state, "suspect");
    for (const peer of ["d", "e"]) {
      swim.handle(`${peer}.test:7447`, {
        type: "push-pull",
        from: memberId(peer),
        totalShards: 1024,
        reply: true,
        join: false,
        first: true,
        records: [{ meta: metaOf("b"), state: "suspect", incarnation: incarnation(0) }],
      });
    }
    tick(60); // past the 4 s minimum: only confirmations would have brought the timeout there
    assert.equal(swim.member(memberId("b"))?.state, "suspect");
    swim.handle("d.test:7447", from("d", [suspect("b", 0, "d")]));
    swim.handle("e.test:7447", from("e", [suspect("b", 0, "e")]));
    tick(1);
    assert.equal(swim.member(memberId("b"))?.state, "dead", "two confirmations: minimum timeout");
  });

  it("answers an outdated suspicion of itself without raising its incarnation again", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    swim.handle("z.test:7447", from("z", [suspect("a", 0, "z")]));
    assert.equal(swim.incarnation, 1, "a current suspicion is refuted");
    swim.takeReady();
    swim.handle("z.test:7447", {
      type: "ping",
      from: memberId("z"),
      totalShards: 1024,
      seq: 9,
      target: memberId("a"),
      gossip: [suspect("a", 0, "y")],
    });
    assert.equal(swim.incarnation, 1, "an outdated one is not refuted again");
    const [ack] = swim.takeReady().messages;
    assert.equal(
      describeMessage(ack?.message ?? assert.fail()),
      "ack a seq=9 +[alive(a@1 a.test:7447)]",
    );
  });

  it("gossips an open suspicion again after two probe periods", () => {
    const { swim } = lone(["b", "c", "d", "e", "f"]);
    swim.handle("c.test:7447", from("c", [suspect("b", 0, "c")]));
    const carried = (): boolean =>
      swim
        .takeReady()
        .messages.some((o) => describeMessage(o.message).includes("suspect(b@0 by c)"));
    for (let i = 0; i < 12; i++) swim.tick(); // the first announcement's sends are spent
    carried();
    let again = false;
    for (let i = 0; i < 20 && !again; i++) {
      swim.tick();
      again = carried();
    }
    assert.ok(again, "re-announced");
    assert.equal(swim.member(memberId("b"))?.state, "suspect");
  });

  it("corrects a sender that spreads an outdated suspicion of a third member", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    swim.handle(
      "z.test:7447",
      from("z", [{ kind: "alive", incarnation: incarnation(3), meta: metaOf("b") }]),
    );
    swim.takeReady();
    swim.handle("y.test:7447", from("y", [suspect("b", 1, "y")]));
    assert.equal(swim.member(memberId("b"))?.state, "alive");
    const replies = swim
      .takeReady()
      .messages.filter((o) => o.to === "y.test:7447" && o.message.type === "gossip");
    assert.deepEqual(
      replies.map((o) => describeMessage(o.message)),
      ["gossip a +[alive(b@3 b.test:7447)]"],
    );
  });
});

describe("SWIM core against forged incarnations", () => {
  const MAX = 0xffff_ffff;
  /** Hands member `to` of `net` a gossip datagram of `updates` from a sender that is no member. */
  const forge = (net: TinyNet, to: string, updates: Update[]): void => {
    net.get(to).handle("z.test:7447", from("z", updates));
    net.flush();
  };
  const dead = (id: string, inc: number): Update => ({
    kind: "dead",
    id: memberId(id),
    incarnation: incarnation(inc),
    from: memberId("z"),
  });

  it("a claim at the largest incarnation does not leave a live member unable to refute", () => {
    const net = cluster(["a", "b", "c"]);
    // a hears it is suspected at 2^32 - 1, then b that a is dead at 2^32 - 1, then a again.
    forge(net, "a", [suspect("a", MAX, "z")]);
    forge(net, "b", [dead("a", MAX)]);
    forge(net, "a", [suspect("a", MAX, "z")]);
    // And c that a is alive at 2^32 - 1 elsewhere.
    forge(net, "c", [
      {
        kind: "alive",
        incarnation: incarnation(MAX),
        meta: { ...metaOf("a"), rpcAddr: "z.test:7447" },
      },
    ]);
    net.tick(100);
    assert.ok(net.get("a").incarnation < MAX, `a at ${net.get("a").incarnation}`);
    for (const o of ["b", "c"]) assert.equal(net.stateOf(o, "a"), "alive", `${o} sees a`);
    // A true suspicion later (a cut off for a while) is refuted as ever.
    net.drop = (f, t) => f === "a" || t === "a";
    for (let i = 0; i < 60 && net.stateOf("b", "a") !== "suspect"; i++) net.tick();
    assert.equal(net.stateOf("b", "a"), "suspect");
    net.drop = () => false;
    net.tick(30);
    for (const o of ["b", "c"]) assert.equal(net.stateOf(o, "a"), "alive", `${o} sees a again`);
  });

  it("a new life outbids a previous one far above it, a step every ten probe periods", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    const claim = (): void => swim.handle("z.test:7447", from("z", [suspect("a", 150_000, "z")]));
    claim();
    assert.equal(swim.incarnation, 65_536);
    claim();
    assert.equal(swim.incarnation, 65_536, "one step a period");
    for (let i = 0; i < 100; i++) swim.tick();
    claim();
    assert.equal(swim.incarnation, 131_072);
    for (let i = 0; i < 100; i++) swim.tick();
    claim();
    assert.equal(swim.incarnation, 150_001, "outbid");
  });
});

describe("SWIM core against replayed datagrams", () => {
  it("a member's recorded announcement, replayed after its tombstone is forgotten, does not bring it back", () => {
    const net = cluster(["a", "b"]);
    // c joins through a; its push-pull (alive(c@0) and its view) is recorded on the way, as an
    // on-path host records a sealed datagram: sealed or not, it opens to these same bytes.
    net.add("c").join(["a.test:7447"]);
    const recorded = net
      .get("c")
      .takeReady()
      .messages.map((o) => encodeMessage(o.message));
    for (const bytes of recorded) {
      const d = decodeMessage(bytes);
      assert.ok(d.ok);
      net.get("a").handle("c.test:7447", d.message);
    }
    net.flush();
    net.tick(50);
    assert.equal(net.stateOf("a", "c"), "alive");
    // c leaves for good; a and b forget it after tombstoneTicks.
    net.get("c").leave();
    net.flush();
    net.crashed.add("c");
    net.tick(3010);
    assert.equal(net.stateOf("a", "c"), "unknown", "forgotten");
    const before = net.kinds("a", "c").length;
    for (const bytes of recorded) {
      const d = decodeMessage(bytes);
      assert.ok(d.ok);
      net.get("a").handle("c.test:7447", d.message);
    }
    net.flush();
    net.tick(5);
    for (const o of ["a", "b"]) {
      assert.ok(
        !["alive", "suspect"].includes(net.stateOf(o, "c")),
        `${o} has c ${net.stateOf(o, "c")}`,
      );
    }
    assert.deepEqual(net.kinds("a", "c").slice(before), [], "no joined or alive event for c");
    // A new life of c (at incarnation 0 again) outbids what a remembers and is alive everywhere.
    net.add("c").join(["a.test:7447"]);
    net.tick(30);
    for (const o of ["a", "b"])
      assert.equal(net.stateOf(o, "c"), "alive", `${o} sees c's new life`);
    assert.ok(net.get("c").incarnation > 0);
  });

  it("a partition healed after both sides forgot each other still reconverges", () => {
    const names = ["a", "b", "c", "d"];
    const net = cluster(names);
    const side = (n: string): number => (n === "a" || n === "b" ? 0 : 1);
    net.drop = (from, to) => side(from) !== side(to);
    net.tick(3500);
    assert.equal(net.stateOf("a", "c"), "unknown", "forgotten");
    net.drop = () => false;
    // The driver's periodic push-pull with a seed that is not a live member (a is the seed).
    net.get("c").pushPull("a.test:7447");
    net.get("d").pushPull("a.test:7447");
    net.tick(100);
    for (const x of names) {
      for (const y of names)
        if (x !== y) assert.equal(net.stateOf(x, y), "alive", `${x} sees ${y}`);
    }
  });
});
