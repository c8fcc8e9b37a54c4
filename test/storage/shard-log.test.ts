/**
 * ShardLog, the WAL's in-memory log of one shard (its entries as slots of one array of numbers,
 * their bytes copied into an arena), against a model that keeps every entry as an object: random
 * appends (with the conflicting-suffix overwrite), compactions and snapshots, checked after every
 * step. And what Raft's safety rests on: an entry read earlier keeps its bytes whatever the log
 * does next (the leader may still be sending it), and the caller's buffer is not kept.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { entryBytes, ShardLog } from "../../src/storage/wal/shard-log.ts";
import type { WalEntry } from "../../src/storage/wal/types.ts";

type Op =
  | { kind: "append"; back: number; term: number; type: number; size: number; fill: number }
  | { kind: "compact"; back: number }
  | { kind: "snapshot"; ahead: number }
  | { kind: "read"; back: number };

const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      kind: fc.constant("append" as const),
      // How far before the next index the entry goes: 0 appends, more overwrites a suffix.
      back: fc.oneof({ weight: 4, arbitrary: fc.constant(0) }, fc.nat(5)),
      term: fc.integer({ min: 1, max: 2 ** 40 }),
      type: fc.nat(255),
      size: fc.oneof(fc.nat(4), fc.nat(600), fc.integer({ min: 2000, max: 40_000 })),
      fill: fc.nat(255),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant("compact" as const), back: fc.nat(8) }) },
  {
    weight: 1,
    arbitrary: fc.record({ kind: fc.constant("snapshot" as const), ahead: fc.nat(4) }),
  },
  { weight: 3, arbitrary: fc.record({ kind: fc.constant("read" as const), back: fc.nat(8) }) },
);

function bytesOf(size: number, fill: number): Uint8Array {
  const data = new Uint8Array(size);
  for (let i = 0; i < size; i++) data[i] = (fill + i * 31) & 0xff;
  return data;
}

describe("ShardLog", () => {
  it("matches a model of entry objects under appends, overwrites, compactions and snapshots", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 120 }), (ops) => {
        const log = new ShardLog();
        let model: WalEntry[] = [];
        let compactIndex = 0;
        let compactTerm = 0;
        // Entries read from the log, with the bytes they had then.
        const read: Array<{ data: Uint8Array; bytes: Uint8Array }> = [];
        for (const o of ops) {
          const last = compactIndex + model.length;
          switch (o.kind) {
            case "append": {
              const index = Math.max(compactIndex + 1, last + 1 - o.back);
              const data = bytesOf(o.size, o.fill);
              log.append({ term: o.term, index, type: o.type, data }, false);
              // The log copied the bytes: the caller may reuse its buffer.
              data.fill(0xee);
              model = model.slice(0, index - compactIndex - 1);
              model.push({ term: o.term, index, type: o.type, data: bytesOf(o.size, o.fill) });
              break;
            }
            case "compact": {
              const index = Math.max(compactIndex, last - o.back);
              if (index === compactIndex) break;
              const term = (model[index - compactIndex - 1] as WalEntry).term;
              log.compact(index, term);
              model = model.slice(index - compactIndex);
              compactIndex = index;
              compactTerm = term;
              break;
            }
            case "snapshot": {
              const index = last + o.ahead;
              const term = 7;
              log.applySnapshot({ index, term, data: new Uint8Array(0) });
              model = [];
              compactIndex = index;
              compactTerm = term;
              break;
            }
            case "read": {
              const index = last - o.back;
              if (index <= compactIndex) break;
              const e = log.entry(index);
              read.push({ data: e.data, bytes: Uint8Array.from(e.data) });
              break;
            }
          }
          assert.equal(log.compactIndex, compactIndex);
          assert.equal(log.lastIndex, compactIndex + model.length);
          assert.equal(log.term(compactIndex), compactTerm);
          assert.equal(log.term(compactIndex - 1), undefined);
          assert.equal(log.term(log.lastIndex + 1), undefined);
          assert.equal(
            log.bytes,
            model.reduce((sum, e) => sum + entryBytes(e), 0),
          );
          for (const e of model) {
            assert.equal(log.term(e.index), e.term);
            assert.equal(log.dataLength(e.index), e.data.length);
            assert.deepEqual(log.entry(e.index), {
              term: e.term,
              index: e.index,
              type: e.type,
              data: e.data,
            });
          }
          for (const r of read) assert.deepEqual(r.data, r.bytes);
        }
      }),
      { numRuns: 300 },
    );
  });

  it("keeps an entry read before its suffix was overwritten intact (the bytes are never reused)", () => {
    const log = new ShardLog();
    for (let i = 1; i <= 3; i++) {
      log.append({ term: 1, index: i, type: 0, data: bytesOf(50, i) }, false);
    }
    // A leader reads entry 3 to send it; before it leaves, a new leader's entry replaces it.
    const sent = log.entry(3);
    log.append({ term: 2, index: 3, type: 0, data: bytesOf(50, 99) }, false);
    log.append({ term: 2, index: 4, type: 0, data: bytesOf(50, 98) }, false);
    assert.deepEqual(sent.data, bytesOf(50, 3));
    assert.deepEqual(log.entry(3).data, bytesOf(50, 99));
    assert.equal(log.term(3), 2);
  });

  it("keeps every entry when a compacted log moves its slots to the front to make room", () => {
    const log = new ShardLog();
    // Sixteen slots filled, the first ten compacted: the next append moves the six left to the
    // front of the array instead of growing it.
    for (let i = 1; i <= 16; i++) {
      log.append({ term: i, index: i, type: i % 2, data: bytesOf(10 + i, i) }, false);
    }
    log.compact(10, 10);
    for (let i = 17; i <= 20; i++) {
      log.append({ term: i, index: i, type: i % 2, data: bytesOf(10 + i, i) }, false);
    }
    for (let i = 11; i <= 20; i++) {
      assert.equal(log.term(i), i);
      assert.deepEqual(log.entry(i), { term: i, index: i, type: i % 2, data: bytesOf(10 + i, i) });
    }
  });

  it("starts a new log with a small chunk, and doubles its chunks up to 16 KiB", () => {
    // A node opens the logs of its 1,024 shards as they are created: a small shard's log must
    // not take a 16 KiB buffer for its first entries.
    const log = new ShardLog();
    log.append({ term: 1, index: 1, type: 0, data: bytesOf(100, 1) }, false);
    assert.equal(log.entry(1).data.buffer.byteLength, 1024);
    const sizes: number[] = [];
    for (let i = 2; i <= 400; i++) {
      log.append({ term: 1, index: i, type: 0, data: bytesOf(100, i) }, false);
      const size = log.entry(i).data.buffer.byteLength;
      if (size !== sizes.at(-1)) sizes.push(size);
    }
    assert.deepEqual(sizes, [1024, 2048, 4096, 8192, 16384]);
    // An entry larger than a chunk gets its own; the chunk after it is a whole one again.
    log.append({ term: 1, index: 401, type: 0, data: bytesOf(40_000, 401) }, false);
    log.append({ term: 1, index: 402, type: 0, data: bytesOf(100, 402) }, false);
    assert.equal(log.entry(401).data.buffer.byteLength, 40_000);
    assert.equal(log.entry(402).data.buffer.byteLength, 16 * 1024);
  });

  it("gives back the memory of compacted entries, and holds little more than the bytes held", () => {
    const log = new ShardLog();
    const held = new Set<ArrayBufferLike>();
    for (let i = 1; i <= 1000; i++) {
      log.append({ term: 1, index: i, type: 0, data: bytesOf(1000, i) }, false);
    }
    for (let i = 1; i <= 1000; i++) held.add(log.entry(i).data.buffer);
    const size = (buffers: Set<ArrayBufferLike>): number =>
      [...buffers].reduce((sum, b) => sum + b.byteLength, 0);
    assert.ok(size(held) < 1000 * 1000 + 2 * 16 * 1024, `${size(held)} bytes for 1,000,000`);
    log.compact(999, 1);
    const left = new Set([log.entry(1000).data.buffer]);
    assert.ok(size(left) <= 16 * 1024, `${size(left)} bytes held for one entry`);
    assert.deepEqual(log.entry(1000).data, bytesOf(1000, 1000));
  });
});
