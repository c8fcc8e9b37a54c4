/**
 * The metrics of a node: one `CairnMetrics` owns one prom-client `Registry`, shared by the node
 * (Raft driver, LSM engines, membership), the gRPC server and the HTTP server, so whatever the
 * RPC handlers record appears on `GET /metrics` (contract §1.5, §4.4 rule 6).
 *
 * The catalogue of contract §4.4, with design.md §2's `status` label on kv_requests_total:
 *
 * | family                         | type      | labels                      |
 * | ------------------------------ | --------- | --------------------------- |
 * | kv_requests_total              | counter   | operation, status           |
 * | kv_request_duration_ms         | histogram | operation, status, result   |
 * | lsm_compaction_duration_ms     | histogram | level, result               |
 * | lsm_memtable_size_bytes        | gauge     | shard_id                    |
 * | lsm_sstable_count              | gauge     | level, shard_id             |
 * | raft_leader_changes_total      | counter   | shard_id                    |
 * | raft_commit_index              | gauge     | shard_id, node_id           |
 * | raft_term                      | gauge     | shard_id                    |
 * | swim_cluster_size              | gauge     | —                           |
 * | swim_failed_members_total      | counter   | —                           |
 * | swim_gossip_latency_ms         | histogram | —                           |
 * | process_cpu_seconds_total      | counter   | —                           |
 * | process_resident_memory_bytes  | gauge     | —                           |
 *
 * Extra metrics are named `cairn_*` (design.md §7): `cairn_swim_dropped_datagrams_total{reason}`;
 * the snapshot transfers between nodes: `cairn_raft_snapshots_sent_total`,
 * `cairn_raft_snapshots_received_total`, `cairn_raft_snapshots_failed_total{direction}` (`send`,
 * `receive`) and `cairn_raft_snapshot_sent_bytes_total`;
 * the peer traffic of the Raft driver, `cairn_raft_frames_sent_total{peer}` (one frame per peer
 * and driver round), `cairn_raft_messages_sent_total{peer}` and
 * `cairn_raft_heartbeats_sent_total{peer}` (the Raft messages in them, and the heartbeats among
 * those), which show that heartbeats travel in one frame per peer and tick, and stop once the
 * groups sleep (a peer's series go once it has left the cluster for good: removePeer,
 * setGonePeers; at most UNKNOWN_PEER_SERIES peers the meta state does not record have their
 * own, the rest count under `peer="_other"`: setKnownPeers); `cairn_raft_awake_groups`, the
 * groups of this node that are not quiesced; and the WAL's durable writes,
 * `cairn_wal_write_duration_seconds` (one observation a batch: a slow disk shows here first, as
 * etcd's wal_fsync_duration_seconds) and `cairn_wal_written_bytes_total`.
 *
 * Decisions:
 * - `result` of kv_request_duration_ms is `found`/`not_found` on successful GETs and the empty
 *   string on every other series. Prometheus treats an empty label value as an absent label, so
 *   `kv_request_duration_ms_count{operation="put"}` and `{result=""}` both select them, and no
 *   made-up value ("none") leaks into dashboards.
 * - `level` labels are `L0`, `L1`, … (the contract's spelling) on both LSM families.
 * - Every series whose label values are known in advance (all KV operation × status × result
 *   combinations, compaction input levels × result) exists from the start at zero, so `rate()`
 *   and `increase()` see the first event. Shard series appear when the driver calls
 *   `initShard(id)` (shard 0 at start) and go with `removeShard(id)`. Families with no series
 *   still export their `# HELP` and `# TYPE` lines, so all 13 families are always present.
 * - kv_requests_total and kv_request_duration_ms are counted in plain arrays on the request path
 *   and read at scrape time (`kv-metrics.ts`), not through prom-client's labelled children.
 * - The per-shard families (raft_*, lsm_memtable_size_bytes, lsm_sstable_count: ~8,000 series at
 *   1,024 shards) keep their text between scrapes and render only the lines whose value moved
 *   (`shard-metrics.ts`); the other families are formatted by prom-client. `exposeBytes()` is
 *   what /metrics serves: contract §4.3's 1–5 ms, `npm run bench:metrics`.
 * - prom-client's default metrics are not enabled (the catalogue is fixed); the two process
 *   families are computed at scrape time from `process.cpuUsage()` and `process.memoryUsage.rss()`.
 * - Labels never carry keys, values or client identities (contract §4.4 rule 7).
 */
