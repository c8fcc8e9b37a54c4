import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { bloomMayContain, buildBloom, keyHash } from "../../src/storage/lsm/bloom.ts";

const key = (i: number): string =>
  Buffer.from(`key-${i}-${(i * 2654435761) >>> 0}`).toString("latin1");

describe("bloom filter", () => {
  it("never misses a key it was built over, and rarely admits others (~1%)", () => {
    const n = 20_000;
    const filter = buildBloom(Array.from({ length: n }, (_, i) => keyHash(key(i))));
    for (let i = 0; i < n; i++) assert.ok(bloomMayContain(filter, keyHash(key(i))), `key ${i}`);
    let falsePositives = 0;
    for (let i = n; i < 3 * n; i++) if (bloomMayContain(filter, keyHash(key(i)))) falsePositives++;
    const rate = falsePositives / (2 * n);
    assert.ok(rate > 0 && rate < 0.02, `false positive rate ${rate}`);
  });

  it("sets every probe of a key within one 64-byte line", () => {
    for (let i = 0; i < 50; i++) {
      // 1000 hashes: 20 lines. All of them the same key's: its bits are all in one line.
      const filter = buildBloom(new Array<number>(1000).fill(keyHash(key(i))));
      assert.equal(filter.length, 20 * 64 + 1);
      const set: number[] = [];
      for (let at = 0; at < filter.length - 1; at++) if (filter[at] !== 0) set.push(at);
      assert.ok(set.length > 0);
      assert.equal(Math.floor((set[0] as number) / 64), Math.floor((set.at(-1) as number) / 64));
      assert.ok(bloomMayContain(filter, keyHash(key(i))));
    }
  });

  it("admits everything when empty of lines (a table without a filter)", () => {
    assert.ok(bloomMayContain(new Uint8Array(1), 12345));
  });
});
