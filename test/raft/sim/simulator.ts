/**
 * Deterministic simulation of one Raft group under a hostile network and crashing members.
 *
 * Everything derives from one seed: the fault profile, the schedule of partitions, crashes and
 * restarts, message delays/drops/duplicates, client operations and every election timeout. The
 * same seed (and options) replays the same run exactly.
 *
 * Time is discrete: each member ticks every TICK units (with its own phase), a message takes
 * 1..MAX_DELAY units (so messages reorder), and after every delivery batch every live member's
 * Ready is handled the way a driver must (persist, send, apply, advance).
 *
 * Checked after every event (see Checker): election safety, log matching, leader completeness,
 * state machine safety, monotonic commit, durability of acknowledged writes, linearizable reads.
 * After the chaos phase the network heals and every member restarts; then a leader must appear
 * and a fresh write must commit everywhere within bounded ticks (liveness), and every
 * acknowledged write must be applied on every member.
 */
import type { Rng } from "../../../src/common/rng.ts";
import { seededRng } from "../../../src/common/rng.ts";
import type { Message, NodeId, TestingBugs } from "../../../src/raft/index.ts";
import {
  RaftInvariantError,
  describeMessage,
  MemoryStorage,
  NotLeaderError,
  nodeId,
  ProposalDroppedError,
} from "../../../src/raft/index.ts";
import type { HostOptions } from "../support/host.ts";
import { Host } from "../support/host.ts";
import { Checker } from "./checker.ts";
import { type Violation, ViolationError } from "./violation.ts";

export interface SimOptions {
  readonly seed: number;
  /** Group size; default 3 for even seeds and 5 for odd ones. */
  readonly nodes?: number;
  /** Ticks of chaos before the heal (default 300). */
  readonly chaosTicks?: number;
  readonly bugs?: TestingBugs & { readonly ackBeforePersist?: boolean };
  /** Keep a trace of the last events, printed with a violation. */
  readonly trace?: boolean;
}

export interface SimResult {
  readonly seed: number;
  readonly nodes: number;
  readonly violation: Violation | null;
  readonly stats: SimStats;
  readonly trace: readonly string[];
}

export interface SimStats {
  acknowledgedWrites: number;
  indeterminateWrites: number;
  completedReads: number;
  leaderElections: number;
  crashes: number;
  partitions: number;
  messages: number;
  ticks: number;
}

const TICK = 10;
const ELECTION_TICK = 10;
const MAX_DELAY = 2 * TICK;
const CLIENTS = 3;
const KEYS = ["a", "b", "c"];
/** A client gives up on an operation after this long: it becomes indeterminate. */
const OP_TIMEOUT = 30 * TICK;
/** After the heal: ticks within which a leader must exist and a write must commit everywhere. */
const LIVENESS_TICKS = 120;

interface InFlight {
  readonly at: number;
  readonly seq: number;
  readonly msg: Message;
}

interface Profile {
  readonly drop: number;
  readonly duplicate: number;
  readonly longDelay: number;
  readonly faultEvery: number;
  /** High churn: faults every few ticks, mostly crashes (leaders first) and quick restarts. */
  readonly churn: boolean;
  readonly preVote: boolean;
  readonly checkQuorum: boolean;
  /** Ticks between log compactions on a random member (0: never). */
  readonly compactEvery: number;
  readonly maxMsgBytes: number;
}

type PendingOp =
  | {
      kind: "write";
      client: number;
      key: string;
      value: string;
      node: NodeId;
      index: number;
      term: number;
      deadline: number;
      start: number;
    }
  | {
      kind: "read";
      client: number;
      key: string;
      ctx: string;
      node: NodeId;
      readIndex: number | null;
      deadline: number;
      start: number;
    };