import { Counter, Gauge, Histogram, type MetricObject, Registry } from "prom-client";
import { KvRequestMetrics } from "./kv-metrics.ts";
import { type MemtableSource, ShardMetrics, type SstableSource } from "./shard-metrics.ts";
import { type MembershipMetrics, GOSSIP_LATENCY_BUCKETS_MS } from "../membership/index.ts";
import type { SnapshotMetrics } from "../replication/index.ts";
import { COMPACTION_DURATION_BUCKETS_MS, type LsmMetrics } from "../storage/index.ts";

/**
 * Buckets of cairn_wal_write_duration_seconds: an O_DSYNC write of a small batch takes 0.1–0.5 ms
 * on a local SSD, a few ms on network storage; past 100 ms every write of the node waits that
 * long. In seconds, as Prometheus names units (the contract's own families keep their `_ms`).
 */
export const WAL_WRITE_BUCKETS_SECONDS = [
  0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5,
] as const;

export type KvOperation = "put" | "get" | "delete" | "scan";
/**
 * `success`, `not_leader` and `error` are the contract's (§7 rule 2); `invalid` (a request refused
 * as malformed: INVALID_ARGUMENT), `conflict` (a compare-and-set that found another version),
 * `unauthenticated` (no or bad credentials) and `permission_denied` (credentials without the
 * role: src/api/authz.ts) are the client's doing, kept out of `error`, which is the server's
 * faults only.
 */
export type KvStatus =
  | "success"
  | "not_leader"
  | "invalid"
  | "conflict"
  | "unauthenticated"
  | "permission_denied"
  | "error";
export type KvResult = "found" | "not_found";

export const KV_OPERATIONS: readonly KvOperation[] = ["put", "get", "delete", "scan"];
export const KV_STATUSES: readonly KvStatus[] = [
  "success",
  "not_leader",
  "invalid",
  "conflict",
  "unauthenticated",
  "permission_denied",
  "error",
];

/** Exact upper bounds of kv_request_duration_ms (contract §4.4 rule 2), then +Inf. */
export const KV_DURATION_BUCKETS_MS: readonly number[] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];

/** Exactly the header contract §4.3 gives (prom-client's own adds `; charset=utf-8`). */
export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4";

/** Compaction input levels whose series are created at zero: L0..L5 (L6, the last, is none). */
const COMPACTION_INPUT_LEVELS = 6;

/**
 * Peers the meta state here does not record as members (setKnownPeers) that get series of
 * their own; the frames to the others count under `peer="_other"` (OTHER_PEERS). Such a peer
 * is answered (a member that joined while this node was behind: handshake.ts), but its id may
 * be invented by anyone who names the cluster's id, and a series each, for good, let a stranger
 * grow /metrics without bound (a review's probe: 10,000 ids, 742 KB to 5.2 MB). The honest ones
 * are a few members that joined while this node was behind, until the state here records them.
 * The overflow is one series, not dropped frames and not the oldest peers' series removed: the
 * sum over `peer` stays every frame sent, and no counter vanishes or restarts under an
 * operator's rate().
 */
export const UNKNOWN_PEER_SERIES = 32;
/** The `peer` value of the unknown peers past UNKNOWN_PEER_SERIES: no node id starts with "_". */
export const OTHER_PEERS = "_other";

/** One peer's labelled children of the three peer families. */
interface PeerSeries {
  readonly frames: { inc(): void };
  readonly messages: { inc(n: number): void };
  readonly heartbeats: { inc(n: number): void };
}

export interface CairnMetricsOptions {
  /** This node's id, for `raft_commit_index{node_id}` when the caller does not pass one. */
  readonly nodeId: string;
  /** Injected for tests; default the real process. */
  readonly processStats?: () => { readonly cpuSeconds: number; readonly residentBytes: number };
}

function realProcessStats(): { cpuSeconds: number; residentBytes: number } {
  const cpu = process.cpuUsage();
  return { cpuSeconds: (cpu.user + cpu.system) / 1e6, residentBytes: process.memoryUsage.rss() };
}

/**
 * What the meta group's placement has left to do (MetaState.movingCount, underReplicatedCount),
 * and the members it may not place replicas on for their full disk.
 */
export interface PlacementWork {
  readonly moving: number;
  readonly underReplicated: number;
  /** Members whose disk the meta state records nearly full. */
  readonly diskFull: number;
}

/** The node's count of rpc_addr's connections (src/api/connection-slots.ts). */
export interface ConnectionCount {
  readonly open: number;
  /** Refused since start: for the node's bound, and for an address's. */
  readonly refused: { readonly node: number; readonly address: number };
  /** Clients' streaming calls open now, and refused since start. */
  readonly openStreams: number;
  readonly refusedStreams: number;
  /** Bytes of requests still arriving now, and requests refused for them since start. */
  readonly incoming: number;
  readonly refusedIncoming: number;
  /** Requests cut since start for not arriving whole within rpc.request_receive_timeout_ms. */
  readonly tooSlow: number;
}

