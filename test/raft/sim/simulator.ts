/**
 * Deterministic simulation of one Raft group under a hostile network, crashing members and
 * changing membership.
 *
 * Everything derives from one seed: the fault profile, the schedule of partitions, crashes and
 * restarts, membership changes and leadership transfers, message delays/drops/duplicates, client
 * operations and every election timeout. The same seed (and options) replays the same run exactly.
 *
 * Time is discrete: each member ticks every TICK units (with its own phase), a message takes
 * 1..MAX_DELAY units (so messages reorder), and after every delivery batch every live member's
 * Ready is handled the way a driver must (persist, send, apply, advance).
 *
 * The group starts with 3 or 5 voters and SPARES more machines outside it. The chaos adds
 * learners, promotes them, removes voters (the leader too) and learners, re-adds removed members
 * (with the disk they had), transfers leadership, and — as a driver does — reports unreachable
 * members and snapshot outcomes. A removed member is shut down a little after its removal is
 * committed, as a real driver destroys the replica; until then it may still disrupt.
 *
 * Quiescence (most seeds): leaders put idle groups to sleep. Clients pause now and then so that
 * groups do go idle, and a leader that sleeps is often crashed or cut off right then. A failure
 * detector, as the driver's SWIM, tells the members whose leader crashed or was cut off (a few
 * ticks later, and sometimes about a leader that is fine) so that they wake and elect. After the
 * liveness check the group must fall asleep again within QUIESCE_TICKS_AFTER_HEAL ticks.
 *
 * Lost logs (some seeds, from their own random stream): a member's shard directory is removed
 * while its hard state survives (Host.loseLog, as MultiRaft does for a removed shard directory
 * in a cluster): it comes back with no log and no state machine, its term and vote kept, and
 * recovering (RaftConfig.recoveringUntil) until its leader has refilled it. Mostly a follower
 * holding the leader's whole log is struck, and often the leader crashes with it: the entries
 * the two of them committed are then on the leader alone, and must survive.
 *
 * Clients (CLIENTS of them, one operation at a time each) put, compare-and-set, delete and read
 * (ReadIndex) over KEYS keys; every operation goes into a history with its invocation, response
 * and outcome (or none: indeterminate), which the shared linearizability checker judges at the
 * end, per key. Checked after every event (see Checker): election safety, log matching, leader
 * completeness, state machine safety, monotonic commit, the commit rule, durability of
 * acknowledged writes. After the chaos the network heals and every member restarts; then a
 * leader must appear and a fresh write must commit on every member within bounded ticks
 * (liveness), and every acknowledged write must be applied on every member.
 */
import type { Rng } from "../../../src/common/rng.ts";
import { seededRng, shuffle } from "../../../src/common/rng.ts";
import type {
  ConfChange,
  ConfState,
  Message,
  NodeId,
  TestingBugs,
} from "../../../src/raft/index.ts";
import {
  confAfter,
  decodeConfChange,
  describeMessage,
  InvalidRaftRequestError,
  MemoryStorage,
  NotLeaderError,
  nodeId,
  ProposalDroppedError,
  RaftInvariantError,
} from "../../../src/raft/index.ts";
import {
  checkRegisterHistory,
  type RegisterInput,
  type RegisterOp,
  type RegisterOutput,
  type Version,
} from "../../support/linearizability.ts";
import type { HostOptions } from "../support/host.ts";
import { Host } from "../support/host.ts";
import { Checker } from "./checker.ts";
import { encodeCommand, kvOf } from "./kv.ts";
import { type Violation, ViolationError } from "./violation.ts";

export interface SimOptions {
  readonly seed: number;
  /** Founding voters; default 3 for even seeds and 5 for odd ones. */
  readonly nodes?: number;
  /** Ticks of chaos before the heal (default 300). */
  readonly chaosTicks?: number;
  readonly bugs?: TestingBugs & { readonly ackBeforePersist?: boolean };
  /**
   * Half the voter removals drawn (the leader's own too) demote the voter to learner instead,
   * decided by a stream of their own. Off by default: a demotion changes the rest of the run, and
   * the seeds known so far (docs/raft.md) must replay as they did.
   */
  readonly demote?: boolean;
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
  /** Operations in the history given to the linearizability checker. */
  historyOps: number;
  /** Keys on which the checker ran out of budget (no verdict). */
  historyUnknown: number;
  leaderElections: number;
  crashes: number;
  partitions: number;
  confChanges: number;
  /** Of those, voters demoted to learner (SimOptions.demote). */
  demotions: number;
  transfers: number;
  unreachableReports: number;
  messages: number;
  ticks: number;
  /** Times a leader put its group to sleep. */
  quiescences: number;
  /** Failure detector reports delivered to followers (true and false suspicions). */
  leaderDownReports: number;
  /** Leaders crashed or cut off while their group slept. */
  quiescedLeaderFaults: number;
  /** Members a running member's failure detector came to hold down (RaftConfig.memberDown). */
  membersHeldDown: number;
  /** Sleeping leaders woken by a member seen back that they slept past, behind. */
  wokenForMemberBack: number;
  /** Members whose log and state machine were lost (Host.loseLog). */
  logLosses: number;
}

const TICK = 10;
const ELECTION_TICK = 10;
const MAX_DELAY = 2 * TICK;
const CLIENTS = 16;
const KEYS = 24;
const HOT_KEYS = 3;
/** Machines outside the founding group, for the membership chaos to add. */
const SPARES = 2;
/** A client gives up on an operation after this long: it becomes indeterminate. */
const OP_TIMEOUT = 30 * TICK;
/** After the heal: ticks within which a leader must exist and a write must commit everywhere. */
const LIVENESS_TICKS = 250;
/** After the liveness check: ticks within which an idle group must have fallen asleep. */
const QUIESCE_TICKS_AFTER_HEAL = 100;
/**
 * Search steps per key for the history checker: 200,000 left one seed in a few hundred without
 * a verdict (seed 266: 83 indeterminate writes of 218); a million gives it one in under a second.
 */
const HISTORY_BUDGET = 1_000_000;

