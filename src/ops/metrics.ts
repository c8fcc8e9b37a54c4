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
 * groups sleep; and `cairn_raft_awake_groups`, the groups of this node that are not quiesced.
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
 * - prom-client's default metrics are not enabled (the catalogue is fixed); the two process
 *   families are computed at scrape time from `process.cpuUsage()` and `process.memoryUsage.rss()`.
 * - Labels never carry keys, values or client identities (contract §4.4 rule 7).
 */
import { Counter, Gauge, Histogram, Registry } from "prom-client";
import { KvRequestMetrics } from "./kv-metrics.ts";
import { type MembershipMetrics, GOSSIP_LATENCY_BUCKETS_MS } from "../membership/index.ts";
import type { SnapshotMetrics } from "../replication/index.ts";
import { COMPACTION_DURATION_BUCKETS_MS, type LsmMetrics } from "../storage/index.ts";

export type KvOperation = "put" | "get" | "delete" | "scan";
export type KvStatus = "success" | "not_leader" | "error";
export type KvResult = "found" | "not_found";

export const KV_OPERATIONS: readonly KvOperation[] = ["put", "get", "delete", "scan"];
export const KV_STATUSES: readonly KvStatus[] = ["success", "not_leader", "error"];

/** Exact upper bounds of kv_request_duration_ms (contract §4.4 rule 2), then +Inf. */
export const KV_DURATION_BUCKETS_MS: readonly number[] = [1, 2, 4, 8, 16, 32, 64, 128, 256, 512];

/** Exactly the header contract §4.3 gives (prom-client's own adds `; charset=utf-8`). */
export const METRICS_CONTENT_TYPE = "text/plain; version=0.0.4";

