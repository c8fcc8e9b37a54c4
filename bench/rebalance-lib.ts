/**
 * The pure parts of `npm run bench:rebalance` (bench/rebalance.ts) and `npm run bench:scale-out`
 * (bench/scale-out.ts), kept apart so that a unit test checks them without a cluster: sizes on
 * the command line, when a cluster view is "even", the windows' summary against the steady
 * rate, each node's share of the work, and the Markdown tables.
 */
import type { ClusterView } from "../src/client/index.ts";
import { sumMetric } from "./cluster-lib.ts";

const UNITS: Readonly<Record<string, number>> = {
  "": 1,
  B: 1,
  KIB: 1024,
  MIB: 1024 ** 2,
  GIB: 1024 ** 3,
};

/** `1GiB`, `256MiB`, `64KiB` or a number of bytes (a whole number, at least 1). */
export function parseSize(flag: string, text: string): number {
  const m = /^(\d+(?:\.\d+)?)\s*([a-zA-Z]*)$/.exec(text.trim());
  const unit = UNITS[(m?.[2] ?? "").toUpperCase()];
  const bytes = m === null || unit === undefined ? Number.NaN : Number(m[1]) * unit;
  if (!Number.isFinite(bytes) || bytes < 1)
    throw new Error(
      `--${flag}: ${JSON.stringify(text)} is not a size (1GiB, 256MiB, 64KiB, bytes)`,
    );
  return Math.round(bytes);
}

/** Where the rebalance stands in one cluster view. */
export interface Evenness {
  /** Members whose record says `active`, and the replicas placed on each. */
  readonly replicas: ReadonlyMap<string, number>;
  /** Shards with more replicas than the factor: a move under way (its learner counts). */
  readonly moving: number;
  /** Every expected member active, within the tolerance, and no shard moving. */
  readonly even: boolean;
}

/**
 * What the allocator (src/cluster/allocator.ts) stops at: every one of `members` active, the
 * most loaded holding at most `tolerance` replicas more than the least, and no move under way.
 */
export function evenness(
  view: ClusterView,
  members: readonly string[],
  tolerance: number,
  replicationFactor: number,
): Evenness {
  const replicas = new Map<string, number>();
  for (const n of view.nodes) if (n.memberState === "active") replicas.set(n.id, n.replicas);
  const moving = view.shards.filter((s) => s.replicas.length > replicationFactor).length;
  const counts = [...replicas.values()];
  const even =
    members.every((id) => replicas.has(id)) &&
    counts.length > 0 &&
    Math.max(...counts) - Math.min(...counts) <= tolerance &&
    moving === 0;
  return { replicas, moving, even };
}

/** One load window: the generator's figures and what the nodes did meanwhile. */
export interface LoadWindow {
  /** Seconds since the fourth node started (negative: the steady windows before it). */
  readonly startS: number;
  readonly seconds: number;
  readonly opsPerSec: number;
  readonly p50: number;
  readonly p99: number;
  readonly p999: number;
  /** The window's slowest Put (ms). */
  readonly max: number;
  readonly errors: number;
  /** Snapshot data the nodes sent during the window, all of them, bytes. */
  readonly snapshotBytes: number;
  /** CPU of each node over the window, in cores (the joining node last, when it runs). */
  readonly cpuCores: readonly number[];
  /** Replicas placed on the joining node, and shards moving, at the window's end. */
  readonly newNodeReplicas: number;
  readonly moving: number;
  /** The 1-minute load average at the window's start. */
  readonly loadAvg: number;
  /**
   * The share of the whole machine's CPU time that was busy over the window (not idle, not
   * waiting for the disk), from /proc/stat: every process, the generator's and the kernel's
   * too. Null where there is no /proc/stat.
   */
  readonly machineBusy: number | null;
}

/** CPU ticks since boot, all cores together: the busy ones and all of them. */
export interface MachineTicks {
  readonly busy: number;
  readonly total: number;
}

