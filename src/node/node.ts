/**
 * A Cairn node: the composition root. It opens the multi-raft driver (WAL, shards), serves
 * gRPC on `rpc_addr` and the operators' HTTP on `http_addr`, shares one metrics registry and one
 * health checker between them, and shuts down gracefully.
 *
 * Start order: HTTP (so probes answer 503 during recovery) → storage recovery → gRPC → SWIM
 * membership (UDP on the RPC port number). Stop order: leave the cluster gracefully, stop taking
 * requests (gRPC, then HTTP), drain in-flight work within `shutdown.drain_timeout_ms`, close the
 * engines and the WAL.
 */
import type dgram from "node:dgram";
import { statfs } from "node:fs/promises";
import { join } from "node:path";
import {
  BUILD_VERSION,
  ClusterViewPublisher,
  VIEW_MIN_INTERVAL_MS,
  decodeMetaCommand,
  type MetaCommand,
  type MetaState,
  nodeOfReplica,
  rpcAddressOf,
  shardForKey,
  type ShardView,
} from "../cluster/index.ts";
import type { CallCut } from "../common/call-cut.ts";
import { deadlineClock } from "../common/deadline-clock.ts";
import { CairnError } from "../common/errors.ts";
import {
  GossipKeyFileWatch,
  readGossipKeyFile,
  stampGossipKeyFile,
} from "../common/gossip-keys.ts";
import { PeerTls } from "../common/peer-tls.ts";
import type { TlsFiles } from "../common/tls-files.ts";
import { SoonestTimer } from "../common/soonest-timer.ts";
import { nodeId, NotLeaderError } from "../raft/index.ts";
import { type CairnConfig, formatHostPort, type HostPort, parseHostPort } from "../config/index.ts";
import {
  bindErrorFor,
  CairnMetrics,
  type HealthReport,
  type HealthSource,
  type Logger,
  LogWindow,
  OpsHttpServer,
  type ShardHealth,
} from "../ops/index.ts";
import {
  GossipSeal,
  Membership,
  type MemberView as SwimMember,
  ShardCountMismatchError,
} from "../membership/index.ts";
import {
  type ClientCall,
  createRaftService,
  GrpcTransport,
  MultiRaft,
  type RaftService,
  ReadPastDeadlineError,
  type ScanRequest,
  type TermCheck,
} from "../replication/index.ts";
import {
  type AdminStore,
  ConnectionSlots,
  type ForwardOptions,
  type KvStore,
  type LeadershipTransfer,
  RpcServer,
  type SharedConnectionSlots,
  transferInPlace,
  type WorkerTunnels,
} from "../api/index.ts";
import { DOWN_NODES_MAX, DownNodes } from "./down-nodes.ts";
import { JoinAdmission } from "./join-admission.ts";
import { recordedMembers } from "./recorded-members.ts";
import {
  checkMemberUpdate,
  checkRejoin,
  CLUSTER_VERSION,
  probeMember,
  ClusterState,
  leaderProposer,
  type MetaProposer,
  metaRefusal,
  REJOIN_LIMIT,
  spreadLeaders,
  transferLeadership,
} from "./cluster.ts";
import { AllocatorLoop } from "./allocator-loop.ts";
import { gateByMembership } from "./member-gate.ts";
import { memberAdmin } from "./members-admin.ts";
import { hasLeftForGood, ReplicaGc } from "./replica-gc.ts";
import {
  LeaderMetaCheck,
  type ReplicaEffects,
  type ReplicaStep,
  replaceReplicas,
} from "./replicas.ts";
import { loadIncarnation } from "./incarnation.ts";
import {
  BUILD_VERSION_ENV,
  diskUsedFile,
  DISK_USED_FILE_ENV,
  FOUNDING_LISTEN_ENV,
  moveStepHoldMs,
  plantedBugs,
  readDiskUsedFile,
  testingBuildVersion,
  testingFoundingListenMs,
} from "./testing-bugs.ts";
import { DiskReserve } from "./disk-reserve.ts";
import { CertExpiryWatch } from "./cert-expiry.ts";
import { DiskWatch } from "./disk-watch.ts";
import { VersionUpkeep } from "./version-upkeep.ts";
import { countingTransport } from "./counting-transport.ts";
import { claimDataDir, type DataDirLock } from "./data-dir-lock.ts";
import { dataDirError } from "./data-dir.ts";
import { ownerOf, shareMemberStanding, type ShardCellMeta } from "./siblings.ts";
import { planNodeDescriptors } from "./open-files.ts";
import { MemberAddresses } from "./member-addresses.ts";
import { claimRpcAddr, reserveRpcPort, type ReservedRpcPort } from "./rpc-port.ts";

export interface NodeAddresses {
  readonly rpc: string;
  readonly http: string;
}

/**
 * A shard worker's share of a node (src/node/shard-workers.ts runs one CairnNode per worker in
 * single-node mode): the shards it owns, with their own WAL, and what it shares with the other
 * workers. The main thread keeps the operators' HTTP server; one worker runs membership.
 */
export interface ShardCell {
  /** This worker's index and the number of workers: it owns the shards with id mod count = index. */
  readonly index: number;
  readonly count: number;
  readonly walDir: string;
  /** The node's count of connections on rpc_addr, which the main thread made. */
  readonly connections: SharedConnectionSlots;
  /** The storage's open tables, node-wide, as the main thread planned them (open-files.ts). */
  readonly tableFiles: number;
  /** The process's internal key, every worker's (src/api/wire.ts INTERNAL_KEY). */
  readonly internalKey: string;
  /** The cluster view, shared with the other workers. */
  readonly views: ClusterViewPublisher;
  /** Whether this worker runs SWIM (one does: it binds UDP on the RPC port number). */
  readonly membership: boolean;
  /**
   * The store this worker's gRPC services use over its own driver (the owner of each key's
   * shard), and Admin.TransferLeader run where the shard lives (`here`: on this worker's own
   * shards). `proposer`: the meta group's, in the worker that holds shard 0 of a cluster (it
   * proposes for the others).
   */
  route(
    local: MultiRaft,
    here: (id: number, to: string) => Promise<string>,
    proposer: MetaProposer | null,
  ): {
    readonly store: KvStore & AdminStore;
    readonly transferLeader: LeadershipTransfer;
  };
  /**
   * Resolves, once every worker has recovered its shards, with the address to serve gRPC on and
   * the node's HTTP address (the main thread serves it).
   */
  addresses(): Promise<NodeAddresses>;
  /**
   * Called at a stop once this worker's gRPC server has drained; resolves once every worker's
   * has, so a call handed to another worker still finds that worker's shards open.
   */
  drained(): Promise<void>;
  /** The connections and streaming calls aimed at other workers (src/api/worker-tunnel.ts). */
  readonly tunnels: WorkerTunnels;
  /**
   * Called once this worker's gRPC server serves: the connections other workers accepted for
   * this one go to it, and they learn where its streaming calls are served.
   */
  serving(server: RpcServer): void;
  /** Tells `listener` of each leader change of the other workers' shards (the forwarder's). */
  watchLeaders(listener: (shard: number, leader: string | null) => void): void;
  /** Cluster mode: the meta group's state, which worker 0 holds (shard 0 is its). */
  readonly meta: ShardCellMeta;
}

export class CairnNode implements HealthSource {
  readonly config: CairnConfig;
  readonly #log: Logger;
  readonly metrics: CairnMetrics;
  #store: MultiRaft | null = null;
  readonly views: ClusterViewPublisher;
  readonly #started = performance.now();
  /** The bounds on nodes let into the cluster, checked while this node leads the meta group. */
  readonly #joins: JoinAdmission;
  /** Set once start() has finished: every server up (the gRPC one last but SWIM). */
  #serving = false;
  #rpc: RpcServer | null = null;
  #http: OpsHttpServer | null = null;
  #membership: Membership | null = null;
  #gossipKeysWatch: GossipKeyFileWatch | null = null;
  #addresses: NodeAddresses = { rpc: "", http: "" };
  #stopping: Promise<void> | null = null;
  readonly #onFatal: (err: unknown) => void;
  /** Cluster mode only (seed nodes configured): the meta state, the peer transport. */
  #cluster: ClusterState | null = null;
  #transport: GrpcTransport | null = null;
  /** Peer TLS (a cluster with `tls.peer_ca_file`): how this node dials its peers. */
  #peerTls: PeerTls | null = null;
  #bootstrap: Promise<void> | null = null;
  #rejoin: Promise<void> | null = null;
  /**
   * ClusterState.removalLoop: a decommissioned node (or one back from a long pause) learns it
   * was removed, and stops.
   */
  #removal: Promise<void> | null = null;
  #spreadTimer: NodeJS.Timeout | null = null;
  /** The disk space kept free (storage.min_free_bytes); null until the store opens. */
  #diskReserve: DiskReserve | null = null;
  /** The end of validity of tls.cert_file's certificates, watched (once a node: worker 0). */
  #certExpiry: CertExpiryWatch | null = null;
  /**
   * The nodes gossip declared dead or gone (left): groups led here sleep with their replicas
   * lagging (MultiRaftOptions.nodeDown), and wake when one is back (#noteNodeState). Bounded:
   * past DOWN_NODES_MAX, only the ids gossip, the meta state or the cluster view knows are kept.
   */
  readonly #downNodes = new DownNodes(() => this.#knownNodeIds());
  #unfollowMembers: (() => void) | null = null;
  /** Told of every shard leader change this node learns (the forwarder follows leaders). */
  readonly #leaderListeners = new Set<(shard: number, leader: string | null) => void>();
  readonly #cell: ShardCell | null;
  /** The connections open on rpc_addr, across the node's threads (`rpc.max_connections`). */
  readonly #connections: ConnectionSlots;
  /** Keeps the connections' table of the members' addresses (their reserve) current. */
  readonly #memberAddresses: MemberAddresses;
  /** The storage's open tables, node-wide (open-files.ts); a shard worker keeps its share. */
  readonly #tableFiles: number;
  /** The data directory's lock (null in a shard worker: the main thread holds it). */
  #lock: DataDirLock | null = null;

