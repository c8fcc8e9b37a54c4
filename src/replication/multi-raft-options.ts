/**
 * The multi-raft driver's leaf types: its options, the observer of its events, the planted bugs
 * of the simulation's canaries, and the shapes of what it answers. Nothing here imports a part
 * of the driver, so every part may import it.
 */
import { type MetaState, nodeOfReplica } from "../cluster/index.ts";
import { nodeId, type NodeId } from "../raft/index.ts";
import { CairnError } from "../common/errors.ts";
import type { FileSystem, LsmMetrics, WalOptions } from "../storage/index.ts";
import type { Clock, EngineOpener } from "./engine.ts";
import type { RaftTransport } from "./raft-transport.ts";
import type { ScanPage } from "./scan-merge.ts";
import type { ConfirmTerms } from "./term-confirm.ts";
import type { ClientCall } from "./request-errors.ts";
import type { CallCut, DenseMap } from "../common/index.ts";
import type { ShardReplica } from "./shard.ts";

/** The driver's open shards, by id, as its parts read them (MultiRaft owns the table). */
export type ShardTable = Pick<DenseMap<ShardReplica>, "get" | "has" | "values" | "keys">;

/** Shards opened at once (at start-up, and by a linearizable scan). */
export const OPEN_CONCURRENCY = 32;

