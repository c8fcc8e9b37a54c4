import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { entryLength, EntryCursor, KIND_DELETE, KIND_PUT } from "../../src/storage/lsm/format.ts";
import { keyOrder } from "../../src/storage/lsm/key-order.ts";
import { Memtable, versionAt, versionCount, type MemNode } from "../../src/storage/lsm/memtable.ts";

/** Keys from a small alphabet with 0x00 and 0xff, short and long, so keys collide and nest. */
const keyArb = fc
  .array(fc.constantFrom("\x00", "a", "b", "\xff"), { minLength: 0, maxLength: 5 })
  .map((chars) => chars.join(""));

type Step =
  | { op: "put"; key: string; del: boolean; sameSeq: boolean; len: number }
  | { op: "seek"; key: string | null };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      op: fc.constant("put" as const),
      key: keyArb,
      del: fc.boolean(),
      sameSeq: fc.boolean(),
      // Up to a few hundred bytes: the arena's first chunks fill and new ones start.
      len: fc.integer({ min: 0, max: 400 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ op: fc.constant("seek" as const), key: fc.option(keyArb) }) },
);

function walk(from: MemNode | null): MemNode[] {
  const nodes: MemNode[] = [];
  for (let n = from; n !== null; n = n.next[0] ?? null) nodes.push(n);
  return nodes;
}

