/**
 * The multi-raft driver: every active shard of this node is a Raft group, and one loop drives
 * them all (multi-raft-round.ts, a method a phase). Per round:
 *
 *   1. feed each group the inputs queued since the last round (ticks, proposals, reads) and
 *      collect its Ready (#collect);
 *   2. set aside a Ready that carries a snapshot: the snapshot is installed beside the rounds,
 *      its group sitting them out, and the Ready goes on with the first round after;
 *   3. stage their WAL records, and sort their messages (#stage); send the leaders' appends
 *      and heartbeats at once (Raft thesis §10.2.1: a leader writes its log in parallel with
 *      replicating it);
 *   4. persist all new entries and hard states in one WAL append and ONE fdatasync (#persist);
 *   5. send the other messages: answers and votes promise what is now durable (none in
 *      single-node mode: every group has one voter);
 *   6. apply committed entries to each shard's LSM, answering the proposals they settle, serve
 *      confirmed reads, and advance every group (#applyAll, multi-raft-apply.ts);
 *   7. hand the answers to the sockets (#answer).
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
 * refuses to start (LostShardError). (The groups: multi-raft-groups.ts.)
 *
 * This class is the facade: its parts are the files multi-raft-*.ts (the groups, the round
 * loop, the apply, reads, writes, scans, peers, sleeping groups, snapshots, maintenance), each
 * over a host interface of its own (src/replication/README.md).
 */
import { randomInt } from "node:crypto";
import { join } from "node:path";
import { CairnError } from "../common/errors.ts";
import { DenseMap } from "../common/index.ts";
import { seededRng } from "../common/rng.ts";
import {
  type MetaCommand,
  type MetaOutcome,
  nodeOfReplica,
  shardForKey,
} from "../cluster/index.ts";
import type { ConfChange, NodeId } from "../raft/index.ts";
import { nodeId } from "../raft/index.ts";
import { LsmEnvironment, nodeFileSystem, Wal } from "../storage/index.ts";
import { type Clock, lsmOpener, systemClock } from "./engine.ts";
import type { Version } from "./commands.ts";
import type { GroupConfig, PeerReport, ShardReplica } from "./shard.ts";
import type { ApplyOutcome, StoredItem } from "./state-machine.ts";
import type { ReadVoucher, TermCheck } from "./term-confirm.ts";
import {
  type DriverTestingBugs,
  type MultiRaftOptions,
  type ScanRequest,
  type ShardInfo,
  ShuttingDownError,
  type SnapshotResult,
} from "./multi-raft-options.ts";
import type { ShardMessage } from "./raft-transport.ts";
import { corruptShardOf, explainCorruptShard, quarantineShard } from "./corrupt-shard.ts";
import { MetaVotersRecord } from "./meta-voters.ts";
import { type AcceptedLoss, Groups, type LostShard } from "./multi-raft-groups.ts";
import { Maintenance } from "./multi-raft-maintenance.ts";
import { RoundLoop } from "./multi-raft-round.ts";
import { Applier } from "./multi-raft-apply.ts";
import { Scanner } from "./multi-raft-scan.ts";
import { Peers } from "./multi-raft-peers.ts";
import { Quiesce } from "./multi-raft-quiesce.ts";
import { Reads } from "./multi-raft-reads.ts";
import { Removal, type RemovalOutcome } from "./multi-raft-removal.ts";
import { Writes } from "./multi-raft-writes.ts";
import { RequestBudget } from "./request-budget.ts";
import type { ClientCall } from "./request-errors.ts";
import type { ScanPage } from "./scan-merge.ts";
import { SnapshotPins } from "./snapshot-pins.ts";

// The driver's types, where they have always been imported from (src/node, the transport, the
// tests): they live in multi-raft-options.ts, multi-raft-groups.ts and raft-transport.ts.
export type {
  DriverTestingBugs,
  MultiRaftOptions,
  ReplicationObserver,
  ScanRequest,
  ShardInfo,
  SnapshotResult,
} from "./multi-raft-options.ts";
export { ShuttingDownError } from "./multi-raft-options.ts";
export {
  type AcceptedLoss,
  LostShardError,
  type LostShard,
  QUIESCE_AFTER_HEARTBEATS,
} from "./multi-raft-groups.ts";
export type { RaftTransport, ShardMessage } from "./raft-transport.ts";
export type { RemovalOutcome } from "./multi-raft-removal.ts";

