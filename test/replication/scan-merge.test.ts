/**
 * Merging a scan's sources into pages (scan-merge.ts): key order, the bounds in items and bytes,
 * reading no more of a shard than a page needs, and paging through sources that cut their own
 * pages (peers, workers) without losing or repeating a key. (Scans across shards and nodes are
 * exercised by multi-raft.test.ts, grpc-cluster.test.ts and the e2e tests.)
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  ITEM_OVERHEAD_BYTES,
  itemBytes,
  mergeCursors,
  mergePages,
  type ScanPage,
} from "../../src/replication/scan-merge.ts";
import type { StoredItem } from "../../src/replication/index.ts";

const item = (key: string | Uint8Array, valueBytes = 1): StoredItem => ({
  key: typeof key === "string" ? Buffer.from(key) : key,
  value: Buffer.alloc(valueBytes, 7),
  version: { index: 1, term: 1 },
});
const keys = (items: readonly StoredItem[]): string[] =>
  items.map((i) => Buffer.from(i.key).toString());
const cursors = (lists: readonly StoredItem[][]): Iterator<StoredItem>[] =>
  lists.map((l) => l[Symbol.iterator]());

describe("mergeCursors", () => {
  it("merges key-ordered sources into one, in byte order", () => {
    const page = mergeCursors(
      cursors([[item("a"), item("d"), item("g")], [item("b"), item("e")], [], [item("c")]]),
      100,
      Infinity,
    );
    assert.deepEqual(keys(page.items), ["a", "b", "c", "d", "e", "g"]);
    assert.equal(page.more, false);
    const hi = item(new Uint8Array([0xff]));
    const bytes = mergeCursors(cursors([[item("ab"), hi], [item("a")]]), 100, Infinity);
    assert.deepEqual(
      bytes.items.map((i) => [...i.key]),
      [[0x61], [0x61, 0x62], [0xff]],
      "a longer key after its prefix, 0xff last",
    );
    assert.deepEqual(mergeCursors([], 10, Infinity), { items: [], more: false });
  });

  it("reads a page's items and one head a source, and ends every source", () => {
    // 1,024 shards of 1,000 keys each: a page of 10 once read all of them (10 a shard).
    let pulled = 0;
    let ended = 0;
    const shard = (s: number): Iterator<StoredItem> =>
      (function* () {
        try {
          for (let i = 0; i < 1000; i++) {
            pulled++;
            yield item(`k${String(i).padStart(4, "0")}-${String(s).padStart(4, "0")}`);
          }
        } finally {
          ended++;
        }
      })();
    const sources = Array.from({ length: 1024 }, (_, s) => shard(s));
    const page = mergeCursors(sources, 10, Infinity);
    assert.equal(page.items.length, 10);
    assert.equal(page.more, true);
    assert.ok(pulled <= 1024 + 10, `${pulled} items read for a page of 10`);
    assert.equal(ended, 1024, "every source ended (its pinned tables released)");
  });

  it("cuts a page at its bytes, and holds one item larger than them", () => {
    const big = (k: string): StoredItem => item(k, 1000);
    const per = itemBytes(big("a"));
    assert.equal(per, 1 + 1000 + ITEM_OVERHEAD_BYTES);
    const three = mergeCursors(cursors([[big("a"), big("b"), big("c"), big("d")]]), 10, 3 * per);
    assert.deepEqual(keys(three.items), ["a", "b", "c"]);
    assert.equal(three.more, true);
    const one = mergeCursors(cursors([[big("a"), big("b")]]), 10, 10);
    assert.deepEqual(keys(one.items), ["a"], "one item however large: the scan moves on");
    assert.equal(one.more, true);
  });
});

describe("mergePages", () => {
  it("names every shard a page left out, once, ascending", () => {
    const page = mergePages(
      [
        { items: [item("a")], more: false, skipped: [9, 2] },
        { items: [item("b")], more: true, skipped: [2, 5] },
        { items: [], more: false },
      ],
      100,
      Infinity,
    );
    assert.deepEqual(page.skipped, [2, 5, 9]);
    assert.deepEqual(keys(page.items), ["a", "b"]);
    const cutEarly = mergePages([{ items: [], more: true, skipped: [7] }], 100, Infinity);
    assert.deepEqual(cutEarly.skipped, [7]);
    const none = mergePages([{ items: [item("a")], more: false }], 100, Infinity);
    assert.equal(none.skipped, undefined);
  });

  it("gives no key past the lowest last key of a page that was cut", () => {
    const page = mergePages(
      [
        { items: [item("a"), item("c"), item("e")], more: true },
        { items: [item("b"), item("d"), item("f"), item("g")], more: false },
      ],
      100,
      Infinity,
    );
    assert.deepEqual(keys(page.items), ["a", "b", "c", "d", "e"]);
    assert.equal(page.more, true, "f and g, and what followed e, are for the next page");
    const whole = mergePages(
      [
        { items: [item("a")], more: false },
        { items: [item("b")], more: false },
      ],
      100,
      Infinity,
    );
    assert.deepEqual(whole, { items: whole.items, more: false });
    assert.deepEqual(keys(whole.items), ["a", "b"]);
  });

  it("pages through sources that cut their own pages: every key once, in order, each page in bounds", () => {
    // A scan as a cluster runs it: shards spread over sources (nodes or workers), each source
    // answering a page cut at its own limit and bytes, the asker merging them, the caller
    // asking again after the last key it got, until nothing is left.
    const arb = fc.record({
      keys: fc.uniqueArray(fc.uint8Array({ minLength: 1, maxLength: 4 }), {
        maxLength: 120,
        selector: (k) => Buffer.from(k).toString("hex"),
      }),
      valueBytes: fc.array(fc.nat({ max: 300 }), { minLength: 1, maxLength: 8 }),
      shards: fc.integer({ min: 1, max: 12 }),
      sources: fc.integer({ min: 1, max: 4 }),
      limit: fc.integer({ min: 1, max: 40 }),
      maxBytes: fc.integer({ min: 1, max: 3000 }),
    });
    fc.assert(
      fc.property(arb, ({ keys: ks, valueBytes, shards, sources, limit, maxBytes }) => {
        const all = ks
          .map((k, i) => item(k, valueBytes[i % valueBytes.length] as number))
          .sort((a, b) => Buffer.compare(a.key, b.key));
        const shardOf = (k: Uint8Array): number => (k[0] as number) % shards;
        const sourceOf = (shard: number): number => shard % sources;
        const after = (start: Uint8Array | null) => (i: StoredItem) =>
          start === null || Buffer.compare(i.key, start) > 0;
        const got: StoredItem[] = [];
        let start: Uint8Array | null = null;
        for (let round = 0; round <= all.length + 1; round++) {
          const pages: ScanPage[] = Array.from({ length: sources }, (_, src) => {
            const lists = Array.from({ length: shards }, (_, s) =>
              sourceOf(s) === src
                ? all.filter((i) => shardOf(i.key) === s).filter(after(start))
                : [],
            );
            return mergeCursors(cursors(lists), limit + 1, maxBytes);
          });
          const page = mergePages(pages, limit, maxBytes);
          assert.ok(page.items.length <= limit);
          const bytes = page.items.reduce((n, i) => n + itemBytes(i), 0);
          assert.ok(page.items.length <= 1 || bytes <= maxBytes, `${bytes} > ${maxBytes}`);
          got.push(...page.items);
          if (!page.more) break;
          const last = page.items[page.items.length - 1];
          assert.ok(last !== undefined, "a page that says more holds an item");
          start = last.key;
        }
        assert.deepEqual(
          got.map((i) => Buffer.from(i.key).toString("hex")),
          all.map((i) => Buffer.from(i.key).toString("hex")),
        );
      }),
      { numRuns: 300 },
    );
  });
});