export class Simulation {
  readonly seed: number;
  readonly n: number;
  readonly #rng: Rng;
  readonly #netRng: Rng;
  readonly #profile: Profile;
  readonly #chaosTicks: number;
  readonly #hosts: Host[] = [];
  readonly #down = new Set<NodeId>();
  readonly #restartAt = new Map<NodeId, number>();
  readonly #crashAt = new Map<NodeId, number>();
  /** Directed links that drop everything: "from>to". */
  #cut = new Set<string>();
  #inflight: InFlight[] = [];
  #msgSeq = 0;
  #now = 0;
  readonly #checker: Checker;
  readonly #pending: (PendingOp | null)[] = new Array<PendingOp | null>(CLIENTS).fill(null);
  #opSeq = 0;
  #inChaos = false;
  readonly #traceOn: boolean;
  readonly #trace: string[] = [];
  readonly stats: SimStats = {
    acknowledgedWrites: 0,
    indeterminateWrites: 0,
    completedReads: 0,
    leaderElections: 0,
    crashes: 0,
    partitions: 0,
    messages: 0,
    ticks: 0,
  };

  constructor(opts: SimOptions) {
    this.seed = opts.seed;
    this.n = opts.nodes ?? (opts.seed % 2 === 0 ? 3 : 5);
    this.#rng = seededRng(opts.seed);
    this.#netRng = this.#rng.fork();
    this.#chaosTicks = opts.chaosTicks ?? 300;
    this.#traceOn = opts.trace === true;
    const r = this.#rng;
    this.#profile = {
      drop: [0, 0.01, 0.05, 0.15][r.int(4)] as number,
      duplicate: [0, 0.02, 0.1][r.int(3)] as number,
      longDelay: [0, 0.02, 0.1][r.int(3)] as number,
      faultEvery: [8, 15, 30][r.int(3)] as number,
      churn: r.int(10) < 4,
      preVote: r.int(10) < 7,
      checkQuorum: r.int(10) < 7,
      compactEvery: [0, 20, 60][r.int(3)] as number,
      // Small messages split appends, so followers acknowledge prefixes of what the leader sent.
      maxMsgBytes: [1, 64, 1 << 20][r.int(3)] as number,
    };
    const ids = Array.from({ length: this.n }, (_, i) => nodeId(`n${i + 1}`));
    const { ackBeforePersist, ...coreBugs } = opts.bugs ?? {};
    const options: HostOptions = {
      electionTick: ELECTION_TICK,
      heartbeatTick: 1,
      preVote: this.#profile.preVote,
      checkQuorum: this.#profile.checkQuorum,
      maxInflightMsgs: 4,
      maxMsgBytes: this.#profile.maxMsgBytes,
      testingBugs: coreBugs,
      ackBeforePersist: ackBeforePersist === true,
    };
    for (const id of ids)
      this.#hosts.push(new Host(id, MemoryStorage.bootstrap(ids), options, this.#rng.fork()));
    this.#checker = new Checker(this.#hosts);
  }

  run(): SimResult {
    let violation: Violation | null = null;
    try {
      this.#runChaos();
      this.#runLiveness();
      this.#checker.checkFinal(this.#now);
    } catch (err) {
      if (err instanceof ViolationError) violation = err.violation;
      // The core refusing an impossible state is a detected violation too.
      else if (err instanceof RaftInvariantError)
        violation = { kind: "invariant", at: this.#now, message: err.message };
      else throw err;
    }
    return { seed: this.seed, nodes: this.n, violation, stats: this.stats, trace: this.#trace };
  }

  describeProfile(): string {
    const p = this.#profile;
    return `drop=${p.drop} dup=${p.duplicate} longDelay=${p.longDelay} faultEvery=${p.faultEvery} churn=${p.churn} preVote=${p.preVote} checkQuorum=${p.checkQuorum} compactEvery=${p.compactEvery} maxMsgBytes=${p.maxMsgBytes}`;
  }

  // ── phases ──────────────────────────────────────────────────────────────────────────────────

  #runChaos(): void {
    const end = this.#chaosTicks * TICK;
    this.#inChaos = true;
    const p = this.#profile;
    const every = p.churn ? 3 : p.faultEvery;
    let nextFault = every * TICK;
    let nextCompact = p.compactEvery * TICK;
    while (this.#now < end) {
      if (this.#now >= nextFault) {
        if (p.churn) this.#injectChurn();
        else this.#injectFault();
        nextFault = this.#now + (1 + this.#rng.int(2 * every)) * TICK;
      }
      for (const [id, at] of this.#crashAt) {
        if (at <= this.#now) {
          this.#crashAt.delete(id);
          if (!this.#down.has(id)) this.#bounce(this.#host(id));
        }
      }
      for (const [id, at] of this.#restartAt) {
        if (at <= this.#now) {
          this.#restartAt.delete(id);
          if (this.#down.has(id)) this.#restart(this.#host(id));
        }
      }
      if (p.compactEvery > 0 && this.#now >= nextCompact) {
        const live = this.#hosts.filter((h) => !this.#down.has(h.id));
        const h = live[this.#rng.int(Math.max(1, live.length))];
        if (h !== undefined && h.sm.appliedIndex > h.raw.status().firstIndex) {
          const snap = h.compact();
          this.#record(`${h.id} compacted to ${snap.meta.term}/${snap.meta.index}`);
        }
        nextCompact = this.#now + p.compactEvery * TICK;
      }
      this.#clients(true);
      this.#step();
    }
  }

  #runLiveness(): void {
    this.#inChaos = false;
    this.#crashAt.clear();
    // Heal everything: network, crashed members, lossy links. Delays and reordering remain.
    this.#cut = new Set();
    for (const h of this.#hosts) if (this.#down.has(h.id)) this.#restart(h);
    this.#record("heal all; restart all; no more drops");
    const healedAt = this.#now;
    const deadline = healedAt + LIVENESS_TICKS * TICK;
    let probe: { node: NodeId; index: number; term: number } | null = null;
    while (this.#now < deadline) {
      this.#step(true);
      const leader = this.#currentLeader();
      if (probe === null && leader !== null) {
        try {
          const { index, term } = leader.raw.propose(new TextEncoder().encode("probe=liveness"));
          probe = { node: leader.id, index, term };
          this.#record(`liveness probe proposed at ${leader.id} ${term}/${index}`);
        } catch (err) {
          if (!(err instanceof NotLeaderError || err instanceof ProposalDroppedError)) throw err;
        }
      }
      if (probe !== null) {
        const p = probe;
        const committedAt = this.#checker.committedTerm(p.index);
        const stillLeading =
          leader !== null && leader.id === p.node && leader.raw.status().term === p.term;
        if (committedAt !== undefined && committedAt !== p.term) {
          probe = null; // overwritten by another leader: propose again
        } else if (committedAt === undefined && !stillLeading) {
          probe = null; // its leader is gone and it may never commit: propose again
        } else if (
          committedAt === p.term &&
          this.#hosts.every(
            (h) => h.sm.appliedIndex >= Math.max(p.index, this.#checker.maxAckedIndex()),
          ) &&
          this.#allClientsIdle()
        ) {
          this.#record(`liveness ok: probe ${p.term}/${p.index}`);
          return;
        }
      }
    }
    throw new ViolationError({
      kind: "liveness",
      at: this.#now,
      message: `no leader committed a write on every member within ${LIVENESS_TICKS} ticks after the heal (probe ${probe === null ? "never proposed" : `${probe.term}/${probe.index} at ${probe.node}`}); members: ${this.#hosts.map((h) => this.#describeHost(h)).join("; ")}`,
    });
  }

  #allClientsIdle(): boolean {
    return this.#pending.every((p) => p === null);
  }

  // ── one time unit ───────────────────────────────────────────────────────────────────────────

  #step(noDrops = false): void {
    this.#now++;
    // Deliver what is due, in a random order among equals.
    const due: InFlight[] = [];
    const later: InFlight[] = [];
    for (const f of this.#inflight) (f.at <= this.#now ? due : later).push(f);
    this.#inflight = later;
    shuffle(due, this.#netRng);
    for (const f of due) {
      const to = this.#host(f.msg.to);
      const lost =
        this.#down.has(to.id) ||
        this.#cut.has(`${f.msg.from}>${f.msg.to}`) ||
        (!noDrops && this.#netRng.float() < this.#profile.drop);
      if (f.msg.type === "snapshot") {
        // A snapshot travels on a stream whose outcome the sender learns (driver duty).
        const from = this.#host(f.msg.from);
        if (!this.#down.has(from.id)) from.raw.reportSnapshot(f.msg.to, !lost);
      }
      if (lost) continue;
      to.raw.step(f.msg);
      this.stats.messages++;
    }
    for (const h of this.#hosts) {
      if (this.#down.has(h.id)) continue;
      // Each member ticks on its own phase.
      if ((this.#now + this.#hosts.indexOf(h) * 3) % TICK === 0) {
        h.raw.tick();
        if (h === this.#hosts[0]) this.stats.ticks++;
      }
    }
    for (const h of this.#hosts) {
      if (this.#down.has(h.id)) continue;
      for (let i = 0; i < 4 && h.raw.hasReady(); i++) this.#handleReady(h, noDrops);
    }
    this.#completeReads();
    this.#expireOps();
    this.#checker.checkStep(this.#now, this.#down);
  }

  #handleReady(h: Host, noDrops: boolean): void {
    const out = h.handleReady((m) => this.#send(m, noDrops));
    const rd = out.ready;
    if (rd.softState !== null && rd.softState.role === "leader") {
      this.stats.leaderElections++;
      this.#record(`${h.id} became leader at term ${h.raw.status().term}`);
      // Churn: new leaders often die before their first entries spread (Figure 8's pattern).
      if (this.#inChaos && this.#profile.churn && this.#rng.int(10) < 3) {
        this.#crashAt.set(h.id, this.#now + 1 + this.#rng.int(TICK));
      }
    }
    this.#checker.observeReady(h, rd, this.#now);
    if (
      this.#inChaos &&
      this.#profile.churn &&
      rd.hardState !== null &&
      h.raw.status().role === "leader" &&
      rd.committedEntries.length > 0 &&
      this.#rng.int(100) < 10
    ) {
      // Churn: a leader cut off right after it committed, before followers learn of it.
      this.#isolate(h.id);
    }
    for (const e of out.applied) this.#onApplied(h, e.index, e.term);
    for (const rs of out.readStates) {
      const ctx = new TextDecoder().decode(rs.context);
      const op = this.#pending.find((p) => p?.kind === "read" && p.ctx === ctx && p.node === h.id);
      if (op !== undefined && op !== null && op.kind === "read") op.readIndex = rs.index;
    }
  }

  #send(m: Message, noDrops: boolean): void {
    if (this.#traceOn) this.#record(describeMessage(m));
    const r = this.#netRng;
    const delay =
      1 + (r.float() < this.#profile.longDelay ? r.int(5 * MAX_DELAY) : r.int(MAX_DELAY));
    this.#inflight.push({ at: this.#now + delay, seq: this.#msgSeq++, msg: m });
    if (!noDrops && r.float() < this.#profile.duplicate) {
      this.#inflight.push({
        at: this.#now + 1 + r.int(3 * MAX_DELAY),
        seq: this.#msgSeq++,
        msg: m,
      });
    }
  }

  // ── faults ──────────────────────────────────────────────────────────────────────────────────

  #injectFault(): void {
    const r = this.#rng;
    const ids = this.#hosts.map((h) => h.id);
    const live = this.#hosts.filter((h) => !this.#down.has(h.id));
    const roll = r.int(100);
    if (roll < 20) {
      this.#cut = new Set();
      this.#record("heal");
    } else if (roll < 35) {
      // Symmetric split into two sides.
      const side = new Set(ids.filter(() => r.int(2) === 0));
      this.#cut = new Set();
      for (const a of ids)
        for (const b of ids) if (side.has(a) !== side.has(b)) this.#cut.add(`${a}>${b}`);
      this.stats.partitions++;
      this.#record(`partition {${[...side].join(" ")}} | rest`);
    } else if (roll < 45) {
      // Asymmetric: some directed links fail.
      this.#cut = new Set();
      for (const a of ids)
        for (const b of ids) if (a !== b && r.int(4) === 0) this.#cut.add(`${a}>${b}`);
      this.stats.partitions++;
      this.#record(`asymmetric cut ${[...this.#cut].join(" ")}`);
    } else if (roll < 55) {
      // Isolate one member (the leader, if any, half of the time).
      const leader = this.#currentLeader();
      const victim =
        leader !== null && r.int(2) === 0 ? leader.id : (ids[r.int(ids.length)] as NodeId);
      this.#isolate(victim);
    } else if (roll < 80) {
      if (live.length === 0) return;
      const leader = this.#currentLeader();
      const victim =
        leader !== null && r.int(3) === 0 ? leader : (live[r.int(live.length)] as Host);
      this.#crash(victim);
    } else {
      const down = this.#hosts.filter((h) => this.#down.has(h.id));
      if (down.length > 0) this.#restart(down[r.int(down.length)] as Host);
    }
  }

  /** High churn: crash leaders soon after they win, bounce members, flap the network. */
  #injectChurn(): void {
    const r = this.#rng;
    const live = this.#hosts.filter((h) => !this.#down.has(h.id));
    const roll = r.int(100);
    if (roll < 35) {
      const leader = this.#currentLeader();
      if (leader !== null) this.#bounce(leader);
    } else if (roll < 60) {
      const h = live[r.int(Math.max(1, live.length))];
      if (h !== undefined) this.#bounce(h);
    } else if (roll < 75) {
      const down = this.#hosts.filter((h) => this.#down.has(h.id));
      if (down.length > 0) this.#restart(down[r.int(down.length)] as Host);
    } else {
      this.#injectFault();
    }
  }

  #isolate(victim: NodeId): void {
    this.#cut = new Set();
    for (const h of this.#hosts) {
      if (h.id !== victim) this.#cut.add(`${victim}>${h.id}`).add(`${h.id}>${victim}`);
    }
    this.stats.partitions++;
    this.#record(`isolate ${victim}`);
  }

  /** Crash now, restart within a few ticks (a process supervisor restarting it). */
  #bounce(h: Host): void {
    this.#crash(h);
    this.#restartAt.set(h.id, this.#now + (1 + this.#rng.int(30)) * (TICK / 2));
  }

  #crash(h: Host): void {
    this.#down.add(h.id);
    this.stats.crashes++;
    // Messages in flight from a crashed process may still arrive; those to it are lost.
    const lost = this.#inflight.filter((f) => f.msg.to === h.id);
    this.#inflight = this.#inflight.filter((f) => f.msg.to !== h.id);
    for (const f of lost) {
      // A snapshot stream to a dead process fails, and its sender is told.
      const from = this.#host(f.msg.from);
      if (f.msg.type === "snapshot" && !this.#down.has(from.id))
        from.raw.reportSnapshot(h.id, false);
    }
    this.#record(`crash ${h.id}`);
  }

  #restart(h: Host): void {
    this.#down.delete(h.id);
    h.restart();
    this.#checker.onRestart(h);
    this.#record(`restart ${h.id}`);
  }

  // ── clients ─────────────────────────────────────────────────────────────────────────────────

  #clients(chaos: boolean): void {
    const r = this.#rng;
    for (let c = 0; c < CLIENTS; c++) {
      if (this.#pending[c] !== null) continue;
      if (r.int(chaos ? 20 : 40) !== 0) continue;
      const target = this.#pickTarget();
      if (target === null) continue;
      const key = KEYS[r.int(KEYS.length)] as string;
      const id = ++this.#opSeq;
      try {
        if (r.int(2) === 0) {
          const value = `c${c}.${id}`;
          const { index, term } = target.raw.propose(new TextEncoder().encode(`${key}=${value}`));
          if (this.#profile.churn && this.#rng.int(100) < 15) {
            // Churn: the leader is cut off with the entry only in its own log.
            this.#isolate(target.id);
          }
          this.#pending[c] = {
            kind: "write",
            client: c,
            key,
            value,
            node: target.id,
            index,
            term,
            deadline: this.#now + OP_TIMEOUT,
            start: this.#now,
          };
        } else {
          const ctx = `r${id}`;
          const op: PendingOp = {
            kind: "read",
            client: c,
            key,
            ctx,
            node: target.id,
            readIndex: null,
            deadline: this.#now + OP_TIMEOUT,
            start: this.#now,
          };
          this.#pending[c] = op;
          target.raw.readIndex(new TextEncoder().encode(ctx));
        }
      } catch (err) {
        // Refused before anything entered the log: the operation definitely did not happen.
        if (!(err instanceof NotLeaderError || err instanceof ProposalDroppedError)) throw err;
        this.#pending[c] = null;
      }
      // Proposals and reads produce Ready work; handle it before the next client acts.
      if (!this.#down.has(target.id)) {
        for (let i = 0; i < 4 && target.raw.hasReady(); i++) this.#handleReady(target, !chaos);
      }
    }
  }

  #pickTarget(): Host | null {
    const live = this.#hosts.filter((h) => !this.#down.has(h.id));
    if (live.length === 0) return null;
    // Clients mostly find the leader (as a routing client would), sometimes ask anyone.
    const leaders = live.filter((h) => h.raw.status().role === "leader");
    if (leaders.length > 0 && this.#rng.int(5) !== 0)
      return leaders[this.#rng.int(leaders.length)] as Host;
    return live[this.#rng.int(live.length)] as Host;
  }

  #onApplied(h: Host, index: number, term: number): void {
    for (let c = 0; c < CLIENTS; c++) {
      const op = this.#pending[c];
      if (
        op === null ||
        op === undefined ||
        op.kind !== "write" ||
        op.node !== h.id ||
        op.index !== index
      )
        continue;
      if (op.term === term) {
        this.#checker.onWriteAcknowledged(op.key, op.value, index, term, op.start, this.#now);
        this.stats.acknowledgedWrites++;
      }
      // A different term at that index: the proposal was overwritten, it definitely failed.
      this.#pending[c] = null;
    }
  }

  #completeReads(): void {
    for (let c = 0; c < CLIENTS; c++) {
      const op = this.#pending[c];
      if (op === null || op === undefined || op.kind !== "read" || op.readIndex === null) continue;
      const h = this.#host(op.node);
      if (this.#down.has(h.id) || h.sm.appliedIndex < op.readIndex) continue;
      this.#checker.onRead(h, op.key, op.start, this.#now);
      this.stats.completedReads++;
      this.#pending[c] = null;
    }
  }

  #expireOps(): void {
    for (let c = 0; c < CLIENTS; c++) {
      const op = this.#pending[c];
      if (op === null || op === undefined) continue;
      // A crashed member forgets its clients' operations; they time out as indeterminate.
      if (op.deadline <= this.#now) {
        if (op.kind === "write") {
          this.stats.indeterminateWrites++;
          this.#checker.onWriteIndeterminate(op.key, op.value);
        }
        this.#pending[c] = null;
      }
    }
  }

  // ── helpers ─────────────────────────────────────────────────────────────────────────────────

  #currentLeader(): Host | null {
    let best: Host | null = null;
    let bestTerm = -1;
    for (const h of this.#hosts) {
      if (this.#down.has(h.id)) continue;
      const s = h.raw.status();
      if (s.role === "leader" && s.term > bestTerm) {
        best = h;
        bestTerm = s.term;
      }
    }
    return best;
  }

  #describeHost(h: Host): string {
    const s = h.raw.status();
    const progress = [...s.progress].map(([id, p]) => `${id}:${p}`).join(",");
    return `${h.id} ${s.role} term=${s.term} lead=${s.lead ?? "-"} commit=${s.commit} applied=${s.applied} first=${s.firstIndex} last=${s.lastIndex}${progress === "" ? "" : ` [${progress}]`}`;
  }

  #host(id: NodeId): Host {
    const h = this.#hosts.find((x) => x.id === id);
    if (h === undefined) throw new Error(`unknown member ${id}`);
    return h;
  }

  #record(event: string): void {
    if (!this.#traceOn) return;
    this.#trace.push(`t=${this.#now} ${event}`);
    if (this.#trace.length > 400) this.#trace.shift();
  }
}

function shuffle<T>(a: T[], r: Rng): void {
  for (let i = a.length - 1; i > 0; i--) {
    const j = r.int(i + 1);
    const t = a[i] as T;
    a[i] = a[j] as T;
    a[j] = t;
  }
}

export function runSeed(opts: SimOptions): SimResult {
  return new Simulation(opts).run();
}
