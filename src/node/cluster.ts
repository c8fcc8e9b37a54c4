/**
 * Cluster mode (design.md §5.1): what a node knows of its cluster — the meta group's state as
 * shard 0 applied it — and the decisions that follow from it: which nodes replicate a shard,
 * whether to accept a peer's message for a shard not held here, and the one-time founding of
 * the meta group by the first seed.
 *
 * Every placement answer is a function of committed meta state only, never of this node's
 * gossip view: a shard's replicas are its assignment in the meta group. A shard is created by
 * proposing "create shard S on replicas R" to the meta group (through its leader, over the
 * peer service when that is another node), R being the top `replication_factor` members by
 * rendezvous hashing; the first committed assignment wins, later ones change nothing. Every
 * node that applied the same meta entries gives the same answer, so a shard never gets two
 * groups.
 *
 * Inside groups a node is its replica id, `<node id>@<incarnation tag>` (src/cluster/replica.ts).
 * A node whose data directory was wiped has a new incarnation, so it is a new replica: messages
 * for its old replica are dropped (MultiRaft.receive), and it asks the meta group to record it as
 * rejoined (`rejoin`, which retires the old incarnation). The leaders of its groups then replace
 * the old replica by the new one, which the log or a snapshot refills (src/node/replicas.ts).
 */
import { randomUUID } from "node:crypto";
import { join } from "node:path";
import type { PeerTls } from "../common/peer-tls.ts";
import { credentials, type ClientReadableStream, type ServiceError, status } from "@grpc/grpc-js";
import {
  CLUSTER_ID_KEY,
  ERROR_CODE_KEY,
  INCARNATION_KEY,
  LEADER_HINT_KEY,
  loadCairnProto,
} from "../api/index.ts";
import type { ClusterView as ClusterViewMessage } from "../api/generated/cairn/v1/ClusterView.ts";
import {
  BUILD_VERSION,
  type ClusterViewPublisher,
  encodeMetaCommand,
  type MetaCommand,
  type MetaMember,
  type MemberState,
  type MetaState,
  nodeOfReplica,
  rendezvousReplicas,
  replicaIdOf,
  type ShardView,
  anotherFirstSeed,
  shouldBootstrap,
  startsNewLife,
} from "../cluster/index.ts";
import { CairnError, grpcJsDeadline } from "../common/index.ts";
import { nodeId, NotLeaderError } from "../raft/index.ts";
import { type CairnConfig, sameAddress } from "../config/index.ts";
import type { Membership } from "../membership/index.ts";
import type { Logger } from "../ops/index.ts";
import { encodeMetaEntry, type GrpcTransport, type MultiRaft } from "../replication/index.ts";
import { CLUSTER_ID_FILE, readClusterIdRecord, writeClusterIdRecord } from "./cluster-id.ts";
import { MEMBER_LIMIT } from "./join-admission.ts";
import { hasLeftForGood } from "./replica-gc.ts";
import {
  answeredEnough,
  decommissionedByViews,
  peersToAsk,
  REMOVAL_CHECK_MS,
  removedByViews,
  type ViewAnswer,
} from "./removal-watch.ts";

/**
 * A build older than the cluster's version: it may not join, and a member running it stops
 * (#checkVersion). Not retryable: only another build mends it.
 */
export const CLUSTER_VERSION = "CAIRN_ERR_CLUSTER_VERSION";
/**
 * The meta group's answer to a rejoin (or a new life) of a member that has retired as many
 * incarnations as a member keeps (MAX_RETIRED_INCARNATIONS): the node stops, and starts again
 * only under another node id.
 */
export const REJOIN_LIMIT = "CAIRN_ERR_REJOIN_LIMIT";
/** The meta group's answer to the rejoin of a member decommissioned while its node was down. */
export const NODE_DECOMMISSIONED = "CAIRN_ERR_NODE_DECOMMISSIONED";

/** How often the first seed checks whether it may found the cluster. */
const BOOTSTRAP_CHECK_MS = 500;
/**
 * How long the first seed listens for gossip before it founds the cluster on itself alone
 * (`bootstrap_expect` 1, no other member seen). A first seed restarted on a wiped data directory
 * knows no cluster, and the members of the one it founded (a cluster grown by joins, whose
 * members may list only it as their seed) are its only witnesses: no seed can be asked, and
 * their gossip reaches it only once they ping it (within a few SWIM rounds while they still hold
 * it alive or suspect) or re-contact their seeds (every 30 s, src/membership/membership.ts, once
 * they hold it dead). Founding at once, it founded a second cluster under the same seed list,
 * serving an empty copy of the data. 30 s and five SWIM rounds: a fresh one-node cluster is
 * founded that much later.
 */
export const FOUNDING_LISTEN_MS = 35_000;
/** How long a peer's cluster id may take to answer before the check is retried. */
const PROBE_TIMEOUT_MS = 2_000;
/** How often a node that does not know its cluster yet offers to rejoin it (see rejoinLoop). */
const REJOIN_CHECK_MS = 2_000;

/**
 * Why a node is not yet a member of its cluster, as the node that runs the founding and the
 * join knows it (notServingReason): the first seed's reason for not having founded yet, and the
 * meta group's refusal of its last join. Null for each that does not apply.
 */
export interface Admission {
  readonly foundingWait: string | null;
  readonly joinRefusal: string | null;
}

/**
 * How this node's meta commands reach the meta group's leader. `leaderProposer` is the node's
 * own (its store when it leads the meta group, else the leader's node over the peer service); a
 * shard worker that does not hold shard 0 hands its commands to the one that does
 * (src/node/siblings.ts).
 */
export interface MetaProposer {
  /**
   * Proposes `cmd`, following leader hints and retrying until `timeoutMs` have passed (trying
   * node `first` first, when given); rejects with the last error after that, or at once when
   * the meta group refuses the command (CAIRN_ERR_INVALID_ARGUMENT, CAIRN_ERR_LOST_STATE).
   */
  propose(cmd: MetaCommand, timeoutMs: number, first?: string | null): Promise<void>;
}

/** The proposer of a node that holds shard 0: its own store, or the leader over `transport`. */
export function leaderProposer(store: MultiRaft, transport: GrpcTransport): MetaProposer {
  return {
    propose: (cmd, timeoutMs, first = null) =>
      proposeViaLeader(cmd, store.nodeId, store, transport, performance.now() + timeoutMs, first),
  };
}

export class ClusterState {
  readonly #config: CairnConfig;
  readonly #log: Logger;
  readonly #views: ClusterViewPublisher;
  #meta: MetaState | null = null;
  /** Shard creations under way here (one per shard), each waiting for its assignment here. */
  readonly #creating = new Map<number, Promise<void>>();
  readonly #waiters = new Map<number, () => void>();
  /** #nextState's: called once each, at the next state applied. */
  readonly #stateWaiters = new Set<() => void>();

  /** This data directory's incarnation (src/node/incarnation.ts). */
  readonly incarnation: string;
  /** This node's id inside its groups. */
  readonly replicaId: string;
  /** Called once if the meta group retired this data directory's incarnation. */
  readonly #onLostState: (err: CairnError) => void;
  /** Set by attach(): what this node's own meta proposals go through. */
  #proposer: MetaProposer | null = null;
  /** A rejoin proposal is under way, or went through. */
  #rejoining = false;
  #rejoined = false;
  #lost = false;
  /**
   * This member was decommissioned by entries its meta replica never applied: while its node
   * was down (the meta group refused its rejoin so), or as its learner of the meta group was
   * removed while it was cut off (its peers' views say so: removalLoop).
   */
  #decommissionedUnseen = false;
  /** The node is stopping: no more rejoin attempts. */
  #closed = false;
  /** Ends the loops' waits (#pause) at close. */
  readonly #wakers = new Set<() => void>();
  /** replicasNow's answers for the meta state here (cleared when it changes). */
  readonly #replicasNow = new Map<number, readonly string[]>();
  /** A join proposal is under way (#join). */
  #joining = false;
  /** A set-member proposal of this node's addresses is under way (#checkAddresses). */
  #reportingAddresses = false;
  /** Why the meta group refused this node's last join, null when it did not. */
  #joinRefusal: string | null = null;
  /**
   * The first seed, before it founds the cluster (bootstrapLoop): why it has not yet, e.g.
   * "waiting for members: 1 of bootstrap_expect 3 seen". Null on every other node.
   */
  #foundingWait: string | null = null;
  #self: { rpcAddr: string; httpAddr: string } | null = null;
  readonly #peerTls: PeerTls | undefined;
  /** The highest cluster version this node's build runs (BUILD_VERSION, or a test's). */
  readonly build: number;
  /** listUnheld's question: whether the view lists `shard` by its placement; null: none does. */
  #unheld: ((shard: number) => boolean) | null = null;
  /** ownShards' question: whether this shard worker drives `shard`'s view. */
  #owns: (shard: number) => boolean = () => true;
  /** How long the first seed listens before founding on itself alone (FOUNDING_LISTEN_MS). */
  readonly #foundingListenMs: number;
  /** The cluster id the data directory records (src/node/cluster-id.ts), "" for none. */
  #recordedClusterId = "";
  /** This node writes the record (it holds shard 0: loadClusterIdRecord). */
  #recordsClusterId = false;
  /** The record's write under way, if any. */
  #recording: Promise<void> = Promise.resolve();

  constructor(
    config: CairnConfig,
    log: Logger,
    views: ClusterViewPublisher,
    incarnation: string,
    onLostState: (err: CairnError) => void,
    /** Peer TLS: how this node dials its peers (src/common/peer-tls.ts); undefined: cleartext. */
    peerTls?: PeerTls,
    build = BUILD_VERSION,
    /** FOUNDING_LISTEN_MS, or a test's (CAIRN_TESTING_FOUNDING_LISTEN_MS). */
    foundingListenMs = FOUNDING_LISTEN_MS,
  ) {
    this.#peerTls = peerTls;
    this.#foundingListenMs = foundingListenMs;
    this.build = build;
    this.#config = config;
    this.#log = log;
    this.#views = views;
    this.incarnation = incarnation;
    this.replicaId = replicaIdOf(config.node_id, incarnation);
    this.#onLostState = onLostState;
    views.setIncarnation(incarnation);
  }

