/**
 * Deterministic simulation of the real multi-raft driver (src/replication) over the real WAL,
 * on a simulated disk (MemoryFileSystem, power-cut semantics), with the in-memory shard engine
 * (MemoryEngine, the LSM's durability contract), under a virtual clock (world.ts).
 *
 * One seed decides everything: the configuration (segment size, apply budget, flush cadence),
 * the client workload (several clients, hundreds of operations over tens of keys: put, CAS,
 * delete, linearizable get, scans), the cluster (one node, or three whose every shard is a
 * three-voter group talking over a simulated network), and the faults: crashes with torn writes,
 * I/O errors that make a node fail and restart, network partitions, message loss, duplication
 * and delay, shard snapshots that compact the WAL (so followers catch up by snapshot), and wipes:
 * a node's disk replaced by an empty one, after which it comes back as a new replica
 * (`<node>@w<n>`) and each group's leader replaces its old replica (src/node/replicas.ts, with a
 * meta state the simulation keeps as the cluster's committed one), and lost shard directories
 * (some seeds, from their own random stream): a node stops, one of its shard directories is
 * removed, and it starts again to have that replica refilled by its peers
 * (src/replication/refill.ts). One three-node seed in four (from its own random stream) runs
 * four or five nodes instead, whose membership changes during the chaos as a cluster's does:
 * nodes join, replicas move, members are decommissioned or die (moves.ts). There each node has
 * its own copy of the meta state, behind the cluster's while it cannot reach the meta group's
 * leader (down, or its links to that node cut, which some seeds do to one node alone), and runs
 * the product's replica GC (src/node/replica-gc.ts) and LeaderMetaCheck (src/node/replicas.ts)
 * on a simulated meta sync. The same seed replays the same run.
 *
 * Quiescence (most seeds): idle groups sleep. Clients pause now and then so that groups do go
 * idle, and a node leading sleeping groups is often crashed or cut off right then. A failure
 * detector, as SWIM in a real node, tells the other nodes a little later that the node is down
 * (MultiRaft.wakeGroupsLedBy), sometimes about a node that is fine.
 *
 * Checked: every restart succeeds (a WAL that cannot reopen is a violation), the node serves
 * again after the chaos (liveness), the whole client history, reads and writes together, is
 * linearizable per key (test/support/linearizability.ts), and with quiescence on, every group
 * falls asleep once the clients are done; replicas that applied the same index have the same
 * voters (a committed log never diverges); with moves, the checks of moves.ts (a quorum of
 * caught-up voters at every conf change, one leader a term, the settled placement), and no
 * replica a GC deleted is a voter of its group's newest configuration, then or later. Final
 * linearizable reads of every key make lost acknowledged writes visible to the checker.
 */
import type { Rng } from "../../../src/common/rng.ts";
import { seededRng } from "../../../src/common/rng.ts";
import type {
  ApplyOutcome,
  DriverTestingBugs,
  ShardInfo,
  ShardMessage,
  StoredItem,
  TermCheck,
} from "../../../src/replication/index.ts";
import {
  type MetaCommand,
  BUILD_VERSION,
  type MetaMember,
  type MetaOutcome,
  MetaState,
  nodeOfReplica,
  replicaIdOf,
  shardForKey,
} from "../../../src/cluster/index.ts";
import { AllocatorLoop } from "../../../src/node/allocator-loop.ts";
import { ReplicaGc } from "../../../src/node/replica-gc.ts";
import { LeaderMetaCheck, nextReplicaChange, replaceReplicas } from "../../../src/node/replicas.ts";
import { silentLogger } from "../../../src/ops/index.ts";
import { type ConfChange, nodeId } from "../../../src/raft/index.ts";
import { MultiRaft } from "../../../src/replication/index.ts";
import { MemoryEngine } from "../../../src/replication/memory-engine.ts";
import { MemoryFileSystem } from "../../../src/storage/index.ts";
import {
  checkRegisterHistory,
  type RegisterInput,
  type RegisterOp,
  type RegisterOutput,
  type Version,
} from "../../support/linearizability.ts";
import {
  CaughtUpLedger,
  drawMoveProfile,
  FOUNDERS,
  type LeaderView,
  type LeaveKind,
  type MoveProfile,
  placementProblems,
} from "./moves.ts";
import { Process, processFs, World } from "./world.ts";

export interface DriverSimBugs extends DriverTestingBugs {
  /** The WAL's old rotation checkpoint (issue 9, bug 2). */
  readonly rotationCheckpointIncludesBatch?: boolean;
  /** A wiped node comes back as the replica it was, with an empty disk (no rejoin). */
  readonly wipeKeepsReplica?: boolean;
  /**
   * A group's leader takes membership steps on whatever meta state its node has applied, not
   * waiting for a sync after it became leader (no LeaderMetaCheck: the bug fixed in 6d47d4a).
   */
  readonly staleMetaLeader?: boolean;
}

export interface DriverSimOptions {
  readonly seed: number;
  /**
   * Nodes, 1, 3, 4 or 5; default: drawn from the seed. Three found the cluster; a fourth and
   * fifth join it during the chaos and members leave (moves.ts).
   */
  readonly nodes?: number;
  /** Simulated milliseconds of chaos (default 3000). */
  readonly chaosMs?: number;
  readonly bugs?: DriverSimBugs;
  /** Keep a trace of events, returned with the result. */
  readonly trace?: boolean;
}

export interface DriverSimViolation {
  readonly kind:
    | "restart-failed"
    | "liveness"
    | "linearizability"
    | "fatal"
    | "quiescence"
    | "quorum"
    | "placement"
    | "two-groups"
    | "deleted-voter"
    | "diverged";
  readonly message: string;
}

export interface DriverSimStats {
  operations: number;
  acknowledgedWrites: number;
  indeterminateWrites: number;
  completedReads: number;
  crashes: number;
  ioFaults: number;
  snapshots: number;
  restarts: number;
  partitions: number;
  /** Nodes seen back by a node whose failure detector held them down (#seeBack). */
  seenBack: number;
  transfers: number;
  membershipChanges: number;
  membershipApplied: number;
  wipes: number;
  /** Shard directories removed from a stopped node (its replica then refilled by its peers). */
  lostShards: number;
  messages: number;
  checkerSteps: number;
  /** Nodes crashed or cut off while clients paused (their groups asleep, most often). */
  quietStrikes: number;
  /** Failure detector reports (MultiRaft.wakeGroupsLedBy calls), true and false. */
  suspicions: number;
  /** Seeds with moves (moves.ts): nodes admitted (join committed). */
  joins: number;
  /** Members decommissioned or stopped for good. */
  leaves: number;
  /** move-shard commands committed (the allocator's). */
  moves: number;
  /** settle-shard commands committed (a group's leader's). */
  settles: number;
  /** Member state changes committed (set-state, the allocator's and the operator's). */
  stateChanges: number;
  /** Crashes of a move's source, destination, group leader or meta leader mid-move. */
  moveStrikes: number;
  /** Leaders that handed their group over because their own node was leaving it. */
  leaderHandoffs: number;
  /** Conf changes a group's leader applied, checked for a quorum of caught-up voters. */
  confChecks: number;
  /** Replicas moved off their node that its replica GC deleted (ReplicaGc). */
  replicasRemoved: number;
  /** Meta syncs (MultiRaft.syncMeta, simulated) that brought a node's meta state up to date. */
  metaSyncs: number;
  /** Meta syncs that failed: the node could not reach the meta group's leader. */
  metaSyncsFailed: number;
  /** Links between a node and the meta group's leader cut (its other links kept). */
  metaCuts: number;
  /** Longest time a node's meta state stayed behind the cluster's, its down time included (ms). */
  metaBehindMs: number;
}

export interface DriverSimResult {
  readonly seed: number;
  readonly nodes: number;
  readonly violation: DriverSimViolation | null;
  readonly stats: DriverSimStats;
  readonly trace: readonly string[];
}

const TICK_MS = 10;
const ELECTION_TICKS = 10;
const TOTAL_SHARDS = 8;
const CLIENTS = 4;
const DATA_DIR = "/data";
/** A client gives up on an operation after this long: a write becomes indeterminate. */
const OP_TIMEOUT_MS = 1500;
/** A meta sync whose request or answer the network lost fails within this long (#syncMeta). */
const SYNC_TIMEOUT_MS = 500;
/** After the chaos: the node must serve every key within this long. */
const LIVENESS_MS = 5000;
/** After the final reads (seeds with moves): every shard placed as its meta record says. */
const SETTLE_MS = 10_000;
/** After the final reads: every group must be asleep within this long (quiescence on). */
const QUIESCE_MS = 2000;

const ABSENT_VERSION: Version = { index: 0, term: 0 };
const enc = new TextEncoder();
const dec = new TextDecoder();

class ViolationFound extends Error {
  readonly violation: DriverSimViolation;
  constructor(violation: DriverSimViolation) {
    super(`${violation.kind}: ${violation.message}`);
    this.violation = violation;
  }
}

interface Profile {
  readonly keys: readonly string[];
  readonly segmentBytes: number;
  readonly maxCommittedBytesPerReady: number;
  readonly flushEvery: number;
  /** Mean simulated ms between crashes (Infinity: none). */
  readonly crashEveryMs: number;
  readonly tornWrites: boolean;
  readonly ioFaultEveryMs: number;
  /** Odds that a write or sync is a crash point: the process dies just before it. */
  readonly crashAtIoRate: number;
  readonly snapshotEveryMs: number;
  readonly valueBytes: number;
  /** Simulated ms of each disk write or sync (drawn per operation, up to this). */
  readonly diskLatencyMs: number;
  /** Simulated ms between a round's scheduling and its start (CPU time of the work before it). */
  readonly roundCostMs: number;
  /** Network: a message batch takes 1..maxDelayMs; lost or duplicated with these odds. */
  readonly maxDelayMs: number;
  readonly dropRate: number;
  readonly duplicateRate: number;
  /** Mean simulated ms between partitions (Infinity: none); each lasts up to partitionMs. */
  readonly partitionEveryMs: number;
  readonly partitionMs: number;
  /** Mean simulated ms between leadership transfer requests (Infinity: none). */
  readonly transferEveryMs: number;
  /** Mean simulated ms between membership changes (Infinity: none); clusters only. */
  readonly membershipEveryMs: number;
  /** Mean simulated ms between disk wipes (Infinity: none); clusters only. */
  readonly wipeEveryMs: number;
  /** MultiRaftOptions.quiesce. */
  readonly quiesce: boolean;
  /** Mean simulated ms between client pauses (Infinity: none). */
  readonly quietEveryMs: number;
  /** The failure detector reports a crashed or cut-off node within this many ms (0: never). */
  readonly detectMs: number;
  /** MultiRaftOptions.heartbeatTicks (raft.heartbeat_ticks). */
  readonly heartbeatTicks: number;
}

function pickProfile(rng: Rng): Profile {
  const keyCount = 8 + rng.int(25);
  return {
    keys: Array.from({ length: keyCount }, (_, i) => `k${i}`),
    segmentBytes: [512, 2048, 8192, 64 * 1024][rng.int(4)] as number,
    maxCommittedBytesPerReady: [512, 4096, 1 << 20][rng.int(3)] as number,
    flushEvery: 1 + rng.int(40),
    crashEveryMs: [300, 700, 1500, Infinity][rng.int(4)] as number,
    tornWrites: rng.int(2) === 0,
    ioFaultEveryMs: [800, 2000, Infinity][rng.int(3)] as number,
    crashAtIoRate: [0, 0.005, 0.02][rng.int(3)] as number,
    snapshotEveryMs: [200, 1000, Infinity][rng.int(3)] as number,
    valueBytes: [8, 200, 2000][rng.int(3)] as number,
    diskLatencyMs: [0, 2, 5][rng.int(3)] as number,
    roundCostMs: [0, 1][rng.int(2)] as number,
    maxDelayMs: [1, 5, 20][rng.int(3)] as number,
    dropRate: [0, 0.01, 0.1][rng.int(3)] as number,
    duplicateRate: [0, 0.02][rng.int(2)] as number,
    partitionEveryMs: [400, 1000, Infinity][rng.int(3)] as number,
    partitionMs: [100, 400, 1200][rng.int(3)] as number,
    transferEveryMs: [100, 500, Infinity][rng.int(3)] as number,
    membershipEveryMs: [50, 300, Infinity][rng.int(3)] as number,
    quiesce: rng.int(4) !== 0,
    quietEveryMs: [200, 600, Infinity][rng.int(3)] as number,
    detectMs: [0, 100, 400][rng.int(3)] as number,
    // Drawn last, so that the seeds drawn before wipes existed keep their other choices.
    wipeEveryMs: [500, 1500, Infinity][rng.int(3)] as number,
    // After wipes, for the same reason: 2 is the default, 1 the default before it.
    heartbeatTicks: [1, 2][rng.int(2)] as number,
  };
}

