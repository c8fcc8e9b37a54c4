import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  pickCompaction,
  pickWholeLevel,
  type PlannedFile,
  type PlannerConfig,
} from "../../src/storage/lsm/planner.ts";

const config: PlannerConfig = { l0Trigger: 4, levelBaseBytes: 100, sizeRatio: 10, levels: 7 };
const MiB = 1;

function file(number: number, smallest: string, largest: string, size = 10 * MiB): PlannedFile {
  return { number, size, smallest, largest };
}

const empty = (): PlannedFile[][] => Array.from({ length: 7 }, () => []);

describe("compaction planner", () => {
  it("does nothing while every level is within budget", () => {
    const levels = empty();
    levels[0] = [file(1, "a", "z"), file(2, "a", "z"), file(3, "a", "z")];
    levels[1] = [file(4, "a", "m", 50)];
    assert.equal(pickCompaction(levels, [], config), null);
  });

  it("merges every L0 file with the L1 files they overlap at the trigger", () => {
    const levels = empty();
    levels[0] = [file(1, "c", "d"), file(2, "e", "f"), file(3, "c", "f"), file(4, "d", "e")];
    levels[1] = [file(5, "a", "b"), file(6, "c", "d"), file(7, "f", "g"), file(8, "x", "y")];
    const pick = pickCompaction(levels, [], config);
    assert.equal(pick?.level, 0);
    assert.deepEqual(
      pick?.inputs.map((f) => f.number),
      [1, 2, 3, 4],
    );
    assert.deepEqual(
      pick?.overlaps.map((f) => f.number),
      [6, 7],
    );
  });

  it("picks the level furthest over its budget, round-robin through its key space", () => {
    const levels = empty();
    levels[0] = [file(1, "a", "b")];
    levels[1] = [file(2, "a", "c", 60), file(3, "d", "f", 60), file(4, "g", "i", 60)]; // 1.8×
    levels[2] = [file(5, "b", "e", 500)]; // 0.5×
    const first = pickCompaction(levels, [], config);
    assert.equal(first?.level, 1);
    assert.deepEqual(
      first?.inputs.map((f) => f.number),
      [2],
    );
    assert.deepEqual(
      first?.overlaps.map((f) => f.number),
      [5],
    );
    const pointers = [undefined, first?.pointer];
    const second = pickCompaction(levels, pointers, config);
    assert.deepEqual(
      second?.inputs.map((f) => f.number),
      [3],
    );
    const third = pickCompaction(levels, [undefined, "i"], config);
    assert.deepEqual(
      third?.inputs.map((f) => f.number),
      [2],
      "wraps around after the last file",
    );
  });

  it("never compacts the bottom level", () => {
    const levels = empty();
    levels[6] = [file(1, "a", "z", 10 ** 12)];
    assert.equal(pickCompaction(levels, [], config), null);
  });

  it("takes a whole level and the next level's overlapping files for a full compaction", () => {
    const levels = empty();
    levels[1] = [file(1, "b", "c"), file(2, "h", "k")];
    levels[2] = [file(3, "a", "a"), file(4, "c", "d"), file(5, "i", "j"), file(6, "x", "z")];
    const pick = pickWholeLevel(levels, 1);
    assert.equal(pick?.level, 1);
    assert.deepEqual(
      pick?.inputs.map((f) => f.number),
      [1, 2],
    );
    assert.deepEqual(
      pick?.overlaps.map((f) => f.number),
      [4, 5],
    );
    assert.equal(pickWholeLevel(levels, 0), null);
  });
});