interface InFlight {
  readonly at: number;
  readonly seq: number;
  readonly msg: Message;
  /** Sent on an in-order link: delivered after every earlier message of that link. */
  readonly fifo: boolean;
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
  /** Ticks between membership changes (0: never). */
  readonly confEvery: number;
  /** Ticks between leadership transfers (0: never). */
  readonly transferEvery: number;
  /** The driver reports members it could not reach. */
  readonly reportUnreachable: boolean;
  /** Idle clients start an operation with probability 1/n per time unit. */
  readonly thinkTime: number;
  /** Each link delivers in order (else messages reorder freely). */
  readonly fifo: boolean;
  /** RaftConfig.quiesceTicks (0: leaders never quiesce). */
  readonly quiesceTicks: number;
  /** Ticks between client pauses, which let groups go idle (0: clients never pause). */
  readonly quietEvery: number;
  /** Ticks the failure detector takes to report a crashed or cut-off leader (0: no detector). */
  readonly detectTicks: number;
  /** RaftConfig.omitRedundantReplies (the multi-raft driver sets it). */
  readonly omitReplies: boolean;
  /** RaftConfig.deferCommitBroadcast (the multi-raft driver sets it). */
  readonly deferCommit: boolean;
  /** Ticks between lost logs (0: never); drawn from the losses' own stream. */
  readonly loseLogEvery: number;
}