export class MultiRaft {
  readonly nodeId: NodeId;
  /** This node's id inside its groups (MultiRaftOptions.replicaId). */
  readonly replicaId: NodeId;
  readonly totalShards: number;
  readonly #options: MultiRaftOptions;
  readonly #wal: Wal;
  /** The LSM engines' shared resources; null when the engines come from options.openEngine. */
  readonly #env: LsmEnvironment | null;
  /** The open shards: read by every part, added to by the groups' only (multi-raft-groups.ts). */
  readonly #shards = new DenseMap<ShardReplica>();
  readonly #requestTimeoutMs: number;
  readonly #testingBugs: DriverTestingBugs;
  #closed = false;
  #failure: unknown = undefined;
  readonly #clock: Clock;
  #stopTicker: (() => void) | null = null;
  #stopMaintenance: (() => void) | null = null;
  readonly #groups: Groups;
  readonly #maintenance: Maintenance;
  readonly #scanner: Scanner;
  readonly #writes: Writes;
  readonly #reads: Reads;
  readonly #peers: Peers;
  readonly #quiesce: Quiesce;
  readonly #applier: Applier;
  readonly #rounds: RoundLoop;
  readonly #removal: Removal;
  /** The engine versions pinned by snapshots not read yet, with a streaming transport. */
  readonly #snapshotPins: SnapshotPins | null;
  /** A cluster node's record of the meta group's voters (meta-voters.ts); null alone. */
  readonly #metaVoters: MetaVotersRecord | null;