/** Compaction input levels whose series are created at zero (an LSM has levels L0..L6). */
const COMPACTION_INPUT_LEVELS = 6;

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
  readonly #memtable: Gauge<"shard_id">;
  readonly #sstables: Gauge<"level" | "shard_id">;
  readonly #commitIndex: Gauge<"shard_id" | "node_id">;
  readonly #term: Gauge<"shard_id">;
  readonly #clusterSize: Gauge;
  readonly #failedMembers: Counter;
  readonly #gossipLatency: Histogram;
  readonly #droppedDatagrams: Counter<"reason">;
  readonly #rpcConnectionsEnded: Counter<"reason">;
  readonly #peerCallsRefused: Counter<"reason">;
  readonly #framesSent: Counter<"peer">;
  readonly #messagesSent: Counter<"peer">;
  readonly #heartbeatsSent: Counter<"peer">;
  readonly #awakeGroups: Gauge;
  /** Labelled children per peer (resolving labels costs more than the update). */
  readonly #peerSeries = new Map<
    string,
    {
      frames: { inc(): void };
      messages: { inc(n: number): void };
      heartbeats: { inc(n: number): void };
    }
  >();
  /** Levels seen per shard, so removeShard can drop every lsm_sstable_count series. */
  readonly #shardLevels = new Map<number, Set<string>>();
  /**
   * Term and commit index per shard, updated on every Raft round (a plain field write), and its
   * leader changes, copied into raft_term, raft_commit_index and raft_leader_changes_total when
   * /metrics is scraped, not on the request path.
   */
  readonly #raftState = new Map<
    number,
    { term: number; commit: number; nodeId: string; leaderChanges: number }
  >();
  /** The shards' memtable sizes now, read at each scrape (setMemtableSource). */
  #memtableSource: (() => Iterable<readonly [shard: number, bytes: number]>) | null = null;
  /** The shards' tables per level now, read at each scrape (setSstableSource). */
  #sstableSource: (() => Iterable<readonly [shard: number, perLevel: readonly number[]]>) | null =
    null;

  constructor(options: CairnMetricsOptions) {
    this.nodeId = options.nodeId;
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
        "Total KV requests by operation and outcome (success, not_leader, error).",
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
    // The engines report their memtables' size when one rotates or flushes, not at every write
    // (a write costs no metrics update); a scrape reads the current sizes from the source.
    const memtables = (): (() => Iterable<readonly [number, number]>) | null =>
      this.#memtableSource;
    this.#memtable = new Gauge({
      name: "lsm_memtable_size_bytes",
      help: "Current memtable size in bytes (active and immutable memtables).",
      labelNames: ["shard_id"],
      registers,
      collect(this: Gauge<"shard_id">) {
        const source = memtables();
        if (source === null) return;
        for (const [shard, bytes] of source()) this.set({ shard_id: String(shard) }, bytes);
      },
    });
    // Pushed by the engines when their tables change, and read from every open engine at a
    // scrape once the node gives a source: a new engine (up to a thousand in a node's first
    // second) reports nothing at its open.
    const sstables = (): (() => Iterable<readonly [number, readonly number[]]>) | null =>
      this.#sstableSource;
    this.#sstables = new Gauge({
      name: "lsm_sstable_count",
      help: "SSTables per level.",
      labelNames: ["level", "shard_id"],
      registers,
      collect(this: Gauge<"level" | "shard_id">) {
        const source = sstables();
        if (source === null) return;
        // The source names every open shard: a closed one's series go with the reset.
        this.reset();
        for (const [shard, perLevel] of source()) {
          const shard_id = String(shard);
          perLevel.forEach((count, level) => this.set({ level: `L${level}`, shard_id }, count));
        }
      },
    });
    const raftState = this.#raftState;
    // Counted in #raftState and exported at each scrape: a new shard's series, at zero, costs
    // no labelled update at its open (up to a thousand in a node's first second).
    new Counter({
      name: "raft_leader_changes_total",
      help: "Leader changes (elections) seen by this node.",
      labelNames: ["shard_id"],
      registers,
      collect(this: Counter<"shard_id">) {
        this.reset();
        for (const [shard, state] of raftState) {
          this.inc({ shard_id: String(shard) }, state.leaderChanges);
        }
      },
    });
    this.#commitIndex = new Gauge({
      name: "raft_commit_index",
      help: "Committed Raft log index.",
      labelNames: ["shard_id", "node_id"],
      registers,
      collect(this: Gauge<"shard_id" | "node_id">) {
        for (const [shard, state] of raftState) {
          this.set({ shard_id: String(shard), node_id: state.nodeId }, state.commit);
        }
      },
    });
    this.#term = new Gauge({
      name: "raft_term",
      help: "Current Raft term.",
      labelNames: ["shard_id"],
      registers,
      collect(this: Gauge<"shard_id">) {
        for (const [shard, state] of raftState) this.set({ shard_id: String(shard) }, state.term);
      },
    });
    this.#clusterSize = new Gauge({
      name: "swim_cluster_size",
      // A node's shard workers' metrics are summed at a scrape (src/node/shard-workers.ts); the
      // cluster size, as the process's CPU and memory below, is the same in every worker.
      aggregator: "max",
      help: "Live members of the cluster (alive or suspect), this node included.",
      registers,
    });
    this.#failedMembers = new Counter({
      name: "swim_failed_members_total",
      help: "Members this node has declared failed.",
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
      help: "SWIM datagrams dropped by the decoder, by reason.",
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
      help: "Calls and streams of the peers' service (cairn.v1.Raft) refused by who they claim to come from: no_sender, not_member, no_cluster_id, other_cluster, misaddressed.",
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
      help: "Raft frames handed to the peer transport: one per peer and driver round, carrying every group's messages for that peer.",
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
        if (this.#memtableSource === null) this.#memtable.set({ shard_id: String(shardId) }, bytes);
      },
      sstableCount: (shardId, level, count) => {
        if (this.#sstableSource !== null) return;
        const label = `L${level}`;
        this.#sstables.set({ level: label, shard_id: String(shardId) }, count);
        let levels = this.#shardLevels.get(shardId);
        if (levels === undefined) this.#shardLevels.set(shardId, (levels = new Set()));
        levels.add(label);
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
    const shard_id = String(shardId);
    // raft_term, raft_commit_index and raft_leader_changes_total come from #raftState at each
    // scrape, and the memtables' sizes from the node's source when it gave one: a node opens up
    // to a thousand shards in its first second, and each labelled update hashes its labels.
    if (this.#memtableSource === null) this.#memtable.set({ shard_id }, 0);
    this.#raftState.set(shardId, { term: 0, commit: 0, nodeId: this.nodeId, leaderChanges: 0 });
  }

  /** A shard left this node (or the node closes it): its series go away. */
  removeShard(shardId: number): void {
    const shard_id = String(shardId);
    this.#memtable.remove({ shard_id });
    const state = this.#raftState.get(shardId);
    this.#raftState.delete(shardId);
    this.#term.remove({ shard_id });
    this.#commitIndex.remove({ shard_id, node_id: state?.nodeId ?? this.nodeId });
    for (const level of this.#shardLevels.get(shardId) ?? []) {
      this.#sstables.remove({ level, shard_id });
    }
    this.#shardLevels.delete(shardId);
  }

  /**
   * Where a scrape reads every open shard's current memtable size (active plus immutable); the
   * engines' own reports come only with a rotation or a flush.
   */
  setMemtableSource(source: () => Iterable<readonly [shard: number, bytes: number]>): void {
    this.#memtableSource = source;
  }

  /**
   * Where a scrape reads every open shard's tables per level (L0 first); it then names every
   * open shard, so lsm_sstable_count keeps only their series.
   */
  setSstableSource(
    source: () => Iterable<readonly [shard: number, perLevel: readonly number[]]>,
  ): void {
    this.#sstableSource = source;
  }

  /** Called every Raft round of a shard: recorded here, exported at the next scrape. */
  setRaftState(shardId: number, nodeId: string, term: number, commitIndex: number): void {
    const state = this.#raftState.get(shardId);
    if (state === undefined) {
      this.#raftState.set(shardId, { term, commit: commitIndex, nodeId, leaderChanges: 0 });
    } else {
      state.term = term;
      state.commit = commitIndex;
      state.nodeId = nodeId;
    }
  }

  incLeaderChanges(shardId: number): void {
    const state = this.#raftState.get(shardId);
    if (state === undefined) {
      this.#raftState.set(shardId, { term: 0, commit: 0, nodeId: this.nodeId, leaderChanges: 1 });
    } else {
      state.leaderChanges++;
    }
  }

  /** The Raft driver handed one frame to the transport for `peer`. */
  raftFrameSent(peer: string, messages: number, heartbeats: number): void {
    let series = this.#peerSeries.get(peer);
    if (series === undefined) {
      series = {
        frames: this.#framesSent.labels({ peer }),
        messages: this.#messagesSent.labels({ peer }),
        heartbeats: this.#heartbeatsSent.labels({ peer }),
      };
      this.#peerSeries.set(peer, series);
    }
    series.frames.inc();
    series.messages.inc(messages);
    series.heartbeats.inc(heartbeats);
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
    return this.registry.metrics();
  }
}