  private constructor(
    config: CairnConfig,
    log: Logger,
    onFatal: (err: unknown) => void,
    cell: ShardCell | null,
  ) {
    this.config = config;
    this.#log = log;
    this.metrics = new CairnMetrics({ nodeId: config.node_id });
    this.views = cell?.views ?? new ClusterViewPublisher(config.cluster.total_shards);
    this.#onFatal = onFatal;
    this.#cell = cell;
    this.#joins = new JoinAdmission(config.cluster.max_joining);
    // The open-file limit's split (open-files.ts): a shard worker shares the main thread's.
    if (cell === null) {
      const { slots, plan } = planNodeDescriptors(config, log);
      this.#connections = slots;
      this.#tableFiles = plan.tableFiles;
    } else {
      this.#connections = ConnectionSlots.of(cell.connections);
      this.#tableFiles = cell.tableFiles;
    }
    this.metrics.setConnectionSource(this.#connections);
    this.#memberAddresses = new MemberAddresses(this.#connections);
  }

  /** The multi-raft driver; throws before storage recovery has finished. */
  get store(): MultiRaft {
    if (this.#store === null) throw new Error("the node's storage is not open yet");
    return this.#store;
  }

  /**
   * Recovers storage and starts both servers. Rejects (after releasing what it opened) when a
   * server cannot bind or storage cannot be recovered. `onFatal` hears of errors after start that
   * leave the node unable to serve safely; the caller should stop the process. With `cell`, the
   * node is one shard worker's share (no HTTP server: the main thread has it).
   */
  static async start(
    config: CairnConfig,
    log: Logger,
    onFatal: (err: unknown) => void = () => {},
    cell?: ShardCell,
  ): Promise<CairnNode> {
    const node = new CairnNode(config, log, onFatal, cell ?? null);
    // SWIM's socket, bound on rpc_addr's port before gRPC (rpc-port.ts), until membership takes it.
    let reserved: ReservedRpcPort | null = null;
    try {
      if (cell === undefined) {
        node.#lock = await claimDataDir({ ...config, shard_workers: 1 }, log);
        // Before the storage opens: a start that fails on rpc_addr writes no WAL, which would
        // bind the directory to this start's settings (rpc-port.ts).
        reserved = await claimRpcAddr(config.rpc_addr);
        await node.#startHttp();
      }
      if (config.cluster.seed_nodes.length > 0) {
        const incarnation = cell?.meta.incarnation ?? (await loadIncarnation(config.data_dir)).id;
        const { cert_file: certFile, key_file: keyFile, peer_ca_file: peerCaFile } = config.tls;
        if (certFile !== undefined && keyFile !== undefined && peerCaFile !== undefined) {
          node.#peerTls = new PeerTls({ certFile, keyFile, peerCaFile }, (err) =>
            log.error(
              "the TLS files changed but cannot be used to dial peers, the ones read before are kept",
              {
                error: err.message,
              },
            ),
          );
        }
        const peerTls = node.#peerTls ?? undefined;
        const build = testingBuildVersion(process.env) ?? BUILD_VERSION;
        if (build !== BUILD_VERSION)
          log.warn("this build's cluster version claimed by a test (testing only)", {
            env: BUILD_VERSION_ENV,
            build,
          });
        const listenMs = testingFoundingListenMs(process.env);
        if (listenMs !== null)
          log.warn("the first seed's listening before a founding set by a test (testing only)", {
            env: FOUNDING_LISTEN_ENV,
            listen_ms: listenMs,
          });
        node.#cluster = new ClusterState(
          config,
          log,
          node.views,
          incarnation,
          (err) => {
            log.error(
              err.code === "CAIRN_ERR_DUPLICATE_NODE_ID"
                ? "another node runs as this node id; this one stops"
                : err.code === "CAIRN_ERR_NODE_REMOVED"
                  ? "this node was removed from its cluster; it stops"
                  : err.code === CLUSTER_VERSION
                    ? "this build is older than the cluster's version; it stops"
                    : err.code === REJOIN_LIMIT
                      ? "this member's data directory was replaced too many times; it stops"
                      : "this data directory is an earlier copy of a member's state; it stops",
              { error: err.message, code: err.code },
            );
            onFatal(err);
          },
          peerTls,
          build,
          listenMs ?? undefined,
        );
        // Before shard 0 opens: a member whose shard 0 is refilled knows its cluster by it.
        await node.#cluster.loadClusterIdRecord(cell === undefined || cell.index === 0);
      }
      node.#store = await node.#openStore();
      if (node.#cluster !== null && node.#transport !== null) {
        const store = node.#store;
        const cluster = node.#cluster;
        cluster.onMemberRejoined = (member) => store.wakeGroupsLedBy(member);
        // A member gone for good takes its per-peer series with it (its frames, stragglers to a
        // replica it left behind, are not counted again), and its link: its connections, its
        // snapshots waiting (GrpcTransport.forgetPeer).
        const transport = node.#transport;
        cluster.onMemberLeft = (member) => {
          node.metrics.removePeer(member);
          transport.forgetPeer(member);
        };
        node.metrics.setGonePeers((peer) => hasLeftForGood(cluster.meta, peer));
        node.metrics.setKnownPeers((peer) => cluster.meta?.stateOf(peer) !== undefined);
        // A shard worker sets the view of its own shards only, its siblings' as they share them.
        if (cell !== undefined) {
          cluster.ownShards((shard) => ownerOf(shard, cell.count) === cell.index);
          // Worker 0 learns what no meta state says of this member; the others gate by it too.
          shareMemberStanding(cluster, cell.meta, cell.index);
        }
        // The view lists every shard: those with no replica here where the meta group places
        // them (a shard worker its own shards only: the node's view merges the workers').
        cluster.listUnheld(
          (shard) =>
            (cell === undefined || ownerOf(shard, cell.count) === cell.index) &&
            !store.holds(shard),
        );
        if (cell === undefined || cell.index === 0) {
          cluster.attach(leaderProposer(store, node.#transport));
        } else {
          // The meta group lives in worker 0 (shard 0 is its): this worker follows its state.
          cluster.attach(cell.meta.proposer());
          cell.meta.follow((state) => {
            cluster.applied(state);
            store.replicasChanged();
          });
        }
      }
      let rpcAddr = config.rpc_addr;
      if (cell !== undefined) {
        const { rpc, http } = await cell.addresses();
        node.#addresses = { ...node.#addresses, http };
        rpcAddr = rpc;
      }
      const gossip = cell?.membership ?? true;
      // A shard worker's port 0: SWIM's UDP socket first, on a number gRPC can take too
      // (rpc-port.ts; the main thread checked rpc_addr before the workers opened their shards).
      const zero = parseHostPort(rpcAddr, { allowPortZero: true, allowUnspecified: true });
      if (cell !== undefined && gossip && zero.ok && zero.value.port === 0) {
        reserved = await reserveRpcPort(zero.value.host).catch((err: unknown) => {
          throw bindFailure(err, rpcAddr);
        });
      }
      await node.#startRpc(reserved?.address ?? rpcAddr);
      if (gossip) await node.#startMembership(reserved?.socket);
      if (node.#cluster !== null) node.#startUpkeep(node.#cluster);
    } catch (err) {
      // Not taken by membership (a failure before it started: a port, the storage, its gossip
      // keys): the socket would keep the process running after the failed start.
      if (node.#membership === null) closeQuietly(reserved?.socket);
      await node.#closeAll(0);
      // A file-system error names data_dir, the file and the cause (not a bare errno).
      throw dataDirError(err, config.data_dir, "open its storage");
    }
    node.#serving = true;
    log.info(cell === undefined ? "node started" : "shard worker started", {
      node_id: config.node_id,
      rpc_addr: node.#addresses.rpc,
      http_addr: node.#addresses.http,
      data_dir: config.data_dir,
      total_shards: config.cluster.total_shards,
      active_shards: node.store.shardIds().length,
      mode: config.cluster.seed_nodes.length === 0 ? "single-node" : "cluster",
      ...(cell === undefined ? {} : { shard_workers: cell.count }),
    });
    return node;
  }

  async #openStore(): Promise<MultiRaft> {
    const config = this.config;
    const { metrics, views } = this;
    const log = this.#log;
    const raftLog = log.child("raft");
    const storageLog = log.child("storage");
    // A peer decides how many malformed appends come: their lines are rate-limited.
    const malformedLogs = new LogWindow();
    // And how many messages for shards not known here come past the held ones' bound.
    const heldDropLogs = new LogWindow();
    const cluster = this.#cluster;
    const cell = this.#cell;
    let opened: MultiRaft | null = null;
    if (cluster !== null) {
      this.#transport = new GrpcTransport({
        clusterId: () => cluster.peerClusterId,
        nodeId: config.node_id,
        replicaId: cluster.replicaId,
        // The gossip view's address of a live member, else the one the meta group recorded,
        // else the one gossip has for a node the meta state here does not record: a member
        // that joined while this node was away, which this node must answer to catch up on
        // the meta group it may lead (the view lists members only; handshake.ts takes its
        // calls).
        peers: (id) =>
          rpcAddressOf(this.views.current(), id) ??
          cluster.meta?.members.get(id)?.rpcAddr ??
          this.#gossipRpcAddr(id),
        onUnreachable: (to) => opened?.reportUnreachable(to),
        // A link made again to a member gone for good (a straggler) goes once unused
        // (forgetDeparted); the member's departure itself drops the link (onMemberLeft, below).
        departed: (id) => hasLeftForGood(cluster.meta, id),
        // Links to nodes the meta state does not record (answers to unknown senders) are
        // capped (peer-links.ts UNKNOWN_PEER_LINKS): anyone naming the cluster id can invent them.
        known: (id) => cluster.meta?.stateOf(id) !== undefined,
        logger: log.child("peers"),
        snapshotRateBytesPerSec: config.raft.snapshot_rate_bytes_per_sec,
        snapshotLearnerRateBytesPerSec: config.cluster.rebalance.rate_bytes_per_sec,
        metrics: metrics.snapshotMetrics,
        // Worker i's groups talk to worker i of every node.
        ...(cell === null || cell.count === 1
          ? {}
          : { shardWorker: { index: cell.index, count: cell.count } }),
        ...(this.#peerTls === null ? {} : { tls: this.#peerTls }),
      });
    }
    const replicas = (shard: number): string[] =>
      opened?.shardInfo(shard)?.voters.map(nodeOfReplica) ?? [config.node_id];
    // A replica moved off this node shows where the meta group places its shard instead.
    const showShard = (view: ShardView): void =>
      views.setShard(cluster === null ? view : cluster.placedView(view));
    // The node's memory budgets are shared by its shard workers.
    const share = (bytes: number): number => Math.floor(bytes / (cell?.count ?? 1));
    const planted = plantedBugs(process.env);
    if (planted !== null) log.warn("planted bugs enabled (testing only)", { bugs: planted.names });
    // The disk space kept free (storage.min_free_bytes): looked at before the shards open, so a
    // node started on a disk under it refuses Puts from its first request.
    const reserve = new DiskReserve({
      minFreeBytes: config.storage.min_free_bytes,
      // Each shard worker's WAL writes on the same disk, and each worker has a reserve.
      writers: cell?.count ?? 1,
      dataDir: config.data_dir,
      statfs: () => statfs(config.data_dir),
      onCheck: (available, low) => metrics.setDisk(available, low),
      log: log.child("disk"),
    });
    this.#diskReserve = reserve;
    await reserve.start();
    const served = servedTlsFiles(config);
    if (served !== undefined && (cell === null || cell.index === 0)) {
      this.#certExpiry = new CertExpiryWatch({
        ...served,
        onRead: (notAfter) => metrics.setCertificateExpiry(notAfter),
        log: log.child("tls"),
        // eslint-disable-next-line no-restricted-properties -- a certificate's validity is wall-clock time
        now: () => Date.now(),
      });
      this.#certExpiry.start();
    }
    const store = await MultiRaft.open({
      ...(planted === null ? {} : { testingBugs: planted.bugs }),
      ...(planted === null || planted.fs === null ? {} : { fs: planted.fs }),
      nodeId: config.node_id,
      dataDir: config.data_dir,
      ...(cell === null
        ? {}
        : {
            walDir: cell.walDir,
            ownsShard: (shard: number) => ownerOf(shard, cell.count) === cell.index,
          }),
      totalShards: config.cluster.total_shards,
      tickMs: config.raft.tick_ms,
      electionTicks: config.raft.election_ticks,
      heartbeatTicks: config.raft.heartbeat_ticks,
      quiesce: config.raft.quiesce,
      nodeDown: (node: string) => this.#downNodes.has(node),
      memtableBytes: config.storage.memtable_bytes,
      blockCacheBytes: share(config.storage.block_cache_bytes),
      maxOpenFiles: Math.max(16, share(this.#tableFiles)),
      memtableBudgetBytes: share(config.storage.memtable_budget_bytes),
      wal: { memoryBudgetBytes: share(config.storage.wal_cache_bytes) },
      maxPendingBytes: share(config.limits.max_pending_bytes),
      writeRefused: (op: "put" | "delete") => reserve.refusal(op),
      acceptLostWal: config.recovery.unsafe_accept_lost_wal && cluster === null,
      flushOutputs: () => this.#rpc?.flushNow(),
      lsmMetrics: metrics.lsmMetrics,
      ...(cluster === null || this.#transport === null
        ? {}
        : {
            transport: countingTransport(this.#transport, metrics),
            replicaId: cluster.replicaId,
            onStaleReplica: (from: string, to: string) => cluster.noticeStaleReplica(from, to),
            replicasOf: (shard: number) => cluster.replicasOf(shard),
            replicasNow: (shard: number) => cluster.replicasNow(shard),
            acceptsReplica: (shard: number) => cluster.acceptsReplica(shard),
            firstCampaigner: (shard: number) =>
              cluster.firstCampaigner(shard, (node) => this.#isAlive(node)),
            ensureShard: (shard: number) => cluster.ensureShard(shard, REQUEST_TIMEOUT_MS),
            createdShards: () => cluster.createdShards(),
            // A shard worker without shard 0 syncs through worker 0, which holds it.
            ...(cell === null || cell.index === 0
              ? {}
              : {
                  syncMeta: (deadline: number, call: ClientCall | null) =>
                    cell.meta.sync(deadline, call),
                  metaAtStart: (shard: number) => cell.meta.placing(shard, META_AT_START_MS),
                }),
            remoteReadIndex: (leader: string, shard: number, term: number) => {
              const transport = this.#transport;
              if (transport === null) return Promise.reject(new Error("no peer transport"));
              return transport
                .readIndex(nodeId(leader), shard, REQUEST_TIMEOUT_MS, term)
                .catch((err: unknown) => {
                  // The leader moved (the hint, when that node knows the new one) or is
                  // unreachable: the read goes there, or the caller retries (UNAVAILABLE).
                  throw err instanceof NotLeaderError ? err : new NotLeaderError(null);
                });
            },
            confirmTerms: (node: string, checks: readonly TermCheck[]) => {
              const transport = this.#transport;
              if (transport === null) return Promise.reject(new Error("no peer transport"));
              return transport.confirmTerms(nodeId(node), checks, CONFIRM_TERMS_TIMEOUT_MS);
            },
            remoteScan: (
              node: string,
              shards: readonly number[],
              req: ScanRequest,
              deadline: number,
              cut: CallCut,
            ) => {
              const transport = this.#transport;
              if (transport === null) return Promise.reject(new Error("no peer transport"));
              // The call ends at the scan's client's deadline, and carries it to the peer,
              // whose read barriers stop waiting at it (MultiRaft.scanShards); or when the
              // client cancels (`cut`): the peer's call is cancelled, and they stop then.
              const left = deadline - deadlineClock();
              if (left <= 0) return Promise.reject(new ReadPastDeadlineError(Number.NaN));
              return transport
                .scanShards(nodeId(node), shards, req, Math.min(REQUEST_TIMEOUT_MS, left), cut)
                .catch((err: unknown) => {
                  // (A call its client cancelled, `cut`, fails ReadCancelledError in
                  // Scanner.#scanRemote, whatever it rejects with here.)
                  if (deadlineClock() >= deadline) throw new ReadPastDeadlineError(Number.NaN);
                  // That replica is down or cut off: another is asked, or the caller retries.
                  if (err instanceof NotLeaderError) throw err;
                  const down = new NotLeaderError(null);
                  down.message = `${node} did not answer: ${err instanceof Error ? err.message : String(err)}`;
                  throw down;
                });
            },
            requestTimeoutMs: REQUEST_TIMEOUT_MS,
          }),
      observer: {
        metaApplied: (state) => {
          cluster?.applied(state);
          // Worker 0 holds shard 0: the other workers follow its meta state.
          cell?.meta.share(state);
        },
        shardOpened(shard, replayedFrom, replayedTo) {
          metrics.initShard(shard);
          showShard({ id: shard, leader: "", replicas: replicas(shard), term: 0 });
          storageLog.debug("shard opened", {
            shard_id: shard,
            replay_from: replayedFrom,
            replay_to: replayedTo,
          });
        },
        shardRemoved(shard) {
          // Its per-shard series go with it (replica GC: src/node/replica-gc.ts logs it).
          metrics.removeShard(shard);
          cluster?.replicaRemoved(shard);
        },
        leaderChanged: (shard, leader, term) => {
          if (leader !== null) metrics.incLeaderChanges(shard);
          for (const listener of this.#leaderListeners) listener(shard, leader);
          showShard({ id: shard, leader: leader ?? "", replicas: replicas(shard), term });
          raftLog.debug("shard leader changed", {
            shard_id: shard,
            leader: leader ?? "none",
            term,
          });
        },
        malformedAppend(from, shard, index, reason) {
          const skipped = malformedLogs.admit();
          if (skipped === null) return;
          raftLog.warn(
            "a peer's append held a log entry that is no command this build applies, and was dropped: a leader of this build never sends one, so the caller posed as a member, or runs a build this one cannot read (docs/operations.md, Upgrading)",
            {
              peer: from,
              shard_id: shard,
              index,
              reason,
              ...(skipped > 0 ? { not_logged_before: skipped } : {}),
            },
          );
        },
        heldMessageDropped(from, shard) {
          const skipped = heldDropLogs.admit();
          if (skipped === null) return;
          raftLog.warn(
            "a peer's message for a shard this node does not know it replicates was dropped: the messages held for such shards are at their bound (4,096, 64 MiB); a new shard's first messages are a few, so a peer sends many more, or posed as a member",
            { peer: from, shard_id: shard, ...(skipped > 0 ? { not_logged_before: skipped } : {}) },
          );
        },
        shardRefilled(shard) {
          storageLog.info("shard refilled from its peers after its directory was lost", {
            shard_id: shard,
          });
        },
        shardQuarantined(shard, into, atOpen) {
          storageLog.error(
            atOpen
              ? "a shard's tables are corrupt: its directory was moved aside as the node started, and its peers refill the shard (delete the moved directory once you no longer need it)"
              : "a shard's tables are corrupt: its directory was moved aside, and its peers refill the shard when the node starts again (delete the moved directory once you no longer need it)",
            { shard_id: shard, moved_to: into },
          );
        },
        engineKeptAside(shard, paths) {
          storageLog.warn(
            "a shard's manifest ended with a torn last record (a crash during its last append, never acknowledged): the record was dropped, and the manifest and any table its edit may have added were moved aside (delete them once you no longer need them)",
            { shard_id: shard, kept_aside: paths },
          );
        },
        shardNotQuarantined(shard, err) {
          storageLog.error(
            "a shard's tables are corrupt, and its directory could not be moved aside: move or delete it before starting the node again, and its peers refill the shard",
            {
              shard_id: shard,
              path: join(config.data_dir, "shards", String(shard)),
              error: describeError(err),
            },
          );
        },
        snapshotInstalled(shard, index, bytes) {
          raftLog.info("shard state installed from the leader's snapshot", {
            shard_id: shard,
            index,
            bytes,
          });
        },
        raftState(shard, term, commit) {
          metrics.setRaftState(shard, config.node_id, term, commit);
        },
        awakeGroups: (count) => metrics.setAwakeGroups(count),
        walWritten: (ms, bytes) => {
          metrics.walWritten(ms, bytes);
          reserve.wrote(bytes);
        },
        confChanged(shard, voters) {
          // A replica learns its group's configuration from the log: the view follows it.
          const info = opened?.shardInfo(shard);
          showShard({
            id: shard,
            leader: info?.leader ?? "",
            replicas: [...voters],
            term: info?.term ?? 0,
          });
        },
        fatal: (err) => {
          log.error("fatal storage or consistency error; the node stops serving", {
            error: describeError(err),
            data_dir: config.data_dir,
          });
          this.#onFatal(err);
        },
      },
    });
    if (store.tornTail !== undefined) {
      storageLog.warn(
        "the WAL ended with a torn write (a crash, power loss or failed write, such as on a full disk, during its last write); the torn record was cut off (it was never acknowledged)",
        {
          file: store.tornTail.file,
          offset: store.tornTail.offset,
          dropped_bytes: store.tornTail.droppedBytes,
          data_dir: config.data_dir,
        },
      );
    }
    for (const loss of store.acceptedLosses) {
      storageLog.error(
        loss.shard === null
          ? "the WAL was missing or empty; recovery.unsafe_accept_lost_wal accepted the loss: the writes it held are gone, a new WAL starts"
          : "a shard's log ended before what its tables hold; recovery.unsafe_accept_lost_wal accepted the loss: the writes only the WAL held are gone, the log starts again after the tables",
        {
          wal_dir: loss.file,
          data_dir: config.data_dir,
          ...(loss.shard === null
            ? {}
            : { shard_id: loss.shard, tables_up_to: loss.heldUpTo, wal_up_to: loss.walUpTo }),
        },
      );
    }
    for (const l of store.lostShards) {
      storageLog.error(
        "a shard's directory is missing (or holds none of its tables) while the WAL had dropped entries its tables held: its data is lost on this node; its replica is refilled from its peers (until then it serves no serializable read and votes only for a leader holding what it lost)",
        {
          shard_id: l.shard,
          path: l.dir,
          compacted_to: l.compacted,
          lost_log_up_to: l.lost.index,
          data_dir: config.data_dir,
        },
      );
    }
    for (const c of store.clampedCommits) {
      storageLog.warn(
        "a recovered commit index was past the shard's last durable log entry; it was lowered (nothing past the last sync was acknowledged)",
        { shard_id: c.shard, commit: c.commit, clamped_to: c.clampedTo },
      );
    }
    opened = store;
    metrics.setMemtableSource(() => store.memtableSizes());
    metrics.setSstableSource(() => store.tablesPerLevel());
    metrics.setWalSource(() => store.walUnwrittenBytes());
    return store;
  }

  get addresses(): NodeAddresses {
    return this.#addresses;
  }

  async #startHttp(): Promise<void> {
    const { server, address } = await startOpsHttp(this.config, this, this.metrics, this.#log);
    this.#http = server;
    this.#addresses = { ...this.#addresses, http: address };
  }

  async #startRpc(address: string): Promise<void> {
    const c = this.config;
    const served = servedTlsFiles(c);
    const cell = this.#cell;
    const cluster = this.#cluster;
    const store = this.store;
    // Worker 0 holds shard 0: its ClusterState proposes the other workers' meta commands.
    const proposer = cluster !== null && cell?.index === 0 ? cluster : null;
    // Admin.TransferLeader on a shard of this driver: in a cluster through the meta group.
    const transferHere =
      cluster === null
        ? (id: number, to: string) => transferInPlace(store, id, to)
        : (id: number, to: string) =>
            transferLeadership(cluster, store, id, to, REQUEST_TIMEOUT_MS);
    const routed = cell?.route(store, transferHere, proposer) ?? null;
    this.#rpc = new RpcServer({
      address,
      nodeId: c.node_id,
      store:
        cluster === null
          ? (routed?.store ?? this.store)
          : gateByMembership(
              routed?.store ?? this.store,
              () => cluster.notServingReason(),
              () => cluster.staleViewReason() !== null,
            ),
      metrics: this.metrics,
      views: this.views,
      logger: this.#log.child("api"),
      limits: { maxKeyBytes: c.limits.max_key_bytes, maxValueBytes: c.limits.max_value_bytes },
      maxMessageBytes: c.limits.max_message_bytes,
      ...(cell === null ? {} : { internalKey: cell.internalKey }),
      ioThreads: c.rpc.io_threads,
      frontEnd: {
        maxConcurrentStreams: c.rpc.max_concurrent_streams,
        maxContinuationFrames: c.rpc.max_continuation_frames,
        maxResetsPerSecond: c.rpc.max_resets_per_second,
        maxOutputBytes: c.rpc.max_connection_output_bytes,
        writeStallTimeoutMs: c.rpc.write_stall_timeout_ms,
        handshakeTimeoutMs: c.rpc.handshake_timeout_ms,
        idleTimeoutMs: c.rpc.idle_timeout_ms,
        requestReceiveTimeoutMs: c.rpc.request_receive_timeout_ms,
        goAwayGraceMs: c.rpc.goaway_grace_ms,
        maxDecompressions: c.rpc.max_decompressions_per_connection,
      },
      connections: this.#connections,
      ...(served === undefined ? {} : { tls: served }),
      // Who may call what (src/api/authz.ts): absent, every call is open, as before.
      ...(c.auth.tokens_file !== undefined || c.tls.client_ca_file !== undefined
        ? {
            auth: {
              tokensFile: c.auth.tokens_file,
              clientCerts: c.tls.client_ca_file !== undefined,
            },
          }
        : {}),
      // Shard workers after the first bind the port the first one got.
      ...(this.#cell !== null && this.#cell.index > 0 ? { joinsPort: true } : {}),
      onFatal: (err) => {
        this.#log.error("a gRPC I/O thread failed; the node stops serving", {
          error: describeError(err),
        });
        this.#onFatal(err);
      },
      ...(this.#cluster === null ? {} : this.#clusterRpcOptions(this.#cluster)),
      // With shard workers, where the shard lives.
      ...(routed !== null
        ? { transferLeader: routed.transferLeader }
        : cluster !== null
          ? { transferLeader: transferHere }
          : {}),
      ...(cluster === null
        ? {}
        : {
            // A shard worker without shard 0 syncs through worker 0, which holds it.
            memberAdmin: memberAdmin(cluster, () =>
              cell === null || cell.index === 0 ? store.syncMeta() : cell.meta.sync(),
            ),
            staleViewReason: () => cluster.staleViewReason(),
          }),
      ...(cell === null || cell.count === 1 ? {} : { tunnels: cell.tunnels }),
    });
    const rpc = await this.#rpc.start();
    cell?.serving(this.#rpc);
    this.#addresses = { ...this.#addresses, rpc: formatHostPort(rpc) };
  }

  /** Cluster mode: the peer service (cairn.v1.Raft) and forwarding of KV calls to leaders. */
  #clusterRpcOptions(cluster: ClusterState): {
    raft: RaftService;
    forward: ForwardOptions;
  } {
    const store = this.store;
    const transport = this.#transport;
    return {
      raft: createRaftService((from, messages) => store.receive(from, messages), {
        clusterId: () => cluster.peerClusterId,
        // Peers create shards and rejoin through the meta group's leader.
        proposeMeta: async (bytes, from) => {
          const cmd = proposedCommand(bytes);
          // A member's report about itself, from another node or of a node never admitted.
          checkMemberUpdate(cluster.meta, cmd, from);
          // Room for a node let in (the members table is fed by the network), while this node
          // leads the meta group: a follower's refusal would name no leader to ask.
          const release = store.leads(0) ? this.#joins.admit(cluster.meta, cmd) : null;
          try {
            // A node with a live member's id must not evict it as its "new incarnation".
            const peerTls = this.#peerTls ?? undefined;
            await checkRejoin(cluster.meta, cmd, (address, id) =>
              probeMember(address, id, peerTls),
            );
            const outcome = await store.proposeMeta(cmd);
            if (outcome.kind === "rejected") throw metaRefusal(outcome);
          } finally {
            release?.();
          }
        },
        readIndex: (shard, voucher, deadline) => store.readIndexAsLeader(shard, voucher, deadline),
        // KV calls forwarded over the streams (forward.ts): served by the KV handlers here, the
        // answer sent back on this node's own stream to the caller.
        ...(transport === null
          ? {}
          : {
              calls: {
                // Frames arrive only once the RpcServer serving this service has started.
                serve: (from, call) =>
                  this.#rpc?.servePeerCall(from, call, (reply) => transport.reply(from, reply)),
                replied: (from, reply) => transport.receiveReply(from, reply),
              },
              // A peer that reached this node is up: this node's stream back to it stops
              // backing off (the answers above go back on it).
              connected: (from) => transport.heardFrom(from),
            }),
        confirmTerms: (checks) => store.confirmTerms(checks),
        scanShards: (shards, req, deadline, call) => store.scanShards(shards, req, deadline, call),
        nodeId: this.config.node_id,
        // Incoming snapshots are written here as they arrive; each shard worker has its own.
        snapshotDir: join(
          this.config.data_dir,
          "incoming-snapshots",
          String(this.#cell?.index ?? 0),
        ),
        // A snapshot that would take the disk's reserve (storage.min_free_bytes) is refused.
        ...(this.#diskReserve === null ? {} : { snapshotDisk: this.#diskReserve }),
        // The members the meta group records (rejoined ones keep their id); a removed one
        // is gone for good; one not recorded here may have joined since (handshake.ts).
        membership: (node) => {
          const state = cluster.meta?.stateOf(node);
          return state === undefined ? "unknown" : state === "removed" ? "removed" : "member";
        },
        refused: (kind) => this.metrics.peerCallRefused(kind),
        logger: this.#log.child("peers"),
        metrics: this.metrics.snapshotMetrics,
      }),
      forward: {
        nodeId: this.config.node_id,
        addressOf: (id) => rpcAddressOf(this.views.current(), id),
        maxDeadlineMs: REQUEST_TIMEOUT_MS,
        ...(this.#peerTls === null ? {} : { tls: this.#peerTls }),
        leaderChangeGraceMs: this.config.raft.tick_ms * this.config.raft.election_ticks,
        ...(transport === null
          ? {}
          : {
              peerCall: (leader, path, request, options) =>
                transport.call(leader, path, request, options),
            }),
        leaders: {
          shardOf: (key) => shardForKey(key, this.config.cluster.total_shards),
          watch: (listener) => {
            this.#leaderListeners.add(listener);
            return () => this.#leaderListeners.delete(listener);
          },
          learned: (shard, leader) => store.noteLeader(shard, leader),
        },
      },
    };
  }

  /**
   * The address gossip has for `node` while it is alive or suspect there, or null (not known,
   * gone, or this shard worker does not run membership).
   */
  #gossipRpcAddr(node: string): string | null {
    const m = this.#membership?.members().find((x) => x.meta.id === node);
    return m !== undefined &&
      (m.state === "alive" || m.state === "suspect") &&
      m.meta.rpcAddr !== ""
      ? m.meta.rpcAddr
      : null;
  }

  /**
   * Whether gossip has `node` alive now (false before membership starts). A shard worker that
   * does not run membership reads the members worker 0 shares in the cluster view.
   */
  #isAlive(node: string): boolean {
    if (this.#cell !== null && !this.#cell.membership) {
      return this.views.current().nodes.some((n) => n.id === node && n.state === "alive");
    }
    const members = this.#membership?.members() ?? [];
    return members.some((m) => m.meta.id === node && m.state === "alive");
  }

  /**
   * Cluster mode: every 2 s, replicas retired by a rejoin are replaced and leaderships spread
   * (in each shard worker, over its own groups); in a worker that does not run membership,
   * the groups led by a member gossip no longer has alive are woken (as membership's events do
   * in the one that runs it).
   */
  #startUpkeep(cluster: ClusterState): void {
    const c = this.config;
    const changing = new Set<number>();
    const store = this.store;
    const allocator = new AllocatorLoop({
      nodeId: c.node_id,
      deadAfterMs: c.cluster.dead_after_ms,
      maxMoves: c.cluster.rebalance.max_moves,
      movesPerMinute: c.cluster.rebalance.moves_per_minute,
      tolerance: c.cluster.rebalance.tolerance,
      meta: () => cluster.meta,
      leadsMeta: () => store.leads(0),
      alive: () =>
        new Set(
          this.views
            .current()
            .nodes.filter((n) => n.state === "alive")
            .map((n) => n.id),
        ),
      metaCaughtUp: (node) => {
        const meta = cluster.meta;
        return meta !== null && store.isCaughtUp(0, meta.replicaOf(node));
      },
      propose: (cmd) => cluster.propose(cmd, REQUEST_TIMEOUT_MS),
      proposed: () => upkeepSoon(),
      log: this.#log.child("allocator"),
    });
    const cell = this.#cell;
    // Replicas moved off this node are deleted (replica-gc.ts), a few a pass.
    const gc = new ReplicaGc({
      store,
      nodeId: c.node_id,
      meta: () => cluster.meta,
      // A shard worker without shard 0 syncs through worker 0, which holds it.
      syncMeta: () => (cell === null || cell.index === 0 ? store.syncMeta() : cell.meta.sync()),
      removed: (bytes) => this.metrics.replicaRemoved(bytes),
      log: this.#log.child("replica-gc"),
    });
    // This node's disk, reported to the meta group when nearly full (once a node: worker 0).
    const usedFile = diskUsedFile(process.env);
    if (usedFile !== null)
      this.#log.warn("disk usage read from a file (testing only)", {
        env: DISK_USED_FILE_ENV,
        file: usedFile,
      });
    const disk =
      cell === null || cell.index === 0
        ? new DiskWatch({
            nodeId: c.node_id,
            fullPercent: c.cluster.disk_full_percent,
            putsRefused: () => this.#diskReserve?.low === true,
            meta: () => cluster.meta,
            // The disk's reserve looks every second: its last look, not a statfs of its own.
            usedPercent: async () => {
              if (usedFile !== null) return readDiskUsedFile(usedFile);
              const reserve = this.#diskReserve;
              if (reserve === null) throw new Error("the data directory's disk is not looked at");
              return reserve.usedPercent();
            },
            propose: (cmd) => cluster.propose(cmd, REQUEST_TIMEOUT_MS),
            log: this.#log.child("disk"),
          })
        : null;
    // The cluster version: this node's build reported, and raised by the meta leader once every
    // member runs it (once a node: worker 0, as the disk).
    const versions =
      cell === null || cell.index === 0
        ? new VersionUpkeep({
            nodeId: c.node_id,
            build: cluster.build,
            meta: () => cluster.meta,
            leadsMeta: () => store.leads(0),
            propose: (cmd) => cluster.propose(cmd, REQUEST_TIMEOUT_MS),
            log: this.#log.child("version"),
          })
        : null;
    // Shards not moving whose group takes steps here (a wiped node's replica replaced: remove
    // the old, add the new as a learner, promote it): between ticks too, as a move's, so that
    // the group runs short of a voter for a snapshot's time rather than for two ticks (a second
    // failure meanwhile leaves it without a quorum: chaos seed 3201).
    const hurried = new Set<number>();
    const hold = moveStepHoldMs(process.env);
    if (hold > 0)
      this.#log.warn("replica changes held after each step (testing only)", { hold_ms: hold });
    // A group led here takes no step before this node's meta state is synced after it became
    // leader (replicas.ts, LeaderMetaCheck): an old state would undo a settled move.
    const metaCheck = new LeaderMetaCheck({
      sync: () => (cell === null || cell.index === 0 ? store.syncMeta() : cell.meta.sync()),
      onSynced: () => upkeepSoon(),
      onError: (err) =>
        this.#log.debug(
          "meta state not synced for a group's replica changes; the next pass retries",
          {
            error: describeError(err),
          },
        ),
    });
    const effects: ReplicaEffects = {
      metaFresh: (shard, term) => metaCheck.fresh(shard, term),
      settle: (shard: number, nodes: readonly string[]) =>
        cluster.propose({ op: "settle-shard", shard, nodes: [...nodes] }, REQUEST_TIMEOUT_MS),
      // A move's next step is often ready as soon as the last one ends: pass again shortly
      // instead of a whole tick later (a move is four steps; at one per tick, adding a node to a
      // cluster of 1,024 shards would take minutes of ticks alone).
      stepped: (shard: number, step: ReplicaStep) => {
        this.#log.info("replica change", { shard_id: shard, ...describeStep(step) });
        hurried.add(shard);
        upkeepSoon();
      },
      // A learner catching up is promoted once it has: look again shortly.
      waiting: (shard: number) => {
        hurried.add(shard);
        upkeepSoon(MOVE_POLL_MS);
      },
      idle: (shard: number) => hurried.delete(shard),
      ...(hold > 0 ? { holdAfterStepMs: hold } : {}),
    };
    // One pass between ticks, at the soonest time asked: a step that ends while a learner's
    // poll (MOVE_POLL_MS) is pending does not wait for that poll.
    const soon = new SoonestTimer(() => {
      if (this.#stopping === null) upkeep(false);
    });
    const upkeepSoon = (delayMs = UPKEEP_SOON_MS): void => {
      if (this.#stopping === null) soon.request(delayMs);
    };
    // A move started (its group's leader takes the first step) or settled (the allocator on
    // the meta leader may start the next one): without this, each would wait for a tick, and a
    // move slot would stand empty most of the time (bench:rebalance: 1.2 moves/s of 4 slots).
    cluster.onMovesChanged = () => upkeepSoon();
    const upkeep = (tick: boolean): void => {
      const alive = new Set(
        this.views
          .current()
          .nodes.filter((n) => n.state === "alive")
          .map((n) => n.id),
      );
      replaceReplicas(
        this.store,
        cluster.meta,
        changing,
        (shard, err) =>
          this.#log.debug("replica change failed; the next pass retries", {
            shard_id: shard,
            error: describeError(err),
          }),
        effects,
        (node) => node === c.node_id || alive.has(node),
        // Between ticks, only the moves, the meta group's learners and the groups replacing a
        // replica have steps to hurry: a pass over every group led here was a tenth of a
        // node's CPU during a rebalance.
        tick ? undefined : new Set([0, ...(cluster.meta?.movingShards() ?? []), ...hurried]),
      );
      allocator.pass();
      if (tick) {
        spreadLeaders(this.store, cluster, c.node_id, alive);
        void gc.pass();
        disk?.maybeCheck();
        void versions?.pass();
      }
    };
    this.#spreadTimer = setInterval(() => upkeep(true), LEADER_SPREAD_MS);
    this.#spreadTimer.unref();
    if (cell === null) return;
    cell.watchLeaders((shard, leader) => {
      for (const listener of this.#leaderListeners) listener(shard, leader);
    });
    if (cell.membership) return;
    // Each node's state as last seen in a view; past DOWN_NODES_MAX, only the last view's (ids
    // gossip made up, then forgot, left the views for good).
    const states = new Map<string, string>();
    this.#unfollowMembers = this.views.subscribe((view) => {
      if (states.size > DOWN_NODES_MAX) {
        const shown = new Set(view.nodes.map((n) => n.id));
        for (const id of states.keys()) if (!shown.has(id)) states.delete(id);
      }
      for (const n of view.nodes) {
        const was = states.get(n.id);
        states.set(n.id, n.state);
        if (was === "alive" && n.state !== "alive") this.#store?.wakeGroupsLedBy(n.id);
        this.#noteNodeState(n.id, n.state);
        if (was !== n.state && (n.state === "dead" || n.state === "left")) {
          this.#cluster?.forgetLeader(n.id);
        }
      }
    });
  }

  /**
   * The seal of SWIM's datagrams when `cluster.gossip_key_file` is set in a cluster (its keys
   * read again when the file changes: a file that no longer reads well is reported and the keys
   * before kept), or null. The configuration checked the file at start.
   */
  #gossipSeal(): GossipSeal | null {
    const c = this.config.cluster;
    const log = this.#log.child("membership");
    if (c.seed_nodes.length === 0) return null; // a single node: no one to gossip with
    if (c.gossip_key_file === undefined) {
      if (this.config.tls.cert_file !== undefined) {
        log.warn(
          "SWIM gossip is cleartext beside TLS: a host that reaches the UDP port can make it believe a member dead (set cluster.gossip_key_file)",
        );
      }
      return null;
    }
    const file = c.gossip_key_file;
    const readAt = stampGossipKeyFile(file);
    const seal = new GossipSeal(readGossipKeyFile(file), c.gossip_plaintext);
    log.info("gossip sealed", { keys: seal.keyCount, plaintext: seal.plaintext });
    this.#gossipKeysWatch = new GossipKeyFileWatch(
      file,
      readAt,
      (keys) => {
        seal.setKeys(keys);
        log.info("gossip keys reloaded", { file, keys: keys.length });
      },
      (err) =>
        log.error("gossip keys not reloaded: the keys before are kept", {
          file,
          reason: err.reason,
          code: err.code,
        }),
    );
    return seal;
  }

  /**
   * Starts SWIM on the RPC port number (UDP) and joins through the seeds in the background; the
   * cluster view, `/health`'s `nodes` and the swim_* metrics follow its events. A seed that
   * refuses this node's total_shards is fatal: the node must not serve a cluster it disagrees with.
   */
  async #startMembership(socket?: dgram.Socket): Promise<void> {
    const c = this.config;
    const rpc = parseHostPort(this.#addresses.rpc, { allowUnspecified: true });
    const http = parseHostPort(this.#addresses.http, { allowUnspecified: true });
    if (!rpc.ok || !http.ok) throw new Error("bound addresses are not host:port");
    const bindHost = parseHostPort(c.rpc_addr, { allowPortZero: true, allowUnspecified: true });
    const bindAddr = formatHostPort({
      host: bindHost.ok ? bindHost.value.host : rpc.value.host,
      port: rpc.value.port,
    });
    const seal = this.#gossipSeal();
    // SWIM's UDP socket on the gRPC port's number: a failure to bind names rpc_addr.
    const membership = await Membership.start(
      {
        nodeId: c.node_id,
        bindAddr,
        advertiseRpcAddr: advertised(c.advertise_rpc_addr, rpc.value),
        advertiseHttpAddr: advertised(c.advertise_http_addr, http.value),
        totalShards: c.cluster.total_shards,
        seeds: c.cluster.seed_nodes,
        // A member restarted on its data directory joins and re-contacts through the members
        // its meta state records too (recorded-members.ts), read again each round: the meta
        // state loaded from disk (shard 0 opened before this), then each state applied. Its
        // seeds may name no live member any more, and its peers hold it `left` after a
        // graceful stop: they would never probe it again.
        ...(this.#cluster === null
          ? {}
          : {
              recorded: () => recordedMembers(this.#cluster?.meta ?? null, c.node_id),
            }),
        metrics: this.metrics.membershipMetrics,
        logger: this.#log.child("membership"),
        ...(seal === null ? {} : { seal }),
      },
      socket,
    ).catch((err: unknown) => {
      throw bindFailure(err, bindAddr);
    });
    this.#membership = membership;
    // swim_cluster_size counts the cluster's members once there is a cluster: a node that only
    // gossips with them (started after the founding, never admitted) is not one of them, nor is
    // one that left it (decommissioned or removed, still running).
    this.metrics.setClusterSizeSource(() => {
      const meta = this.#cluster?.meta;
      if (meta === undefined || meta === null) return null;
      return membership
        .members()
        .filter(
          (m) =>
            (m.state === "alive" || m.state === "suspect") &&
            meta.members.has(m.meta.id) &&
            !hasLeftForGood(meta, m.meta.id),
        ).length;
    });
    this.metrics.setPlacementSource(() => {
      const meta = this.#cluster?.meta;
      if (meta === undefined || meta === null || meta.clusterId === null) return null;
      let diskFull = 0;
      for (const m of meta.members.values()) if (m.diskFull === true) diskFull++;
      return {
        moving: meta.movingCount(),
        underReplicated: meta.underReplicatedCount(),
        diskFull,
      };
    });
    // Once this node knows its cluster, only its members are listed, each with its state
    // (design.md §5.2); before, every node gossip knows (the ones it asks to join through). A
    // member gossip here has not heard from since this node started (it died before, and every
    // node that saw it die restarted since) is listed too, `dead`, at the addresses the meta
    // group recorded: unlisted, it was in no view, and an operator could not see the member
    // to remove (chaos seed 203).
    const publish = (members: readonly SwimMember[]): void => {
      const meta = this.#cluster?.meta ?? null;
      const known = meta !== null && meta.clusterId !== null;
      const counts = known ? meta.replicaCounts() : null;
      const gossiped = new Set<string>(members.map((m) => m.meta.id));
      const unheard =
        known && meta !== null
          ? [...meta.members.values()].filter(
              (m) => !gossiped.has(m.id) && meta.stateOf(m.id) !== "removed",
            )
          : [];
      if (known) {
        // The members' reserve of rpc.max_connections (connection-slots.ts): those serving
        // first (active, decommissioning), then those joining, then the rest not removed.
        const rank = (id: string): number => {
          const state = meta.stateOf(id);
          return state === "active" || state === "decommissioning"
            ? 0
            : state === "joining"
              ? 1
              : 2;
        };
        void this.#memberAddresses.update(
          [...meta.members.values()]
            .filter((m) => meta.stateOf(m.id) !== "removed")
            .sort((a, b) => rank(a.id) - rank(b.id))
            .map((m) => m.rpcAddr),
        );
      }
      this.views.setMembers([
        ...members.flatMap((m) => {
          const state = known ? meta.stateOf(m.meta.id) : undefined;
          if (known && (state === undefined || state === "removed")) return [];
          const full = known && meta.members.get(m.meta.id)?.diskFull === true;
          return [
            {
              id: m.meta.id,
              rpc_addr: m.meta.rpcAddr,
              http_addr: m.meta.httpAddr,
              state: m.state,
              ...(state === undefined
                ? {}
                : {
                    member_state: state,
                    replicas: counts?.get(m.meta.id) ?? 0,
                    build: meta?.members.get(m.meta.id)?.build ?? 1,
                  }),
              ...(full ? { disk_full: true } : {}),
            },
          ];
        }),
        ...unheard.map((m) => ({
          id: m.id,
          rpc_addr: m.rpcAddr,
          http_addr: m.httpAddr,
          state: "dead" as const,
          member_state: meta?.stateOf(m.id) ?? "active",
          replicas: counts?.get(m.id) ?? 0,
          build: m.build ?? 1,
          ...(m.diskFull === true ? { disk_full: true } : {}),
        })),
      ]);
    };
    membership.onEvent((e) => {
      publish(e.members);
      // Groups led by a member that may be gone must not sleep on, waiting for it: they wake,
      // and elect another leader unless it answers (a wrong suspicion costs a few heartbeats).
      if (e.kind === "suspect" || e.kind === "dead" || e.kind === "left") {
        this.#store?.wakeGroupsLedBy(e.member.meta.id);
      }
      if (e.kind === "dead" || e.kind === "left") this.#cluster?.forgetLeader(e.member.meta.id);
      this.#noteNodeState(e.member.meta.id, e.member.state);
    });
    publish(membership.members());
    const cluster = this.#cluster;
    if (cluster !== null) {
      const self = {
        id: c.node_id,
        rpcAddr: advertised(c.advertise_rpc_addr, rpc.value),
        httpAddr: advertised(c.advertise_http_addr, http.value),
      };
      cluster.setSelf(self);
      // A fill applies a meta entry per shard created: the members' states and replica counts
      // are published once per view interval, not once per entry.
      let republishing = false;
      cluster.onMetaChanged = () => {
        if (republishing) return;
        republishing = true;
        setTimeout(() => {
          republishing = false;
          membership.reserve(retainedMembers(cluster.meta));
          publish(membership.members());
        }, VIEW_MIN_INTERVAL_MS).unref();
      };
      // A full gossip table makes room for the members (a flood of made-up ones cannot keep
      // them out): those of the meta state loaded at the start, then of each state applied.
      membership.reserve(retainedMembers(cluster.meta));
      this.#bootstrap = cluster
        .bootstrapLoop(this.store, membership, self, () => this.#stopping !== null)
        .catch((err: unknown) => {
          if (this.#stopping !== null) return;
          this.#log.error("founding the cluster failed", { error: describeError(err) });
          this.#onFatal(err);
        });
    }
    if (cluster !== null) {
      this.#rejoin = cluster
        .rejoinLoop(membership, () => this.#stopping !== null)
        .catch(() => undefined);
      this.#removal = cluster
        .removalLoop(membership, () => this.#stopping !== null)
        .catch(() => undefined);
    }
    membership.join().catch((err: unknown) => {
      if (err instanceof ShardCountMismatchError) {
        this.#log.error("the cluster refused this node", { error: err.message });
        this.#onFatal(err);
      } else if ((err as { code?: string }).code !== "CAIRN_ERR_MEMBERSHIP_CLOSED") {
        this.#log.error("joining the cluster failed", { error: (err as Error).message });
      }
    });
  }

  // ── health (shared with the HTTP server) ─────────────────────────────────────────────────────

  /**
   * Shard 0 is served and the node has finished starting: a probe that sees 200 may stop it
   * with SIGTERM and have it drain (the HTTP server answers from the start of start(), before
   * the gRPC threads are up and before `cairn serve` handles signals). In a cluster the node
   * also serves clients: a member still joining, or decommissioned, refuses every request
   * (ClusterState.notServingReason), so a readiness probe must not send it any.
   */
  isQuickHealthy(): boolean {
    const cell = this.#cell;
    return (
      this.#serving &&
      this.#stopping === null &&
      this.#store !== null &&
      (this.#cluster === null || this.#cluster.notServingReason() === null) &&
      // A shard worker that does not own shard 0: its driver has not failed.
      (cell === null || cell.index === 0
        ? this.#store.isShardReady(0)
        : this.#store.failure === undefined)
    );
  }

  async report(): Promise<HealthReport> {
    const shards: ShardHealth[] = [];
    const store = this.#store;
    // In a cluster a shard is degraded when its replica here is being refilled after its
    // directory was lost (ShardInfo.refilling), or one of its replicas is not alive (by gossip).
    const alive = new Set(
      this.views
        .current()
        .nodes.filter((n) => n.state === "alive")
        .map((n) => n.id),
    );
    alive.add(this.config.node_id);
    // ... or missing from its group (its node rejoined and is being refilled).
    const cluster = this.#cluster;
    const lostReplica = (id: number, voters: readonly string[]): boolean =>
      cluster !== null &&
      (voters.some((v) => !alive.has(nodeOfReplica(v))) || cluster.lacksReplica(id, voters));
    // Shard 0 held but with no cluster recorded in it yet (a rejoined node's new replica of the
    // meta group, before the leader's snapshot is installed: its commit index is still 0): this
    // node cannot tell yet which shards are placed on it, so it is not whole.
    const metaMissing = (id: number): boolean =>
      id === 0 && cluster !== null && cluster.clusterId === "";
    for (const id of store?.shardIds() ?? []) {
      // A replica a move took off this node is dormant: not a shard this node holds for the
      // cluster (after a restart it has no leader, and never will). The meta group's replica is
      // kept: a member that is not one of its voters follows it as a learner.
      if (id !== 0 && store?.isPlacedElsewhere(id) === true) continue;
      const info = store?.shardInfo(id) ?? null;
      if (info === null) continue;
      shards.push({
        id,
        status:
          info.leader === null
            ? "unavailable"
            : info.applied < info.commit ||
                info.refilling ||
                lostReplica(id, info.voters) ||
                metaMissing(id)
              ? "degraded"
              : "healthy",
        is_leader: info.role === "leader",
        raft_term: info.term,
        commit_index: info.commit,
        last_applied: info.applied,
      });
    }
    // ... and a shard the meta group places here that this node does not hold yet (it rejoined
    // on an empty data directory and is being refilled, or missed the shard's creation) is
    // listed, degraded: its replica here is missing.
    if (cluster !== null && store !== null) {
      const held = new Set(shards.map((s) => s.id));
      const cell = this.#cell;
      for (const id of cluster.shardsOn(this.config.node_id)) {
        // A shard worker lists its own shards only (the node's report merges the workers').
        if (held.has(id) || (cell !== null && ownerOf(id, cell.count) !== cell.index)) continue;
        shards.push({
          id,
          status: "degraded",
          is_leader: false,
          raft_term: 0,
          commit_index: 0,
          last_applied: 0,
        });
      }
    }
    const putsRefused = this.#diskReserve?.low === true;
    const status =
      store === null || store.failure !== undefined || !this.isQuickHealthy()
        ? "unhealthy"
        : shards.every((s) => s.status === "healthy") && !putsRefused
          ? "healthy"
          : "degraded";
    const view = this.views.current();
    return {
      status,
      node_id: this.config.node_id,
      uptime_seconds: Math.floor((performance.now() - this.#started) / 1000),
      total_shards: this.config.cluster.total_shards,
      active_shards: shards.length,
      shards,
      nodes: view.nodes.map((n) => ({ ...n })),
      ...(view.cluster_version > 0 ? { cluster_version: view.cluster_version } : {}),
      ...(putsRefused ? { puts_refused: true as const } : {}),
    };
  }

  // ── shutdown ────────────────────────────────────────────────────────────────────────────────

  /** Stops taking requests, drains in-flight ones within the configured deadline, closes storage. */
  stop(): Promise<void> {
    this.#stopping ??= this.#closeAll(this.config.shutdown.drain_timeout_ms);
    return this.#stopping;
  }

  /**
   * Gossip's latest word on node `id`: dead or left marks it down (the groups led here may sleep
   * with its replicas behind); anything else after that brings it back, and the groups led here
   * with a replica there wake to bring it up to date (MultiRaft.wakeGroupsFor).
   */
  #noteNodeState(id: string, state: string): void {
    if (this.#downNodes.note(id, state)) this.#store?.wakeGroupsFor(id);
  }

  /** The node ids gossip, the meta state and the cluster view know now (DownNodes keeps them). */
  *#knownNodeIds(): Iterable<string> {
    for (const m of this.#membership?.members() ?? []) yield m.meta.id;
    yield* this.#cluster?.meta?.members.keys() ?? [];
    for (const n of this.views.current().nodes) yield n.id;
  }

  async #closeAll(drainMs: number): Promise<void> {
    const started = performance.now();
    if (this.#spreadTimer !== null) clearInterval(this.#spreadTimer);
    this.#diskReserve?.stop();
    this.#certExpiry?.stop();
    this.#unfollowMembers?.();
    this.#cluster?.close();
    // Tell the cluster first, so peers stop routing here while we drain.
    await this.#membership?.leave().catch(() => undefined);
    this.#gossipKeysWatch?.close();
    await this.#rpc?.close(drainMs);
    if (this.#cell !== null && this.#serving) await this.#cell.drained();
    const left = Math.max(0, drainMs - (performance.now() - started));
    await this.#http?.close(left);
    await this.#bootstrap;
    await this.#rejoin;
    await this.#removal;
    await this.#transport?.close();
    this.#peerTls?.close();
    await this.#store?.close();
    this.#lock?.release();
    // A start that failed is logged once, by its caller ("node failed to start"), after this.
    if (this.#serving) this.#log.info("node stopped", { node_id: this.config.node_id });
  }
}

/**
 * Starts the operators' HTTP server on `http_addr` (`/health/quick`, `/health`, `/metrics`):
 * the node's own, or with shard workers the main thread's (shard-workers.ts).
 */
export async function startOpsHttp(
  config: CairnConfig,
  health: HealthSource,
  metrics: Pick<CairnMetrics, "expose">,
  log: Logger,
): Promise<{ server: OpsHttpServer; address: string }> {
  const server = new OpsHttpServer({
    address: config.http_addr,
    health,
    metrics,
    metricsEnabled: config.telemetry.prometheus.enabled,
    logger: log.child("http"),
  });
  return { server, address: formatHostPort(await server.start()) };
}

/** A replica change's fields for the log: what it did, and to which replica or nodes. */
function describeStep(step: ReplicaStep): Record<string, string> {
  switch (step.type) {
    case "settle":
      return { step: "settle", nodes: step.nodes.join(",") };
    case "transfer":
      return { step: "transfer-leader", replica: step.to };
    default:
      return { step: step.type, replica: step.node };
  }
}

/** How often a node hands leadership of its groups to their first-ranked replicas. */
const LEADER_SPREAD_MS = 2_000;
/** The upkeep pass after a replica change or an allocator batch succeeded (see #startUpkeep). */
const UPKEEP_SOON_MS = 50;
/** How soon the upkeep looks again while a shard led here waits for its learner to catch up. */
const MOVE_POLL_MS = 200;

/**
 * A request unanswered this long fails (driver) and a forward to a leader is cut (api); with
 * shard workers, a call handed to another worker fails a second after it (siblings.ts).
 */
export const REQUEST_TIMEOUT_MS = 10_000;

/**
 * A peer that has not answered a leader's term checks this long counts as refusing them; the
 * reads waiting on it fall back to Raft's ReadIndex (with a quorum of other peers answering, they
 * do not wait for it at all).
 */
const CONFIRM_TERMS_TIMEOUT_MS = 2_000;
/**
 * How long a shard worker that found a shard's tables corrupt at start waits for the meta state
 * from the worker holding shard 0, which opens alongside it: without it the node refuses to
 * start, naming the directory (corrupt-shard.ts).
 */
const META_AT_START_MS = 30_000;

/** Closes `socket` if it is still open (Membership closes it itself when its start fails). */
function closeQuietly(socket: dgram.Socket | undefined): void {
  try {
    socket?.close();
  } catch {
    // Closed already.
  }
}

/** A failure to bind SWIM's UDP socket names rpc_addr, whose port number it shares. */
function bindFailure(err: unknown, address: string): unknown {
  return (err as NodeJS.ErrnoException).syscall === "bind"
    ? bindErrorFor(err, address, "rpc_addr")
    : err;
}

function advertised(configured: string, bound: HostPort): string {
  const parsed = parseHostPort(configured, { allowPortZero: true });
  if (parsed.ok && parsed.value.port === 0)
    return formatHostPort({ host: parsed.value.host, port: bound.port });
  return configured;
}

/**
 * The TLS files the front end serves `rpc_addr` with (tls-front.ts), undefined without TLS; the
 * certificate's watch (cert-expiry.ts) reads the same ones, so that it follows the certificate
 * served. The peers' CA only in a cluster: a single node has no peers to take.
 */
function servedTlsFiles(c: CairnConfig): TlsFiles | undefined {
  const { cert_file: certFile, key_file: keyFile } = c.tls;
  if (certFile === undefined || keyFile === undefined) return undefined;
  return {
    certFile,
    keyFile,
    ...(c.tls.client_ca_file === undefined ? {} : { clientCaFile: c.tls.client_ca_file }),
    ...(c.tls.peer_ca_file === undefined || c.cluster.seed_nodes.length === 0
      ? {}
      : { peerCaFile: c.tls.peer_ca_file }),
  };
}

function describeError(err: unknown): string {
  if (err instanceof Error)
    return err.cause instanceof Error ? `${err.message}: ${err.cause.message}` : err.message;
  return String(err);
}

/** The meta state's members that may gossip again: every one but those removed for good. */
function retainedMembers(meta: MetaState | null): Set<string> {
  const ids = new Set<string>();
  for (const [id, m] of meta?.members ?? []) if (m.state !== "removed") ids.add(id);
  return ids;
}

/**
 * A peer's ProposeMeta command, decoded: bytes that are no meta command this build knows are
 * the caller's mistake (CAIRN_ERR_INVALID_ARGUMENT, answered INVALID_ARGUMENT), not a committed
 * entry that fails to decode (CAIRN_ERR_MALFORMED_COMMAND, which stops a node; a follower drops
 * an append holding one: ReplicationObserver.malformedAppend).
 */
function proposedCommand(bytes: Uint8Array): MetaCommand {
  let cmd: MetaCommand;
  try {
    cmd = decodeMetaCommand(bytes);
  } catch (err) {
    throw new CairnError(
      "CAIRN_ERR_INVALID_ARGUMENT",
      `the proposal is not a meta command this node runs: ${describeError(err)}`,
    );
  }
  if (cmd.op === "bootstrap") {
    throw new CairnError("CAIRN_ERR_INVALID_ARGUMENT", "peers may not propose bootstrap");
  }
  return cmd;
}
