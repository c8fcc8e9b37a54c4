import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { DenseMap } from "../../src/common/index.ts";

type Op =
  { kind: "set"; key: number; value: number } | { kind: "delete"; key: number } | { kind: "clear" };

const key = fc.oneof(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 2000 }));
const op: fc.Arbitrary<Op> = fc.oneof(
  {
    weight: 10,
    arbitrary: fc.record({ kind: fc.constant("set" as const), key, value: fc.integer() }),
  },
  { weight: 6, arbitrary: fc.record({ kind: fc.constant("delete" as const), key }) },
  { weight: 1, arbitrary: fc.constant({ kind: "clear" as const }) },
);

describe("DenseMap", () => {
  it("behaves as a Map under any sequence of sets, deletes and clears, and iterates in key order", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 300 }), (ops) => {
        const ours = new DenseMap<number>();
        const model = new Map<number, number>();
        for (const o of ops) {
          if (o.kind === "set") {
            ours.set(o.key, o.value);
            model.set(o.key, o.value);
          } else if (o.kind === "delete") {
            assert.equal(ours.delete(o.key), model.delete(o.key));
          } else {
            ours.clear();
            model.clear();
          }
          assert.equal(ours.size, model.size);
        }
        const sorted = [...model.entries()].sort((a, b) => a[0] - b[0]);
        assert.deepEqual([...ours], sorted);
        assert.deepEqual([...ours.entries()], sorted);
        assert.deepEqual(
          [...ours.keys()],
          sorted.map(([k]) => k),
        );
        assert.deepEqual(
          [...ours.values()],
          sorted.map(([, v]) => v),
        );
        for (let k = 0; k <= 2001; k++) {
          assert.equal(ours.get(k), model.get(k));
          assert.equal(ours.has(k), model.has(k));
        }
      }),
      { numRuns: 200 },
    );
  });

  it("copies: a clone and its original change apart, and of() builds from entries", () => {
    const original = DenseMap.of<string>([
      [3, "a"],
      [7, "b"],
      [3, "c"],
    ]);
    assert.deepEqual(
      [...original],
      [
        [3, "c"],
        [7, "b"],
      ],
    );
    const copy = original.clone();
    copy.set(9, "d");
    copy.delete(7);
    original.set(1, "e");
    assert.deepEqual(
      [...original],
      [
        [1, "e"],
        [3, "c"],
        [7, "b"],
      ],
    );
    assert.deepEqual(
      [...copy],
      [
        [3, "c"],
        [9, "d"],
      ],
    );
    assert.equal(original.size, 3);
    assert.equal(copy.size, 2);
  });

  it("refuses keys it cannot index and undefined values; absent keys read as absent", () => {
    const m = new DenseMap<string>();
    for (const bad of [-1, 1.5, Number.NaN, DenseMap.MAX_KEY + 1, 2 ** 40]) {
      assert.throws(() => m.set(bad, "x"), RangeError, String(bad));
      assert.equal(m.get(bad), undefined);
      assert.equal(m.has(bad), false);
      assert.equal(m.delete(bad), false);
    }
    assert.throws(() => new DenseMap<string | undefined>().set(1, undefined), RangeError);
    m.set(DenseMap.MAX_KEY, "last");
    assert.equal(m.get(DenseMap.MAX_KEY), "last");
    assert.equal(m.size, 1);
  });
});
