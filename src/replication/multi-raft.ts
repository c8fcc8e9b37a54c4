/**
 * The multi-raft driver: every active shard of this node is a Raft group, and one loop drives
 * them all. Per round:
 *
 *   1. feed each group the inputs queued since the last round (ticks, proposals, reads);
 *   2. collect every group's Ready;
 *   3. send the leaders' appends and heartbeats (Raft thesis §10.2.1: a leader writes its log in
 *      parallel with replicating it);
 *   4. persist all new entries and hard states in one WAL append and ONE fdatasync;
 *   5. send the other messages: answers and votes promise what is now durable (none in
 *      single-node mode: every group has one voter);
 *   6. apply committed entries to each shard's LSM, answering the proposals they settle, and
 *      serve confirmed reads;
 *   7. advance every group.
 *
 * Requests that arrive while a round waits for its fsync are proposed in the next round, so
 * the fsync is shared by everything that arrived meanwhile (group commit across shards).
 *
 * Idle groups sleep (Raft quiescence, src/raft/raft.ts): a leader with nothing to do for
 * QUIESCE_AFTER_HEARTBEATS heartbeat intervals stops heartbeating, and its followers stop their
 * election timers. Only awake groups are ticked (and marked dirty by ticks), so a node whose
 * groups sleep does no per-group work at all. A group wakes on any message or request;
 * wakeGroupsLedBy() wakes the groups led by a node the failure detector suspects.
 *
 * Shard 0 opens at start; another shard opens on first access (its directory and WAL state are
 * created then) and, after a restart, every shard with state is reopened and its WAL replayed
 * above what its LSM holds durably. In a cluster, a shard whose directory is gone while the WAL
 * had dropped entries its tables held is refilled from its peers (refill.ts); a single node
 * refuses to start (LostShardError).
 *
 * This class is the facade: its parts are the files multi-raft-*.ts (the round loop, the apply,
 * reads, writes, scans, peers, sleeping groups, snapshots, maintenance), each over a host
 * interface of its own (src/replication/README.md).
 */
import { randomInt } from "node:crypto";
import { join } from "node:path";
import { CairnError } from "../common/errors.ts";
import { DenseMap } from "../common/index.ts";
import { type Rng, seededRng } from "../common/rng.ts";
import {
  type MetaCommand,
  type MetaOutcome,
  nodeOfReplica,
  shardForKey,
} from "../cluster/index.ts";
import type { ConfChange, ConfState, NodeId, Snapshot } from "../raft/index.ts";
import {
  confAfter,
  EMPTY_CONF,
  encodeConfChange,
  logIndex,
  nodeId,
  NotLeaderError,
  RawNode,
  term,
} from "../raft/index.ts";
import { type FileSystem, LsmEnvironment, nodeFileSystem, Wal } from "../storage/index.ts";
import { type Clock, type EngineOpener, lsmOpener, systemClock } from "./engine.ts";
import type { Version } from "./commands.ts";
import { FOUNDING_TERM, type PeerReport, ShardReplica } from "./shard.ts";
import type { ApplyOutcome, StoredItem } from "./state-machine.ts";
import type { ReadVoucher, TermCheck } from "./term-confirm.ts";
import { KvStateMachine } from "./state-machine.ts";
import { WAL_CONF_CHANGE, WAL_NORMAL, WalRaftStorage } from "./wal-storage.ts";
import {
  type DriverTestingBugs,
  type MultiRaftOptions,
  leaderNode,
  OPEN_CONCURRENCY,
  type ScanRequest,
  type ShardInfo,
  ShuttingDownError,
  type SnapshotResult,
} from "./multi-raft-options.ts";
import type { ShardMessage } from "./raft-transport.ts";
import { Maintenance } from "./multi-raft-maintenance.ts";
import { RoundLoop } from "./multi-raft-round.ts";
import { Applier } from "./multi-raft-apply.ts";
import { Scanner } from "./multi-raft-scan.ts";
import { Peers } from "./multi-raft-peers.ts";
import { Quiesce } from "./multi-raft-quiesce.ts";
import { Reads } from "./multi-raft-reads.ts";
import { Writes } from "./multi-raft-writes.ts";
import { RequestBudget } from "./request-budget.ts";
import { buildSnapshot } from "./multi-raft-snapshots.ts";
import {
  decodeLostLog,
  encodeLostLog,
  holdsLostLog,
  type LostLog,
  newerLostLog,
} from "./refill.ts";

const EMPTY = new Uint8Array(0);
/**
 * Heartbeat intervals a leader waits with nothing to do before its group sleeps (every replica
 * holds its whole log, committed and applied, when the wait starts: #idle in the Raft core). A
 * group written once then sleeps 400 ms later with the defaults (heartbeats every 200 ms). At 5
 * (1 s), a three-node cluster under single Puts spread over its 1,024 groups sent 7 heartbeats
 * per Put to groups written once, and spent 14 peer messages a Put instead of 10 (BENCHMARKS.md).
 */
export const QUIESCE_AFTER_HEARTBEATS = 2;