/** One node: its disk outlives its processes. */
interface SimNode {
  readonly id: string;
  disk: MemoryFileSystem;
  proc: Process | null;
  mr: MultiRaft | null;
  incarnation: number;
  /** Its disk's incarnation ("i0", then "w1", "w2"… after wipes) and replica id in its groups. */
  diskIncarnation: string;
  replica: string;
  /** Stopped for good (decommissioned, or killed to be declared dead): never restarted. */
  gone: boolean;
  /**
   * Seeds with moves: the meta state as this node applied it, at `metaVersion` of the cluster's
   * commands. Behind the cluster's while the node cannot reach the meta group's leader (its
   * process stopped, or a link between them cut), for any time: it catches up once it can
   * (#feedMeta), or by a sync (#syncMeta). A restarted node comes back with the state it had.
   */
  meta: MetaState;
  metaVersion: number;
  /** Since when this node's meta state is behind the cluster's (null: up to date). */
  behindSince: number | null;
  /** Seeds with moves: the process's upkeep (src/node/node.ts #startUpkeep). */
  upkeep: Upkeep | null;
  /**
   * The nodes this process's failure detector holds down (MultiRaftOptions.nodeDown): set by
   * #detect and #detectGone, cleared when the node is seen back (#seeBack) or this one restarts.
   */
  readonly down: Set<string>;
}

/** A node process's upkeep, as src/node/node.ts #startUpkeep builds it (seeds with moves). */
interface Upkeep {
  readonly changing: Set<number>;
  readonly allocator: AllocatorLoop;
  /** Its replica GC (src/node/replica-gc.ts), and when it passes next. */
  readonly gc: ReplicaGc;
  gcAt: number;
  /** Whether a group led here may take a step on this node's meta state (LeaderMetaCheck). */
  readonly metaFresh: (shard: number, term: number) => boolean;
}

export async function runDriverSeed(options: DriverSimOptions): Promise<DriverSimResult> {
  const sim = new DriverSim(options);
  return sim.run();
}