  /**
   * Reads the cluster id the data directory records (src/node/cluster-id.ts), before shard 0
   * opens; `writes`: this node holds shard 0 and records the id once it learns it.
   */
  async loadClusterIdRecord(writes: boolean): Promise<void> {
    this.#recordsClusterId = writes;
    const recorded = await readClusterIdRecord(this.#config.data_dir);
    if (recorded === null) {
      this.#log.warn("the data directory's record of its cluster id does not check; ignored", {
        file: join(this.#config.data_dir, CLUSTER_ID_FILE),
      });
    }
    this.#recordedClusterId = recorded ?? "";
    // Its view names it too: a first seed asking whether a cluster exists (bootstrapLoop) must
    // not take this member for a new node while its shard 0 is refilled.
    if (this.#recordedClusterId !== "" && this.#meta === null)
      this.#views.setClusterId(this.#recordedClusterId);
  }

  /**
   * The cluster id this node's peer calls are checked against and name (handshake.ts): the meta
   * state's, else the one the data directory records. A member whose shard 0 is being refilled
   * (its directory lost) knows no meta state, but still belongs to its cluster: it must not take
   * another cluster's messages or snapshots meanwhile (src/node/cluster-id.ts).
   */
  get peerClusterId(): string {
    return this.clusterId || this.#recordedClusterId;
  }

  /** Resolves once the record's write under way, if any, ended (tests). */
  async clusterIdRecorded(): Promise<void> {
    await this.#recording;
  }

  /** The meta state names cluster `id`: the data directory records it, once. */
  #recordClusterId(id: string): void {
    if (this.#recordedClusterId === id) return;
    if (this.#recordedClusterId !== "") {
      // Never rewritten: the handshakes refuse another cluster, so this is a directory put
      // together from two clusters' files.
      this.#log.error("shard 0 holds another cluster's state than the data directory records", {
        cluster_id: id,
        recorded_cluster_id: this.#recordedClusterId,
      });
      this.#recordedClusterId = id;
      return;
    }
    this.#recordedClusterId = id;
    if (!this.#recordsClusterId) return;
    const dataDir = this.#config.data_dir;
    this.#recording = this.#recording
      .then(() => writeClusterIdRecord(dataDir, id))
      .catch((err: unknown) => {
        this.#log.error("recording the data directory's cluster id failed", {
          error: err instanceof Error ? err.message : String(err),
        });
      });
  }

  /** What this node's own meta proposals (creations, rejoins, preferred leaders) go through. */
  attach(proposer: MetaProposer): void {
    this.#proposer = proposer;
    if (this.#meta !== null) {
      this.#checkIncarnation(this.#meta);
      this.#checkAddresses(this.#meta);
    }
  }

  /** The node is stopping: rejoin attempts stop (one in flight finishes on its own). */
  close(): void {
    this.#closed = true;
    for (const wake of [...this.#wakers]) wake();
  }

  /** Proposes `cmd` to the meta group (MetaProposer.propose); fails before attach(). */
  propose(cmd: MetaCommand, timeoutMs: number, first: string | null = null): Promise<void> {
    if (this.#proposer === null) {
      return Promise.reject(
        new CairnError("CAIRN_ERR_NOT_READY", "this node's storage is not open yet", {
          retryable: true,
        }),
      );
    }
    return this.#proposer.propose(cmd, timeoutMs, first);
  }

  /** The cluster id, "" until the meta group's bootstrap reached this node. */
  get clusterId(): string {
    return this.#meta?.clusterId ?? "";
  }

  get meta(): MetaState | null {
    return this.#meta;
  }

  /**
   * The initial voters (replica ids) of `shard`'s group; empty until the meta group recorded
   * the shard.
   */
  replicasOf(shard: number): readonly string[] {
    const meta = this.#meta;
    if (meta === null || meta.clusterId === null) return [];
    return meta.shards.get(shard) ?? [];
  }

  /**
   * The replicas (replica ids) of `shard` as the meta state places them now: each of its nodes'
   * current replica (MultiRaftOptions.replicasNow).
   */
  replicasNow(shard: number): readonly string[] {
    const meta = this.#meta;
    if (meta === null || meta.clusterId === null) return [];
    // Asked on every write (Groups.placedElsewhere): kept until the meta state changes.
    let now = this.#replicasNow.get(shard);
    if (now === undefined) {
      now = meta.replicasNow(shard);
      this.#replicasNow.set(shard, now);
    }
    return now;
  }

  /**
   * Drops what replicasNow kept that `state` may have changed: the shards whose placement is not
   * `previous`'s when only placements changed (a move, its settling: a few a second during a
   * rebalance, where clearing all made every write work its shard's replicas out again), else
   * everything; only `changed` when it names the shards (MetaState.shardsChangedSince).
   */
  #forgetReplicasNow(
    previous: MetaState | null,
    state: MetaState,
    changed: readonly number[] | null,
  ): void {
    if (changed !== null) {
      for (const shard of changed) this.#replicasNow.delete(shard);
      return;
    }
    if (
      previous === null ||
      previous.clusterId !== state.clusterId ||
      previous.members !== state.members ||
      previous.shards !== state.shards
    ) {
      this.#replicasNow.clear();
      return;
    }
    if (previous.placements === state.placements) return;
    for (const [shard, placement] of state.placements) {
      if (previous.placements.get(shard) !== placement) this.#replicasNow.delete(shard);
    }
    for (const shard of previous.placements.keys()) {
      if (!state.placements.has(shard)) this.#replicasNow.delete(shard);
    }
  }

  /**
   * The replica that should start `shard`'s first election (MultiRaftOptions.firstCampaigner):
   * the one of the node that should lead it (MetaState.leaderWanted: its preferred leader, a
   * member with room when that one's disk is full), while `alive` says that node is; else
   * undefined (whoever creates the group campaigns).
   */
  firstCampaigner(shard: number, alive: (node: string) => boolean): string | undefined {
    const meta = this.#meta;
    const node = meta?.leaderWanted(shard);
    if (meta === null || node === undefined || !alive(node)) return undefined;
    return meta.replicaOf(node);
  }

  /** The nodes that replicate `shard`, in rank order (the first is its preferred leader). */
  nodesOf(shard: number): readonly string[] {
    return this.#meta?.nodesOf(shard) ?? [];
  }

  /** The shards the meta group places on `node` (shard 0 included when it is a voter). */
  shardsOn(node: string): number[] {
    const meta = this.#meta;
    if (meta === null) return [];
    return [...meta.shards.keys()].filter((id) => meta.nodesOf(id).includes(node));
  }

  /**
   * Whether the group's voters (replica ids, as a member of it sees them) miss one of the
   * shard's nodes' current replicas: a replica lost (its node rejoined and is refilling).
   */
  lacksReplica(shard: number, voters: readonly string[]): boolean {
    const meta = this.#meta;
    if (meta === null) return false;
    return meta.nodesOf(shard).some((n) => !voters.includes(meta.replicaOf(n)));
  }

  /** The shards the meta group recorded (shard 0 included), as of the state applied here. */
  createdShards(): number[] {
    return [...(this.#meta?.shards.keys() ?? [])];
  }

  /**
   * Resolves once the meta state here records shard `id`: at once if it does, else after
   * proposing its creation to the meta group's leader (this node, or another over the peer
   * service) and waiting for the assignment to be applied here. Fails (retryably) when that
   * takes longer than `timeoutMs`.
   */
  ensureShard(id: number, timeoutMs: number): Promise<void> {
    if (this.#meta?.shards.has(id) === true) return Promise.resolve();
    let pending = this.#creating.get(id);
    if (pending === undefined) {
      pending = this.#create(id, timeoutMs).finally(() => this.#creating.delete(id));
      this.#creating.set(id, pending);
    }
    return pending;
  }

  async #create(id: number, timeoutMs: number): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const meta = this.#meta;
      if (meta === null || meta.clusterId === null) {
        throw new CairnError("CAIRN_ERR_NOT_READY", "this node has not joined its cluster yet", {
          retryable: true,
        });
      }
      const replicas = placement(meta, id);
      try {
        await this.propose(
          { op: "create-shard", shard: id, replicas },
          Math.max(1, deadline - performance.now()),
        );
        break;
      } catch (err) {
        // The meta group refuses (metaRefusal) a placement on a member no longer active, or on
        // too few or too many (a member decommissioned, dead or joined since the state this
        // node applied): the shard is placed again from the next state applied here, while
        // time is left. (It had failed the client's write: a decommission failed a Put now and
        // then, answered UNAVAILABLE, which a client takes for a write's unknown outcome.)
        if (this.#meta?.shards.has(id) === true) return;
        const refused = errorCodeOf(err) === "CAIRN_ERR_INVALID_ARGUMENT";
        if (!refused || !(await this.#nextState(deadline))) {
          throw new CairnError(
            "CAIRN_ERR_SHARD_CREATION",
            `shard ${id} could not be created: ${err instanceof Error ? err.message : String(err)}`,
            { retryable: true, cause: err },
          );
        }
        if (this.#meta?.shards.has(id) === true) return;
      }
    }
    // Applied on the meta leader; here once this node's replica of the meta group catches up.
    if (this.#meta?.shards.has(id) === true) return;
    let timer: NodeJS.Timeout | undefined;
    try {
      await new Promise<void>((resolve, reject) => {
        this.#waiters.set(id, resolve);
        // The proposal may have used up the timeout (one this node's store took has no deadline
        // of its own): a delay in the past is 0, not 1 ms and Node's warning on stderr.
        timer = setTimeout(
          () => {
            const error = `shard ${id}'s creation is not applied here yet`;
            reject(new CairnError("CAIRN_ERR_SHARD_CREATION", error, { retryable: true }));
          },
          Math.max(0, deadline - performance.now()),
        );
      });
    } finally {
      clearTimeout(timer);
      this.#waiters.delete(id);
    }
  }

  /**
   * Whether this node takes a shard it holds no state for and is not an initial voter of, as an
   * empty replica its leader fills: the meta group before this node learnt of it (the founding
   * seed names this node a voter, or the meta leader added it back after a rejoin, and the
   * group's log is how it learns), or a shard the meta group places on this node (a rejoined
   * node's replicas, added back by their leaders).
   */
  acceptsReplica(shard: number): boolean {
    if (shard === 0 && this.clusterId === "") return true;
    // Every member but a retired one keeps a copy of the meta group (src/node/replicas.ts).
    return this.#meta?.keepsReplica(this.#config.node_id, shard) ?? false;
  }

  /**
   * Why this node answers no client request, or null when it does: it is not (yet) an active
   * member of its cluster. A `dead` member serves (the meta leader marks it active again once
   * gossip sees it) and a `decommissioning` one too, until its replicas are gone.
   */
  notServingReason(): string | null {
    const id = this.#config.node_id;
    const meta = this.#meta;
    if (meta === null || meta.clusterId === null) {
      if (this.#foundingWait !== null) {
        return `node ${id} is not a member of a cluster yet: it is the first seed, which founds the cluster, and has not yet: ${this.#foundingWait}`;
      }
      return this.#joinRefusal !== null
        ? `node ${id} is not a member of the cluster: ${this.#joinRefusal}`
        : `node ${id} is not a member of a cluster yet: it is asking the members it reaches through its seeds to admit it`;
    }
    const state = this.#stateOf(meta);
    switch (state) {
      case undefined:
        return `node ${id} is not a member of cluster ${meta.clusterId}`;
      case "joining":
        return `node ${id} is joining cluster ${meta.clusterId}: it serves requests once it has caught up on the cluster's metadata`;
      case "decommissioned":
      case "removed":
        return `node ${id} was ${state} from cluster ${meta.clusterId}: it serves no requests; send them to another node`;
      default:
        return null;
    }
  }

  /**
   * Why this node's cluster view no longer follows the cluster, or null: a member decommissioned
   * (or removed) is no longer in the meta group, so its view stays as it was when it left, and
   * a client following it would route on placements and leaders that have moved since.
   */
  staleViewReason(): string | null {
    const meta = this.#meta;
    const id = this.#config.node_id;
    if (meta === null || meta.clusterId === null || !this.#hasLeftForGood(meta)) return null;
    const state = this.#stateOf(meta);
    return `node ${id} was ${state} from cluster ${meta.clusterId}: its cluster view stopped when it left; watch another node`;
  }

  /**
   * Called with each other member that the meta group records as rejoined (a new incarnation):
   * the groups its old replica led sleep with a leader that will never wake them.
   */
  onMemberRejoined: (node: string) => void = () => undefined;

  /**
   * Called with each other member that a state applied here records as having left the cluster
   * for good (decommissioned, removed: hasLeftForGood) where the state before did not: what the
   * node keeps of each peer (its metric series) goes with it. Not for a member only dead, which
   * may come back.
   */
  onMemberLeft: (node: string) => void = () => undefined;

  /** Called after each state the meta group applied here (the cluster view follows it). */
  onMetaChanged: () => void = () => undefined;

  /**
   * Called after a state that started or settled a move (move-shard, settle-shard): a group's
   * leader may take the move's first step, the allocator may start the next move.
   */
  onMovesChanged: () => void = () => undefined;

  /**
   * Resolves true once the meta group applies its next state here, false at `deadline` (a
   * performance.now() time) if it has not.
   */
  #nextState(deadline: number): Promise<boolean> {
    return new Promise((resolve) => {
      const done = (applied: boolean): void => {
        clearTimeout(timer);
        this.#stateWaiters.delete(onApplied);
        resolve(applied);
      };
      const onApplied = (): void => done(true);
      const timer = setTimeout(() => done(false), Math.max(0, deadline - performance.now()));
      this.#stateWaiters.add(onApplied);
    });
  }

  /** Shard 0 applied a meta command (or reloaded its state after a restart or a snapshot). */
  applied(state: MetaState): void {
    const before = this.clusterId;
    const previous = this.#meta;
    this.#meta = state;
    for (const resolve of [...this.#stateWaiters]) resolve();
    // The one shard a create, a move or a settling changed; null: any may have.
    const changed = previous === null ? null : state.shardsChangedSince(previous);
    this.#forgetReplicasNow(previous, state, changed);
    for (const [id, m] of state.members) {
      if (id === this.#config.node_id) continue;
      const was = previous?.members.get(id);
      if (was !== undefined && was.incarnation !== m.incarnation) this.onMemberRejoined(id);
      if (hasLeftForGood(state, id) && !hasLeftForGood(previous, id)) this.onMemberLeft(id);
    }
    for (const [id, resolve] of this.#waiters) {
      if (state.shards.has(id)) resolve();
    }
    if (state.clusterId !== null) {
      this.#recordClusterId(state.clusterId);
      this.#views.setClusterId(state.clusterId);
      this.#views.setClusterVersion(state.version);
    }
    if (before === "" && state.clusterId !== null) {
      this.#log.info("member of cluster", {
        cluster_id: state.clusterId,
        members: [...state.members.keys()],
        replication_factor: state.replicationFactor,
      });
      if (state.replicationFactor !== this.#config.cluster.replication_factor) {
        // Fixed when the cluster was founded: this node's setting is not used.
        this.#log.warn(
          "the cluster's replication_factor, fixed at its founding, differs from this node's configuration: the cluster's applies",
          {
            cluster_replication_factor: state.replicationFactor,
            replication_factor: this.#config.cluster.replication_factor,
          },
        );
      }
    }
    this.#checkIncarnation(state);
    this.#checkVersion(previous, state);
    this.#checkAddresses(state);
    if (state.totalShards !== 0 && state.totalShards !== this.#config.cluster.total_shards) {
      // MultiRaft refuses a data directory with more shards; a committed meta record that
      // disagrees with the configuration is the same mistake, found later.
      this.#log.error("the cluster's total_shards differs from this node's configuration", {
        cluster_total_shards: state.totalShards,
        total_shards: this.#config.cluster.total_shards,
      });
    }
    this.#showUnheld(previous, state, changed);
    this.onMetaChanged();
    const wasMoving = previous?.movingShards() ?? [];
    const moving = state.movingShards();
    if (
      previous !== null &&
      (wasMoving.length !== moving.length || wasMoving.some((s, i) => s !== moving[i]))
    ) {
      this.#settledHere(previous, state);
      this.onMovesChanged();
    }
  }

  /**
   * A move that took `shard` off this node settled: this node's view of the shard shows where the
   * meta group places it now (placedView).
   */
  #settledHere(previous: MetaState, state: MetaState): void {
    const still = new Set(state.movingShards());
    for (const shard of previous.movingShards()) {
      if (!still.has(shard)) this.#showPlaced(shard);
    }
  }

  /**
   * `view` of a shard as this node's replica sees it, or, when a move took the shard off this
   * node and settled, where the meta group places it. A replica moved off may never apply the
   * change that removed it (the group's leader stops sending to a replica it removed): it keeps
   * the move's configuration, loses its leader after an election timeout, and would show both
   * until replica GC deletes it, and then for good (bench:rebalance: `cairn cluster` listing a
   * shard with four replicas and no leader, minutes after the move). The leader shown is the
   * replica's or the last one shown, when it is one of the shard's nodes.
   */
  placedView(view: ShardView): ShardView {
    const meta = this.meta;
    if (meta === null || meta.isMoving(view.id)) return view;
    const nodes = meta.nodesOf(view.id);
    if (nodes.length === 0 || nodes.includes(this.#config.node_id)) return view;
    const was = this.#views.shard(view.id);
    let leader = "";
    if (nodes.includes(view.leader)) leader = view.leader;
    else if (was !== undefined && nodes.includes(was.leader)) leader = was.leader;
    return { id: view.id, leader, replicas: nodes, term: Math.max(view.term, was?.term ?? 0) };
  }

  /**
   * From now on, this node's view lists every shard the meta group records for which `unheld`
   * answers true (a shard of this worker with no replica open here) where the meta group places
   * it: its nodes, and its leader only when this node's view already knew it there ("" otherwise,
   * term 0 if never known here). Without it a node's view listed only the shards it holds, about
   * 3/n of them on n nodes: `cairn cluster` counted and showed a fraction of the shards, and a
   * routing client knew neither the leader nor the replicas of the others.
   */
  listUnheld(unheld: (shard: number) => boolean): void {
    this.#unheld = unheld;
    if (this.#meta !== null) this.#showUnheld(null, this.#meta);
  }

  /**
   * This node runs shard workers: this one sets the view of the shards `owns` answers true for,
   * and never of another's. Each worker keeps a copy of the node's view, its siblings' shards as
   * they share them, and passes on what it sets (SharedViews); a copy is older than its owner's
   * while a share is on its way, so a worker that set another's shard from its copy (a settled
   * move, a leader gone) could pass the owner its own older view back: a replica that had just
   * applied its move's last change then named the removed member for good (chaos seed 7401).
   */
  ownShards(owns: (shard: number) => boolean): void {
    this.#owns = owns;
  }

  /**
   * Sets the view of each shard listUnheld covers whose placement `state` changed (or all); only
   * those of `step` when it names them (MetaState.shardsChangedSince).
   */
  #showUnheld(
    previous: MetaState | null,
    state: MetaState,
    step: readonly number[] | null = null,
  ): void {
    const unheld = this.#unheld;
    if (unheld === null || state.clusterId === null) return;
    const changed =
      previous === null ||
      previous.clusterId !== state.clusterId ||
      previous.shards !== state.shards ||
      previous.placements !== state.placements;
    if (!changed) return;
    if (step !== null) {
      for (const id of step) if (unheld(id)) this.#showPlacement(state, id);
      return;
    }
    for (const [id, initial] of state.shards) {
      if (
        previous !== null &&
        previous.shards.get(id) === initial &&
        previous.placements.get(id) === state.placements.get(id) &&
        this.#views.shard(id) !== undefined
      )
        continue;
      if (unheld(id)) this.#showPlacement(state, id);
    }
  }

  /** Sets the view of `id`, which no replica here drives, to where `state` places it. */
  #showPlacement(state: MetaState, id: number): void {
    const nodes = state.nodesOf(id);
    const was = this.#views.shard(id);
    const leader = was !== undefined && nodes.includes(was.leader) ? was.leader : "";
    this.#views.setShard({ id, leader, replicas: nodes, term: was?.term ?? 0 });
  }

  /**
   * Member `node` is gone (gossip: dead or left): the shards whose leader this node knows only
   * second-hand stop naming it. Such a leader was learnt while a replica was here, before a move
   * took it off; the replicas elsewhere elect another, which this node does not see. Named on, a
   * dead member led a third of them in `cairn cluster` (which asked no other member: every leader
   * seemed known) and routing clients sent their calls to it first. Unknown (""), a reader asks
   * a replica. A shard with a replica here is its replica's say.
   */
  forgetLeader(node: string): void {
    const meta = this.meta;
    if (meta === null) return;
    const self = this.#config.node_id;
    for (const id of meta.shards.keys()) {
      if (!this.#owns(id)) continue;
      const view = this.#views.shard(id);
      if (view === undefined || view.leader !== node) continue;
      if (meta.nodesOf(id).includes(self)) continue;
      this.#views.setShard({ ...view, leader: "" });
    }
  }

  /** Replica GC deleted this node's replica of `shard`: its view is the meta group's placement. */
  replicaRemoved(shard: number): void {
    this.#showPlaced(shard);
  }

  /** Sets this node's view of `shard`, when it has one and it is this worker's, through placedView. */
  #showPlaced(shard: number): void {
    if (!this.#owns(shard)) return;
    const was = this.#views.shard(shard);
    if (was !== undefined) this.#views.setShard(this.placedView(was));
  }

  /**
   * This node's replica against the one the meta group records for it: the same → nothing;
   * another, current → this data directory is new (wiped or replaced): rejoin as a new replica;
   * this data directory's incarnation retired → it is an old copy of the member's state, which
   * must not come back (the node stops).
   */
  #checkIncarnation(state: MetaState): void {
    const me = state.members.get(this.#config.node_id);
    if (state.clusterId === null || me === undefined || this.#lost) return;
    if (me.retired?.includes(this.incarnation) === true) {
      this.#stopOnLostState(state.clusterId);
      return;
    }
    if (state.replicaOf(me.id) !== this.replicaId) this.#rejoin(null);
  }

  /**
   * The cluster's version against this build's: a cluster running a version this build does
   * not have (raised while this node ran a newer build, or found on a data directory it left
   * behind) holds meta records and follows rules this build does not know: the node stops,
   * once, saying which build it needs. A raise is logged.
   */
  #checkVersion(previous: MetaState | null, state: MetaState): void {
    if (previous !== null && previous.clusterId !== null && previous.version !== state.version)
      this.#log.info("the cluster's version was raised", {
        from: previous.version,
        to: state.version,
      });
    if (state.version <= this.build || this.#lost) return;
    this.#lost = true;
    this.#onLostState(
      new CairnError(
        CLUSTER_VERSION,
        `cluster ${state.clusterId ?? "?"} runs cluster version ${state.version}, and this build runs versions up to ${this.build}: run a build that has version ${state.version} (docs/operations.md, "Upgrading")`,
      ),
    );
  }

  /** This data directory is an old copy of its member's state: the node stops, once. */
  #stopOnLostState(clusterId: string): void {
    if (this.#lost) return;
    this.#lost = true;
    this.#onLostState(
      new CairnError(
        "CAIRN_ERR_LOST_STATE",
        `${this.#config.data_dir} holds incarnation ${this.incarnation} of member ${this.#config.node_id}, which cluster ${clusterId} retired when the member rejoined with a new data directory: this is an old copy of its state and must not serve. Start the node on an empty data directory to rejoin`,
      ),
    );
  }

  /**
   * A peer addressed `stale`, a replica of this node that this data directory is not: the
   * cluster still counts on state this node lost. Asks to rejoin through that peer.
   */
  noticeStaleReplica(from: string, stale: string): void {
    if (this.#rejoining || this.#rejoined || nodeOfReplica(stale) !== this.#config.node_id) return;
    this.#log.warn(
      "peers address another incarnation of this node, whose state this data directory does not hold (it was wiped or replaced, or it is an old copy): asking the meta group to record this one",
      { addressed_replica: stale, replica: this.replicaId, peer: from },
    );
    this.#rejoin(from);
  }

  /**
   * Proposes `rejoin` with this data directory's incarnation through the meta group's leader
   * (starting at `hint`), retrying until it goes through. Harmless when the meta group already
   * records this incarnation (nothing changes) or the cluster is not founded (refused, retried);
   * stops the node (CAIRN_ERR_LOST_STATE) when the meta group has retired it. With `once`
   * (rejoinLoop's offers), a failure is not retried through the same peer: the loop's next pass
   * asks the next live peer, since `hint` may be no member at all (another node joining).
   */
  #rejoin(hint: string | null, once = false): void {
    if (this.#rejoining || this.#rejoined || this.#lost || this.#proposer === null) return;
    this.#rejoining = true;
    const cmd: MetaCommand = {
      op: "rejoin",
      id: this.#config.node_id,
      incarnation: this.incarnation,
    };
    // Known here already: a restart on this data directory asking the cluster to confirm it.
    const confirming = this.#meta?.replicaOf(this.#config.node_id) === this.replicaId;
    const attempt = (): void => {
      if (this.#closed) return;
      this.propose(cmd, 10_000, hint)
        .then(() => {
          this.#rejoining = false;
          this.#rejoined = true;
          this.#log.info(
            confirming
              ? "the cluster confirms this data directory's incarnation"
              : "the cluster records this node's new incarnation",
            { incarnation: this.incarnation, replica: this.replicaId },
          );
        })
        .catch((err: unknown) => {
          if (errorCodeOf(err) === "CAIRN_ERR_LOST_STATE") {
            this.#rejoining = false;
            this.#stopOnLostState(this.#meta?.clusterId ?? "");
            return;
          }
          if (errorCodeOf(err) === NODE_DECOMMISSIONED) {
            // Decommissioned while it was down: its meta state here never learns it (it left
            // the meta group), so this answer is kept, and it serves nothing from now on.
            this.#rejoining = false;
            this.#rejoined = true;
            this.#markDecommissionedUnseen();
            this.#log.warn(
              "this member was decommissioned while it was down: it serves no requests, and stops once it is removed (cairn node remove); start it on an empty data directory to bring the machine back",
              { error: describe(err) },
            );
            return;
          }
          const final = errorCodeOf(err);
          if ((final === "CAIRN_ERR_NODE_REMOVED" || final === REJOIN_LIMIT) && !this.#lost) {
            // This node's id was retired for good (cairn node remove), or the member retired as
            // many incarnations as it keeps: asking again changes nothing, and it must not serve.
            this.#lost = true;
            this.#rejoining = false;
            this.#onLostState(new CairnError(final, describe(err)));
            return;
          }
          if (errorCodeOf(err) === "CAIRN_ERR_DUPLICATE_NODE_ID" && !this.#lost) {
            // Another node runs as this id's recorded member: this one must not replace it.
            this.#lost = true;
            this.#rejoining = false;
            this.#onLostState(
              new CairnError(
                "CAIRN_ERR_DUPLICATE_NODE_ID",
                String((err as { details?: unknown }).details ?? (err as Error).message),
              ),
            );
            return;
          }
          const grpcCode = (err as { code?: unknown }).code;
          if (grpcCode === status.PERMISSION_DENIED && /is not a member/.test(describe(err))) {
            // A node new to the cluster: it asks to join instead (design.md §5.2).
            this.#rejoining = false;
            this.#join(hint);
            return;
          }
          // A refusal by the peer (another cluster, another number of shard workers, not a
          // member) is a configuration mistake an operator must see, and so is a cluster with
          // no room for another node (join-admission.ts); the rest is the cluster being busy.
          const refused =
            grpcCode === status.FAILED_PRECONDITION ||
            grpcCode === status.PERMISSION_DENIED ||
            errorCodeOf(err) === MEMBER_LIMIT;
          if (isTlsMismatch(err)) {
            this.#log.error(TLS_MISMATCH, { error: describe(err) });
          } else {
            this.#log[refused ? "warn" : "debug"]("rejoining failed; retrying", {
              error: err instanceof Error ? err.message : String(err),
              ...(hint === null ? {} : { through: hint }),
            });
          }
          if (once) {
            this.#rejoining = false;
            return;
          }
          const timer = setTimeout(attempt, 1_000);
          timer.unref();
        });
    };
    attempt();
  }

  /**
   * Asks the meta group (through `hint`, a live member) to admit this node as a `joining`
   * member with this data directory's incarnation, retrying until the meta group records it:
   * then the meta group's leader adds this node to its group as a learner, and this node learns
   * the cluster from its log (rejoinLoop stops once the cluster id is known here). A refusal
   * (the id was removed for good, or belongs to a member with another data directory) is
   * logged and kept for notServingReason; the attempts go on, slowly, in case it was a race.
   */
  #join(hint: string | null): void {
    if (this.#joining || this.#lost || this.#closed || this.#proposer === null) return;
    this.#joining = true;
    const c = this.#config;
    const cmd: MetaCommand = {
      op: "join",
      member: {
        id: c.node_id,
        rpcAddr: this.#self?.rpcAddr ?? c.rpc_addr,
        httpAddr: this.#self?.httpAddr ?? c.http_addr,
        incarnation: this.incarnation,
        ...(this.build > 1 ? { build: this.build } : {}),
      },
    };
    this.propose(cmd, 10_000, hint)
      .then(() => {
        this.#setJoinRefusal(null);
        this.#log.info("the cluster admitted this node as a joining member", {
          replica: this.replicaId,
        });
      })
      .catch((err: unknown) => {
        const code = errorCodeOf(err);
        if (
          (code === "CAIRN_ERR_NODE_REMOVED" ||
            code === CLUSTER_VERSION ||
            code === REJOIN_LIMIT) &&
          !this.#lost
        ) {
          this.#lost = true;
          this.#onLostState(new CairnError(code, describe(err)));
          return;
        }
        if (errorCodeOf(err) === MEMBER_LIMIT) {
          // No room yet (cluster.max_joining, or the members' bound): asked again on the next
          // pass, and said once per reason, not every 2 s.
          const why = describe(err);
          if (this.#joinRefusal !== why) {
            this.#log.warn("the cluster has no room for this node yet; asking again", {
              error: why,
            });
          }
          this.#setJoinRefusal(why);
          return;
        }
        const refused = errorCodeOf(err) === "CAIRN_ERR_INVALID_ARGUMENT";
        if (refused) this.#setJoinRefusal(describe(err));
        // TLS on one side only: a configuration mistake, said at every attempt.
        const tlsMismatch = isTlsMismatch(err);
        this.#log[refused || tlsMismatch ? "error" : "debug"](
          tlsMismatch ? TLS_MISMATCH : "joining the cluster failed; retrying",
          { error: describe(err) },
        );
      })
      .finally(() => {
        // rejoinLoop offers again on its next pass while the cluster is unknown here.
        this.#joining = false;
      });
  }

  /** This node's advertised addresses (set by the membership's start), for its join. */
  setSelf(self: { rpcAddr: string; httpAddr: string }): void {
    this.#self = self;
    // Shown before bootstrapLoop probes anyone: of two first seeds, the later to show it sees
    // the other's (bootstrapLoop), so they never both found.
    this.#views.setFirstSeed(this.#isFirstSeed(self.rpcAddr));
    if (this.#meta !== null) this.#checkAddresses(this.#meta);
  }

  /**
   * Whether seed_nodes[0] names `rpcAddr`, this node's advertised address, however it is written
   * (sameAddress), as shouldBootstrap takes it.
   */
  #isFirstSeed(rpcAddr: string): boolean {
    const first = this.#config.cluster.seed_nodes[0];
    return first !== undefined && sameAddress(first, rpcAddr);
  }

  /**
   * This node's addresses against the ones the meta group records for it: a member restarted on
   * its data directory at other addresses (a pod whose IP changed) proposes `set-member` with
   * the ones it advertises now, through the meta group's leader, again every few seconds until
   * it goes through. Without it the recorded addresses stayed those of its join or founding for
   * good, and what reads them went to the old ones: the duplicate node id probe (checkRejoin:
   * nothing answered there, so a node started with this member's id evicted it), a peer's
   * address while gossip holds the member dead, the members' connection reserve. Only once
   * this data directory's incarnation is the recorded one (a wiped node rejoins first; the
   * meta group refuses another incarnation's set-member), and not once it left for good.
   */
  #checkAddresses(state: MetaState): void {
    const self = this.#self;
    const id = this.#config.node_id;
    const me = state.members.get(id);
    if (
      self === null ||
      me === undefined ||
      state.clusterId === null ||
      this.#reportingAddresses ||
      this.#lost ||
      this.#closed ||
      this.#proposer === null ||
      state.replicaOf(id) !== this.replicaId ||
      this.#hasLeftForGood(state) ||
      (me.rpcAddr === self.rpcAddr && me.httpAddr === self.httpAddr)
    )
      return;
    this.#reportingAddresses = true;
    const cmd: MetaCommand = {
      op: "set-member",
      member: {
        id,
        rpcAddr: self.rpcAddr,
        httpAddr: self.httpAddr,
        ...(me.incarnation === undefined ? {} : { incarnation: me.incarnation }),
      },
    };
    this.propose(cmd, 10_000).then(
      () => {
        this.#reportingAddresses = false;
        this.#log.info("the cluster records this node's new addresses", {
          rpc_addr: self.rpcAddr,
          http_addr: self.httpAddr,
          was_rpc_addr: me.rpcAddr,
          was_http_addr: me.httpAddr,
        });
      },
      (err: unknown) => {
        this.#log.debug("reporting this node's addresses failed; retrying", {
          error: describe(err),
        });
        if (errorCodeOf(err) === "CAIRN_ERR_INVALID_ARGUMENT") {
          // Refused by the meta group (its state changed under this one): asked again from the
          // next state applied here, not every few seconds.
          this.#reportingAddresses = false;
          return;
        }
        const timer = setTimeout(() => {
          this.#reportingAddresses = false;
          if (this.#meta !== null) this.#checkAddresses(this.#meta);
        }, REJOIN_CHECK_MS);
        timer.unref();
      },
    );
  }

  /**
   * While this node does not know its cluster (a new member before the founding reached it, or
   * a wiped one that nobody addresses because its groups are idle), offers to rejoin through a
   * live peer every few seconds: the offer changes nothing unless the meta group records this
   * node with another incarnation. A node restarted on a data directory that knows its cluster
   * makes the same offer once, through a live peer, to have its incarnation confirmed: an old
   * copy of a member's data directory learns so from the meta group's refusal (its own meta
   * state cannot tell, and its peers address the member's current replica, not it) and stops.
   */
  async rejoinLoop(membership: Membership, stopped: () => boolean): Promise<void> {
    const restarted = this.clusterId !== "";
    const waiting = (): boolean =>
      !stopped() &&
      !this.#closed &&
      !this.#rejoined &&
      !this.#lost &&
      (restarted || this.clusterId === "");
    // The live peers in turn: the first one gossip lists may be no member (another node
    // joining, which would ask this one), and asking it forever never reached the meta group.
    let turn = 0;
    while (waiting()) {
      await this.#pause(REJOIN_CHECK_MS);
      if (!waiting() || this.#rejoining) continue;
      const peers = membership
        .members()
        .filter((m) => m.state === "alive" && m.meta.id !== this.#config.node_id)
        .map((m) => m.meta.id)
        .sort();
      const peer = peers[turn++ % Math.max(1, peers.length)];
      if (peer !== undefined) this.#rejoin(peer, true);
    }
  }

  /**
   * While this node is decommissioned (it no longer follows the meta group), reads a few live
   * peers' views every `intervalMs`; once they show it removed (removedByViews), it stops
   * (CAIRN_ERR_NODE_REMOVED), as a restart on its data directory would. While it is
   * decommissioning, it reads them too: once they show it decommissioned
   * (decommissionedByViews), a commit its meta replica may never apply, it serves no more.
   * And for AWAY_CHECKS_MS after it was away for `cluster.dead_after_ms` or longer (its
   * process paused: SIGSTOP, a frozen VM, a stall; seen as two of this loop's wake-ups that far
   * apart, its sleep taken in steps of at most half of it, so that a pause no longer than
   * `dead_after_ms` plus a step is seen, whatever `intervalMs`):
   * meanwhile the meta leader may have marked it dead and an operator removed it, which its
   * own meta state, out of the meta group once dead, never shows; it ran on for good, its
   * /health/quick 200, serving as the member it no longer is. `probe` and `now` (the
   * monotonic clock, ms) are for tests.
   */
  async removalLoop(
    membership: Pick<Membership, "members">,
    stopped: () => boolean,
    {
      probe = (a, n) => probeMember(a, n, this.#peerTls),
      intervalMs = REMOVAL_CHECK_MS,
      now = () => performance.now(),
    }: {
      probe?: (address: string, nodeId: string) => Promise<MemberProbe | undefined>;
      intervalMs?: number;
      now?: () => number;
    } = {},
  ): Promise<void> {
    const id = this.#config.node_id;
    const running = (): boolean => !stopped() && !this.#closed && !this.#lost;
    // Checks in a row without enough views: the next one asks other peers (peersToAsk).
    let turn = 0;
    // Until when this node checks its peers' views after it was away (see above).
    let awayChecksUntil = -Infinity;
    const deadAfter = this.#config.cluster.dead_after_ms;
    // The sleep's steps. Measured as one sleep that late, a pause was missed when it began
    // late in the sleep: one of a little over dead_after_ms, seen as one under it (a flaky test).
    const stepMs = Math.min(intervalMs, AWAY_STEP_MS, deadAfter / 2);
    const steps = Math.max(1, Math.round(intervalMs / stepMs));
    let lastWake = now();
    while (running()) {
      // A stop wakes the step under way (close()): the steps left are not slept.
      for (let i = 0; i < steps && running(); i++) {
        await this.#pause(stepMs);
        const woke = now();
        if (woke - lastWake >= deadAfter) awayChecksUntil = woke + AWAY_CHECKS_MS;
        lastWake = woke;
      }
      const meta = this.#meta;
      if (!running() || meta === null || meta.clusterId === null) continue;
      const left = this.#hasLeftForGood(meta);
      const away = now() < awayChecksUntil;
      if (!left && this.#stateOf(meta) !== "decommissioning" && !away) continue;
      const clusterId = meta.clusterId;
      const peers = peersToAsk(id, membership.members(), (m) => meta.stateOf(m), turn);
      if (peers.length === 0) continue;
      const answers = await Promise.all(peers.map((p) => probe(p.rpcAddr, p.id)));
      if (!running()) continue;
      turn = answeredEnough(clusterId, peers.length, answers) ? 0 : turn + 1;
      if (!removedByViews(id, clusterId, peers.length, answers)) {
        if (!left && decommissionedByViews(id, clusterId, peers.length, answers)) {
          this.#markDecommissionedUnseen();
          this.#log.warn(
            "this member was decommissioned, by entries its replica of the cluster's metadata left too soon to apply (its peers' views say so): it serves no requests, and stops once it is removed (cairn node remove)",
            { cluster_id: clusterId },
          );
          this.onMetaChanged();
        }
        continue;
      }
      this.#lost = true;
      const asked = peers.filter((_, i) => answers[i]?.members !== undefined).map((p) => p.id);
      this.#onLostState(
        new CairnError(
          "CAIRN_ERR_NODE_REMOVED",
          `member ${id} was removed from cluster ${clusterId} (the views of ${asked.join(", ")} no longer list it): a removed member never serves again`,
        ),
      );
    }
  }

  #setJoinRefusal(why: string | null): void {
    if (this.#joinRefusal === why) return;
    this.#joinRefusal = why;
    this.onAdmissionChanged(this.#admission());
  }

  #setFoundingWait(reason: string): void {
    if (this.#foundingWait === reason) return;
    this.#foundingWait = reason;
    this.onAdmissionChanged(this.#admission());
  }

  #admission(): Admission {
    return { foundingWait: this.#foundingWait, joinRefusal: this.#joinRefusal };
  }

  /**
   * Called when why this node is not yet a member changes (Admission). A node of shard workers
   * learns it in worker 0, which runs the founding and the join; the others gate their own
   * clients' calls by their own notServingReason, which knew neither: worker 0 tells them
   * (shareMemberStanding), or a first seed waiting to found said so on worker 0's connections
   * only, and on the others that it was asking its seeds to admit it.
   */
  onAdmissionChanged: (admission: Admission) => void = () => undefined;

  /**
   * Shard worker 0 said why this node is not yet a member (onAdmissionChanged): this worker's
   * refusals say the same.
   */
  admissionShared(admission: Admission): void {
    this.#foundingWait = admission.foundingWait;
    this.#joinRefusal = admission.joinRefusal;
  }

  /** The meta group or the peers' views said this member was decommissioned: see the field. */
  #markDecommissionedUnseen(): void {
    this.#decommissionedUnseen = true;
    this.onDecommissionedUnseen();
  }

  /**
   * Called once the meta group or the peers' views say this member was decommissioned in
   * entries its meta state never applied (notServingReason answers so from then on). A node of
   * shard workers learns it in worker 0 (it runs the loops that ask), and the other workers
   * follow worker 0's meta state, which never says so either: worker 0 tells them
   * (shareMemberStanding), or they went on serving the clients whose connections they took.
   */
  onDecommissionedUnseen: () => void = () => undefined;

  /**
   * Shard worker 0 learnt that this member was decommissioned in entries the meta state never
   * applied (onDecommissionedUnseen): this worker serves no requests either.
   */
  decommissionedUnseen(): void {
    if (this.#decommissionedUnseen) return;
    this.#decommissionedUnseen = true;
    this.onMetaChanged();
  }

  /**
   * This member's state: the meta state's, or "decommissioned" when the meta group or its peers'
   * views said so in entries its own copy never applied (#decommissionedUnseen).
   */
  #stateOf(meta: MetaState): MemberState | undefined {
    return this.#decommissionedUnseen ? "decommissioned" : meta.stateOf(this.#config.node_id);
  }

  /**
   * Whether this member left the meta group for good (decommissioned or removed), by its meta
   * state or by what the meta group or its peers said of it (#decommissionedUnseen).
   */
  #hasLeftForGood(meta: MetaState): boolean {
    return this.#decommissionedUnseen || hasLeftForGood(meta, this.#config.node_id);
  }

  /** Waits `ms`, or until close(). */
  #pause(ms: number): Promise<void> {
    return new Promise<void>((resolve) => {
      const wake = (): void => {
        clearTimeout(timer);
        this.#wakers.delete(wake);
        resolve();
      };
      const timer = setTimeout(wake, ms);
      this.#wakers.add(wake);
    });
  }

  /**
   * The first seed founds the meta group once: when it sees `bootstrap_expect` members alive
   * and none of them (nor itself) carries a cluster id. Runs until this node knows its cluster
   * (founded here, or reached by the founder's log) or `stopped()` says so.
   */
  async bootstrapLoop(
    store: MultiRaft,
    membership: Membership,
    self: MetaMember,
    stopped: () => boolean,
  ): Promise<void> {
    const c = this.#config;
    const isFirstSeed = this.#isFirstSeed(self.rpcAddr);
    const listenUntil = performance.now() + this.#foundingListenMs;
    let lastReason = "";
    while (!stopped() && this.clusterId === "") {
      const alive = membership
        .members()
        .filter((m) => m.state === "alive" && m.meta.id !== self.id)
        .map((m) => ({ id: m.meta.id, rpcAddr: m.meta.rpcAddr, httpAddr: m.meta.httpAddr }));
      const first = shouldBootstrap({
        self,
        seedNodes: c.cluster.seed_nodes,
        bootstrapExpect: c.cluster.bootstrap_expect,
        clusterId: null,
        alive: alive.map((member) => ({ member, clusterId: null })),
      });
      let decision = first;
      if (first.voters !== null) {
        // Ask every member for its cluster id: a seed whose data directory was wiped must not
        // found a second cluster beside the one the others still belong to. The answers also
        // carry each member's incarnation, which names its replicas in every group.
        const probes = await Promise.all(
          alive.map((m) => probeMember(m.rpcAddr, m.id, this.#peerTls)),
        );
        if (probes.some((p) => p === undefined || p.incarnation === "")) {
          decision = { voters: null, reason: "a member did not answer with its cluster id" };
        } else {
          decision = shouldBootstrap({
            self: { ...self, incarnation: this.incarnation },
            seedNodes: c.cluster.seed_nodes,
            bootstrapExpect: c.cluster.bootstrap_expect,
            clusterId: null,
            alive: alive.map((member, i) => {
              const probe = probes[i];
              return {
                member: { ...member, incarnation: probe?.incarnation ?? "" },
                clusterId: probe?.clusterId || null,
                firstSeed: probe?.firstSeed === true,
              };
            }),
          });
        }
      }
      if (decision.voters !== null) {
        // And every other seed, whether gossip shows it or not: with bootstrap_expect 1 this
        // node sees enough members at once (itself), before gossip reached any other, and
        // a first seed restarted on a wiped data directory founded a second cluster beside
        // the one its seeds run, serving its own empty copy of the data. A seed that does not
        // answer (not started yet) or carries no id holds nothing back.
        const other = await this.#seedWithClusterId(
          membership,
          new Set([self.rpcAddr, ...alive.map((m) => m.rpcAddr)]),
        );
        if (other !== null) {
          decision = {
            voters: null,
            reason:
              other.clusterId !== ""
                ? `seed ${other.address} already carries cluster id ${other.clusterId}: rejoin it instead`
                : anotherFirstSeed(`seed ${other.address}`),
          };
        }
      }
      if (
        decision.voters !== null &&
        decision.voters.length === 1 &&
        performance.now() < listenUntil
      ) {
        // Nobody but itself was asked: a running cluster's members may not have reached it yet
        // (FOUNDING_LISTEN_MS). Each pass looks at gossip again, and asks whom it shows.
        decision = {
          voters: null,
          reason: `listening ${this.#foundingListenMs / 1000} s for members of a running cluster before founding one on this node alone (a wiped first seed must rejoin its cluster, not found another)`,
        };
      }
      if (stopped() || this.clusterId !== "") return;
      if (decision.voters !== null) {
        const clusterId = randomUUID();
        const voters = decision.voters;
        await store.foundShard(
          0,
          voters.map((m) => replicaIdOf(m.id, m.incarnation)),
          [
            encodeMetaEntry({
              op: "bootstrap",
              clusterId,
              totalShards: c.cluster.total_shards,
              // Uncapped: a cluster founded on fewer members grows its shards' replicas to
              // the factor as members join (the allocator's repairs).
              replicationFactor: c.cluster.replication_factor,
              members: voters,
            }),
          ],
        );
        this.#log.info("founded the cluster (meta group in shard 0)", {
          cluster_id: clusterId,
          voters: voters.map((m) => m.id),
        });
        return;
      }
      if (decision.reason !== lastReason) {
        this.#log.info("not founding the cluster", { reason: decision.reason });
        lastReason = decision.reason;
      }
      if (isFirstSeed) this.#setFoundingWait(decision.reason);
      await new Promise((resolve) => setTimeout(resolve, BOOTSTRAP_CHECK_MS));
    }
  }

  /**
   * The first of this node's seeds, other than the addresses in `asked`, that answers with a
   * cluster id or as a first seed itself (probeMember; clusterId "" then), or null. A seed's
   * node id (which a peer's TLS certificate must name) is gossip's for that address when it
   * knows one; else, over TLS, any certificate the peer CA signed will do.
   */
  async #seedWithClusterId(
    membership: Membership,
    asked: ReadonlySet<string>,
  ): Promise<{ address: string; clusterId: string } | null> {
    // Addresses as what they name, however written (sameAddress), as the first seed is known.
    const seeds = [...new Set(this.#config.cluster.seed_nodes.map((s) => s.trim()))].filter(
      (s) => s !== "" && ![...asked].some((a) => sameAddress(a, s)),
    );
    if (seeds.length === 0) return null;
    const known = membership.members();
    const answers = await Promise.all(
      seeds.map((address) =>
        probeMember(
          address,
          known.find((m) => sameAddress(m.meta.rpcAddr, address))?.meta.id ?? null,
          this.#peerTls,
        ),
      ),
    );
    for (const [i, answer] of answers.entries()) {
      const address = seeds[i];
      // A seed that is this node under another name (its incarnation) is no other first seed.
      const other = answer !== undefined && answer.incarnation !== this.incarnation;
      if (address !== undefined && other && (answer.clusterId !== "" || answer.firstSeed))
        return { address, clusterId: answer.clusterId };
    }
    return null;
  }
}

