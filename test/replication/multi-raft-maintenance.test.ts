/**
 * retainedFrom: how far a group's log may be compacted. Each case names the rule that decides:
 * a follower compacts to what its engine holds; a leader keeps what its slowest member still
 * needs, but never more than RETAINED_ENTRIES beyond what its engine holds.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type ConfState,
  type LogIndex,
  logIndex,
  nodeId,
  type NodeId,
  type Role,
} from "../../src/raft/index.ts";
import { RETAINED_ENTRIES, retainedFrom } from "../../src/replication/multi-raft-maintenance.ts";

const conf = (voters: string[], learners: string[] = []): ConfState =>
  ({ voters: voters.map(nodeId), learners: learners.map(nodeId) }) as unknown as ConfState;

function group(role: Role, matches: Record<string, number | null>) {
  return {
    role,
    matchOf(id: NodeId): LogIndex | null {
      const m = matches[id];
      return m === undefined || m === null ? null : logIndex(m);
    },
  };
}

const self = nodeId("a");

describe("retainedFrom", () => {
  it("a follower compacts to what its engine holds (it sends no entries)", () => {
    const raw = group("follower", { b: 10, c: 20 });
    assert.equal(retainedFrom(raw, conf(["a", "b", "c"]), self, 500), 500);
  });

  it("a leader keeps what its slowest member still needs", () => {
    const raw = group("leader", { a: 1, b: 300, c: 450 });
    assert.equal(retainedFrom(raw, conf(["a", "b", "c"]), self, 500), 300);
  });

  it("a learner behind counts as a voter does", () => {
    const raw = group("leader", { b: 480, d: 120 });
    assert.equal(retainedFrom(raw, conf(["a", "b"], ["d"]), self, 500), 120);
  });

  it("a leader's own match index and members ahead of its engine do not hold it back", () => {
    const raw = group("leader", { a: 0, b: 900, c: 700 });
    assert.equal(retainedFrom(raw, conf(["a", "b", "c"]), self, 500), 500);
  });

  it("a member whose match is unknown holds nothing back", () => {
    const raw = group("leader", { b: null, c: 480 });
    assert.equal(retainedFrom(raw, conf(["a", "b", "c"]), self, 500), 480);
  });

  it("never keeps more than RETAINED_ENTRIES beyond what the engine holds", () => {
    const flushed = RETAINED_ENTRIES + 2_000;
    const raw = group("leader", { b: 10, c: flushed });
    assert.equal(retainedFrom(raw, conf(["a", "b", "c"]), self, flushed), 2_000);
  });

  it("a leader alone compacts to what its engine holds", () => {
    assert.equal(retainedFrom(group("leader", { a: 42 }), conf(["a"]), self, 500), 500);
  });
});
