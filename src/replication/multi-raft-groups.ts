/**
 * The multi-raft driver's groups: the shards open here, each a Raft group over the WAL with its
 * LSM engine, opened at start (every shard with state, and shard 0 on a single node) or on first
 * access (shard(): its directory and WAL state created then), founded by foundShard, or opened for
 * a client request only on one of its replicas (shardForRequest). Opening a shard decides whether
 * its group is new (its founding records written, its first leader chosen), whether its directory
 * was lost (LostShardError on a single node; a refill from its peers in a cluster, refill.ts), and
 * what its Raft core starts from. The driver owns the table of open shards; this part is the only
 * one that adds to it.
 */
import { join } from "node:path";
import { nodeOfReplica } from "../cluster/index.ts";
import { CairnError } from "../common/errors.ts";
import type { DenseMap } from "../common/index.ts";
import type { Rng } from "../common/rng.ts";
import type { ConfState, NodeId } from "../raft/index.ts";
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
import type { FileSystem, Wal } from "../storage/index.ts";
import { corruptShardOf, quarantineShard } from "./corrupt-shard.ts";
import { type MetaVotersNote, readMetaVoters } from "./meta-voters.ts";
import type { EngineOpener } from "./engine.ts";
import {
  type DriverTestingBugs,
  leaderNode,
  type MultiRaftOptions,
  OPEN_CONCURRENCY,
  ShuttingDownError,
} from "./multi-raft-options.ts";
import { removeShardDir, shardDir } from "./multi-raft-removal.ts";
import { buildSnapshot } from "./multi-raft-snapshots.ts";
import type { SnapshotPins } from "./snapshot-pins.ts";
import {
  decodeLostLog,
  encodeLostLog,
  holdsLostLog,
  type LostLog,
  newerLostLog,
} from "./refill.ts";
import { FOUNDING_TERM, ShardReplica } from "./shard.ts";
import { KvStateMachine } from "./state-machine.ts";
import { WAL_CONF_CHANGE, WAL_NORMAL, WalRaftStorage } from "./wal-storage.ts";

const EMPTY = new Uint8Array(0);
/**
 * Heartbeat intervals a leader waits with nothing to do before its group sleeps (every replica
 * holds its whole log, committed and applied, when the wait starts: #idle in the Raft core). A
 * group written once then sleeps 400 ms later with the defaults (heartbeats every 200 ms). At 5
 * (1 s), a three-node cluster under single Puts spread over its 1,024 groups sent 7 heartbeats
 * per Put to groups written once, and spent 14 peer messages a Put instead of 10 (BENCHMARKS.md).
 */
export const QUIESCE_AFTER_HEARTBEATS = 2;

/** How long a start waits for the meta group's replay before it decides on a corrupt shard. */
const REPLAY_WAIT_MS = 30_000;

/**
 * A dropped log whose last entry the WAL does not hold (a drop written by a build before the
 * WAL recorded it, Wal.droppedLog null): every vote refused.
 */
const UNKNOWN_LOST_LOG = { index: Number.MAX_SAFE_INTEGER, term: Number.MAX_SAFE_INTEGER };