/**
 * Admin.TransferLeader in a cluster: records node `to` as shard `id`'s preferred leader in the
 * meta group (so leader spreading keeps it there, on every node and after restarts), hands
 * leadership over at once when this node leads the shard, and resolves with the leader once
 * this node sees `to` lead (the current leader's next spreading pass moves it, within ~2 s).
 *
 * What cannot be done is refused at once, with why, before anything is recorded; only a wait
 * that ran out is CAIRN_ERR_TIMEOUT (each was one, after the whole wait, which told a client
 * nothing of what to do):
 * - the shard id is outside [0, total_shards), or `to` is no replica of the shard
 *   (INVALID_ARGUMENT);
 * - `to`'s disk is full, this node holds no replica of the shard (it could never see leadership
 *   move: the replicas' nodes are named), or this node leads the shard and its group has no voter on `to` yet (a move adding `to`, or
 *   the replacement of its retired replica, is under way) (CAIRN_ERR_PRECONDITION);
 * - the meta group refused the preference, here or at its leader (its own code);
 * - the group here refused the transfer (CAIRN_ERR_INVALID_RAFT_REQUEST).
 */
export async function transferLeadership(
  cluster: ClusterState,
  store: MultiRaft,
  id: number,
  to: string,
  timeoutMs: number,
): Promise<string> {
  const meta = cluster.meta;
  if (meta === null || meta.clusterId === null) {
    throw new CairnError("CAIRN_ERR_NOT_READY", "this node has not joined its cluster yet", {
      retryable: true,
    });
  }
  if (!Number.isInteger(id) || id < 0 || id >= meta.totalShards) {
    throw new CairnError(
      "CAIRN_ERR_INVALID_ARGUMENT",
      `shard id must be in [0, ${meta.totalShards - 1}], got ${id}`,
    );
  }
  const nodes = meta.nodesOf(id);
  if (nodes.length === 0) {
    throw new CairnError(
      "CAIRN_ERR_SHARD_NOT_ACTIVE",
      `shard ${id} is not created (it holds no data); it has no leader to move`,
    );
  }
  if (!nodes.includes(to)) {
    throw new CairnError(
      "CAIRN_ERR_INVALID_ARGUMENT",
      `shard ${id} has no replica on node ${JSON.stringify(to)}; its replicas are ${nodes.join(", ")}`,
    );
  }
  // Leadership would leave it again at once (MetaState.leaderWanted): it would refuse Puts.
  const roomy = nodes.filter((n) => meta.hasRoom(n));
  if (meta.members.get(to)?.diskFull === true && roomy.length > 0) {
    throw new CairnError(
      "CAIRN_ERR_PRECONDITION",
      `node ${to} reported its disk full (cluster.disk_full_percent used, or under storage.min_free_bytes available): it leads no shard while another of its replicas has room (${roomy.join(", ")}); free disk space on ${to} first`,
    );
  }
  const self = nodeOfReplica(cluster.replicaId);
  if (!nodes.includes(self)) {
    throw new CairnError(
      "CAIRN_ERR_PRECONDITION",
      `node ${self} holds no replica of shard ${id}: it cannot see its leader, nor leadership move; ask one that does: ${nodes.join(", ")}`,
    );
  }
  // The group's own configuration, where this node leads it: `to`'s current replica must be a
  // voter (a learner, or none yet, while a move adds it; a retired incarnation's voter, no node
  // runs any more, while the group replaces it: a transfer to that held the group's writes
  // until abandoned, an election timeout).
  const here = store.shardInfo(id);
  const target = meta.replicaOf(to);
  if (here?.role === "leader" && !here.voters.includes(target)) {
    throw new CairnError(
      "CAIRN_ERR_PRECONDITION",
      `shard ${id}'s group has no voter on ${to} yet (its replicas are changing: a move or the replacement of a replica is under way; its voters are ${here.voters.map(nodeOfReplica).join(", ")}); ask again once it has settled`,
    );
  }
  const deadline = performance.now() + timeoutMs;
  try {
    await cluster.propose({ op: "prefer-leader", shard: id, node: to }, timeoutMs);
  } catch (err) {
    throw proposalFailure(err, `record ${to} as shard ${id}'s preferred leader`);
  }
  let refused: unknown = null;
  for (;;) {
    if (refused !== null) throw refused;
    const info = store.shardInfo(id);
    if (info?.leader === to) return to;
    // To `to`'s current replica, not the node (see above).
    if (info?.role === "leader") {
      store.transferLeader(id, cluster.meta?.replicaOf(to) ?? to).catch((err: unknown) => {
        // A refusal the group will repeat (the configuration changed since the check above) is
        // said now; anything else (leadership lost meanwhile) waits on.
        if (err instanceof CairnError && !err.retryable) refused = err;
      });
    }
    if (performance.now() > deadline) {
      throw new CairnError(
        "CAIRN_ERR_TIMEOUT",
        `${to} is shard ${id}'s preferred leader now, but leadership had not moved there within ${timeoutMs} ms (it moves once ${to} is alive and caught up)`,
        { retryable: true },
      );
    }
    await new Promise((resolve) => setTimeout(resolve, TRANSFER_POLL_MS));
  }
}