// The driver's types, where they have always been imported from (src/node, the transport, the
// tests): they live in multi-raft-options.ts and raft-transport.ts.
export type {
  DriverTestingBugs,
  MultiRaftOptions,
  ReplicationObserver,
  ScanRequest,
  ShardInfo,
  SnapshotResult,
} from "./multi-raft-options.ts";
export { ShuttingDownError } from "./multi-raft-options.ts";
export type { RaftTransport, ShardMessage } from "./raft-transport.ts";

export class MultiRaft {
  readonly nodeId: NodeId;
  /** This node's id inside its groups (MultiRaftOptions.replicaId). */
  readonly replicaId: NodeId;
  readonly totalShards: number;
  readonly #options: MultiRaftOptions;
  readonly #wal: Wal;
  /** The LSM engines' shared resources; null when the engines come from options.openEngine. */
  readonly #env: LsmEnvironment | null;
  readonly #shards = new DenseMap<ShardReplica>();
  /** What open() accepted to lose (acceptLostWal): the driver logs it at ERROR. */
  readonly #acceptedLosses: AcceptedLoss[] = [];
  /** Shards whose directory was found missing, in a cluster: refilled from their peers. */
  readonly #lostShards: LostShard[] = [];
  readonly #opening = new Map<number, Promise<ShardReplica>>();
  /** Groups being founded by foundShard(): their voters and first entries. */
  readonly #founding = new Map<
    number,
    { readonly voters: readonly string[]; readonly entries: readonly Uint8Array[] }
  >();
  readonly #requestTimeoutMs: number;
  readonly #testingBugs: DriverTestingBugs;
  #closed = false;
  #failure: unknown = undefined;
  readonly #clock: Clock;
  readonly #openEngine: EngineOpener;
  readonly #rng: Rng;
  #stopTicker: (() => void) | null = null;
  #stopMaintenance: (() => void) | null = null;
  readonly #maintenance: Maintenance;
  readonly #scanner: Scanner;
  readonly #writes: Writes;
  readonly #reads: Reads;
  readonly #peers: Peers;
  readonly #quiesce: Quiesce;
  readonly #applier: Applier;
  readonly #rounds: RoundLoop;