/**
 * The CPU times of /proc/stat's first line (`cpu  user nice system idle iowait irq softirq
 * steal ...`), or null when `text` has none; idle and iowait are not busy.
 */
export function machineTicks(text: string): MachineTicks | null {
  const line = text.split("\n").find((l) => l.startsWith("cpu "));
  if (line === undefined) return null;
  const ticks = line.trim().split(/\s+/).slice(1, 9).map(Number);
  if (ticks.length < 5 || ticks.some((t) => !Number.isFinite(t))) return null;
  const total = ticks.reduce((a, t) => a + t, 0);
  const idle = (ticks[3] ?? 0) + (ticks[4] ?? 0);
  return { busy: total - idle, total };
}

/** The busy share of the machine's CPU between two readings of machineTicks, or null. */
export function busyShare(before: MachineTicks | null, after: MachineTicks | null): number | null {
  if (before === null || after === null || after.total <= before.total) return null;
  return (after.busy - before.busy) / (after.total - before.total);
}

/** What a phase's windows cost: the nodes' CPU, per Put and in all, and the machine's. */
export interface PhaseCost {
  readonly opsPerSec: number;
  /** All the nodes' CPU together, in cores, weighted by the windows' seconds. */
  readonly nodeCores: number;
  /** nodeCores over opsPerSec, in µs: the nodes' CPU a foreground Put costs, moves included. */
  readonly nodeMicrosPerPut: number;
  /** The machine's busy share, weighted by seconds (null when no window has one). */
  readonly machineBusy: number | null;
}

export function phaseCost(ws: readonly LoadWindow[]): PhaseCost {
  const secs = ws.reduce((a, w) => a + w.seconds, 0);
  const weighted = (f: (w: LoadWindow) => number): number =>
    secs === 0 ? 0 : ws.reduce((a, w) => a + f(w) * w.seconds, 0) / secs;
  const opsPerSec = rateOf(ws);
  const nodeCores = weighted((w) => w.cpuCores.reduce((a, c) => a + c, 0));
  const busy = ws.filter((w) => w.machineBusy !== null);
  const busySecs = busy.reduce((a, w) => a + w.seconds, 0);
  return {
    opsPerSec,
    nodeCores,
    nodeMicrosPerPut: opsPerSec === 0 ? 0 : (nodeCores * 1e6) / opsPerSec,
    machineBusy:
      busySecs === 0
        ? null
        : busy.reduce((a, w) => a + (w.machineBusy ?? 0) * w.seconds, 0) / busySecs,
  };
}

/** The snapshot bytes and CPU of a window, from every node's /metrics before and after it. */
export function windowServerSide(
  before: readonly ReadonlyMap<string, number>[],
  after: readonly ReadonlyMap<string, number>[],
  seconds: number,
): { snapshotBytes: number; cpuCores: number[] } {
  let snapshotBytes = 0;
  const cpuCores: number[] = [];
  for (let i = 0; i < after.length; i++) {
    const a = after[i];
    const b = before[i];
    // A node that had no /metrics before the window (it was starting) counts from zero.
    const delta = (name: string): number =>
      a === undefined || a.size === 0
        ? 0
        : sumMetric(a, name) - (b === undefined ? 0 : sumMetric(b, name));
    snapshotBytes += delta("cairn_raft_snapshot_sent_bytes_total");
    cpuCores.push(delta("process_cpu_seconds_total") / seconds);
  }
  return { snapshotBytes, cpuCores };
}

/** The rebalance's windows against the steady ones. */
export interface RebalanceSummary {
  readonly steadyOpsPerSec: number;
  /** The median of the steady windows' p99. */
  readonly steadyP99: number;
  /** Every rebalance window's operations over their seconds. */
  readonly rebalanceOpsPerSec: number;
  /** rebalanceOpsPerSec / steadyOpsPerSec. */
  readonly rateRatio: number;
  /** The lowest window's rate over the steady rate. */
  readonly worstWindowRatio: number;
  readonly medianP99: number;
  readonly worstP99: number;
  /** worstP99 / steadyP99. */
  readonly p99Ratio: number;
  readonly snapshotBytes: number;
}

