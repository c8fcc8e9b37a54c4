/**
 * Quiesce: the ticker ticks the groups awake here only, keeps its list in step with each group
 * (trackSleep), tells the observer how many are awake when that changes, and wakes the groups a
 * suspected node leads. Groups here are stand-ins with the fields the ticker reads and writes.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { nodeId } from "../../src/raft/index.ts";
import { Quiesce } from "../../src/replication/multi-raft-quiesce.ts";
import type { ShardTable } from "../../src/replication/multi-raft-options.ts";
import type { ShardReplica } from "../../src/replication/shard.ts";

interface Group {
  id: number;
  ticking: boolean;
  listedTicking: boolean;
  ticks: number;
  pendingOperations: number;
  raw: { quiesced: boolean; lead: string | null };
  reports: unknown[];
  enqueueReport(r: unknown): void;
}

function group(id: number, lead: string | null = null): Group {
  return {
    id,
    ticking: false,
    listedTicking: false,
    ticks: 0,
    pendingOperations: 0,
    raw: { quiesced: false, lead },
    reports: [],
    enqueueReport(r: unknown) {
      this.reports.push(r);
    },
  };
}

function harness(groups: Group[] = []) {
  const marked: number[] = [];
  const dirty: number[] = [];
  const awake: number[] = [];
  let rounds = 0;
  let dropped = 0;
  let stopped = false;
  const table = new Map(groups.map((g) => [g.id, g]));
  const quiesce = new Quiesce({
    shards: table as unknown as ShardTable,
    nodeId: nodeId("n1"),
    observer: { awakeGroups: (n) => awake.push(n) },
    stopped: () => stopped,
    markDirty: (s) => dirty.push(s.id),
    mark: (s) => marked.push(s.id),
    scheduleRound: () => rounds++,
    dropExpiredHeld: () => dropped++,
  });
  const as = (g: Group) => g as unknown as ShardReplica;
  return {
    quiesce,
    as,
    marked,
    dirty,
    awake,
    rounds: () => rounds,
    dropped: () => dropped,
    stop: () => (stopped = true),
  };
}

describe("Quiesce", () => {
  it("ticks the awake groups, marks them and schedules one round for them all", () => {
    const [a, b] = [group(1), group(2)];
    const h = harness([a, b]);
    h.quiesce.setTicking(h.as(a), true);
    h.quiesce.setTicking(h.as(b), true);
    h.quiesce.tick();
    assert.deepEqual([a.ticks, b.ticks], [1, 1]);
    assert.deepEqual(h.marked, [1, 2]);
    assert.equal(h.rounds(), 1);
    assert.equal(h.dropped(), 1, "held peer messages are looked at every tick");
    assert.equal(h.quiesce.awakeGroups(), 2);
  });

  it("stops ticking a group that fell asleep, and drops it from its list at the next tick", () => {
    const [a, b] = [group(1), group(2)];
    const h = harness([a, b]);
    h.quiesce.setTicking(h.as(a), true);
    h.quiesce.setTicking(h.as(b), true);
    a.raw.quiesced = true;
    h.quiesce.trackSleep(h.as(a));
    assert.equal(a.ticking, false);
    assert.equal(h.quiesce.awakeGroups(), 1);
    h.quiesce.tick();
    assert.equal(a.ticks, 0);
    assert.equal(a.listedTicking, false);
    assert.deepEqual(h.marked, [2]);
  });

  it("keeps ticking a sleeping group with requests waiting (their deadlines are checked)", () => {
    const a = group(1);
    const h = harness([a]);
    a.raw.quiesced = true;
    a.pendingOperations = 1;
    h.quiesce.trackSleep(h.as(a));
    assert.equal(a.ticking, true);
    a.pendingOperations = 0;
    h.quiesce.trackSleep(h.as(a));
    assert.equal(a.ticking, false);
  });

  it("lists a group once however often it wakes and sleeps between ticks", () => {
    const a = group(1);
    const h = harness([a]);
    for (let i = 0; i < 3; i++) {
      h.quiesce.setTicking(h.as(a), true);
      h.quiesce.setTicking(h.as(a), false);
    }
    h.quiesce.setTicking(h.as(a), true);
    h.quiesce.tick();
    assert.equal(a.ticks, 1);
    assert.equal(h.quiesce.awakeGroups(), 1);
  });

  it("schedules no round when every group sleeps, and tells the observer only of changes", () => {
    const a = group(1);
    const h = harness([a]);
    h.quiesce.tick();
    assert.equal(h.rounds(), 0);
    h.quiesce.setTicking(h.as(a), true);
    h.quiesce.tick();
    h.quiesce.tick();
    h.quiesce.setTicking(h.as(a), false);
    h.quiesce.tick();
    assert.deepEqual(h.awake, [0, 1, 0]);
  });

  it("wakes the groups led by a suspected node, not the others, nor when it is this node", () => {
    const [a, b, c] = [group(1, "n2"), group(2, "n3"), group(3, null)];
    const h = harness([a, b, c]);
    h.quiesce.wakeGroupsLedBy("n2");
    assert.deepEqual(h.dirty, [1]);
    assert.deepEqual(a.reports, [{ kind: "leader-down" }]);
    h.quiesce.wakeGroupsLedBy("n1");
    assert.deepEqual(h.dirty, [1]);
    h.stop();
    h.quiesce.wakeGroupsLedBy("n3");
    assert.deepEqual(h.dirty, [1], "a closed or failed node wakes nothing");
  });
});
