import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  BlockCache,
  newBlockSet,
  TableCache,
  type MetaHolder,
} from "../../src/storage/lsm/caches.ts";
import { parseBlock, putEntry, ByteSink, type ParsedBlock } from "../../src/storage/lsm/format.ts";
import { keyPrefix } from "../../src/storage/lsm/keys.ts";

function block(n: number): ParsedBlock {
  const sink = new ByteSink();
  putEntry(sink, `key${n}`, 1, n, Buffer.alloc(1000, n));
  sink.u32(0); // the entry offset array: one entry, at 0
  sink.u32(keyPrefix(`key${n}`)); // the key prefix array
  sink.u32(1);
  return parseBlock(Buffer.from(sink.view())) as ParsedBlock;
}

describe("block cache", () => {
  it("stays within its byte budget and evicts the least recently used block", () => {
    const one = block(0).charge;
    const cache = new BlockCache(one * 4 + 10);
    const t = newBlockSet();
    for (let i = 0; i < 4; i++) cache.set(t, i, block(i));
    assert.equal(cache.get(t, 0)?.count, 1); // used: now the most recent
    cache.set(t, 4, block(4));
    assert.ok(cache.bytes <= cache.capacityBytes);
    assert.notEqual(cache.get(t, 0), undefined);
    assert.equal(cache.get(t, 1), undefined, "the least recently used block went first");
    assert.equal(t.size, 4, "the evicted block left its table's set");
    for (let i = 5; i < 40; i++) cache.set(t, i, block(i));
    assert.ok(cache.bytes <= cache.capacityBytes);
    assert.notEqual(cache.get(t, 39), undefined);
    assert.equal(cache.hits, 3);
    assert.equal(cache.misses, 1);
  });

  it("keeps tables' blocks apart and drops a whole table at once", () => {
    const one = block(0).charge;
    const cache = new BlockCache(one * 10);
    const a = newBlockSet();
    const b = newBlockSet();
    for (let i = 0; i < 3; i++) cache.set(a, i * 4096, block(i));
    cache.set(b, 0, block(9));
    assert.equal(cache.get(b, 0)?.count, 1);
    assert.equal(cache.bytes, one * 4);
    cache.evictTable(a);
    assert.equal(a.size, 0);
    assert.ok(a.slots.every((s) => s === undefined));
    assert.equal(cache.bytes, one);
    assert.equal(cache.get(a, 0), undefined);
    assert.notEqual(cache.get(b, 0), undefined);
    // The recency list is intact after the removals: filling the cache evicts b's block last.
    for (let i = 0; i < 9; i++) cache.set(a, i, block(i));
    assert.notEqual(cache.get(b, 0), undefined);
    cache.set(a, 100, block(1));
    assert.equal(cache.get(a, 0), undefined, "the oldest of a went, not b's recent block");
    assert.notEqual(cache.get(b, 0), undefined);
    assert.equal(cache.bytes, one * 10);
  });

  it("never caches a block larger than the whole cache", () => {
    const cache = new BlockCache(100);
    const t = newBlockSet();
    cache.set(t, 0, block(1));
    assert.equal(cache.get(t, 0), undefined);
    assert.equal(cache.bytes, 0);
  });
});

describe("table cache", () => {
  class Holder implements MetaHolder {
    dropped = 0;
    dropMeta(): void {
      this.dropped++;
    }
  }

  it("stays within its byte budget and tells the least recently used table to drop its index", () => {
    const cache = new TableCache(300);
    const [a, b, c, d] = [new Holder(), new Holder(), new Holder(), new Holder()];
    assert.ok(cache.add(a, 100));
    assert.ok(cache.add(b, 100));
    assert.ok(cache.add(c, 100));
    cache.touch(a); // used: now the most recent
    assert.ok(cache.add(d, 100));
    assert.equal(b.dropped, 1, "the least recently used table went first");
    assert.equal(cache.has(b), false);
    assert.ok(cache.has(a));
    assert.equal(a.dropped + c.dropped + d.dropped, 0);
    assert.equal(cache.count, 3);
    assert.equal(cache.bytes, 300);
    cache.remove(a);
    assert.equal(cache.bytes, 200);
    assert.equal(a.dropped, 0, "a removed table is not told");
    const huge = new Holder();
    assert.equal(cache.add(huge, 1000), false, "larger than the cache: not kept");
    assert.equal(cache.has(huge), false);
    assert.equal(cache.loads, 5);
  });

  it("keeps the table it adds when every other one was used since the last eviction", () => {
    const cache = new TableCache(200);
    const [a, b, c, d] = [new Holder(), new Holder(), new Holder(), new Holder()];
    cache.add(a, 100);
    cache.add(b, 100);
    cache.touch(a);
    cache.touch(b);
    assert.ok(cache.add(c, 100));
    assert.ok(cache.has(c), "the new table is kept");
    assert.equal(a.dropped, 1, "the oldest of the used ones goes, once every one had its chance");
    assert.ok(cache.has(b));
    assert.equal(c.dropped, 0);
    // b was passed over once and not used since: it goes before c, which was not passed over.
    cache.add(d, 100);
    assert.equal(b.dropped, 1);
    assert.ok(cache.has(c) && cache.has(d));
    assert.equal(cache.bytes, 200);
  });
});