/** What the groups need of the driver. */
export interface GroupsHost {
  readonly options: Pick<
    MultiRaftOptions,
    | "dataDir"
    | "fs"
    | "transport"
    | "ownsShard"
    | "replicasOf"
    | "replicasNow"
    | "metaAtStart"
    | "acceptsReplica"
    | "ensureShard"
    | "acceptLostWal"
    | "firstCampaigner"
    | "electionTicks"
    | "heartbeatTicks"
    | "quiesce"
    | "nodeDown"
    | "maxCommittedBytesPerReady"
    | "observer"
  >;
  /** The open shards, by id: the driver's table, which only this part adds to. */
  readonly shards: Pick<DenseMap<ShardReplica>, "get" | "has" | "set">;
  /**
   * The WAL (a group's Raft storage reads its log there: WalRaftStorage). It also holds the
   * last entry of the log a removal here deleted, while the shard's log is empty since
   * (Wal.droppedLog, ShardReplica.recreated).
   */
  readonly wal: Wal;
  /** This node's id inside its groups. */
  readonly replicaId: NodeId;
  readonly totalShards: number;
  /** Opens a shard's engine (MultiRaftOptions.openEngine, or the LSM). */
  readonly openEngine: EngineOpener;
  /** The driver's seeded random source: each group's Raft core gets a fork of it. */
  readonly rng: Rng;
  readonly testingBugs: DriverTestingBugs;
  /** The node is closed: a shard opened meanwhile is not kept. */
  closed(): boolean;
  assertOpen(): void;
  /** The ticker (multi-raft-quiesce.ts): a shard opened here starts awake. */
  readonly sleep: { setTicking(s: ShardReplica, ticking: boolean): void };
  /** The group has input for the next round (multi-raft-round.ts). */
  markDirty(s: ShardReplica): void;
  /** The shards' replicas may have changed (multi-raft-peers.ts): shard 0 applied a meta command. */
  replicasChanged(): void;
  /** Where snapshots for followers pin their engine's version; null: built in memory. */
  readonly snapshotPins: SnapshotPins | null;
  /** The record of the meta group's voters (meta-voters.ts); null on a single node. */
  readonly metaVoters: MetaVotersNote | null;
  /** The removal of the shard's replica under way here, if any (multi-raft-removal.ts). */
  whenRemoved(id: number): Promise<void> | undefined;
}

export class Groups {
  readonly #host: GroupsHost;
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
  /**
   * For shards this node does not serve (placedAway, placedElsewhere): the node a forward last
   * found leading it (noteLeader). At most one entry a shard.
   */
  readonly #leaderHints = new Map<number, string>();

  constructor(host: GroupsHost) {
    this.#host = host;
  }

  /**
   * Opens every shard with state here (its directory, or its records in the WAL) and, on a
   * single node, shard 0: the driver's start (MultiRaft.open), after the WAL opened from
   * `walDir`. Refuses a WAL or a data directory written with other shards.
   */
  async openAtStart(walDir: string, fs: FileSystem): Promise<void> {
    const options = this.#host.options;
    const wal = this.#host.wal;
    const single = options.transport === undefined;
    // A single node creates shard 0 at once (its health and metadata); in a cluster the
    // meta group is founded once, by one node (foundShard), and reaches the others by Raft.
    if (wal.lost) this.#acceptedLosses.push({ shard: null, file: walDir, heldUpTo: 0, walUpTo: 0 });
    const owns = options.ownsShard ?? (() => true);
    const foreign = wal.shards().find((id) => !owns(id));
    if (foreign !== undefined) {
      throw new CairnError(
        "CAIRN_ERR_SHARD_WORKERS_MISMATCH",
        `the WAL in ${walDir} holds shard ${foreign}, which this shard worker does not own: the data directory was written with another shard_workers`,
      );
    }
    const dirs = await shardDirs(fs, options.dataDir);
    // A replica removed here (multi-raft-removal.ts) keeps only its term and vote in the WAL and
    // is not opened; what is left of its directory (a crash during its deletion, which follows
    // the durable drop) is deleted again.
    for (const id of dirs) {
      if (owns(id) && wal.isDropped(id)) await removeShardDir(fs, shardDir(options.dataDir, id));
    }
    // (A shard whose directory is gone, or empty, is found as its engine opens: #openShard.)
    const known = [...new Set<number>([...(single ? [0] : []), ...wal.shards(), ...dirs])].filter(
      (id) => owns(id) && !wal.isDropped(id),
    );
    const beyond = known.find((id) => id >= this.#host.totalShards);
    if (beyond !== undefined) {
      throw new CairnError(
        "CAIRN_ERR_SHARD_COUNT_MISMATCH",
        `data directory ${options.dataDir} holds shard ${beyond}, but cluster.total_shards is ${this.#host.totalShards}`,
      );
    }
    // Opening an engine is mostly waiting for fsyncs: open several at once.
    const queue = known.sort((a, b) => a - b);
    const corrupt: { id: number; err: unknown }[] = [];
    const opener = async (): Promise<void> => {
      for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
        try {
          await this.shard(id);
        } catch (err) {
          if (single || corruptShardOf(err, options.dataDir) !== id) throw err;
          corrupt.push({ id, err });
        }
      }
    };
    await Promise.all(Array.from({ length: OPEN_CONCURRENCY }, opener));
    // Decided once every other shard is open, the meta group with them: its state names the
    // corrupt shard's replicas (the meta group's own, decided first, by its record).
    corrupt.sort((a, b) => a.id - b.id);
    for (const { id, err } of corrupt) await this.#refillCorrupt(id, err, fs);
  }