  private constructor(options: MultiRaftOptions, wal: Wal, env: LsmEnvironment | null) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    this.#openEngine =
      options.openEngine ?? lsmOpener(env as LsmEnvironment, options.memtableBytes);
    this.#rng = seededRng(options.seed ?? randomInt(0x7fff_ffff));
    this.nodeId = nodeId(options.nodeId);
    this.replicaId = nodeId(options.replicaId ?? options.nodeId);
    this.totalShards = options.totalShards;
    this.#wal = wal;
    this.#env = env;
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 10_000;
    this.#testingBugs = options.testingBugs ?? {};
    // What the parts need of the driver (their *Host interfaces), one object for them all.
    const host = {
      shards: this.#shards,
      wal,
      replicaId: this.replicaId,
      stopped: (): boolean => this.#closed || this.#failure !== undefined,
      fail: (err: unknown): void => this.#fail(err),
      checkShardId: (id: number): void => this.#checkShardId(id),
      options,
      totalShards: this.totalShards,
      assertOpen: (): void => this.#assertOpen(),
      replicasOf: (id: number): readonly string[] => this.#replicasOf(id),
      shardForRequest: (id: number): Promise<ShardReplica> => this.#shardForRequest(id),
      readBarrier: (s: ShardReplica): Promise<void> => this.#reads.readBarrier(s),
      syncMeta: (): Promise<void> => this.syncMeta(),
      clock: this.#clock,
      testingBugs: this.#testingBugs,
      budget: new RequestBudget(options.maxPendingBytes ?? 128 * 1024 * 1024),
      maxPendingPerShard: options.maxPendingPerShard ?? 100_000,
      closed: (): boolean => this.#closed,
      shardOf: (key: Uint8Array): number => this.shardOf(key),
      shard: (id: number): Promise<ShardReplica> => this.#shard(id),
      opening: (id: number): boolean => this.#opening.has(id),
      markDirty: (s: ShardReplica): void => this.#rounds.markDirty(s),
      report: (shard: number, report: PeerReport): void => this.#peers.report(shard, report),
      nodeId: this.nodeId,
      observer: options.observer,
      mark: (s: ShardReplica): void => this.#rounds.mark(s),
      scheduleRound: (): void => this.#rounds.scheduleRound(),
      dropExpiredHeld: (): void => this.#peers.dropExpiredHeld(),
    };
    this.#writes = new Writes(host);
    this.#reads = new Reads(host);
    this.#peers = new Peers(host);
    this.#quiesce = new Quiesce(host);
    this.#applier = new Applier({ ...host, sleep: this.#quiesce });
    this.#rounds = new RoundLoop({
      ...host,
      requestTimeoutMs: this.#requestTimeoutMs,
      failed: (): boolean => this.#failure !== undefined,
      sleep: this.#quiesce,
      peers: this.#peers,
      applier: this.#applier,
    });
    this.#scanner = new Scanner(host);
    this.#maintenance = new Maintenance(host);
  }

  /** Opens the WAL and every shard with state, creates shard 0 if needed, starts ticking. */
  static async open(options: MultiRaftOptions): Promise<MultiRaft> {
    const fs = options.fs ?? nodeFileSystem;
    // What this turn has framed (the peers' messages, answers to clients) leaves before the WAL
    // blocks the thread on a write, not after it.
    const transport = options.transport;
    const flushOutputs = options.flushOutputs;
    const walDir = options.walDir ?? join(options.dataDir, "wal");
    const single = options.transport === undefined;
    const wal = await Wal.open(walDir, {
      ...options.wal,
      fs,
      // Beside the WAL's directory: it says the WAL existed, should the directory be lost.
      createdMarker: `${walDir}.created`,
      acceptLoss: single && options.acceptLostWal === true,
      beforeBlockingWrite: () => {
        transport?.flush();
        flushOutputs?.();
      },
    });
    const env =
      options.openEngine !== undefined
        ? null
        : new LsmEnvironment({
            blockCacheBytes: options.blockCacheBytes,
            ...(options.memtableBudgetBytes === undefined
              ? {}
              : { memtableBudgetBytes: options.memtableBudgetBytes }),
            ...(options.lsmMetrics === undefined ? {} : { metrics: options.lsmMetrics }),
          });
    const mr = new MultiRaft(options, wal, env);
    try {
      // A single node creates shard 0 at once (its health and metadata); in a cluster the
      // meta group is founded once, by one node (foundShard), and reaches the others by Raft.
      if (wal.lost) mr.#acceptedLosses.push({ shard: null, file: walDir, heldUpTo: 0, walUpTo: 0 });
      const owns = options.ownsShard ?? (() => true);
      const foreign = wal.shards().find((id) => !owns(id));
      if (foreign !== undefined) {
        throw new CairnError(
          "CAIRN_ERR_SHARD_WORKERS_MISMATCH",
          `the WAL in ${walDir} holds shard ${foreign}, which this shard worker does not own: the data directory was written with another shard_workers`,
        );
      }
      const dirs = await shardDirs(fs, options.dataDir);
      // (A shard whose directory is gone, or empty, is found as its engine opens: #openShard.)
      const known = [...new Set<number>([...(single ? [0] : []), ...wal.shards(), ...dirs])].filter(
        owns,
      );
      const beyond = known.find((id) => id >= options.totalShards);
      if (beyond !== undefined) {
        throw new CairnError(
          "CAIRN_ERR_SHARD_COUNT_MISMATCH",
          `data directory ${options.dataDir} holds shard ${beyond}, but cluster.total_shards is ${options.totalShards}`,
        );
      }
      // Opening an engine is mostly waiting for fsyncs: open several at once.
      const queue = known.sort((a, b) => a - b);
      const opener = async (): Promise<void> => {
        for (let id = queue.shift(); id !== undefined; id = queue.shift()) await mr.#shard(id);
      };
      await Promise.all(Array.from({ length: OPEN_CONCURRENCY }, opener));
    } catch (err) {
      await mr.close();
      throw err;
    }
    mr.#stopTicker = mr.#clock.every(options.tickMs, () => mr.#tick());
    mr.#stopMaintenance = mr.#clock.every(1000, () => void mr.maintain());
    return mr;
  }

  /** The WAL's recovery report: what a crash cut off the end of the log, if anything. */
  get tornTail(): Wal["tornTail"] {
    return this.#wal.tornTail;
  }

  /**
   * What open() started without because the operator accepted its loss (acceptLostWal): the
   * WAL itself (`shard` null), or a shard's log that ended before what its tables hold.
   */
  get acceptedLosses(): readonly AcceptedLoss[] {
    return this.#acceptedLosses;
  }

  /** The WAL's recovery report: commit indexes lowered to the last durable entry. */
  get clampedCommits(): Wal["clampedCommits"] {
    return this.#wal.clampedCommits;
  }

  /**
   * The shards whose directory was found missing (or empty) while the WAL had dropped entries
   * their tables held (cluster mode), at open or when a shard opened since: their replicas here
   * are refilled from their peers (refill.ts). The driver logs those of open() at ERROR.
   */
  get lostShards(): readonly LostShard[] {
    return this.#lostShards;
  }

  /**
   * Restarts the log of shard `id`, whose directory `dir` is gone, for a refill from its peers
   * (refill.ts, step 1): a snapshot mark at 0 carrying the log it lost, and its hard state with
   * its commit at 0 (its term and vote kept). The caller syncs it before the shard opens.
   */
  #resetLostShard(id: number, dir: string): void {
    const wal = this.#wal;
    const last = wal.lastIndex(id);
    const lost = newerLostLog(decodeLostLog(wal.snapshot(id)?.data, id), {
      index: last,
      term: wal.term(id, last) ?? 0,
      commit: wal.hardState(id)?.commit ?? 0,
    });
    const hs = wal.hardState(id);
    const compacted = wal.firstIndex(id) - 1;
    wal.append([
      { kind: "snapshot", shard: id, meta: { index: 0, term: 0, data: encodeLostLog(lost) } },
      ...(hs === undefined
        ? []
        : [{ kind: "hard-state" as const, shard: id, state: { ...hs, commit: 0 } }]),
    ]);
    this.#lostShards.push({ shard: id, dir, compacted, lost });
  }

  shardOf(key: Uint8Array): number {
    return shardForKey(key, this.totalShards);
  }

  // ── peers (multi-raft-peers.ts) ───────────────────────────────────────────────────────────

  /**
   * Messages from node `from`, delivered to their groups at the next round (a shard not open
   * here is opened if this node replicates it; held a while if it may soon).
   */
  receive(from: string, messages: readonly ShardMessage[]): void {
    this.#peers.receive(from, messages);
  }

  /**
   * The shards' replicas may have changed (`replicasOf`, `acceptsReplica`): the messages held
   * for shards this node now replicates are delivered. The driver calls it after each meta
   * command it applies; an embedder whose replicas change otherwise calls it.
   */
  replicasChanged(): void {
    this.#peers.replicasChanged();
  }

  /** The transport could not deliver to `to`: the groups led here probe it instead. */
  reportUnreachable(to: string): void {
    this.#peers.reportUnreachable(to);
  }

  // ── sleeping groups (multi-raft-quiesce.ts) ──────────────────────────────────────────────────

  /** The failure detector suspects node `node`: the groups here it leads wake if they sleep. */
  wakeGroupsLedBy(node: string): void {
    this.#quiesce.wakeGroupsLedBy(node);
  }

  /** Groups of this node that are awake (ticking). */
  awakeGroups(): number {
    return this.#quiesce.awakeGroups();
  }

  #tick(): void {
    this.#quiesce.tick();
  }

  #setTicking(s: ShardReplica, ticking: boolean): void {
    this.#quiesce.setTicking(s, ticking);
  }

  // ── client operations (multi-raft-writes.ts, multi-raft-reads.ts) ─────────────────────────

  put(key: Uint8Array, value: Uint8Array, expected?: Version): Promise<ApplyOutcome> {
    return this.#writes.put(key, value, expected);
  }

  delete(key: Uint8Array, expected?: Version): Promise<ApplyOutcome> {
    return this.#writes.delete(key, expected);
  }

  /** The leader of `key`'s shard when this node's replica follows it and knows it, else null. */
  leaderElsewhere(key: Uint8Array): string | null {
    return this.#writes.leaderElsewhere(key);
  }

  /** Proposes a command to the meta group (shard 0), which this node must lead. */
  proposeMeta(cmd: MetaCommand): Promise<MetaOutcome> {
    return this.#writes.proposeMeta(cmd);
  }

  /** Proposes a change of a shard's group; resolves once applied on this node, the leader. */
  changeMembership(id: number, cc: ConfChange): Promise<void> {
    return this.#writes.changeMembership(id, cc);
  }

  /** Hands leadership of `id` to `to`: a member's replica id, or a node (its replica there). */
  transferLeader(id: number, to: string): Promise<void> {
    return this.#writes.transferLeader(id, to);
  }

  /** Reads a key; linearizable reads first confirm leadership and wait for the apply (ReadIndex). */
  get(key: Uint8Array, linearizable: boolean): Promise<StoredItem | null> {
    return this.#reads.get(key, linearizable);
  }

  /** Waits until the meta group's state here is as recent as any acknowledged meta command. */
  syncMeta(): Promise<void> {
    return this.#reads.syncMeta();
  }

  /** A peer leader's term checks (term-confirm.ts), answered from the groups' current terms. */
  confirmTerms(checks: readonly TermCheck[]): boolean[] {
    return this.#reads.confirmTerms(checks);
  }

  /** For a follower's read on another node: this node's leadership of `id` confirmed, its read index. */
  readIndexAsLeader(id: number, voucher?: ReadVoucher): Promise<number> {
    return this.#reads.readIndexAsLeader(id, voucher);
  }

  /**
   * Founds shard `id`'s group here with `voters` and, after the conf changes naming them,
   * `entries` as its first committed log entries (the meta group's bootstrap record). Only one
   * node may ever do this for a shard (design.md §5.1: the meta group's bootstrap): the other
   * voters start empty and receive the same log from the leader. Fails if the shard already
   * has state here.
   */
  async foundShard(
    id: number,
    voters: readonly string[],
    entries: readonly Uint8Array[],
  ): Promise<void> {
    this.#assertOpen();
    this.#checkShardId(id);
    if (!voters.includes(this.replicaId)) {
      throw new CairnError(
        "CAIRN_ERR_INVALID_ARGUMENT",
        `${this.replicaId} founds only its groups`,
      );
    }
    if (this.#shards.has(id) || this.#opening.has(id)) {
      throw new CairnError("CAIRN_ERR_SHARD_EXISTS", `shard ${id} is already open here`);
    }
    this.#founding.set(id, { voters, entries });
    try {
      await this.#shard(id);
    } finally {
      this.#founding.delete(id);
    }
  }

  /**
   * Keys in [start, end) across every shard, in key order, at most `limit`; `more` tells
   * whether keys remain after the last one returned (multi-raft-scan.ts).
   */
  scan(req: ScanRequest): Promise<{ items: StoredItem[]; more: boolean }> {
    return this.#scanner.scan(req);
  }

  /** A peer's share of a scan (cairn.v1.Raft ScanShards; multi-raft-scan.ts). */
  scanShards(ids: readonly number[], req: ScanRequest): Promise<StoredItem[]> {
    return this.#scanner.scanShards(ids, req);
  }

  /** Flushes the shard's LSM and compacts its WAL entries up to what is now in SSTables. */
  snapshotShard(id: number): Promise<SnapshotResult> {
    return this.#maintenance.snapshotShard(id);
  }

  // ── state for health, metrics and the cluster view ──────────────────────────────────────────

  shardIds(): number[] {
    return [...this.#shards.keys()].sort((a, b) => a - b);
  }

  shardInfo(id: number): ShardInfo | null {
    const s = this.#shards.get(id);
    if (s === undefined) return null;
    const st = s.raw.basicStatus();
    return {
      id,
      role: st.role,
      leader: st.lead === null ? null : nodeOfReplica(st.lead),
      term: st.term,
      commit: st.commit,
      applied: s.sm.appliedIndex,
      leaderChanges: s.leaderChanges,
      voters: st.conf.voters,
      learners: st.conf.learners,
      logFirstIndex: this.#wal.firstIndex(id),
      durableIndex: s.sm.lsm.flushedSeq,
      quiesced: st.quiesced,
      refilling: s.refill !== null,
    };
  }

  /** Whether this node leads shard `id` now (cheap: for passes over every shard). */
  leads(id: number): boolean {
    return this.#shards.get(id)?.raw.role === "leader";
  }

  /**
   * Whether `replica`, a member of `id`'s group led here, holds the whole committed log (its
   * match index reaches the commit index): a learner caught up enough to be promoted.
   */
  isCaughtUp(id: number, replica: string): boolean {
    const s = this.#shards.get(id);
    if (s === undefined || s.raw.role !== "leader") return false;
    const match = s.raw.matchOf(nodeId(replica));
    return match !== null && match >= s.raw.commitIndex;
  }

  /** Each open shard's memtable bytes, active and immutable (the metrics read it at a scrape). */
  *memtableSizes(): Generator<readonly [shard: number, bytes: number]> {
    for (const [id, s] of this.#shards) yield [id, s.sm.lsm.memtableBytes];
  }

  /** Each open shard's tables per level, L0 first (the metrics read it at a scrape). */
  *tablesPerLevel(): Generator<readonly [shard: number, perLevel: readonly number[]]> {
    for (const [id, s] of this.#shards) yield [id, s.sm.lsm.tablesPerLevel];
  }

  /** Shard 0 exists, has a leader and its engine works: the quick health rule. No I/O. */
  isShardReady(id: number): boolean {
    if (this.#closed || this.#failure !== undefined) return false;
    const s = this.#shards.get(id);
    return (
      s !== undefined &&
      s.raw.lead !== null &&
      s.isReplayed() &&
      s.refill === null &&
      s.sm.lsm.failure === undefined
    );
  }

  get failure(): unknown {
    return this.#failure;
  }

  /** Stops ticking, fails what is still waiting, and closes every engine and the WAL. */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#stopTicker?.();
    this.#stopMaintenance?.();
    await Promise.allSettled([...this.#opening.values()]);
    await this.#rounds.whenIdle();
    await this.#applier.whenIdle();
    const err = new ShuttingDownError();
    for (const s of this.#shards.values()) s.failAll(err);
    const results = await Promise.allSettled(
      [...this.#shards.values()].map((s) => s.sm.lsm.close()),
    );
    if (this.#failure === undefined) await this.#wal.close();
    else await this.#wal.destroy();
    await this.#env?.close();
    const failed = results.find((r) => r.status === "rejected");
    if (failed !== undefined && this.#failure === undefined) throw failed.reason;
  }

  // ── the driver loop ─────────────────────────────────────────────────────────────────────────

  /** The shard's snapshot for a follower (multi-raft-snapshots.ts); #openShard hands it to the storage. */
  #buildSnapshot(s: ShardReplica): Snapshot {
    return buildSnapshot(s, this.#wal);
  }

  /** The group has input: marked for the next round (multi-raft-round.ts). */
  #markDirty(s: ShardReplica): void {
    this.#rounds.markDirty(s);
  }

  #fail(err: unknown): void {
    if (this.#failure !== undefined) return;
    this.#failure = err;
    const failure = new CairnError(
      "CAIRN_ERR_NODE_FAILED",
      "the node hit a fatal storage or consistency error",
      {
        cause: err,
      },
    );
    for (const s of this.#shards.values()) s.failAll(failure);
    this.#options.observer?.fatal?.(err);
  }

  /**
   * The maintenance pass, run every second (multi-raft-maintenance.ts). Public so that a test
   * need not wait for the timer.
   */
  maintain(): Promise<void> {
    return this.#maintenance.maintain();
  }

  // ── shards ──────────────────────────────────────────────────────────────────────────────────

  /**
   * The shard a client request needs. In a cluster, a shard not open here is opened only on
   * one of its replicas: elsewhere the request belongs to them (NotLeaderError naming the
   * first-ranked replica, so the API forwards it), and while the meta group is not known here
   * no node's replicas are (NotLeaderError without a hint: retry).
   */
  async #shardForRequest(id: number): Promise<ShardReplica> {
    if (this.#options.transport !== undefined && !this.#shards.has(id)) {
      await this.#options.ensureShard?.(id);
      const replicas = this.#replicasOf(id);
      if (!replicas.includes(this.replicaId) && this.#options.acceptsReplica?.(id) !== true) {
        throw new NotLeaderError(leaderNode(replicas[0]));
      }
    }
    return this.#shard(id, true);
  }

  /** The open shard `id`, opened now if needed; `forRequest` when a client request needs it. */
  #shard(id: number, forRequest = false): Promise<ShardReplica> {
    const s = this.#shards.get(id);
    if (s !== undefined) return Promise.resolve(s);
    this.#assertOpen();
    if (this.#options.ownsShard?.(id) === false) {
      // A request routed to the wrong shard worker: a bug, never a reason to create the shard.
      return Promise.reject(
        new CairnError("CAIRN_ERR_INTERNAL", `shard ${id} is not owned by this shard worker`),
      );
    }
    let opening = this.#opening.get(id);
    if (opening === undefined) {
      opening = this.#openShard(id, forRequest).finally(() => this.#opening.delete(id));
      this.#opening.set(id, opening);
    }
    return opening;
  }

  async #openShard(id: number, forRequest: boolean): Promise<ShardReplica> {
    const o = this.#options;
    const dir = join(o.dataDir, "shards", String(id));
    const lsm = await this.#openEngine(id, dir);
    try {
      const compacted = this.#wal.firstIndex(id) - 1;
      if (lsm.flushedSeq === 0 && compacted > 0) {
        // The engine holds nothing durable while the WAL dropped entries its tables held: its
        // directory is gone (or emptied), and its data is lost here. A single node refuses to
        // start (its only copy is gone); a cluster node's replica is refilled from its peers
        // (refill.ts), its log reset durably before anything else. (A shard never flushed has
        // no directory yet, and one whose log is whole is replayed from it: with the log reset
        // for a refill, what the refill brought.)
        if (o.transport === undefined) throw new LostShardError(dir, id, compacted);
        this.#resetLostShard(id, dir);
        await this.#wal.sync();
      }
      const sm = new KvStateMachine(lsm, { metaGroup: id === 0 });
      if (o.transport === undefined && lsm.flushedSeq > this.#wal.lastIndex(id)) {
        await this.#acceptLostLog(id, lsm.flushedSeq);
      }
      const storage = new WalRaftStorage(this.#wal, id, sm.durableConf() ?? EMPTY_CONF);
      // New: nothing of the group is durable here. That includes a log with no hard state: the
      // first write of a group (its founding, or a follower's first append) carries its entries
      // and its hard state together, entries first, and a crash may keep the entries and cut
      // the hard state. Nothing of such a write was acknowledged (a group acts only after the
      // round that syncs it), and kept, a founded group would wait for ever: no commit to apply
      // its configuration, no configuration to campaign with. So the group starts over: a
      // founding rewrites its entries from index 1, a leader's first append replaces them.
      const isNew =
        this.#wal.hardState(id) === undefined &&
        this.#wal.snapshot(id) === undefined &&
        this.#wal.firstIndex(id) <= 1 &&
        lsm.flushedSeq === 0;
      const founding = this.#founding.get(id);
      if (founding !== undefined && !isNew) {
        throw new CairnError(
          "CAIRN_ERR_SHARD_EXISTS",
          `shard ${id} already has state here; it cannot be founded again`,
        );
      }
      const ranked = founding?.voters ?? this.#replicasOf(id);
      const voters = [...ranked].sort();
      // A new group's first leader, chosen without an election: the shard's first-ranked
      // replica, read from the shard's assignment, which never changes once committed, so
      // every initial voter names the same one (FOUNDING_TERM). The meta group, founded by one
      // seed, elects as before.
      const firstLeader =
        isNew && founding === undefined && voters.length > 1 && voters.includes(this.replicaId)
          ? (ranked[0] ?? null)
          : null;
      // A KV group founded here: its founding configuration takes effect in the Raft core at
      // once (RaftConfig.confIndex), so it leads or campaigns in its first round, the one that
      // syncs its founding, instead of the round after the founding's apply. The meta group,
      // whose founding entries carry the cluster's bootstrap record, waits for their apply.
      const foundedHere = isNew && founding === undefined && voters.includes(this.replicaId);
      if (isNew && voters.includes(this.replicaId)) {
        // A new group: its first entries name its voters, one conf change each, then any
        // founding entries (the meta group's bootstrap record), all committed at term 1. Every
        // initial voter writes the same conf changes, so all start from the same
        // configuration. (A node that is not an initial voter starts empty and learns the
        // group from its leader.)
        const entries = voters.map((node, i) => ({
          term: FOUNDING_TERM,
          index: i + 1,
          type: WAL_CONF_CHANGE,
          data: encodeConfChange({ type: "add-voter", node: nodeId(node) }),
        }));
        for (const data of founding?.entries ?? []) {
          entries.push({ term: FOUNDING_TERM, index: entries.length + 1, type: WAL_NORMAL, data });
        }
        this.#wal.append([
          { kind: "entries", shard: id, entries },
          {
            kind: "hard-state",
            shard: id,
            state: {
              term: FOUNDING_TERM,
              vote: firstLeader === null ? null : nodeId(firstLeader),
              commit: entries.length,
            },
          },
        ]);
        // Durable with the group's first round (foundingUnsynced below), which shares its
        // write with every other group's: a fill that opens 1,024 groups one by one would
        // otherwise make one WAL write each. The meta group's founding entries are synced now.
        if (founding !== undefined) await this.#wal.sync();
        if (foundedHere) {
          // What applying the conf changes will record: the state machine applies them later.
          let conf: ConfState = EMPTY_CONF;
          for (const node of voters)
            conf = confAfter(conf, { type: "add-voter", node: nodeId(node) });
          storage.conf = conf;
        }
      }
      const commit = this.#wal.hardState(id)?.commit ?? 0;
      const applied = Math.min(lsm.flushedSeq, commit);
      // The log this replica lost with its directory, while it is refilled (refill.ts): no more
      // once the WAL shows the refill done (its log as up to date, its commit as far), as after
      // a restart since.
      let lost = decodeLostLog(this.#wal.snapshot(id)?.data, id);
      const last = this.#wal.lastIndex(id);
      if (
        lost !== null &&
        commit >= lost.commit &&
        holdsLostLog(last, this.#wal.term(id, last) ?? 0, lost)
      ) {
        lost = null;
      }
      const raw = new RawNode({
        id: this.replicaId,
        storage,
        rng: this.#rng.fork(),
        electionTick: o.electionTicks,
        heartbeatTick: o.heartbeatTicks,
        quiesceTicks: o.quiesce === false ? 0 : QUIESCE_AFTER_HEARTBEATS * o.heartbeatTicks,
        // Busy groups' appends stand in for their heartbeats: fewer messages per write.
        skipHeartbeatsAfterAppends: true,
        omitRedundantReplies: true,
        // A commit reaches the followers with the next append or heartbeat, not a message of
        // its own; a follower's read asks for it (readIndexAsLeader). Not in the meta group:
        // its followers' nodes act on what it applies (a new shard's creator waits for its own
        // replica to apply the creation, and the shard's other replicas hold its messages until
        // theirs has), and deferred, every shard's first write waited a heartbeat interval.
        deferCommitBroadcast: id !== 0,
        applied: logIndex(applied),
        ...(foundedHere ? { confIndex: logIndex(voters.length) } : {}),
        ...(lost === null
          ? {}
          : { recoveringUntil: { index: logIndex(lost.index), term: term(lost.term) } }),
        ...(o.maxCommittedBytesPerReady === undefined
          ? {}
          : { maxCommittedBytesPerReady: o.maxCommittedBytesPerReady }),
      });
      const shard = new ShardReplica(
        id,
        raw,
        sm,
        storage,
        true,
        // A group founded here holds nothing a client was told of: it may lead, and its reads
        // wait for their read index's apply as always (#readBarrier).
        this.#testingBugs.staleReadAfterRestart || foundedHere ? 0 : commit,
      );
      // A group founded here, or created here for a request, elects at once: its request would
      // otherwise wait out an election timeout (the other replicas open it on the first vote).
      const eager =
        isNew &&
        voters.length > 1 &&
        voters.includes(this.replicaId) &&
        (forRequest || founding !== undefined);
      // ... unless another replica should lead it: that one is asked to campaign instead.
      const first = eager && founding === undefined ? o.firstCampaigner?.(id) : undefined;
      if (first !== undefined && first !== this.replicaId && voters.includes(first)) {
        shard.askToCampaign = nodeId(first);
      } else {
        shard.campaignEagerly = eager;
      }
      // Its founding is durable before it acts as leader: it leads in the round that syncs the
      // founding (foundingUnsynced), and that round sends its messages only after the sync.
      shard.leadsFoundingTerm =
        firstLeader === this.replicaId ||
        (this.#testingBugs.leadFoundingTermAgain === true &&
          !isNew &&
          voters.length > 1 &&
          this.#wal.hardState(id)?.term === FOUNDING_TERM &&
          this.#wal.hardState(id)?.vote === this.replicaId);
      shard.foundingUnsynced = foundedHere;
      if (lost !== null && (raw.recovering || applied < lost.commit)) shard.refill = lost;
      storage.snapshotSource = () => this.#buildSnapshot(shard);
      if (this.#closed) throw new ShuttingDownError();
      this.#shards.set(id, shard);
      this.#setTicking(shard, true);
      o.observer?.shardOpened?.(id, applied, commit);
      if (id === 0) {
        const observe = o.observer?.metaApplied?.bind(o.observer);
        sm.onMeta = (state) => {
          observe?.(state);
          // A shard created here may have messages waiting (receive).
          this.replicasChanged();
        };
        // What the engine already holds (a restart): the replay adds what follows.
        if (observe !== undefined) sm.reloadMeta();
      }
      this.#markDirty(shard);
      return shard;
    } catch (err) {
      await lsm.close().catch(() => undefined);
      throw err;
    }
  }

  /**
   * A single node's shard whose tables hold entries up to `held` while its log ends before
   * them: the log lost entries the node acknowledged (a WAL deleted, emptied, or replaced by an
   * older copy). Refused with CAIRN_ERR_LOST_STATE; with acceptLostWal, the log starts again
   * after what the tables hold (a snapshot mark at `held`, the term past any the log recorded),
   * so new entries follow the applied ones: never an entry at an index already applied, which
   * would be skipped with no outcome for its client.
   */
  async #acceptLostLog(id: number, held: number): Promise<void> {
    const walUpTo = this.#wal.lastIndex(id);
    if (this.#options.acceptLostWal !== true) {
      throw new CairnError(
        "CAIRN_ERR_LOST_STATE",
        `shard ${id}'s tables (${join(this.#options.dataDir, "shards", String(id))}) hold log entries up to ${held}, but the WAL in ${this.#wal.dir} ends at ${walUpTo}: the WAL lost entries this node acknowledged (deleted, emptied, or replaced by an older copy), and the node does not start: restore the WAL, or accept the loss with recovery.unsafe_accept_lost_wal (docs/operations.md, "A lost WAL")`,
      );
    }
    const t = Math.max(1, this.#wal.hardState(id)?.term ?? 0, this.#wal.snapshot(id)?.term ?? 0);
    this.#wal.append([
      { kind: "snapshot", shard: id, meta: { index: held, term: t, data: EMPTY } },
      { kind: "hard-state", shard: id, state: { term: t, vote: null, commit: held } },
    ]);
    await this.#wal.sync();
    this.#acceptedLosses.push({ shard: id, file: this.#wal.dir, heldUpTo: held, walUpTo });
  }

  #replicasOf(id: number): readonly string[] {
    return this.#options.replicasOf?.(id) ?? [this.replicaId];
  }

  #checkShardId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.totalShards) {
      throw new CairnError(
        "CAIRN_ERR_INVALID_ARGUMENT",
        `shard id must be in [0, ${this.totalShards - 1}], got ${id}`,
      );
    }
  }

  #assertOpen(): void {
    if (this.#failure !== undefined) {
      throw new CairnError(
        "CAIRN_ERR_NODE_FAILED",
        "the node hit a fatal error and serves no requests",
        {
          cause: this.#failure,
        },
      );
    }
    if (this.#closed) throw new ShuttingDownError();
  }
}

/** What open() started without, the operator having accepted it (MultiRaftOptions.acceptLostWal). */
export interface AcceptedLoss {
  /** The shard whose log ended early; null: the whole WAL was missing or empty. */
  readonly shard: number | null;
  /** The WAL's directory. */
  readonly file: string;
  /** The shard's tables held entries up to this index ... */
  readonly heldUpTo: number;
  /** ... and its log ended here. */
  readonly walUpTo: number;
}

/** A shard whose directory was found missing or empty, in a cluster (MultiRaft.lostShards). */
export interface LostShard {
  readonly shard: number;
  /** The missing (or empty) directory. */
  readonly dir: string;
  /** The WAL had dropped the shard's entries up to this index (its tables held them). */
  readonly compacted: number;
  /** The log the replica lost: what it may have acknowledged ends there (refill.ts). */
  readonly lost: LostLog;
}

/**
 * A single node's shard directory is gone (or empty) while the WAL no longer holds what its
 * tables held: its only copy is lost. (In a cluster the shard is refilled from its peers:
 * refill.ts.)
 */
export class LostShardError extends CairnError {
  constructor(path: string, shard: number, compacted: number) {
    super(
      "CAIRN_ERR_LOST_STATE",
      `shard ${shard}'s directory ${path} is missing, or holds none of its tables, and the WAL dropped its entries up to ${compacted} once its tables held them: its data is lost on this node; restore the directory from a backup (this node holds the only copy)`,
    );
    this.name = "LostShardError";
  }
}

async function shardDirs(fs: FileSystem, dataDir: string): Promise<number[]> {
  try {
    return (await fs.readdir(join(dataDir, "shards"))).filter((n) => /^\d+$/.test(n)).map(Number);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return [];
    throw err;
  }
}
