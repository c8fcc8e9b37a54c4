/**
 * The pure pieces of `npm run bench:rebalance` and `bench:scale-out` (bench/rebalance-lib.ts):
 * sizes, when a view counts as even, the summary against the steady windows, the nodes' shares.
 * No timing is asserted.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  busyShare,
  evenness,
  type LoadWindow,
  machineTicks,
  parseSize,
  phaseCost,
  rebalanceTable,
  type ScaleRun,
  scaleOutTable,
  trafficPerPut,
  shares,
  summarize,
  windowServerSide,
} from "../../bench/rebalance-lib.ts";
import type { ClusterView } from "../../src/client/index.ts";

function view(
  members: Record<string, [state: string, replicas: number]>,
  shardReplicas: number[],
): ClusterView {
  return {
    epoch: 1,
    totalShards: shardReplicas.length,
    clusterId: "c1",
    clusterVersion: 1,
    nodes: Object.entries(members).map(([id, [memberState, replicas]]) => ({
      id,
      rpcAddr: "",
      httpAddr: "",
      state: "alive",
      memberState,
      replicas,
      diskFull: false,
      build: 1,
    })),
    shards: shardReplicas.map((n, id) => ({
      id,
      leader: "n1",
      replicas: Array.from({ length: n }, (_, k) => `n${k + 1}`),
      term: 2,
    })),
  };
}

function win(opsPerSec: number, p99: number, snapshotBytes = 0): LoadWindow {
  return {
    startS: 0,
    seconds: 10,
    opsPerSec,
    p50: p99 / 4,
    p99,
    p999: p99 * 2,
    max: p99 * 4,
    errors: 0,
    snapshotBytes,
    cpuCores: [0.5, 0.5, 0.5],
    newNodeReplicas: 0,
    moving: 0,
    loadAvg: 1,
    machineBusy: null,
  };
}

describe("bench:rebalance's pieces", () => {
  it("parses sizes with binary units, and refuses what is not one", () => {
    assert.equal(parseSize("size", "1GiB"), 1024 ** 3);
    assert.equal(parseSize("size", "256MiB"), 256 * 1024 ** 2);
    assert.equal(parseSize("size", "64kib"), 64 * 1024);
    assert.equal(parseSize("size", "1000"), 1000);
    for (const bad of ["", "0", "1GB", "-1MiB", "MiB", "1.5.2"])
      assert.throws(() => parseSize("size", bad), /--size/);
  });

  it("counts a view even once every member is active, within the tolerance, none moving", () => {
    const members = ["n1", "n2", "n3", "n4"];
    // n4 still joining: not even, whatever the counts.
    assert.equal(
      evenness(
        view(
          { n1: ["active", 6], n2: ["active", 6], n3: ["active", 6], n4: ["joining", 0] },
          [3, 3],
        ),
        members,
        2,
        3,
      ).even,
      false,
    );
    // Off by more than the tolerance.
    const uneven = evenness(
      view({ n1: ["active", 7], n2: ["active", 6], n3: ["active", 6], n4: ["active", 4] }, [3, 3]),
      members,
      2,
      3,
    );
    assert.equal(uneven.even, false);
    assert.equal(uneven.replicas.get("n4"), 4);
    // Within it, but a shard has four replicas: a move under way.
    const moving = evenness(
      view(
        { n1: ["active", 6], n2: ["active", 6], n3: ["active", 5], n4: ["active", 5] },
        [3, 4, 3],
      ),
      members,
      2,
      3,
    );
    assert.deepEqual([moving.even, moving.moving], [false, 1]);
    assert.equal(
      evenness(
        view(
          { n1: ["active", 6], n2: ["active", 6], n3: ["active", 5], n4: ["active", 5] },
          [3, 3, 3],
        ),
        members,
        2,
        3,
      ).even,
      true,
    );
  });

  it("sums snapshot bytes and CPU over a window; a node without metrics before counts from zero", () => {
    const m = (cpu: number, bytes: number): Map<string, number> =>
      new Map([
        ["process_cpu_seconds_total", cpu],
        ["cairn_raft_snapshot_sent_bytes_total", bytes],
      ]);
    const r = windowServerSide([m(10, 100), m(20, 0)], [m(15, 1100), m(21, 24), m(3, 0)], 10);
    assert.equal(r.snapshotBytes, 1024);
    assert.deepEqual(r.cpuCores, [0.5, 0.1, 0.3]);
  });

  it("compares the rebalance's windows with the steady ones (rate weighted by time, worst p99)", () => {
    const s = summarize(
      [win(1000, 10), win(1200, 20), win(1100, 30)],
      [win(990, 15, 1024), win(660, 50, 2048)],
    );
    assert.equal(s.steadyOpsPerSec, 1100);
    assert.equal(s.steadyP99, 20);
    assert.equal(s.rebalanceOpsPerSec, 825);
    assert.equal(s.rateRatio, 0.75);
    assert.equal(s.worstWindowRatio, 0.6);
    assert.equal(s.worstP99, 50);
    assert.equal(s.p99Ratio, 2.5);
    assert.equal(s.snapshotBytes, 3072);
    const table = rebalanceTable([win(1000, 10)], [win(800, 12)]);
    assert.match(table, /\| rebalance \| 0 \| 800 \| 0\.80 \|/);
  });

  it("reads the machine's busy share from /proc/stat (idle and iowait are not busy)", () => {
    const a = machineTicks("cpu  100 0 50 800 50 0 0 0 0 0\ncpu0 50 0 25 400 25 0 0 0 0 0\n");
    const b = machineTicks("cpu  250 0 100 850 100 0 0 0 0 0\n");
    assert.deepEqual(a, { busy: 150, total: 1000 });
    // 200 of 300 ticks busy: 150 user and system against 50 idle and 50 iowait.
    assert.equal(busyShare(a, b), 200 / 300);
    assert.equal(machineTicks("intr 1 2 3\n"), null);
    assert.equal(busyShare(a, null), null);
    assert.equal(busyShare(b, a), null);
  });

  it("gives each phase's node CPU a Put, weighted by the windows' seconds", () => {
    const w = (opsPerSec: number, cores: number[], busy: number | null): LoadWindow => ({
      ...win(opsPerSec, 10),
      cpuCores: cores,
      machineBusy: busy,
    });
    const c = phaseCost([w(1000, [0.5, 0.5], 0.9), w(3000, [0.5, 0.5, 0.5, 0.5], null)]);
    assert.equal(c.opsPerSec, 2000);
    assert.equal(c.nodeCores, 1.5);
    assert.equal(c.nodeMicrosPerPut, 750);
    assert.equal(c.machineBusy, 0.9);
    assert.equal(phaseCost([w(1000, [1], null)]).machineBusy, null);
    assert.match(
      rebalanceTable([w(1000, [1], 0.95)], []),
      // p50, p99, then p999 (2× p99) and the slowest Put (4× p99), errors, snapshots, CPU.
      /\| steady \| 0 \| 1,000 \| 1\.00 \| [^|]+\| [^|]+\| 20 \| 40 \| 0 \| 0\.0 \| 1\.00 \| 95 % \|/,
    );
  });

  it("gives each node's share of the requests served and of the CPU, and the worst deviation from 1/n", () => {
    const traffic = {
      framesSent: 12_000,
      messagesSent: 30_000,
      walWrites: 6_000,
      cpuSystemSeconds: 2,
    };
    const run: ScaleRun = {
      nodes: 3,
      seconds: 10,
      opsPerSec: 3000,
      p99: 20,
      perNode: [
        { id: "n1", served: 10_000, forwarded: 20_000, cpuSeconds: 5, ...traffic },
        { id: "n2", served: 11_000, forwarded: 19_000, cpuSeconds: 5, ...traffic },
        { id: "n3", served: 9_000, forwarded: 21_000, cpuSeconds: 5, ...traffic },
      ],
      idleCpuSeconds: 0.3,
      loadAvg: 2,
    };
    const sh = shares(run);
    assert.deepEqual(
      sh.served.map((x) => x.toFixed(3)),
      ["0.333", "0.367", "0.300"],
    );
    assert.deepEqual(sh.cpu, [1 / 3, 1 / 3, 1 / 3]);
    assert.ok(Math.abs(sh.worstDeviation - 0.1) < 1e-9);
    // 30,000 Puts: 36,000 frames, 90,000 messages, 18,000 WAL writes and 15 CPU seconds in all,
    // 6 of them the kernel's.
    assert.deepEqual(trafficPerPut(run), {
      frames: 1.2,
      messages: 3,
      walWrites: 0.6,
      cpuMicros: 500,
      systemCpuMicros: 200,
    });
    assert.equal(
      scaleOutTable([run])
        .split("\n")
        .filter((l) => l.startsWith("| 3 |")).length,
      3,
    );
  });
});
