/**
 * Faults on a schedule: each is injected, held for a few seconds, healed, and followed by a
 * quiet spell before the next, so that every fault's effect on availability can be measured on
 * its own. Choices are drawn from the run's seed (the timing of real processes is not
 * deterministic, so a seed replays the schedule, not the interleaving).
 *
 * Kinds:
 * - kill-leader: SIGKILL the node leading the most shards (by a live node's cluster view), then
 *   restart it on its data directory;
 * - kill-random: SIGKILL any node, then restart it;
 * - kill-flap: a crash loop: SIGKILL any node, restart it, SIGKILL it again 1.5-3 s after it
 *   started (while it may still be catching up, by log or snapshot), restart it again;
 * - kill-all: SIGKILL every node at once (a power cut of the whole cluster), then restart all;
 * - pause: SIGSTOP the busiest leader for longer than the election timeout, then SIGCONT (a
 *   "zombie" leader that wakes up believing it still leads);
 * - partition: one node cut from the others both ways, TCP stalled as a blackhole and
 *   datagrams dropped (with three nodes, the 2/1 split; with five, one or two nodes cut off);
 * - partition-reset: the same, but connections reset and refused;
 * - asymmetric: one direction only (the node hears the others but they do not hear it, or the
 *   reverse);
 * - udp-loss: most SWIM datagrams to and from one node lost, Raft untouched;
 * - delay: latency on every link (TCP and UDP), with jitter between links;
 * - torn-write: SIGKILL any node, then end its WAL's last segment with a torn record (a frame cut
 *   short, or whole with a body that does not match its checksum), as a crash in the middle of a
 *   write leaves it; the restart must cut it off (and say so in its log) and lose nothing
 *   acknowledged: the torn bytes stand for a write that was never synced, so never acknowledged;
 * - bit-rot: SIGKILL any node, flip a byte in the first block of one of its tables (a shard's
 *   directory, the meta group's included, drawn), restart it and read its own copy (serializable
 *   Scans through it) until it meets the damage: it must stop (exit code 1), logging that it
 *   moved the shard's directory aside (src/replication/corrupt-shard.ts), within
 *   BIT_ROT_STOP_MS; restarted, its peers refill the shard, and the run's checks find nothing
 *   lost. A block its start reads (the engine's open) makes it move the directory aside in that
 *   start (its peers refill the shard then), or, where it cannot know the shard's replicas,
 *   refuse to start naming the directory: moved, as an operator would, and restarted. Like a
 *   wipe, it waits (bounded) for every node to be healthy first;
 * - disk-full: one node's data directory (a tmpfs, scenario "disk" only) filled to ENOSPC; the
 *   node may stop (fail-stop, exit code 1); space freed and the node restarted at the heal;
 * - disk-nearly-full: one node's data directory (a tmpfs, scenario "disk-guard" only) filled to
 *   97 %, past `cluster.disk_full_percent` (95) but not to ENOSPC, for at least 30 s (three of
 *   the node's 10-s disk checks), then freed. Sampled every second through one running member's
 *   view, what the guard promises (`guardErrors`, each a finding): the member is marked full
 *   within that time, the replicas placed on it never grow while it is marked (but by a new
 *   shard when fewer than the factor of active members have room), and it is marked as having
 *   room again within 30 s of the space freed. A member down meanwhile is judged on nothing it
 *   could not do;
 * - rotate-keys (a secured cluster only: `--tls`): what an operator's rotation does, on every
 *   member one at a time (its own files, as on its own machine), a few hundred milliseconds
 *   apart: the gossip key rotated in its three steps (a new key listed second, then first, then
 *   the old one dropped), each step begun once the one before reached every member and a second
 *   more passed (the nodes look at the file every second); then every member's certificate and
 *   key renewed from the cluster's CA (the certificate file replaced first: a node that reads
 *   between the two sees a pair that does not match and must keep what it had). Within
 *   ROTATION_SEEN_MS of the last key step, each running member must ack a ping sealed under the
 *   new key with an ack sealed under it, and leave one under the old key unanswered; within as
 *   long of its renewal it must serve its new certificate (`rotationErrors`, each a finding);
 * - join, decommission, remove: membership changes (membership.ts). They run beside the
 *   schedule, one at a time, while the other faults go on: a drawn change starts when none is
 *   under way and the cluster allows it (a join while there are fewer than its founding size + 2
 *   members; a decommission or a removal while there are at least replication factor + 1, so
 *   that the replicas have somewhere to go), else the draw falls back to another change, or to
 *   a fault of another kind. While a change is under way, a kill, pause or partition hits the
 *   node it is about one time in four, and the meta group's leader one time in four.
 *
 * A scripted scenario (SCRIPTS) draws nothing: it runs its membership changes in order, each
 * one after the one before finished, with no other fault, and ends when the last one ends (the
 * run's duration is then a minimum). "grow-shrink" grows three nodes to five, decommissions one,
 * loses one for good and replaces it by a new identity, and decommissions one more: three
 * members at the end, none of them necessarily a founder.
 *
 * Every kind of change the membership scenario names happens in each of its runs
 * (PLANNED_SCENARIOS; in mixed a change is drawn now and then, as any fault): the schedule
 * draws a plan at the start (planChanges: each kind once, in a seeded order each step of which
 * the cluster allows, with a join put before a decommission or removal that needs one) and
 * runs it first, one change after another, while the other faults are drawn beside it; a membership draw only
 * starts a change of its own once the plan is done. A plan outlasts the run's duration on a slow
 * machine (a change takes seconds to minutes): the faults then go on, and the workload with
 * them, until the plan ends (the duration is a minimum), for at most PLAN_OVERRUN_MS more.
 */
import { randomBytes } from "node:crypto";
import { appendFile, open, readdir, rename, rm } from "node:fs/promises";
import { basename, join, sep } from "node:path";
import { type Rng, shuffle } from "../../src/common/index.ts";
import { clusterView } from "../support/cluster-process.ts";
import type { ChaosCluster } from "./cluster.ts";
import { everyNodeHealthy, MembershipChanges, timeout } from "./membership.ts";
import { eventually } from "./poll.ts";