/**
 * What a meta proposal made through ClusterState.propose failed with, as the CairnError an
 * Admin call (TransferLeader's prefer-leader, the member calls' set-state) answers, `what`
 * naming the proposal ("record …"): a refusal as itself (the meta group's, which names why, here
 * or through its leader's ProposeMeta answer, by its status there; this node not ready, or
 * stopping); anything else, no meta leader found or answering before the deadline, as the
 * timeout it is, retryable. Before, a member call's refusal through a node that does not lead
 * the meta group was answered INTERNAL (a review of 2026-12-06).
 */
export function proposalFailure(err: unknown, what: string): CairnError {
  if (err instanceof CairnError && !WAITED_OUT.has(err.code)) return err;
  const code = (err as { code?: unknown }).code;
  if (!(err instanceof CairnError) && typeof code === "number" && REFUSALS.has(code)) {
    // Its status as the leader answered it (a peer's refusal of this node's call, another
    // cluster or not a member, carries no code of its own).
    return new CairnError(
      code === status.INVALID_ARGUMENT ? "CAIRN_ERR_INVALID_ARGUMENT" : "CAIRN_ERR_PRECONDITION",
      `the meta group's leader refused to ${what}: ${describe(err)}`,
      { cause: err },
    );
  }
  return new CairnError("CAIRN_ERR_TIMEOUT", `the meta group did not ${what}: ${describe(err)}`, {
    retryable: true,
    cause: err,
  });
}

