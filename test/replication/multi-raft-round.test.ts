/**
 * needsSync: which Readies a round must make durable before their messages leave and their
 * entries apply (the rest of the round is exercised by multi-raft.test.ts and the simulation).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type Entry,
  type HardState,
  logIndex,
  nodeId,
  type Snapshot,
  term,
} from "../../src/raft/index.ts";
import { needsSync } from "../../src/replication/multi-raft-round.ts";
import type { WalHardState } from "../../src/storage/index.ts";

const entry = (index: number, type: Entry["type"] = "normal"): Entry => ({
  term: term(2),
  index: logIndex(index),
  type,
  data: new Uint8Array(0),
});
const hard = (t: number, vote: string | null, commit: number): HardState => ({
  term: term(t),
  vote: vote === null ? null : nodeId(vote),
  commit: logIndex(commit),
});

function ready(
  over: {
    entries?: Entry[];
    snapshot?: Snapshot | null;
    hardState?: HardState | null;
    committedEntries?: Entry[];
  } = {},
) {
  return {
    entries: over.entries ?? [],
    snapshot: over.snapshot ?? null,
    hardState: over.hardState ?? null,
    committedEntries: over.committedEntries ?? [],
  };
}

/** A WAL holding `state` for shard 7, and a group with `sole` as its sole-voter answer. */
function facts(state: WalHardState | undefined, sole = false) {
  const asked = { wal: 0, group: 0 };
  const wal = {
    hardState(shard: number): WalHardState | undefined {
      asked.wal++;
      assert.equal(shard, 7);
      return state;
    },
  };
  const group = {
    isSoleVoter(): boolean {
      asked.group++;
      return sole;
    },
  };
  return { wal, group, asked };
}

describe("needsSync", () => {
  it("syncs new entries and snapshots without asking the WAL or the group", () => {
    const f = facts({ term: 2, vote: "a", commit: 1 });
    assert.equal(needsSync(ready({ entries: [entry(2)] }), f.wal, 7, f.group), true);
    const snap = {
      meta: { index: logIndex(5), term: term(2), conf: { voters: [], learners: [] } },
      data: new Uint8Array(0),
    } as unknown as Snapshot;
    assert.equal(needsSync(ready({ snapshot: snap }), f.wal, 7, f.group), true);
    assert.deepEqual(f.asked, { wal: 0, group: 0 });
  });

  it("does not sync a Ready without a hard state", () => {
    const f = facts(undefined);
    assert.equal(needsSync(ready({ committedEntries: [entry(3)] }), f.wal, 7, f.group), false);
    assert.deepEqual(f.asked, { wal: 0, group: 0 });
  });

  it("syncs a first hard state, a new term and a new vote", () => {
    assert.equal(
      needsSync(
        ready({ hardState: hard(2, "a", 3) }),
        facts(undefined).wal,
        7,
        facts(undefined).group,
      ),
      true,
    );
    const older = facts({ term: 1, vote: "a", commit: 3 });
    assert.equal(needsSync(ready({ hardState: hard(2, "a", 3) }), older.wal, 7, older.group), true);
    const other = facts({ term: 2, vote: null, commit: 3 });
    assert.equal(needsSync(ready({ hardState: hard(2, "a", 3) }), other.wal, 7, other.group), true);
  });

  it("leaves a commit index that moved alone to a later sync (etcd's MustSync)", () => {
    const f = facts({ term: 2, vote: "a", commit: 3 });
    const rd = ready({ hardState: hard(2, "a", 5), committedEntries: [entry(4), entry(5)] });
    assert.equal(needsSync(rd, f.wal, 7, f.group), false);
  });

  it("syncs a moved commit index at once for a sole voter", () => {
    const f = facts({ term: 2, vote: "a", commit: 3 }, true);
    assert.equal(needsSync(ready({ hardState: hard(2, "a", 5) }), f.wal, 7, f.group), true);
  });

  it("syncs a moved commit index that covers a configuration change", () => {
    const f = facts({ term: 2, vote: "a", commit: 3 });
    const rd = ready({
      hardState: hard(2, "a", 5),
      committedEntries: [entry(4), entry(5, "conf-change")],
    });
    assert.equal(needsSync(rd, f.wal, 7, f.group), true);
  });
});