export const FAULT_KINDS = [
  "kill-leader",
  "kill-random",
  "kill-flap",
  "kill-all",
  "pause",
  "partition",
  "partition-reset",
  "asymmetric",
  "udp-loss",
  "delay",
  "disk-full",
  "disk-nearly-full",
  "wipe",
  "torn-write",
  "bit-rot",
  "join",
  "decommission",
  "remove",
  "rotate-keys",
] as const;

export type FaultKind = (typeof FAULT_KINDS)[number];

/** The membership changes (membership.ts), which run beside the other faults. */
export const MEMBERSHIP_KINDS: ReadonlySet<FaultKind> = new Set(["join", "decommission", "remove"]);

/** The replication factor of the chaos clusters (the default). */
const REPLICATION_FACTOR = 3;

/**
 * The scenarios whose runs each make every kind of change they name (planChanges): membership.
 * Elsewhere (mixed) a change is drawn now and then, as any fault.
 */
export const PLANNED_SCENARIOS: ReadonlySet<string> = new Set(["membership", "disk-guard"]);

/** How long past the run's fault window the faults go on for a plan of changes to finish. */
const PLAN_OVERRUN_MS = 300_000;

/**
 * The membership changes a run makes first (see the file comment): every kind of `kinds` that
 * is a change, once, in an order drawn from `rng` in which the cluster allows each step (a join
 * below `founding` + 2 members, a decommission or removal above the replication factor); a join
 * is put in first when a decommission or removal is due and too few members are left for it.
 */
export function planChanges(kinds: readonly FaultKind[], founding: number, rng: Rng): FaultKind[] {
  const due = [...MEMBERSHIP_KINDS].filter((k) => kinds.includes(k));
  const plan: FaultKind[] = [];
  let members = founding;
  const allowed = (k: FaultKind): boolean =>
    k === "join" ? members < founding + 2 : members > REPLICATION_FACTOR;
  while (due.length > 0) {
    const now = due.filter(allowed);
    let kind: FaultKind;
    if (now.length > 0) {
      kind = now[rng.int(now.length)] as FaultKind;
      due.splice(due.indexOf(kind), 1);
    } else if (kinds.includes("join") && allowed("join")) kind = "join";
    else break;
    plan.push(kind);
    members += kind === "join" ? 1 : -1;
  }
  return plan;
}

/** Faults only a secured cluster (`--tls`) has: left out of a cleartext run's draws. */
export const TLS_KINDS: ReadonlySet<FaultKind> = new Set(["rotate-keys"]);

/** Scenario name → the kinds it draws from. */
export const SCENARIOS: Readonly<Record<string, readonly FaultKind[]>> = {
  // Not the disk faults: they need a tmpfs (TMPFS_SCENARIOS); nor bit-rot, newer than the
  // mixed seeds recorded in BENCHMARKS.md and the smoke test, whose draws it would change.
  mixed: FAULT_KINDS.filter(
    (k) => k !== "disk-full" && k !== "disk-nearly-full" && k !== "bit-rot",
  ),
  kill: ["kill-leader", "kill-random", "kill-flap"],
  "kill-all": ["kill-all"],
  crash: ["kill-leader", "kill-random", "kill-flap", "kill-all", "torn-write"],
  "torn-write": ["torn-write"],
  // A shard's table damaged on one member while members crash: it must heal from its peers.
  // Listed twice: half the draws.
  "bit-rot": ["bit-rot", "bit-rot", "kill-random", "kill-flap", "pause"],
  pause: ["pause"],
  partition: ["partition", "partition-reset", "asymmetric"],
  network: ["partition", "partition-reset", "asymmetric", "udp-loss", "delay"],
  "udp-loss": ["udp-loss"],
  delay: ["delay"],
  disk: ["disk-full", "kill-random"],
  // A member nearly full while members join, leave and are lost: moves must avoid it.
  "disk-guard": ["disk-nearly-full", "join", "decommission", "remove", "kill-random"],
  wipe: ["wipe", "kill-random"],
  membership: [
    "join",
    "decommission",
    "remove",
    "kill-leader",
    "kill-random",
    "kill-flap",
    "pause",
    "partition",
    "partition-reset",
    "asymmetric",
  ],
  "grow-shrink": ["join", "decommission", "remove"],
  // Keys and certificates rotated while nodes crash, pause, are cut off and join (--tls only).
  // Listed three times: a third of the draws (once, a run of 60 s drew it 0–1 times).
  rotate: [
    "rotate-keys",
    "rotate-keys",
    "rotate-keys",
    "kill-random",
    "kill-flap",
    "pause",
    "partition",
    "udp-loss",
    "join",
  ],
  none: [],
};

/** Scenarios that run only on a secured cluster (`--tls`): their point is a TLS-only fault. */
export const TLS_SCENARIOS: ReadonlySet<string> = new Set(["rotate"]);

/**
 * The kinds run `scenario` draws from: a cleartext run leaves out TLS_KINDS (its draws are
 * then what they were before those kinds existed); null for an unknown scenario, or a TLS-only
 * one (TLS_SCENARIOS) run in cleartext.
 */
export function scenarioKinds(scenario: string, tls: boolean): readonly FaultKind[] | null {
  const kinds = SCENARIOS[scenario];
  if (kinds === undefined || (TLS_SCENARIOS.has(scenario) && !tls)) return null;
  return tls ? kinds : kinds.filter((k) => !TLS_KINDS.has(k));
}

/**
 * Scripted scenarios: the membership changes they run, in order (see the file comment). Each
 * change is allowed where it stands: a join below founding + 2 members, a decommission or a
 * removal above the replication factor.
 */
export const SCRIPTS: Readonly<Record<string, readonly FaultKind[]>> = {
  "grow-shrink": ["join", "join", "decommission", "remove", "join", "decommission"],
};

/** Whether `scenario` changes the cluster's membership (its nodes then run a short dead_after). */
export function changesMembership(scenario: string): boolean {
  return (SCENARIOS[scenario] ?? []).some((k) => MEMBERSHIP_KINDS.has(k));
}