/** The codes of a proposal that found no meta leader in time, or whose wait ran out. */
const WAITED_OUT: ReadonlySet<string> = new Set([
  "CAIRN_ERR_NOT_LEADER",
  "CAIRN_ERR_PROPOSAL_DROPPED",
  "CAIRN_ERR_PROPOSAL_LOST",
  "CAIRN_ERR_TIMEOUT",
]);
/** The statuses of a peer's ProposeMeta answer that refuse the proposal. */
const REFUSALS: ReadonlySet<number> = new Set([
  status.INVALID_ARGUMENT,
  status.FAILED_PRECONDITION,
  status.PERMISSION_DENIED,
]);

/** How often transferLeadership looks whether leadership moved. */
const TRANSFER_POLL_MS = 100;

/** Leadership transfers started per pass (spreadLeaders). */
const TRANSFERS_PER_PASS = 32;

/**
 * Leaders spread (design.md §5.1): each group this node leads whose preferred leader (set by
 * Admin.TransferLeader, else its first-ranked replica) is another node, alive by gossip, hands
 * leadership over to it (the Raft core first brings the
 * target up to date, then tells it to campaign). Shards are ranked by rendezvous hashing, so
 * leaders end up spread evenly over the nodes, and a restarted node takes back its share. A
 * member that reported its disk full hands its groups to a replica with room instead
 * (MetaState.leaderWanted): it would refuse their Puts.
 */