export interface MultiRaftOptions {
  readonly nodeId: string;
  /**
   * This node's id inside every group (src/cluster/replica.ts): in a cluster it carries the
   * data directory's incarnation, so a node whose data directory was wiped is a new replica,
   * never the one that forgot its votes and acknowledgements. Default: nodeId.
   */
  readonly replicaId?: string;
  /**
   * Cluster mode: a peer (node `from`) sent messages to `to`, a replica of this node that is not
   * this one: the peers still count on an incarnation of this node whose state is gone. The
   * messages are dropped; the node should rejoin as its new replica.
   */
  readonly onStaleReplica?: (from: string, to: string) => void;
  readonly dataDir: string;
  /** The WAL's directory; default `dataDir`/wal. */
  readonly walDir?: string;
  /**
   * The shards this driver may hold (a shard worker's slice, src/node/shard-workers.ts); default
   * every shard. Others are neither opened at start nor created for a request, and a WAL that
   * holds one is refused: it was written by a node whose shards were sliced differently.
   */
  readonly ownsShard?: (shard: number) => boolean;
  readonly totalShards: number;
  readonly tickMs: number;
  readonly electionTicks: number;
  readonly heartbeatTicks: number;
  readonly memtableBytes: number;
  readonly blockCacheBytes: number;
  /** Open table files the storage keeps (LsmEnvironment.maxOpenFiles). Default 4096. */
  readonly maxOpenFiles?: number;
  /** Node-wide memtable memory (LsmEnvironment). Default 512 MiB. */
  readonly memtableBudgetBytes?: number;
  /** Serve linearizable reads of single-voter groups without ReadIndex (see #readBarrier). Default true. */
  readonly singleVoterReadFastPath?: boolean;
  /** Refuse new writes to a shard with this many operations already waiting. Default 100000. */
  readonly maxPendingPerShard?: number;
  /**
   * Node-wide bound on the bytes of proposals and reads waiting in the driver (queued, proposed
   * or waiting for their apply); past it requests are refused as retryable back-pressure.
   * Default 128 MiB.
   */
  readonly maxPendingBytes?: number;
  /**
   * Why a client write (`op`) proposed here is refused now (the message of its
   * CAIRN_ERR_DISK_FULL), or null: the node's disk is under its reserve
   * (src/node/disk-reserve.ts: Puts under it, Deletes too under a quarter of it).
   */
  readonly writeRefused?: (op: "put" | "delete") => string | null;
  readonly lsmMetrics?: LsmMetrics;
  readonly observer?: ReplicationObserver;
  /** Opens a shard's engine; default: an LSM engine in the node's shared environment. */
  readonly openEngine?: EngineOpener;
  /** Default: the system clock. The simulation passes its own. */
  readonly clock?: Clock;
  /** The file system of the WAL and the shard directories; default: the real one. */
  readonly fs?: FileSystem;
  /** Options of the node's WAL (segment size, test-only bugs); its `fs` is options.fs. */
  readonly wal?: Omit<WalOptions, "fs">;
  /** Bytes of committed entries one Ready hands to apply (default: the Raft core's 16 MiB). */
  readonly maxCommittedBytesPerReady?: number;
  /** Seed of the groups' election-timeout randomness; default: random. */
  readonly seed?: number;
  /**
   * Carries Raft messages to the other nodes. Without one every group must have this node as
   * its only voter (single-node mode).
   */
  readonly transport?: RaftTransport;
  /**
   * With a transport that streams snapshots (RaftTransport.streamsSnapshots): a snapshot built
   * for a follower pins its engine's version until read; one nobody started reading within this
   * is released (ms, default 120 s; snapshot-pins.ts).
   */
  readonly snapshotPinTimeoutMs?: number;
  /**
   * The initial voters (replica ids) of a shard's group, for a shard this node creates or first
   * hears of: the same list on every node (the meta group decides it in cluster mode). Default:
   * this node only.
   */
  readonly replicasOf?: (shard: number) => readonly string[];
  /**
   * The replicas (replica ids) of a shard as the cluster places them now: a rejoined node's
   * current replica, not the initial voter `replicasOf` names. A replica being refilled after
   * its shard's directory was lost (refill.ts) asks them to wake the group's leader, which
   * sleeps when idle and would not refill it. Default: `replicasOf`.
   */
  readonly replicasNow?: (shard: number) => readonly string[];
  /**
   * Whether this node takes a shard it does not hold, and is not an initial voter of, when a
   * peer's message for it arrives (or a request needs it): it then starts as an empty replica (no
   * configuration) that the leader fills by log or snapshot once a membership change added it.
   * Default: never.
   */
  readonly acceptsReplica?: (shard: number) => boolean;
  /**
   * The replica (id) that should start a new group's first election: its preferred leader,
   * while alive. A group this node creates for a client request asks that replica to campaign
   * (a timeout-now message) instead of campaigning itself, so the group's first leader is the
   * one leader spreading would hand it to anyway, not a transfer a moment later. Undefined
   * (the default), this node, or not a voter: this node campaigns.
   */
  readonly firstCampaigner?: (shard: number) => string | undefined;
  /**
   * A request (write, read, membership change) still unanswered this long after it arrived is
   * failed with CAIRN_ERR_TIMEOUT (a write's outcome is then unknown). Default 10 s.
   */
  readonly requestTimeoutMs?: number;
  /**
   * Cluster mode: makes sure shard `id` exists cluster-wide (the meta group recorded its
   * replicas) before this node opens it for a client request. Without it, a shard's replicas
   * come from `replicasOf` alone.
   */
  readonly ensureShard?: (id: number) => Promise<void>;
  /**
   * Cluster mode: the shards created cluster-wide as of the meta state here (called after
   * syncMeta()), which a linearizable scan must read. Without it, a scan in a cluster reads
   * every shard this node replicates.
   */
  readonly createdShards?: () => readonly number[];
  /**
   * Cluster mode, a shard worker that does not hold shard 0: brings the meta state here up to
   * the meta group's commit as of the call (what syncMeta() does through shard 0 itself). A
   * scan's `deadline` and client's `call` go with it: the sync stops waiting (in worker 0 too)
   * at the one or once the other is cancelled.
   */
  readonly syncMeta?: (deadline: number, call: ClientCall | null) => Promise<void>;
  /**
   * Cluster mode, a shard worker that does not hold shard 0: the first meta state the worker
   * that holds it shared in which `shard` is placed, waited for (bounded) while both start; null
   * if none came. At start the driver asks it the replicas of a shard whose tables it found
   * corrupt (corrupt-shard.ts).
   */
  readonly metaAtStart?: (shard: number) => Promise<MetaState | null>;
  /**
   * Cluster mode: asks node `leader` to confirm its leadership of `shard` and answer the index
   * a read must wait for (readIndexAsLeader there). With it a follower serves linearizable
   * reads (scans) itself; without it a follower's read fails with NotLeaderError. `term` is this
   * replica's term in the group when the read was asked (a ReadVoucher there).
   */
  readonly remoteReadIndex?: (leader: string, shard: number, term: number) => Promise<number>;
  /**
   * Cluster mode: asks node `node` whether its replicas of the shards checked are still at a
   * term ≤ the one named (confirmTerms there). With it a leader confirms its linearizable reads
   * with one call per peer node for every group read (term-confirm.ts) instead of a heartbeat
   * round in each group; without it (or when that fails) reads use Raft's ReadIndex.
   */
  readonly confirmTerms?: ConfirmTerms;
  /**
   * Cluster mode, more nodes than replicas a shard: asks node `node`, a replica of every shard
   * in `shards`, for its share of a scan (scanShards there). With it a scan reads the shards
   * this node does not replicate through their replicas; without it such a scan fails with
   * NotLeaderError. `deadline` is the scan's call's (on deadlineClock(); Infinity: none): the
   * call to `node` ends then, and `node` stops waiting for its shards' read indexes then. `cut`
   * is cut when the scan's client cancels its call: the call to `node` is cancelled, and `node`
   * stops waiting then too.
   */
  readonly remoteScan?: (
    node: string,
    shards: readonly number[],
    req: ScanRequest,
    deadline: number,
    cut: CallCut,
  ) => Promise<ScanPage>;
  /**
   * Idle groups sleep (no ticks, no heartbeats) after QUIESCE_AFTER_HEARTBEATS heartbeat
   * intervals with nothing to do. Default true.
   */
  readonly quiesce?: boolean;
  /**
   * Whether the failure detector declared node `node` down (SWIM: dead or left, not merely
   * suspected): a leader's group sleeps with that node's replica lagging (RaftConfig.memberDown),
   * and wakes when wakeGroupsFor(node) says it is back. Default: no node is down.
   */
  readonly nodeDown?: (node: string) => boolean;
  /** Re-planted bugs for the simulation's canaries. Never set outside tests. */
  readonly testingBugs?: DriverTestingBugs;
  /**
   * Single node only: the operator accepts the loss of the WAL (recovery.unsafe_accept_lost_wal).
   * A WAL that is missing or empty, or that ends before what a shard's tables hold, is then
   * started again after what the tables hold (reported in `acceptedLosses`) instead of refused
   * with CAIRN_ERR_LOST_STATE. Default false.
   */
  readonly acceptLostWal?: boolean;
  /**
   * Hands what this turn has framed for clients (answers) to the sockets now: called, with the
   * transport's flush(), right before the WAL blocks the thread on a write, so that answers
   * framed since the last turn do not wait for the write, and once the answers a round settles
   * are framed.
   */
  readonly flushOutputs?: () => void;
}