export class CairnMetrics {
  readonly registry: Registry;
  readonly nodeId: string;
  /** For `LsmEnvironment({ metrics })`: the engines pass their own shard id. */
  readonly lsmMetrics: LsmMetrics;
  /** For `Membership.start({ metrics })`. */
  readonly membershipMetrics: MembershipMetrics;
  /** For the peer transport and service (`GrpcTransport`, `createRaftService`: `metrics`). */
  readonly snapshotMetrics: SnapshotMetrics;

  /** kv_requests_total and kv_request_duration_ms, kept off prom-client's request path. */
  readonly #kv: KvRequestMetrics;
  readonly #compaction: Histogram<"level" | "result">;
  readonly #clusterSize: Gauge;
  readonly #failedMembers: Counter;
  readonly #gossipLatency: Histogram;
  readonly #droppedDatagrams: Counter<"reason">;
  readonly #rpcConnectionsEnded: Counter<"reason">;
  readonly #peerCallsRefused: Counter<"reason">;
  readonly #framesSent: Counter<"peer">;
  readonly #messagesSent: Counter<"peer">;
  readonly #heartbeatsSent: Counter<"peer">;
  readonly #replicasRemoved: Counter;
  readonly #replicaBytesFreed: Counter;
  readonly #awakeGroups: Gauge;
  readonly #diskAvailable: Gauge;
  readonly #certExpiry: Gauge;
  readonly #diskPutsRefused: Gauge;
  readonly #walWrite: Histogram;
  readonly #walBytes: Counter;
  /** Labelled children per peer (resolving labels costs more than the update). */
  readonly #peerSeries = new Map<string, PeerSeries>();
  /** Whether a peer has left the cluster for good (setGonePeers): its frames are not counted. */
  #gonePeer: (peer: string) => boolean = () => false;
  /** Whether the meta state records a peer as a member, in any state (setKnownPeers). */
  #knownPeer: (peer: string) => boolean = () => true;
  /**
   * The peers in #peerSeries that were not known when their series were made: at most
   * UNKNOWN_PEER_SERIES. One known since leaves it when a new one looks for room.
   */
  readonly #unknownPeers = new Set<string>();
  /** The series of OTHER_PEERS (the unknown peers past the cap), made on first use. */
  #otherPeers: PeerSeries | null = null;
  /** The cluster's live members now, read at each scrape (setClusterSizeSource). */
  #clusterSizeSource: (() => number | null) | null = null;
  /** The meta group's placement work left, read at each scrape (setPlacementSource). */
  #placementSource: (() => PlacementWork | null) | null = null;
  /** The WAL's bytes appended and not yet written, read at each scrape (setWalSource). */
  #walUnwrittenSource: (() => number) | null = null;
  /** rpc_addr's connections, read at each scrape (setConnectionSource). */
  #connectionSource: ConnectionCount | null = null;
  /** raft_*, lsm_memtable_size_bytes and lsm_sstable_count: text kept per series. */
  readonly #shards: ShardMetrics;
  /** The registered families that render their own text, and how. */
  readonly #fastText = new Map<string, (out: string[]) => void>();