export function spreadLeaders(
  store: MultiRaft,
  cluster: ClusterState,
  self: string,
  alive: ReadonlySet<string>,
): number {
  let started = 0;
  for (const id of store.shardIds()) {
    if (started >= TRANSFERS_PER_PASS) break;
    if (!store.leads(id)) continue;
    const meta = cluster.meta;
    const first = meta?.leaderWanted(id);
    if (meta === null || first === undefined || first === self || !alive.has(first)) continue;
    const info = store.shardInfo(id);
    if (info === null) continue;
    // The node's current replica only: a voter of an incarnation it left behind (its data
    // directory was wiped; the group has not replaced that replica yet) is gone for good, and a
    // transfer to it held the group's writes until abandoned, an election timeout, every pass.
    const target = meta.replicaOf(first);
    if (!info.voters.includes(target)) continue;
    started++;
    // Best effort: a transfer that does not finish within an election timeout is abandoned by
    // the core, and the next pass tries again.
    store.transferLeader(id, target).catch(() => undefined);
  }
  return started;
}

/**
 * The node a command only that node makes about itself names (`set-member`: its addresses;
 * `set-disk`; `set-build`; `join` and `rejoin`: its data directory's incarnation), or null.
 */
function selfReportOf(cmd: MetaCommand): string | null {
  switch (cmd.op) {
    case "set-member":
    case "join":
      return cmd.member.id;
    case "set-disk":
    case "set-build":
    case "rejoin":
      return cmd.id;
    default:
      return null;
  }
}

