import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { KIND_DELETE, KIND_PUT } from "../../src/storage/lsm/format.ts";
import {
  Memtable,
  sortByKey,
  versionAt,
  versionCount,
  type MemNode,
} from "../../src/storage/lsm/memtable.ts";

/** Keys from a small alphabet with 0x00 and 0xff, short and long, so keys collide and nest. */
const keyArb = fc
  .array(fc.constantFrom("\x00", "a", "b", "\xff"), { minLength: 0, maxLength: 5 })
  .map((chars) => chars.join(""));

type Step =
  { op: "put"; key: string; del: boolean; sameSeq: boolean } | { op: "seek"; key: string | null };

const stepArb: fc.Arbitrary<Step> = fc.oneof(
  {
    weight: 6,
    arbitrary: fc.record({
      op: fc.constant("put" as const),
      key: keyArb,
      del: fc.boolean(),
      sameSeq: fc.boolean(),
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
  it("sorts nodes by key as a string comparison does: common prefixes, ties past four characters, short keys, zero bytes", () => {
    // Keys as binary strings: a shared prefix (the storage prefix of every KV key), then a few
    // characters from a small alphabet (ties in sortByKey's four characters) or any byte.
    const char = fc.oneof(
      fc.constantFrom("\u0000", "a", "b", "\u00ff"),
      fc.integer({ min: 0, max: 255 }).map((c) => String.fromCharCode(c)),
    );
    const key = fc
      .tuple(fc.constantFrom("", "d", "user:"), fc.array(char, { maxLength: 9 }))
      .map(([prefix, chars]) => prefix + chars.join(""));
    fc.assert(
      fc.property(fc.uniqueArray(key, { maxLength: 300 }), (keys) => {
        const nodes = keys.map((k, i): MemNode => ({
          key: k,
          seq: i,
          kind: KIND_PUT,
          value: new Uint8Array(0),
          size: 0,
          older: null,
          next: [],
        }));
        const sorted = sortByKey(nodes).map((n) => n.key);
        assert.deepEqual(sorted, [...keys].sort());
        assert.deepEqual(
          nodes.map((n) => n.key),
          keys,
          "the input is left as it was",
        );
      }),
      { numRuns: 500 },
    );
  });

  it("iterates every key in order from any seek or flush, however puts and seeks interleave", () => {
    fc.assert(
      fc.property(fc.array(stepArb, { maxLength: 300 }), (steps) => {
        const mem = new Memtable();
        // The model: key → versions (seq, kind), newest first.
        const model = new Map<string, Array<[number, number]>>();
        let seq = 0;
        for (const step of steps) {
          if (step.op === "put") {
            if (!step.sameSeq || seq === 0) seq++;
            const kind = step.del ? KIND_DELETE : KIND_PUT;
            mem.put(step.key, seq, kind, new Uint8Array([seq & 0xff]));
            const versions = model.get(step.key) ?? [];
            if (versions[0]?.[0] === seq) versions[0] = [seq, kind];
            else versions.unshift([seq, kind]);
            model.set(step.key, versions);
          } else {
            const from = step.key ?? undefined;
            const want = [...model.keys()].filter((k) => from === undefined || k >= from).sort();
            // The flush's order (the pending keys sorted, not linked) before the seek links them.
            assert.deepEqual(
              mem.sortedNodes().map((n) => n.key),
              [...model.keys()].sort(),
            );
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
          }
          for (const [key, versions] of model) {
            const [newest, kind] = versions[0] as [number, number];
            const got = mem.get(key, seq);
            if (kind === KIND_DELETE) assert.equal(got, null);
            else assert.deepEqual(got, new Uint8Array([newest & 0xff]));
          }
        }
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
  it("replaces a key's versions when no reader needs them, counting its bytes as a fresh key's", () => {
    const v = (n: number): Uint8Array => new Uint8Array(n).fill(n);
    const kept = new Memtable();
    kept.put("k", 1, KIND_PUT, v(10));
    kept.put("k", 2, KIND_PUT, v(20));
    kept.put("k", 3, KIND_DELETE, v(0));
    assert.equal(kept.versions, 3);
    // A later write no reader below it needs: one version left.
    kept.put("k", 4, KIND_PUT, v(30), false);
    const fresh = new Memtable();
    fresh.put("k", 4, KIND_PUT, v(30));
    for (const m of [kept, fresh]) {
      assert.equal(versionCount(m.seek("k") as MemNode), 1);
      assert.deepEqual(m.get("k", 4), v(30));
      assert.equal(m.get("k", 3), undefined);
    }
    assert.equal(kept.versions, fresh.versions);
    assert.equal(kept.bytes, fresh.bytes);
    assert.equal(kept.dataBytes, fresh.dataBytes);
    // Two writes of one batch (one sequence) still keep the versions below it.
    kept.put("k", 5, KIND_PUT, v(40));
    kept.put("k", 5, KIND_PUT, v(50));
    assert.equal(kept.versions, 2);
    assert.deepEqual(kept.get("k", 4), v(30));
    assert.deepEqual(kept.get("k", 5), v(50));
    // Replaced twice more with no reader below: still counted as a fresh key's one version.
    kept.put("k", 6, KIND_PUT, v(7), false);
    kept.put("k", 7, KIND_PUT, v(12), false);
    const again = new Memtable();
    again.put("k", 7, KIND_PUT, v(12));
    assert.equal(kept.bytes, again.bytes);
    assert.equal(kept.dataBytes, again.dataBytes);
  });
});