export interface DriverTestingBugs {
  /** Serve and campaign before the replay is applied (issue 9, bug 1). */
  readonly staleReadAfterRestart?: boolean;
  /** A follower serves a read once the leader answered its read index, without applying to it. */
  readonly followerReadWithoutApply?: boolean;
  /** A round sends, applies and answers before its WAL records are synced (planted-bugs.ts). */
  readonly ackBeforeWalSync?: boolean;
  /** Every message of a round leaves before its WAL write, answers and votes too (not only a leader's appends). */
  readonly everyMessageBeforeWalWrite?: boolean;
  /** A snapshot install is not durable before the WAL records it (planted-bugs.ts). */
  readonly snapshotInstallNotDurable?: boolean;
  /** A leader's read takes the term confirmation of a call sent before the read arrived. */
  readonly confirmByEarlierCall?: boolean;
  /** A replica confirms any term asked, even below its own (confirmTerms). */
  readonly confirmAnyTerm?: boolean;
  /**
   * A replica that restarts holding its own vote in its group's founding term leads that term
   * again, as if it had just founded the group (ShardReplica.leadsFoundingTerm).
   */
  readonly leadFoundingTermAgain?: boolean;
  /**
   * A replica removed here and created again grants votes with its log still empty
   * (ShardReplica.recreated).
   */
  readonly voteWhenRecreated?: boolean;
  /**
   * A group founded here sends its first round's appends before that round's sync, like any
   * leader's: its founding leader may then append to the others before its founding vote is
   * durable (driver invariant 16).
   */
  readonly foundingAppendsBeforeSync?: boolean;
}

