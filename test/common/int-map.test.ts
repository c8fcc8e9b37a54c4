import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { IntMap } from "../../src/common/index.ts";

type Op = { kind: "set"; key: number; value: number } | { kind: "delete"; key: number };

/** Keys as the tables see them: a few sequential or strided runs, some negative, some large. */
const key = fc.oneof(
  fc.integer({ min: 0, max: 64 }),
  fc.integer({ min: -40, max: 40 }).map((k) => k * 2 + 1),
  fc.integer({ min: 0, max: 20 }).map((k) => 2 ** 40 + k),
  fc.integer({ min: -20, max: 0 }).map((k) => -(2 ** 33) + k),
);
const op: fc.Arbitrary<Op> = fc.oneof(
  fc.record({ kind: fc.constant("set" as const), key, value: fc.integer() }),
  fc.record({ kind: fc.constant("delete" as const), key }),
);

describe("IntMap", () => {
  it("behaves as a Map under any sequence of sets and deletes (growth and backward shifts included)", () => {
    fc.assert(
      fc.property(fc.array(op, { maxLength: 400 }), fc.integer({ min: 1, max: 64 }), (ops, cap) => {
        const ours = new IntMap<number>(cap);
        const model = new Map<number, number>();
        for (const o of ops) {
          if (o.kind === "set") {
            ours.set(o.key, o.value);
            model.set(o.key, o.value);
          } else {
            assert.equal(ours.delete(o.key), model.delete(o.key));
          }
          assert.equal(ours.size, model.size);
        }
        for (const [k, v] of model) {
          assert.equal(ours.get(k), v);
          assert.ok(ours.has(k));
        }
        const sorted = (xs: [number, number][]): [number, number][] =>
          xs.toSorted((a, b) => a[0] - b[0]);
        assert.deepEqual(sorted(ours.entries()), sorted([...model.entries()]));
        assert.deepEqual(
          ours.values().toSorted((a, b) => a - b),
          [...model.values()].toSorted((a, b) => a - b),
        );
      }),
      { numRuns: 300 },
    );
  });

  it("keeps its size steady under a sliding window of ids (the in-flight pattern)", () => {
    const m = new IntMap<string>();
    for (let id = 1; id <= 100_000; id++) {
      m.set(id, `v${id}`);
      if (id > 256) assert.equal(m.delete(id - 256), true);
    }
    assert.equal(m.size, 256);
    assert.equal(m.get(100_000), "v100000");
    assert.equal(m.get(100_000 - 256), undefined);
  });

  it("gives snapshots: deleting while walking values() visits every value once", () => {
    const m = new IntMap<number>();
    for (let i = 0; i < 50; i++) m.set(i * 7, i);
    const seen: number[] = [];
    for (const v of m.values()) {
      seen.push(v);
      m.delete(v * 7);
    }
    assert.equal(seen.length, 50);
    assert.equal(m.size, 0);
  });

  it("refuses a key that is not a safe integer, and clear() empties it", () => {
    const m = new IntMap<number>();
    assert.throws(() => m.set(1.5, 1), RangeError);
    assert.throws(() => m.set(Number.NaN, 1), RangeError);
    assert.throws(() => m.set(2 ** 53, 1), RangeError);
    m.set(1, 1).set(2, 2);
    m.clear();
    assert.equal(m.size, 0);
    assert.equal(m.get(1), undefined);
  });
});
