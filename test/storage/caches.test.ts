import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { BlockCache, TableCache, type TableMeta } from "../../src/storage/lsm/caches.ts";
import { parseBlock, putEntry, ByteSink, type ParsedBlock } from "../../src/storage/lsm/format.ts";

function block(n: number): ParsedBlock {
  const sink = new ByteSink();
  putEntry(sink, `key${n}`, 1, n, Buffer.alloc(1000, n));
  return parseBlock(Buffer.from(sink.view())) as ParsedBlock;
}

describe("block cache", () => {
  it("stays within its byte budget and evicts the least recently used block", () => {
    const one = block(0).charge;
    const cache = new BlockCache(one * 4 + 10);
    for (let i = 0; i < 4; i++) cache.set(`t:${i}`, block(i));
    assert.equal(cache.get("t:0")?.count, 1); // used: now the most recent
    cache.set("t:4", block(4));
    assert.ok(cache.bytes <= cache.capacityBytes);
    assert.notEqual(cache.get("t:0"), undefined);
    assert.equal(cache.get("t:1"), undefined, "the least recently used block went first");
    for (let i = 5; i < 40; i++) cache.set(`t:${i}`, block(i));
    assert.ok(cache.bytes <= cache.capacityBytes);
    assert.notEqual(cache.get("t:39"), undefined);
  });

  it("never caches a block larger than the whole cache", () => {
    const cache = new BlockCache(100);
    cache.set("big", block(1));
    assert.equal(cache.get("big"), undefined);
    assert.equal(cache.bytes, 0);
  });
});

describe("table cache", () => {
  const meta = (charge: number): TableMeta => ({
    index: block(0),
    filter: new Uint8Array(0),
    charge,
  });

  it("stays within its byte budget and evicts the least recently used table", () => {
    const cache = new TableCache(300);
    cache.set("a", meta(100));
    cache.set("b", meta(100));
    cache.set("c", meta(100));
    assert.notEqual(cache.get("a"), undefined); // used: now the most recent
    cache.set("d", meta(100));
    assert.equal(cache.peek("b"), undefined, "the least recently used table went first");
    assert.notEqual(cache.peek("a"), undefined);
    assert.equal(cache.count, 3);
    assert.equal(cache.bytes, 300);
    cache.delete("a");
    assert.equal(cache.bytes, 200);
    cache.set("huge", meta(1000));
    assert.equal(cache.peek("huge"), undefined, "larger than the cache: not kept");
    assert.equal(cache.loads, 5);
  });
});
