/**
 * SWIM's cache of member host names (src/membership/dns-cache.ts): members are named by gossip,
 * so the names it is asked for come from the network (a forged member under a made-up name, one
 * more per datagram on cleartext gossip). It must stay bounded, and it must not look a name up
 * again before its entry is old.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { DNS_TTL_MS, DnsCache, MAX_DNS_ENTRIES } from "../../src/membership/dns-cache.ts";

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
    assert.equal(cache.addressOf("good.example"), "good.example", "until the lookup returns");
    await Promise.resolve();
    assert.equal(cache.addressOf("good.example"), "192.0.2.1");
    assert.deepEqual(lookups, ["good.example"], "looked up once while fresh");
    for (let i = 0; i < 3 * MAX_DNS_ENTRIES; i++) {
      cache.addressOf(`bad-${i}.invalid`);
      if (i % 1000 === 0) now += 1;
    }
    await new Promise((resolve) => setImmediate(resolve));
    assert.ok(cache.size <= MAX_DNS_ENTRIES, `${cache.size} names remembered`);
    // The oldest go first: a name asked for again after the flood is looked up again.
    now += DNS_TTL_MS;
    assert.equal(cache.addressOf("good.example"), "good.example");
    assert.equal(lookups.filter((h) => h === "good.example").length, 2);
  });
});