  constructor(options: CairnMetricsOptions) {
    this.nodeId = options.nodeId;
    this.#shards = new ShardMetrics(options.nodeId);
    const registers = [(this.registry = new Registry())];
    const processStats = options.processStats ?? realProcessStats;

    // Every KV series exists from the start at zero (see the header).
    this.#kv = new KvRequestMetrics(
      KV_DURATION_BUCKETS_MS,
      KV_OPERATIONS.flatMap((operation) =>
        KV_STATUSES.map((status) => ({
          operation,
          status,
          results: operation === "get" && status === "success" ? ["found", "not_found"] : [""],
        })),
      ),
    );
    this.registry.registerMetric(
      this.#kv.counter(
        "kv_requests_total",
        "Total KV requests by operation and outcome: success, not_leader, the client's mistakes (invalid, conflict), refusals (unauthenticated, permission_denied) and the server's faults (error).",
      ),
    );
    this.registry.registerMetric(
      this.#kv.histogram(
        "kv_request_duration_ms",
        "KV request latency in ms; result is found/not_found on successful gets, empty otherwise.",
      ),
    );
    this.#compaction = new Histogram({
      name: "lsm_compaction_duration_ms",
      help: "LSM compaction time in ms by input level and result (success, error).",
      labelNames: ["level", "result"],
      buckets: [...COMPACTION_DURATION_BUCKETS_MS],
      registers,
    });
    // The per-shard families keep their text between scrapes (shard-metrics.ts); registered
    // here so they come after the compaction histogram, in the catalogue's order.
    for (const { metric, text } of this.#shards.families()) {
      this.registry.registerMetric(metric);
      this.#fastText.set((metric as unknown as MetricObject).name, text);
    }
    const clusterSize = (): (() => number | null) | null => this.#clusterSizeSource;
    this.#clusterSize = new Gauge({
      name: "swim_cluster_size",
      // A node's shard workers' metrics are summed at a scrape (src/node/shard-workers.ts); the
      // cluster size, as the process's CPU and memory below, is the same in every worker.
      aggregator: "max",
      help: "Live members of the cluster (alive or suspect), this node included; a node that only gossips with them without being a member is not counted.",
      registers,
      collect(this: Gauge) {
        const size = clusterSize()?.() ?? null;
        if (size !== null) this.set(size);
      },
    });
    this.#failedMembers = new Counter({
      name: "swim_failed_members_total",
      help: "Members marked failed (dead) in this node's view: declared by it or learned by gossip.",
      registers,
    });
    this.#gossipLatency = new Histogram({
      name: "swim_gossip_latency_ms",
      help: "Gossip (ping to ack) round-trip time in ms.",
      buckets: [...GOSSIP_LATENCY_BUCKETS_MS],
      registers,
    });
    new Counter({
      name: "process_cpu_seconds_total",
      aggregator: "max",
      help: "Total user and system CPU time spent in seconds.",
      registers,
      collect(this: Counter) {
        this.reset();
        this.inc(processStats().cpuSeconds);
      },
    });
    new Gauge({
      name: "process_resident_memory_bytes",
      aggregator: "max",
      help: "Resident memory size in bytes.",
      registers,
      collect(this: Gauge) {
        this.set(processStats().residentBytes);
      },
    });
    this.#droppedDatagrams = new Counter({
      name: "cairn_swim_dropped_datagrams_total",
      help: "SWIM datagrams dropped, by reason: the decoder's, or with gossip keys the seal's (unsealed, unknown-key, bad-seal, no-key).",
      labelNames: ["reason"],
      registers,
    });
    this.#rpcConnectionsEnded = new Counter({
      name: "cairn_rpc_connections_ended_total",
      help: "gRPC connections the front end ended: the node's own failure (internal) or a client past a limit (limit).",
      labelNames: ["reason"],
      registers,
    });
    this.#peerCallsRefused = new Counter({
      name: "cairn_raft_peer_calls_refused_total",
      help: "Calls and streams of the peers' service (cairn.v1.Raft) refused by who they claim to come from: no_sender, not_member, no_cluster_id, other_cluster, misaddressed, wrong_sender (a handshake naming another node than its cairn-peer metadata), certificate (peer TLS: the connection's certificate is not the peer CA's, or names another node).",
      labelNames: ["reason"],
      registers,
    });
    const snapshotsSent = new Counter({
      name: "cairn_raft_snapshots_sent_total",
      help: "Raft snapshots sent to peers and acknowledged by them.",
      registers,
    });
    const snapshotsReceived = new Counter({
      name: "cairn_raft_snapshots_received_total",
      help: "Raft snapshots received whole and verified, and handed to Raft.",
      registers,
    });
    const snapshotsFailed = new Counter<"direction">({
      name: "cairn_raft_snapshots_failed_total",
      help: "Raft snapshot transfers that failed (refused, broken, stalled), by direction (send, receive).",
      labelNames: ["direction"],
      registers,
    });
    const snapshotBytesSent = new Counter({
      name: "cairn_raft_snapshot_sent_bytes_total",
      help: "Raft snapshot data bytes sent to peers (failed transfers included).",
      registers,
    });
    this.#replicasRemoved = new Counter({
      name: "cairn_replicas_removed_total",
      help: "Replicas a move took off this node, deleted (replica GC): WAL records dropped, directory deleted.",
      registers,
    });
    this.#replicaBytesFreed = new Counter({
      name: "cairn_replica_removed_bytes_total",
      help: "Table bytes of the replicas deleted here (replica GC).",
      registers,
    });
    snapshotsFailed.inc({ direction: "send" }, 0);
    snapshotsFailed.inc({ direction: "receive" }, 0);
    this.snapshotMetrics = {
      sent: () => snapshotsSent.inc(),
      bytesSent: (bytes) => snapshotBytesSent.inc(bytes),
      received: () => snapshotsReceived.inc(),
      failed: (direction) => snapshotsFailed.inc({ direction }),
    };
    this.#framesSent = new Counter({
      name: "cairn_raft_frames_sent_total",
      help: 'Raft frames handed to the peer transport: one per peer and driver round, carrying every group\'s messages for that peer; peer="_other": the peers the meta state here does not record, past the first 32.',
      labelNames: ["peer"],
      registers,
    });
    this.#messagesSent = new Counter({
      name: "cairn_raft_messages_sent_total",
      help: "Raft messages sent to a peer, in cairn_raft_frames_sent_total's frames.",
      labelNames: ["peer"],
      registers,
    });
    this.#heartbeatsSent = new Counter({
      name: "cairn_raft_heartbeats_sent_total",
      help: "Raft heartbeats sent to a peer (quiesce heartbeats included), in cairn_raft_frames_sent_total's frames.",
      labelNames: ["peer"],
      registers,
    });
    this.#awakeGroups = new Gauge({
      name: "cairn_raft_awake_groups",
      help: "Raft groups of this node that are awake (ticking); the others are quiesced.",
      registers,
    });
    // Every shard worker looks at the same file system: "max", not the sum.
    this.#diskAvailable = new Gauge({
      name: "cairn_disk_available_bytes",
      aggregator: "max",
      help: "Bytes available on the data directory's file system (statfs, as df's Avail shows them), at the node's last look (every second).",
      registers,
    });
    // Set by one thread only (the node's, or shard worker 0's): "max" over the others' none.
    this.#certExpiry = new Gauge({
      name: "cairn_tls_certificate_expiry_timestamp_seconds",
      aggregator: "max",
      help: "When the certificates of tls.cert_file (the node's and its chain: the earliest) stop being valid, in seconds since the epoch; absent without TLS. Read again within a minute of the files' change, once the node's reload takes them (the certificate it serves).",
      labelNames: ["key"],
      registers,
    });
    this.#diskPutsRefused = new Gauge({
      name: "cairn_disk_puts_refused",
      aggregator: "max",
      help: "1 while the data directory's disk has less available than storage.min_free_bytes and this node refuses Puts (RESOURCE_EXHAUSTED, CAIRN_ERR_DISK_FULL), else 0.",
      registers,
    });
    this.#walWrite = new Histogram({
      name: "cairn_wal_write_duration_seconds",
      help: "Durable (O_DSYNC) writes of the WAL's batches: how long each took, in seconds. Every acknowledged write waits for one.",
      buckets: [...WAL_WRITE_BUCKETS_SECONDS],
      registers,
    });
    this.#walBytes = new Counter({
      name: "cairn_wal_written_bytes_total",
      help: "Bytes the WAL wrote durably (records of every shard of this node).",
      registers,
    });
    const unwritten = (): number => this.#walUnwrittenSource?.() ?? 0;
    new Gauge({
      name: "cairn_wal_unwritten_bytes",
      help: "Bytes appended to the WAL and not yet written durably: commit indexes that moved alone, which the next write or the maintenance pass (within a second) makes durable. What a crash now would take of this node's state.",
      registers,
      collect() {
        this.set(unwritten());
      },
    });
    // One count for the node, which every shard worker reads: "max", not the sum.
    const connections = (): ConnectionCount | null => this.#connectionSource;
    new Gauge({
      name: "cairn_rpc_connections",
      aggregator: "max",
      help: "Connections open on rpc_addr (clients' and peers'), across the node's threads; at rpc.max_connections (as the open-file limit lowers it) new ones are refused.",
      registers,
      collect(this: Gauge) {
        this.set(connections()?.open ?? 0);
      },
    });
    new Counter({
      name: "cairn_rpc_connections_refused_total",
      aggregator: "max",
      help: "Connections to rpc_addr closed as soon as they were accepted, by the bound they met: node (rpc.max_connections, as the open-file limit lowers it) or address (rpc.max_connections_per_ip).",
      labelNames: ["reason"],
      registers,
      collect(this: Counter) {
        this.reset();
        const refused = connections()?.refused;
        this.inc({ reason: "node" }, refused?.node ?? 0);
        this.inc({ reason: "address" }, refused?.address ?? 0);
      },
    });
    new Gauge({
      name: "cairn_rpc_client_streams",
      aggregator: "max",
      help: "Clients' streaming calls (Meta.WatchCluster, health Watch, reflection) open across the node; at rpc.max_client_streams new ones are refused.",
      registers,
      collect(this: Gauge) {
        this.set(connections()?.openStreams ?? 0);
      },
    });
    new Counter({
      name: "cairn_rpc_client_streams_refused_total",
      aggregator: "max",
      help: "Clients' streaming calls answered RESOURCE_EXHAUSTED because the node held rpc.max_client_streams.",
      registers,
      collect(this: Counter) {
        this.reset();
        this.inc(connections()?.refusedStreams ?? 0);
      },
    });
    new Gauge({
      name: "cairn_rpc_incoming_request_bytes",
      aggregator: "max",
      help: "Bytes of unary requests still arriving (their message not yet whole) held across the node; at rpc.max_incoming_request_bytes new bytes are refused.",
      registers,
      collect(this: Gauge) {
        this.set(connections()?.incoming ?? 0);
      },
    });
    new Counter({
      name: "cairn_rpc_incoming_refused_total",
      aggregator: "max",
      help: "Unary requests answered RESOURCE_EXHAUSTED (CAIRN_ERR_BACKPRESSURE) because the node held rpc.max_incoming_request_bytes of requests still arriving.",
      registers,
      collect(this: Counter) {
        this.reset();
        this.inc(connections()?.refusedIncoming ?? 0);
      },
    });
    new Counter({
      name: "cairn_rpc_requests_too_slow_total",
      aggregator: "max",
      help: "Requests answered RESOURCE_EXHAUSTED (CAIRN_ERR_REQUEST_TOO_SLOW) without being run: a unary call's request, a server-streaming call's one request or a peer's streaming call's first message that did not arrive whole within rpc.request_receive_timeout_ms, or a call that waited that long to run behind its connection's unread answers.",
      registers,
      collect(this: Counter) {
        this.reset();
        this.inc(connections()?.tooSlow ?? 0);
      },
    });
    // The meta state is the same in every shard worker: "max", as swim_cluster_size.
    const placement = (): PlacementWork | null => this.#placementSource?.() ?? null;
    new Gauge({
      name: "cairn_cluster_shards_moving",
      aggregator: "max",
      help: "Shards whose move (rebalancing, a repair, a decommission) is under way, as the meta state applied on this node records it: the group's voters are not yet the shard's nodes. 0 on a single node.",
      registers,
      collect(this: Gauge) {
        this.set(placement()?.moving ?? 0);
      },
    });
    new Gauge({
      name: "cairn_cluster_members_disk_full",
      aggregator: "max",
      help: "Members that reported their data directory's disk nearly full (cluster.disk_full_percent), as the meta state applied on this node records it: no new replica is placed on them. 0 on a single node.",
      registers,
      collect(this: Gauge) {
        this.set(placement()?.diskFull ?? 0);
      },
    });
    new Gauge({
      name: "cairn_cluster_shards_underreplicated",
      aggregator: "max",
      help: "Shards placed on a member that is not active (dead, decommissioning) or on fewer than cluster.replication_factor members (capped at the active and dead members), as the meta state applied on this node records it; a repair that has started counts in cairn_cluster_shards_moving instead. 0 on a single node.",
      registers,
      collect(this: Gauge) {
        this.set(placement()?.underReplicated ?? 0);
      },
    });

    for (let level = 0; level < COMPACTION_INPUT_LEVELS; level++) {
      this.#compaction.zero({ level: `L${level}`, result: "success" });
      this.#compaction.zero({ level: `L${level}`, result: "error" });
    }
    // A node is a cluster of one until membership says otherwise.
    this.#clusterSize.set(1);

    // The engines' own reports, for a registry without sources: once the node gives one, a
    // scrape reads every open engine and these would only be overwritten (labelled updates).
    this.lsmMetrics = {
      memtableSize: (shardId, bytes) => {
        if (!this.#shards.hasMemtableSource) this.#shards.setMemtable(shardId, bytes);
      },
      sstableCount: (shardId, level, count) => {
        if (!this.#shards.hasSstableSource) this.#shards.setSstableCount(shardId, level, count);
      },
      compactionDuration: (level, result, ms) =>
        this.#compaction.observe(
          { level: `L${level}`, result: result === "success" ? "success" : "error" },
          ms,
        ),
    };
    this.membershipMetrics = {
      onClusterSize: (live) => this.#clusterSize.set(live),
      onMemberFailed: () => this.#failedMembers.inc(),
      observeGossipLatencyMs: (ms) => this.#gossipLatency.observe(ms),
      onDatagramDropped: (reason) => this.#droppedDatagrams.inc({ reason }),
    };
  }

  /**
   * One finished KV request, `ms` its latency. `result` is required for a successful get and
   * ignored on every other series (they carry `result=""`); a successful get without it is a bug
   * of the caller and throws a TypeError.
   */
  recordKv(operation: KvOperation, status: KvStatus, ms: number, result?: KvResult): void {
    const isGetSuccess = operation === "get" && status === "success";
    if (isGetSuccess && result === undefined) {
      throw new TypeError("recordKv: a successful get needs its result (found or not_found)");
    }
    this.#kv.record(operation, status, isGetSuccess ? (result ?? "") : "", ms);
  }

  /** A shard became active here: its series appear at zero (shard 0 at start). */
  initShard(shardId: number): void {
    this.#shards.initShard(shardId);
  }

  /** A shard left this node (or the node closes it): its series go away. */
  removeShard(shardId: number): void {
    this.#shards.removeShard(shardId);
  }

  /**
   * Where a scrape reads every open shard's current memtable size (active plus immutable); the
   * engines' own reports come only with a rotation or a flush.
   */
  setMemtableSource(source: MemtableSource): void {
    this.#shards.setMemtableSource(source);
  }

  /**
   * Where a scrape reads every open shard's tables per level (L0 first); it then names every
   * open shard, so lsm_sstable_count keeps only their series.
   */
  setSstableSource(source: SstableSource): void {
    this.#shards.setSstableSource(source);
  }

  /**
   * Where a scrape reads swim_cluster_size once the node knows its cluster's members: the live
   * SWIM members (alive or suspect) that are members of the cluster. null from the source (no
   * cluster founded or joined yet), or no source: SWIM's own count of live members.
   */
  setClusterSizeSource(source: () => number | null): void {
    this.#clusterSizeSource = source;
  }

  /**
   * Where a scrape reads cairn_cluster_shards_moving, cairn_cluster_shards_underreplicated and
   * cairn_cluster_members_disk_full: the meta state applied on this node; null (or no source)
   * exports 0.
   */
  setPlacementSource(source: () => PlacementWork | null): void {
    this.#placementSource = source;
  }

  /** Where a scrape reads cairn_rpc_connections and its refusals (no source: 0). */
  setConnectionSource(source: ConnectionCount): void {
    this.#connectionSource = source;
  }

  /** Where a scrape reads cairn_wal_unwritten_bytes (no source: 0). */
  setWalSource(unwritten: () => number): void {
    this.#walUnwrittenSource = unwritten;
  }

  /** Called every Raft round of a shard: recorded here, exported at the next scrape. */
  setRaftState(shardId: number, nodeId: string, term: number, commitIndex: number): void {
    this.#shards.setRaftState(shardId, nodeId, term, commitIndex);
  }

  incLeaderChanges(shardId: number): void {
    this.#shards.incLeaderChanges(shardId);
  }

  /** A replica a move took off this node was deleted (replica GC), with `bytes` of tables. */
  replicaRemoved(bytes: number): void {
    this.#replicasRemoved.inc();
    this.#replicaBytesFreed.inc(bytes);
  }

  /** The Raft driver handed one frame to the transport for `peer`. */
  raftFrameSent(peer: string, messages: number, heartbeats: number): void {
    let series = this.#peerSeries.get(peer);
    if (series === undefined) {
      // A frame that still goes to a peer gone for good (an answer to a replica it left behind)
      // would bring back the series removePeer took away, for good: it is not counted.
      if (this.#gonePeer(peer)) return;
      if (this.#knownPeer(peer)) series = this.#newPeerSeries(peer);
      else if (peer !== OTHER_PEERS && this.#hasRoomForUnknown()) {
        series = this.#newPeerSeries(peer);
        this.#unknownPeers.add(peer);
      } else {
        series = this.#otherPeers ??= this.#labelled(OTHER_PEERS);
      }
    }
    series.frames.inc();
    series.messages.inc(messages);
    series.heartbeats.inc(heartbeats);
  }

  #newPeerSeries(peer: string): PeerSeries {
    const series = this.#labelled(peer);
    this.#peerSeries.set(peer, series);
    return series;
  }

  #labelled(peer: string): PeerSeries {
    return {
      frames: this.#framesSent.labels({ peer }),
      messages: this.#messagesSent.labels({ peer }),
      heartbeats: this.#heartbeatsSent.labels({ peer }),
    };
  }

  /** Whether an unknown peer may have series of its own (fewer than UNKNOWN_PEER_SERIES have). */
  #hasRoomForUnknown(): boolean {
    if (this.#unknownPeers.size < UNKNOWN_PEER_SERIES) return true;
    for (const peer of this.#unknownPeers) {
      if (this.#knownPeer(peer)) this.#unknownPeers.delete(peer);
    }
    return this.#unknownPeers.size < UNKNOWN_PEER_SERIES;
  }

  /**
   * Peer `peer` left the cluster for good (decommissioned, removed): its series of the peer
   * families go, so that members that come and go (an elastic cluster, nodes replaced under new
   * ids) do not each leave series on /metrics for ever. A peer that is only unreachable keeps
   * them. A new node under its id starts them again at zero.
   */
  removePeer(peer: string): void {
    this.#unknownPeers.delete(peer);
    if (!this.#peerSeries.delete(peer)) return;
    this.#framesSent.remove({ peer });
    this.#messagesSent.remove({ peer });
    this.#heartbeatsSent.remove({ peer });
  }

  /**
   * Where raftFrameSent asks whether a peer it has no series for has left the cluster for good
   * (the meta state applied here): such a peer's frames are not counted (default: none has).
   */
  setGonePeers(gone: (peer: string) => boolean): void {
    this.#gonePeer = gone;
  }

  /**
   * Where raftFrameSent asks whether a peer it has no series for is recorded as a member (the
   * meta state applied here, any state): the first UNKNOWN_PEER_SERIES others get series of
   * their own, the rest count under OTHER_PEERS (default: every peer is known).
   */
  setKnownPeers(known: (peer: string) => boolean): void {
    this.#knownPeer = known;
  }

  /** The gRPC front end ended a connection (its own failure, or a client past a limit). */
  rpcConnectionEnded(reason: "internal" | "limit"): void {
    this.#rpcConnectionsEnded.inc({ reason });
  }

  /** The peers' service refused a call or stream for who it claims to come from (handshake.ts). */
  peerCallRefused(reason: string): void {
    this.#peerCallsRefused.inc({ reason });
  }

  setAwakeGroups(count: number): void {
    this.#awakeGroups.set(count);
  }

  /** The node looked at its data directory's disk (src/node/disk-reserve.ts). */
  setDisk(availableBytes: number, putsRefused: boolean): void {
    this.#diskAvailable.set(availableBytes);
    this.#diskPutsRefused.set(putsRefused ? 1 : 0);
  }

  /** The certificates of tls.cert_file end their validity at `notAfterMs` (src/node/cert-expiry.ts). */
  setCertificateExpiry(notAfterMs: number): void {
    this.#certExpiry.set({ key: "tls.cert_file" }, Math.floor(notAfterMs / 1000));
  }

  /** The WAL wrote a batch of `bytes` durably in `ms`. */
  walWritten(ms: number, bytes: number): void {
    this.#walWrite.observe(ms / 1000);
    this.#walBytes.inc(bytes);
  }

  /** An adapter bound to one shard (ignores the shard id the caller passes). */
  lsmMetricsFor(shardId: number): LsmMetrics {
    return {
      memtableSize: (_shard, bytes) => this.lsmMetrics.memtableSize(shardId, bytes),
      sstableCount: (_shard, level, count) => this.lsmMetrics.sstableCount(shardId, level, count),
      compactionDuration: (level, result, ms) =>
        this.lsmMetrics.compactionDuration(level, result, ms),
    };
  }

  /** The text exposition (format 0.0.4); serve it with METRICS_CONTENT_TYPE. */
  async expose(): Promise<string> {
    return (await this.#pieces()).join("");
  }

  /**
   * The same exposition as bytes, for the HTTP server. A string of the ~350 KB a node with 1,024
   * shards exports goes to V8's large-object space, and making one (a join or a flatten) costs
   * about 1 ms, a third of the contract's budget (§4.3: 1–5 ms); the pieces are written into one
   * Buffer (outside V8's heap) instead.
   */
  async exposeBytes(): Promise<Buffer> {
    const pieces = await this.#pieces();
    let size = 0;
    for (const piece of pieces) size += Buffer.byteLength(piece);
    const bytes = Buffer.allocUnsafe(size);
    let at = 0;
    for (const piece of pieces) at += bytes.write(piece, at);
    return bytes;
  }

  /**
   * What Registry.metrics() writes (families joined by a blank line, a final newline), in
   * pieces, the per-shard families' text taken from their cache instead of formatted anew.
   */
  async #pieces(): Promise<string[]> {
    const metrics = this.registry.getMetricsAsArray();
    const formatted = await Promise.all(
      metrics.map((metric) =>
        this.#fastText.has(metric.name) ? "" : this.registry.getSingleMetricAsString(metric.name),
      ),
    );
    const pieces: string[] = [];
    metrics.forEach((metric, i) => {
      if (i > 0) pieces.push("\n\n");
      const text = this.#fastText.get(metric.name);
      if (text !== undefined) text(pieces);
      else pieces.push(formatted[i] as string);
    });
    pieces.push("\n");
    return pieces;
  }
}