class DriverSim {
  readonly #options: DriverSimOptions;
  readonly #rng: Rng;
  /**
   * The quiescence chaos's own stream (pauses, strikes, detector delays), so that a seed without
   * it replays the schedule it had before quiescence existed.
   */
  readonly #sleepRng: Rng;
  /** The lost shard directories' own stream, so that a seed without them replays as before. */
  readonly #lossRng: Rng;
  /** Mean simulated ms between lost shard directories (Infinity: none); clusters only. */
  readonly #loseShardEveryMs: number;
  /** The replica whose shard directory was removed last, until it is refilled. */
  #lost: { readonly node: SimNode; readonly shard: number } | null = null;
  readonly #profile: Profile;
  readonly #world = new World();
  readonly #clients = new Process("clients");
  readonly #nodes: SimNode[];
  readonly #network = new Process("network");
  /** Links cut by the current partition, as "from>to". */
  #cut = new Set<string>();
  /**
   * Links cut between a node and the meta group's leader only (#cutFromMeta), as "from>to",
   * each with the number of such cuts holding it: apart from the partitions, whose heal clears
   * #cut whole.
   */
  readonly #linkCuts = new Map<string, number>();
  readonly #history: RegisterOp[] = [];
  readonly #trace: string[] = [];
  readonly #stats: DriverSimStats = {
    operations: 0,
    acknowledgedWrites: 0,
    indeterminateWrites: 0,
    completedReads: 0,
    crashes: 0,
    ioFaults: 0,
    snapshots: 0,
    restarts: 0,
    partitions: 0,
    seenBack: 0,
    transfers: 0,
    membershipChanges: 0,
    membershipApplied: 0,
    wipes: 0,
    lostShards: 0,
    messages: 0,
    checkerSteps: 0,
    quietStrikes: 0,
    suspicions: 0,
    joins: 0,
    leaves: 0,
    moves: 0,
    settles: 0,
    stateChanges: 0,
    moveStrikes: 0,
    leaderHandoffs: 0,
    confChecks: 0,
    replicasRemoved: 0,
    metaSyncs: 0,
    metaSyncsFailed: 0,
    metaCuts: 0,
    metaBehindMs: 0,
  };
  #violation: DriverSimViolation | null = null;
  #valueSeq = 0;
  #chaos = true;
  /** Clients start nothing before this time (a pause). */
  #quietUntil = 0;
  /** Per client, the last version it saw per key: what its CAS operations expect. */
  readonly #seen = new Map<number, Map<string, Version>>();

  constructor(options: DriverSimOptions) {
    this.#options = options;
    this.#rng = seededRng(options.seed);
    this.#sleepRng = seededRng(options.seed ^ 0x51ee9);
    this.#lossRng = seededRng(options.seed ^ 0x5a4d);
    this.#loseShardEveryMs = [Infinity, Infinity, 400, 1200][this.#lossRng.int(4)] as number;
    this.#profile = pickProfile(this.#rng.fork());
    // Drawn even when given, so that --nodes replays a seed drawn with that size exactly. The
    // moves draw from their own stream: the seeds without them replay as before they existed.
    const drawn = this.#rng.int(2) === 0 ? 1 : 3;
    this.#moveRng = seededRng(options.seed ^ 0x30e5);
    const movesDrawn = this.#moveRng.int(4) === 0 ? 4 + this.#moveRng.int(2) : 0;
    const count = options.nodes ?? (drawn === 3 && movesDrawn > 0 ? movesDrawn : drawn);
    this.#size = count;
    const chaosMs = options.chaosMs ?? 3000;
    this.#moves = count > FOUNDERS ? drawMoveProfile(this.#moveRng, count, chaosMs) : null;
    this.#metaRng = seededRng(options.seed ^ 0x3e7a);
    this.#metaCutEveryMs = [Infinity, 300, 800][this.#metaRng.int(3)] as number;
    this.#metaCutMs = [300, 1000, 2500][this.#metaRng.int(3)] as number;
    this.#gcEveryMs = [100, 300, 1000][this.#metaRng.int(3)] as number;
    if (this.#moves !== null) {
      // A key in shard 0, so that the clients open its group early: the product founds the
      // meta group with the cluster (one seed's bootstrap record), while shard 0 is an ordinary
      // group here, opened by a request or a message, and never by MultiRaft.startGroup. The
      // other shards' groups are opened by their initial voters' upkeep (replaceReplicas) if
      // no request opened them first: created and never opened, a group first opened after two
      // of its initial voters were wiped or killed for good never had a quorum.
      const keys = [...this.#profile.keys];
      for (let i = 0; !keys.some((k) => shardOfKey(k) === 0) && i < 1000; i++) {
        if (shardOfKey(`s${i}`) === 0) keys.push(`s${i}`);
      }
      this.#profile = { ...this.#profile, keys };
    }
    // Three nodes: a spare beside the three initial voters, which random membership changes add
    // to groups (as a learner, then a voter) and remove members, the leader among them. Four or
    // five: the cluster is founded on three, and the others join it (moves.ts).
    const total = count === 1 ? 1 : count === FOUNDERS ? count + 1 : count;
    this.#nodes = Array.from({ length: total }, (_, i) => ({
      id: `n${i + 1}`,
      disk: new MemoryFileSystem(),
      proc: null,
      mr: null,
      incarnation: 0,
      diskIncarnation: "i0",
      replica: count > 1 ? replicaIdOf(`n${i + 1}`, "i0") : `n${i + 1}`,
      gone: false,
      meta: MetaState.empty(),
      metaVersion: 0,
      behindSince: null,
      upkeep: null,
      down: new Set<string>(),
    }));
    // The cluster's committed metadata, as the meta group would hold it: the initial voters'
    // nodes replicate every shard; the three-node cluster's spare is a member too. Wipes apply
    // `rejoin` here.
    const ids = this.#nodes.map((n) => n.id);
    // Every node runs this build, and the cluster its version (the product's meta leader raises
    // it once the members report their builds): the rules of the newest version are what run.
    const member = (id: string): MetaMember => ({
      id,
      rpcAddr: `${id}:7447`,
      httpAddr: `${id}:8080`,
      incarnation: "i0",
      build: BUILD_VERSION,
    });
    const founders = Math.min(count, FOUNDERS);
    let meta = MetaState.empty()
      .apply({
        op: "bootstrap",
        clusterId: "sim",
        totalShards: TOTAL_SHARDS,
        replicationFactor: founders,
        members: ids.slice(0, founders).map(member),
      })
      .state.apply({ op: "set-version", version: BUILD_VERSION }).state;
    if (meta.version !== BUILD_VERSION) throw new Error("the simulated cluster runs no version");
    if (this.#moves === null) {
      for (const id of ids.slice(count)) {
        // (set-member names no build: set-build reports it.)
        const { build, ...spare } = member(id);
        meta = meta.apply({ op: "set-member", member: spare }).state;
        meta = meta.apply({ op: "set-build", id, build: build ?? 1 }).state;
      }
      // (A set-member refused left the spare no member: its wipes' rejoins were refused.)
      if (!ids.every((id) => meta.members.has(id))) throw new Error("a node is no member");
    }
    // Each shard ranks its replicas in another order, as rendezvous hashing does: the first
    // ranked leads the new group's founding term (Groups#openShard), so each node founds
    // some groups as their leader.
    const replicas = ids.slice(0, founders);
    for (let shard = 1; shard < TOTAL_SHARDS; shard++) {
      const turn = shard % founders;
      const ranked = [...replicas.slice(turn), ...replicas.slice(0, turn)];
      meta = meta.apply({ op: "create-shard", shard, replicas: ranked }).state;
    }
    this.#meta = meta;
    for (const node of this.#nodes) node.meta = meta;
    for (const [shard, voters] of meta.shards.entries()) this.#ledger.found(shard, voters);
  }

  /** The cluster's committed metadata (clusters only; see the constructor). */
  #meta: MetaState;
  /** How many meta commands committed (each node's copy is at one of these versions). */
  #metaVersion = 0;
  /** Nodes, as drawn or given (the replay command's --nodes). */
  readonly #size: number;
  /** Seeds with moves (four or five nodes): what their membership does; else null. */
  readonly #moves: MoveProfile | null;
  /** The moves' own stream (their schedule, delays and victims). */
  readonly #moveRng: Rng;
  /**
   * The nodes' meta states' own stream (catching up, syncs, cuts from the meta leader), so that
   * the moves' stream draws what it drew before a node's meta state could lag for long.
   */
  readonly #metaRng: Rng;
  /**
   * Seeds with moves: mean simulated ms between cuts of a node from the meta group's leader
   * alone (Infinity: none), and the longest such cut.
   */
  readonly #metaCutEveryMs: number;
  readonly #metaCutMs: number;
  /**
   * Seeds with moves: how often each node's replica GC passes. A node runs it on its upkeep
   * tick (every 2 s), while a move's steps also run between ticks, 50–200 ms apart: here the
   * steps run every 100 ms, and the GC as often, or less.
   */
  readonly #gcEveryMs: number;
  readonly #ledger = new CaughtUpLedger();
  /**
   * Per shard, the replicas a replica GC deleted, until their node opens the shard again (a
   * move back): what no group may count as a voter (#noteConf).
   */
  readonly #deleted = new Map<number, Set<string>>();
  /**
   * Per shard, the newest configuration a replica applied (committed, so the group's): its
   * voters, the applied index it was read at, and the replica.
   */
  readonly #conf = new Map<
    number,
    { readonly applied: number; readonly voters: readonly string[]; readonly by: string }
  >();
  /** Per shard, the voters a replica had once it applied up to an index (#checkSameConf). */
  readonly #confAt = new Map<
    number,
    Map<number, { readonly voters: string; readonly by: string }>
  >();
  /** Members chosen to leave (decommissioned or killed), from the moment they are chosen. */
  readonly #leaving = new Set<string>();

  async run(): Promise<DriverSimResult> {
    try {
      await this.#runPhases();
    } catch (err) {
      if (!(err instanceof ViolationFound)) throw err;
      this.#violation ??= err.violation;
    }
    // Stop everything still scheduled, so nothing outlives the run.
    this.#clients.alive = false;
    this.#network.alive = false;
    for (const node of this.#nodes) if (node.proc !== null) node.proc.alive = false;
    return {
      seed: this.#options.seed,
      nodes: this.#size,
      violation: this.#violation,
      stats: this.#stats,
      trace: this.#trace,
    };
  }

  async #runPhases(): Promise<void> {
    const chaosMs = this.#options.chaosMs ?? 3000;
    const world = this.#world;
    if (this.#moves !== null) this.#log(`moves: ${JSON.stringify(this.#moves)}`);
    for (const node of this.#nodes) this.#start(node);
    await world.settle();
    this.#throwIfViolated();
    for (let c = 0; c < CLIENTS; c++) {
      this.#seen.set(c, new Map());
      world.after(1 + this.#rng.int(20), this.#clients, () => this.#issue(c));
    }
    this.#scheduleFaults(chaosMs);
    while (await world.step(chaosMs)) this.#throwIfViolated();

    // Heal: no more faults; the node comes back if it is down, and every operation in flight
    // ends (answered or timed out) before the final reads.
    this.#chaos = false;
    this.#cut.clear();
    this.#linkCuts.clear();
    for (const node of this.#nodes) if (node.proc === null) this.#start(node);
    await world.runUntil(world.now + OP_TIMEOUT_MS + 10);
    this.#throwIfViolated();
    await this.#finalReads();
    await this.#checkPlacement();
    await this.#checkQuiescence();
    this.#check();
  }

  #log(line: string): void {
    if (this.#options.trace === true) this.#trace.push(`t=${this.#world.now} ${line}`);
  }

  #logShards(what: string, mr: MultiRaft): void {
    if (this.#options.trace !== true) return;
    const shards = mr.shardIds().map((id) => {
      const i = mr.shardInfo(id);
      return `${id}:t${i?.term}/c${i?.commit}/a${i?.applied}`;
    });
    this.#log(`${what}: ${shards.join(" ")}`);
  }

  #violate(v: DriverSimViolation): void {
    this.#violation ??= v;
  }

  #throwIfViolated(): void {
    if (this.#violation !== null) throw new ViolationFound(this.#violation);
  }

  // ── nodes ──────────────────────────────────────────────────────────────────────────────────

  #start(node: SimNode): void {
    if (node.gone) return;
    const proc = new Process(`${node.id}#${++node.incarnation}`);
    // This process's replica id in its groups (a wipe makes the next process another).
    const replica = node.replica;
    node.proc = proc;
    const bugs = this.#options.bugs ?? {};
    const p = this.#profile;
    const latency = this.#rng.fork();
    const fs = processFs(
      node.disk,
      proc,
      this.#world,
      () => (p.diskLatencyMs === 0 ? 0 : latency.int(p.diskLatencyMs + 1)),
      () => {
        if (!this.#chaos || p.crashAtIoRate === 0 || latency.float() >= p.crashAtIoRate) {
          return false;
        }
        this.#log(`crash point in ${proc.name}`);
        this.#crash(node, true);
        return true;
      },
    );
    this.#log(`start ${proc.name}`);
    node.down.clear();
    MultiRaft.open({
      nodeId: node.id,
      dataDir: DATA_DIR,
      totalShards: TOTAL_SHARDS,
      tickMs: TICK_MS,
      electionTicks: ELECTION_TICKS,
      heartbeatTicks: p.heartbeatTicks,
      memtableBytes: 0,
      blockCacheBytes: 0,
      fs,
      clock: this.#world.clockFor(proc, p.roundCostMs),
      seed: this.#rng.nextU32(),
      openEngine: (_shard, dir) => MemoryEngine.open(fs, dir, { flushEvery: p.flushEvery }),
      wal: {
        segmentBytes: p.segmentBytes,
        ...(bugs.rotationCheckpointIncludesBatch === true
          ? { testingBugs: { rotationCheckpointIncludesBatch: true } }
          : {}),
      },
      maxCommittedBytesPerReady: p.maxCommittedBytesPerReady,
      ...(this.#nodes.length > 1
        ? {
            replicaId: node.replica,
            ...(this.#moves === null
              ? {
                  replicasOf: (shard: number) => this.#meta.shards.get(shard) ?? [],
                  replicasNow: (shard: number) =>
                    this.#meta.nodesOf(shard).map((n) => this.#meta.replicaOf(n)),
                  acceptsReplica: () => true,
                  // The shard's first-ranked replica, up or not: a group created elsewhere asks
                  // it to campaign (and elects on timers when it is down).
                  firstCampaigner: (shard: number) => this.#meta.shards.get(shard)?.[0],
                }
              : {
                  // As a node does (src/node/cluster.ts), from the meta state it applied.
                  replicasOf: (shard: number) => node.meta.shards.get(shard) ?? [],
                  replicasNow: (shard: number) =>
                    node.meta.nodesOf(shard).map((n) => node.meta.replicaOf(n)),
                  acceptsReplica: (shard: number) => node.meta.keepsReplica(node.id, shard),
                  firstCampaigner: (shard: number) => {
                    const first = node.meta.leaderWanted(shard);
                    const up = this.#nodes.some((n) => n.id === first && n.mr !== null);
                    return first === undefined || !up ? undefined : node.meta.replicaOf(first);
                  },
                }),
            transport: {
              send: (to, messages, sent) => this.#deliver(node, to, messages, sent),
              // Sent messages are in the simulated network at once: nothing waits for the turn.
              flush: () => undefined,
            },
            remoteReadIndex: (leader: string, shard: number, term: number) =>
              this.#remoteReadIndex(node, leader, shard, term),
            confirmTerms: (to: string, checks: readonly TermCheck[]) =>
              this.#confirmTerms(node, to, checks),
          }
        : {}),
      quiesce: p.quiesce,
      nodeDown: (n: string) => node.down.has(n),
      testingBugs: {
        ...(bugs.staleReadAfterRestart === true ? { staleReadAfterRestart: true } : {}),
        ...(bugs.followerReadWithoutApply === true ? { followerReadWithoutApply: true } : {}),
        ...(bugs.everyMessageBeforeWalWrite === true ? { everyMessageBeforeWalWrite: true } : {}),
        ...(bugs.confirmByEarlierCall === true ? { confirmByEarlierCall: true } : {}),
        ...(bugs.confirmAnyTerm === true ? { confirmAnyTerm: true } : {}),
        ...(bugs.leadFoundingTermAgain === true ? { leadFoundingTermAgain: true } : {}),
        ...(bugs.foundingAppendsBeforeSync === true ? { foundingAppendsBeforeSync: true } : {}),
        ...(bugs.voteWhenRecreated === true ? { voteWhenRecreated: true } : {}),
      },
      observer: {
        confChanged: (shard, voters) => this.#checkConf(node, proc, shard, voters),
        shardRemoved: (shard) => {
          if (proc.alive) this.#replicaDeleted(node, replica, shard);
        },
        // A replica deleted by a GC and created again (a move back onto its node).
        shardOpened: (shard) => this.#deleted.get(shard)?.delete(replica),
        fatal: (err) => {
          if (!proc.alive) return;
          // A node that fails stops (the process exits); its supervisor restarts it.
          this.#log(`fatal ${proc.name}: ${describe(err)}`);
          // A failed disk is what the simulation injects; a broken invariant is a bug (seed
          // 145 once restarted a node for each of 64 without a verdict).
          if (isInvariantFailure(err)) {
            this.#violate({ kind: "fatal", message: `${proc.name}: ${describe(err)}` });
          }
          this.#world.after(0, this.#clients, () => this.#crash(node, true));
        },
      },
    }).then(
      (mr) => {
        if (!proc.alive) {
          void mr.close().catch(() => undefined);
          return;
        }
        node.mr = mr;
        if (this.#moves !== null) node.upkeep = this.#upkeepFor(node, proc, mr, this.#moves);
        this.#logShards(`opened ${proc.name}`, mr);
        if (mr.tornTail !== undefined) {
          this.#log(
            `  torn tail cut: ${mr.tornTail.file}@${mr.tornTail.offset} (${mr.tornTail.droppedBytes} bytes)`,
          );
        }
        for (const c of mr.clampedCommits) {
          this.#log(`  commit of shard ${c.shard} lowered from ${c.commit} to ${c.clampedTo}`);
        }
        for (const l of mr.lostShards) {
          this.#log(
            `  shard ${l.shard}'s directory is missing: refilled from the peers (its log lost ${l.lost.term}/${l.lost.index})`,
          );
        }
      },
      (err: unknown) => {
        if (!proc.alive) return;
        if (isInjectedFault(err)) {
          // The disk failed under the start itself: the supervisor tries again.
          this.#log(`start of ${proc.name} failed: ${describe(err)}`);
          this.#world.after(0, this.#clients, () => this.#crash(node, true));
          return;
        }
        this.#violate({
          kind: "restart-failed",
          message: `${proc.name} could not open its data: ${describe(err)}`,
        });
      },
    );
  }

  /**
   * The node's disk is lost: the process dies (a power cut), an empty disk replaces its own, and
   * it restarts as a new incarnation, hence a new replica, which the meta state records as
   * rejoined (its old replica retired). Only while no earlier replacement is under way: losing
   * a second replica of a group before the first is refilled may lose acknowledged writes, as in
   * any three-replica system.
   */
  #wipe(node: SimNode): void {
    if (
      node.proc === null ||
      !node.proc.alive ||
      this.#replacementsPending() ||
      this.#refillPending() ||
      !this.#mayLoseCopy(node)
    )
      return;
    this.#stats.wipes++;
    this.#crash(node, false);
    node.disk = new MemoryFileSystem();
    if (this.#options.bugs?.wipeKeepsReplica !== true) {
      node.diskIncarnation = `w${this.#stats.wipes}`;
      node.replica = replicaIdOf(node.id, node.diskIncarnation);
      const rejoin: MetaCommand = {
        op: "rejoin",
        id: node.id,
        incarnation: node.diskIncarnation,
      };
      if (this.#moves === null) this.#meta = this.#meta.apply(rejoin).state;
      else this.#commitMeta(rejoin);
    }
    this.#log(`wipe ${node.id}: back as ${node.replica}`);
    if (this.#options.bugs?.wipeKeepsReplica !== true) {
      // Each node applies the rejoin a little later and wakes the groups the old replica led
      // (ClusterState.onMemberRejoined): asleep, they would wait for it forever.
      for (const other of this.#nodes) {
        if (other === node) continue;
        this.#world.after(10 + this.#rng.int(100), this.#clients, () =>
          other.mr?.wakeGroupsLedBy(node.id),
        );
      }
    }
    this.#world.after(20 + this.#rng.int(300), this.#clients, () => {
      if (node.proc !== null) return;
      this.#stats.restarts++;
      this.#start(node);
    });
  }

  /**
   * A node stops (kill -9 or power cut) and one of its shard directories is removed; it starts
   * again a little later, and its replica of that shard is refilled by its peers
   * (src/replication/refill.ts). Only while no other replica is being refilled or replaced: a
   * second replica of a group lost before the first is refilled may lose acknowledged writes,
   * as in any three-replica system. Most often a shard whose log the node compacted (its tables
   * hold what the log dropped: the refill case); otherwise the log is whole and is replayed.
   */
  #loseShard(): void {
    const r = this.#lossRng;
    const node = this.#nodes[r.int(this.#nodes.length)] as SimNode;
    const mr = node.mr;
    if (mr === null || node.proc === null || !node.proc.alive) return;
    if (this.#replacementsPending() || this.#refillPending() || !this.#mayLoseCopy(node)) return;
    const held = mr.shardIds();
    const compacted = held.filter((id) => (mr.shardInfo(id)?.logFirstIndex ?? 0) > 1);
    const pool = compacted.length > 0 && r.int(4) !== 0 ? compacted : held;
    const shard = pool[r.int(Math.max(1, pool.length))];
    if (shard === undefined) return;
    const proc = node.proc;
    // The guard again when the strike comes: a shard whose log is whole here is compacted
    // first, and a wipe may take another copy meanwhile (seed 45791 on five nodes: n1 was wiped
    // while n3 compacted shard 2, then n3's directory of it was removed; the group, two copies
    // short, never elected a leader again).
    const mayStrike = (): boolean =>
      node.proc === proc &&
      proc.alive &&
      !this.#replacementsPending() &&
      !this.#refillPending() &&
      this.#mayLoseCopy(node);
    const strike = (): void => {
      if (!mayStrike()) return;
      this.#stats.lostShards++;
      // Half the time the shard's leader crashes with it: what the two of them committed is
      // then on the leader alone, and the third replica may lack it.
      const leader = this.#nodes.find(
        (n) => n !== node && n.mr?.shardInfo(shard)?.role === "leader",
      );
      if (leader !== undefined && r.int(2) === 0) this.#crash(leader, true);
      this.#crash(node, false);
      node.disk.removeTree(`${DATA_DIR}/shards/${shard}`);
      this.#lost = { node, shard };
      this.#log(`lost ${node.id}'s directory of shard ${shard}`);
      this.#world.after(20 + r.int(300), this.#clients, () => {
        if (node.proc !== null) return;
        this.#stats.restarts++;
        this.#start(node);
      });
    };
    // A shard whose log is whole here is compacted first, most often (its tables then hold
    // what the log dropped).
    if (compacted.includes(shard) || r.int(3) === 0) strike();
    else mr.snapshotShard(shard).then(strike, () => undefined);
  }

  /** Whether the replica whose shard directory was removed last is not refilled yet. */
  #refillPending(): boolean {
    const lost = this.#lost;
    if (lost === null) return false;
    const info = lost.node.mr?.shardInfo(lost.shard);
    if (info === null || info === undefined || info.refilling) return true;
    this.#lost = null;
    return false;
  }

  /**
   * Whether some group may still hold a replica of a wiped node, or lack its new one: some
   * shard has no live leader to ask, or its leader has a replica change to make.
   */
  #replacementsPending(): boolean {
    for (let shard = 0; shard < TOTAL_SHARDS; shard++) {
      const holders = this.#nodes.filter((n) => n.mr?.shardInfo(shard) !== null && n.mr !== null);
      if (holders.length === 0) {
        // A group not running anywhere yet starts from its recorded initial voters: one of them
        // retired already, a second wipe would leave it without a quorum to elect the leader
        // that replaces them.
        if ((this.#meta.shards.get(shard) ?? []).some((r) => this.#meta.isRetired(r))) return true;
        continue;
      }
      const leader = holders.find((n) => n.mr?.shardInfo(shard)?.role === "leader");
      const info = leader?.mr?.shardInfo(shard);
      if (leader === undefined || info === null || info === undefined) return true;
      if (nextReplicaChange(this.#meta, shard, leader.replica, info, () => true) !== null)
        return true;
    }
    return false;
  }

  /** Each live node's pass over the groups it leads: the replica changes wipes call for. */
  #replaceReplicas(): void {
    for (const node of this.#nodes) {
      const mr = node.mr;
      if (mr === null) continue;
      let changing = this.#changing.get(node.id);
      if (changing === undefined) this.#changing.set(node.id, (changing = new Set()));
      replaceReplicas(mr, this.#meta, changing, () => undefined);
    }
  }

  readonly #changing = new Map<string, Set<number>>();

  #crash(node: SimNode, restart: boolean): void {
    if (node.proc === null || !node.proc.alive) return;
    if (node.mr !== null) this.#logShards(`crashing ${node.proc.name}`, node.mr);
    this.#stats.crashes++;
    // A kill -9 keeps everything the process wrote (the page cache survives it); a power cut
    // keeps only what was synced, and with torn writes a prefix of the last unsynced write.
    const processOnly = this.#rng.int(2) === 0;
    const torn = this.#profile.tornWrites ? this.#rng.int(64) : 0;
    this.#log(
      processOnly
        ? `kill -9 ${node.proc.name}`
        : `power cut ${node.proc.name} (torn ${torn} bytes)`,
    );
    node.proc.alive = false;
    node.proc = null;
    node.mr = null;
    node.upkeep = null;
    node.disk.crash(processOnly ? { processOnly } : { tornWriteBytes: torn });
    this.#detect(node.id);
    if (restart) {
      this.#world.after(20 + this.#rng.int(300), this.#clients, () => {
        if (node.proc !== null) return;
        this.#stats.restarts++;
        this.#start(node);
      });
    }
  }

  // ── moves (seeds with four or five nodes: moves.ts) ───────────────────────────────────────

  /**
   * Commits `cmd` to the cluster's meta state, as the meta group would, and has each node
   * apply it a little later, if it can reach the meta group's leader then (#feedMeta). Returns
   * what it did.
   */
  #commitMeta(cmd: MetaCommand): MetaOutcome {
    const { state, outcome } = this.#meta.apply(cmd);
    if (state === this.#meta) return outcome;
    this.#meta = state;
    const version = ++this.#metaVersion;
    switch (outcome.kind) {
      case "shard-moved":
        this.#stats.moves++;
        break;
      case "shard-settled":
        this.#stats.settles++;
        this.#strikeSettled(outcome.shard);
        break;
      case "state-changed":
        this.#stats.stateChanges++;
        break;
      default:
        break;
    }
    this.#log(`meta ${cmd.op}: ${describeOutcome(outcome)}`);
    const lag = this.#moves?.applyLagMs ?? 0;
    for (const node of this.#nodes) {
      if (node.metaVersion < version) node.behindSince ??= this.#world.now;
      this.#world.after(this.#moveRng.int(lag + 1), this.#network, () =>
        this.#feedMeta(node, version, state),
      );
    }
    return outcome;
  }

  /**
   * Seeds with meta cuts, half the time: the group of a move just settled loses its leader a
   * little later (a crash, restarted), so that another of its voters leads it while the nodes'
   * meta states may differ on the move. From the meta states' own stream.
   */
  #strikeSettled(shard: number): void {
    const r = this.#metaRng;
    if (!this.#chaos || !Number.isFinite(this.#metaCutEveryMs) || r.int(2) !== 0) return;
    this.#world.after(1 + r.int(50), this.#clients, () => {
      const leader = this.#nodes.find((n) => n.mr?.shardInfo(shard)?.role === "leader");
      if (!this.#chaos || leader === undefined) return;
      this.#stats.moveStrikes++;
      this.#log(`strike shard ${shard}'s settled move: crash its leader ${leader.id}`);
      this.#crash(leader, true);
    });
  }

  /**
   * The meta group's log reaches `node` up to `version` (the cluster's `state` then): applied
   * if its process runs and it can reach the meta group's leader now (its replica of shard 0
   * hears the leader's appends), else it stays behind until a later feed or sync.
   */
  #feedMeta(node: SimNode, version: number, state: MetaState): void {
    if (node.metaVersion >= version || !this.#reachesMeta(node)) return;
    this.#applyMeta(node, version, state);
  }

  /** `node` applies the meta state up to `version` (never going back). */
  #applyMeta(node: SimNode, version: number, state: MetaState): void {
    if (node.metaVersion >= version) return;
    node.meta = state;
    node.metaVersion = version;
    if (version === this.#metaVersion && node.behindSince !== null) {
      const behind = this.#world.now - node.behindSince;
      if (behind > this.#stats.metaBehindMs) this.#stats.metaBehindMs = behind;
      node.behindSince = null;
    }
    // A shard placed here now may have messages waiting (MultiRaft.receive).
    node.mr?.replicasChanged();
  }

  /**
   * The node leading the meta group (shard 0's group here): the running replica that leads it
   * in the highest term (a deposed leader cut off may still believe it leads), or none.
   */
  #metaLeader(): SimNode | undefined {
    let best: SimNode | undefined;
    let term = -1;
    for (const n of this.#nodes) {
      const info = n.mr?.shardInfo(0);
      if (info?.role === "leader" && info.term > term) {
        best = n;
        term = info.term;
      }
    }
    return best;
  }

  /**
   * Whether `node`'s process runs and messages flow both ways between it and the meta group's
   * leader's node: what a node needs to learn new meta commands and to sync.
   */
  #reachesMeta(node: SimNode): boolean {
    if (node.mr === null || node.proc === null) return false;
    const leader = this.#metaLeader();
    if (leader === undefined) return false;
    return (
      leader === node || (!this.#isCut(node.id, leader.id) && !this.#isCut(leader.id, node.id))
    );
  }

  /**
   * Each running node whose meta state is behind and that reaches the meta group's leader now
   * is fed the cluster's state a little later (the leader's next appends): what it missed while
   * it was cut off or down. Run by every upkeep pass.
   */
  #catchUpMeta(): void {
    const lag = this.#moves?.applyLagMs ?? 0;
    const version = this.#metaVersion;
    const state = this.#meta;
    for (const node of this.#nodes) {
      if (node.behindSince !== null && node.proc !== null && node.behindSince < this.#world.now) {
        const behind = this.#world.now - node.behindSince;
        if (behind > this.#stats.metaBehindMs) this.#stats.metaBehindMs = behind;
      }
      if (node.metaVersion >= version || !this.#reachesMeta(node)) continue;
      this.#world.after(this.#metaRng.int(lag + 1), this.#network, () =>
        this.#feedMeta(node, version, state),
      );
    }
  }

  /**
   * MultiRaft.syncMeta as `node`'s process would run it, simulated: a ReadIndex of shard 0 at
   * the meta group's leader, which confirms its lead with a round to its voters, after which the
   * node has applied at least every meta command committed when the request reached it. Fails
   * when the node cannot reach the leader (asked, or answering), as the peer call would: at
   * once when there is no leader or the link is cut when asked, or after a timeout when the
   * answer is lost. Never settles once the process stopped (its callbacks die with it).
   */
  #syncMeta(node: SimNode, proc: Process): Promise<void> {
    const r = this.#metaRng;
    const delay = (): number => 1 + r.int(this.#profile.maxDelayMs);
    return new Promise((resolve, reject) => {
      const fail = (why: string, after: number): void => {
        this.#world.after(after, proc, () => {
          this.#stats.metaSyncsFailed++;
          reject(new Error(`meta sync failed: ${why}`));
        });
      };
      if (!this.#reachesMeta(node)) {
        fail("the meta group's leader is unreachable", delay());
        return;
      }
      this.#world.after(delay(), proc, () => {
        if (!this.#reachesMeta(node)) {
          fail("the request was lost", SYNC_TIMEOUT_MS - r.int(SYNC_TIMEOUT_MS / 2));
          return;
        }
        const version = this.#metaVersion;
        const state = this.#meta;
        // The leader's round to confirm it leads, then the answer back.
        this.#world.after(delay() + delay(), proc, () => {
          if (!this.#reachesMeta(node)) {
            fail("the answer was lost", SYNC_TIMEOUT_MS - r.int(SYNC_TIMEOUT_MS / 2));
            return;
          }
          this.#stats.metaSyncs++;
          this.#applyMeta(node, version, state);
          resolve();
        });
      });
    });
  }

  /** Whether the link `from`→`to` is cut: by the current partition, or a cut from the meta leader. */
  #isCut(from: string, to: string): boolean {
    const link = `${from}>${to}`;
    return this.#cut.has(link) || this.#linkCuts.has(link);
  }

  /**
   * A meta command proposed by `node`'s process: it commits once it lands (after a simulated
   * delay), and the proposer hears of it; a proposer that died meanwhile hears nothing, and
   * its proposal committed or not (half the time each). A proposer that cannot reach the meta
   * group's leader then fails: with no leader nothing commits; cut off, its request may have
   * gone through before the cut (half the time).
   */
  #proposeMeta(node: SimNode, proc: Process, cmd: MetaCommand): Promise<void> {
    const m = this.#moves as MoveProfile;
    return new Promise((resolve, reject) => {
      this.#world.after(1 + this.#moveRng.int(m.commitMs), this.#network, () => {
        if (!proc.alive) {
          if (this.#moveRng.int(2) === 0) this.#commitMeta(cmd);
          reject(new Error("the proposer stopped"));
          return;
        }
        if (!this.#reachesMeta(node)) {
          if (this.#metaLeader() !== undefined && this.#metaRng.int(2) === 0) this.#commitMeta(cmd);
          reject(new Error("the meta group's leader is unreachable"));
          return;
        }
        const outcome = this.#commitMeta(cmd);
        if (outcome.kind === "rejected") reject(new Error(outcome.reason));
        else resolve();
      });
    });
  }

  /**
   * A node process's upkeep: its allocator loop (acting while it leads the meta group), its
   * replica GC, and the check that its groups' leaders act on a meta state synced since they
   * were elected, as src/node/node.ts builds them, on the simulated meta sync (#syncMeta).
   */
  #upkeepFor(node: SimNode, proc: Process, mr: MultiRaft, m: MoveProfile): Upkeep {
    const allocator = new AllocatorLoop({
      nodeId: node.id,
      deadAfterMs: m.deadAfterMs,
      maxMoves: m.maxMoves,
      // Unpaced (a move a millisecond): the seeds' moves as before the pace existed; the pace
      // has its own tests (test/node/allocator-loop.test.ts).
      movesPerMinute: 60_000,
      tolerance: m.tolerance,
      meta: () => node.meta,
      // The meta group is shard 0's group here.
      leadsMeta: () => node.mr?.leads(0) === true,
      // Gossip: the nodes whose process runs and whose messages reach this one (a link cut
      // between two nodes alone leaves both alive: SWIM probes through the others).
      alive: () =>
        new Set(
          this.#nodes
            .filter((n) => n.mr !== null && (n === node || !this.#cut.has(`${n.id}>${node.id}`)))
            .map((n) => n.id),
        ),
      metaCaughtUp: (id) => node.mr?.isCaughtUp(0, node.meta.replicaOf(id)) === true,
      propose: (cmd) => this.#proposeMeta(node, proc, cmd),
      log: silentLogger,
    });
    const gc = new ReplicaGc({
      store: mr,
      nodeId: node.id,
      meta: () => node.meta,
      syncMeta: () => this.#syncMeta(node, proc),
      removed: () => this.#stats.replicasRemoved++,
      log: silentLogger,
    });
    // Its first pass at some point of its first period: each node's ticks have their own phase.
    const gcAt = this.#world.now + this.#metaRng.int(this.#gcEveryMs);
    if (this.#options.bugs?.staleMetaLeader === true) {
      return { changing: new Set(), allocator, gc, gcAt, metaFresh: () => true };
    }
    const check = new LeaderMetaCheck({
      sync: () => this.#syncMeta(node, proc),
      // The groups that waited for it take their steps now, as node.ts's upkeepSoon.
      onSynced: () =>
        this.#world.after(0, proc, () => {
          if (node.upkeep !== null && node.proc === proc) this.#replicaSteps(node, node.upkeep);
        }),
      onError: () => undefined,
      now: () => this.#world.now,
    });
    return {
      changing: new Set(),
      allocator,
      gc,
      gcAt,
      metaFresh: (shard, term) => check.fresh(shard, term),
    };
  }

  /**
   * One upkeep pass of every running node, as src/node/node.ts runs it: each group's leader
   * takes its next replica step (settling moves through the meta group), the allocator runs
   * where the meta group is led, and the replica GC deletes what moved off the node. First,
   * what every leader sees of its members' progress feeds the ledger of caught-up replicas, and
   * the nodes whose meta state is behind catch up if they reach the meta group's leader.
   */
  #upkeep(): void {
    // Election safety across every replica of a shard, the moved-off ones too: one leader a
    // term, or the shard has two groups.
    const leaders = new Map<string, string>();
    for (const node of this.#nodes) {
      const mr = node.mr;
      if (mr === null) continue;
      for (const id of mr.shardIds()) {
        const info = mr.shardInfo(id);
        if (info === null) continue;
        if (info.refilling) this.#ledger.lost(id, node.replica);
        if (info.role !== "leader") continue;
        this.#ledger.note(id, info, (r) => mr.isCaughtUp(id, r));
        const other = leaders.get(`${id}/${info.term}`);
        if (other !== undefined) {
          this.#violate({
            kind: "two-groups",
            message: `shard ${id} has two leaders in term ${info.term}: ${other} and ${node.replica}`,
          });
        }
        leaders.set(`${id}/${info.term}`, node.replica);
      }
    }
    this.#catchUpMeta();
    for (const node of this.#nodes) {
      const { mr, proc, upkeep } = node;
      if (mr === null || proc === null || upkeep === null) continue;
      this.#replicaSteps(node, upkeep);
      upkeep.allocator.pass(this.#world.now);
      this.#spreadLeaders(node, mr);
      if (this.#world.now >= upkeep.gcAt) {
        upkeep.gcAt = this.#world.now + this.#gcEveryMs;
        void upkeep.gc.pass();
      }
    }
  }

  /**
   * `node` hands each group it leads to the shard's preferred leader (the first of its nodes,
   * MetaState.leaderWanted) as its own meta state has it, when that node is alive and holds a
   * voter: the rule of spreadLeaders (src/node/cluster.ts, on a node's upkeep tick), which
   * takes a ClusterState. A move that changes a shard's first node moves its leadership too.
   */
  #spreadLeaders(node: SimNode, mr: MultiRaft): void {
    const meta = node.meta;
    for (const id of mr.shardIds()) {
      if (!mr.leads(id)) continue;
      const first = meta.leaderWanted(id);
      if (first === undefined || first === node.id) continue;
      const target = this.#nodes.find((n) => n.id === first);
      const info = mr.shardInfo(id);
      // Alive by gossip: running, its messages reaching this node.
      const alive =
        target !== undefined && target.mr !== null && !this.#cut.has(`${first}>${node.id}`);
      if (info === null || !alive || !info.voters.includes(meta.replicaOf(first))) continue;
      mr.transferLeader(id, meta.replicaOf(first)).catch(() => undefined);
    }
  }

  /** `node`'s groups' leaders each take their next replica step (replaceReplicas). */
  #replicaSteps(node: SimNode, upkeep: Upkeep): void {
    const { mr, proc } = node;
    if (mr === null || proc === null) return;
    for (const id of mr.shardIds()) {
      const info = mr.shardInfo(id);
      if (info?.role !== "leader") continue;
      // What the leader sees now: a pass between upkeeps (after a sync) may promote a learner
      // caught up since the last.
      this.#ledger.note(id, info, (r) => mr.isCaughtUp(id, r));
      if (upkeep.changing.has(id)) continue;
      // (Asked again by replaceReplicas below, with the same answer: a sync it starts ends
      // later.)
      if (!upkeep.metaFresh(id, info.term)) continue;
      const step = nextReplicaChange(node.meta, id, mr.replicaId, info, (r) =>
        mr.isCaughtUp(id, r),
      );
      if (step?.type === "transfer") {
        this.#stats.leaderHandoffs++;
        this.#log(`${node.id} hands shard ${id} over to ${step.to}: its node leaves the shard`);
      } else if (step !== null) {
        this.#log(`${mr.replicaId} (t${info.term}) shard ${id}: ${JSON.stringify(step)}`);
      }
    }
    const failed = (shard: number, err: unknown): void =>
      this.#log(`${node.id}: replica step of shard ${shard} failed: ${describe(err)}`);
    replaceReplicas(mr, node.meta, upkeep.changing, failed, {
      settle: (shard, nodes) =>
        this.#proposeMeta(node, proc, { op: "settle-shard", shard, nodes: [...nodes] }),
      metaFresh: upkeep.metaFresh,
    });
  }

  /**
   * `node`'s replica GC deleted its replica of `shard`: the shard's group must not count it as
   * a voter, now (the last configuration a replica applied) or later (#noteConf). A voter
   * deleted leaves its group one failure closer to losing its quorum, or committed entries.
   */
  #replicaDeleted(node: SimNode, replica: string, shard: number): void {
    this.#log(`${replica}'s replica GC deleted its replica of shard ${shard}`);
    if (this.#lost?.node === node && this.#lost.shard === shard) this.#lost = null;
    let set = this.#deleted.get(shard);
    if (set === undefined) this.#deleted.set(shard, (set = new Set()));
    set.add(replica);
    const conf = this.#conf.get(shard);
    if (conf !== undefined && conf.voters.includes(replica)) {
      this.#violate({
        kind: "deleted-voter",
        message: `${node.id}'s replica GC deleted its replica ${replica} of shard ${shard}, a voter of its group (voters ${conf.voters.join(",")}, applied at ${conf.applied} by ${conf.by})`,
      });
    }
  }

  /**
   * A replica of `shard` on `node` applied a configuration (a conf change, or a snapshot's): the
   * group's newest committed one when it applied past the newest known, whose voters must not
   * include a replica a GC deleted and that was not created again since.
   */
  #noteConf(node: SimNode, shard: number, info: ShardInfo): void {
    const last = this.#conf.get(shard);
    if (last !== undefined && info.applied <= last.applied) return;
    this.#conf.set(shard, { applied: info.applied, voters: info.voters, by: node.replica });
    const deleted = this.#deleted.get(shard);
    const voter = info.voters.find((v) => deleted?.has(v) === true);
    if (voter === undefined) return;
    this.#violate({
      kind: "deleted-voter",
      message: `${node.replica} applied shard ${shard}'s voters ${info.voters.join(",")} at ${info.applied}, among them ${voter}, whose replica its node's GC deleted`,
    });
  }

  /**
   * The configuration a replica has once it applied its log up to an index is the same on
   * every replica of the group (committed entries never differ): two replicas with other
   * voters at one applied index show a committed log that diverged (Raft's safety broken).
   */
  #checkSameConf(node: SimNode, shard: number, info: ShardInfo): void {
    let seen = this.#confAt.get(shard);
    if (seen === undefined) this.#confAt.set(shard, (seen = new Map()));
    const voters = [...info.voters].sort().join(",");
    const other = seen.get(info.applied);
    if (other === undefined) {
      seen.set(info.applied, { voters, by: node.replica });
      return;
    }
    if (other.voters === voters) return;
    this.#violate({
      kind: "diverged",
      message: `shard ${shard}'s replicas applied other configurations at index ${info.applied}: voters ${other.voters} (${other.by}) and ${voters} (${node.replica})`,
    });
  }

  /**
   * A configuration a node applied (the observer names nodes; the group's configuration, as
   * its Raft core has it, names replicas): compared with the other replicas' at the same index
   * (#checkSameConf); with moves, noted as the group's newest (#noteConf), and checked for a
   * quorum of caught-up voters when the node leads the group (a replica replaying its log at a
   * restart applies old ones).
   *
   * The observer is called as the entries are applied, before RawNode.advance() hands their
   * conf changes to the Raft core, whose configuration shardInfo reports: the voters are read
   * once the apply is done (the rest of it runs synchronously), the role and term now (a leader
   * that applied its own removal is a follower then). Read at the call, the check counted the
   * configuration before the change (seed 62479 on four nodes: a replica removed from shard 3,
   * not knowing it, led the next term and applied its removal; the check counted the voters
   * before it, the removed replica among them).
   *
   * The driver's configuration (`voters`, its nodes) must be the core's once advance() took the
   * changes: a replica whose engine was ahead of its log, re-sent the entries it had applied,
   * replayed their conf changes onto its later configuration in the driver alone (seed 2200394
   * on four nodes, with RaftConfig.stateApplied kept).
   */
  #checkConf(node: SimNode, proc: Process, shard: number, voters: readonly string[]): void {
    if (!proc.alive) return;
    const mr = node.mr;
    const led = mr?.shardInfo(shard);
    if (mr === null || led === null || led === undefined) return;
    queueMicrotask(() => {
      const info = mr.shardInfo(shard);
      if (!proc.alive || node.mr !== mr || info === null) return;
      const driver = [...voters].sort().join(",");
      const core = info.voters.map(nodeOfReplica).sort().join(",");
      if (driver !== core) {
        this.#violate({
          kind: "diverged",
          message: `${node.replica}: shard ${shard}'s driver applied voters ${driver} and its Raft core ${core}`,
        });
      }
      this.#checkSameConf(node, shard, info);
      if (this.#moves === null) return;
      this.#noteConf(node, shard, info);
      if (led.role !== "leader") return;
      this.#stats.confChecks++;
      const problem = this.#ledger.check(shard, led.term, info.voters);
      if (problem !== null) this.#violate({ kind: "quorum", message: `${node.id}: ${problem}` });
    });
  }

  /**
   * Whether the simulation may take a copy of `node`'s data now (wipe its disk, remove a shard
   * directory): always without moves; with them, only an active member not chosen to leave,
   * while no move is under way and no member stopped for good holds a replica. Two copies of
   * a shard lost at once may lose acknowledged writes, as in any three-replica system.
   */
  #mayLoseCopy(node: SimNode): boolean {
    if (this.#moves === null) return true;
    const meta = this.#meta;
    if (meta.stateOf(node.id) !== "active" || this.#leaving.has(node.id)) return false;
    if ([...meta.shards.keys()].some((s) => meta.isMoving(s))) return false;
    return !this.#goneHoldsReplica() && this.#copiesWhole();
  }

  /**
   * Whether a member stopped for good still holds a replica: one of a shard's nodes in the meta
   * state, or a member of the group's configuration as its leader has it.
   */
  #goneHoldsReplica(): boolean {
    const counts = this.#meta.replicaCounts();
    const gone = this.#nodes.filter((n) => n.gone);
    if (gone.some((n) => (counts.get(n.id) ?? 0) > 0)) return true;
    for (const shard of this.#meta.shards.keys()) {
      const leader = this.#nodes.find((n) => n.mr?.shardInfo(shard)?.role === "leader");
      const info = leader?.mr?.shardInfo(shard);
      if (info === null || info === undefined) continue;
      const members = [...info.voters, ...info.learners];
      if (gone.some((n) => members.includes(n.replica))) return true;
    }
    return false;
  }

  /**
   * Whether every group that runs has as many voters as the replication factor on nodes still
   * in service (none retired by a wipe, none on a member stopped for good), a leader, and no
   * replica being refilled, and every group not running anywhere yet as many such initial
   * voters: a copy more may be lost then (seeds with moves). A wiped node's shards may have
   * moved off it meanwhile: what counts is the groups' voters, not the meta state (seed 2138 on
   * five nodes killed a member while a group ran on two voters and a learner, and lost its
   * quorum for good). A group no node has opened yet starts from its recorded voters, retired
   * ones too (seed 45896 on five nodes killed for good a member such a group was recorded on
   * with a wiped node's old replica: it never elected a leader).
   */
  #copiesWhole(): boolean {
    const meta = this.#meta;
    const inService = (replica: string): boolean =>
      !meta.isRetired(replica) &&
      !this.#nodes.some((n) => n.gone && n.id === nodeOfReplica(replica));
    for (const [shard, recorded] of meta.shards) {
      const holders = this.#nodes.filter((n) => (n.mr?.shardInfo(shard) ?? null) !== null);
      if (holders.length === 0) {
        if (recorded.filter(inService).length < meta.replicationFactor) return false;
        continue;
      }
      if (holders.some((n) => n.mr?.shardInfo(shard)?.refilling === true)) return false;
      const leader = holders.find((n) => n.mr?.shardInfo(shard)?.role === "leader");
      const info = leader?.mr?.shardInfo(shard);
      if (info === null || info === undefined) return false;
      if (info.voters.filter(inService).length < meta.replicationFactor) return false;
      // Every voter's own view too: a configuration takes effect where it is applied, so a
      // voter that has not learnt the last change committed still counts the replica it
      // replaced, and campaigns on the old voters (seed 182497 on four nodes: the leader had
      // promoted a wiped node's replacement and died for good before any round told the third
      // voter the promotion was committed; it pre-campaigned for ever on two voters, one
      // gone). Raft (as in etcd) leaves such a group without a quorum.
      for (const holder of holders) {
        const own = holder.mr?.shardInfo(shard);
        if (own === null || own === undefined || !info.voters.includes(holder.replica)) continue;
        if (own.voters.filter(inService).length < meta.replicationFactor) return false;
      }
    }
    return true;
  }

  #scheduleMoves(m: MoveProfile, chaosMs: number): void {
    const r = this.#moveRng;
    for (const [i, at] of m.joinAt.entries()) {
      const node = this.#nodes[FOUNDERS + i];
      if (node !== undefined) this.#world.after(at, this.#clients, () => this.#join(node));
    }
    for (const leave of m.leaves) {
      this.#world.after(leave.at, this.#clients, () => this.#leave(leave.kind));
    }
    if (Number.isFinite(m.strikeEveryMs)) {
      const next = (): void => {
        const delay = 1 + r.int(2 * m.strikeEveryMs);
        if (this.#world.now + delay >= chaosMs) return;
        this.#world.after(delay, this.#clients, () => {
          if (this.#chaos) this.#strikeMove();
          next();
        });
      };
      next();
    }
    // From the meta states' own stream: the moves' schedule stays what it was.
    if (Number.isFinite(this.#metaCutEveryMs)) {
      const next = (): void => {
        const delay = 1 + this.#metaRng.int(2 * this.#metaCutEveryMs);
        if (this.#world.now + delay >= chaosMs) return;
        this.#world.after(delay, this.#clients, () => {
          if (this.#chaos) this.#cutFromMeta();
          next();
        });
      };
      next();
    }
  }

  /**
   * A running node other than the meta group's leader loses its links to the leader's node
   * alone (both ways, or its own messages only), for up to #metaCutMs: its meta state stays
   * where it is while its groups' peers still reach it, and it may lead their groups
   * meanwhile, on a placement older than the moves since. The failure detector does not
   * suspect it (SWIM probes it through the others).
   */
  #cutFromMeta(): void {
    const r = this.#metaRng;
    const leader = this.#metaLeader();
    if (leader === undefined) return;
    const others = this.#nodes.filter((n) => n !== leader && n.mr !== null);
    const node = others[r.int(Math.max(1, others.length))];
    if (node === undefined) return;
    const links = [`${node.id}>${leader.id}`];
    if (r.int(3) !== 0) links.push(`${leader.id}>${node.id}`);
    const ms = 1 + r.int(this.#metaCutMs);
    this.#stats.metaCuts++;
    this.#log(`cut ${node.id} from the meta leader ${leader.id} for ${ms} ms (${links.join(" ")})`);
    for (const l of links) this.#linkCuts.set(l, (this.#linkCuts.get(l) ?? 0) + 1);
    this.#world.after(ms, this.#network, () => {
      for (const l of links) {
        const n = this.#linkCuts.get(l);
        if (n === undefined) continue;
        if (n > 1) this.#linkCuts.set(l, n - 1);
        else this.#linkCuts.delete(l);
      }
    });
  }

  /** `node` asks to be admitted (a node started with the cluster's seeds); retried until it is. */
  #join(node: SimNode): void {
    if (this.#meta.members.has(node.id)) return;
    const again = (): void => {
      this.#world.after(50 + this.#moveRng.int(50), this.#clients, () => this.#join(node));
    };
    const proc = node.proc;
    if (proc === null || node.mr === null) {
      again();
      return;
    }
    const member: MetaMember = {
      id: node.id,
      rpcAddr: `${node.id}:7447`,
      httpAddr: `${node.id}:8080`,
      incarnation: node.diskIncarnation,
      build: BUILD_VERSION,
    };
    this.#proposeMeta(node, proc, { op: "join", member }).then(
      () => {
        this.#stats.joins++;
        this.#log(`${node.id} joined`);
      },
      () => again(),
    );
  }

  /**
   * An active member leaves, once the others can take its replicas (as many active members not
   * leaving as the replication factor) and no copy of any shard is being rebuilt: decommissioned
   * (stopped once it holds nothing), or stopped for good (the allocator declares it dead and
   * re-replicates its shards; the operator removes it then, half the time).
   */
  #leave(kind: LeaveKind): void {
    // A leave the chaos could not start in time is dropped: after it, the cluster settles.
    if (!this.#chaos) return;
    const meta = this.#meta;
    const staying = meta.activeMembers().filter((id) => !this.#leaving.has(id));
    const candidates = this.#nodes.filter(
      (n) => staying.includes(n.id) && n.mr !== null && n.proc !== null,
    );
    const node = candidates[this.#moveRng.int(Math.max(1, candidates.length))];
    // A decommission loses no copy (the node serves until its replicas moved off); a member
    // stopped for good does, so not while another copy of some shard is being rebuilt.
    const ready =
      staying.length > meta.replicationFactor &&
      node !== undefined &&
      (kind === "decommission" ||
        (!this.#refillPending() && this.#copiesWhole() && !this.#goneHoldsReplica()));
    if (!ready || node === undefined) {
      this.#world.after(100, this.#clients, () => this.#leave(kind));
      return;
    }
    this.#leaving.add(node.id);
    this.#stats.leaves++;
    this.#log(`${kind} ${node.id}`);
    if (kind === "decommission") {
      const admin = (): void => {
        // `cairn node decommission`, sent to any running member.
        const via = this.#nodes.find((n) => n.proc !== null && n.mr !== null);
        if (via?.proc === undefined || via.proc === null) {
          this.#world.after(50, this.#clients, admin);
          return;
        }
        const cmd: MetaCommand = { op: "set-state", id: node.id, state: "decommissioning" };
        this.#proposeMeta(via, via.proc, cmd).catch(() => {
          if (this.#meta.stateOf(node.id) === "active") this.#world.after(50, this.#clients, admin);
        });
      };
      admin();
    } else {
      this.#crash(node, false);
      node.gone = true;
      this.#detectGone(node.id);
    }
    // The operator's part afterwards: stop a decommissioned node; remove a dead one.
    const watch = (): void => {
      const state = this.#meta.stateOf(node.id);
      if (state === "decommissioned" && !node.gone) {
        this.#log(`stop ${node.id} for good (decommissioned)`);
        this.#crash(node, false);
        node.gone = true;
        this.#detectGone(node.id);
        return;
      }
      if (state === "dead" && (this.#meta.replicaCounts().get(node.id) ?? 0) === 0) {
        if (this.#moveRng.int(2) === 0) {
          const via = this.#nodes.find((n) => n.proc !== null && n.mr !== null);
          if (via?.proc !== undefined && via.proc !== null) {
            const cmd: MetaCommand = { op: "set-state", id: node.id, state: "removed" };
            this.#proposeMeta(via, via.proc, cmd).catch(() => undefined);
          }
        }
        return;
      }
      if (state === "removed" || state === "decommissioned") return;
      this.#world.after(100, this.#clients, watch);
    };
    this.#world.after(100, this.#clients, watch);
  }

  /** A move under way loses a process: its source, destination, group leader or meta leader. */
  #strikeMove(): void {
    const r = this.#moveRng;
    const meta = this.#meta;
    const moving = [...meta.shards.keys()].filter((s) => meta.isMoving(s));
    const shard = moving[r.int(Math.max(1, moving.length))];
    if (shard === undefined) return;
    const leader = this.#nodes.find((n) => n.mr?.shardInfo(shard)?.role === "leader");
    const info = leader?.mr?.shardInfo(shard);
    const nodes = meta.nodesOf(shard);
    const members = info === null || info === undefined ? [] : [...info.voters, ...info.learners];
    const roles: [string, SimNode | undefined][] = [
      ["leader", leader],
      ["meta leader", this.#nodes.find((n) => n.mr?.leads(0) === true)],
      ["source", this.#nodes.find((n) => !nodes.includes(n.id) && members.includes(n.replica))],
      [
        "destination",
        this.#nodes.find((n) => nodes.includes(n.id) && !(info?.voters ?? []).includes(n.replica)),
      ],
    ];
    const [role, victim] = roles[r.int(roles.length)] as [string, SimNode | undefined];
    if (victim === undefined || victim.proc === null) return;
    this.#stats.moveStrikes++;
    this.#log(`strike shard ${shard}'s move (to ${nodes}): crash its ${role} ${victim.id}`);
    this.#crash(victim, true);
  }

  /**
   * After the chaos (seeds with moves): within SETTLE_MS every shard is placed as its meta
   * record says, on active members, with no move pending (moves.ts, placementProblems).
   */
  async #checkPlacement(): Promise<void> {
    if (this.#moves === null) return;
    const world = this.#world;
    const deadline = world.now + SETTLE_MS;
    const leaderOf = (shard: number): LeaderView | null => {
      let best: LeaderView | null = null;
      for (const n of this.#nodes) {
        const info = n.mr?.shardInfo(shard);
        if (info?.role === "leader" && (best === null || info.term > best.term)) best = info;
      }
      return best;
    };
    const opened = (shard: number): boolean =>
      this.#nodes.some((n) => (n.mr?.shardInfo(shard) ?? null) !== null);
    // Settled, a shard has one leader: a replica that leads apart from the group (a group of
    // its own, founded again) would stay one.
    const problemsNow = (): string[] => {
      const out = placementProblems(this.#meta, leaderOf, opened);
      for (const shard of this.#meta.shards.keys()) {
        const claims = this.#nodes.filter((n) => n.mr?.shardInfo(shard)?.role === "leader");
        if (claims.length > 1) {
          const who = claims.map((n) => `${n.replica} (t${n.mr?.shardInfo(shard)?.term})`);
          out.push(`shard ${shard}: ${claims.length} replicas lead: ${who.join(", ")}`);
        }
      }
      return out;
    };
    let problems = problemsNow();
    while (problems.length > 0 && world.now < deadline) {
      await world.runUntil(world.now + 10 * TICK_MS);
      this.#throwIfViolated();
      problems = problemsNow();
    }
    if (problems.length === 0) return;
    // What each moving shard's leader would do next, for the report.
    const next = [...this.#meta.shards.keys()].flatMap((shard) => {
      const leader = this.#nodes.find((n) => n.mr?.shardInfo(shard)?.role === "leader");
      const info = leader?.mr?.shardInfo(shard);
      const mr = leader?.mr;
      if (leader === undefined || mr === null || mr === undefined) return [];
      if (info === null || info === undefined || !this.#meta.isMoving(shard)) return [];
      const step = nextReplicaChange(leader.meta, shard, mr.replicaId, info, (r) =>
        mr.isCaughtUp(shard, r),
      );
      return [`shard ${shard}'s leader ${leader.replica} (t${info.term}): ${JSON.stringify(step)}`];
    });
    throw new ViolationFound({
      kind: "placement",
      message: `${SETTLE_MS} ms after the final reads: ${problems.join("; ")}; next: ${next.join("; ")}`,
    });
  }

  // ── faults ─────────────────────────────────────────────────────────────────────────────────

  #scheduleFaults(chaosMs: number): void {
    const p = this.#profile;
    const every = (mean: number, fn: () => void): void => {
      if (!Number.isFinite(mean)) return;
      const next = (): void => {
        const delay = 1 + this.#rng.int(Math.max(2, Math.round(2 * mean)));
        if (this.#world.now + delay >= chaosMs) return;
        this.#world.after(delay, this.#clients, () => {
          if (this.#chaos) fn();
          next();
        });
      };
      next();
    };
    const anyNode = (): SimNode => this.#nodes[this.#rng.int(this.#nodes.length)] as SimNode;
    every(p.crashEveryMs, () => this.#crash(anyNode(), true));
    every(p.ioFaultEveryMs, () => {
      this.#stats.ioFaults++;
      const op = this.#rng.int(2) === 0 ? "write" : "fsyncDir";
      const where = this.#rng.int(2) === 0 ? `${DATA_DIR}/wal` : `${DATA_DIR}/shards`;
      this.#log(`inject ${op} EIO under ${where}`);
      anyNode().disk.failNext(op, where, "EIO");
    });
    every(p.snapshotEveryMs, () => {
      const mr = anyNode().mr;
      if (mr === null) return;
      const shard = this.#rng.int(TOTAL_SHARDS);
      this.#stats.snapshots++;
      this.#log(`snapshot shard ${shard}`);
      mr.snapshotShard(shard).catch(() => undefined);
    });
    if (this.#nodes.length > 1) {
      every(p.transferEveryMs, () => {
        // Ask a node to hand a shard's leadership to another; only a leader acts on it.
        const mr = anyNode().mr;
        const to = anyNode().id;
        if (mr === null) return;
        const shard = this.#rng.int(TOTAL_SHARDS);
        // With moves, only a node holding a replica is asked (the admin service refuses on
        // another: src/node/cluster.ts): asked elsewhere, MultiRaft.transferLeader opens the
        // shard, and a replica the node's GC deleted would come back empty under its old id.
        if (this.#moves !== null && mr.shardInfo(shard) === null) return;
        this.#stats.transfers++;
        this.#log(`transfer shard ${shard} to ${to}`);
        mr.transferLeader(shard, to).catch(() => undefined);
      });
      // Seeds with moves change their groups' members as nodes do, and only so (moves.ts).
      if (this.#moves === null) every(p.membershipEveryMs, () => this.#changeMembership());
      else this.#scheduleMoves(this.#moves, chaosMs);
      every(p.wipeEveryMs, () => this.#wipe(anyNode()));
      // From the losses' own stream: the seeds without them schedule what they did before.
      if (Number.isFinite(this.#loseShardEveryMs)) {
        const next = (): void => {
          const delay = 1 + this.#lossRng.int(2 * this.#loseShardEveryMs);
          if (this.#world.now + delay >= chaosMs) return;
          this.#world.after(delay, this.#clients, () => {
            if (this.#chaos) this.#loseShard();
            next();
          });
        };
        next();
      }
      // The leaders' replica replacement pass (every 2 s in a node; faster here), also after
      // the chaos, until the run ends.
      const replace = (): void => {
        if (this.#moves === null) this.#replaceReplicas();
        else this.#upkeep();
        this.#world.after(100, this.#network, replace);
      };
      this.#world.after(100, this.#network, replace);
      every(p.partitionEveryMs, () => {
        this.#stats.partitions++;
        const ids = this.#nodes.map((n) => n.id);
        const isolated = ids[this.#rng.int(ids.length)] as string;
        // Cut both directions, or one only (an asymmetric partition).
        const oneWay = this.#rng.int(3) === 0;
        this.#isolate(isolated, oneWay, 1 + this.#rng.int(p.partitionMs));
      });
    }
    every(p.quietEveryMs, () => {
      // Clients pause; groups fall asleep; a leading node is often struck meanwhile.
      const pause = 100 + this.#sleepRng.int(400);
      this.#quietUntil = this.#world.now + pause;
      this.#log(`clients pause for ${pause} ms`);
      this.#world.after(50 + this.#sleepRng.int(pause), this.#clients, () => this.#strike());
    });
  }

  /** Cuts `isolated` off from the others (one way: its messages only) for `ms`. */
  #isolate(isolated: string, oneWay: boolean, ms: number): void {
    for (const n of this.#nodes) {
      if (n.id === isolated) continue;
      this.#cut.add(`${isolated}>${n.id}`);
      if (!oneWay) this.#cut.add(`${n.id}>${isolated}`);
    }
    this.#log(`partition ${isolated}${oneWay ? " (outbound only)" : ""}`);
    this.#detect(isolated);
    this.#world.after(ms, this.#network, () => {
      this.#cut.clear();
      this.#log("heal");
    });
  }

  /**
   * While clients pause: a node that leads a sleeping group is crashed or cut off (or, now and
   * then, suspected while it is fine), so that only the failure detector, a restart or a
   * client's request can wake its followers.
   */
  #strike(): void {
    if (!this.#chaos || this.#nodes.length === 1) return;
    const sleepy = this.#nodes.filter((n) =>
      n.mr?.shardIds().some((id) => {
        const info = n.mr?.shardInfo(id);
        return info?.role === "leader" && info.quiesced;
      }),
    );
    const victim = sleepy[this.#sleepRng.int(Math.max(1, sleepy.length))];
    if (victim === undefined) return;
    this.#stats.quietStrikes++;
    const roll = this.#sleepRng.int(10);
    this.#log(`strike ${victim.id}, which leads sleeping groups`);
    if (roll < 5) this.#crash(victim, true);
    else if (roll < 8) this.#isolate(victim.id, false, 100 + this.#sleepRng.int(600));
    else this.#detect(victim.id);
  }

  /**
   * A member stopped for good: SWIM declares it failed on every other node, whatever the
   * profile's detector does for processes that come back (seed 7414 on five nodes: n3 led a
   * sleeping group no client touched, was killed for good, and its followers slept on, each
   * believing n3 led).
   */
  #detectGone(gone: string): void {
    const delay = 1 + this.#moveRng.int(Math.max(this.#profile.detectMs, 400));
    this.#world.after(delay, this.#network, () => {
      this.#stats.suspicions++;
      this.#log(`the others find ${gone} gone`);
      for (const n of this.#nodes) if (n.id !== gone) n.mr?.wakeGroupsLedBy(gone);
      this.#holdDown(gone);
    });
  }

  /**
   * Every other running node's failure detector holds `suspect` down (a leader's group may
   * sleep with its replica behind) until #seeBack finds it running and reachable again.
   */
  #holdDown(suspect: string): void {
    for (const n of this.#nodes) if (n.id !== suspect && n.proc !== null) n.down.add(suspect);
    this.#lookForBack(suspect);
  }

  /** #seeBack(`id`) about a detector delay from now. */
  #lookForBack(id: string): void {
    const delay = 1 + this.#sleepRng.int(Math.max(this.#profile.detectMs, 100));
    this.#world.after(delay, this.#network, () => this.#seeBack(id));
  }

  /**
   * `node` runs and no link from or to it is cut: each node holding it down sees it back, and
   * its groups that slept past `node`'s replica wake to catch it up (MultiRaft.wakeGroupsFor).
   * Else another look later, while it may come back (a node gone for good never does).
   */
  #seeBack(id: string): void {
    const node = this.#nodes.find((n) => n.id === id);
    if (node === undefined || node.gone) return;
    const cut = [...this.#cut].some((l) => l.startsWith(`${id}>`) || l.endsWith(`>${id}`));
    if (node.proc === null || cut) {
      this.#lookForBack(id);
      return;
    }
    for (const n of this.#nodes) {
      if (!n.down.delete(id)) continue;
      this.#stats.seenBack++;
      n.mr?.wakeGroupsFor(id);
    }
  }

  /**
   * The failure detector: the other nodes hear, some time later, that `suspect` is down (crashed
   * or cut off): it may be back by then, as a wrong suspicion of SWIM would be.
   */
  #detect(suspect: string): void {
    const p = this.#profile;
    if (p.detectMs === 0 || this.#nodes.length === 1) return;
    this.#world.after(1 + this.#sleepRng.int(p.detectMs), this.#network, () => {
      this.#stats.suspicions++;
      this.#log(`the others suspect ${suspect}`);
      for (const n of this.#nodes) if (n.id !== suspect) n.mr?.wakeGroupsLedBy(suspect);
      this.#holdDown(suspect);
    });
  }

  /**
   * One membership change of a random shard's group, proposed through its leader: add a node
   * that is not a member as a learner, promote a learner, or remove a voter (the leader too)
   * while at least three voters remain after it.
   */
  #changeMembership(): void {
    const shard = this.#rng.int(TOTAL_SHARDS);
    const leader = this.#nodes.find((n) => n.mr?.shardInfo(shard)?.role === "leader");
    const info = leader?.mr?.shardInfo(shard);
    const mr = leader?.mr ?? null;
    if (mr === null || info === undefined || info === null) return;
    const ids = this.#nodes.map((n) => n.replica);
    const outsiders = ids.filter((id) => !info.voters.includes(id) && !info.learners.includes(id));
    let cc: ConfChange;
    // Never a retired replica (its node wiped since it was added, and the leader's step 1 not
    // yet taken): the product promotes current replicas only (src/node/replicas.ts), and a
    // retired one promoted counts in the quorum with nothing behind it.
    const learner = info.learners.find((l) => !this.#meta.isRetired(l));
    if (learner !== undefined && this.#rng.int(2) === 0) {
      cc = { type: "add-voter", node: nodeId(learner) };
    } else if (outsiders.length > 0 && info.learners.length === 0) {
      cc = {
        type: "add-learner",
        node: nodeId(outsiders[this.#rng.int(outsiders.length)] as string),
      };
    } else if (info.voters.length > 3) {
      cc = {
        type: "remove",
        node: nodeId(info.voters[this.#rng.int(info.voters.length)] as string),
      };
    } else if (learner !== undefined) {
      cc = { type: "add-voter", node: nodeId(learner) };
    } else {
      return;
    }
    this.#stats.membershipChanges++;
    this.#log(`shard ${shard}: ${cc.type} ${cc.node} (voters ${info.voters.join(",")})`);
    mr.changeMembership(shard, cc).then(
      () => this.#stats.membershipApplied++,
      () => undefined,
    );
  }

  /** The network: delays, loses, duplicates and (by varying delays) reorders message batches. */
  /**
   * A follower's read asks the leader's node for a read index (the peer service's ReadIndex
   * call), with its replica and term as the voucher.
   */
  #remoteReadIndex(sender: SimNode, leader: string, shard: number, term: number): Promise<number> {
    // The asking replica, now: a node wiped meanwhile rejoins as another.
    const voucher = { replica: sender.replica, term };
    return this.#peerCall(sender, leader, "read index request", (mr) =>
      // No deadline: the simulation runs on its own clock, and a deadline sets a real timer.
      mr.readIndexAsLeader(shard, voucher, Infinity),
    );
  }

  /** A leader's term checks (the peer service's ConfirmTerms call). */
  #confirmTerms(sender: SimNode, to: string, checks: readonly TermCheck[]): Promise<boolean[]> {
    return this.#peerCall(sender, to, "term confirmation", (mr) => mr.confirmTerms(checks));
  }

  /**
   * A peer's unary call from `sender` to node `to`: across the simulated network both ways,
   * lost with the link, served by whatever process runs on `to` when the request lands (a
   * synchronous answer leaves at once, an asynchronous one when it settles).
   */
  #peerCall<T>(
    sender: SimNode,
    to: string,
    what: string,
    serve: (mr: MultiRaft) => T | Promise<T>,
  ): Promise<T> {
    const p = this.#profile;
    const from = sender.id;
    const delay = (): number => 1 + this.#rng.int(p.maxDelayMs);
    return new Promise((resolve, reject) => {
      const lost = (): void => reject(new Error(`${what} lost`));
      if (this.#isCut(from, to) || this.#rng.float() < p.dropRate) {
        this.#world.after(delay(), this.#network, lost);
        return;
      }
      this.#world.after(delay(), this.#network, () => {
        const target = this.#nodes.find((n) => n.id === to)?.mr;
        if (target === null || target === undefined || this.#isCut(from, to)) {
          lost();
          return;
        }
        const answer = (value: T): void =>
          this.#world.after(delay(), this.#network, () => {
            if (this.#isCut(to, from)) lost();
            else resolve(value);
          });
        const result = serve(target);
        if (!(result instanceof Promise)) {
          answer(result);
          return;
        }
        result.then(answer, (err: unknown) =>
          this.#world.after(delay(), this.#network, () => reject(err)),
        );
      });
    });
  }

  #deliver(
    sender: SimNode,
    toReplica: string,
    messages: readonly ShardMessage[],
    sent: ((delivered: boolean) => void) | undefined,
  ): void {
    const p = this.#profile;
    const from = sender.id;
    // Routed to the replica's node, whichever replica runs there now (it drops what is not
    // addressed to it).
    const to = nodeOfReplica(toReplica);
    const mr = sender.mr;
    this.#stats.messages += messages.length;
    if (this.#isCut(from, to)) {
      // Like the gRPC transport with its stream to `to` down: the frame is dropped and the
      // driver hears of it (later, never from inside send()).
      this.#world.after(0, this.#network, () => {
        if (mr !== sender.mr || mr === null) return;
        sent?.(false);
        mr.reportUnreachable(to);
      });
      return;
    }
    if (sent !== undefined) {
      // The frame left the node; what the network then does to it the sender does not know.
      this.#world.after(0, this.#network, () => {
        if (mr === sender.mr) sent(true);
      });
    }
    const copies = this.#rng.float() < p.dropRate ? 0 : this.#rng.float() < p.duplicateRate ? 2 : 1;
    for (let i = 0; i < copies; i++) {
      this.#world.after(1 + this.#rng.int(p.maxDelayMs), this.#network, () => {
        if (this.#isCut(from, to)) return;
        this.#nodes.find((n) => n.id === to)?.mr?.receive(from, messages);
      });
    }
  }

  // ── clients ────────────────────────────────────────────────────────────────────────────────

  #issue(client: number): void {
    if (!this.#chaos) return;
    if (this.#world.now < this.#quietUntil) {
      this.#world.after(
        this.#quietUntil - this.#world.now + this.#sleepRng.int(10),
        this.#clients,
        () => this.#issue(client),
      );
      return;
    }
    const keys = this.#profile.keys;
    const key = keys[this.#rng.int(keys.length)] as string;
    // Mostly to the shard's leader, as a client routing by the cluster view does; sometimes to
    // any node (which answers NOT_LEADER, or serves as the leader it has become meanwhile).
    const shard = shardForKey(enc.encode(key), TOTAL_SHARDS);
    const node =
      (this.#rng.int(10) < 7
        ? this.#nodes.find((n) => n.mr?.shardInfo(shard)?.role === "leader")
        : undefined) ?? (this.#nodes[this.#rng.int(this.#nodes.length)] as SimNode);
    const mr = node.mr;
    const proc = node.proc;
    const next = (): void => {
      this.#world.after(1 + this.#rng.int(15), this.#clients, () => this.#issue(client));
    };
    if (mr === null || proc === null) {
      // Connection refused: nothing was sent. Try again later.
      next();
      return;
    }
    const roll = this.#rng.int(100);
    const seen = this.#seen.get(client) as Map<string, Version>;
    if (roll < 8) {
      this.#scan(client, mr, proc, next);
      return;
    }
    let input: RegisterInput;
    let call: () => Promise<ApplyOutcome | StoredItem | null>;
    const value = (): string => {
      const tag = `${client}.${++this.#valueSeq}`;
      return tag.padEnd(Math.max(tag.length, this.#profile.valueBytes), ".");
    };
    if (roll < 40) {
      const v = value();
      input = { type: "put", value: v };
      call = () => mr.put(enc.encode(key), enc.encode(v));
    } else if (roll < 55) {
      const v = value();
      const expected = this.#rng.int(4) === 0 ? null : (seen.get(key) ?? null);
      input = { type: "put-if", expected, value: v };
      call = () => mr.put(enc.encode(key), enc.encode(v), expected ?? ABSENT_VERSION);
    } else if (roll < 60) {
      input = { type: "delete" };
      call = () => mr.delete(enc.encode(key));
    } else if (roll < 65) {
      const expected = seen.get(key) ?? null;
      input = { type: "delete-if", expected };
      call = () => mr.delete(enc.encode(key), expected ?? ABSENT_VERSION);
    } else {
      input = { type: "get" };
      call = () => mr.get(enc.encode(key), true);
    }
    this.#invoke(client, key, input, call, proc, next);
  }

  #invoke(
    client: number,
    key: string,
    input: RegisterInput,
    call: () => Promise<ApplyOutcome | StoredItem | null>,
    server: Process,
    next: () => void,
  ): void {
    const invokeTime = this.#world.now;
    const isWrite = input.type !== "get";
    let settled = false;
    this.#stats.operations++;
    const finish = (output: RegisterOutput | null, notApplied = false): void => {
      if (settled) return;
      settled = true;
      // A process that died sends nothing more: what its code still computes after the crash
      // instant (in the simulation, its pending microtasks) never reaches the client.
      if (!server.alive) output = null;
      if (notApplied) {
        // The error proves the write never entered the log: it is no operation at all.
      } else if (output === null) {
        if (isWrite) {
          this.#stats.indeterminateWrites++;
          this.#history.push({ client, key, invokeTime, returnTime: null, input, output: null });
        }
      } else {
        if (isWrite) this.#stats.acknowledgedWrites++;
        else this.#stats.completedReads++;
        this.#history.push({ client, key, invokeTime, returnTime: this.#world.now, input, output });
        this.#remember(client, key, output);
      }
      next();
    };
    this.#world.after(OP_TIMEOUT_MS, this.#clients, () => finish(null));
    let promise: Promise<ApplyOutcome | StoredItem | null>;
    try {
      promise = call();
    } catch (err) {
      promise = Promise.reject(err);
    }
    promise.then(
      (result) => finish(toOutput(input, result)),
      // A write may or may not have happened unless the error proves otherwise; a failed read
      // tells nothing.
      (err: unknown) => finish(null, isNotApplied(err)),
    );
  }

  #scan(client: number, mr: MultiRaft, server: Process, next: () => void): void {
    const invokeTime = this.#world.now;
    let settled = false;
    this.#stats.operations++;
    const done = (answer: readonly StoredItem[] | null): void => {
      if (settled) return;
      settled = true;
      const items = server.alive ? answer : null;
      if (items !== null) {
        this.#stats.completedReads++;
        // A scan reads each shard at one instant within its interval: per key, it is a read.
        const found = new Map(items.map((i) => [dec.decode(i.key), i]));
        for (const key of this.#profile.keys) {
          const item = found.get(key);
          const output: RegisterOutput =
            item === undefined
              ? { type: "absent" }
              : { type: "found", value: dec.decode(item.value), version: item.version };
          this.#history.push({
            client,
            key,
            invokeTime,
            returnTime: this.#world.now,
            input: { type: "get" },
            output,
          });
        }
      }
      next();
    };
    this.#world.after(OP_TIMEOUT_MS, this.#clients, () => done(null));
    mr.scan({
      start: new Uint8Array(0),
      end: null,
      limit: 10_000,
      maxBytes: Infinity,
      linearizable: true,
    }).then(
      (r) => done(r.items),
      () => done(null),
    );
  }

  #remember(client: number, key: string, output: RegisterOutput): void {
    const seen = this.#seen.get(client) as Map<string, Version>;
    switch (output.type) {
      case "written":
      case "found":
        seen.set(key, output.version);
        break;
      case "deleted":
      case "absent":
      case "not-found":
        seen.delete(key);
        break;
      case "precondition-failed":
        if (output.current === null) seen.delete(key);
        else seen.set(key, output.current);
        break;
    }
  }

  // ── the end of a run ───────────────────────────────────────────────────────────────────────

  /** Reads every key, linearizably, once the node serves again. */
  async #finalReads(): Promise<void> {
    const world = this.#world;
    for (const key of this.#profile.keys) {
      const deadline = world.now + LIVENESS_MS;
      const shard = shardForKey(enc.encode(key), TOTAL_SHARDS);
      for (;;) {
        this.#throwIfViolated();
        // Like a client routing by the cluster view: the shard's leader if one is known.
        const node =
          this.#nodes.find((n) => n.mr?.shardInfo(shard)?.role === "leader") ??
          (this.#nodes[this.#rng.int(this.#nodes.length)] as SimNode);
        const { mr, proc } = node;
        if (world.now > deadline) {
          if (mr !== null) this.#logShards("not serving", mr);
          throw new ViolationFound({
            kind: "liveness",
            message: `the node did not serve key ${key} within ${LIVENESS_MS} ms of the heal`,
          });
        }
        if (mr === null || proc === null) {
          await world.runUntil(world.now + TICK_MS);
          continue;
        }
        const invokeTime = world.now;
        let result: StoredItem | null | undefined;
        let failed = false;
        mr.get(enc.encode(key), true).then(
          (r) => {
            result = r;
          },
          (err: unknown) => {
            failed = true;
            this.#log(`final read of ${key} failed: ${describe(err)}`);
          },
        );
        // A read asked of a process that dies is never answered (its callbacks die with it): the
        // client, as a real one whose connection breaks, asks again, not waiting out the deadline.
        while (result === undefined && !failed && proc.alive && world.now <= deadline) {
          await world.step(world.now + TICK_MS);
        }
        if (result === undefined || !proc.alive) continue;
        const output: RegisterOutput =
          result === null
            ? { type: "absent" }
            : { type: "found", value: dec.decode(result.value), version: result.version };
        this.#history.push({
          client: "final",
          key,
          invokeTime,
          returnTime: world.now,
          input: { type: "get" },
          output,
        });
        break;
      }
    }
  }

  /**
   * With quiescence on, the idle cluster must fall asleep: within QUIESCE_MS of the final reads
   * every replica of every group sleeps, but replicas outside their leader's configuration (a
   * member removed while it was down does not know it, hears from no leader, and campaigns on:
   * replicas are not destroyed on removal yet).
   */
  async #checkQuiescence(): Promise<void> {
    if (!this.#profile.quiesce) return;
    const world = this.#world;
    const deadline = world.now + QUIESCE_MS;
    const awake = (): string[] =>
      this.#nodes.flatMap((n) =>
        (n.mr?.shardIds() ?? []).flatMap((id) => {
          const info = n.mr?.shardInfo(id);
          if (info === null || info === undefined || info.quiesced) return [];
          const leader = this.#nodes
            .map((l) => l.mr?.shardInfo(id))
            .find((l) => l?.role === "leader");
          const members = leader ?? info;
          if (!members.voters.includes(n.id) && !members.learners.includes(n.id)) return [];
          return [`${n.id}:${id}(${info.role} t${info.term} c${info.commit})`];
        }),
      );
    while (world.now < deadline) {
      await world.runUntil(world.now + TICK_MS);
      this.#throwIfViolated();
      if (awake().length === 0) return;
    }
    throw new ViolationFound({
      kind: "quiescence",
      message: `groups still awake ${QUIESCE_MS} ms after the clients stopped: ${awake().join(" ")}`,
    });
  }

  #check(): void {
    const verdict = checkRegisterHistory(this.#history);
    this.#stats.checkerSteps = verdict.steps;
    if (verdict.status === "violation") {
      throw new ViolationFound({ kind: "linearizability", message: verdict.report });
    }
  }
}

