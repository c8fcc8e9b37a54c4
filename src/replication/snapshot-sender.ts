/**
 * The sending end of snapshots (etcd's rafthttp snapshot_sender; CockroachDB's snapshot queue):
 * a snapshot message does not go in a frame; GrpcTransport.send() takes it out of the round and
 * hands it here, and it streams on an InstallSnapshot call of its own (sendSnapshot,
 * snapshot-transfer.ts: a header, chunks, a checksum), through grpc-js's client to the peer
 * (peer-links.ts), paced by one node-wide rate limiter (`raft.snapshot_rate_bytes_per_sec`).
 *
 * A snapshot addressed to a learner (the new replica of a move, design.md §5.2, or a member's
 * copy of the meta group) is paced first by a second limiter, `cluster.rebalance.
 * rate_bytes_per_sec`, then by the node-wide one: moving replicas is work the cluster chooses
 * to do, and may go only as fast as foreground traffic keeps its latency; a voter that fell
 * behind (a restart, a lost directory) is a replica the shard counts on for its quorum, and
 * catches up at the node-wide rate. Whether the receiver is a learner is read from the
 * configuration the snapshot carries (its meta's `conf`, the one in force at its index): a move
 * adds its learner before the leader has any reason to send it a snapshot, and promotes it only
 * once it holds the whole log, so every snapshot of a move is sent to a learner.
 *
 * At most `maxTransfers` snapshots are in flight at once, to all peers together
 * (snapshotSendConcurrency): the rate limits are shared by every transfer, and each receiver
 * cuts a transfer that brings it less than SNAPSHOT_MIN_PROGRESS_BYTES in a
 * SNAPSHOT_PROGRESS_WINDOW_MS (snapshot-receiver.ts). Sharing 1 MiB/s among ~60 peers, each got a
 * chunk a minute, every receiver cut its transfer, and Raft sent them all again, for good; a peer
 * waiting for a slot costs nothing but the wait. The peers waiting for a slot take it in turn.
 *
 * At most one snapshot is in flight per peer; the others wait their turn in order. A snapshot is
 * never dropped for the frames' budget: the leader that sent it waits to hear its outcome
 * (`sent`), and a group sends no other snapshot to that peer meanwhile, so a peer's queue holds
 * at most one per group. Raft needs no order between a snapshot and the frames: the leader sends
 * that group nothing but heartbeats for that peer until the snapshot's outcome, and the receiver
 * hands the snapshot to Raft before it acknowledges it, so whatever the leader sends after
 * reaches Raft after it.
 *
 * A peer that refuses a snapshot as too large for it (SNAPSHOT_TOO_LARGE_CODE: over its limit,
 * or its disk's reserve) is sent no other snapshot of that shard for `tooLargeHoldMs`, doubled
 * each time it refuses one again, up to 8 times that, until it takes one: a streamed snapshot
 * announces no length, so the refusal comes once part of it has been sent, and the group's
 * next snapshot (built at its next heartbeat) sent that part again, for good, at the full rate.
 * A snapshot held back is not sent: its stream (the pinned version) is released at once, and
 * its outcome, lost, is reported when the hold ends, so that its group waits until then rather
 * than build another at each heartbeat. The other shards' snapshots to that peer go on.
 *
 * Each outcome is logged (sent at info, failed at warn, or debug when cut by close() or by the
 * peer's departure, forget()), counted per peer (PeerStats) and reported to SnapshotMetrics.
 */
import { type ServiceError, status } from "@grpc/grpc-js";
import { ERROR_CODE_KEY } from "../api/wire.ts";
import type { NodeId } from "../raft/index.ts";
import { type ClusterIdSource, ownHandshake } from "./handshake.ts";
import type { PeerLink, PeerLinks } from "./peer-links.ts";
import type { PeerLogger } from "./peer-logger.ts";
import { inTurn, type PaceClock, type Pacer, RateLimiter } from "./rate-limiter.ts";
import {
  MAX_SNAPSHOT_CHUNK_BYTES,
  SNAPSHOT_MIN_PROGRESS_BYTES,
  SNAPSHOT_PROGRESS_WINDOW_MS,
  SNAPSHOT_TOO_LARGE_CODE,
  sendSnapshot,
  type SnapshotMessage,
  type SnapshotMetrics,
} from "./snapshot-transfer.ts";

