import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { seededRng, shuffle } from "../../src/common/index.ts";

describe("seededRng", () => {
  it("replays the same sequence for the same seed", () => {
    const a = seededRng(42);
    const b = seededRng(42);
    for (let i = 0; i < 1000; i++) assert.equal(a.nextU32(), b.nextU32());
  });

  it("gives different sequences for different seeds", () => {
    const a = seededRng(1);
    const b = seededRng(2);
    const sa = Array.from({ length: 8 }, () => a.nextU32());
    const sb = Array.from({ length: 8 }, () => b.nextU32());
    assert.notDeepEqual(sa, sb);
  });

  it("int(n) stays in range and covers it roughly uniformly", () => {
    const rng = seededRng(7);
    const counts = new Array<number>(10).fill(0);
    for (let i = 0; i < 100_000; i++) {
      const x = rng.int(10);
      assert.ok(x >= 0 && x < 10);
      counts[x] = (counts[x] ?? 0) + 1;
    }
    for (const c of counts) assert.ok(c > 9_000 && c < 11_000, `bucket count ${c}`);
  });

  it("rejects a bad bound", () => {
    const rng = seededRng(7);
    assert.throws(() => rng.int(0), RangeError);
    assert.throws(() => rng.int(1.5), RangeError);
  });

  it("float() is in [0, 1)", () => {
    const rng = seededRng(9);
    for (let i = 0; i < 10_000; i++) {
      const f = rng.float();
      assert.ok(f >= 0 && f < 1);
    }
  });

  it("shuffle puts every item somewhere, in an order the seed replays", () => {
    const items = Array.from({ length: 20 }, (_, i) => i);
    const a = [...items];
    const b = [...items];
    shuffle(a, seededRng(5));
    shuffle(b, seededRng(5));
    assert.deepEqual(a, b);
    assert.notDeepEqual(a, items);
    assert.deepEqual(
      [...a].sort((x, y) => x - y),
      items,
    );
    // Each first place about equally often.
    const firsts = new Array<number>(4).fill(0);
    const rng = seededRng(9);
    for (let i = 0; i < 40_000; i++) {
      const four = [0, 1, 2, 3];
      shuffle(four, rng);
      firsts[four[0] as number] = (firsts[four[0] as number] ?? 0) + 1;
    }
    for (const c of firsts) assert.ok(c > 9_000 && c < 11_000, `first-place count ${c}`);
  });
});