/** Scenarios whose nodes keep their data on a tmpfs each (a disk that can fill up). */
export const TMPFS_SCENARIOS: ReadonlySet<string> = new Set(["disk", "disk-guard"]);

export interface FaultRecord {
  readonly kind: FaultKind;
  readonly targets: readonly string[];
  detail: string;
  readonly start: number;
  /** When the heal began (the node restarted, resumed, the network healed). */
  healedAt: number;
  /** When the heal finished (for a kill: the node restarted and logged "node started"). */
  healDone: number;
  /** A membership change: milliseconds from its start to each phase it reached. */
  readonly phases: Record<string, number>;
}

export interface ScheduleOptions {
  readonly kinds: readonly FaultKind[];
  /** On the run's clock: the first fault not before, the last heal not after. */
  readonly from: number;
  readonly until: number;
  readonly holdMs: readonly [number, number];
  readonly quietMs: readonly [number, number];
  /** Milliseconds of one election timeout (tick × election ticks): pauses last longer. */
  readonly electionMs: number;
  /** A scripted scenario's changes (SCRIPTS): run in order instead of drawn. */
  readonly script?: readonly FaultKind[];
  /** Make every kind of change `kinds` names, first (planChanges; PLANNED_SCENARIOS). */
  readonly planChanges?: boolean;
  /**
   * Faults to inject at the least (default 0): the faults go on past `until` until as many were
   * (for at most PLAN_OVERRUN_MS more), as for a plan of changes. A short run on a loaded
   * machine otherwise fits fewer faults than the same seed draws on an idle one.
   */
  readonly minFaults?: number;
}

function between(rng: Rng, [lo, hi]: readonly [number, number]): number {
  return lo + rng.int(Math.max(1, hi - lo));
}

function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, Math.max(0, ms)));
}

/** The running node leading the most shards, or a random running node if none is known. */
async function busiestLeader(cluster: ChaosCluster, rng: Rng): Promise<string | null> {
  const running = cluster.nodes.filter((n) => n.state === "running" && n.client !== null);
  if (running.length === 0) return null;
  const counts = new Map<string, number>();
  for (const n of running) {
    try {
      const c = n.client;
      if (c === null) continue;
      const view = await timeout(clusterView(c), 2_000);
      for (const s of view.shards) {
        if (s.leader !== "") counts.set(s.leader, (counts.get(s.leader) ?? 0) + 1);
      }
      break;
    } catch {
      // try the next node
    }
  }
  const best = [...counts].filter(([id]) => running.some((n) => n.id === id));
  best.sort((a, b) => b[1] - a[1]);
  return best[0]?.[0] ?? (running[rng.int(running.length)]?.id as string);
}

/** The node leading the meta group (shard 0) by a running member's view, or null. */
async function metaLeader(cluster: ChaosCluster): Promise<string | null> {
  for (const n of cluster.members()) {
    const c = n.client;
    if (c === null || n.state !== "running") continue;
    try {
      const view = await timeout(clusterView(c), 2_000);
      const leader = view.shards.find((s) => s.id === 0)?.leader ?? "";
      if (leader !== "") return leader;
    } catch {
      // try the next member
    }
  }
  return null;
}

/** How full the disk-nearly-full fault makes a disk: past the default threshold of 95 %. */
const NEARLY_FULL_PERCENT = 97;
/**
 * How long a running member may take to serve its renewed certificate: it looks at its TLS
 * files every second (src/common/tls-files.ts), and a reader between the two files' renames
 * waits for the next look.
 */
const ROTATION_SEEN_MS = 10_000;
/** After a step of a gossip key rotation reached every member: their next look, and a margin. */
const KEY_STEP_SETTLE_MS = 1_500;

/** How long it holds at least: three of a node's 10-s disk checks (src/node/disk-watch.ts). */
const NEARLY_FULL_HOLD_MS = 30_000;
/** How long after the space is freed the member must be marked as having room again. */
const ROOM_AGAIN_MS = 30_000;

/** One member's view of a member's disk (Meta.WatchCluster). */
export interface DiskSample {
  /** The member whose view it is. */
  readonly via: string;
  readonly full: boolean;
  /** Shards the metadata places on the member. */
  readonly replicas: number;
  /**
   * Shards the metadata places on every member, summed (the same meta state as `replicas`):
   * a new shard adds the factor, a move adds nothing (a node replaced by another) or one (a
   * shard under its factor given one more). Not the view's shard list: that lists a new shard
   * only once a replica here opened it, after the meta state that counts it.
   */
  readonly placed: number;
  /** Active members not marked full. */
  readonly roomy: number;
  /** The member's state in the view (absent or "" when it names none). */
  readonly state?: string;
}

/**
 * What two samples of `victim`'s disk in a row show the guard break, or null: seen through one
 * member's view and marked full in both, its placements may grow only by new shards (each adds
 * the factor to `placed`), and only when fewer than the factor of active members have room.
 */
export function guardBreach(victim: string, before: DiskSample, now: DiskSample): string | null {
  if (before.via !== now.via || !before.full || !now.full) return null;
  const gained = now.replicas - before.replicas;
  if (gained <= 0) return null;
  const created = Math.max(0, Math.floor((now.placed - before.placed) / REPLICATION_FACTOR));
  if (gained <= created && Math.min(before.roomy, now.roomy) < REPLICATION_FACTOR) return null;
  return `${victim}, marked nearly full in ${now.via}'s view, went from ${before.replicas} to ${now.replicas} replicas (placements of every member ${before.placed} → ${now.placed}: ${created} new shard(s); ${now.roomy} active members with room)`;
}

/**
 * `victim`'s disk as a running member sees it: `via` when it answers, else the first other one
 * that does within 2 s (null when none does).
 */