/** A snapshot message of `shard`, as GrpcTransport.send() takes it out of a round. */
export interface OutgoingSnapshot {
  readonly shard: number;
  readonly message: SnapshotMessage;
}

/** A snapshot message waiting for its peer's turn, and how to report its outcome. */
interface QueuedSnapshot extends OutgoingSnapshot {
  readonly settle: (delivered: boolean) => void;
}

/** A peer's snapshots: the one in flight, those waiting, and the counters of PeerStats. */
interface SnapshotLane {
  readonly link: PeerLink;
  /** Snapshots to send after the one in flight, in order. */
  readonly queue: QueuedSnapshot[];
  /** Aborted when the transport closes or the peer is forgotten: cuts its transfer in flight. */
  readonly signal: AbortSignal;
  /** Aborts `signal`: the peer left the cluster (forget). */
  readonly cut: AbortController;
  inFlight: boolean;
  /** The shards whose last snapshot the peer refused as too large, while they are held back. */
  readonly tooLarge: Map<number, TooLargeHold>;
  /** Snapshots held back, whose outcome is reported when their hold ends (or the lane goes). */
  readonly held: Set<HeldSnapshot>;
  sent: number;
  failed: number;
  bytesSent: number;
}

/** A shard's snapshots held back from a peer that refused one as too large. */
interface TooLargeHold {
  /** When the next may be sent (performance.now()). */
  readonly until: number;
  /** How long this hold was: the next, if the peer refuses again, is twice as long. */
  readonly holdMs: number;
}

interface HeldSnapshot {
  readonly settle: (delivered: boolean) => void;
  readonly timer: NodeJS.Timeout;
}

/** The snapshots' share of PeerStats (grpc-transport.ts). */
export interface SnapshotStats {
  /** Snapshots the peer acknowledged. */
  readonly snapshotsSent: number;
  readonly snapshotsFailed: number;
  /** Snapshot data bytes gRPC took for the peer (those of failed transfers too). */
  readonly snapshotBytesSent: number;
  readonly snapshotInFlight: boolean;
  /** Snapshots waiting for the one in flight. */
  readonly snapshotsQueued: number;
}

/** SnapshotSender's settings, defaults resolved (GrpcTransportOptions documents each). */
export interface SnapshotSenderOptions {
  readonly links: PeerLinks;
  /** This node, and its replica id: the identity each call opens with. */
  readonly self: NodeId;
  readonly replicaId: NodeId;
  readonly clusterId: ClusterIdSource;
  /** Data bytes per chunk; also the rate limiter's burst. A positive integer. */
  readonly chunkBytes: number;
  /** Snapshot data to every peer together (`raft.snapshot_rate_bytes_per_sec`). */
  readonly rateBytesPerSec: number;
  /**
   * Snapshot data to learners, to every peer together, within `rateBytesPerSec`
   * (`cluster.rebalance.rate_bytes_per_sec`).
   */
  readonly learnerRateBytesPerSec: number;
  readonly clock: PaceClock;
  /** Snapshots in flight at once, to every peer together (snapshotSendConcurrency). */
  readonly maxTransfers: number;
  /** A shard's snapshots to a peer that refused one as too large wait this long at first (ms). */
  readonly tooLargeHoldMs: number;
  readonly stallTimeoutMs: number;
  readonly metrics: SnapshotMetrics | undefined;
  readonly log: PeerLogger;
  /** The receiver's shard worker (this transport's index), when the node runs them. */
  readonly shardWorker: number | undefined;
  /** Aborted when the transport closes: cuts the transfers in flight, starts no other. */
  readonly closing: AbortSignal;
}

export class SnapshotSender {
  readonly #links: PeerLinks;
  readonly #self: NodeId;
  readonly #replicaId: NodeId;
  readonly #clusterId: ClusterIdSource;
  readonly #chunkBytes: number;
  /** Every snapshot's data. */
  readonly #limiter: RateLimiter;
  /** A learner's snapshot: its own limiter, then the node-wide one. */
  readonly #learnerPacer: Pacer;
  readonly #stallTimeoutMs: number;
  readonly #metrics: SnapshotMetrics | undefined;
  readonly #log: PeerLogger;
  readonly #shardWorker: number | undefined;
  readonly #closing: AbortSignal;
  /** Each peer's snapshots, by node. */
  readonly #lanes = new Map<NodeId, SnapshotLane>();
  readonly #maxTransfers: number;
  readonly #tooLargeHoldMs: number;
  /** Transfers in flight, to every peer. */
  #active = 0;
  /** Lanes with a snapshot to send, waiting for one of `maxTransfers`, in turn. */
  readonly #waiting: SnapshotLane[] = [];

