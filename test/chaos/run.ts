/**
 * One chaos run: start a cluster behind the FaultNet, run the workload while the fault schedule
 * goes, heal everything, check, and write a report (JSON) and a one-line summary.
 *
 * After the heal (and the membership change under way, if any, finished), on every remaining
 * member (a retired node, decommissioned or removed, is not one):
 * - every member returns to `healthy` on GET /health;
 * - every key is read once more, linearizably (these reads join the history: an acknowledged
 *   write lost shows as a stale final read), then once through each member (joined, too: every
 *   acknowledged write is readable through every remaining node), and every replica of the key's
 *   shard (a serializable Get on each) converges to that final value and version;
 * - the placement (checks.ts): every shard on exactly three distinct active members, the
 *   members of each group naming the same replicas (no shard has two groups), no move pending;
 * - no process exited unless the harness killed it.
 */
import { mkdir, mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { gzipSync } from "node:zlib";
import { nodeOfReplica, shardForKey } from "../../src/cluster/index.ts";
import { seededRng } from "../../src/common/index.ts";
import type { Version } from "../support/linearizability.ts";
import {
  checkLinearizable,
  checkPlacement,
  checkSerializableReads,
  type Finding,
  lostWrites,
  type PlacementView,
  shardGroups,
} from "./checks.ts";
import { ChaosCluster } from "./cluster.ts";
import {
  changesMembership,
  type FaultKind,
  MEMBERSHIP_KINDS,
  type FaultRecord,
  PLANNED_SCENARIOS,
  FaultSchedule,
  SCENARIOS,
  scenarioKinds,
  SCRIPTS,
  TMPFS_SCENARIOS,
} from "./faults.ts";
import { memberViews } from "./membership.ts";
import { eventually, eventuallyEach } from "./poll.ts";
import {
  type ChaosOp,
  decodeValue,
  DEFAULT_WORKLOAD,
  versionOf,
  Workload,
  type WorkloadOptions,
} from "./workload.ts";

export const TOTAL_SHARDS = 16;
const TICK_MS = 100;
const ELECTION_TICKS = 10;
const REPLICATION_FACTOR = 3;
/**
 * `cluster.dead_after_ms` in scenarios that change membership: a node killed for good is dead,
 * and its replicas re-created, within seconds; a fault that keeps a node away longer (a crash
 * loop, a long partition) has it marked dead and active again, which is part of the chaos.
 */
const DEAD_AFTER_MS = 10_000;
/** The same in a scripted scenario: no other fault keeps a node away, so a short one is safe. */
const SCRIPTED_DEAD_AFTER_MS = 3_000;
/** How long the heal waits for a membership change under way to finish. */
const SETTLE_MS = 240_000;
/** How long a key's final read may take, and all the final reads (poll.ts), after the heal. */
const READ_KEY_MS = 30_000;
const FINAL_READS_MS = 120_000;
/** How long the reads of every key through one member may take. */
const READ_THROUGH_MS = 60_000;

export interface RunOptions {
  readonly seed: number;
  readonly scenario: string;
  /** How long the workload runs; faults stop a few seconds before its end. */
  readonly durationMs: number;
  /** Where the report goes (a directory per run is made in it). */
  readonly outDir: string;
  readonly size?: number;
  /** Shard workers per node (default 1). */
  readonly shardWorkers?: number;
  /** Planted bugs (src/node/testing-bugs.ts), for proving the harness catches them. */
  readonly bugs?: readonly string[];
  readonly workload?: Partial<WorkloadOptions>;
  /** TLS between the peers and for the clients, and sealed gossip (cluster.ts). */
  readonly tls?: boolean;
  /** Faults to inject at the least, past the duration if need be (ScheduleOptions.minFaults). */
  readonly minFaults?: number;
  readonly log?: (line: string) => void;
}

export interface FaultReport extends FaultRecord {
  /** Longest window without any successful write that overlaps the fault (ms). */
  readonly unavailableMs: number;
  /**
   * For the worst shard: from a write to it that failed during the fault to the shard's next
   * successful write (ms).
   */
  readonly worstShardUnavailableMs: number;
}

export interface RunReport {
  readonly seed: number;
  readonly scenario: string;
  readonly bugs: readonly string[];
  /** Whether the cluster ran with TLS and sealed gossip. */
  readonly tls: boolean;
  readonly durationMs: number;
  readonly wallMs: number;
  readonly operations: {
    readonly total: number;
    readonly ok: number;
    readonly indeterminate: number;
    readonly failed: number;
    readonly byKind: Record<string, number>;
    /** Failed and indeterminate calls by error (code, Cairn code, details up to a digit). */
    readonly errors: Record<string, number>;
    readonly checked: number;
    readonly keys: number;
  };
  readonly faults: readonly FaultReport[];
  readonly faultsByKind: Record<string, number>;
  /** The membership changes: each one's node, whether it finished, its phases (ms from start). */
  readonly changes: readonly {
    readonly kind: FaultKind;
    readonly node: string;
    readonly done: boolean;
    readonly phases: Record<string, number>;
  }[];
  readonly linearizability: {
    readonly status: string;
    readonly ms: number;
    readonly report?: string;
  };
  readonly findings: readonly Finding[];
  readonly crashes: readonly unknown[];
  readonly healthyAfterHealMs: number | null;
  readonly net: unknown;
  readonly verdict: "pass" | "fail" | "unknown";
  readonly summary: string;
  readonly dir: string;
}

/** The checker's search budget per key when the default one gave no verdict. */
const RETRY_BUDGET = 20_000_000;

/** A delay already past (the fault schedule ran over the workload's end) is none. */
const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

function isWrite(op: ChaosOp): boolean {
  return (
    op.kind === "put" || op.kind === "put-if" || op.kind === "delete" || op.kind === "delete-if"
  );
}

/** The longest window with no successful write in `times` (sorted) that overlaps [from, to]. */
function longestGap(times: readonly number[], from: number, to: number, end: number): number {
  let prev = from;
  for (const t of times) {
    if (t <= from) prev = t;
    else break;
  }
  let gap = 0;
  for (const t of times) {
    if (t <= from) continue;
    gap = Math.max(gap, t - prev);
    prev = t;
    if (t > to) return gap;
  }
  return Math.max(gap, end - prev);
}

function availability(ops: readonly ChaosOp[], f: FaultRecord, end: number): [number, number] {
  const ok = ops.filter((o) => isWrite(o) && o.outcome === "ok" && o.returnTime !== null);
  const all = ok.map((o) => o.returnTime as number).sort((a, b) => a - b);
  const to = Math.max(f.healDone, f.healedAt, f.start);
  const total = longestGap(all, f.start, to, end);
  // Per shard, as its writers saw it: from a write that failed (or never answered), invoked
  // during the fault, to the shard's next successful write; a stretch of more than 2 s with no
  // write to the shard at all ends the window at the last failure (keys rotate, and a shard may
  // get no writes for a while).
  const attempts = new Map<number, ChaosOp[]>();
  for (const o of ops) {
    if (!isWrite(o) || o.key === null || o.outcome === "pending") continue;
    const s = shardForKey(Buffer.from(o.key), TOTAL_SHARDS);
    const list = attempts.get(s) ?? [];
    list.push(o);
    attempts.set(s, list);
  }
  let worst = 0;
  for (const list of attempts.values()) {
    list.sort((a, b) => a.invoke - b.invoke);
    list.forEach((o, i) => {
      if (o.outcome === "ok" || o.invoke < f.start || o.invoke > to) return;
      let lastEnd = o.returnTime ?? end;
      let window = lastEnd - o.invoke;
      for (const x of list.slice(i + 1)) {
        if (x.invoke - lastEnd > 2_000) break;
        if (x.outcome === "ok") {
          window = (x.returnTime as number) - o.invoke;
          break;
        }
        lastEnd = Math.max(lastEnd, x.returnTime ?? end);
        window = lastEnd - o.invoke;
      }
      worst = Math.max(worst, window);
    });
  }
  return [Math.round(total), Math.round(worst)];
}

export async function runChaos(options: RunOptions): Promise<RunReport> {
  const log = options.log ?? ((line: string) => console.log(line));
  const kinds = scenarioKinds(options.scenario, options.tls === true);
  if (kinds === null)
    throw new Error(
      SCENARIOS[options.scenario] === undefined
        ? `unknown scenario ${options.scenario}`
        : `scenario ${options.scenario} runs only with TLS (--tls)`,
    );
  const bugs = options.bugs ?? [];
  const t0 = performance.now();
  const now = (): number => performance.now() - t0;
  const rng = seededRng(options.seed);
  const dir = join(
    options.outDir,
    `run-${options.seed}-${options.scenario}${options.tls === true ? "-tls" : ""}${bugs.length > 0 ? `-${bugs.join("+")}` : ""}`,
  );
  await mkdir(dir, { recursive: true });
  const dataDir = await mkdtemp(join(tmpdir(), "cairn-chaos-"));
  const workloadOptions: WorkloadOptions = { ...DEFAULT_WORKLOAD, ...options.workload };
  const cluster = await ChaosCluster.create({
    dir: dataDir,
    size: options.size ?? 3,
    rng: rng.fork(),
    now,
    ...(TMPFS_SCENARIOS.has(options.scenario) ? { tmpfsMiB: 256 } : {}),
    ...(options.tls === true ? { tls: true } : {}),
    env: {
      CAIRN_CLUSTER_TOTAL_SHARDS: String(TOTAL_SHARDS),
      CAIRN_CLUSTER_BOOTSTRAP_EXPECT: String(options.size ?? 3),
      CAIRN_RAFT_TICK_MS: String(TICK_MS),
      CAIRN_RAFT_ELECTION_TICKS: String(ELECTION_TICKS),
      // Small memtables: shards flush and compact their log often, so a node that was away
      // catches up by snapshot, not only by log.
      CAIRN_STORAGE_MEMTABLE_BYTES: "64KiB",
      CAIRN_STORAGE_WAL_CACHE_BYTES: "1MiB",
      CAIRN_SHUTDOWN_DRAIN_TIMEOUT_MS: "2000",
      CAIRN_SHARD_WORKERS: String(options.shardWorkers ?? 1),
      // A 256 MiB tmpfs is under the default reserve (512 MiB): every Put would be refused. A
      // small one leaves disk-nearly-full (97 %, ~7.7 MiB left) to cluster.disk_full_percent,
      // and disk-full fills past it to ENOSPC all the same.
      ...(TMPFS_SCENARIOS.has(options.scenario) ? { CAIRN_STORAGE_MIN_FREE_BYTES: "4MiB" } : {}),
      ...(changesMembership(options.scenario)
        ? {
            CAIRN_CLUSTER_DEAD_AFTER_MS: String(
              SCRIPTS[options.scenario] === undefined ? DEAD_AFTER_MS : SCRIPTED_DEAD_AFTER_MS,
            ),
          }
        : {}),
      ...(bugs.length > 0 ? { CAIRN_TESTING_BUGS: bugs.join(",") } : {}),
    },
  });
  const findings: Finding[] = [];
  let workload: Workload | null = null;
  let schedule: FaultSchedule | null = null;
  let healthyAfterHealMs: number | null = null;
  let linearizability: RunReport["linearizability"] = { status: "not run", ms: 0 };
  let checked = 0;
  let workloadEnd = 0;
  try {
    await cluster.startAll();
    const ready = await eventually(120_000, async () => {
      for (const n of cluster.members()) {
        if ((await cluster.http(n.id, "/health/quick"))?.status !== 200) return undefined;
      }
      return true;
    });
    if (ready === undefined) throw new Error("the cluster did not become ready within 120 s");
    const start = now();
    log(`chaos seed=${options.seed}: cluster ready in ${Math.round(start)} ms; workload starts`);

    workload = new Workload(cluster, rng.fork(), now, workloadOptions);
    schedule = new FaultSchedule(cluster, rng.fork(), now, {
      kinds,
      from: start + 3_000,
      until: start + options.durationMs - 2_000,
      holdMs: [2_000, 6_000],
      // A script's changes follow each other closely: the workload runs all along.
      quietMs: SCRIPTS[options.scenario] === undefined ? [1_500, 3_500] : [500, 1_000],
      electionMs: TICK_MS * ELECTION_TICKS,
      ...(SCRIPTS[options.scenario] === undefined ? {} : { script: SCRIPTS[options.scenario] }),
      planChanges: PLANNED_SCENARIOS.has(options.scenario),
      ...(options.minFaults === undefined ? {} : { minFaults: options.minFaults }),
    });
    workload.start();
    let scheduleError: unknown = null;
    await schedule.run().catch((err: unknown) => {
      scheduleError = err;
    });
    await sleep(start + options.durationMs - now());
    await workload.stop();
    workloadEnd = now();
    if (scheduleError !== null) {
      findings.push({
        check: "faults",
        message: `a fault or its heal failed: ${String(scheduleError)}`,
      });
    }

    // ── heal ──
    const healStart = now();
    cluster.net.heal();
    for (const n of cluster.members()) {
      if (n.state === "paused") cluster.resume(n.id);
    }
    for (const n of cluster.members()) {
      try {
        await cluster.exclusive(async () => {
          if (n.state === "down" && !n.retired) await cluster.start(n.id);
        });
      } catch (err) {
        findings.push({ check: "heal", message: `${n.id} did not restart: ${String(err)}` });
      }
    }
    // A membership change under way finishes on the healed cluster.
    await schedule.settle(SETTLE_MS);
    for (const message of schedule.changeErrors) findings.push({ check: "membership", message });
    for (const message of schedule.guardErrors) findings.push({ check: "disk-guard", message });
    for (const message of schedule.rotationErrors) findings.push({ check: "rotation", message });
    const healthy = await eventually(90_000, async () => {
      for (const n of cluster.members()) {
        const h = await cluster.http(n.id, "/health");
        if ((h?.body as { status?: string } | undefined)?.status !== "healthy") return undefined;
      }
      return true;
    });
    if (healthy === undefined) {
      const states = await Promise.all(
        cluster.members().map(async (n) => {
          const h = await cluster.http(n.id, "/health");
          const body = h?.body as
            { status?: string; shards?: { id: number; status: string }[] } | undefined;
          // The shards that are not healthy, and how: what a replay needs to look for.
          const shards = (body?.shards ?? []).filter((s) => s.status !== "healthy");
          return `${n.id}: ${body?.status ?? "no answer"}${shards.length === 0 ? "" : ` (${shards.map((s) => `shard ${s.id} ${s.status}`).join(", ")})`}`;
        }),
      );
      findings.push({
        check: "health",
        message: `not every node healthy 90 s after the heal (${states.join(", ")})`,
      });
    } else {
      healthyAfterHealMs = Math.round(now() - healStart);
    }

    // ── final reads: one linearizable Get per key, joined to the history ──
    const finals = new Map<string, { value: string; version: Version } | null>();
    const members = cluster.members();
    /** A linearizable Get of `key` through `n`, joined to the history. */
    const finalRead = async (n: (typeof members)[number], key: string) => {
      const c = n.client;
      if (c === null) return undefined;
      const invoke = now();
      const res = await c.call(c.kv, "Get", { key: Buffer.from(key) }, 5_000);
      const output =
        res["found"] === true
          ? {
              type: "found" as const,
              value: decodeValue(res["value"] as Buffer),
              version: versionOf(res["version"]) as Version,
            }
          : { type: "absent" as const };
      workload?.ops.push({
        id: workload.ops.length,
        client: -1,
        node: n.id,
        incarnation: n.incarnation,
        kind: "get",
        key,
        input: { type: "get" },
        invoke,
        returnTime: now(),
        outcome: "ok",
        output,
      });
      return output;
    };
    let turn = 0;
    const read = await eventuallyEach(
      workload.keys,
      async (key) => {
        const n = members[turn++ % members.length];
        return n === undefined ? undefined : finalRead(n, key);
      },
      { perKeyMs: READ_KEY_MS, phaseMs: FINAL_READS_MS },
    );
    for (const key of read.late)
      findings.push({
        check: "final-read",
        message: `no linearizable read of ${key} within ${READ_KEY_MS / 1000} s`,
      });
    if (read.untried.length > 0)
      findings.push({
        check: "final-read",
        message: `${read.untried.length} key(s) not read: the final reads' ${FINAL_READS_MS / 1000} s ran out first (${read.untried.slice(0, 5).join(", ")})`,
      });
    for (const [key, got] of read.got)
      finals.set(key, got.type === "found" ? { value: got.value, version: got.version } : null);

    // ── every acknowledged write reads back through every remaining member ──
    for (const n of members) {
      let lastError = "";
      const through = await eventuallyEach(
        finals.keys(),
        (key) =>
          finalRead(n, key).catch((err: unknown) => {
            lastError = String(err).slice(0, 300);
            throw err;
          }),
        { perKeyMs: READ_KEY_MS, phaseMs: READ_THROUGH_MS },
      );
      const wrong: string[] = [];
      /** Why the first key read wrong did: the value it read. */
      let why = "";
      for (const [key, got] of through.got) {
        const want = finals.get(key) ?? null;
        const same =
          want === null
            ? got.type === "absent"
            : got.type === "found" &&
              got.value === want.value &&
              got.version.index === want.version.index &&
              got.version.term === want.version.term;
        if (!same) {
          if (wrong.length === 0)
            why = `read ${JSON.stringify(got)}, final ${JSON.stringify(want)}`;
          wrong.push(key);
        }
      }
      if (wrong.length > 0)
        findings.push({
          check: "read-through",
          message: `through ${n.id}, ${wrong.length} key(s) do not read their final value: ${wrong.slice(0, 5).join(", ")}; ${wrong[0]}: ${why}`,
        });
      const unread = [...through.late, ...through.untried];
      if (unread.length > 0)
        findings.push({
          check: "read-through",
          message: `through ${n.id}, ${unread.length} key(s) gave no answer (${through.late.length} within ${READ_KEY_MS / 1000} s each, ${through.untried.length} not tried: its ${READ_THROUGH_MS / 1000} s ran out): ${unread.slice(0, 5).join(", ")}; last error at ${Math.round(now())} ms: ${lastError || "none"}`,
        });
    }

    // ── the placement: three distinct active replicas a shard (the meta group: as many as it
    // was founded on, down to three), one group each, no move ──
    let views: PlacementView[] = [];
    let placementFindings: Finding[] = [];
    const placed = await eventually(60_000, async () => {
      views = await memberViews(cluster);
      placementFindings = checkPlacement(views, REPLICATION_FACTOR, options.size ?? 3);
      if (views.length < members.length)
        placementFindings.push({
          check: "placement",
          message: `${members.length - views.length} member(s) gave no cluster view`,
        });
      return placementFindings.length === 0 ? true : undefined;
    });
    if (placed === undefined) findings.push(...placementFindings);

    // ── every replica converges to the final values (with more than three nodes, a shard's three) ──
    const groups = shardGroups(views);
    const holds = (node: string, key: string): boolean =>
      groups
        .get(shardForKey(Buffer.from(key), TOTAL_SHARDS))
        ?.replicas.map(nodeOfReplica)
        .includes(node) ?? true;
    for (const n of members) {
      const pendingKeys = new Set([...finals.keys()].filter((key) => holds(n.id, key)));
      await eventually(60_000, async () => {
        const c = n.client;
        if (c === null) return undefined;
        for (const key of [...pendingKeys]) {
          const res = await c.call(
            c.kv,
            "Get",
            { key: Buffer.from(key), consistency: "SERIALIZABLE" },
            3_000,
          );
          const want = finals.get(key) ?? null;
          const v = versionOf(res["version"]);
          const same =
            want === null
              ? res["found"] !== true
              : res["found"] === true &&
                decodeValue(res["value"] as Buffer) === want.value &&
                v !== null &&
                v.index === want.version.index &&
                v.term === want.version.term;
          if (same) pendingKeys.delete(key);
        }
        return pendingKeys.size === 0 ? true : undefined;
      });
      if (pendingKeys.size > 0) {
        findings.push({
          check: "replicas",
          message: `${n.id}'s replica does not hold the final value of ${pendingKeys.size} keys 60 s after the heal: ${[...pendingKeys].slice(0, 5).join(", ")}`,
        });
      }
    }

    // ── the history ──
    let lin = checkLinearizable(workload.ops, workloadOptions.prefix);
    if (lin.result.status === "unknown") {
      // Many indeterminate writes on one key (a long fault) can outgrow the default search; a
      // verdict is worth more time (20 M steps: about half a minute and 1 GB at most).
      const first = lin;
      lin = checkLinearizable(workload.ops, workloadOptions.prefix, RETRY_BUDGET);
      lin = { ...lin, ms: lin.ms + first.ms };
    }
    checked = lin.operations;
    linearizability = {
      status: lin.result.status,
      ms: Math.round(lin.ms),
      ...(lin.result.status === "ok" ? {} : { report: lin.result.report }),
    };
    findings.push(...checkSerializableReads(workload.ops));
    findings.push(...lostWrites(workload.ops, finals));
  } catch (err) {
    findings.push({ check: "harness", message: `the run stopped: ${String(err)}` });
  } finally {
    schedule?.stop();
    if (workload !== null) await workload.stop().catch(() => undefined);
    await cluster
      .shutdown()
      .catch((err: unknown) =>
        findings.push({ check: "harness", message: `shutdown: ${String(err)}` }),
      );
  }

  for (const c of cluster.crashes) {
    findings.push({
      check: "crash",
      message: `${c.node} (start #${c.incarnation}) exited on its own at t=${Math.round(c.at)} ms: ${JSON.stringify(c.exit)}; ${c.stderrTail.slice(-600)}`,
    });
  }
  if (linearizability.status === "violation") {
    findings.push({ check: "linearizability", message: linearizability.report ?? "" });
  }

  const ops = workload?.ops ?? [];
  const end = workloadEnd || now();
  const faults: FaultReport[] = (schedule?.records ?? []).map((f) => {
    const [unavailableMs, worstShardUnavailableMs] = availability(ops, f, end);
    return { ...f, unavailableMs, worstShardUnavailableMs };
  });
  const faultsByKind: Record<string, number> = {};
  for (const f of faults) faultsByKind[f.kind] = (faultsByKind[f.kind] ?? 0) + 1;
  /** The phase that ends each change (membership.ts). */
  const lastPhase: Partial<Record<FaultKind, string>> = {
    join: "replicas",
    decommission: "removed",
    remove: "removed",
  };
  const changes = faults
    .filter((f) => MEMBERSHIP_KINDS.has(f.kind))
    .map((f) => ({
      kind: f.kind,
      node: f.targets[0] ?? "",
      done: f.phases[lastPhase[f.kind] ?? ""] !== undefined,
      phases: f.phases,
    }));
  const byKind: Record<string, number> = {};
  for (const o of ops) byKind[o.kind] = (byKind[o.kind] ?? 0) + 1;
  const errors: Record<string, number> = {};
  for (const o of ops) {
    if (o.error === undefined) continue;
    const e = `${o.outcome} ${o.kind} ${o.error.replace(/\d+/g, "#").slice(0, 140)}`;
    errors[e] = (errors[e] ?? 0) + 1;
  }
  const verdict: RunReport["verdict"] =
    findings.length > 0 ? "fail" : linearizability.status === "ok" ? "pass" : "unknown";

  const worstByKind = new Map<FaultKind, number>();
  for (const f of faults)
    worstByKind.set(f.kind, Math.max(worstByKind.get(f.kind) ?? 0, f.unavailableMs));
  const summary = [
    `chaos seed=${options.seed} scenario=${options.scenario}${options.tls === true ? " tls" : ""}${bugs.length > 0 ? ` bugs=${bugs.join(",")}` : ""}:`,
    `${ops.length} ops (${ops.filter((o) => o.outcome === "ok").length} ok, ${ops.filter((o) => o.outcome === "info").length} indeterminate, ${ops.filter((o) => o.outcome === "fail").length} failed), ${checked} checked;`,
    serializableLine(ops),
    `faults ${
      faults.length === 0
        ? "none"
        : Object.entries(faultsByKind)
            .map(([k, n]) => `${k}×${n}`)
            .join(" ")
    };`,
    ...(changes.length === 0
      ? []
      : [
          `changes ${changes
            .map(
              (c) =>
                `${c.kind} ${c.node} ${Object.entries(c.phases)
                  .map(([k, ms]) => `${k} ${(ms / 1000).toFixed(1)}s`)
                  .join(" ")}${c.done ? "" : " (unfinished)"}`,
            )
            .join(", ")};`,
        ]),
    `longest no-write window ${faults.length === 0 ? "-" : [...worstByKind].map(([k, ms]) => `${k} ${(ms / 1000).toFixed(1)}s`).join(", ")};`,
    `linearizable ${linearizability.status} (${linearizability.ms} ms);`,
    `healthy ${healthyAfterHealMs === null ? "never" : `${(healthyAfterHealMs / 1000).toFixed(1)}s`} after heal;`,
    `${findings.length} findings → ${verdict.toUpperCase()}`,
  ].join(" ");

  const report: RunReport = {
    seed: options.seed,
    scenario: options.scenario,
    bugs,
    tls: options.tls === true,
    durationMs: options.durationMs,
    wallMs: Math.round(now()),
    operations: {
      total: ops.length,
      ok: ops.filter((o) => o.outcome === "ok").length,
      indeterminate: ops.filter((o) => o.outcome === "info").length,
      failed: ops.filter((o) => o.outcome === "fail").length,
      byKind,
      errors,
      checked,
      keys: workload?.keys.length ?? 0,
    },
    faults,
    faultsByKind,
    changes,
    linearizability,
    findings,
    crashes: cluster.crashes,
    healthyAfterHealMs,
    net: cluster.net.stats,
    verdict,
    summary,
    dir,
  };
  await writeFile(join(dir, "report.json"), JSON.stringify(report, null, 2) + "\n");
  // The history of every run (gzipped: a few hundred KiB), the nodes' logs of a failed one.
  await writeFile(
    join(dir, "history.jsonl.gz"),
    gzipSync(ops.map((o) => JSON.stringify(o)).join("\n") + "\n"),
  );
  if (verdict !== "pass") await cluster.writeLogs(dir);
  await rm(dataDir, { recursive: true, force: true });
  log(summary);
  return report;
}

/**
 * How many serializable Gets answered, and how many of them another node than the one called
 * served (forwarded: the node called held no replica of the key's shard), or an unknown one.
 */
function serializableLine(ops: readonly ChaosOp[]): string {
  const answered = ops.filter((o) => o.kind === "get-serializable" && o.outcome === "ok");
  const elsewhere = answered.filter((o) => o.served !== undefined && o.served.node !== o.node);
  const unknown = answered.filter((o) => o.served === undefined);
  return `serializable gets ${answered.length} ok, ${elsewhere.length} served by another node, ${unknown.length} by an unknown one;`;
}