/**
 * Refuses, from peer `from` (its `cairn-peer`, bound to its certificate under peer TLS), a
 * command only a node makes about itself (selfReportOf) that names another node: a member's
 * `rejoin` sent by another retired the member's incarnation whenever the member did not answer
 * the meta leader's probe for 2 s, and the member then stopped for good (a helper review of
 * 2026-12-06). And a `set-member` of a node that is not a recorded
 * member: the meta group's apply would add it as an active member, with no join, no
 * incarnation and no room counted (MEMBER_LIMIT), and the allocator would place replicas on it
 * (a review of 2026-12-06: any caller holding the cluster id could add members without bound
 * that way). A member reports its addresses only once it is recorded (ClusterState's
 * #checkAddresses). Called where peers propose meta commands, before the proposal.
 */
export function checkMemberUpdate(meta: MetaState | null, cmd: MetaCommand, from: string): void {
  const id = selfReportOf(cmd);
  if (id === null) return;
  if (id !== from) {
    throw new CairnError(
      "CAIRN_ERR_INVALID_ARGUMENT",
      `meta command refused: ${cmd.op} of node ${id} proposed by ${from === "" ? "a caller naming no node" : `node ${from}`} (a member reports only its own)`,
    );
  }
  if (cmd.op === "set-member" && meta !== null && !meta.members.has(id)) {
    throw new CairnError(
      "CAIRN_ERR_INVALID_ARGUMENT",
      `meta command refused: set-member of node ${id}, which is not a member (a node becomes one by joining)`,
    );
  }
}

/**
 * Refuses a `rejoin` that would retire a member's incarnation while that incarnation still runs:
 * a node started with a live member's node id (on another address, with another data directory)
 * must not evict it. The same for a `join` under a decommissioned or removed member's id with
 * another data directory (a new life, MetaState's #newLife): the member may not have been
 * stopped. The meta leader asks the member's recorded address for its incarnation; the command
 * goes ahead only when that incarnation does not answer (the member is down: its data
 * directory was lost and it is being replaced, or it was retired and stopped). Called where
 * peers propose meta commands, before the proposal; `probe` is for tests.
 */
