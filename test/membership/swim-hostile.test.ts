/**
 * The SWIM core against a sender that forges datagrams (cleartext gossip: anyone who reaches the
 * port). What one datagram, or a stream of them, must not achieve: leave a member nothing to
 * outbid with, turn this member into a reflector of its full state, aim its pings at names, grow
 * a table without bound, switch introductions off, or end a join with a refusal that refuses
 * nothing.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { seededRng } from "../../src/common/index.ts";
import {
  describeMessage,
  incarnation,
  type Message,
  memberId,
  type MemberRecord,
  Swim,
  type Update,
} from "../../src/membership/core/index.ts";
import {
  MAX_CLAIMS,
  MAX_INTRODUCED,
  MAX_STATE_SOURCES,
  STATE_DATAGRAMS_BURST,
  STATE_DATAGRAMS_PER_PERIOD,
  STATE_SENDS_PER_SOURCE,
} from "../../src/membership/core/swim.ts";
import { INCARNATION_STEP_PERIODS, MAX_INCARNATION_STEP } from "../../src/membership/core/types.ts";
import { cluster, metaOf, TinyNet } from "./tiny-net.ts";

const MAX = 0xffff_ffff;
const PERIOD = 10; // probe period in ticks (the default)

const gossip = (from: string, updates: Update[]): Message => ({
  type: "gossip",
  from: memberId(from),
  totalShards: 1024,
  gossip: updates,
});
const suspect = (id: string, inc: number, by = "z"): Update => ({
  kind: "suspect",
  id: memberId(id),
  incarnation: incarnation(inc),
  from: memberId(by),
});
const pushPull = (from: string, records: MemberRecord[], reply = false): Message => ({
  type: "push-pull",
  from: memberId(from),
  totalShards: 1024,
  reply,
  join: false,
  first: true,
  records,
});

/** Hands each observer the walk: suspect(member) a step above the last, 120 a datagram. */
function walk(net: TinyNet, observers: string[], member: string): number {
  let datagrams = 0;
  for (const o of observers) {
    let inc = 0;
    while (inc < MAX) {
      const updates: Update[] = [];
      while (inc < MAX && updates.length < 120) {
        inc = Math.min(MAX, inc + MAX_INCARNATION_STEP);
        updates.push(suspect(member, inc));
      }
      if (inc === MAX) {
        updates.push({
          kind: "dead",
          id: memberId(member),
          incarnation: incarnation(MAX),
          from: memberId("z"),
        });
      }
      net.get(o).handle("z.test:7447", gossip("z", updates));
      datagrams += 1;
    }
  }
  net.flush();
  return datagrams;
}

