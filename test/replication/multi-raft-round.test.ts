/**
 * needsSync: which Readies a round must make durable before their messages leave and their
 * entries apply; and RoundLoop's scheduling: marked groups, one round at a time. (The round's
 * persistence and sending are exercised by multi-raft.test.ts and the driver simulation.)
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
import { needsSync, RoundLoop } from "../../src/replication/multi-raft-round.ts";
import type { ShardReplica } from "../../src/replication/shard.ts";
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

/**
 * A WAL holding `state` for shard 7 (appended), synced up to commit `synced` (that of `state`
 * unless given), and a group with `sole` as its sole-voter answer.
 */
function facts(state: WalHardState | undefined, sole = false, synced = state?.commit ?? 0) {
  const asked = { wal: 0, group: 0 };
  const wal = {
    hardState(shard: number): WalHardState | undefined {
      asked.wal++;
      assert.equal(shard, 7);
      return state;
    },
    durableCommit(shard: number): number {
      asked.wal++;
      assert.equal(shard, 7);
      return synced;
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

  it("syncs a Ready with no hard state carrying a configuration change no synced commit covers", () => {
    // The commit moved past the change in an earlier Ready (appended, not synced), which did
    // not carry it: committed entries come in Readies of bounded size. Applied unsynced before
    // (an audit, 2026-12-05).
    const appended = facts({ term: 2, vote: "a", commit: 8 }, false, 3);
    const rd = ready({ committedEntries: [entry(6), entry(7, "conf-change")] });
    assert.equal(needsSync(rd, appended.wal, 7, appended.group), true);
    const synced = facts({ term: 2, vote: "a", commit: 8 }, false, 8);
    assert.equal(needsSync(rd, synced.wal, 7, synced.group), false);
  });
});

interface Group {
  id: number;
  marked: boolean;
  applying: Promise<void> | null;
  installed: null;
  refill: null;
  visits: number;
  raw: { hasReady(): boolean };
  maybeCampaign(): null;
  expire(now: number, timeoutMs: number): void;
  drainInbox(now: number, maxAgeMs: number): void;
}

function group(id: number): Group {
  return {
    id,
    marked: false,
    applying: null,
    installed: null,
    refill: null,
    visits: 0,
    raw: { hasReady: () => false },
    maybeCampaign: () => null,
    expire() {},
    drainInbox() {
      this.visits++;
    },
  };
}

/** A round loop over a clock whose deferred rounds run when the test says. */
function loop() {
  const deferred: (() => void)[] = [];
  const tracked: number[] = [];
  const state = { closed: false, failed: false };
  const rounds = new RoundLoop({
    options: { tickMs: 100, electionTicks: 10 },
    observer: undefined,
    metaVoters: null,
    replicaId: nodeId("n1"),
    replicasOf: () => [],
    clock: { now: () => 0, every: () => () => undefined, defer: (fn) => deferred.push(fn) },
    wal: {
      append: () => assert.fail("no records"),
      sync: () => assert.fail("no sync"),
      hardState: () => undefined,
    } as never,
    requestTimeoutMs: 10_000,
    testingBugs: {},
    closed: () => state.closed,
    failed: () => state.failed,
    stopped: () => state.closed || state.failed,
    fail: (err) => assert.fail(err as Error),
    sleep: { trackSleep: (s) => tracked.push(s.id) },
    peers: { report: () => undefined },
    applier: { applyReady: () => null, applyingUntil: () => undefined },
  });
  /** Runs the deferred rounds, and the rounds they schedule, to the end. */
  const run = async (): Promise<void> => {
    while (deferred.length > 0) {
      (deferred.shift() as () => void)();
      await rounds.whenIdle();
    }
  };
  const as = (g: Group) => g as unknown as ShardReplica;
  return { rounds, deferred, tracked, state, run, as };
}

describe("RoundLoop", () => {
  it("runs one round for the groups marked meanwhile, each visited once", async () => {
    const l = loop();
    const [a, b] = [group(1), group(2)];
    l.rounds.markDirty(l.as(a));
    l.rounds.markDirty(l.as(b));
    l.rounds.markDirty(l.as(a));
    assert.equal(l.deferred.length, 1, "one round scheduled");
    await l.run();
    assert.deepEqual([a.visits, b.visits], [1, 1]);
    assert.deepEqual(l.tracked, [1, 2]);
    assert.equal(a.marked, false);
  });

  it("mark alone schedules nothing (the ticker schedules once for every group it marks)", async () => {
    const l = loop();
    const a = group(1);
    l.rounds.mark(l.as(a));
    assert.equal(l.deferred.length, 0);
    l.rounds.scheduleRound();
    await l.run();
    assert.equal(a.visits, 1);
  });

  it("a group sits rounds out while its last apply runs", async () => {
    const l = loop();
    const a = group(1);
    a.applying = Promise.resolve();
    l.rounds.markDirty(l.as(a));
    await l.run();
    assert.equal(a.visits, 0);
  });

  it("a group marked during a round goes into the next one", async () => {
    const l = loop();
    const a = group(1);
    const b = group(2);
    a.drainInbox = function () {
      this.visits++;
      if (this.visits === 1) l.rounds.markDirty(l.as(b));
    };
    l.rounds.markDirty(l.as(a));
    await l.run();
    assert.deepEqual([a.visits, b.visits], [1, 1]);
  });

  it("schedules no round on a closed or failed node, and a failed node's round drops its marks", async () => {
    const l = loop();
    const a = group(1);
    l.state.closed = true;
    l.rounds.markDirty(l.as(a));
    assert.equal(l.deferred.length, 0);
    l.state.closed = false;
    l.rounds.markDirty(l.as(a));
    l.state.failed = true;
    await l.run();
    assert.equal(a.visits, 0);
    assert.equal(a.marked, false);
  });
});