  /**
   * Shard `id`, whose tables (or manifest) were found corrupt as its engine opened at start, is
   * refilled from its peers in the same start when another replica of it holds what its group
   * committed (corrupt-shard.ts): its directory moved aside to the quarantine, the shard opens
   * as one whose directory was lost (refill.ts). The meta state is read once the meta group
   * replayed its log (here), or as the worker holding it shares it (a shard worker without it);
   * the meta group's own voters, by their record (meta-voters.ts). Without another replica known
   * (a group of one, the meta group's only voter or no record of its voters, a state that does
   * not place the shard: none when the meta group's own tables were corrupt too), `err` is
   * thrown: the operator decides (MultiRaft.open names the directory and what to do).
   */
  async #refillCorrupt(id: number, err: unknown, fs: FileSystem): Promise<void> {
    const host = this.#host;
    const o = host.options;
    // The meta state as its tables hold it may predate the shard: first what its log adds (none
    // when shard 0 was moved aside itself: it waits for its peers).
    const metaGroup = host.shards.get(0);
    if (metaGroup !== undefined && metaGroup.refill === null) await this.#replayed(metaGroup);
    let replicas = o.replicasNow?.(id) ?? this.replicasOf(id);
    if (replicas.length === 0 && o.metaAtStart !== undefined) {
      // A shard worker without shard 0: the meta state comes from the worker that holds it.
      const meta = await o.metaAtStart(id);
      replicas = meta?.replicasNow(id) ?? [];
    }
    let others = replicas.filter((r) => r !== host.replicaId);
    if (id === 0 && others.length === 0) {
      const self = nodeOfReplica(host.replicaId);
      others = ((await readMetaVoters(fs, o.dataDir)) ?? []).filter((node) => node !== self);
    }
    if (others.length === 0 || host.wal.hardState(id) === undefined) throw err;
    const into = await quarantineShard(o.dataDir, id, new Date());
    o.observer?.shardQuarantined?.(id, into, true);
    await this.shard(id);
  }

  /**
   * Resolves once `shard` has applied what was committed before it opened (its rounds run from
   * the event loop, without the driver's ticker), or after REPLAY_WAIT_MS.
   */
  async #replayed(shard: ShardReplica): Promise<void> {
    const deadline = performance.now() + REPLAY_WAIT_MS;
    while (!shard.isReplayed() && performance.now() < deadline) {
      this.#host.markDirty(shard);
      await new Promise((resolve) => setImmediate(resolve));
    }
  }

  /**
   * What open() started without because the operator accepted its loss (acceptLostWal): the
   * WAL itself (`shard` null), or a shard's log that ended before what its tables hold.
   */
  get acceptedLosses(): readonly AcceptedLoss[] {
    return this.#acceptedLosses;
  }

  /**
   * The shards whose directory was found missing (or empty) while the WAL had dropped entries
   * their tables held (cluster mode), at open or when a shard opened since: their replicas here
   * are refilled from their peers (refill.ts).
   */
  get lostShards(): readonly LostShard[] {
    return this.#lostShards;
  }

  /** Shard `id` is being opened here. */
  opening(id: number): boolean {
    return this.#opening.has(id);
  }

  /** Resolves once every shard being opened is open or failed (for close()). */
  whenOpened(): Promise<unknown> {
    return Promise.allSettled([...this.#opening.values()]);
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
    this.#host.assertOpen();
    this.checkShardId(id);
    if (!voters.includes(this.#host.replicaId)) {
      throw new CairnError(
        "CAIRN_ERR_INVALID_ARGUMENT",
        `${this.#host.replicaId} founds only its groups`,
      );
    }
    if (this.#host.shards.has(id) || this.#opening.has(id)) {
      throw new CairnError("CAIRN_ERR_SHARD_EXISTS", `shard ${id} is already open here`);
    }
    this.#founding.set(id, { voters, entries });
    try {
      await this.shard(id);
    } finally {
      this.#founding.delete(id);
    }
  }

  /**
   * Opens shard `id`'s group here if it may never have started: this node holds no state for
   * it (no WAL record, not opened) and its replica is one of the group's initial voters. Opened
   * that way, the group starts as a request would start it (its first-ranked initial voter leads
   * the founding term, the others follow it or elect). Returns the open under way, or null
   * when the group is not one to start here.
   *
   * A group is opened by the first request or message that reaches one of its replicas; a
   * created shard may never see one. Its creating request failed before reaching a replica:
   * no group runs, and nothing would replace its voters when they fail. Or the meta group
   * moved it first: every request then goes to the shard's first-ranked node, the move's new
   * one, which is not an initial voter and so starts empty, waiting for a leader that no
   * initial voter was ever asked to be, and the shard would refuse every request for good
   * (the five-node e2e test: a shard created and moved within the same second). Every node's
   * upkeep calls this for the created shards (src/node/replicas.ts).
   */
  startGroup(id: number): Promise<ShardReplica> | null {
    const host = this.#host;
    // The meta group is founded by one seed with its bootstrap record (foundShard), never so.
    if (id === 0 || host.options.transport === undefined || host.closed()) return null;
    if (host.shards.has(id) || this.#opening.has(id) || host.whenRemoved(id) !== undefined) {
      return null;
    }
    if (host.options.ownsShard?.(id) === false) return null;
    if (!this.replicasOf(id).includes(host.replicaId)) return null;
    if (!this.#logHoldsNothing(id) || host.wal.isDropped(id)) return null;
    return this.shard(id);
  }

  /**
   * Whether the WAL holds nothing durable of shard `id`'s group: no hard state, no snapshot,
   * nothing compacted. (Entries without a hard state are a group's first write cut by a crash:
   * #openShard starts such a group over.)
   */
  #logHoldsNothing(id: number): boolean {
    const wal = this.#host.wal;
    return (
      wal.hardState(id) === undefined && wal.snapshot(id) === undefined && wal.firstIndex(id) <= 1
    );
  }

  /**
   * The shard a client request needs. In a cluster, a shard not open here is opened only on
   * one of its replicas: elsewhere the request belongs to them (NotLeaderError naming
   * leaderToAsk's node, so the API forwards it), and while the meta group is not known here
   * no node's replicas are (NotLeaderError without a hint: retry). A replica a move took off
   * this node refuses too (placedElsewhere).
   */
  async shardForRequest(id: number): Promise<ShardReplica> {
    if (this.#host.options.transport !== undefined && !this.#host.shards.has(id)) {
      await this.#host.options.ensureShard?.(id);
      if (
        !this.placedOn(id).includes(this.#host.replicaId) &&
        this.#host.options.acceptsReplica?.(id) !== true
      ) {
        throw this.#refusal(id);
      }
    }
    if (this.placedElsewhere(id)) throw this.#refusal(id);
    return this.shard(id, true);
  }

  /** The refusal of a request for shard `id`, which this node does not serve. */
  #refusal(id: number): NotLeaderError {
    const leader = this.leaderToAsk(id);
    return new NotLeaderError(leader === null ? null : nodeId(leader));
  }

  /**
   * Where a request for shard `id` goes when this node does not serve it (placedAway,
   * placedElsewhere), reads and writes alike: for a replica a move took off this node that is
   * still in its group's configuration (the move has not removed it: its group still talks to
   * it), the leader it follows; otherwise the one of the shard's replicas now a forward last
   * found leading it (noteLeader), else the first-ranked. Without the leader, a follower being
   * moved off named the first-ranked replica, often the move's learner, not caught up (a read
   * waited there for its snapshot) or naming the leader back (a second hop, which the
   * forwarder does not take for a call it was sent). null: no replica is known.
   *
   * Neither the hint nor the first-ranked replica when the failure detector has its node down
   * (MultiRaftOptions.nodeDown): the next replica up instead, which leads once the group has
   * elected again, or answers naming who does. Before, a Get through a node holding no replica
   * was sent to a dead leader for as long as nothing else moved the hint (a write's forward
   * does; a Get's teaches nothing), tens of seconds after its group had a new leader (a review
   * of 2026-12-06).
   */
  leaderToAsk(id: number): string | null {
    const raw = this.#host.shards.get(id)?.raw;
    if (
      raw !== undefined &&
      raw.lead !== null &&
      raw.lead !== raw.id &&
      (raw.voters.has(raw.id) || raw.learners.has(raw.id))
    ) {
      return leaderNode(raw.lead);
    }
    const placed = this.placedOn(id);
    const down = this.#host.options.nodeDown;
    const hint = this.#leaderHints.get(id);
    if (hint !== undefined) {
      if (placed.some((r) => leaderNode(r) === hint)) {
        if (down?.(hint) !== true) return hint;
      } else {
        this.#leaderHints.delete(id); // no longer a replica of the shard
      }
    }
    const up =
      down === undefined
        ? undefined
        : placed.find((r) => {
            const node = leaderNode(r);
            return node !== null && !down(node);
          });
    return leaderNode(up ?? placed[0]);
  }

  /**
   * What a forward of a request for shard `id` found: `node` leads it (it served the request,
   * or a replica's refusal named it), or null: the node tried did not (unreachable, or refused
   * naming none). Kept for shards this node does not serve (see leaderToAsk): without it, a
   * request for a shard whose first-ranked replica does not lead goes there first and is sent
   * on from its refusal, two hops for one.
   */
  noteLeader(id: number, node: string | null): void {
    if (!Number.isInteger(id) || id < 0) return;
    if (node === null) this.#leaderHints.delete(id);
    else if (this.placedAway(id) || this.placedElsewhere(id)) this.#leaderHints.set(id, node);
  }

  /**
   * The replicas the shard is placed on now, first-ranked first: the meta state's placement
   * (MultiRaftOptions.replicasNow) once it records the shard, else its initial voters.
   */
  placedOn(id: number): readonly string[] {
    const now = this.#host.options.replicasNow?.(id);
    return now !== undefined && now.length > 0 ? now : this.replicasOf(id);
  }

  /**
   * Whether the shard's replica open here is one a move took off this node (design.md §5.2):
   * the meta state places the shard on other nodes only, and the replica does not lead its
   * group. Such a replica serves nothing (its group moves on without it): requests go to the
   * shard's replicas now. One that still leads serves until it hands its group over, as the
   * move does before removing it (src/node/replicas.ts): the meta state places the shard
   * elsewhere from the move's start, and a leader refusing from then on named the move's
   * learner, which named the leader back, so the shard took no write for the whole move.
   * Serving is safe: the group commits only through a quorum of its configuration.
   */
  placedElsewhere(id: number): boolean {
    if (this.#host.options.transport === undefined) return false;
    const s = this.#host.shards.get(id);
    if (s === undefined || s.raw.role === "leader") return false;
    return this.#onOthersOnly(id);
  }

  /**
   * Whether a request for shard `id`, not open here, would be refused naming another node
   * (shardForRequest's NotLeaderError): the meta state records the shard on other nodes only,
   * and this node is not taking a replica of it. False before the meta state records the shard
   * (its creation goes through shardForRequest).
   */
  placedAway(id: number): boolean {
    if (this.#host.options.transport === undefined || this.#host.shards.has(id)) return false;
    return this.#onOthersOnly(id) && this.#host.options.acceptsReplica?.(id) !== true;
  }

  /** Whether the meta state records shard `id` on other nodes only (replicasNow). */
  #onOthersOnly(id: number): boolean {
    const now = this.#host.options.replicasNow?.(id);
    return now !== undefined && now.length > 0 && !now.includes(this.#host.replicaId);
  }

  /** The open shard `id`, opened now if needed; `forRequest` when a client request needs it. */
  shard(id: number, forRequest = false): Promise<ShardReplica> {
    const s = this.#host.shards.get(id);
    if (s !== undefined) return Promise.resolve(s);
    // Its old replica is being removed: opened (again, or put back) once that ended.
    const removal = this.#host.whenRemoved(id);
    if (removal !== undefined) return removal.then(() => this.shard(id, forRequest));
    this.#host.assertOpen();
    if (this.#host.options.ownsShard?.(id) === false) {
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
    const o = this.#host.options;
    const dir = shardDir(o.dataDir, id);
    // A replica removed here and created again (a move back before a restart): what its removal
    // left of the directory, when the deletion failed partway (its last step, after the drop is
    // durable), is deleted first, as start-up does (openAtStart). The engine opened on it found
    // a stale image, or an LSM missing its CURRENT or a table, and every later message failed.
    const recreated = this.#host.wal.isDropped(id);
    if (recreated) await removeShardDir(o.fs, dir);
    // The log a removal here deleted, if this replica's log has held nothing since: created
    // again now, or before a restart and given no entry or snapshot yet (its term may have
    // moved). It votes as that log would (ShardReplica.recreated).
    const lostLast = this.#host.wal.droppedLog(id);
    const compacted = this.#host.wal.firstIndex(id) - 1;
    const lsm = await this.#host.openEngine(id, dir, compacted);
    if (lsm.quarantined !== undefined && lsm.quarantined.length > 0) {
      o.observer?.engineKeptAside?.(id, lsm.quarantined);
    }
    try {
      if (lsm.flushedSeq > 0 && lsm.flushedSeq < compacted) {
        // The WAL drops entries only once the engine holds them durably: an engine behind the
        // log's start is an older copy of the directory, and the entries between are lost here.
        throw new OlderShardError(dir, id, lsm.flushedSeq, compacted, o.transport !== undefined);
      }
      if (lsm.flushedSeq === 0 && compacted > 0) {
        // The engine holds nothing durable while the WAL dropped entries its tables held: its
        // directory is gone (or emptied), and its data is lost here. A single node refuses to
        // start (its only copy is gone); a cluster node's replica is refilled from its peers
        // (refill.ts), its log reset durably before anything else. (A shard never flushed has
        // no directory yet, and one whose log is whole is replayed from it: with the log reset
        // for a refill, what the refill brought.)
        if (o.transport === undefined) throw new LostShardError(dir, id, compacted);
        this.#resetLostShard(id, dir);
        await this.#host.wal.sync();
      }
      const sm = new KvStateMachine(lsm, { metaGroup: id === 0 });
      // The meta state is read (and its blocks checked) before the shard is in the table: a
      // corrupt block there fails this open, which a start then handles (#refillCorrupt),
      // rather than the shard opened with its engine closed under it.
      if (id === 0) sm.meta();
      if (o.transport === undefined && lsm.flushedSeq > this.#host.wal.lastIndex(id)) {
        await this.#acceptLostLog(id, lsm.flushedSeq);
      }
      const storage = new WalRaftStorage(this.#host.wal, id, sm.durableConf() ?? EMPTY_CONF);
      // New: nothing of the group is durable here. That includes a log with no hard state: the
      // first write of a group (its founding, or a follower's first append) carries its entries
      // and its hard state together, entries first, and a crash may keep the entries and cut
      // the hard state. Nothing of such a write was acknowledged (a group acts only after the
      // round that syncs it), and kept, a founded group would wait for ever: no commit to apply
      // its configuration, no configuration to campaign with. So the group starts over: a
      // founding rewrites its entries from index 1, a leader's first append replaces them.
      const isNew = this.#logHoldsNothing(id) && lsm.flushedSeq === 0;
      const founding = this.#founding.get(id);
      if (founding !== undefined && !isNew) {
        throw new CairnError(
          "CAIRN_ERR_SHARD_EXISTS",
          `shard ${id} already has state here; it cannot be founded again`,
        );
      }
      const ranked = founding?.voters ?? this.replicasOf(id);
      const voters = [...ranked].sort();
      // A new group's first leader, chosen without an election: the shard's first-ranked
      // replica, read from the shard's assignment, which never changes once committed, so
      // every initial voter names the same one (FOUNDING_TERM). The meta group, founded by one
      // seed, elects as before.
      const firstLeader =
        isNew &&
        founding === undefined &&
        voters.length > 1 &&
        voters.includes(this.#host.replicaId)
          ? (ranked[0] ?? null)
          : null;
      // A KV group founded here: its founding configuration takes effect in the Raft core at
      // once (RaftConfig.confIndex), so it leads or campaigns in its first round, the one that
      // syncs its founding, instead of the round after the founding's apply. The meta group,
      // whose founding entries carry the cluster's bootstrap record, waits for their apply.
      const foundedHere = isNew && founding === undefined && voters.includes(this.#host.replicaId);
      if (isNew && voters.includes(this.#host.replicaId)) {
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
        this.#host.wal.append([
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
        if (founding !== undefined) await this.#host.wal.sync();
        if (foundedHere) {
          // What applying the conf changes will record: the state machine applies them later.
          let conf: ConfState = EMPTY_CONF;
          for (const node of voters)
            conf = confAfter(conf, { type: "add-voter", node: nodeId(node) });
          storage.conf = conf;
        }
      }
      const commit = this.#host.wal.hardState(id)?.commit ?? 0;
      const applied = Math.min(lsm.flushedSeq, commit);
      // The log this replica lost with its directory, while it is refilled (refill.ts): no more
      // once the WAL shows the refill done (its log as up to date, its commit as far), as after
      // a restart since.
      let lost = decodeLostLog(this.#host.wal.snapshot(id)?.data, id);
      const last = this.#host.wal.lastIndex(id);
      if (
        lost !== null &&
        commit >= lost.commit &&
        holdsLostLog(last, this.#host.wal.term(id, last) ?? 0, lost)
      ) {
        lost = null;
      }
      const raw = new RawNode({
        id: this.#host.replicaId,
        storage,
        rng: this.#host.rng.fork(),
        electionTick: o.electionTicks,
        heartbeatTick: o.heartbeatTicks,
        quiesceTicks: o.quiesce === false ? 0 : QUIESCE_AFTER_HEARTBEATS * o.heartbeatTicks,
        ...(o.nodeDown === undefined
          ? {}
          : { memberDown: (replica: NodeId) => o.nodeDown?.(nodeOfReplica(replica)) === true }),
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
        // An engine ahead of the commit its log shows (a snapshot installed durably whose WAL
        // mark a power cut tore): its configuration, storage.conf, is as of its applied index.
        ...(lsm.flushedSeq > applied ? { stateApplied: logIndex(lsm.flushedSeq) } : {}),
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
        this.#host.testingBugs.staleReadAfterRestart || foundedHere ? 0 : commit,
      );
      // A group founded here, or created here for a request, elects at once: its request would
      // otherwise wait out an election timeout (the other replicas open it on the first vote).
      const eager =
        isNew &&
        voters.length > 1 &&
        voters.includes(this.#host.replicaId) &&
        (forRequest || founding !== undefined);
      // ... unless another replica should lead it: that one is asked to campaign instead.
      const first = eager && founding === undefined ? o.firstCampaigner?.(id) : undefined;
      if (first !== undefined && first !== this.#host.replicaId && voters.includes(first)) {
        shard.askToCampaign = nodeId(first);
      } else {
        shard.campaignEagerly = eager;
      }
      // Its founding is durable before it acts as leader: it leads in the round that syncs the
      // founding (foundingUnsynced), and that round sends its messages only after the sync.
      shard.leadsFoundingTerm =
        firstLeader === this.#host.replicaId ||
        (this.#host.testingBugs.leadFoundingTermAgain === true &&
          !isNew &&
          voters.length > 1 &&
          this.#host.wal.hardState(id)?.term === FOUNDING_TERM &&
          this.#host.wal.hardState(id)?.vote === this.#host.replicaId);
      shard.foundingUnsynced = foundedHere;
      // Removed here and created again: it votes as the log it lost would (ShardReplica.recreated).
      if (lostLast !== undefined && this.#host.testingBugs.voteWhenRecreated !== true) {
        shard.recreated = lostLast ?? UNKNOWN_LOST_LOG;
      }
      if (lost !== null && (raw.recovering || applied < lost.commit)) shard.refill = lost;
      const pins = this.#host.snapshotPins;
      storage.snapshotSource = () => buildSnapshot(shard, this.#host.wal, pins);
      if (this.#host.closed()) throw new ShuttingDownError();
      this.#host.shards.set(id, shard);
      this.#host.sleep.setTicking(shard, true);
      o.observer?.shardOpened?.(id, applied, commit);
      if (id === 0) {
        // Its configuration as its tables hold it (a restart): the replay notes what follows.
        this.#host.metaVoters?.note(storage.conf.voters.map(nodeOfReplica));
        const observe = o.observer?.metaApplied?.bind(o.observer);
        sm.onMeta = (state) => {
          observe?.(state);
          // A shard created here may have messages waiting (receive).
          this.#host.replicasChanged();
        };
        // What the engine already holds (a restart), read above: the replay adds what follows.
        if (observe !== undefined) sm.reportMeta();
      }
      this.#host.markDirty(shard);
      return shard;
    } catch (err) {
      await lsm.close().catch(() => undefined);
      throw err;
    }
  }

  /**
   * Restarts the log of shard `id`, whose directory `dir` is gone, for a refill from its peers
   * (refill.ts, step 1): a snapshot mark at 0 carrying the log it lost, and its hard state with
   * its commit at 0 (its term and vote kept). The caller syncs it before the shard opens.
   */
  #resetLostShard(id: number, dir: string): void {
    const wal = this.#host.wal;
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

  /**
   * A single node's shard whose tables hold entries up to `held` while its log ends before
   * them: the log lost entries the node acknowledged (a WAL deleted, emptied, or replaced by an
   * older copy). Refused with CAIRN_ERR_LOST_STATE; with acceptLostWal, the log starts again
   * after what the tables hold (a snapshot mark at `held`, the term past any the log recorded),
   * so new entries follow the applied ones: never an entry at an index already applied, which
   * would be skipped with no outcome for its client.
   */
  async #acceptLostLog(id: number, held: number): Promise<void> {
    const wal = this.#host.wal;
    const walUpTo = wal.lastIndex(id);
    if (this.#host.options.acceptLostWal !== true) {
      throw new CairnError(
        "CAIRN_ERR_LOST_STATE",
        `shard ${id}'s tables (${join(this.#host.options.dataDir, "shards", String(id))}) hold log entries up to ${held}, but the WAL in ${wal.dir} ends at ${walUpTo}: the WAL lost entries this node acknowledged (deleted, emptied, or replaced by an older copy), and the node does not start: restore the WAL, or accept the loss with recovery.unsafe_accept_lost_wal (docs/operations.md, "A lost WAL")`,
      );
    }
    const t = Math.max(1, wal.hardState(id)?.term ?? 0, wal.snapshot(id)?.term ?? 0);
    wal.append([
      { kind: "snapshot", shard: id, meta: { index: held, term: t, data: EMPTY } },
      { kind: "hard-state", shard: id, state: { term: t, vote: null, commit: held } },
    ]);
    await wal.sync();
    this.#acceptedLosses.push({ shard: id, file: wal.dir, heldUpTo: held, walUpTo });
  }

  /** The shard's replicas, first-ranked first (MultiRaftOptions.replicasOf; alone: this node). */
  replicasOf(id: number): readonly string[] {
    return this.#host.options.replicasOf?.(id) ?? [this.#host.replicaId];
  }

  /** Throws CAIRN_ERR_INVALID_ARGUMENT unless `id` names a shard of the cluster. */
  checkShardId(id: number): void {
    if (!Number.isInteger(id) || id < 0 || id >= this.#host.totalShards) {
      throw new CairnError(
        "CAIRN_ERR_INVALID_ARGUMENT",
        `shard id must be in [0, ${this.#host.totalShards - 1}], got ${id}`,
      );
    }
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

/**
 * A shard directory older than the WAL (a backup restored over it): its tables hold the log up
 * to `held`, the WAL dropped the entries up to `compacted`. Refused, single node or cluster: the
 * node cannot tell what it lost. A cluster member's directory can go (its peers then refill it).
 */
export class OlderShardError extends CairnError {
  constructor(path: string, shard: number, held: number, compacted: number, cluster: boolean) {
    super(
      "CAIRN_ERR_LOST_STATE",
      `shard ${shard}'s directory ${path} holds its log entries up to ${held}, but the WAL dropped its entries up to ${compacted}: an older copy of the directory (restored from a backup?), without the entries between, and the node does not start: ${
        cluster
          ? 'restore the newest copy, or remove the directory and its peers refill the shard (docs/operations.md, "A lost WAL")'
          : "restore the newest copy (this node holds the only one)"
      }`,
    );
    this.name = "OlderShardError";
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