function median(xs: readonly number[]): number {
  if (xs.length === 0) return 0;
  const s = [...xs].sort((a, b) => a - b);
  const mid = Math.floor(s.length / 2);
  return s.length % 2 === 1
    ? (s[mid] as number)
    : ((s[mid - 1] as number) + (s[mid] as number)) / 2;
}

const rateOf = (ws: readonly LoadWindow[]): number => {
  const secs = ws.reduce((a, w) => a + w.seconds, 0);
  return secs === 0 ? 0 : ws.reduce((a, w) => a + w.opsPerSec * w.seconds, 0) / secs;
};

export function summarize(
  steady: readonly LoadWindow[],
  rebalance: readonly LoadWindow[],
): RebalanceSummary {
  const steadyOpsPerSec = rateOf(steady);
  const steadyP99 = median(steady.map((w) => w.p99));
  const rebalanceOpsPerSec = rateOf(rebalance);
  const worstP99 = Math.max(0, ...rebalance.map((w) => w.p99));
  const ratio = (x: number, of: number): number => (of === 0 ? 0 : x / of);
  return {
    steadyOpsPerSec,
    steadyP99,
    rebalanceOpsPerSec,
    rateRatio: ratio(rebalanceOpsPerSec, steadyOpsPerSec),
    worstWindowRatio: ratio(
      rebalance.length === 0 ? 0 : Math.min(...rebalance.map((w) => w.opsPerSec)),
      steadyOpsPerSec,
    ),
    medianP99: median(rebalance.map((w) => w.p99)),
    worstP99,
    p99Ratio: ratio(worstP99, steadyP99),
    snapshotBytes: rebalance.reduce((a, w) => a + w.snapshotBytes, 0),
  };
}

const fmt = (n: number, digits = 0): string =>
  n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });

const MIB = 1024 * 1024;