async function diskSample(
  cluster: ChaosCluster,
  victim: string,
  via: string | null,
): Promise<DiskSample | null> {
  const running = cluster.members().filter((n) => n.state === "running" && n.client !== null);
  running.sort((a, b) => Number(b.id === via) - Number(a.id === via));
  for (const n of running) {
    const c = n.client;
    if (c === null) continue;
    try {
      const view = (await timeout(clusterView(c), 2_000)) as unknown as {
        nodes: { id: string; member_state?: string; replicas?: number; disk_full?: boolean }[];
      };
      const m = view.nodes.find((x) => x.id === victim);
      if (m === undefined) continue;
      const roomy = view.nodes.filter((x) => x.member_state === "active" && x.disk_full !== true);
      return {
        via: n.id,
        full: m.disk_full === true,
        replicas: Number(m.replicas ?? 0),
        placed: view.nodes.reduce((sum, x) => sum + Number(x.replicas ?? 0), 0),
        roomy: roomy.length,
        state: m.member_state ?? "",
      };
    } catch {
      // the next member
    }
  }
  return null;
}

/** The WAL's framing (src/storage/wal/record.ts): u32 body length, u32 crc32c(body), body. */
const WAL_FRAME_HEADER_BYTES = 8;
const WAL_BODY_HEADER_BYTES = 24;

/**
 * Appends a torn record to the last WAL segment under `dataDir` (with shard workers, of one
 * worker's WAL, `wal-worker-<i>`, picked at random): a frame whose body is cut short, or a whole
 * frame whose checksum does not match (the sectors of its body never written). Returns what it
 * wrote, for the fault's record.
 */
export async function tearWalTail(dataDir: string, rng: Rng): Promise<string> {
  // The WALs' directories, not their created markers beside them (`wal-worker-<i>.created`).
  const wals = (await readdir(dataDir)).filter((f) => f === "wal" || /^wal-worker-\d+$/.test(f));
  wals.sort();
  // One WAL (no workers): no draw, so the seeds of runs without workers replay as before.
  const name = wals.length <= 1 ? "wal" : (wals[rng.int(wals.length)] as string);
  const walDir = join(dataDir, name);
  const segments = (await readdir(walDir)).filter((f) => f.endsWith(".wal")).sort();
  const last = segments.at(-1);
  if (last === undefined) return "no WAL segment to tear";
  const bodyLength = WAL_BODY_HEADER_BYTES + 1 + rng.int(4_000);
  const cutShort = rng.int(2) === 0;
  const written = cutShort ? rng.int(bodyLength) : bodyLength;
  const frame = Buffer.alloc(WAL_FRAME_HEADER_BYTES + written);
  frame.writeUInt32LE(bodyLength, 0);
  frame.writeUInt32LE(rng.nextU32(), 4);
  for (let i = WAL_FRAME_HEADER_BYTES; i < frame.length; i++) frame[i] = rng.int(256);
  await appendFile(join(walDir, last), frame);
  return cutShort
    ? `${name}/${last} ends with a frame of ${bodyLength} body bytes cut after ${written}`
    : `${name}/${last} ends with a ${bodyLength}-byte body that fails its checksum`;
}

/** How long a node given a damaged table may take to meet the damage and stop (bit-rot). */
const BIT_ROT_STOP_MS = 30_000;

/**
 * Flips a byte inside the first block of one table of a shard directory of `dataDir`, both
 * drawn from `rng`: the meta group's (shard 0) a third of the time when it holds a table (its
 * voters' record, meta-voters.ts, lets the node move it aside at start). Returns what it
 * damaged, or null when no shard holds a table.
 */
async function rotTable(dataDir: string, rng: Rng): Promise<string | null> {
  const shards = join(dataDir, "shards");
  const ids = (await readdir(shards).catch(() => [] as string[]))
    .filter((n) => /^\d+$/.test(n))
    .sort((a, b) => Number(a) - Number(b));
  const candidates: string[] = [];
  for (const id of ids) {
    for (const name of (await readdir(join(shards, id))).sort()) {
      if (name.endsWith(".sst")) candidates.push(join(id, name));
    }
  }
  if (candidates.length === 0) return null;
  // The meta group's tables a third of the time when it has any: one shard of many otherwise.
  const meta = candidates.filter((c) => c.startsWith(`0${sep}`));
  const from = meta.length > 0 && rng.int(3) === 0 ? meta : candidates;
  const table = from[rng.int(from.length)] as string;
  const file = await open(join(shards, table), "r+");
  try {
    const at = 8 + rng.int(64);
    const byte = Buffer.alloc(1);
    await file.read(byte, 0, 1, at);
    byte[0] = (byte[0] as number) ^ (1 + rng.int(255));
    await file.write(byte, 0, 1, at);
    return `shards/${table} byte ${at}`;
  } finally {
    await file.close();
  }
}

/** Whether every node answers GET /health with `healthy` within `timeoutMs`. */
async function allHealthy(cluster: ChaosCluster, timeoutMs: number): Promise<boolean> {
  const deadline = performance.now() + timeoutMs;
  for (;;) {
    if (await everyNodeHealthy(cluster)) return true;
    if (performance.now() > deadline) return false;
    await sleep(500);
  }
}

export class FaultSchedule {
  readonly records: FaultRecord[] = [];
  /** Membership changes that failed or did not finish (each fails the run). */
  readonly changeErrors: string[] = [];
  /** What a disk-nearly-full fault saw the disk guard break (each fails the run). */
  readonly guardErrors: string[] = [];
  /** What the rotate-keys faults found: a member that did not serve its renewed certificate. */
  readonly rotationErrors: string[] = [];
  readonly #cluster: ChaosCluster;
  readonly #rng: Rng;
  readonly #now: () => number;
  readonly #options: ScheduleOptions;
  /** Null unless the scenario changes membership. */
  readonly #changes: MembershipChanges | null;
  /** The membership change under way. */
  #change: Promise<void> | null = null;
  /** Members at the founding: joins stop at two more. */
  readonly #founding: number;
  /** The changes every run makes, in order (planChanges); shifted as each starts. */
  readonly #plan: FaultKind[];
  /** A planned change is under way. */
  #planned = false;
  #stopped = false;