  constructor(options: SnapshotSenderOptions) {
    this.#links = options.links;
    this.#self = options.self;
    this.#replicaId = options.replicaId;
    this.#clusterId = options.clusterId;
    this.#chunkBytes = options.chunkBytes;
    if (
      !Number.isSafeInteger(this.#chunkBytes) ||
      this.#chunkBytes <= 0 ||
      this.#chunkBytes > MAX_SNAPSHOT_CHUNK_BYTES
    ) {
      throw new RangeError(
        `snapshotChunkBytes must be a positive integer up to ${MAX_SNAPSHOT_CHUNK_BYTES} (a receiver refuses larger chunks), got ${this.#chunkBytes}`,
      );
    }
    this.#limiter = new RateLimiter(options.rateBytesPerSec, this.#chunkBytes, options.clock);
    this.#learnerPacer = inTurn(
      new RateLimiter(options.learnerRateBytesPerSec, this.#chunkBytes, options.clock),
      this.#limiter,
    );
    this.#stallTimeoutMs = options.stallTimeoutMs;
    if (!Number.isSafeInteger(options.maxTransfers) || options.maxTransfers <= 0) {
      throw new RangeError(`maxTransfers must be a positive integer, got ${options.maxTransfers}`);
    }
    this.#maxTransfers = options.maxTransfers;
    if (!(options.tooLargeHoldMs > 0 && Number.isFinite(options.tooLargeHoldMs))) {
      throw new RangeError(
        `tooLargeHoldMs must be a positive number, got ${options.tooLargeHoldMs}`,
      );
    }
    this.#tooLargeHoldMs = options.tooLargeHoldMs;
    this.#metrics = options.metrics;
    this.#log = options.log;
    this.#shardWorker = options.shardWorker;
    this.#closing = options.closing;
  }

  /**
   * Queues `snapshots` for peer node `to` and starts the first if none is in flight. `sent`
   * hears once, when the last of them settles: true if the peer acknowledged them all. (One
   * outcome for all: a group told "lost" of a snapshot that did arrive just probes its follower,
   * who answers.)
   */
  enqueue(
    to: NodeId,
    snapshots: readonly OutgoingSnapshot[],
    sent: ((delivered: boolean) => void) | undefined,
  ): void {
    const lane = this.#lane(to);
    let left = snapshots.length;
    let all = true;
    const settle = (delivered: boolean): void => {
      all &&= delivered;
      if (--left === 0) sent?.(all);
    };
    for (const s of snapshots) lane.queue.push({ ...s, settle });
    this.#next(lane);
  }

  /** Peer node `to`'s counters and state. */
  stats(to: NodeId): SnapshotStats {
    const lane = this.#lanes.get(to);
    return {
      snapshotsSent: lane?.sent ?? 0,
      snapshotsFailed: lane?.failed ?? 0,
      snapshotBytesSent: lane?.bytesSent ?? 0,
      snapshotInFlight: lane?.inFlight ?? false,
      snapshotsQueued: lane?.queue.length ?? 0,
    };
  }

  /** Whether peer node `to` has a snapshot in flight or waiting. */
  busy(to: NodeId): boolean {
    const lane = this.#lanes.get(to);
    return lane !== undefined && (lane.inFlight || lane.queue.length > 0);
  }

  /**
   * Reports the snapshots waiting as lost, once the transport is closing (the transfers in
   * flight are cut by `closing`, and report themselves).
   */
  dropQueued(): void {
    for (const lane of this.#lanes.values()) {
      for (const s of lane.queue.splice(0)) {
        s.message.snapshot.stream?.release();
        s.settle(false);
      }
      settleHeld(lane);
    }
  }

  /**
   * Drops peer node `to`'s lane, which left the cluster for good (GrpcTransport.forgetPeer): its
   * transfer in flight is cut and those waiting are reported lost, their pinned versions
   * released at once; it reports itself, and releases its own. A later snapshot to the id (a
   * new member under it) starts a new lane, on a new link.
   */
  forget(to: NodeId): void {
    const lane = this.#lanes.get(to);
    if (lane === undefined) return;
    this.#lanes.delete(to);
    lane.cut.abort();
    for (const s of lane.queue.splice(0)) {
      s.message.snapshot.stream?.release();
      s.settle(false);
    }
    settleHeld(lane);
  }

  /** Peer node `to`'s lane, made on first use (with its link). */
  #lane(to: NodeId): SnapshotLane {
    let lane = this.#lanes.get(to);
    if (lane === undefined) {
      const cut = new AbortController();
      lane = {
        link: this.#links.link(to),
        queue: [],
        signal: AbortSignal.any([this.#closing, cut.signal]),
        cut,
        inFlight: false,
        tooLarge: new Map(),
        held: new Set(),
        sent: 0,
        failed: 0,
        bytesSent: 0,
      };
      this.#lanes.set(to, lane);
    }
    return lane;
  }

  /**
   * Starts the lane's next snapshot unless one is in flight, or has it wait for a slot when
   * `maxTransfers` are; settles each (asynchronously).
   */
  #next(lane: SnapshotLane): void {
    if (lane.inFlight || lane.signal.aborted) return;
    while (lane.queue.length > 0 && this.#holdBack(lane, lane.queue[0] as QueuedSnapshot)) {
      lane.queue.shift();
    }
    if (lane.queue.length === 0) return;
    if (this.#active >= this.#maxTransfers) {
      if (!this.#waiting.includes(lane)) this.#waiting.push(lane);
      return;
    }
    const next = lane.queue.shift() as QueuedSnapshot;
    lane.inFlight = true;
    this.#active++;
    void this.#transfer(lane, next).then((delivered) => {
      lane.inFlight = false;
      this.#active--;
      next.settle(delivered);
      // The peers that waited for the slot go first; this one's next after them.
      if (lane.queue.length > 0 && !this.#waiting.includes(lane)) this.#waiting.push(lane);
      while (this.#active < this.#maxTransfers) {
        const waiting = this.#waiting.shift();
        if (waiting === undefined) break;
        // A lane forgotten or closed meanwhile is skipped (its queue is empty, or it is cut).
        this.#next(waiting);
      }
    });
  }

  /**
   * Whether `s` is held back, its shard's last snapshot refused by the peer as too large: if so
   * its stream is released now, and its outcome (lost) reported when the hold ends.
   */
  #holdBack(lane: SnapshotLane, s: QueuedSnapshot): boolean {
    const hold = lane.tooLarge.get(s.shard);
    const now = performance.now();
    if (hold === undefined || hold.until <= now) return false;
    s.message.snapshot.stream?.release();
    lane.failed++;
    this.#metrics?.failed("send");
    const waitMs = Math.ceil(hold.until - now);
    this.#log.warn("raft snapshot not sent", {
      peer: lane.link.id,
      shard_id: s.shard,
      index: s.message.snapshot.meta.index,
      bytes: 0,
      details: `${lane.link.id} refused the last snapshot of shard ${s.shard} as too large; the next is sent in ${waitMs} ms`,
    });
    const held: HeldSnapshot = {
      settle: s.settle,
      timer: setTimeout(() => {
        lane.held.delete(held);
        s.settle(false);
      }, waitMs),
    };
    held.timer.unref();
    lane.held.add(held);
    return true;
  }

  /** Streams one snapshot to the lane's peer; resolves with whether the peer acknowledged it. */
  async #transfer(lane: SnapshotLane, s: QueuedSnapshot): Promise<boolean> {
    const peer = lane.link;
    const fields = {
      peer: peer.id,
      shard_id: s.shard,
      index: s.message.snapshot.meta.index,
    };
    const bytesBefore = lane.bytesSent;
    try {
      const address = this.#links.address(peer.id);
      if (address === null) throw new Error(`the address of ${peer.id} is not known`);
      const handshake = ownHandshake(this.#clusterId, this.#self, this.#replicaId, peer.id);
      await sendSnapshot(this.#links.client(peer, address), handshake, s.shard, s.message, {
        chunkBytes: this.#chunkBytes,
        limiter: toLearner(s.message) ? this.#learnerPacer : this.#limiter,
        stallTimeoutMs: this.#stallTimeoutMs,
        signal: lane.signal,
        onBytes: (bytes) => {
          lane.bytesSent += bytes;
          this.#metrics?.bytesSent(bytes);
        },
        ...(this.#shardWorker === undefined ? {} : { shardWorker: this.#shardWorker }),
      });
      lane.sent++;
      lane.tooLarge.delete(s.shard);
      this.#metrics?.sent();
      this.#log.info("raft snapshot sent", { ...fields, bytes: lane.bytesSent - bytesBefore });
      return true;
    } catch (err) {
      lane.failed++;
      this.#metrics?.failed("send");
      const e = err as Partial<ServiceError>;
      const code = typeof e.code === "number" ? status[e.code] : undefined;
      if (e.metadata?.get(ERROR_CODE_KEY)[0] === SNAPSHOT_TOO_LARGE_CODE) {
        const last = lane.tooLarge.get(s.shard)?.holdMs;
        const holdMs =
          last === undefined ? this.#tooLargeHoldMs : Math.min(2 * last, 8 * this.#tooLargeHoldMs);
        lane.tooLarge.set(s.shard, { until: performance.now() + holdMs, holdMs });
      }
      const failure = {
        ...fields,
        bytes: lane.bytesSent - bytesBefore,
        ...(code === undefined ? {} : { code }),
        details: e.details ?? String(err),
      };
      // Cut by close() or forget(): the node is stopping, or the peer left; nothing to warn about.
      if (lane.signal.aborted) this.#log.debug("raft snapshot not sent", failure);
      else this.#log.warn("raft snapshot not sent", failure);
      return false;
    } finally {
      // Read to its end, or not: the pinned version it streamed from is no longer needed.
      s.message.snapshot.stream?.release();
    }
  }
}