function shardOfKey(key: string): number {
  return shardForKey(enc.encode(key), TOTAL_SHARDS);
}

function toOutput(input: RegisterInput, result: ApplyOutcome | StoredItem | null): RegisterOutput {
  if (input.type === "get") {
    const item = result as StoredItem | null;
    return item === null
      ? { type: "absent" }
      : { type: "found", value: dec.decode(item.value), version: item.version };
  }
  const outcome = result as ApplyOutcome;
  switch (outcome.type) {
    case "written":
      return { type: "written", version: outcome.version };
    case "deleted":
      return { type: "deleted", version: outcome.version };
    case "not-found":
      return { type: "not-found" };
    case "precondition-failed":
      return { type: "precondition-failed", current: outcome.current };
  }
}

/** Errors raised before a write entered the log (or once another entry took its index). */
const NOT_APPLIED = new Set([
  "CAIRN_ERR_NOT_LEADER",
  "CAIRN_ERR_PROPOSAL_DROPPED",
  "CAIRN_ERR_PROPOSAL_LOST",
  "CAIRN_ERR_BACKPRESSURE",
  "CAIRN_ERR_SHUTTING_DOWN",
]);

function isNotApplied(err: unknown): boolean {
  return NOT_APPLIED.has((err as { code?: string }).code ?? "");
}

/** Whether `err` (or an error it wraps) is an I/O error the simulation injected. */
function isInvariantFailure(err: unknown): boolean {
  for (let e: unknown = err; e instanceof Error; e = e.cause) {
    if ((e as { code?: unknown }).code === "CAIRN_ERR_INVARIANT") return true;
  }
  return false;
}

function isInjectedFault(err: unknown): boolean {
  for (let e: unknown = err; e instanceof Error; e = e.cause) {
    if (e.message.includes("injected fault")) return true;
  }
  return false;
}

function describe(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return `${typeof code === "string" ? `${code}: ` : ""}${err.message}`;
  }
  return String(err);
}

function describeOutcome(o: MetaOutcome): string {
  switch (o.kind) {
    case "shard-moved":
      return `shard ${o.shard} to ${o.nodes.join(",")}`;
    case "shard-settled":
      return `shard ${o.shard} settled`;
    case "state-changed":
      return `${o.id} ${o.from} → ${o.to}`;
    case "member-added":
    case "member-updated":
      return `member ${o.member.id} (${o.member.incarnation ?? "-"}, ${o.member.state ?? "active"})`;
    default:
      return o.kind;
  }
}