describe("SWIM core against forged incarnations, walked or first seen", () => {
  it("a record walked up a step a datagram rises a step a period, and the member stays alive", () => {
    const net = cluster(["a", "b", "c"]);
    const datagrams = walk(net, ["b", "c"], "a");
    assert.ok(datagrams > 1000, `${datagrams} datagrams`);
    for (const o of ["b", "c"]) {
      const inc = net.get(o).member(memberId("a"))?.incarnation ?? MAX;
      assert.ok(inc <= MAX_INCARNATION_STEP + 1, `${o} holds a at ${inc} right after`);
    }
    net.tick(600);
    for (const o of ["b", "c"]) assert.equal(net.stateOf(o, "a"), "alive", `${o} sees a`);
    assert.ok(
      net.get("a").incarnation <= 2 * MAX_INCARNATION_STEP + 1,
      `a at ${net.get("a").incarnation}`,
    );
    // The next period, the walk gets one more step, no more.
    net.tick(INCARNATION_STEP_PERIODS * PERIOD);
    const held = net.get("b").member(memberId("a"))?.incarnation ?? MAX;
    walk(net, ["b"], "a");
    const now = net.get("b").member(memberId("a"))?.incarnation ?? MAX;
    assert.ok(now <= held + MAX_INCARNATION_STEP + 1, `b: a from ${held} to ${now}`);
  });

  it("a member not known yet is taken at most a step above 0: one forged alive at 2^32 − 1 to a node just started is outbid", () => {
    const net = cluster(["n1", "n2", "n3"]);
    // n4 has just started: one forged alive(n1@2^32 − 1) at the forger's address, before its
    // join is answered, made it keep n1 there for good (dead once the address went quiet).
    const n4 = net.add("n4");
    const forged = (id: string): MemberRecord => ({
      meta: { ...metaOf(id), rpcAddr: "z.test:7447" },
      state: "alive",
      incarnation: incarnation(MAX),
    });
    n4.handle("z.test:7447", gossip("z", [{ kind: "alive", ...forged("n1") }]));
    // Or in a push-pull record (an answer nobody asked for, here).
    n4.handle("z.test:7447", pushPull("z", [forged("n2")], true));
    for (const m of ["n1", "n2"]) {
      const inc = n4.member(memberId(m))?.incarnation ?? MAX;
      assert.ok(inc <= MAX_INCARNATION_STEP, `n4 holds ${m} at ${inc}`);
    }
    n4.join(["n3.test:7447"]);
    net.tick(6000);
    for (const o of ["n1", "n2", "n3", "n4"]) {
      for (const m of ["n1", "n2", "n3", "n4"]) {
        if (o === m) continue;
        const v = net.get(o).member(memberId(m));
        assert.equal(v?.state, "alive", `${o} sees ${m}`);
        assert.equal(v?.meta.rpcAddr, `${m}.test:7447`, `${o} has ${m}'s address`);
      }
    }
    for (const m of ["n1", "n2"]) {
      assert.ok(
        net.get(m).incarnation < 3 * MAX_INCARNATION_STEP,
        `${m} at ${net.get(m).incarnation}`,
      );
    }
  });

  it("a member further ahead than a step (an old forgery's mark) is learnt at once, and its record catches up a step a period", () => {
    const net = new TinyNet(3);
    net.add("a");
    net.add("b", 1024, "b", 200_000);
    net.get("b").join(["a.test:7447"]);
    net.flush();
    assert.equal(net.stateOf("a", "b"), "alive");
    assert.equal(net.get("a").member(memberId("b"))?.incarnation, MAX_INCARNATION_STEP);
    net.add("c").join(["a.test:7447"]);
    net.flush();
    assert.equal(net.stateOf("c", "b"), "alive");
    net.tick(3000);
    for (const o of ["a", "c"]) {
      assert.equal(net.stateOf(o, "b"), "alive", `${o} sees b`);
      assert.equal(net.get(o).member(memberId("b"))?.incarnation, 200_000, `${o} caught up`);
    }
    assert.equal(net.get("b").incarnation, 200_000, "b never had to refute");
  });
});