  private constructor(options: MultiRaftOptions, wal: Wal, env: LsmEnvironment | null) {
    this.#options = options;
    this.#clock = options.clock ?? systemClock;
    const openEngine =
      options.openEngine ?? lsmOpener(env as LsmEnvironment, options.memtableBytes);
    const rng = seededRng(options.seed ?? randomInt(0x7fff_ffff));
    this.nodeId = nodeId(options.nodeId);
    this.replicaId = nodeId(options.replicaId ?? options.nodeId);
    this.totalShards = options.totalShards;
    this.#wal = wal;
    this.#env = env;
    this.#requestTimeoutMs = options.requestTimeoutMs ?? 10_000;
    this.#testingBugs = options.testingBugs ?? {};
    this.#snapshotPins =
      options.transport?.streamsSnapshots === true
        ? new SnapshotPins(options.snapshotPinTimeoutMs)
        : null;
    this.#metaVoters =
      options.transport === undefined
        ? null
        : new MetaVotersRecord(options.fs ?? nodeFileSystem, options.dataDir, (err) =>
            this.#fail(err),
          );
    // What the parts need of the driver (their *Host interfaces), one object for them all.
    const host = {
      shards: this.#shards,
      wal,
      replicaId: this.replicaId,
      stopped: (): boolean => this.#closed || this.#failure !== undefined,
      fail: (err: unknown): void => this.#fail(err),
      checkShardId: (id: number): void => this.#groups.checkShardId(id),
      options,
      totalShards: this.totalShards,
      assertOpen: (): void => this.#assertOpen(),
      replicasOf: (id: number): readonly string[] => this.#groups.replicasOf(id),
      placedOn: (id: number): readonly string[] => this.#groups.placedOn(id),
      placedElsewhere: (id: number): boolean => this.#groups.placedElsewhere(id),
      placedAway: (id: number): boolean => this.#groups.placedAway(id),
      leaderToAsk: (id: number): string | null => this.#groups.leaderToAsk(id),
      shardForRequest: (id: number): Promise<ShardReplica> => this.#groups.shardForRequest(id),
      readBarrier: (s: ShardReplica, deadline: number, call: ClientCall | null): Promise<void> =>
        this.#reads.readBarrier(s, deadline, call),
      untilReplayed: (
        shards: Iterable<ShardReplica>,
        deadline: number,
        call: ClientCall | null,
      ): Promise<void> => this.#reads.untilReplayed(shards, deadline, call),
      syncMeta: (deadline: number, call: ClientCall | null): Promise<void> =>
        this.#reads.syncMeta(deadline, call),
      clock: this.#clock,
      testingBugs: this.#testingBugs,
      budget: new RequestBudget(options.maxPendingBytes ?? 128 * 1024 * 1024),
      maxPendingPerShard: options.maxPendingPerShard ?? 100_000,
      writeRefused: options.writeRefused ?? ((): null => null),
      closed: (): boolean => this.#closed,
      shardOf: (key: Uint8Array): number => this.shardOf(key),
      shard: (id: number): Promise<ShardReplica> => this.#groups.shard(id),
      opening: (id: number): boolean => this.#groups.opening(id),
      removing: (id: number): boolean => this.#removal.removing(id) !== undefined,
      markDirty: (s: ShardReplica): void => this.#rounds.markDirty(s),
      report: (shard: number, report: PeerReport): void => this.#peers.report(shard, report),
      nodeId: this.nodeId,
      observer: options.observer,
      mark: (s: ShardReplica): void => this.#rounds.mark(s),
      scheduleRound: (): void => this.#rounds.scheduleRound(),
      dropExpiredHeld: (): void => this.#peers.dropExpiredHeld(),
      replicasChanged: (): void => this.replicasChanged(),
      snapshotPins: this.#snapshotPins,
      metaVoters: this.#metaVoters,
    };
    this.#writes = new Writes(host);
    this.#reads = new Reads(host);
    this.#peers = new Peers(host);
    this.#quiesce = new Quiesce(host);
    this.#groups = new Groups({
      ...host,
      openEngine,
      rng,
      sleep: this.#quiesce,
      whenRemoved: (id: number): Promise<void> | undefined => this.#removal.removing(id),
    });
    this.#applier = new Applier({ ...host, sleep: this.#quiesce });
    this.#rounds = new RoundLoop({
      ...host,
      requestTimeoutMs: this.#requestTimeoutMs,
      failed: (): boolean => this.#failure !== undefined,
      sleep: this.#quiesce,
      peers: this.#peers,
      applier: this.#applier,
    });
    this.#removal = new Removal({
      ...host,
      sleep: this.#quiesce,
      whenRoundsIdle: (): Promise<void> => this.#rounds.whenIdle(),
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
      ...(options.observer?.walWritten === undefined
        ? {}
        : { onBatchWritten: options.observer.walWritten.bind(options.observer) }),
    });
    const env =
      options.openEngine !== undefined
        ? null
        : new LsmEnvironment({
            blockCacheBytes: options.blockCacheBytes,
            ...(options.maxOpenFiles === undefined ? {} : { maxOpenFiles: options.maxOpenFiles }),
            ...(options.memtableBudgetBytes === undefined
              ? {}
              : { memtableBudgetBytes: options.memtableBudgetBytes }),
            ...(options.lsmMetrics === undefined ? {} : { metrics: options.lsmMetrics }),
          });
    const mr = new MultiRaft(options, wal, env);
    try {
      await mr.#groups.openAtStart(walDir, fs);
    } catch (err) {
      await mr.close();
      throw explainCorruptShard(err, options.dataDir, !single);
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
    return this.#groups.acceptedLosses;
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
    return this.#groups.lostShards;
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

  /**
   * The failure detector saw node `node` come back (options.nodeDown no longer holds): the
   * groups led here that slept with its replica behind wake and bring it up to date.
   */
  wakeGroupsFor(node: string): void {
    this.#quiesce.wakeGroupsFor(node);
  }

  /** Groups of this node that are awake (ticking). */
  awakeGroups(): number {
    return this.#quiesce.awakeGroups();
  }

  #tick(): void {
    this.#quiesce.tick();
  }

  // ── client operations (multi-raft-writes.ts, multi-raft-reads.ts) ─────────────────────────

  /** `deadline`: the call's, on deadlineClock() (KvStore); a write past it is not proposed. */
  put(
    key: Uint8Array,
    value: Uint8Array,
    expected?: Version,
    deadline?: number,
  ): Promise<ApplyOutcome> {
    return this.#writes.put(key, value, expected, deadline);
  }

  delete(key: Uint8Array, expected?: Version, deadline?: number): Promise<ApplyOutcome> {
    return this.#writes.delete(key, expected, deadline);
  }

  /**
   * The node a write of `key` goes to when this node would refuse it naming another (Writes:
   * a follower that knows its leader, or a shard placed on other nodes only), else null.
   */
  leaderElsewhere(key: Uint8Array): string | null {
    return this.#writes.leaderElsewhere(key);
  }

  /** What a forward to shard `shard` found about its leader (Groups.noteLeader). */
  noteLeader(shard: number, node: string | null): void {
    this.#groups.noteLeader(shard, node);
  }

  /** Proposes a command to the meta group (shard 0), which this node must lead. */
  proposeMeta(cmd: MetaCommand): Promise<MetaOutcome> {
    return this.#writes.proposeMeta(cmd);
  }

  /**
   * Proposes a change of a shard's group; resolves once applied on this node, the leader. With
   * `expected`, the configuration the change was chosen against (its voters and learners, as
   * `shardInfo` gave them): refused with ProposalDroppedError, nothing proposed, when the group's
   * configuration is another by the time the group takes the change (a committed change applied
   * meanwhile), as CockroachDB's ChangeReplicas compares its expected descriptor. A step chosen
   * against the old configuration may be wrong against the new: driver simulation seed 83474
   * removed a live voter before adding its replacement, leaving two voters, one of them gone.
   */
  changeMembership(id: number, cc: ConfChange, expected?: GroupConfig): Promise<void> {
    return this.#writes.changeMembership(id, cc, expected);
  }

  /** Hands leadership of `id` to `to`: a member's replica id, or a node (its replica there). */
  transferLeader(id: number, to: string): Promise<void> {
    return this.#writes.transferLeader(id, to);
  }

  /**
   * Reads a key; linearizable reads first confirm leadership and wait for the apply (ReadIndex),
   * until `deadline` at most (its call's, on deadlineClock(): KvStore) or its `call` is
   * cancelled.
   */
  get(
    key: Uint8Array,
    linearizable: boolean,
    deadline?: number,
    call?: ClientCall,
  ): Promise<StoredItem | null> {
    return this.#reads.get(key, linearizable, deadline, call);
  }

  /**
   * Waits until the meta group's state here is as recent as any acknowledged meta command; a
   * scan's until its `deadline` or its client's `call` is cancelled (readBarrier).
   */
  syncMeta(deadline = Infinity, call: ClientCall | null = null): Promise<void> {
    return this.#reads.syncMeta(deadline, call);
  }

  /** A peer leader's term checks (term-confirm.ts), answered from the groups' current terms. */
  confirmTerms(checks: readonly TermCheck[]): boolean[] {
    return this.#reads.confirmTerms(checks);
  }

  /**
   * For a follower's read on another node: this node's leadership of `id` confirmed, its read
   * index, waited for until `deadline` (on deadlineClock(); Infinity: the driver's request
   * timeout). Required: a ReadIndex call gives each shard's answer up after
   * READ_INDEX_SHARD_TIMEOUT_MS, and a wait left to run past that holds budget for nobody.
   */
  readIndexAsLeader(
    id: number,
    voucher: ReadVoucher | undefined,
    deadline: number,
  ): Promise<number> {
    return this.#reads.readIndexAsLeader(id, voucher, deadline);
  }

  /**
   * Founds shard `id`'s group here with `voters` and, after the conf changes naming them,
   * `entries` as its first committed log entries (the meta group's bootstrap record). Only one
   * node may ever do this for a shard (design.md §5.1: the meta group's bootstrap): the other
   * voters start empty and receive the same log from the leader. Fails if the shard already
   * has state here.
   */
  foundShard(id: number, voters: readonly string[], entries: readonly Uint8Array[]): Promise<void> {
    return this.#groups.foundShard(id, voters, entries);
  }

  /**
   * Opens shard `id`'s group here if it may never have started (this node holds no state for it
   * and is one of its initial voters): a created shard whose group no replica opened has no
   * leader to re-replicate or move it (Groups.startGroup). Resolves once open; null: not one
   * to start here, nor on a failed node (which opens nothing: the upkeep pass that asks, between
   * the failure and the node's exit, threw from a timer; the driver simulation, seed 1901018 on five nodes).
   */
  startGroup(id: number): Promise<void> | null {
    this.#groups.checkShardId(id);
    if (this.#failure !== undefined) return null;
    return this.#groups.startGroup(id)?.then(() => undefined) ?? null;
  }

  /**
   * Keys in [start, end) across every shard, in key order, at most `limit`; `more` tells
   * whether keys remain after the last one returned (multi-raft-scan.ts). A linearizable scan
   * waits for its shards' read indexes until `deadline` at most (its call's, on deadlineClock():
   * KvStore) or its `call` is cancelled.
   */
  scan(req: ScanRequest, deadline?: number, call?: ClientCall): Promise<ScanPage> {
    return this.#scanner.scan(req, deadline, call);
  }

  /**
   * A peer's share of a scan (cairn.v1.Raft ScanShards; multi-raft-scan.ts), waited for until
   * `deadline` at most (the asker's call's, on deadlineClock()) or the asker cancels `call`.
   */
  scanShards(
    ids: readonly number[],
    req: ScanRequest,
    deadline?: number,
    call?: ClientCall,
  ): Promise<ScanPage> {
    return this.#scanner.scanShards(ids, req, deadline, call);
  }

  /** Flushes the shard's LSM and compacts its WAL entries up to what is now in SSTables. */
  snapshotShard(id: number): Promise<SnapshotResult> {
    return this.#maintenance.snapshotShard(id);
  }

  /**
   * Removes shard `id`'s replica here, one a move took off this node (replica GC,
   * multi-raft-removal.ts): closed, its WAL records dropped but for its term and vote (durably),
   * its directory deleted. `confirm()` is asked once the replica is out of the table and
   * answers nothing: whether it may still go (the caller's meta state, synced now, still places
   * the shard elsewhere). Kept, and said why, when it leads its group, is shard 0, is being
   * opened, or is not confirmed.
   */
  removeReplica(id: number, confirm: () => Promise<boolean>): Promise<RemovalOutcome> {
    this.#groups.checkShardId(id);
    return this.#removal.remove(id, confirm);
  }

  /** Whether shard `id`'s replica here was removed (its WAL holds its term and vote only). */
  isRemoved(id: number): boolean {
    return this.#wal.isDropped(id);
  }

  // ── state for health, metrics and the cluster view ──────────────────────────────────────────

  /** Whether shard `id`'s group is open here (a replica this node holds). */
  holds(id: number): boolean {
    return this.#shards.has(id);
  }

  /** Throws CAIRN_ERR_INVALID_ARGUMENT for an id outside [0, total_shards). */
  checkShardId(id: number): void {
    this.#groups.checkShardId(id);
  }

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

  /** The WAL's bytes appended and not yet written (WalStats; the metrics read it at a scrape). */
  walUnwrittenBytes(): number {
    return this.#wal.stats().unwrittenBytes;
  }

  /** Each open shard's memtable bytes, active and immutable (the metrics read it at a scrape). */
  *memtableSizes(): Generator<readonly [shard: number, bytes: number]> {
    for (const [id, s] of this.#shards) yield [id, s.sm.lsm.memtableBytes];
  }

  /** Each open shard's tables per level, L0 first (the metrics read it at a scrape). */
  *tablesPerLevel(): Generator<readonly [shard: number, perLevel: readonly number[]]> {
    for (const [id, s] of this.#shards) yield [id, s.sm.lsm.tablesPerLevel];
  }

  /**
   * Whether the shard's replica open here is one a move took off this node (dormant: it serves
   * nothing, and its group, which moved on without it, may never talk to it again).
   */
  isPlacedElsewhere(id: number): boolean {
    return this.#groups.placedElsewhere(id);
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

  /** Engine versions pinned by snapshots for followers and not released yet (snapshot-pins.ts). */
  get pinnedSnapshots(): number {
    return this.#snapshotPins?.size ?? 0;
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
    await this.#groups.whenOpened();
    await this.#removal.stop();
    await this.#rounds.whenIdle();
    await this.#applier.whenIdle();
    await this.#metaVoters?.settled();
    const err = new ShuttingDownError();
    for (const s of this.#shards.values()) s.failAll(err);
    // A pinned version holds its engine's tables: released before the engines close.
    this.#snapshotPins?.releaseAll();
    const corrupt = this.#quarantinable();
    const results = await Promise.allSettled(
      [...this.#shards.values()].map((s) => s.sm.lsm.close()),
    );
    if (this.#failure === undefined) await this.#wal.close();
    else await this.#wal.destroy();
    await this.#env?.close();
    if (corrupt !== null) await this.#quarantine(corrupt);
    const failed = results.find((r) => r.status === "rejected");
    if (failed !== undefined && this.#failure === undefined) throw failed.reason;
  }

  /**
   * The shard whose corrupt tables failed this node, when its directory may be moved aside for
   * its peers to refill it at the next start (corrupt-shard.ts): a cluster node, and another
   * voter of the group holds what it committed. Null otherwise.
   */
  #quarantinable(): number | null {
    if (this.#failure === undefined || this.#options.transport === undefined) return null;
    const id = corruptShardOf(this.#failure, this.#options.dataDir);
    if (id === null) return null;
    const voters = this.#shards.get(id)?.raw.voters;
    if (voters === undefined || ![...voters].some((v) => v !== this.replicaId)) return null;
    return id;
  }

  async #quarantine(id: number): Promise<void> {
    const observer = this.#options.observer;
    try {
      const into = await quarantineShard(this.#options.dataDir, id, new Date());
      observer?.shardQuarantined?.(id, into, false);
    } catch (err) {
      observer?.shardNotQuarantined?.(id, err);
    }
  }

  // ── the driver loop ─────────────────────────────────────────────────────────────────────────

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
