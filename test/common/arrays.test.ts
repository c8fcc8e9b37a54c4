import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { clearArray, dropFront } from "../../src/common/index.ts";

describe("array helpers that keep the backing store", () => {
  it("clearArray empties the array in place", () => {
    const a: number[] = [1, 2, 3];
    const same = a;
    clearArray(a);
    assert.equal(same, a);
    assert.equal(a.length, 0);
    a.push(4);
    assert.deepEqual(a, [4]);
  });

  it("dropFront removes the first n elements in place, as slice(n) would, for any n", () => {
    fc.assert(
      fc.property(fc.array(fc.integer()), fc.integer({ min: -2, max: 40 }), (items, n) => {
        const a = [...items];
        const same = a;
        dropFront(a, n);
        assert.equal(same, a);
        assert.deepEqual(a, items.slice(Math.max(n, 0)));
        // The array stays usable: a push lands right after what was kept.
        a.push(7);
        assert.deepEqual(a, [...items.slice(Math.max(n, 0)), 7]);
      }),
    );
  });
});