describe("memtable", () => {
  it("orders keys as a string comparison does: common prefixes, ties past four characters, short keys, zero bytes, equal keys by the tie-break", () => {
    // Keys as binary strings: a shared prefix (the storage prefix of every KV key), then a few
    // characters from a small alphabet (ties in keyOrder's four characters) or any byte; a
    // character past 0xff now and then (compared whole). Keys repeat: the tie-break orders them.
    const char = fc.oneof(
      fc.constantFrom("\u0000", "a", "b", "\u00ff"),
      fc.integer({ min: 0, max: 255 }).map((c) => String.fromCharCode(c)),
    );
    const key = fc
      .tuple(fc.constantFrom("", "d", "user:"), fc.array(char, { maxLength: 9 }))
      .map(([prefix, chars]) => prefix + chars.join(""));
    const keys = fc.oneof(
      { weight: 9, arbitrary: fc.array(key, { maxLength: 300 }) },
      { weight: 1, arbitrary: fc.array(fc.oneof(key, fc.constant("\u0100")), { maxLength: 50 }) },
    );
    fc.assert(
      fc.property(keys, (list) => {
        const laterFirst = (a: number, b: number): number => b - a;
        const want = list
          .map((_, i) => i)
          .sort((a, b) => {
            const [ka, kb] = [list[a] as string, list[b] as string];
            return ka < kb ? -1 : ka > kb ? 1 : laterFirst(a, b);
          });
        assert.deepEqual([...keyOrder(list, laterFirst)], want);
      }),
      { numRuns: 500 },
    );
  });

  it("iterates every key in order from any seek or flush, however puts and seeks interleave", () => {
    fc.assert(
      fc.property(fc.array(stepArb, { maxLength: 300 }), (steps) => {
        const mem = new Memtable();
        // The model: key → versions (seq, kind, value), newest first; and every write in order.
        const model = new Map<string, Array<[number, number, Buffer]>>();
        const written: Array<[string, number, number, Buffer]> = [];
        let seq = 0;
        const readAll = (): void => {
          for (const [key, versions] of model) {
            const [, kind, value] = versions[0] as [number, number, Buffer];
            const got = mem.get(key, seq);
            if (kind === KIND_DELETE) assert.equal(got, null);
            else assert.deepEqual(Buffer.from(got as Uint8Array), value);
          }
        };
        for (const step of steps) {
          if (step.op === "put") {
            if (!step.sameSeq || seq === 0) seq++;
            const kind = step.del ? KIND_DELETE : KIND_PUT;
            const value = step.del ? Buffer.alloc(0) : Buffer.alloc(step.len, written.length);
            mem.put(step.key, seq, kind, value);
            written.push([step.key, kind, seq, value]);
            const versions = model.get(step.key) ?? [];
            if (versions[0]?.[0] === seq) versions[0] = [seq, kind, value];
            else versions.unshift([seq, kind, value]);
            model.set(step.key, versions);
          } else {
            const from = step.key ?? undefined;
            const want = [...model.keys()].filter((k) => from === undefined || k >= from).sort();
            const got = walk(mem.seek(from));
            assert.deepEqual(
              got.map((n) => n.key),
              want,
            );
            for (const node of got) {
              const versions = model.get(node.key) ?? [];
              assert.equal(versionCount(node), versions.length);
              versions.forEach(([s, kind], i) => {
                assert.equal(versionAt(node, i).seq, s);
                assert.equal(versionAt(node, i).kind, kind);
              });
            }
            // Point reads only at a seek: the puts between two reads are indexed together.
            readAll();
          }
        }
        readAll();
        // The arena holds every write, in order, as table entries.
        const arena: Array<[string, number, number, Buffer]> = [];
        let dataBytes = 0;
        for (const chunk of mem.arena()) {
          const data = Buffer.from(chunk.buffer, chunk.byteOffset, chunk.length);
          const entry = new EntryCursor();
          for (let at = 0; at < data.length; at = entry.end) {
            entry.read(data, at);
            const value = Buffer.from(data.subarray(entry.end - entry.valueLength, entry.end));
            arena.push([entry.key, entry.kind, entry.seq, value]);
            dataBytes += entry.end - at;
          }
        }
        assert.deepEqual(arena, written);
        assert.equal(mem.dataBytes, dataBytes);
        assert.deepEqual(
          walk(mem.seek(undefined)).map((n) => n.key),
          [...model.keys()].sort(),
        );
        assert.equal(mem.keyCount, model.size);
      }),
      { numRuns: 300 },
    );
  });

  it("keeps an iteration that started before later puts valid, ending at keys it was shown", () => {
    const mem = new Memtable();
    for (const k of ["b", "d", "f"]) mem.put(k, 1, KIND_PUT, new Uint8Array());
    const first = mem.seek(undefined);
    for (const k of ["a", "c", "e", "g"]) mem.put(k, 2, KIND_PUT, new Uint8Array());
    // Not linked yet: the walk sees the keys of its seek (the later ones have newer sequences,
    // which a reader at the older snapshot filters out anyway).
    assert.deepEqual(
      walk(first).map((n) => n.key),
      ["b", "d", "f"],
    );
    assert.deepEqual(
      walk(mem.seek(undefined)).map((n) => n.key),
      ["a", "b", "c", "d", "e", "f", "g"],
    );
  });
  it("indexes when read, replacing a key's versions when no reader needs them; the arena keeps every write's bytes until the flush", () => {
    const v = (n: number): Buffer => Buffer.alloc(n, n);
    let readers = true;
    const kept = new Memtable(() => readers);
    kept.put("k", 1, KIND_PUT, v(10));
    kept.put("k", 2, KIND_PUT, v(20));
    kept.put("k", 3, KIND_DELETE, v(0));
    // Nothing is indexed before a read: the memory is the arena's first chunk.
    assert.equal(kept.bytes, 1024);
    assert.equal(kept.versions, 3);
    assert.ok(kept.bytes > 1024, "the index, built by the read, is counted");
    // Entries indexed while no reader is open: one version left.
    readers = false;
    kept.put("k", 4, KIND_PUT, v(30));
    const fresh = new Memtable();
    fresh.put("k", 4, KIND_PUT, v(30));
    for (const m of [kept, fresh]) {
      assert.equal(versionCount(m.seek("k") as MemNode), 1);
      assert.deepEqual(m.get("k", 4), v(30));
      assert.equal(m.get("k", 3), undefined);
    }
    assert.equal(kept.versions, fresh.versions);
    // Two writes of one batch (one sequence) still keep the versions below it while a reader is
    // open; the later one is the newest.
    readers = true;
    kept.put("k", 5, KIND_PUT, v(40));
    kept.put("k", 5, KIND_PUT, v(50));
    assert.equal(kept.versions, 2);
    assert.deepEqual(kept.get("k", 4), v(30));
    assert.deepEqual(kept.get("k", 5), v(50));
    // Two writes indexed at once with no reader: the newest alone.
    readers = false;
    kept.put("k", 6, KIND_PUT, v(7));
    kept.put("k", 7, KIND_PUT, v(12));
    assert.equal(kept.versions, 1);
    assert.deepEqual(kept.get("k", 7), v(12));
    assert.equal(kept.get("k", 6), undefined);
    // Every write's entry stays in the arena (the flush drops the replaced ones), so the data
    // that drives rotation grows with each write, as LevelDB's arena does.
    const sizes = [10, 20, 0, 30, 40, 50, 7, 12];
    assert.equal(
      kept.dataBytes,
      sizes.reduce((sum, n) => sum + entryLength(1, n), 0),
    );
  });

  it("starts a chunk that fits a value larger than the largest chunk", () => {
    const mem = new Memtable();
    const big = Buffer.alloc(3 << 20, 7);
    const long = "k".repeat(100);
    mem.put("a", 1, KIND_PUT, Buffer.from("small"));
    mem.put(long, 2, KIND_PUT, big);
    mem.put("b", 3, KIND_PUT, Buffer.from("after"));
    assert.deepEqual(Buffer.from(mem.get(long, 3) as Uint8Array), big);
    assert.deepEqual(Buffer.from(mem.get("b", 3) as Uint8Array), Buffer.from("after"));
    assert.equal(
      mem.dataBytes,
      entryLength(1, 5) + entryLength(100, big.length) + entryLength(1, 5),
    );
    assert.ok(mem.bytes >= mem.dataBytes);
  });
});
