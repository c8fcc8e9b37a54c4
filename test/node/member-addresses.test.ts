import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ConnectionSlots } from "../../src/api/connection-slots.ts";
import {
  ADDRESSES_PER_HOST,
  MemberAddresses,
  RESOLVE_EVERY_MS,
} from "../../src/node/member-addresses.ts";

/** A resolver over a table the test changes; a name missing from it fails like getaddrinfo. */
function resolver(table: Map<string, string[]>): {
  resolve: (host: string) => Promise<string[]>;
  asked: string[];
} {
  const asked: string[] = [];
  return {
    asked,
    resolve: (host) => {
      asked.push(host);
      const found = table.get(host);
      return found === undefined
        ? Promise.reject(new Error(`getaddrinfo ENOTFOUND ${host}`))
        : Promise.resolve(found);
    },
  };
}

describe("MemberAddresses", () => {
  it("writes the members' IPs, names looked up, into the connections' table", async () => {
    const slots = new ConnectionSlots(100, 0);
    const dns = new Map([["cairn-1.cairn.svc", ["10.1.0.5", "fd00::5"]]]);
    const { resolve, asked } = resolver(dns);
    const members = new MemberAddresses(slots, resolve);
    await members.update(["10.1.0.4:7447", "cairn-1.cairn.svc:7447", "[fd00::6]:7447", "bad"]);
    for (const a of ["10.1.0.4", "10.1.0.5", "fd00::5", "fd00::6"]) {
      assert.ok(slots.isMember(a), a);
    }
    assert.ok(!slots.isMember("10.1.0.7"));
    assert.deepEqual(asked, ["cairn-1.cairn.svc"], "IP literals are not looked up");
  });

  it("keeps a name's last addresses when a lookup fails, and drops a member that left", async () => {
    const slots = new ConnectionSlots(100, 0);
    const dns = new Map([["a.example", ["10.2.0.1"]]]);
    let now = 0;
    const members = new MemberAddresses(slots, resolver(dns).resolve, () => now);
    await members.update(["a.example:1", "10.2.0.9:1"]);
    dns.delete("a.example");
    now += RESOLVE_EVERY_MS;
    await members.update(["a.example:1", "10.2.0.9:1"]);
    assert.ok(slots.isMember("10.2.0.1"), "kept through a failed lookup");
    await members.update(["10.2.0.9:1"]);
    assert.ok(!slots.isMember("10.2.0.1") && slots.isMember("10.2.0.9"));
  });

  it("looks the same names up again at most every RESOLVE_EVERY_MS, and follows a new IP", async () => {
    const slots = new ConnectionSlots(100, 0);
    const dns = new Map([["b.example", ["10.3.0.1"]]]);
    const { resolve, asked } = resolver(dns);
    let now = 0;
    const members = new MemberAddresses(slots, resolve, () => now);
    await members.update(["b.example:1"]);
    dns.set("b.example", ["10.3.0.2"]);
    await members.update(["b.example:1"]);
    assert.equal(asked.length, 1, "not again within the interval");
    assert.ok(slots.isMember("10.3.0.1"));
    now += RESOLVE_EVERY_MS;
    await members.update(["b.example:1"]);
    assert.equal(asked.length, 2);
    assert.ok(slots.isMember("10.3.0.2") && !slots.isMember("10.3.0.1"), "the pod's new IP");
  });

  it("runs one update at a time; the newest waiting one wins", async () => {
    const slots = new ConnectionSlots(100, 0);
    let release: () => void = () => {};
    const gate = new Promise<void>((r) => (release = r));
    const asked: string[] = [];
    const members = new MemberAddresses(slots, async (host) => {
      asked.push(host);
      await gate;
      return host === "slow.example" ? ["10.4.0.1"] : ["10.4.0.9"];
    });
    const first = members.update(["slow.example:1"]);
    void members.update(["mid.example:1"]);
    const last = members.update(["last.example:1"]);
    release();
    await Promise.all([first, last]);
    assert.deepEqual(asked, ["slow.example", "last.example"], "mid.example was replaced");
    assert.ok(slots.isMember("10.4.0.9") && !slots.isMember("10.4.0.1"));
  });

  it("counts at most ADDRESSES_PER_HOST addresses of one name, so that a name with hundreds cannot take the members' whole reserve", async () => {
    const slots = new ConnectionSlots(100, 0);
    // A join recorded "0.evil.example:1", whose DNS answers 200 addresses; the real members
    // come first in the update (the node orders them active first).
    const evil = Array.from({ length: 200 }, (_, i) => `203.0.113.${i % 250}`).map((a, i) =>
      i < 100 ? a : `198.51.100.${i - 100}`,
    );
    const dns = new Map([
      ["0.evil.example", evil],
      ["n1.example", ["10.3.0.1"]],
      ["n2.example", ["10.3.0.2"]],
    ]);
    const { resolve } = resolver(dns);
    const members = new MemberAddresses(slots, resolve);
    await members.update(["0.evil.example:1", "n1.example:7447", "n2.example:7447"]);
    assert.ok(slots.isMember("10.3.0.1"), "n1 keeps its place");
    assert.ok(slots.isMember("10.3.0.2"), "n2 keeps its place");
    const taken = evil.filter((a) => slots.isMember(a)).length;
    assert.equal(taken, ADDRESSES_PER_HOST, "the name's share");
  });

  it("waits for a lookup that does not answer at most the timeout, keeps the name's last addresses, and starts no second lookup of it", async () => {
    const slots = new ConnectionSlots(100, 0);
    const answers = new Map<string, string[]>([
      ["a.example", ["10.5.0.1"]],
      ["b.example", ["10.5.0.2"]],
    ]);
    const hung = new Set<string>();
    const asked: string[] = [];
    let answer: () => void = () => {};
    const resolve = (host: string): Promise<string[]> => {
      asked.push(host);
      if (!hung.has(host)) return Promise.resolve(answers.get(host) ?? []);
      // A DNS server that does not answer: the lookup ends only when the test says.
      return new Promise((done) => (answer = () => done(answers.get(host) ?? [])));
    };
    let now = 0;
    const members = new MemberAddresses(slots, resolve, () => now, 20);
    await members.update(["a.example:1", "b.example:1"]);
    assert.ok(slots.isMember("10.5.0.1") && slots.isMember("10.5.0.2"));

    // a.example's DNS stops answering, and its pod moved meanwhile.
    hung.add("a.example");
    answers.set("a.example", ["10.5.0.3"]);
    answers.set("b.example", ["10.5.0.4"]);
    now += RESOLVE_EVERY_MS;
    await members.update(["a.example:1", "b.example:1"]);
    assert.ok(slots.isMember("10.5.0.1"), "a.example keeps its last address");
    assert.ok(slots.isMember("10.5.0.4"), "b.example's new address is written all the same");

    now += RESOLVE_EVERY_MS;
    await members.update(["a.example:1", "b.example:1"]);
    assert.equal(asked.filter((h) => h === "a.example").length, 2, "one lookup of a.example runs");

    answer();
    now += RESOLVE_EVERY_MS;
    await members.update(["a.example:1", "b.example:1"]);
    assert.ok(slots.isMember("10.5.0.3") && !slots.isMember("10.5.0.1"), "the late answer is used");
  });

  it("has at most two lookups in flight: names asked while slow ones hold them keep their last addresses", async () => {
    const slots = new ConnectionSlots(100, 0);
    const asked: string[] = [];
    const members = new MemberAddresses(
      slots,
      (host) => {
        asked.push(host);
        return host.startsWith("slow")
          ? new Promise<string[]>(() => {})
          : Promise.resolve(["10.6.0.1"]);
      },
      () => 0,
      20,
    );
    await members.update(["slow1.example:1", "slow2.example:1", "fast.example:1"]);
    assert.deepEqual(asked, ["slow1.example", "slow2.example"], "no third lookup while two hang");
    assert.ok(!slots.isMember("10.6.0.1"));
  });
});