/** One row a window: steady, the rebalance's, then after it; each against the steady rate. */
export function rebalanceTable(
  steady: readonly LoadWindow[],
  rebalance: readonly LoadWindow[],
  after: readonly LoadWindow[] = [],
): string {
  const s = summarize(steady, rebalance);
  const lines = [
    "| phase | from s | Put/s | × steady | p50 ms | p99 ms | p999 ms | slowest ms | errors | snapshot MiB/s | nodes' CPU (cores) | machine busy | new node's replicas | moving | load avg |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  const row = (phase: string, w: LoadWindow): string =>
    `| ${phase} | ${fmt(w.startS)} | ${fmt(w.opsPerSec)} | ${fmt(s.steadyOpsPerSec === 0 ? 0 : w.opsPerSec / s.steadyOpsPerSec, 2)} | ${fmt(w.p50, 2)} | ${fmt(w.p99, 2)} | ${fmt(w.p999)} | ${fmt(w.max)} | ${fmt(w.errors)} | ${fmt(w.snapshotBytes / MIB / w.seconds, 1)} | ${w.cpuCores.map((c) => fmt(c, 2)).join(" + ")} | ${w.machineBusy === null ? "—" : `${fmt(100 * w.machineBusy)} %`} | ${fmt(w.newNodeReplicas)} | ${fmt(w.moving)} | ${fmt(w.loadAvg, 1)} |`;
  for (const w of steady) lines.push(row("steady", w));
  for (const w of rebalance) lines.push(row("rebalance", w));
  for (const w of after) lines.push(row("after", w));
  return `${lines.join("\n")}\n`;
}

/** What one node did under the scale-out benchmark's load. */
export interface NodeShare {
  readonly id: string;
  /** Requests it answered as its shard's leader (success or error). */
  readonly served: number;
  /** Requests that reached it for a shard it does not lead, forwarded to the leader. */
  readonly forwarded: number;
  readonly cpuSeconds: number;
  /** Of cpuSeconds, the kernel's (system time: syscalls, the loopback's TCP, the disk). */
  readonly cpuSystemSeconds: number;
  /** Raft frames it sent to its peers (cairn_raft_frames_sent_total, every peer). */
  readonly framesSent: number;
  /** Raft messages in those frames (cairn_raft_messages_sent_total). */
  readonly messagesSent: number;
  /** Durable WAL writes (cairn_wal_write_duration_seconds_count): one a round that syncs. */
  readonly walWrites: number;
}

/** One cluster size's run: each node's work and the share of the total. */
export interface ScaleRun {
  readonly nodes: number;
  readonly seconds: number;
  readonly opsPerSec: number;
  readonly p99: number;
  readonly perNode: readonly NodeShare[];
  /** The idle cluster's CPU over the same seconds, all nodes together (ticks, gossip). */
  readonly idleCpuSeconds: number;
  readonly loadAvg: number;
}

/** Each node's share of what all served and of their CPU, against 1/n. */
export function shares(run: ScaleRun): { served: number[]; cpu: number[]; worstDeviation: number } {
  const total = (f: (s: NodeShare) => number): number => run.perNode.reduce((a, s) => a + f(s), 0);
  const served = run.perNode.map((s) => s.served / (total((x) => x.served) || 1));
  const cpu = run.perNode.map((s) => s.cpuSeconds / (total((x) => x.cpuSeconds) || 1));
  const ideal = 1 / run.perNode.length;
  const worstDeviation = Math.max(...[...served, ...cpu].map((x) => Math.abs(x - ideal) / ideal));
  return { served, cpu, worstDeviation };
}

/**
 * What the whole cluster did for each Put of a run: Raft frames and messages sent between the
 * nodes, durable WAL writes, and microseconds of the nodes' CPU (and of it the kernel's). Frames and writes a Put are
 * the per-round costs that grow with the nodes: the same Puts spread over more nodes fill each
 * node's rounds less, and each leader's round writes to more peers.
 */
export function trafficPerPut(run: ScaleRun): {
  frames: number;
  messages: number;
  walWrites: number;
  cpuMicros: number;
  systemCpuMicros: number;
} {
  const puts = run.opsPerSec * run.seconds;
  const per = (f: (s: NodeShare) => number): number =>
    puts === 0 ? 0 : run.perNode.reduce((a, s) => a + f(s), 0) / puts;
  return {
    frames: per((s) => s.framesSent),
    messages: per((s) => s.messagesSent),
    walWrites: per((s) => s.walWrites),
    cpuMicros: per((s) => s.cpuSeconds) * 1e6,
    systemCpuMicros: per((s) => s.cpuSystemSeconds) * 1e6,
  };
}

export function scaleOutTable(runs: readonly ScaleRun[]): string {
  const lines = [
    "| nodes | node | Put/s (cluster) | p99 ms | served as leader | share | 1/n | forwarded | CPU s | CPU share | CPU µs a Put (node) | load avg |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const run of runs) {
    const sh = shares(run);
    run.perNode.forEach((n, i) => {
      const ops = run.opsPerSec * run.seconds;
      lines.push(
        `| ${run.nodes} | ${n.id} | ${fmt(run.opsPerSec)} | ${fmt(run.p99, 1)} | ${fmt(n.served)} | ${fmt(100 * (sh.served[i] ?? 0), 1)}% | ${fmt(100 / run.nodes, 1)}% | ${fmt(n.forwarded)} | ${fmt(n.cpuSeconds, 1)} | ${fmt(100 * (sh.cpu[i] ?? 0), 1)}% | ${fmt(ops === 0 ? 0 : (n.cpuSeconds * 1e6) / ops)} | ${fmt(run.loadAvg, 1)} |`,
      );
    });
  }
  return `${lines.join("\n")}\n`;
}