  constructor(cluster: ChaosCluster, rng: Rng, now: () => number, options: ScheduleOptions) {
    this.#cluster = cluster;
    this.#rng = rng;
    this.#now = now;
    this.#options = options;
    this.#founding = cluster.members().length;
    this.#changes = options.kinds.some((k) => MEMBERSHIP_KINDS.has(k))
      ? new MembershipChanges(cluster, now)
      : null;
    // No draw without changes: the seeds of the other scenarios replay as before.
    this.#plan =
      this.#changes === null || options.planChanges !== true
        ? []
        : planChanges(options.kinds, this.#founding, rng);
  }

  stop(): void {
    this.#stopped = true;
  }

  /** Runs faults until `until`; every fault is healed before it returns (not every change). */
  async run(): Promise<void> {
    const o = this.#options;
    await sleep(o.from - this.#now());
    if (o.script !== undefined) return this.#runScript(o.script);
    while (!this.#stopped && o.kinds.length > 0) {
      const hold = between(this.#rng, o.holdMs);
      // Room for the fault, its heal (a restart takes a few seconds) and a quiet spell; a plan
      // of changes not done yet, or fewer faults than minFaults, keeps the faults going
      // (bounded).
      const owed = !this.#planDone() || this.records.length < (o.minFaults ?? 0);
      const until = owed ? o.until + PLAN_OVERRUN_MS : o.until;
      if (this.#now() + hold + 3_000 > until) break;
      // A change that failed fails the run: the rest of the plan is dropped.
      if (this.changeErrors.length > 0) this.#plan.length = 0;
      const next = this.#plan[0];
      if (next !== undefined && this.#change === null) {
        if (this.#allowedChange(next, false) !== next)
          throw new Error(
            `the planned ${next} is not allowed with ${this.#cluster.members().length} members`,
          );
        this.#plan.shift();
        this.#startChange(next, true);
        await sleep(between(this.#rng, o.quietMs));
        continue;
      }
      let kind = o.kinds[this.#rng.int(o.kinds.length)] as FaultKind;
      if (MEMBERSHIP_KINDS.has(kind) && !this.#planDone()) {
        // The plan's changes come first, one at a time: a fault of another kind instead.
        const others = o.kinds.filter((k) => !MEMBERSHIP_KINDS.has(k));
        if (others.length === 0) {
          await sleep(between(this.#rng, o.quietMs));
          continue;
        }
        kind = others[this.#rng.int(others.length)] as FaultKind;
      }
      if (MEMBERSHIP_KINDS.has(kind)) {
        const change = this.#allowedChange(kind);
        if (change !== null) {
          this.#startChange(change);
          await sleep(between(this.#rng, o.quietMs));
          continue;
        }
        const others = o.kinds.filter((k) => !MEMBERSHIP_KINDS.has(k));
        if (others.length === 0) {
          await sleep(between(this.#rng, o.quietMs));
          continue;
        }
        kind = others[this.#rng.int(others.length)] as FaultKind;
      }
      await this.#cluster.exclusive(() => this.#inject(kind, hold));
      await sleep(between(this.#rng, o.quietMs));
    }
  }

  /** Runs `script`'s changes one after another; a change that fails ends the script. */
  async #runScript(script: readonly FaultKind[]): Promise<void> {
    for (const kind of script) {
      if (this.#stopped) return;
      if (this.#allowedChange(kind, false) !== kind)
        throw new Error(
          `the script's ${kind} is not allowed with ${this.#cluster.members().length} members`,
        );
      this.#startChange(kind);
      await this.#change;
      if (this.changeErrors.length > 0) return;
      await sleep(between(this.#rng, this.#options.quietMs));
    }
  }

  /** Whether every planned change started, and none is under way. */
  #planDone(): boolean {
    return this.#plan.length === 0 && !this.#planned;
  }

  /**
   * Waits (at most `timeoutMs`) for the membership change under way, if any; one that does not
   * finish is an error of the run.
   */
  async settle(timeoutMs: number): Promise<void> {
    if (this.#plan.length > 0 && this.changeErrors.length === 0)
      this.changeErrors.push(`the planned ${this.#plan.join(", ")} never started`);
    const change = this.#change;
    if (change === null) return;
    let timer: NodeJS.Timeout | undefined;
    const late = await Promise.race([
      change.then(() => false),
      new Promise<boolean>((r) => (timer = setTimeout(() => r(true), timeoutMs))),
    ]);
    clearTimeout(timer);
    if (late)
      this.changeErrors.push(
        `a membership change was still under way ${timeoutMs} ms after the faults`,
      );
  }

  /**
   * `kind`, or another change the cluster allows now (see the file comment), or null (a change
   * is under way, or too little of the run is left for one).
   */
  #allowedChange(kind: FaultKind, timed = true): FaultKind | null {
    if (this.#changes === null || this.#change !== null) return null;
    if (timed && this.#now() + 15_000 > this.#options.until) return null;
    const members = this.#cluster.members().length;
    const allowed = (k: FaultKind): boolean =>
      this.#options.kinds.includes(k) &&
      (k === "join" ? members < this.#founding + 2 : members > REPLICATION_FACTOR);
    if (allowed(kind)) return kind;
    const others = [...MEMBERSHIP_KINDS].filter(allowed);
    return others.length === 0 ? null : (others[this.#rng.int(others.length)] as FaultKind);
  }

  #startChange(kind: FaultKind, planned = false): void {
    const changes = this.#changes;
    if (changes === null) return;
    const r = {
      kind,
      targets: [] as string[],
      detail: "",
      start: this.#now(),
      healedAt: 0,
      healDone: 0,
      phases: {} as Record<string, number>,
    };
    this.records.push(r);
    const members = this.#cluster.members();
    const victim = (members[this.#rng.int(members.length)] as { id: string }).id;
    // A join takes a removed member's id one time in two when there is one (its new life:
    // design.md §5.2, src/cluster/meta.ts); drawn only then, so runs without one replay as before.
    const removed = this.#cluster.nodes.filter((n) => n.retired);
    const reuse =
      kind === "join" && removed.length > 0 && this.#rng.int(2) === 0
        ? (removed[this.#rng.int(removed.length)] as { id: string }).id
        : null;
    const change =
      kind === "join"
        ? changes.join(r, reuse)
        : kind === "decommission"
          ? changes.decommission(victim, r)
          : changes.remove(victim, r);
    this.#planned = planned;
    this.#change = change
      .then(
        () => undefined,
        (err: unknown) => {
          const message = `${kind} ${r.targets.join(",")}: ${String(err)}`;
          r.detail += ` — failed: ${String(err)}`;
          this.changeErrors.push(message);
        },
      )
      .finally(() => {
        r.healedAt = this.#now();
        r.healDone = r.healedAt;
        this.#change = null;
        this.#planned = false;
        changes.target = null;
      });
  }

  /**
   * While a membership change is under way, one time in four the node it is about, one time in
   * four the meta group's leader (when known and a member); otherwise (and in scenarios without
   * changes, with no draw) null: the fault's usual choice.
   */
  async #biasedVictim(ids: readonly string[]): Promise<string | null> {
    const changes = this.#changes;
    if (changes === null || this.#change === null) return null;
    const draw = this.#rng.int(4);
    if (draw === 0 && changes.target !== null && ids.includes(changes.target))
      return changes.target;
    if (draw === 1) {
      const leader = await metaLeader(this.#cluster);
      if (leader !== null && ids.includes(leader)) return leader;
    }
    return null;
  }

  /**
   * The disk-nearly-full fault (see the file comment): fills `victim`'s tmpfs to
   * NEARLY_FULL_PERCENT for at least NEARLY_FULL_HOLD_MS, watching the guard, then frees it and
   * waits for the member to be marked as having room again.
   */
  async #nearlyFull(
    victim: string,
    hold: number,
    record: (targets: string[], detail: string) => FaultRecord,
  ): Promise<void> {
    const cluster = this.#cluster;
    const r = record([victim], `${victim}'s disk nearly full`);
    const percent = await cluster.fillDiskTo(victim, NEARLY_FULL_PERCENT);
    r.detail = `${victim}'s disk ${percent}% full`;
    const t0 = this.#now();
    const until = t0 + Math.max(hold, NEARLY_FULL_HOLD_MS);
    /** The victim was not running at some sample (stopped on ENOSPC, killed by a change). */
    let away = false;
    /**
     * The victim left the cluster during the fault (a decommission that ended, a removal): it
     * holds no replica and the meta group records no disk of it (seed 10222, disk-guard --tls:
     * n3 decommissioned 2.6 s into its fault, "never marked", a false finding).
     */
    let left = false;
    let markedAt: number | null = null;
    let before: DiskSample | null = null;
    /** Replicas it gained while marked, with new shards when too few members had room. */
    let newShards = 0;
    while (this.#now() < until) {
      if (cluster.node(victim).state !== "running") away = true;
      const now = await diskSample(cluster, victim, before?.via ?? null);
      if (now !== null) {
        if (now.state === "decommissioned" || now.state === "removed") left = true;
        if (now.full && markedAt === null) markedAt = this.#now() - t0;
        if (before !== null) {
          const breach = guardBreach(victim, before, now);
          if (breach !== null) this.guardErrors.push(breach);
          else if (before.via === now.via && now.full && now.replicas > before.replicas)
            newShards += now.replicas - before.replicas;
        }
        before = now;
      }
      await sleep(1_000);
    }
    r.healedAt = this.#now();
    r.detail +=
      markedAt !== null
        ? `; marked after ${(markedAt / 1000).toFixed(1)} s`
        : left
          ? "; never marked: it left the cluster meanwhile"
          : "; never marked";
    if (newShards > 0)
      r.detail += ` (took ${newShards} new shard(s) while marked: too few members had room)`;
    if (markedAt === null && !away && !left) {
      this.guardErrors.push(
        `${victim}'s disk was ${percent}% full for ${Math.round((r.healedAt - t0) / 1000)} s and no member's view marked it full`,
      );
    }
    await cluster.freeDisk(victim);
    if (cluster.node(victim).state === "down" && !cluster.node(victim).retired) {
      r.detail += "; it stopped, restarted";
      await cluster.start(victim);
    }
    if (markedAt !== null) {
      const freed = this.#now();
      let room: number | null = null;
      let via: string | null = null;
      while (this.#now() - freed < ROOM_AGAIN_MS) {
        if (cluster.node(victim).state !== "running") away = true;
        const now = await diskSample(cluster, victim, via);
        if (now !== null && (now.state === "decommissioned" || now.state === "removed"))
          left = true;
        if (now !== null && !now.full) {
          room = this.#now() - freed;
          break;
        }
        via = now?.via ?? null;
        await sleep(1_000);
      }
      if (room !== null)
        r.detail += `, room again ${(room / 1000).toFixed(1)} s after the space was freed`;
      else if (!away && !left)
        this.guardErrors.push(
          `${victim} was still marked nearly full ${ROOM_AGAIN_MS / 1000} s after its disk was freed`,
        );
    }
    r.healDone = this.#now();
  }

  /** The rotate-keys fault (see the file comment) on `ids`, the members when it began. */
  async #rotateKeys(ids: readonly string[], r: FaultRecord): Promise<void> {
    const cluster = this.#cluster;
    const rng = this.#rng;
    const inTurn = (): string[] => {
      const order = [...ids];
      shuffle(order, rng);
      return order;
    };
    const old = cluster.gossipKeys[0];
    if (old === undefined) throw new Error("rotate-keys: the cluster has no gossip key");
    const fresh = randomBytes(32).toString("base64");
    for (const keys of [[old, fresh], [fresh, old], [fresh]]) {
      for (const id of inTurn()) {
        await cluster.setGossipKeys(id, keys);
        await sleep(between(rng, [100, 400]));
      }
      await sleep(KEY_STEP_SETTLE_MS);
    }
    const late: string[] = [];
    // Each running member seals with the new key and no longer opens the old one. (A member
    // slow to answer the old key's ping passes for one that dropped it: this side of the check
    // is lenient; the new key's must be answered.)
    await this.#eachRunning(ids, late, async (id) => {
      if (!(await cluster.acksGossipSealedWith(id, fresh, 1_000))) return false;
      return !(await cluster.acksGossipSealedWith(id, old, 1_000));
    });
    for (const id of late)
      this.rotationErrors.push(
        `${id} did not seal with the new gossip key alone within ${ROTATION_SEEN_MS / 1000} s of the rotation's last step`,
      );
    r.healedAt = this.#now();
    const renewed = new Map<string, string>();
    for (const id of inTurn()) {
      renewed.set(id, cluster.renewCertificate(id));
      await sleep(between(rng, [100, 400]));
    }
    const stale: string[] = [];
    await this.#eachRunning(
      ids,
      stale,
      async (id) => (await cluster.servedCertificate(id)) === renewed.get(id),
    );
    for (const id of stale)
      this.rotationErrors.push(
        `${id} still served its old certificate ${ROTATION_SEEN_MS / 1000} s after its files were renewed`,
      );
    r.detail = `gossip key rotated in three steps, then the certificates renewed, on ${ids.join(", ")} in turn${late.length > 0 ? `; ${late.join(", ")} kept the old gossip key` : ""}${stale.length > 0 ? `; ${stale.join(", ")} kept the old certificate` : ""}`;
    r.healDone = this.#now();
  }

  /**
   * Asks `done` of each of `ids` until it holds (poll.ts), for ROTATION_SEEN_MS; the ids it
   * never held for go to `late`. A node stopped, paused or retired meanwhile is judged on
   * nothing it could not do (one started again read its new files at start).
   */
  async #eachRunning(
    ids: readonly string[],
    late: string[],
    done: (id: string) => Promise<boolean>,
  ): Promise<void> {
    const cluster = this.#cluster;
    await Promise.all(
      ids.map(async (id) => {
        const held = await eventually(ROTATION_SEEN_MS, async () => {
          const n = cluster.node(id);
          return n.retired || n.state !== "running" || (await done(id)) ? true : undefined;
        });
        if (held === undefined) late.push(id);
      }),
    );
  }

  async #inject(kind: FaultKind, hold: number): Promise<void> {
    const cluster = this.#cluster;
    const rng = this.#rng;
    const ids = cluster.members().map((n) => n.id);
    const random = (): string => ids[rng.int(ids.length)] as string;
    const biased = (): Promise<string | null> => this.#biasedVictim(ids);
    const record = (targets: string[], detail: string): FaultRecord => {
      const r: FaultRecord = {
        kind,
        targets,
        detail,
        start: this.#now(),
        healedAt: 0,
        healDone: 0,
        phases: {},
      };
      this.records.push(r);
      return r;
    };
    switch (kind) {
      case "kill-leader":
      case "kill-random": {
        const victim =
          (await biased()) ??
          (kind === "kill-leader" ? ((await busiestLeader(cluster, rng)) ?? random()) : random());
        const r = record([victim], "SIGKILL, restart on the same data directory");
        await cluster.kill(victim);
        await sleep(hold);
        r.healedAt = this.#now();
        await cluster.start(victim);
        r.healDone = this.#now();
        return;
      }
      case "wipe": {
        // A second replica lost before the first is refilled may lose acknowledged writes, as
        // in any three-replica system: a wipe waits (bounded) for every node to be healthy.
        if (!(await allHealthy(cluster, 20_000))) return;
        const victim = random();
        const r = record(
          [victim],
          "SIGKILL, data directory wiped, restart: it rejoins as a new replica, refilled by snapshots",
        );
        await cluster.kill(victim);
        await rm(cluster.node(victim).dataDir, { recursive: true, force: true });
        await sleep(hold);
        r.healedAt = this.#now();
        await cluster.start(victim);
        r.healDone = this.#now();
        return;
      }
      case "torn-write": {
        const victim = random();
        const r = record([victim], "SIGKILL, a torn record at the end of its WAL, restart");
        await cluster.kill(victim);
        r.detail = `SIGKILL, restart: ${await tearWalTail(cluster.node(victim).dataDir, rng)}`;
        await sleep(hold);
        r.healedAt = this.#now();
        await cluster.start(victim);
        r.healDone = this.#now();
        const lines = cluster.node(victim).server?.lines ?? [];
        if (!lines.some((l) => l.includes("the WAL ended with a torn write"))) {
          throw new Error(`${victim} restarted without reporting the torn write (${r.detail})`);
        }
        return;
      }
      case "bit-rot": {
        // Its replica is lost as with a wipe: the others must hold what it held first.
        if (!(await allHealthy(cluster, 20_000))) return;
        const victim = random();
        const r = record([victim], "SIGKILL, a table's byte flipped, restart, read: it stops");
        await cluster.kill(victim);
        const rotted = await rotTable(cluster.node(victim).dataDir, rng);
        r.detail = `SIGKILL, ${rotted ?? "no table to damage"}, restart`;
        if (rotted === null) {
          await cluster.start(victim);
          r.healedAt = r.healDone = this.#now();
          return;
        }
        cluster.mayFailStop(victim, true);
        try {
          const refusal = await cluster.startOrRefusal(victim);
          if (refusal !== null) {
            // Met as it opened the shard (a block an open reads): it refuses to start and says
            // what to do, which is done here as an operator would.
            const dir = /move (\S+) out of \S+ and start the node again: its peers refill/.exec(
              refusal,
            )?.[1];
            if (dir === undefined) throw new Error(`${victim} refused to start: ${refusal}`);
            // A name of its own: the same shard may be damaged again on this node in one run.
            const aside = `quarantined-${basename(dir)}-${Math.round(this.#now())}`;
            await rename(dir, join(cluster.node(victim).dataDir, aside));
            r.detail += ", it refused to start naming the shard, moved aside by hand";
            await sleep(hold);
            r.healedAt = this.#now();
            await cluster.start(victim);
            r.healDone = this.#now();
            return;
          }
          // Met as it opened the shard, its peers holding it: moved aside and refilled in that
          // start, the node serving.
          const started = cluster.node(victim).server?.lines ?? [];
          if (started.some((l) => l.includes("moved aside as the node started"))) {
            r.detail += ", it moved the shard aside as it started";
            r.healedAt = r.healDone = this.#now();
            return;
          }
          const stopped = await cluster.readUntilStopped(victim, BIT_ROT_STOP_MS);
          if (stopped === null) {
            throw new Error(
              `${victim} did not meet its damaged table (${rotted}) within ${BIT_ROT_STOP_MS} ms`,
            );
          }
          if (!stopped.some((l) => l.includes("its directory was moved aside"))) {
            throw new Error(`${victim} stopped without moving the damaged shard aside (${rotted})`);
          }
          r.detail += ", it stopped and moved the shard aside";
          await sleep(hold);
        } finally {
          cluster.mayFailStop(victim, false);
        }
        r.healedAt = this.#now();
        await cluster.start(victim);
        r.healDone = this.#now();
        return;
      }
      case "kill-flap": {
        const victim = (await biased()) ?? random();
        const again = 1_500 + rng.int(1_500);
        const r = record(
          [victim],
          `SIGKILL, restart, SIGKILL again ${again} ms after it started, restart`,
        );
        await cluster.kill(victim);
        await sleep(hold);
        await cluster.start(victim);
        await sleep(again);
        await cluster.kill(victim);
        await sleep(500 + rng.int(1_000));
        r.healedAt = this.#now();
        await cluster.start(victim);
        r.healDone = this.#now();
        return;
      }
      case "kill-all": {
        const r = record([...ids], "SIGKILL of every node at once, restart all");
        await Promise.all(ids.map((id) => cluster.kill(id)));
        await sleep(Math.min(hold, 2_000));
        r.healedAt = this.#now();
        const results = await Promise.allSettled(ids.map((id) => cluster.start(id)));
        const failed = results.find((x) => x.status === "rejected");
        if (failed !== undefined) throw failed.reason;
        r.healDone = this.#now();
        return;
      }
      case "pause": {
        const victim = (await biased()) ?? (await busiestLeader(cluster, rng)) ?? random();
        const ms = Math.max(hold, 2 * this.#options.electionMs);
        const r = record([victim], `SIGSTOP for ${ms} ms, then SIGCONT`);
        cluster.pause(victim);
        await sleep(ms);
        r.healedAt = this.#now();
        cluster.resume(victim);
        r.healDone = this.#now();
        return;
      }
      case "partition":
      case "partition-reset": {
        const victim =
          (await biased()) ??
          (rng.int(2) === 0 ? ((await busiestLeader(cluster, rng)) ?? random()) : random());
        const block = kind === "partition" ? "stall" : "reset";
        // Five nodes: a minority of one or two (the 1/4 and 2/3 splits); three: the 2/1 split.
        const minority = [victim];
        if (ids.length >= 5 && rng.int(2) === 0) {
          const others = ids.filter((id) => id !== victim);
          minority.push(others[rng.int(others.length)] as string);
        }
        const r = record(
          minority,
          `${minority.join(" and ")} cut from the others both ways (${block})`,
        );
        for (const a of minority) {
          for (const other of ids) {
            if (minority.includes(other)) continue;
            cluster.net.set(a, other, { block, delayMs: 0, udpLoss: 0 });
            cluster.net.set(other, a, { block, delayMs: 0, udpLoss: 0 });
          }
        }
        await sleep(hold);
        r.healedAt = this.#now();
        cluster.net.heal();
        r.healDone = this.#now();
        return;
      }
      case "asymmetric": {
        const victim =
          (await biased()) ??
          (rng.int(2) === 0 ? ((await busiestLeader(cluster, rng)) ?? random()) : random());
        const outbound = rng.int(2) === 0;
        const r = record(
          [victim],
          outbound
            ? `${victim} cannot send to the others (it hears them)`
            : `${victim} cannot hear the others (they hear it)`,
        );
        for (const other of ids) {
          if (other === victim) continue;
          if (outbound) cluster.net.set(victim, other, { block: "stall", delayMs: 0, udpLoss: 0 });
          else cluster.net.set(other, victim, { block: "stall", delayMs: 0, udpLoss: 0 });
        }
        await sleep(hold);
        r.healedAt = this.#now();
        cluster.net.heal();
        r.healDone = this.#now();
        return;
      }
      case "udp-loss": {
        const victim = random();
        const loss = 0.6 + rng.int(40) / 100;
        const r = record(
          [victim],
          `${Math.round(loss * 100)}% of SWIM datagrams to and from ${victim} lost`,
        );
        for (const other of ids) {
          if (other === victim) continue;
          cluster.net.set(victim, other, { block: "none", delayMs: 0, udpLoss: loss });
          cluster.net.set(other, victim, { block: "none", delayMs: 0, udpLoss: loss });
        }
        await sleep(hold);
        r.healedAt = this.#now();
        cluster.net.heal();
        r.healDone = this.#now();
        return;
      }
      case "disk-full": {
        const victim = random();
        const r = record([victim], `${victim}'s disk full`);
        const bytes = await cluster.fillDisk(victim);
        r.detail = `${victim}'s disk full (${Math.round(bytes / 1024)} KiB of ballast)`;
        await sleep(hold);
        r.healedAt = this.#now();
        await cluster.freeDisk(victim);
        if (cluster.node(victim).state === "down") {
          r.detail += "; it stopped, restarted";
          await cluster.start(victim);
        }
        r.healDone = this.#now();
        return;
      }
      case "disk-nearly-full":
        await this.#nearlyFull(random(), hold, record);
        return;
      case "rotate-keys":
        await this.#rotateKeys(ids, record([...ids], "gossip key and certificates rotated"));
        return;
      case "join":
      case "decommission":
      case "remove":
        // Changes run beside the schedule (#startChange), never as a fault of their own.
        throw new Error(`${kind} is a membership change, not a fault`);
      case "delay": {
        const base = 20 + rng.int(150);
        const r = record([...ids], `${base}-${base * 2} ms of latency on every link`);
        for (const a of ids) {
          for (const b of ids) {
            if (a !== b)
              cluster.net.set(a, b, { block: "none", delayMs: base + rng.int(base), udpLoss: 0 });
          }
        }
        await sleep(hold);
        r.healedAt = this.#now();
        cluster.net.heal();
        r.healDone = this.#now();
        return;
      }
    }
  }
}