/** Events for metrics, logs and the cluster view. */
export interface ReplicationObserver {
  /**
   * Shard 0 (the meta group in cluster mode) applied a meta command, or loaded its state at
   * open or from a snapshot: the cluster's state as this node now knows it.
   */
  metaApplied?(state: MetaState): void;
  shardOpened?(shard: number, replayedFrom: number, replayedTo: number): void;
  /**
   * The shard's replica here was removed (MultiRaft.removeReplica): its WAL records dropped but
   * for its term and vote, its directory (`bytes` of tables) deleted.
   */
  shardRemoved?(shard: number, bytes: number): void;
  leaderChanged?(shard: number, leader: string | null, term: number): void;
  /**
   * An append from node `from` for `shard` was dropped: its entry at `index` holds no command
   * this build applies (`reason`). A leader of this build never sends one (Peers.receive).
   */
  malformedAppend?(from: string, shard: number, index: number, reason: string): void;
  /**
   * A message from node `from` for `shard`, which this node does not know it replicates, was
   * dropped instead of held: the held messages were at their bound (Peers.receive).
   */
  heldMessageDropped?(from: string, shard: number): void;
  /** The shard's state was replaced by its leader's snapshot (a replica far behind, or new). */
  snapshotInstalled?(shard: number, index: number, bytes: number): void;
  /**
   * A replica refilled from its peers after its shard's directory was lost (refill.ts): its log
   * is as up to date as the one it lost, and it has applied what that log had committed.
   */
  shardRefilled?(shard: number): void;
  /**
   * The directory of `shard`, whose tables were found corrupt, was moved to `into`: as the node
   * stopped on them (its peers refill the shard at the next start), or, `atOpen`, as its engine
   * opened at start (they refill it now) (corrupt-shard.ts).
   */
  shardQuarantined?(shard: number, into: string, atOpen: boolean): void;
  /**
   * The engine of `shard` moved `paths` aside as it opened (ShardEngine.quarantined): a torn
   * manifest tail it dropped, and the tables that edit may have added.
   */
  engineKeptAside?(shard: number, paths: readonly string[]): void;
  /** The directory of `shard`, whose corrupt tables stopped the node, could not be moved. */
  shardNotQuarantined?(shard: number, err: unknown): void;
  /**
   * The group's configuration changed here (a conf change applied, or a snapshot installed):
   * `voters` is the new one. For a conf change, called once its entry is applied and before the
   * Raft core takes it in (`advance`): `shardInfo()` and the core's status may still show the
   * old configuration here.
   */
  confChanged?(shard: number, voters: readonly string[]): void;
  raftState?(shard: number, term: number, commit: number): void;
  /** How many groups of this node are awake (ticking), when that changed; at most once a tick. */
  awakeGroups?(count: number): void;
  /** The node's WAL wrote a batch durably, in `ms` (WalOptions.onBatchWritten). */
  walWritten?(ms: number, bytes: number): void;
  /** The node cannot go on safely (I/O failure, invariant broken): it must stop. */
  fatal?(err: unknown): void;
}

export interface ShardInfo {
  readonly id: number;
  readonly role: string;
  readonly leader: string | null;
  readonly term: number;
  readonly commit: number;
  readonly applied: number;
  readonly leaderChanges: number;
  readonly voters: readonly string[];
  readonly learners: readonly string[];
  /** The first index still in the shard's log here (entries below it are compacted). */
  readonly logFirstIndex: number;
  /** The index the shard's engine holds durably (in SSTables). */
  readonly durableIndex: number;
  /** The group sleeps here (Raft quiescence). */
  readonly quiesced: boolean;
  /**
   * The replica here lost its shard's directory and is being refilled from its peers
   * (refill.ts): it serves no serializable read and votes only for candidates holding what it
   * lost.
   */
  readonly refilling: boolean;
}

export interface ScanRequest {
  readonly start: Uint8Array;
  /** Exclusive; null for "to the last key". */
  readonly end: Uint8Array | null;
  readonly limit: number;
  /**
   * The page's bytes at most (keys, values and ITEM_OVERHEAD_BYTES an item, scan-merge.ts);
   * a page holds one item past it when it would hold none.
   */
  readonly maxBytes: number;
  readonly linearizable: boolean;
  /**
   * Serializable scans only: a shard none of whose replicas answers is left out of the page
   * (ScanPage.skipped) instead of failing the scan. Never sent to a peer: a peer's share fails
   * whole, and the asker tries the shards' next replicas.
   */
  readonly skipUnavailable?: boolean;
}

export interface SnapshotResult {
  readonly shardId: number;
  readonly index: number;
  readonly term: number;
  readonly sizeBytes: number;
}

export class ShuttingDownError extends CairnError {
  constructor() {
    super("CAIRN_ERR_SHUTTING_DOWN", "the node is shutting down", { retryable: true });
    this.name = "ShuttingDownError";
  }
}

/** The node of a group's leader (NotLeaderError and the observers name nodes, not replicas). */
export function leaderNode(lead: string | null | undefined): NodeId | null {
  return lead === null || lead === undefined ? null : nodeId(nodeOfReplica(lead));
}