type PendingOp =
  | {
      kind: "write";
      client: number;
      key: string;
      input: RegisterInput;
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
  /**
   * The quiescence chaos's own stream (its profile, pauses, strikes, detector delays), so that a
   * seed that draws no quiescence replays the schedule it had before quiescence existed.
   */
  readonly #sleepRng: Rng;
  /** The lost logs' own stream, so that a seed without them replays as it did before them. */
  readonly #lossRng: Rng;
  /** SimOptions.demote's own stream (null: no demotions). */
  readonly #demoteRng: Rng | null;
  readonly #profile: Profile;
  readonly #chaosTicks: number;
  readonly #hosts: Host[] = [];
  /** Crashed, to be restarted. */
  readonly #down = new Set<NodeId>();
  /** Shut down for good (spares never added, removed members): not running, not restarted. */
  readonly #retired = new Set<NodeId>();
  readonly #restartAt = new Map<NodeId, number>();
  readonly #crashAt = new Map<NodeId, number>();
  readonly #retireAt = new Map<NodeId, number>();
  /** Failure detector reports to deliver: the suspected member, and when. */
  #suspicions: { readonly at: number; readonly suspect: NodeId }[] = [];
  /** Clients start nothing before this time (a pause). */
  #quietUntil = 0;
  /** Whether each member's group slept after its last tick (to count quiescences). */
  readonly #wasQuiesced = new Map<NodeId, boolean>();
  /** The configuration as of the newest committed conf change, and its index. */
  #conf: ConfState;
  #confIndex: number;
  /** Members being added: the (index, term) of the proposal, until that index commits. */
  readonly #joining = new Map<NodeId, { index: number; term: number }>();
  /** The newest conf change proposed, until its index commits (as it or as something else). */
  #confProposed: { index: number; term: number } | null = null;
  /** Directed links that drop everything: "from>to". */
  #cut = new Set<string>();
  #inflight: InFlight[] = [];
  /** Per directed link, the latest delivery time scheduled (for FIFO links). */
  readonly #linkLast = new Map<string, number>();
  #msgSeq = 0;
  #now = 0;
  readonly #checker: Checker;
  readonly #pending: (PendingOp | null)[] = new Array<PendingOp | null>(CLIENTS).fill(null);
  /** Per client and key, the version it last saw (what its compare-and-sets expect). */
  readonly #seen: Map<string, Version | null>[] = Array.from({ length: CLIENTS }, () => new Map());
  readonly #history: RegisterOp[] = [];
  /** Per client: no new operation before this time (after a refusal). */
  readonly #backoff: number[] = new Array<number>(CLIENTS).fill(0);
  #opSeq = 0;
  #inChaos = false;
  readonly #traceOn: boolean;
  readonly #trace: string[] = [];
  readonly stats: SimStats = {
    acknowledgedWrites: 0,
    indeterminateWrites: 0,
    completedReads: 0,
    historyOps: 0,
    historyUnknown: 0,
    leaderElections: 0,
    crashes: 0,
    partitions: 0,
    confChanges: 0,
    demotions: 0,
    transfers: 0,
    unreachableReports: 0,
    messages: 0,
    ticks: 0,
    quiescences: 0,
    leaderDownReports: 0,
    membersHeldDown: 0,
    wokenForMemberBack: 0,
    quiescedLeaderFaults: 0,
    logLosses: 0,
  };

  constructor(opts: SimOptions) {
    this.seed = opts.seed;
    this.n = opts.nodes ?? (opts.seed % 2 === 0 ? 3 : 5);
    this.#rng = seededRng(opts.seed);
    this.#netRng = this.#rng.fork();
    this.#sleepRng = seededRng(opts.seed ^ 0x51ee9);
    this.#lossRng = seededRng(opts.seed ^ 0x1057106);
    this.#demoteRng = opts.demote === true ? seededRng(opts.seed ^ 0xde307e) : null;
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
      confEvery: [0, 8, 20, 40][r.int(4)] as number,
      transferEvery: [0, 0, 25, 60][r.int(4)] as number,
      reportUnreachable: r.int(2) === 0,
      thinkTime: [1, 2, 5][r.int(3)] as number,
      fifo: r.int(3) !== 0,
      quiesceTicks: [0, 1, 2, 3, 5][this.#sleepRng.int(5)] as number,
      quietEvery: [0, 10, 30][this.#sleepRng.int(3)] as number,
      detectTicks: [0, 3, 10, 30][this.#sleepRng.int(4)] as number,
      // Its own generator, so that every earlier seed keeps its other choices.
      omitReplies: seededRng(opts.seed ^ 0x7e11a).int(2) === 0,
      deferCommit: seededRng(opts.seed ^ 0xdefc0).int(2) === 0,
      loseLogEvery: [0, 0, 25, 60][this.#lossRng.int(4)] as number,
    };
    const ids = Array.from({ length: this.n + SPARES }, (_, i) => nodeId(`n${i + 1}`));
    const founders = ids.slice(0, this.n);
    const { ackBeforePersist, ...coreBugs } = opts.bugs ?? {};
    const options: HostOptions = {
      electionTick: ELECTION_TICK,
      heartbeatTick: 1,
      preVote: this.#profile.preVote,
      checkQuorum: this.#profile.checkQuorum,
      maxInflightMsgs: 4,
      maxMsgBytes: this.#profile.maxMsgBytes,
      quiesceTicks: this.#profile.quiesceTicks,
      omitRedundantReplies: this.#profile.omitReplies,
      deferCommitBroadcast: this.#profile.deferCommit,
      testingBugs: coreBugs,
      ackBeforePersist: ackBeforePersist === true,
    };
    for (const id of ids) {
      // Spares start empty and join through conf changes.
      const storage = founders.includes(id)
        ? MemoryStorage.bootstrap(founders)
        : new MemoryStorage();
      this.#hosts.push(new Host(id, storage, options, this.#rng.fork()));
      if (!founders.includes(id)) this.#retired.add(id);
    }
    this.#conf = { voters: founders, learners: [] };
    this.#confIndex = founders.length;
    this.#checker = new Checker(this.#hosts);
  }

  run(): SimResult {
    let violation: Violation | null = null;
    try {
      this.#runChaos();
      const members = this.#runLiveness();
      this.#checker.checkFinal(this.#now, members);
      this.#checkQuiescence(members);
      this.#checkHistory();
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
    return `drop=${p.drop} dup=${p.duplicate} longDelay=${p.longDelay} faultEvery=${p.faultEvery} churn=${p.churn} preVote=${p.preVote} checkQuorum=${p.checkQuorum} compactEvery=${p.compactEvery} maxMsgBytes=${p.maxMsgBytes} confEvery=${p.confEvery} transferEvery=${p.transferEvery} reportUnreachable=${p.reportUnreachable} thinkTime=${p.thinkTime} fifo=${p.fifo} quiesceTicks=${p.quiesceTicks} quietEvery=${p.quietEvery} detectTicks=${p.detectTicks} loseLogEvery=${p.loseLogEvery}`;
  }

  // ── phases ──────────────────────────────────────────────────────────────────────────────────

  #runChaos(): void {
    const end = this.#chaosTicks * TICK;
    this.#inChaos = true;
    const p = this.#profile;
    const every = p.churn ? 3 : p.faultEvery;
    let nextFault = every * TICK;
    let nextCompact = p.compactEvery * TICK;
    let nextConf = p.confEvery * TICK;
    let nextTransfer = p.transferEvery * TICK;
    let nextQuiet = p.quietEvery * TICK;
    let nextLoss = p.loseLogEvery * TICK;
    // The last pause runs into the heal: whatever it leaves asleep (a sleeping group whose
    // leader was just struck) must wake by itself once the clients are gone.
    const lastQuiet = end - (20 + this.#sleepRng.int(40)) * TICK;
    while (this.#now < end) {
      if (p.quietEvery > 0 && (this.#now >= nextQuiet || this.#now === lastQuiet)) {
        this.#quietUntil = this.#now + (10 + this.#sleepRng.int(50)) * TICK;
        if (this.#now >= lastQuiet) this.#quietUntil = end;
        nextQuiet = this.#quietUntil + (1 + this.#sleepRng.int(2 * p.quietEvery)) * TICK;
        this.#record(`clients pause until t=${this.#quietUntil}`);
      }
      this.#maybeStrikeSleepingLeader();
      if (p.loseLogEvery > 0 && this.#now >= nextLoss) {
        this.#loseLog();
        nextLoss = this.#now + (1 + this.#lossRng.int(2 * p.loseLogEvery)) * TICK;
      }
      if (this.#now >= nextFault) {
        if (p.churn) this.#injectChurn();
        else this.#injectFault();
        nextFault = this.#now + (1 + this.#rng.int(2 * every)) * TICK;
      }
      if (p.confEvery > 0 && this.#now >= nextConf) {
        this.#changeMembership();
        nextConf = this.#now + (1 + this.#rng.int(2 * p.confEvery)) * TICK;
      }
      if (p.transferEvery > 0 && this.#now >= nextTransfer) {
        this.#transferLeadership();
        nextTransfer = this.#now + (1 + this.#rng.int(2 * p.transferEvery)) * TICK;
      }
      this.#runSchedules(true);
      if (p.compactEvery > 0 && this.#now >= nextCompact) {
        const live = this.#hosts.filter((h) => this.#running(h.id));
        const h = live[this.#rng.int(Math.max(1, live.length))];
        if (h !== undefined && h.sm.appliedIndex > h.raw.status().firstIndex) {
          const snap = h.compact();
          this.#record(`${h.id} compacted to ${snap.meta.term}/${snap.meta.index}`);
        }
        nextCompact = this.#now + p.compactEvery * TICK;
      }
      this.#clients();
      this.#step();
    }
  }

  /** Returns the members of the final configuration. */
  #runLiveness(): NodeId[] {
    this.#inChaos = false;
    this.#crashAt.clear();
    // Heal everything: network, crashed members, lossy links, long delays, reordering (links are
    // streams again). Ordinary delays remain. Catching a member up through a network that
    // reorders every message takes a round trip per entry: not what liveness is about.
    this.#cut = new Set();
    for (const h of this.#hosts) if (this.#down.has(h.id)) this.#restart(h);
    this.#record("heal all; restart all; no more drops");
    const healedAt = this.#now;
    const deadline = healedAt + LIVENESS_TICKS * TICK;
    let probe: { node: NodeId; index: number; term: number } | null = null;
    while (this.#now < deadline) {
      this.#runSchedules(false);
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
        } else if (committedAt === p.term && leader !== null && this.#allClientsIdle()) {
          // The members are those of the leader's configuration once it applied the probe (no
          // conf change is proposed after the chaos, so none can be pending beyond it).
          const s = leader.raw.status();
          const members = [...s.conf.voters, ...s.conf.learners];
          const target = Math.max(p.index, this.#checker.maxAckedIndex());
          if (
            s.applied >= p.index &&
            members.every((id) => this.#running(id) && this.#host(id).sm.appliedIndex >= target)
          ) {
            this.#record(`liveness ok: probe ${p.term}/${p.index}`);
            return members;
          }
        }
      }
    }
    throw new ViolationError({
      kind: "liveness",
      at: this.#now,
      message: `no leader committed a write on every member within ${LIVENESS_TICKS} ticks after the heal (probe ${probe === null ? "never proposed" : `${probe.term}/${probe.index} at ${probe.node}`}); committed configuration ${describeConf(this.#conf)}; members: ${this.#hosts.map((h) => this.#describeHost(h)).join("; ")}`,
    });
  }

  /**
   * With quiescence on, the healed, idle group must fall asleep: its leader and every member of
   * the final configuration, within QUIESCE_TICKS_AFTER_HEAL ticks. (A group that never sleeps
   * costs CPU forever; one that sleeps with a member awake costs an election now and then.)
   */
  #checkQuiescence(members: readonly NodeId[]): void {
    if (this.#profile.quiesceTicks === 0) return;
    const deadline = this.#now + QUIESCE_TICKS_AFTER_HEAL * TICK;
    while (this.#now < deadline) {
      this.#runSchedules(false);
      this.#step(true);
      const leader = this.#currentLeader();
      if (
        leader !== null &&
        leader.raw.quiesced &&
        members.every((id) => this.#running(id) && this.#host(id).raw.quiesced)
      ) {
        this.#record("quiescence ok");
        return;
      }
    }
    throw new ViolationError({
      kind: "quiescence",
      at: this.#now,
      message: `the idle group did not fall asleep within ${QUIESCE_TICKS_AFTER_HEAL} ticks of the liveness check; members: ${this.#hosts.map((h) => `${this.#describeHost(h)}${h.raw.quiesced ? " quiesced" : ""}`).join("; ")}`,
    });
  }

  #allClientsIdle(): boolean {
    return this.#pending.every((p) => p === null);
  }

  /** Scheduled crashes (chaos only), restarts and retirements that are due. */
  #runSchedules(chaos: boolean): void {
    if (chaos) {
      for (const [id, at] of this.#crashAt) {
        if (at <= this.#now) {
          this.#crashAt.delete(id);
          if (this.#running(id)) this.#bounce(this.#host(id));
        }
      }
    }
    for (const [id, at] of this.#restartAt) {
      if (at <= this.#now) {
        this.#restartAt.delete(id);
        if (this.#down.has(id)) this.#restart(this.#host(id));
      }
    }
    const due = this.#suspicions.filter((s) => s.at <= this.#now);
    this.#suspicions = this.#suspicions.filter((s) => s.at > this.#now);
    for (const { suspect } of due) this.#reportLeaderDown(suspect);
    this.#reportMembersUp();
    for (const [id, at] of this.#retireAt) {
      if (at <= this.#now) {
        this.#retireAt.delete(id);
        if (!this.#isMember(id)) this.#retire(this.#host(id));
      }
    }
  }

  #checkHistory(): void {
    // Operations still pending at the end never got an answer: indeterminate.
    for (const op of this.#pending) if (op !== null) this.#recordIndeterminate(op);
    this.stats.historyOps = this.#history.length;
    const r = checkRegisterHistory(this.#history, { budget: HISTORY_BUDGET });
    if (r.status === "unknown") this.stats.historyUnknown++;
    if (r.status === "violation") {
      throw new ViolationError({ kind: "linearizability", at: r.observedAt, message: r.report });
    }
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
    keepLinkOrder(due);
    for (const f of due) {
      const to = this.#host(f.msg.to);
      const unreachable = !this.#running(to.id) || this.#cut.has(`${f.msg.from}>${f.msg.to}`);
      const lost = unreachable || (!noDrops && this.#netRng.float() < this.#profile.drop);
      const from = this.#host(f.msg.from);
      if (f.msg.type === "snapshot") {
        // A snapshot travels on a stream whose outcome the sender learns (driver duty).
        if (this.#running(from.id)) from.raw.reportSnapshot(f.msg.to, !lost);
      } else if (
        unreachable &&
        this.#profile.reportUnreachable &&
        this.#running(from.id) &&
        this.#netRng.int(2) === 0
      ) {
        // The transport failed to reach the member: the driver says so.
        from.raw.reportUnreachable(f.msg.to);
        this.stats.unreachableReports++;
      }
      if (lost) continue;
      to.raw.step(f.msg);
      this.stats.messages++;
    }
    for (const h of this.#hosts) {
      if (!this.#running(h.id)) continue;
      // Each member ticks on its own phase.
      if ((this.#now + this.#hosts.indexOf(h) * 3) % TICK === 0) {
        this.#askToRefill(h);
        h.raw.tick();
        if (h === this.#hosts[0]) this.stats.ticks++;
        const quiesced = h.raw.quiesced;
        if (quiesced && h.raw.role === "leader" && this.#wasQuiesced.get(h.id) !== true) {
          this.stats.quiescences++;
          this.#record(`${h.id} quiesces its group at term ${h.raw.term}`);
        }
        this.#wasQuiesced.set(h.id, quiesced);
      }
    }
    for (const h of this.#hosts) {
      if (!this.#running(h.id)) continue;
      for (let i = 0; i < 4 && h.raw.hasReady(); i++) this.#handleReady(h, noDrops);
    }
    this.#completeReads();
    this.#expireOps();
    this.#checker.checkStep(this.#now, (id) => this.#running(id));
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
    for (const e of out.applied) {
      if (e.type === "conf-change") this.#onConfApplied(e.index, decodeConfChange(e.data));
      this.#onApplied(h, e.index, e.term);
    }
    for (const rs of out.readStates) {
      const ctx = new TextDecoder().decode(rs.context);
      const op = this.#pending.find((p) => p?.kind === "read" && p.ctx === ctx && p.node === h.id);
      if (op !== undefined && op !== null && op.kind === "read") op.readIndex = rs.index;
    }
  }

  #send(m: Message, noDrops: boolean): void {
    if (this.#traceOn) this.#record(describeMessage(m));
    const r = this.#netRng;
    // After the heal (noDrops) long delays stop too: they are a fault like drops.
    const long = !noDrops && r.float() < this.#profile.longDelay;
    const delay = 1 + (long ? r.int(5 * MAX_DELAY) : r.int(MAX_DELAY));
    let at = this.#now + delay;
    if (this.#profile.fifo || noDrops) {
      // A stream transport (gRPC over TCP) keeps each link in order; only duplicates stray.
      const link = `${m.from}>${m.to}`;
      at = Math.max(at, this.#linkLast.get(link) ?? 0);
      this.#linkLast.set(link, at);
    }
    this.#inflight.push({ at, seq: this.#msgSeq++, msg: m, fifo: this.#profile.fifo || noDrops });
    if (!noDrops && r.float() < this.#profile.duplicate) {
      this.#inflight.push({
        at: this.#now + 1 + r.int(3 * MAX_DELAY),
        seq: this.#msgSeq++,
        msg: m,
        fifo: false,
      });
    }
  }

  // ── membership ──────────────────────────────────────────────────────────────────────────────

  /** One membership change through the current leader, chosen among those that make sense. */
  #changeMembership(): void {
    const leader = this.#currentLeader();
    if (leader === null) return;
    const conf = leader.raw.status().conf;
    const r = this.#rng;
    const outside = this.#hosts
      .map((h) => h.id)
      .filter((id) => !conf.voters.includes(id) && !conf.learners.includes(id));
    const options: (() => ConfChange)[] = [];
    const pick = (ids: readonly NodeId[]): NodeId => ids[r.int(ids.length)] as NodeId;
    // Weighted: adding learners and promoting them is what the rest needs to happen.
    if (outside.length > 0) {
      options.push(() => ({ type: "add-learner", node: pick(outside) }));
      options.push(() => ({ type: "add-learner", node: pick(outside) }));
      options.push(() => ({ type: "add-voter", node: pick(outside) }));
    }
    if (conf.learners.length > 0) {
      options.push(() => ({ type: "add-voter", node: pick(conf.learners) }));
      options.push(() => ({ type: "remove", node: pick(conf.learners) }));
    }
    // Not while a member is being refilled (it lost its log): that member is a failure the
    // group already bears, and a voter fewer may leave it no quorum that can elect.
    if (conf.voters.length > 2 && !this.#hosts.some((h) => this.#refilling(h))) {
      options.push(() => ({ type: "remove", node: pick(conf.voters) }));
      // The leader removing itself, the hardest case.
      options.push(() => ({ type: "remove", node: leader.id }));
    }
    if (options.length === 0) return;
    let cc = (options[r.int(options.length)] as () => ConfChange)();
    if (cc.type === "remove" && conf.voters.includes(cc.node) && this.#demoteRng?.int(2) === 0)
      cc = { type: "add-learner", node: cc.node };
    try {
      const { index, term } = leader.raw.proposeConfChange(cc);
      this.#confProposed = { index, term };
      this.stats.confChanges++;
      if (cc.type === "add-learner" && conf.voters.includes(cc.node)) this.stats.demotions++;
      this.#record(`${leader.id} proposed ${cc.type} ${cc.node} at ${term}/${index}`);
      if (cc.type !== "remove") {
        // The new member's replica starts now (with whatever disk it had).
        this.#joining.set(cc.node, { index, term });
        this.#retireAt.delete(cc.node);
        if (this.#retired.has(cc.node)) {
          this.#retired.delete(cc.node);
          this.#restart(this.#host(cc.node));
        }
      }
    } catch (err) {
      if (!(
        err instanceof NotLeaderError ||
        err instanceof ProposalDroppedError ||
        err instanceof InvalidRaftRequestError
      ))
        throw err;
    }
    this.#drainReady(leader);
  }

  #transferLeadership(): void {
    const leader = this.#currentLeader();
    if (leader === null) return;
    const voters = leader.raw.status().conf.voters.filter((id) => id !== leader.id);
    if (voters.length === 0) return;
    const to = voters[this.#rng.int(voters.length)] as NodeId;
    try {
      leader.raw.transferLeader(to);
      this.stats.transfers++;
      this.#record(`${leader.id} transfers leadership to ${to}`);
    } catch (err) {
      // ProposalDroppedError: the target's removal is in the leader's log, not yet applied.
      if (!(
        err instanceof NotLeaderError ||
        err instanceof InvalidRaftRequestError ||
        err instanceof ProposalDroppedError
      ))
        throw err;
    }
    this.#drainReady(leader);
  }

  /** A committed conf change, seen as the first member applies it (they all apply in order). */
  #onConfApplied(index: number, cc: ConfChange): void {
    if (index <= this.#confIndex) return;
    this.#confIndex = index;
    this.#conf = confAfter(this.#conf, cc);
    this.#record(`committed ${cc.type} ${cc.node} at ${index}: ${describeConf(this.#conf)}`);
    if (cc.type === "remove" && !this.#retired.has(cc.node)) {
      // The driver learns of the removal and destroys the replica, a little later.
      this.#retireAt.set(cc.node, this.#now + (1 + this.#rng.int(10)) * TICK);
    }
  }

  #isMember(id: NodeId): boolean {
    return (
      this.#conf.voters.includes(id) || this.#conf.learners.includes(id) || this.#joining.has(id)
    );
  }

  // ── faults ──────────────────────────────────────────────────────────────────────────────────

  #injectFault(): void {
    const r = this.#rng;
    const ids = this.#hosts.map((h) => h.id);
    const live = this.#hosts.filter((h) => this.#running(h.id));
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
      // Isolate one member (the leader, if any, most of the time: a deposed leader that does
      // not know it yet is where stale reads come from).
      const leader = this.#currentLeader();
      const victim =
        leader !== null && r.int(4) !== 0 ? leader.id : (ids[r.int(ids.length)] as NodeId);
      this.#isolate(victim);
    } else if (roll < 80) {
      if (live.length === 0) return;
      const leader = this.#currentLeader();
      const victim =
        leader !== null && r.int(3) === 0 ? leader : (live[r.int(live.length)] as Host);
      this.#crash(victim);
      // A supervisor restarts it eventually, if no restart fault does first.
      this.#restartAt.set(victim.id, this.#now + (5 + r.int(40)) * TICK);
    } else {
      const down = this.#hosts.filter((h) => this.#down.has(h.id));
      if (down.length > 0) this.#restart(down[r.int(down.length)] as Host);
    }
  }

  /** High churn: crash leaders soon after they win, bounce members, flap the network. */
  #injectChurn(): void {
    const r = this.#rng;
    const live = this.#hosts.filter((h) => this.#running(h.id));
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
    this.#detect(victim);
  }

  /**
   * The failure detector (the driver's SWIM) will suspect `victim`, crashed or cut off, a few
   * ticks from now: its followers then hear that their leader is down, whether `victim` is back
   * by then or not (a suspicion may be wrong).
   */
  #detect(victim: NodeId): void {
    const p = this.#profile;
    if (p.detectTicks === 0) return;
    const at = this.#now + (1 + this.#sleepRng.int(p.detectTicks)) * TICK;
    this.#suspicions.push({ at, suspect: victim });
  }

  /**
   * Each running member led by `suspect` hears that its leader is down; every running member
   * holds `suspect`'s node down (RaftConfig.memberDown: a leader may sleep with it behind) until
   * #reportMembersUp sees it back.
   */
  #reportLeaderDown(suspect: NodeId): void {
    for (const h of this.#hosts) {
      if (this.#running(h.id) && h.id !== suspect && !h.down.has(suspect)) {
        h.down.add(suspect);
        this.stats.membersHeldDown++;
        this.#record(`${h.id} holds ${suspect} down`);
      }
    }
    for (const h of this.#hosts) {
      if (!this.#running(h.id) || h.id === suspect || h.raw.lead !== suspect) continue;
      this.stats.leaderDownReports++;
      this.#record(
        `${h.id} hears its leader ${suspect} is down${h.raw.quiesced ? " (asleep)" : ""}`,
      );
      h.raw.reportLeaderDown();
      this.#drainReady(h);
    }
  }

  /**
   * A member held down that runs and reaches its holder again is seen back, as SWIM would after
   * a few probes (about one detector delay): the holder's group, if it led and slept with the
   * member behind, wakes to catch it up (RawNode.reportMemberUp).
   */
  #reportMembersUp(): void {
    const p = this.#profile;
    for (const h of this.#hosts) {
      if (h.down.size === 0 || !this.#running(h.id)) continue;
      for (const m of [...h.down]) {
        if (!this.#running(m) || this.#cut.has(`${h.id}>${m}`) || this.#cut.has(`${m}>${h.id}`))
          continue;
        if (this.#sleepRng.int(Math.max(1, p.detectTicks) * TICK) !== 0) continue;
        h.down.delete(m);
        const slept = h.raw.quiesced;
        h.raw.reportMemberUp(m);
        const woke = slept && !h.raw.quiesced;
        if (woke) this.stats.wokenForMemberBack++;
        this.#record(`${h.id} sees ${m} back${woke ? ", wakes to catch it up" : ""}`);
        this.#drainReady(h);
      }
    }
  }

  /**
   * While clients pause, a leader whose group sleeps is sometimes crashed or cut off: only the
   * failure detector, a restart or a client's request can wake its followers then. Now and
   * then the detector suspects a sleeping leader that is fine.
   */
  #maybeStrikeSleepingLeader(): void {
    if (this.#now >= this.#quietUntil || this.#sleepRng.int(4 * TICK) !== 0) return;
    const leader = this.#currentLeader();
    if (leader === null || !leader.raw.quiesced) return;
    this.stats.quiescedLeaderFaults++;
    const roll = this.#sleepRng.int(10);
    if (roll < 5) {
      this.#crash(leader);
      this.#restartAt.set(leader.id, this.#now + (10 + this.#sleepRng.int(60)) * TICK);
    } else if (roll < 8) {
      this.#isolate(leader.id);
    } else {
      this.#record(`false suspicion of ${leader.id}`);
      this.#detect(leader.id);
    }
  }

  /**
   * A member's shard directory is removed: it crashes, and comes back a little later with no log
   * and no state machine, its hard state kept, recovering (Host.loseLog). Only while no member
   * is being refilled (and no voter is removed meanwhile): a second loss before the first is
   * refilled may lose acknowledged writes, as in any three-replica system. Mostly the member struck is a follower holding the leader's
   * whole log, and half the time the leader crashes with it: what they committed together is
   * then on the leader alone, and the others lack it.
   */
  #loseLog(): void {
    const r = this.#lossRng;
    if (this.#hosts.some((h) => this.#refilling(h))) return;
    if (!this.#confSettled()) return;
    // A voter only where the others are a quorum without it: a group of two voters that loses
    // one's log cannot elect unless the other holds everything the lost log held (in any
    // system: losing one replica of two loses the majority).
    const voters = this.#conf.voters;
    const members = this.#hosts.filter(
      (h) =>
        this.#isMember(h.id) &&
        !this.#retired.has(h.id) &&
        (!voters.includes(h.id) || voters.length >= 3),
    );
    const leader = this.#currentLeader();
    let victim: Host | undefined;
    if (leader !== null && r.int(4) !== 0) {
      const last = leader.raw.status().lastIndex;
      const full = members.filter(
        (h) => h !== leader && this.#running(h.id) && h.raw.status().lastIndex >= last,
      );
      victim = full[r.int(Math.max(1, full.length))];
    }
    victim ??= members[r.int(Math.max(1, members.length))];
    if (victim === undefined) return;
    if (this.#running(victim.id)) this.#crash(victim);
    victim.loseLog();
    this.stats.logLosses++;
    this.#record(
      `${victim.id} lost its log (recovering until ${victim.lostLast?.term}/${victim.lostLast?.index})`,
    );
    this.#restartAt.set(victim.id, this.#now + (1 + r.int(20)) * TICK);
    if (leader !== null && leader !== victim && this.#running(leader.id) && r.int(2) === 0) {
      this.#crash(leader);
      this.#restartAt.set(leader.id, this.#now + (10 + r.int(60)) * TICK);
    }
  }

  /**
   * Whether the configuration is settled: no conf change may still commit, every member runs
   * and has applied the committed configuration, and none of its voters was retired. Otherwise a
   * voter removed, or counted though retired, would be a second failure beside a lost log (the
   * others, still counting a retired voter, would need the refilling member's vote).
   */
  #confSettled(): boolean {
    const proposed = this.#confProposed;
    if (proposed !== null && this.#checker.committedTerm(proposed.index) === undefined)
      return false;
    const sorted = (c: ConfState): string =>
      describeConf({ voters: [...c.voters].sort(), learners: [...c.learners].sort() });
    const conf = sorted(this.#conf);
    if (this.#conf.voters.some((id) => this.#retired.has(id))) return false;
    return this.#hosts.every(
      (h) =>
        this.#retired.has(h.id) || (this.#running(h.id) && sorted(h.raw.status().conf) === conf),
    );
  }

  /**
   * What the driver does for a member that lost its log and knows no leader
   * (RoundLoop#askToRefill in multi-raft-round.ts): once per election timeout it asks the
   * group's members to wake their leader. It knows no configuration (its log is gone), so the
   * driver names the members (here, every member of the committed configuration).
   */
  #askToRefill(h: Host): void {
    if (!h.raw.recovering || h.raw.lead !== null) return;
    if (Math.floor(this.#now / TICK) % ELECTION_TICK !== 0) return;
    for (const id of [...this.#conf.voters, ...this.#conf.learners]) {
      if (id !== h.id)
        this.#send({ type: "wake", from: h.id, to: id, term: h.raw.term }, !this.#inChaos);
    }
  }

  /** Whether `h` lost its log and its durable log is not as up to date as the lost one yet. */
  #refilling(h: Host): boolean {
    const lost = h.lostLast;
    if (lost === null || this.#retired.has(h.id)) return false;
    const index = h.storage.lastIndex();
    const t = h.storage.term(index);
    return t < lost.term || (t === lost.term && index < lost.index);
  }

  /** Crash now, restart within a few ticks (a process supervisor restarting it). */
  #bounce(h: Host): void {
    this.#crash(h);
    this.#restartAt.set(h.id, this.#now + (1 + this.#rng.int(30)) * (TICK / 2));
  }

  #crash(h: Host): void {
    this.#down.add(h.id);
    this.stats.crashes++;
    this.#dropInflightTo(h);
    this.#loseClients(h);
    this.#record(`crash ${h.id}`);
    this.#detect(h.id);
  }

  /** Clients connected to a stopped member see the connection drop: their operations are lost. */
  #loseClients(h: Host): void {
    for (let c = 0; c < CLIENTS; c++) {
      const op = this.#pending[c];
      if (op === null || op === undefined || op.node !== h.id) continue;
      this.#recordIndeterminate(op);
      this.#pending[c] = null;
    }
  }

  /** The driver destroyed the replica of a removed member: it stops and stays stopped. */
  #retire(h: Host): void {
    const wasRunning = this.#running(h.id);
    this.#down.delete(h.id);
    this.#restartAt.delete(h.id);
    this.#retired.add(h.id);
    if (wasRunning) {
      this.#dropInflightTo(h);
      this.#loseClients(h);
    }
    this.#record(`retire ${h.id}`);
  }

  #dropInflightTo(h: Host): void {
    // Messages in flight from a stopped process may still arrive; those to it are lost.
    const lost = this.#inflight.filter((f) => f.msg.to === h.id);
    this.#inflight = this.#inflight.filter((f) => f.msg.to !== h.id);
    for (const f of lost) {
      // A snapshot stream to a dead process fails, and its sender is told.
      const from = this.#host(f.msg.from);
      if (f.msg.type === "snapshot" && this.#running(from.id)) from.raw.reportSnapshot(h.id, false);
    }
  }

  #restart(h: Host): void {
    this.#down.delete(h.id);
    h.restart();
    this.#checker.onRestart(h);
    this.#record(`restart ${h.id}`);
  }

  #running(id: NodeId): boolean {
    return !this.#down.has(id) && !this.#retired.has(id);
  }

  // ── clients ─────────────────────────────────────────────────────────────────────────────────

  #clients(): void {
    if (this.#now < this.#quietUntil) return;
    const r = this.#rng;
    for (let c = 0; c < CLIENTS; c++) {
      if (this.#pending[c] !== null || (this.#backoff[c] as number) > this.#now) continue;
      if (r.int(this.#profile.thinkTime) !== 0) continue;
      const target = this.#pickTarget();
      if (target === null) continue;
      // Skewed, as real workloads are: half the operations go to a few hot keys, where stale
      // reads and lost updates have the most chances to show.
      const key = `k${r.int(2) === 0 ? r.int(HOT_KEYS) : r.int(KEYS)}`;
      const id = ++this.#opSeq;
      const roll = r.int(100);
      try {
        if (roll < 40) {
          const ctx = `r${id}`;
          this.#pending[c] = {
            kind: "read",
            client: c,
            key,
            ctx,
            node: target.id,
            readIndex: null,
            deadline: this.#now + OP_TIMEOUT,
            start: this.#now,
          };
          target.raw.readIndex(new TextEncoder().encode(ctx));
        } else {
          const input = this.#writeInput(c, key, `c${c}.${id}`, roll);
          const { index, term } = target.raw.propose(encodeCommand(key, input));
          if (this.#profile.churn && this.#rng.int(100) < 15) {
            // Churn: the leader is cut off with the entry only in its own log.
            this.#isolate(target.id);
          }
          this.#pending[c] = {
            kind: "write",
            client: c,
            key,
            input,
            node: target.id,
            index,
            term,
            deadline: this.#now + OP_TIMEOUT,
            start: this.#now,
          };
        }
      } catch (err) {
        // Refused before anything entered the log: the operation definitely did not happen.
        if (!(err instanceof NotLeaderError || err instanceof ProposalDroppedError)) throw err;
        this.#pending[c] = null;
        // Like a real client, wait a little before asking again.
        this.#backoff[c] = this.#now + (1 + r.int(3)) * TICK;
      }
      // Proposals and reads produce Ready work; handle it before the next client acts.
      this.#drainReady(target);
    }
  }

  /** put 30%, put-if 15%, delete 7%, delete-if 8% (of all operations; the rest are reads). */
  #writeInput(c: number, key: string, value: string, roll: number): RegisterInput {
    const seen = this.#seen[c]?.get(key);
    // Mostly the version last seen; sometimes a guess that is likely stale.
    const expected = (): Version | null =>
      seen !== undefined && this.#rng.int(5) !== 0
        ? seen
        : this.#rng.int(2) === 0
          ? null
          : { index: 1 + this.#rng.int(Math.max(1, this.#checker.maxCommittedIndex())), term: 1 };
    if (roll < 70) return { type: "put", value };
    if (roll < 85) return { type: "put-if", expected: expected(), value };
    if (roll < 92) return { type: "delete" };
    return { type: "delete-if", expected: expected() };
  }

  #drainReady(h: Host): void {
    if (!this.#running(h.id)) return;
    for (let i = 0; i < 4 && h.raw.hasReady(); i++) this.#handleReady(h, !this.#inChaos);
  }

  #pickTarget(): Host | null {
    const live = this.#hosts.filter((h) => this.#running(h.id));
    if (live.length === 0) return null;
    // Clients mostly find the leader (as a routing client would), sometimes ask anyone.
    const leaders = live.filter((h) => h.raw.role === "leader");
    if (leaders.length > 0 && this.#rng.int(5) !== 0)
      return leaders[this.#rng.int(leaders.length)] as Host;
    return live[this.#rng.int(live.length)] as Host;
  }

  #onApplied(h: Host, index: number, term: number): void {
    for (const [id, j] of this.#joining) {
      // The proposal's index is decided: committed as the change, or as something else (then
      // the replica started for it is not a member, and its driver destroys it).
      if (j.index !== index) continue;
      this.#joining.delete(id);
      if (!this.#isMember(id) && !this.#retired.has(id))
        this.#retireAt.set(id, this.#now + (1 + this.#rng.int(10)) * TICK);
    }
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
        const output = kvOf(h.sm).outcome(index);
        if (output === undefined) throw new Error(`no outcome for ${term}/${index} at ${h.id}`);
        this.#checker.onWriteAcknowledged(op.key, index, term, this.#now);
        this.#recordOp(op, output);
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
      if (!this.#running(h.id) || h.sm.appliedIndex < op.readIndex) continue;
      this.#recordOp(op, kvOf(h.sm).get(op.key));
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
        this.#recordIndeterminate(op);
        this.#pending[c] = null;
      }
    }
  }

  #recordOp(op: PendingOp, output: RegisterOutput): void {
    this.#history.push({
      client: `c${op.client}`,
      key: op.key,
      invokeTime: op.start,
      returnTime: this.#now,
      input: op.kind === "read" ? { type: "get" } : op.input,
      output,
    });
    const seen = this.#seen[op.client] as Map<string, Version | null>;
    switch (output.type) {
      case "written":
      case "found":
        seen.set(op.key, output.version);
        break;
      case "precondition-failed":
        seen.set(op.key, output.current);
        break;
      default:
        seen.set(op.key, null);
    }
  }

  #recordIndeterminate(op: PendingOp): void {
    if (op.kind !== "write") return; // an unanswered read promises nothing
    this.stats.indeterminateWrites++;
    this.#history.push({
      client: `c${op.client}`,
      key: op.key,
      invokeTime: op.start,
      returnTime: null,
      input: op.input,
      output: null,
    });
    this.#seen[op.client]?.delete(op.key);
  }

  // ── helpers ─────────────────────────────────────────────────────────────────────────────────

  #currentLeader(): Host | null {
    let best: Host | null = null;
    let bestTerm = -1;
    for (const h of this.#hosts) {
      if (!this.#running(h.id)) continue;
      if (h.raw.role === "leader" && h.raw.term > bestTerm) {
        best = h;
        bestTerm = h.raw.term;
      }
    }
    return best;
  }

  #describeHost(h: Host): string {
    if (this.#retired.has(h.id)) return `${h.id} retired`;
    const s = h.raw.status();
    const progress = [...s.progress].map(([id, p]) => `${id}:${p}`).join(",");
    return `${h.id}${this.#down.has(h.id) ? " (down)" : ""} ${s.role} term=${s.term} lead=${s.lead ?? "-"} commit=${s.commit} applied=${s.applied} first=${s.firstIndex} last=${s.lastIndex} ${describeConf(s.conf)}${progress === "" ? "" : ` [${progress}]`}`;
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

function describeConf(c: ConfState): string {
  return `voters=(${c.voters.join(" ")})${c.learners.length > 0 ? ` learners=(${c.learners.join(" ")})` : ""}`;
}

/**
 * Messages due at the same time are delivered in random order across links, but in sending order
 * within an in-order link: put each link's messages back into that link's slots, by sequence.
 */
function keepLinkOrder(due: InFlight[]): void {
  const slots = new Map<string, number[]>();
  due.forEach((f, i) => {
    if (!f.fifo) return;
    const link = `${f.msg.from}>${f.msg.to}`;
    const list = slots.get(link);
    if (list === undefined) slots.set(link, [i]);
    else list.push(i);
  });
  for (const idx of slots.values()) {
    if (idx.length < 2) continue;
    const ordered = idx.map((i) => due[i] as InFlight).sort((a, b) => a.seq - b.seq);
    idx.forEach((i, k) => (due[i] = ordered[k] as InFlight));
  }
}

export function runSeed(opts: SimOptions): SimResult {
  return new Simulation(opts).run();
}