describe("SWIM core: what a datagram makes this member send", () => {
  it("relays a ping-req to an IP literal as named, to a host name only as the target's address", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    swim.handle(
      "b.test:7447",
      gossip("b", [{ kind: "alive", incarnation: incarnation(0), meta: metaOf("b") }]),
    );
    swim.takeReady();
    const relayed = (target: string, targetAddr: string): string[] => {
      swim.handle("c.test:7447", {
        type: "ping-req",
        from: memberId("c"),
        totalShards: 1024,
        seq: 1,
        target: memberId(target),
        targetAddr,
        gossip: [],
      });
      return swim
        .takeReady()
        .messages.filter((o) => o.message.type === "ping")
        .map((o) => o.to);
    };
    assert.deepEqual(relayed("b", "b.test:7447"), ["b.test:7447"]);
    assert.deepEqual(relayed("b", "evil.example:7447"), ["b.test:7447"], "the table's address");
    assert.deepEqual(relayed("q", "q.example:7447"), [], "a name the table does not hold");
    assert.deepEqual(relayed("q", "10.1.2.3:7447"), ["10.1.2.3:7447"]);
    assert.deepEqual(relayed("q", "[2001:db8::7]:7447"), ["[2001:db8::7]:7447"]);
  });

  /** A core holding `n` made-up members (a full state of several datagrams). */
  const crowded = (n: number): Swim => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    for (let i = 0; i < n; i += 10) {
      const updates: Update[] = [];
      for (let j = i; j < i + 10 && j < n; j++) {
        updates.push({
          kind: "alive",
          incarnation: incarnation(0),
          meta: metaOf(`m${String(j).padStart(40, "0")}`),
        });
      }
      swim.handle("m.test:7447", gossip("m0", updates));
    }
    swim.takeReady();
    return swim;
  };
  const stateSent = (swim: Swim): { answers: number; datagrams: number; to: Set<string> } => {
    const out = swim.takeReady().messages.filter((o) => o.message.type === "push-pull");
    return {
      answers: out.filter((o) => o.message.type === "push-pull" && o.message.first).length,
      datagrams: out.length,
      to: new Set(out.map((o) => o.to)),
    };
  };

  it(`answers one address's push-pull requests ${STATE_SENDS_PER_SOURCE} times, then one a probe period`, () => {
    const swim = crowded(100);
    for (let i = 0; i < 1000; i++) swim.handle("10.9.9.9:53", pushPull("v", []));
    assert.equal(stateSent(swim).answers, STATE_SENDS_PER_SOURCE);
    for (let t = 0; t < PERIOD; t++) swim.tick();
    swim.takeReady();
    for (let i = 0; i < 1000; i++) swim.handle("10.9.9.9:53", pushPull("v", []));
    assert.equal(stateSent(swim).answers, 1);
    // Another address, a joining node, is answered meanwhile.
    swim.handle(
      "j.test:7447",
      pushPull("j", [{ meta: metaOf("j"), state: "alive", incarnation: incarnation(0) }]),
    );
    assert.deepEqual([...stateSent(swim).to], ["j.test:7447"]);
  });

  it(`counts the sends of the latest ${MAX_STATE_SOURCES} addresses: the table of addresses stays bounded`, () => {
    const swim = crowded(0);
    const ask = (addr: string): number => {
      swim.handle(addr, pushPull("v", []));
      return stateSent(swim).answers;
    };
    assert.equal(ask("10.9.9.9:53") + ask("10.9.9.9:53") + ask("10.9.9.9:53"), 2, "spent");
    for (let i = 0; i < MAX_STATE_SOURCES - 1; i++) ask(`10.8.${i >> 8}.${i & 255}:1`);
    for (let t = 0; t < 5; t++) swim.tick(); // the budget in all refills; 10.9.9.9's by half
    swim.takeReady();
    assert.equal(ask("10.9.9.9:53"), 0, "still counted");
    for (let i = 0; i < MAX_STATE_SOURCES; i++) ask(`10.7.${i >> 8}.${i & 255}:1`);
    for (let t = 0; t < 5; t++) swim.tick();
    swim.takeReady();
    assert.equal(ask("10.9.9.9:53"), 1, "forgotten by then: counted afresh");
  });

  it(`sends at most ${STATE_DATAGRAMS_BURST} datagrams of full state at once, and ${STATE_DATAGRAMS_PER_PERIOD} a period, however many addresses ask`, () => {
    const swim = crowded(100);
    // One answer's size (the budget is checked before an answer, paid after it).
    swim.handle("10.0.0.1:1", pushPull("v", []));
    const one = stateSent(swim).datagrams;
    assert.ok(one >= 4, `${one} datagrams a state`);
    let sent = one;
    // Requests from 10,000 (spoofed) addresses, and datagrams from 10,000 unknown senders
    // (each an introduction: the full state, sent as a request).
    for (let i = 2; i < 10_000; i++) {
      swim.handle(`10.0.${i >> 8}.${i & 255}:1`, pushPull("v", []));
      swim.handle(`10.1.${i >> 8}.${i & 255}:1`, gossip(`u${i}`, []));
    }
    sent += stateSent(swim).datagrams;
    assert.ok(sent <= STATE_DATAGRAMS_BURST + one, `${sent} datagrams`);
    for (let t = 0; t < 10 * PERIOD; t++) {
      swim.tick();
      swim.handle(`10.2.0.${t}:1`, pushPull("v", []));
      sent += stateSent(swim).datagrams;
    }
    assert.ok(
      sent <= STATE_DATAGRAMS_BURST + 10 * STATE_DATAGRAMS_PER_PERIOD + one,
      `${sent} datagrams in 10 periods`,
    );
  });

  it("keeps at most k + 1 confirmers of a suspicion: more are not taken, nor gossiped on", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(5) });
    const members = ["b", "c", "d", "e", "f"];
    swim.handle(
      "z.test:7447",
      gossip(
        "z",
        members.map((m) => ({ kind: "alive", incarnation: incarnation(0), meta: metaOf(m) })),
      ),
    );
    swim.handle("c.test:7447", gossip("c", [suspect("b", 0, "c")]));
    swim.handle("d.test:7447", gossip("d", [suspect("b", 0, "d")]));
    swim.handle("e.test:7447", gossip("e", [suspect("b", 0, "e")]));
    swim.takeReady();
    // k = 2 (6 members): c and two confirmations. 20,000 made-up confirmers each used to be kept
    // for the suspicion's life (45 MiB), and gossiped on.
    for (let d = 0; d < 4000; d++) {
      swim.handle(
        "10.0.0.9:1",
        gossip(
          "evil",
          Array.from({ length: 5 }, (_, i) => suspect("b", 0, `fake-${d * 5 + i}`)),
        ),
      );
    }
    const carried: string[] = [];
    for (let t = 0; t < 5; t++) {
      swim.tick();
      for (const o of swim.takeReady().messages) carried.push(describeMessage(o.message));
    }
    assert.ok(
      !carried.some((m) => m.includes("by fake-")),
      carried.find((m) => m.includes("by fake-")),
    );
    assert.equal(swim.member(memberId("b"))?.state, "suspect");
  });

  it(`introduces itself once per source address, forgetting the oldest past ${MAX_INTRODUCED}`, () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    const introductions = (from: string, addr: string): number => {
      swim.handle(addr, gossip(from, []));
      return swim.takeReady().messages.filter((o) => o.message.type === "push-pull").length;
    };
    // 64 made-up ids from one address filled the table: no introduction for anyone after.
    let fake = 0;
    for (let i = 0; i < 64; i++) fake += introductions(`fake${i}`, "198.51.100.1:53");
    assert.equal(fake, 1, "one address, one introduction");
    assert.equal(introductions("real-new", "10.1.1.1:7447"), 1);
    // A flood of addresses does not switch them off either: the oldest are forgotten.
    for (let i = 0; i < 3 * MAX_INTRODUCED; i++) introductions(`f${i}`, `198.51.100.${i}:53`);
    assert.equal(introductions("another", "10.1.1.2:7447"), 1);
    assert.equal(introductions("real-new", "10.1.1.1:7447"), 1, "forgotten: introduced again");
  });

  it(`counts at most ${MAX_CLAIMS} other addresses claiming this member's id: a flood of them is refuted, not remembered`, () => {
    // Each address that claims this member's id is counted, and one that claims it again is
    // reported as a live duplicate; a forger's made-up addresses, one datagram each, would each
    // be kept for the member's life.
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    const claim = (addr: string): void => {
      const meta = { ...metaOf("a"), rpcAddr: addr };
      swim.handle(addr, gossip("z", [{ kind: "alive", incarnation: incarnation(MAX), meta }]));
    };
    let reported = 0;
    for (let i = 0; i < 20 * MAX_CLAIMS; i++) {
      const addr = `198.51.${Math.floor(i / 250)}.${i % 250}:7447`;
      claim(addr);
      claim(addr);
      reported += swim.takeReady().errors.length;
    }
    assert.equal(reported, MAX_CLAIMS, "the addresses counted, and only they, are reported");
    assert.ok(swim.incarnation < MAX, "still able to outbid");
  });

  it("a refusal naming this member's own total_shards is no refusal; a ping of another shape is refused, not a refusal", () => {
    const swim = new Swim({ self: metaOf("a"), rng: seededRng(1) });
    const header = { from: memberId("s"), reason: "shard-count-mismatch" as const };
    swim.handle("s.test:7447", { type: "refuse", ...header, totalShards: 1024 });
    assert.deepEqual(swim.takeReady().errors, []);
    swim.handle("s.test:7447", { type: "refuse", ...header, totalShards: 32 });
    const [refused] = swim.takeReady().errors;
    assert.ok(refused !== undefined && "refusal" in refused && refused.refusal, "a refusal");
    swim.handle("s.test:7447", {
      type: "ping",
      from: memberId("s"),
      totalShards: 32,
      seq: 1,
      target: memberId("a"),
      gossip: [],
    });
    const ready = swim.takeReady();
    const [mismatch] = ready.errors;
    assert.ok(mismatch !== undefined && "refusal" in mismatch && !mismatch.refusal);
    assert.deepEqual(
      ready.messages.map((o) => o.message.type),
      ["refuse"],
    );
  });
});
