/**
 * SWIM's cache of member host names (src/membership/dns-cache.ts): members are named by gossip,
 * so the names it is asked for come from the network (a forged member under a made-up name, one
 * more per datagram on cleartext gossip). It must stay bounded, must not look a name up again
 * before its entry is old, must hold at most MAX_LOOKUPS_IN_FLIGHT of libuv's pool threads
 * however many names it is asked for, must never hand back a name (the socket would look it up
 * again), and must not throw.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  DNS_RETRY_MS,
  DNS_TTL_MS,
  DnsCache,
  MAX_DNS_ENTRIES,
  MAX_LOOKUPS_IN_FLIGHT,
} from "../../src/membership/dns-cache.ts";

/** A lookup the test answers by hand: `answer(host, address | Error)`. */
function manualLookup(): {
  lookup: (host: string) => Promise<{ address: string }>;
  asked: string[];
  answer: (host: string, result: string | Error) => Promise<void>;
} {
  const asked: string[] = [];
  const pending = new Map<string, (r: string | Error) => void>();
  return {
    asked,
    lookup: (host) => {
      asked.push(host);
      return new Promise((resolve, reject) =>
        pending.set(host, (r) => (r instanceof Error ? reject(r) : resolve({ address: r }))),
      );
    },
    answer: async (host, result) => {
      const settle = pending.get(host);
      assert.ok(settle !== undefined, `no lookup of ${host} pending`);
      pending.delete(host);
      settle(result);
      await new Promise((resolve) => setImmediate(resolve));
    },
  };
}

describe("DnsCache", () => {
  it("remembers a bounded number of host names, however many it is asked for", async () => {
    let now = 0;
    const lookups: string[] = [];
    const cache = new DnsCache({
      lookup: (host) => {
        lookups.push(host);
        return host.startsWith("bad")
          ? Promise.reject(new Error("ENOTFOUND"))
          : Promise.resolve({ address: "192.0.2.1" });
      },
      failed: () => undefined,
      now: () => now,
    });
    assert.equal(cache.addressOf("good.example"), null, "no address until the lookup returns");
    await Promise.resolve();
    assert.equal(cache.addressOf("good.example"), "192.0.2.1");
    assert.deepEqual(lookups, ["good.example"], "looked up once while fresh");
    for (let i = 0; i < 3 * MAX_DNS_ENTRIES; i++) {
      cache.addressOf(`bad-${i}.invalid`);
      // The failed lookups return before the next names are asked for (slots free again).
      if ((i + 1) % MAX_LOOKUPS_IN_FLIGHT === 0) await new Promise((r) => setImmediate(r));
      if (i % 1000 === 0) now += 1;
    }
    await new Promise((resolve) => setImmediate(resolve));
    assert.ok(cache.size <= MAX_DNS_ENTRIES, `${cache.size} names remembered`);
    // The oldest go first: a name asked for again after the flood is looked up again.
    now += DNS_TTL_MS;
    assert.equal(cache.addressOf("good.example"), null, "forgotten: no address");
    assert.equal(lookups.filter((h) => h === "good.example").length, 2);
  });

  it(`runs at most ${MAX_LOOKUPS_IN_FLIGHT} lookup(s) at once; a name past it is dropped, not queued`, async () => {
    const dns = manualLookup();
    const cache = new DnsCache({ lookup: dns.lookup, failed: () => undefined, now: () => 0 });
    // A flood of made-up names (ping-reqs, forged members) behind a DNS server that never answers.
    for (let i = 0; i < 1000; i++) assert.equal(cache.addressOf(`h${i}.evil.example`), null);
    const first = Array.from({ length: MAX_LOOKUPS_IN_FLIGHT }, (_, i) => `h${i}.evil.example`);
    assert.deepEqual(dns.asked, first);
    assert.equal(cache.lookupsInFlight, MAX_LOOKUPS_IN_FLIGHT);
    assert.equal(cache.size, MAX_LOOKUPS_IN_FLIGHT, "names not looked up are not remembered");
    // A member's real name waits for a slot: no address (its datagram is dropped), no lookup.
    assert.equal(cache.addressOf("member.example"), null);
    assert.equal(dns.asked.length, MAX_LOOKUPS_IN_FLIGHT);
    // One lookup fails: the slot goes to the next name asked for.
    await dns.answer("h0.evil.example", new Error("ETIMEOUT"));
    assert.equal(cache.addressOf("member.example"), null);
    assert.deepEqual(dns.asked.slice(MAX_LOOKUPS_IN_FLIGHT), ["member.example"]);
    await dns.answer("member.example", "192.0.2.7");
    assert.equal(cache.addressOf("member.example"), "192.0.2.7");
    assert.equal(cache.lookupsInFlight, MAX_LOOKUPS_IN_FLIGHT - 1);
  });

  it("keeps an address while its refresh cannot start or fails, and retries a failed name soon", async () => {
    let now = 0;
    const dns = manualLookup();
    const failures: string[] = [];
    const cache = new DnsCache({
      lookup: dns.lookup,
      failed: (host) => failures.push(host),
      now: () => now,
    });
    cache.addressOf("member.example");
    await dns.answer("member.example", "192.0.2.7");
    const slow = Array.from({ length: MAX_LOOKUPS_IN_FLIGHT }, (_, i) => `slow${i}.example`);
    for (const name of slow) cache.addressOf(name); // every slot held
    now += DNS_TTL_MS;
    assert.equal(cache.addressOf("member.example"), "192.0.2.7", "old, no slot: kept");
    await dns.answer("slow0.example", new Error("ENOTFOUND"));
    assert.equal(cache.addressOf("member.example"), "192.0.2.7", "refreshing");
    await dns.answer("member.example", new Error("ETIMEOUT"));
    assert.deepEqual(failures, ["slow0.example", "member.example"]);
    assert.equal(cache.addressOf("member.example"), "192.0.2.7", "a failed refresh keeps it");
    assert.equal(dns.asked.filter((h) => h === "member.example").length, 2);
    now += DNS_RETRY_MS;
    cache.addressOf("member.example");
    assert.equal(dns.asked.filter((h) => h === "member.example").length, 3, "retried");
  });

  it("a lookup that throws (a NUL byte in the name) is a failed lookup, not a throw", () => {
    const failures: unknown[] = [];
    const cache = new DnsCache({
      lookup: () => {
        throw new TypeError("The argument 'hostname' must be a string without null bytes");
      },
      failed: (_host, err) => failures.push(err),
      now: () => 0,
    });
    assert.equal(cache.addressOf("\u0000"), null);
    assert.equal(failures.length, 1);
    assert.equal(cache.lookupsInFlight, 0, "its slot is free again");
    assert.equal(cache.addressOf("\u0000"), null, "not retried at once");
    assert.equal(failures.length, 1);
  });

  it("cachedAddressOf tells the last address found and starts no lookup", async () => {
    let now = 0;
    const dns = manualLookup();
    const cache = new DnsCache({ lookup: dns.lookup, failed: () => undefined, now: () => now });
    assert.equal(cache.cachedAddressOf("member.example"), null);
    assert.deepEqual(dns.asked, [], "not looked up");
    cache.addressOf("member.example");
    assert.equal(cache.cachedAddressOf("member.example"), null, "until its lookup returns");
    await dns.answer("member.example", "192.0.2.9");
    now += DNS_TTL_MS;
    assert.equal(cache.cachedAddressOf("member.example"), "192.0.2.9", "old, still the last");
    assert.deepEqual(dns.asked, ["member.example"], "no refresh started");
  });
});