export async function checkRejoin(
  meta: MetaState | null,
  cmd: MetaCommand,
  probe: (
    address: string,
    nodeId: string,
  ) => Promise<{ incarnation: string } | undefined> = probeMember,
): Promise<void> {
  if (meta === null || (cmd.op !== "rejoin" && cmd.op !== "join")) return;
  const id = cmd.op === "rejoin" ? cmd.id : cmd.member.id;
  const incarnation = cmd.op === "rejoin" ? cmd.incarnation : cmd.member.incarnation;
  const member = meta.members.get(id);
  if (member?.incarnation === undefined || incarnation === undefined) return;
  // A join replaces a member only as its new life; any other the meta group refuses itself.
  if (cmd.op === "join" && !startsNewLife(member, incarnation)) return;
  if (member.incarnation === incarnation || member.retired?.includes(incarnation) === true) return;
  const answer = await probe(member.rpcAddr, id);
  if (answer?.incarnation === member.incarnation) {
    throw new CairnError(
      "CAIRN_ERR_DUPLICATE_NODE_ID",
      `node id ${id} belongs to a live member at ${member.rpcAddr} (data directory incarnation ${member.incarnation}); a node with another data directory (incarnation ${incarnation}) may not replace it: node ids must be unique. Start that node with another --node-id, or stop the member first if it is the one being replaced`,
    );
  }
}

/**
 * How long a node checks its peers' views for its removal after it was away for
 * `cluster.dead_after_ms` or longer (ClusterState.removalLoop).
 */
export const AWAY_CHECKS_MS = 60_000;

/** The longest step of the removal loop's sleep, which a pause is measured against. */
const AWAY_STEP_MS = 1_000;

/** What a node's first cluster view says (probeMember). */
export interface MemberProbe extends ViewAnswer {
  /** Its data directory's incarnation. */
  readonly incarnation: string;
  /** It advertises its own seed_nodes[0]: it founds the cluster when none exists. */
  readonly firstSeed: boolean;
}

/**
 * The cluster id a node at `address` reports in its first cluster view ("" when it has none),
 * its data directory's incarnation and the members the view lists; undefined when it does not
 * answer in time. Over TLS its certificate must name `nodeId`; null (an address whose node id
 * is not known), it may name any node the peer CA signed.
 */
export function probeMember(
  address: string,
  nodeId: string | null,
  tls?: PeerTls,
): Promise<MemberProbe | undefined> {
  const { proto } = loadCairnProto();
  let client: InstanceType<typeof proto.cairn.v1.Meta>;
  if (tls === undefined) {
    client = new proto.cairn.v1.Meta(address, credentials.createInsecure());
  } else if (nodeId === null) {
    // A seed whose node id gossip has not shown: any member's certificate will do to ask it.
    client = new proto.cairn.v1.Meta(address, tls.anyMemberCredentials());
  } else {
    // As a peer dials (src/common/peer-tls.ts): the member's certificate must name its node id.
    const dial = tls.credentials(nodeId);
    client = new proto.cairn.v1.Meta(address, dial.credentials, dial.options);
  }
  return new Promise((resolve) => {
    let done = false;
    const call: ClientReadableStream<ClusterViewMessage> = client.WatchCluster(
      {},
      { deadline: grpcJsDeadline(PROBE_TIMEOUT_MS) },
    );
    const finish = (answer: MemberProbe | undefined): void => {
      if (done) return;
      done = true;
      call.cancel();
      client.close();
      resolve(answer);
    };
    call.on("data", (view: ClusterViewMessage) =>
      finish({
        clusterId: view.cluster_id ?? "",
        incarnation: view.incarnation ?? "",
        firstSeed: view.first_seed === true,
        members: (view.nodes ?? []).map((m) => m.id ?? ""),
        decommissioned: (view.nodes ?? [])
          .filter((m) => m.member_state === "decommissioned")
          .map((m) => m.id ?? ""),
      }),
    );
    // A member that no longer streams its view (decommissioned and still running) names itself
    // in the refusal's trailers: it still runs there.
    call.on("error", (err: ServiceError) => {
      const incarnation = err.metadata?.get(INCARNATION_KEY)[0];
      finish(
        typeof incarnation === "string" && incarnation !== ""
          ? {
              clusterId: String(err.metadata.get(CLUSTER_ID_KEY)[0] ?? ""),
              incarnation,
              firstSeed: false,
            }
          : undefined,
      );
    });
    call.on("end", () => finish(undefined));
  });
}

/**
 * Proposes `cmd` to the meta group through its leader: this node's store when it leads, else the
 * leader's node over cairn.v1.Raft ProposeMeta (trying node `first` first, when given),
 * following leader hints and retrying with backoff until `deadline` (performance.now()); rejects
 * with the last error after it.
 */
async function proposeViaLeader(
  cmd: MetaCommand,
  self: string,
  store: MultiRaft,
  transport: GrpcTransport,
  deadline: number,
  first: string | null = null,
): Promise<void> {
  let hint: string | null = first;
  for (let attempt = 0; ; attempt++) {
    const leader = hint ?? store.shardInfo(0)?.leader ?? first;
    try {
      if (leader === null || leader === self) {
        const outcome = await store.proposeMeta(cmd);
        if (outcome.kind === "rejected") throw metaRefusal(outcome);
      } else {
        const left = Math.max(1, deadline - performance.now());
        await transport.proposeMeta(nodeId(leader), encodeMetaCommand(cmd), left);
      }
      return;
    } catch (err) {
      const code = errorCodeOf(err);
      // Refused by the meta group, or the peer refused this node's calls (another cluster,
      // another number of shard workers, not a member): the same call would be refused again.
      const grpcCode = (err as { code?: unknown }).code;
      if (
        code === "CAIRN_ERR_INVALID_ARGUMENT" ||
        code === "CAIRN_ERR_LOST_STATE" ||
        code === "CAIRN_ERR_NODE_REMOVED" ||
        code === NODE_DECOMMISSIONED ||
        code === "CAIRN_ERR_DUPLICATE_NODE_ID" ||
        code === MEMBER_LIMIT ||
        code === CLUSTER_VERSION ||
        code === REJOIN_LIMIT ||
        grpcCode === status.FAILED_PRECONDITION ||
        grpcCode === status.PERMISSION_DENIED ||
        isTlsMismatch(err)
      ) {
        throw err;
      }
      hint = err instanceof NotLeaderError ? err.leader : leaderHint(err);
      if (performance.now() + 50 > deadline) throw err;
      // Unreferenced: a proposal retrying when the node stops does not hold the process.
      await new Promise((resolve) =>
        setTimeout(resolve, Math.min(50 * (attempt + 1), 500)).unref(),
      );
    }
  }
}

/**
 * Where a new shard `id` goes, by the meta state here: only active members take replicas (a
 * joining one first catches up on the meta group), those with room on their disk first, one
 * whose disk is full only when too few have room.
 */
function placement(meta: MetaState, id: number): string[] {
  const active = meta.activeMembers();
  const want = Math.min(meta.replicationFactor, active.length);
  const roomy = rendezvousReplicas(id, meta.roomyMembers(), want);
  const rest = active.filter((n) => !roomy.includes(n));
  return [...roomy, ...rendezvousReplicas(id, rest, want - roomy.length)];
}

/**
 * Why the meta group refused a command, as an error: CAIRN_ERR_LOST_STATE for a `rejoin` with a
 * retired incarnation, CAIRN_ERR_NODE_REMOVED for a member removed for good,
 * CAIRN_ERR_NODE_DECOMMISSIONED for a `rejoin` of a member decommissioned, CLUSTER_VERSION for
 * a build older than the cluster's version, else CAIRN_ERR_INVALID_ARGUMENT. The same on the
 * meta leader's node and, through cairn.v1.Raft ProposeMeta, on the proposing one (errorCodeOf
 * reads it there).
 */
export function metaRefusal(outcome: {
  reason: string;
  retired?: true;
  removed?: true;
  decommissioned?: true;
  tooOld?: true;
  rejoinLimit?: true;
}): CairnError {
  const code =
    outcome.rejoinLimit === true
      ? REJOIN_LIMIT
      : outcome.retired === true
        ? "CAIRN_ERR_LOST_STATE"
        : outcome.removed === true
          ? "CAIRN_ERR_NODE_REMOVED"
          : outcome.decommissioned === true
            ? NODE_DECOMMISSIONED
            : outcome.tooOld === true
              ? CLUSTER_VERSION
              : "CAIRN_ERR_INVALID_ARGUMENT";
  return new CairnError(code, `meta command refused: ${outcome.reason}`);
}

/** A local CairnError's code, or the one a failed peer call carries in its trailers. */
export function errorCodeOf(err: unknown): string | null {
  if (err instanceof CairnError) return err.code;
  const metadata = (err as { metadata?: { get(key: string): unknown[] } }).metadata;
  const value = metadata?.get(ERROR_CODE_KEY)[0];
  return typeof value === "string" ? value : null;
}

/**
 * Whether a peer call failed because TLS is on at one end only: GOAWAY INADEQUATE_SECURITY from
 * a TLS node to this cleartext one, or a TLS handshake a cleartext node did not answer
 * (src/api/grpc-channel.ts, TLS_FAILED). A configuration mistake: retrying cannot mend it.
 */
const TLS_MISMATCH =
  "joining the cluster failed: TLS is on at one end only (every member needs the same tls.* setup); retrying";

function isTlsMismatch(err: unknown): boolean {
  return /GOAWAY with error code 12|did not speak TLS/.test(describe(err));
}

function describe(err: unknown): string {
  const details = (err as { details?: unknown }).details;
  if (typeof details === "string" && details !== "") return details;
  return err instanceof Error ? err.message : String(err);
}

/** The leader named in a failed peer call's trailers (`cairn-leader`), if any. */
function leaderHint(err: unknown): string | null {
  const metadata = (err as { metadata?: { get(key: string): unknown[] } }).metadata;
  const value = metadata?.get(LEADER_HINT_KEY)[0];
  return typeof value === "string" && value !== "" ? value : null;
}
