/**
 * `cairn node decommission --wait` (followDecommission, src/cli/ops-commands.ts): it prints each
 * change of the replicas left, and says once what a move needs when none leaves for a while.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { followDecommission, type Standing } from "../../src/cli/ops-commands.ts";

/** Runs followDecommission over `answers` (one a poll) on a clock that each sleep moves on. */
async function follow(answers: readonly [state: string, replicas: number][]) {
  let clock = 0;
  let next = 0;
  const printed: string[] = [];
  const stalls: string[] = [];
  const at = (a: [string, number] | undefined): Standing => {
    assert.ok(a !== undefined, "polled past the last answer");
    return { nodeId: "n2", state: a[0], replicas: a[1] };
  };
  const last = await followDecommission(at(["decommissioning", 12]), {
    poll: () => Promise.resolve(at(answers[next++])),
    print: (s) => printed.push(`${clock / 1000}s ${s.state} ${s.replicas}`),
    stalled: (s, ms) => stalls.push(`${clock / 1000}s ${s.replicas} left, ${ms / 1000}s`),
    everyMs: 1_000,
    stallMs: 5_000,
    sleep: (ms) => {
      clock += ms;
      return Promise.resolve();
    },
    now: () => clock,
  });
  return { last, printed, stalls, polls: next };
}

describe("cairn node decommission --wait", () => {
  it("prints each change until the member is decommissioned", async () => {
    const r = await follow([
      ["decommissioning", 12],
      ["decommissioning", 7],
      ["decommissioning", 7],
      ["decommissioning", 0],
      ["decommissioned", 0],
    ]);
    assert.deepEqual(r.printed, [
      "2s decommissioning 7",
      "4s decommissioning 0",
      "5s decommissioned 0",
    ]);
    assert.deepEqual(r.stalls, []);
    assert.equal(r.last.state, "decommissioned");
    assert.equal(r.polls, 5);
  });

  it("says once what a move needs when no replica leaves, and again after a later stall", async () => {
    const stuck = (n: number, replicas: number): [string, number][] =>
      Array.from({ length: n }, () => ["decommissioning", replicas] as [string, number]);
    const r = await follow([
      ...stuck(8, 12), // 8 s without a replica leaving: one notice, at 5 s
      ["decommissioning", 11],
      ...stuck(6, 11), // another 6 s: a second notice, 5 s after the last change
      ["decommissioned", 0],
    ]);
    assert.deepEqual(r.stalls, ["5s 12 left, 5s", "14s 11 left, 5s"]);
    assert.deepEqual(r.printed, ["9s decommissioning 11", "16s decommissioned 0"]);
  });

  it("ends when the member stops decommissioning otherwise: recommissioned, or dead", async () => {
    // Recommissioned with replicas still on it: the wait ends there (it used to poll with
    // DecommissionNode, which decommissioned the member again).
    const back = await follow([
      ["decommissioning", 9],
      ["active", 9],
    ]);
    assert.deepEqual(back.printed, ["1s decommissioning 9", "2s active 9"]);
    assert.equal(back.last.state, "active");
    assert.equal(back.polls, 2);
    // Dead while decommissioning (a meta leader of an earlier build marked an unreachable
    // decommissioning member dead): it never becomes decommissioned; the wait ends at once.
    const dead = await follow([["dead", 12]]);
    assert.deepEqual(dead.printed, ["1s dead 12"]);
    assert.equal(dead.last.state, "dead");
    assert.equal(dead.polls, 1);
  });
});