/**
 * How many snapshots a node may stream at once (SnapshotSenderOptions.maxTransfers) so that
 * each keeps the pace its receiver holds it to: at least `minProgressBytes` of data in every
 * `progressWindowMs` (snapshot-receiver.ts; SNAPSHOT_MIN_PROGRESS_BYTES and
 * SNAPSHOT_PROGRESS_WINDOW_MS by default, whatever this node's own receiver is set to, as every
 * node's is).
 *
 * A RateLimiter serves its reservations in the order they were made, and a transfer holds at
 * most one, of a chunk at most: each of k transfers waits at each limiter for at most one
 * chunk of every other, so it gets at least 1 / (k/learnerRate + k/rate) of the bytes (a
 * learner's passes both limiters, a voter's the node-wide one alone, and gets more). k is
 * chosen for that to be four times the floor, and at least a chunk in each quarter of the
 * window: then any window holds three chunks' worth less the one that straddles each end,
 * over twice the floor. At the lowest rates the configuration allows (1 MiB/s each), 1 MiB
 * chunks and the default floor (1 MiB a minute), that is 7; at the defaults (64 MiB/s,
 * 4 MiB/s), 56. Never under 1: a single transfer at a rate under the floor is cut whatever
 * the sender does.
 */
export function snapshotSendConcurrency(options: {
  readonly rateBytesPerSec: number;
  readonly learnerRateBytesPerSec: number;
  readonly chunkBytes: number;
  readonly progressWindowMs?: number;
  readonly minProgressBytes?: number;
}): number {
  const windowMs = options.progressWindowMs ?? SNAPSHOT_PROGRESS_WINDOW_MS;
  const floor = options.minProgressBytes ?? SNAPSHOT_MIN_PROGRESS_BYTES;
  const slowest = 1 / (1 / options.learnerRateBytesPerSec + 1 / options.rateBytesPerSec);
  const share = (4 * Math.max(floor, options.chunkBytes) * 1000) / windowMs;
  return Math.max(1, Math.floor(slowest / share));
}

/** Reports the lane's held-back snapshots lost now (the transport closes, or the peer left). */
function settleHeld(lane: SnapshotLane): void {
  for (const held of lane.held) {
    clearTimeout(held.timer);
    held.settle(false);
  }
  lane.held.clear();
}

/** Whether the snapshot goes to a learner of its group (in the configuration it carries). */
export function toLearner(message: SnapshotMessage): boolean {
  return message.snapshot.meta.conf.learners.includes(message.to);
}
