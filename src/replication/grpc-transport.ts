/**
 * The peer transport over gRPC (cairn.v1.Raft, proto/cairn/v1/raft.proto): MultiRaft instances
 * on different nodes exchange Raft messages through it.
 *
 * One long-lived client stream per node pair and direction. It opens lazily, on the first
 * send() to a peer, with a handshake {cluster id, from, to}; the receiver answers with response
 * headers when it accepts, or ends the call with FAILED_PRECONDITION. Each later frame carries
 * one round's messages for that peer (every shard's), in the driver's order.
 *
 * Delivery is best effort, as Raft wants it: send() never blocks or throws. A frame is dropped,
 * never queued without bound, when
 *   - the stream to the peer is down (it failed, and the backoff has not expired yet),
 *   - the peer's address is unknown,
 *   - or the bytes in flight to the peer (written, not yet handed to the socket) exceed the
 *     per-peer budget (16 MiB), or those to every peer together the node-wide one (64 MiB); one
 *     frame is always admitted to a stream with nothing in flight.
 * Each such drop, and each stream failure, is reported through `onUnreachable` (deferred, never
 * from inside send()), so that the leader stops pipelining to that peer and probes it instead.
 * A failed stream is reopened by the first send() after an exponential backoff with jitter
 * (capped at `maxBackoffMs`). Streams and the unary calls go through the node's own gRPC client
 * (GrpcChannel, one per peer; a PING every 10 s finds a dead peer), frames encoded by
 * frame-codec.ts; snapshots through grpc-js's client (which takes the tests' interceptors).
 *
 * Snapshot messages do not go in frames: send() takes them out of the round (its other messages
 * still go in the frame, at once) and streams each on an InstallSnapshot call of its own, in
 * chunks with a checksum (snapshot-transfer.ts), paced by one node-wide rate limiter. At most one
 * snapshot is in flight per peer; the others wait their turn in order. A snapshot is never
 * dropped for the budget above: the leader that sent it waits to hear its outcome (`sent`), and
 * a group sends no other snapshot to that peer meanwhile, so the queue holds at most one per
 * group. Raft needs no order between a snapshot and the frames: the leader sends that group
 * nothing but heartbeats for that peer until the snapshot's outcome, and the receiver hands the
 * snapshot to Raft before it acknowledges it, so whatever the leader sends after reaches Raft
 * after it.
 *
 * Caveats: frames above `maxFrameBytes` are dropped and logged. A snapshot is held whole in
 * memory at both ends (built in one buffer by the driver, assembled in one by the receiver). No
 * TLS yet (insecure channels; mTLS later, design.md §5.1).
 */
import { setMaxListeners } from "node:events";
import {
  Client,
  type ClientOptions,
  credentials,
  type Interceptor,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import { loadRaftProto } from "../api/proto.ts";
import { TUNNEL_REFUSED } from "../api/h2/client.ts";
import { type CallResult, type ClientCall, GrpcChannel, metadataOf } from "../api/grpc-channel.ts";
import { type CallCut, IntMap } from "../common/index.ts";
import { nodeOfReplica } from "../cluster/index.ts";
import type { NodeId } from "../raft/index.ts";
import { nodeId as toNodeId } from "../raft/index.ts";
import {
  encodeBatchFrame,
  encodeCallFrame,
  encodeHandshakeFrame,
  encodeReplyFrame,
  type PeerReply,
} from "./frame-codec.ts";
import { type ClusterIdSource, currentClusterId, ownHandshake } from "./handshake.ts";
import { type PeerLogger, silentLogger } from "./peer-logger.ts";
import { RAFT_SERVER_OPTIONS } from "./raft-service.ts";
import { ReadIndexBatcher } from "./read-index.ts";
import type { RaftTransport, ScanRequest, ShardMessage } from "./multi-raft.ts";
import type { TermCheck } from "./term-confirm.ts";
import type { StoredItem } from "./state-machine.ts";
import { type PaceClock, RateLimiter, systemPaceClock } from "./rate-limiter.ts";
import { sendSnapshot, type SnapshotMessage, type SnapshotMetrics } from "./snapshot-transfer.ts";

const MIB = 1024 * 1024;
/** The peers' unary calls (ReadIndex, ProposeMeta, ScanShards) carry at most this much. */
const MAX_UNARY_BYTES = 64 * MIB;
/** A PING to each peer this often; one unanswered this long ends the connection. */
const KEEPALIVE_MS = 10_000;
const KEEPALIVE_TIMEOUT_MS = 5_000;

/** The default pace of snapshot data leaving a node (`raft.snapshot_rate_bytes_per_sec`). */
const DEFAULT_SNAPSHOT_RATE_BYTES_PER_SEC = 64 * MIB;

export interface GrpcTransportOptions {
  readonly clusterId: ClusterIdSource;
  /** This node: the sender of every stream it opens. */
  readonly nodeId: string;
  /** This node's replica id in its groups (MultiRaftOptions.replicaId). Default: nodeId. */
  readonly replicaId?: string;
  /** A peer's RPC address ("host:port"), or null when not known (frames to it are dropped). */
  readonly peers: (nodeId: string) => string | null;
  readonly logger?: PeerLogger;
  /**
   * A frame to `to` was dropped because the stream is down, the address unknown or the budget
   * full, or its stream failed with frames in flight. Called later, never from inside send();
   * several reports of one peer may be merged. The driver should hand it to the peer's groups
   * (RawNode.reportUnreachable) at its next round.
   */
  readonly onUnreachable?: (to: NodeId) => void;
  /** Bytes written to a peer's stream and not yet handed to its socket. Default 16 MiB. */
  readonly maxInFlightBytesPerPeer?: number;
  /**
   * The same, over every peer together: a node cut off from many slow peers holds at most this
   * much in its streams. Default 64 MiB.
   */
  readonly maxInFlightBytes?: number;
  /** Larger frames are dropped (the receiver would refuse them). Default 128 MiB. */
  readonly maxFrameBytes?: number;
  /** First delay before reopening a failed stream. Default 50 ms. */
  readonly initialBackoffMs?: number;
  /** The delay doubles per failure up to this. Default 1000 ms. */
  readonly maxBackoffMs?: number;
  /** In [0, 1): the jitter's randomness. Default Math.random. */
  readonly random?: () => number;
  /** Milliseconds, for the backoff. Default performance.now. */
  readonly now?: () => number;
  /** Snapshot data leaving this node, to every peer together, in bytes/s. Default 64 MiB/s. */
  readonly snapshotRateBytesPerSec?: number;
  /** Data bytes per InstallSnapshot chunk; also the rate limiter's burst. Default 1 MiB. */
  readonly snapshotChunkBytes?: number;
  /**
   * A snapshot transfer fails when gRPC takes longer than this to take one chunk, or the peer to
   * answer after the last (ms; the rate limiter's waits do not count). Default 30 s.
   */
  readonly snapshotStallTimeoutMs?: number;
  /** The rate limiter's time. Default performance.now and setTimeout; tests pass a virtual one. */
  readonly snapshotClock?: PaceClock;
  readonly metrics?: SnapshotMetrics;
  /** gRPC client interceptors on every call to a peer (tests damage snapshots in flight). */
  readonly interceptors?: readonly Interceptor[];
  /**
   * This node runs shard workers and this transport is worker `index`'s: its calls go to worker
   * `index` of each peer (src/api/worker-tunnel.ts), whose groups are the same shards.
   */
  readonly shardWorker?: { readonly index: number; readonly count: number };
}

export interface PeerStats {
  /** "idle": never opened or closed cleanly; "connecting": handshake not answered yet. */
  readonly state: "idle" | "connecting" | "connected" | "backoff";
  readonly address: string | null;
  readonly framesSent: number;
  readonly bytesSent: number;
  readonly framesDropped: number;
  /** Of the dropped frames that were encoded (over the size limit or the budget); frames dropped
   * because the stream was down are not encoded, and count in framesDropped only. */
  readonly bytesDropped: number;
  readonly inFlightBytes: number;
  /** Streams opened (the first one included). */
  readonly streamsOpened: number;
  readonly streamFailures: number;
  /** Snapshots the peer acknowledged. */
  readonly snapshotsSent: number;
  readonly snapshotsFailed: number;
  /** Snapshot data bytes gRPC took for the peer (those of failed transfers too). */
  readonly snapshotBytesSent: number;
  readonly snapshotInFlight: boolean;
  /** Snapshots waiting for the one in flight. */
  readonly snapshotsQueued: number;
}

/** A snapshot message waiting for its peer's turn, and how to report its outcome. */
interface QueuedSnapshot {
  readonly shard: number;
  readonly message: SnapshotMessage;
  readonly settle: (delivered: boolean) => void;
}

interface Stream {
  readonly call: ClientCall;
  /**
   * Forwarded calls written on this stream and not answered yet (see call()), by id. IntMaps,
   * here and below, not a Map or a Set: their churn promotes what the entries reach
   * (src/common/int-map.ts).
   */
  readonly calls: IntMap<PendingCall>;
  inFlightBytes: number;
  accepted: boolean;
  /** Outcome callbacks of frames written and not yet handed to the connection, by write. */
  readonly owed: IntMap<(delivered: boolean) => void>;
  /** Resolves once the call has ended, however. */
  readonly ended: Promise<void>;
}

interface Peer {
  readonly id: NodeId;
  address: string | null;
  /** grpc-js's channel, for snapshots (InstallSnapshot, with the interceptors), and its address. */
  client: Client | null;
  clientAddress: string | null;
  /** The channel of the Raft stream and the unary calls. */
  channel: GrpcChannel | null;
  stream: Stream | null;
  /** No stream is opened before this time (now()). */
  retryAt: number;
  /** The next backoff before jitter. */
  backoffMs: number;
  /** Whether the last stream was accepted: failures are logged at warn on the transition. */
  wasConnected: boolean;
  framesSent: number;
  bytesSent: number;
  framesDropped: number;
  bytesDropped: number;
  streamsOpened: number;
  streamFailures: number;
  /** Snapshots to send after the one in flight, in order. */
  readonly snapshotQueue: QueuedSnapshot[];
  snapshotInFlight: boolean;
  snapshotsSent: number;
  snapshotsFailed: number;
  snapshotBytesSent: number;
}

const CLOSE_DEADLINE_MS = 1000;

/** A forwarded call waiting for its answer (GrpcTransport.call). */
interface PendingCall {
  readonly id: number;
  readonly peer: NodeId;
  /** When the caller stops waiting (Date.now() clock). */
  readonly deadline: number;
  /** The stream it went out on (its end fails the call). */
  readonly stream: Stream;
  /** Whether some of its bytes may have reached the peer. */
  left: boolean;
  /** Settles the call once; later settlements are ignored. */
  settle(result: CallResult): void;
}

/** How often calls in flight are checked against their deadlines (ms). */
const CALL_SWEEP_MS = 50;

function callFailure(code: status, details: string, sent: boolean): CallResult {
  return { code, details, message: null, trailers: [], sent };
}

export class GrpcTransport implements RaftTransport {
  readonly nodeId: NodeId;
  readonly #replicaId: NodeId;
  readonly #clusterId: ClusterIdSource;
  readonly #resolve: (nodeId: string) => string | null;
  readonly #log: PeerLogger;
  readonly #onUnreachable: ((to: NodeId) => void) | undefined;
  readonly #maxInFlight: number;
  readonly #maxInFlightTotal: number;
  /** Bytes in flight on every stream together. */
  #inFlightTotal = 0;
  readonly #maxFrame: number;
  readonly #initialBackoff: number;
  readonly #maxBackoff: number;
  readonly #random: () => number;
  readonly #now: () => number;
  readonly #path: string;
  readonly #peers = new Map<NodeId, Peer>();
  /** Followers' reads waiting for a ReadIndex call, per leader node (see readIndex). */
  readonly #reads: ReadIndexBatcher;
  readonly #unreachable = new Set<NodeId>();
  readonly #limiter: RateLimiter;
  readonly #chunkBytes: number;
  readonly #stallTimeoutMs: number;
  readonly #metrics: SnapshotMetrics | undefined;
  readonly #interceptors: readonly Interceptor[];
  readonly #shardWorker: { readonly index: number; readonly count: number } | undefined;
  /** Aborted by close(): cancels the snapshot transfers in flight. */
  readonly #closing = new AbortController();
  #closed = false;
  /** Forwarded calls not answered yet, by id (see call()). */
  readonly #calls = new IntMap<PendingCall>();
  #nextCallId = 1;
  /** Numbers the writes whose outcome is owed (Stream.owed). */
  #nextWrite = 1;
  #callSweep: NodeJS.Timeout | null = null;

  constructor(options: GrpcTransportOptions) {
    this.nodeId = toNodeId(options.nodeId);
    this.#replicaId = toNodeId(options.replicaId ?? options.nodeId);
    this.#clusterId = options.clusterId;
    this.#resolve = options.peers;
    this.#log = options.logger ?? silentLogger;
    this.#onUnreachable = options.onUnreachable;
    this.#maxInFlight = options.maxInFlightBytesPerPeer ?? 16 * 1024 * 1024;
    this.#maxInFlightTotal = options.maxInFlightBytes ?? 64 * 1024 * 1024;
    this.#maxFrame =
      options.maxFrameBytes ?? RAFT_SERVER_OPTIONS["grpc.max_receive_message_length"];
    this.#initialBackoff = options.initialBackoffMs ?? 50;
    this.#maxBackoff = Math.max(this.#initialBackoff, options.maxBackoffMs ?? 1000);
    this.#random = options.random ?? Math.random;
    this.#now = options.now ?? (() => performance.now());
    this.#path = loadRaftProto().cairn.v1.Raft.service.Stream.path;
    this.#chunkBytes = options.snapshotChunkBytes ?? MIB;
    if (!Number.isSafeInteger(this.#chunkBytes) || this.#chunkBytes <= 0) {
      throw new RangeError(
        `snapshotChunkBytes must be a positive integer, got ${this.#chunkBytes}`,
      );
    }
    this.#limiter = new RateLimiter(
      options.snapshotRateBytesPerSec ?? DEFAULT_SNAPSHOT_RATE_BYTES_PER_SEC,
      this.#chunkBytes,
      options.snapshotClock ?? systemPaceClock,
    );
    this.#stallTimeoutMs = options.snapshotStallTimeoutMs ?? 30_000;
    // One listener per transfer in flight, one per peer: many peers are not a leak.
    setMaxListeners(0, this.#closing.signal);
    this.#metrics = options.metrics;
    this.#interceptors = options.interceptors ?? [];
    this.#shardWorker = options.shardWorker;
    this.#reads = new ReadIndexBatcher((node, shards, terms, timeoutMs) =>
      this.#unary(
        node,
        loadRaftProto().cairn.v1.Raft.service.ReadIndex,
        {
          cluster_id: currentClusterId(this.#clusterId),
          shard_ids: shards,
          replica: this.#replicaId,
          terms,
        },
        timeoutMs,
      ).then((reply) => reply.results),
    );
  }

  /**
   * Writes one frame with `messages` on the stream to `to`, or drops it when that cannot be done;
   * snapshot messages among them are streamed on their own calls instead (see the top).
   * `sent`, when given, hears once (later, never from inside send()): with snapshots, whether
   * the peer acknowledged every one of them (true) or one failed (false); without, whether the
   * frame was handed to the connection (true) or dropped (false).
   */
  send(to: NodeId, messages: readonly ShardMessage[], sent?: (delivered: boolean) => void): void {
    let outcome: boolean | null = null;
    try {
      outcome = this.#send(to, messages, sent);
    } catch (err) {
      // Nothing above should throw; if it does, the frame is lost like any other.
      this.#log.error("raft frame not sent", { peer: to, error: String(err) });
      outcome = false;
    }
    if (outcome !== null && sent !== undefined) {
      const delivered = outcome;
      setImmediate(() => sent(delivered));
    }
  }

  /** Returns false when the frame was dropped, true when sent empty, null when `sent` is owed. */
  #send(
    to: NodeId,
    messages: readonly ShardMessage[],
    sent: ((delivered: boolean) => void) | undefined,
  ): boolean | null {
    if (this.#closed) return false;
    if (messages.length === 0) return true;
    messages = this.#ownMessages(to, messages);
    if (messages.length === 0) return false;
    const snapshots: { shard: number; message: SnapshotMessage }[] = [];
    const rest: ShardMessage[] = [];
    for (const m of messages) {
      if (m.message.type === "snapshot") snapshots.push({ shard: m.shard, message: m.message });
      else rest.push(m);
    }
    if (snapshots.length === 0) return this.#sendFrame(to, rest, sent);
    if (rest.length > 0) this.#sendFrame(to, rest, undefined);
    this.#enqueueSnapshots(this.#peer(toNodeId(nodeOfReplica(to))), snapshots, sent);
    return null;
  }

  /** `messages` without those whose ends are not this node's replica and `to` (logged). */
  #ownMessages(to: NodeId, messages: readonly ShardMessage[]): readonly ShardMessage[] {
    const self = this.#replicaId;
    const stray = messages.find((m) => m.message.from !== self || m.message.to !== to);
    if (stray !== undefined) {
      // The receiver takes every message's ends from the stream: a stray one would change them.
      this.#log.error("raft message with the wrong ends not sent", {
        peer: to,
        shard_id: stray.shard,
        from: stray.message.from,
        to: stray.message.to,
      });
      return messages.filter((m) => m.message.from === self && m.message.to === to);
    }
    return messages;
  }

  /** Like #send, for messages that are not snapshots; `to` is a replica id. */
  #sendFrame(
    to: NodeId,
    messages: readonly ShardMessage[],
    sent: ((delivered: boolean) => void) | undefined,
  ): boolean | null {
    const node = toNodeId(nodeOfReplica(to));
    const peer = this.#peer(node);
    const stream = this.#stream(peer);
    if (stream === null) {
      this.#drop(peer, 0);
      return false;
    }
    const frame = encodeBatchFrame(messages, to === node ? "" : to);
    if (frame.length > this.#maxFrame) {
      this.#log.warn("raft frame over the size limit dropped", {
        peer: to,
        bytes: frame.length,
        limit: this.#maxFrame,
      });
      this.#drop(peer, frame.length);
      return false;
    }
    if (this.#overBudget(stream, frame.length)) {
      this.#drop(peer, frame.length);
      return false;
    }
    this.#write(peer, stream, frame, sent);
    return null;
  }

  /**
   * Queues `snapshots` for `peer` and starts the first if none is in flight. `sent` hears once,
   * when the last of them settles: true if the peer acknowledged them all. (One outcome for all:
   * a group told "lost" of a snapshot that did arrive just probes its follower, who answers.)
   */
  #enqueueSnapshots(
    peer: Peer,
    snapshots: readonly { shard: number; message: SnapshotMessage }[],
    sent: ((delivered: boolean) => void) | undefined,
  ): void {
    let left = snapshots.length;
    let all = true;
    const settle = (delivered: boolean): void => {
      all &&= delivered;
      if (--left === 0) sent?.(all);
    };
    for (const s of snapshots) peer.snapshotQueue.push({ ...s, settle });
    this.#nextSnapshot(peer);
  }

  /** Starts `peer`'s next snapshot unless one is in flight; settles each (asynchronously). */
  #nextSnapshot(peer: Peer): void {
    if (peer.snapshotInFlight || this.#closed) return;
    const next = peer.snapshotQueue.shift();
    if (next === undefined) return;
    peer.snapshotInFlight = true;
    void this.#transfer(peer, next).then((delivered) => {
      peer.snapshotInFlight = false;
      next.settle(delivered);
      this.#nextSnapshot(peer);
    });
  }

  /** Streams one snapshot to `peer`; resolves with whether the peer acknowledged it. */
  async #transfer(peer: Peer, s: QueuedSnapshot): Promise<boolean> {
    const fields = {
      peer: peer.id,
      shard_id: s.shard,
      index: s.message.snapshot.meta.index,
      bytes: s.message.snapshot.data.length,
    };
    try {
      const address = this.#resolve(peer.id);
      if (address === null) throw new Error(`the address of ${peer.id} is not known`);
      const handshake = ownHandshake(this.#clusterId, this.nodeId, this.#replicaId, peer.id);
      await sendSnapshot(this.#client(peer, address), handshake, s.shard, s.message, {
        chunkBytes: this.#chunkBytes,
        limiter: this.#limiter,
        stallTimeoutMs: this.#stallTimeoutMs,
        signal: this.#closing.signal,
        onBytes: (bytes) => {
          peer.snapshotBytesSent += bytes;
          this.#metrics?.bytesSent(bytes);
        },
        ...(this.#shardWorker === undefined ? {} : { shardWorker: this.#shardWorker.index }),
      });
      peer.snapshotsSent++;
      this.#metrics?.sent();
      this.#log.info("raft snapshot sent", fields);
      return true;
    } catch (err) {
      peer.snapshotsFailed++;
      this.#metrics?.failed("send");
      const e = err as Partial<ServiceError>;
      const code = typeof e.code === "number" ? status[e.code] : undefined;
      const failure = {
        ...fields,
        ...(code === undefined ? {} : { code }),
        details: e.details ?? String(err),
      };
      // Cut by close(): the node is stopping, nothing to warn about.
      if (this.#closed) this.#log.debug("raft snapshot not sent", failure);
      else this.#log.warn("raft snapshot not sent", failure);
      return false;
    }
  }

  /**
   * Forwards a client's unary KV call to node `to` on the stream to it (RaftFrame.call) and
   * resolves with its answer, which `to` sends on its own stream back (receiveReply). Never
   * rejects. `sent` in the result is false only when no byte of the call can have reached `to`:
   * the stream was down, the frame over a limit, or the stream ended before the bytes left.
   * The call fails DEADLINE_EXCEEDED at `deadline` (Date.now() clock, checked every 50 ms),
   * CANCELLED when `cut` is cut, and UNAVAILABLE when the stream ends first; an answer that
   * comes after is dropped. `to` never hears of a cancellation: a write it took still applies.
   */
  call(
    to: string,
    method: string,
    request: Uint8Array,
    options: { readonly deadline: number; readonly cut?: CallCut },
  ): Promise<CallResult> {
    if (this.#closed) {
      return Promise.resolve(callFailure(status.UNAVAILABLE, "the peer transport closed", false));
    }
    const { deadline, cut } = options;
    if (cut?.isCut === true) {
      return Promise.resolve(callFailure(status.CANCELLED, "cancelled before it was sent", false));
    }
    const timeoutMs = Math.min(0xffffffff, Math.ceil(deadline - Date.now()));
    if (timeoutMs <= 0) {
      return Promise.resolve(
        callFailure(status.DEADLINE_EXCEEDED, "deadline exceeded before it was sent", false),
      );
    }
    const peer = this.#peer(toNodeId(to));
    const stream = this.#stream(peer);
    if (stream === null) {
      return Promise.resolve(
        callFailure(status.UNAVAILABLE, `no stream to ${peer.id} (down or backing off)`, false),
      );
    }
    const id = this.#nextCallId++;
    const frame = encodeCallFrame({ id, method, timeoutMs, request });
    if (frame.length > this.#maxFrame || this.#overBudget(stream, frame.length)) {
      peer.framesDropped++;
      peer.bytesDropped += frame.length;
      return Promise.resolve(
        callFailure(status.UNAVAILABLE, `the stream to ${peer.id} is over its budget`, false),
      );
    }
    return new Promise<CallResult>((resolve) => {
      const onAbort = (): void =>
        pending.settle(callFailure(status.CANCELLED, "cancelled", pending.left));
      const pending: PendingCall = {
        id,
        peer: peer.id,
        deadline,
        stream,
        left: false,
        settle: (result) => {
          if (!this.#calls.delete(id)) return;
          pending.stream.calls.delete(id);
          cut?.listen(null);
          resolve(result);
        },
      };
      this.#calls.set(id, pending);
      stream.calls.set(id, pending);
      cut?.listen(onAbort);
      this.#sweepCalls();
      this.#write(peer, stream, frame, (delivered) => {
        if (delivered) pending.left = true;
        else {
          pending.settle(
            callFailure(status.UNAVAILABLE, `the stream to ${peer.id} ended first`, false),
          );
        }
      });
    });
  }

  /**
   * Sends the answer to call `reply.id` of node `to` on the stream to it. Dropped (logged at
   * debug) when that stream is down or over its budget: the caller then fails the call at its
   * deadline or when its own stream to this node ends.
   */
  reply(to: string, reply: PeerReply): void {
    if (this.#closed) return;
    const peer = this.#peer(toNodeId(to));
    const stream = this.#stream(peer);
    let frame: Buffer | null = null;
    if (stream !== null) {
      frame = encodeReplyFrame(reply);
      if (frame.length <= this.#maxFrame && !this.#overBudget(stream, frame.length)) {
        this.#write(peer, stream, frame);
        return;
      }
    }
    peer.framesDropped++;
    peer.bytesDropped += frame?.length ?? 0;
    this.#log.debug("answer to a forwarded call dropped", { peer: peer.id, call: reply.id });
  }

  /** The answer node `from` sent to a call this node forwarded there (RaftFrame.reply). */
  receiveReply(from: string, reply: PeerReply): void {
    const pending = this.#calls.get(reply.id);
    if (pending === undefined || pending.peer !== from) return;
    const ok = reply.code === status.OK;
    pending.settle({
      code: reply.code,
      details: reply.details,
      message: ok
        ? Buffer.from(reply.response.buffer, reply.response.byteOffset, reply.response.length)
        : null,
      trailers: reply.trailers as [string, string][],
      sent: true,
    });
  }

  /** Fails the calls past their deadline, every CALL_SWEEP_MS while any is in flight. */
  #sweepCalls(): void {
    if (this.#callSweep !== null) return;
    this.#callSweep = setInterval(() => {
      const now = Date.now();
      for (const c of this.#calls.values()) {
        if (c.deadline <= now) {
          c.settle(callFailure(status.DEADLINE_EXCEEDED, "deadline exceeded", c.left));
        }
      }
      if (this.#calls.size === 0 && this.#callSweep !== null) {
        clearInterval(this.#callSweep);
        this.#callSweep = null;
      }
    }, CALL_SWEEP_MS);
    this.#callSweep.unref();
  }

  /** Hands the frames written this turn to the connections now (RaftTransport.flush). */
  flush(): void {
    for (const p of this.#peers.values()) p.channel?.flush();
  }

  /** Counters and state per peer, for metrics and tests. */
  stats(): Record<string, PeerStats> {
    const out: Record<string, PeerStats> = {};
    for (const p of this.#peers.values()) {
      out[p.id] = {
        state:
          p.stream !== null
            ? p.stream.accepted
              ? "connected"
              : "connecting"
            : p.retryAt > this.#now()
              ? "backoff"
              : "idle",
        address: p.address,
        framesSent: p.framesSent,
        bytesSent: p.bytesSent,
        framesDropped: p.framesDropped,
        bytesDropped: p.bytesDropped,
        inFlightBytes: p.stream?.inFlightBytes ?? 0,
        streamsOpened: p.streamsOpened,
        streamFailures: p.streamFailures,
        snapshotsSent: p.snapshotsSent,
        snapshotsFailed: p.snapshotsFailed,
        snapshotBytesSent: p.snapshotBytesSent,
        snapshotInFlight: p.snapshotInFlight,
        snapshotsQueued: p.snapshotQueue.length,
      };
    }
    return out;
  }

  /**
   * Ends every stream (half-close: frames already written still go out), waits for them to
   * finish within a second, cuts the rest and closes the channels. Snapshot transfers are cut at
   * once, and those waiting are reported lost. send() drops everything after.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#closing.abort();
    for (const c of this.#calls.values()) {
      c.settle(callFailure(status.UNAVAILABLE, "the peer transport closed", c.left));
    }
    for (const p of this.#peers.values()) {
      for (const s of p.snapshotQueue.splice(0)) s.settle(false);
    }
    const streams = [...this.#peers.values()].flatMap((p) => (p.stream === null ? [] : [p.stream]));
    for (const s of streams) s.call.end();
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(streams.map((s) => s.ended)),
      new Promise<void>((resolve) => {
        timer = setTimeout(resolve, CLOSE_DEADLINE_MS);
      }),
    ]);
    clearTimeout(timer);
    for (const p of this.#peers.values()) {
      p.stream?.call.cancel();
      p.stream = null;
      p.client?.close();
      p.client = null;
      p.channel?.destroy();
      p.channel = null;
    }
  }

  #peer(to: NodeId): Peer {
    let p = this.#peers.get(to);
    if (p === undefined) {
      p = {
        id: to,
        address: null,
        client: null,
        clientAddress: null,
        channel: null,
        stream: null,
        retryAt: 0,
        backoffMs: this.#initialBackoff,
        wasConnected: false,
        framesSent: 0,
        bytesSent: 0,
        framesDropped: 0,
        bytesDropped: 0,
        streamsOpened: 0,
        streamFailures: 0,
        snapshotQueue: [],
        snapshotInFlight: false,
        snapshotsSent: 0,
        snapshotsFailed: 0,
        snapshotBytesSent: 0,
      };
      this.#peers.set(to, p);
    }
    return p;
  }

  /** The channel to `peer` at `address` (a new one when its address changed). */
  #client(peer: Peer, address: string): Client {
    if (peer.client === null || peer.clientAddress !== address) {
      peer.client?.close();
      const options: ClientOptions = {
        // The channel's own reconnect backoff must not outlast the transport's (default 120 s).
        "grpc.initial_reconnect_backoff_ms": this.#initialBackoff,
        "grpc.max_reconnect_backoff_ms": this.#maxBackoff,
        // A peer behind a dead connection is found by pings, not by a full budget forever.
        "grpc.keepalive_time_ms": 10_000,
        "grpc.keepalive_timeout_ms": 5_000,
        // This node's connections are its own (not shared with another transport in-process).
        "grpc.use_local_subchannel_pool": 1,
      };
      if (this.#interceptors.length > 0) options.interceptors = [...this.#interceptors];
      peer.client = new Client(address, credentials.createInsecure(), options);
      peer.clientAddress = address;
    }
    return peer.client;
  }

  /** The channel to `peer` at `address` (a new one when its address changed). */
  #channel(peer: Peer, address: string): GrpcChannel {
    if (peer.channel === null || peer.channel.address !== address) {
      peer.channel?.close();
      peer.channel = new GrpcChannel(address, {
        maxMessageBytes: Math.max(this.#maxFrame, MAX_UNARY_BYTES),
        // The stream's own backoff (#backOff) paces reconnections; the channel's only spaces
        // the attempts of the unary calls meanwhile.
        reconnectBackoffMs: this.#initialBackoff,
        // A peer behind a dead connection is found by pings, not by a full budget forever.
        keepaliveMs: KEEPALIVE_MS,
        keepaliveTimeoutMs: KEEPALIVE_TIMEOUT_MS,
        ...(this.#shardWorker === undefined ? {} : { shardWorker: this.#shardWorker }),
        peerId: this.nodeId,
      });
    }
    return peer.channel;
  }

  /**
   * Asks node `to`, which should lead the meta group, to propose `command` (encodeMetaCommand)
   * there; resolves once it is applied on `to`. Rejects with the call's error: UNAVAILABLE with
   * the leader hint (`cairn-leader` in the trailers) when `to` does not lead the meta group.
   */
  async proposeMeta(to: NodeId, command: Uint8Array, timeoutMs: number): Promise<void> {
    const method = loadRaftProto().cairn.v1.Raft.service.ProposeMeta;
    await this.#unary(
      to,
      method,
      { cluster_id: currentClusterId(this.#clusterId), command },
      timeoutMs,
    );
  }

  /**
   * Asks node `to`, which should lead `shard`, for the index a linearizable read on this node
   * must wait for (cairn.v1.Raft ReadIndex). Rejects like proposeMeta, or with the shard's own
   * refusal (NotLeaderError with the leader's node when known, or a CairnError).
   *
   * Reads are batched per leader node, with one call in flight: a read asked while a call is
   * in flight waits for the next call, which carries every read asked meanwhile (one entry per
   * shard). A read must never take the answer of a call sent before it was asked: that index
   * may predate a write acknowledged before the read arrived. `term`, when given, is this
   * node's replica's term in the group when the read was asked: the call carries it (the
   * highest asked, per shard) with this node's replica id, a ReadVoucher for the leader.
   */
  readIndex(to: NodeId, shard: number, timeoutMs: number, term?: number): Promise<number> {
    return this.#reads.read(to, shard, timeoutMs, term);
  }

  /**
   * Asks node `to` whether its replicas are at a term no higher than each check names
   * (cairn.v1.Raft ConfirmTerms; MultiRaft.confirmTerms there): one answer per check, in order.
   * Batching is the caller's (TermConfirmer). Rejects with the call's error.
   */
  async confirmTerms(
    to: NodeId,
    checks: readonly TermCheck[],
    timeoutMs: number,
  ): Promise<boolean[]> {
    const method = loadRaftProto().cairn.v1.Raft.service.ConfirmTerms;
    const reply = await this.#unary(
      to,
      method,
      {
        cluster_id: currentClusterId(this.#clusterId),
        shard_ids: checks.map((c) => c.shard),
        terms: checks.map((c) => c.term),
        replicas: checks.map((c) => c.replica),
      },
      timeoutMs,
    );
    if (reply.confirmed.length !== checks.length) {
      throw new Error(
        `${reply.confirmed.length} answers to ${checks.length} term checks from ${to}`,
      );
    }
    return reply.confirmed;
  }

  /**
   * Asks node `to`, a replica of every shard in `shards`, for its share of a scan
   * (cairn.v1.Raft ScanShards): the keys of those shards in the range, merged in key order, at
   * most `req.limit`. Rejects with the call's error (NotLeaderError's code in the trailers when
   * `to` does not replicate one of them).
   */
  async scanShards(
    to: NodeId,
    shards: readonly number[],
    req: ScanRequest,
    timeoutMs: number,
  ): Promise<StoredItem[]> {
    const method = loadRaftProto().cairn.v1.Raft.service.ScanShards;
    const reply = await this.#unary(
      to,
      method,
      {
        cluster_id: currentClusterId(this.#clusterId),
        shard_ids: [...shards],
        start: req.start,
        end: req.end ?? new Uint8Array(0),
        has_end: req.end !== null,
        limit: req.limit,
        linearizable: req.linearizable,
      },
      timeoutMs,
    );
    return reply.items.map((i) => ({
      key: i.key,
      value: i.value,
      version: { index: Number(i.index), term: Number(i.term) },
    }));
  }

  #unary<Req, Res>(
    to: NodeId,
    method: {
      path: string;
      requestSerialize: (req: Req) => Buffer;
      responseDeserialize: (bytes: Buffer) => Res;
    },
    request: Req,
    timeoutMs: number,
  ): Promise<Res> {
    if (this.#closed) return Promise.reject(new Error("the transport is closed"));
    // `to` may name a replica (a leader hint): its node is who answers.
    const node = toNodeId(nodeOfReplica(to));
    const address = this.#resolve(node);
    if (address === null) {
      return Promise.reject(new Error(`the address of ${node} is not known`));
    }
    let bytes: Buffer;
    try {
      bytes = method.requestSerialize(request);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    return this.#channel(this.#peer(node), address)
      .unary(method.path, bytes, { deadline: Date.now() + timeoutMs })
      .then((result) => {
        if (result.code !== status.OK || result.message === null) throw callError(result);
        return method.responseDeserialize(result.message);
      });
  }

  /** The open stream to `peer`, opened now if the backoff allows; null while it is down. */
  #stream(peer: Peer): Stream | null {
    if (peer.stream !== null) return peer.stream;
    if (this.#now() < peer.retryAt) return null;
    const address = this.#resolve(peer.id);
    if (address === null) {
      this.#log.debug("raft peer address unknown", { peer: peer.id });
      this.#backOff(peer);
      return null;
    }
    let settle = (): void => undefined;
    const ended = new Promise<void>((resolve) => {
      settle = resolve;
    });
    const call = this.#channel(peer, address).clientStream(this.#path);
    const stream: Stream = {
      call,
      calls: new IntMap(),
      inFlightBytes: 0,
      accepted: false,
      owed: new IntMap(),
      ended,
    };
    call.onEnd = (result) => {
      settle();
      this.#ended(peer, stream, result.code === status.OK ? null : result);
    };
    call.onHeaders = () => {
      stream.accepted = true;
      peer.backoffMs = this.#initialBackoff;
      if (!peer.wasConnected) this.#log.info("raft peer connected", { peer: peer.id, address });
      peer.wasConnected = true;
    };
    peer.address = address;
    peer.stream = stream;
    peer.streamsOpened++;
    this.#write(
      peer,
      stream,
      encodeHandshakeFrame(ownHandshake(this.#clusterId, this.nodeId, this.#replicaId, peer.id)),
    );
    return stream;
  }

  #write(peer: Peer, stream: Stream, frame: Buffer, sent?: (delivered: boolean) => void): void {
    stream.inFlightBytes += frame.length;
    this.#inFlightTotal += frame.length;
    peer.framesSent++;
    peer.bytesSent += frame.length;
    // Settled once: by the write's callback, or as lost when the call ends first (#ended).
    const write = this.#nextWrite++;
    if (sent !== undefined) stream.owed.set(write, sent);
    stream.call.write(frame, (err) => {
      stream.inFlightBytes -= frame.length;
      this.#inFlightTotal -= frame.length;
      if (sent !== undefined && stream.owed.delete(write)) sent(err === null);
    });
  }

  /** The call to `peer` ended: by close(), by the peer (refusal, shutdown) or by the network. */
  #ended(peer: Peer, stream: Stream, err: CallResult | null): void {
    if (peer.stream === stream) peer.stream = null;
    const owed = stream.owed.values();
    stream.owed.clear();
    for (const sent of owed) sent(false);
    // A call whose bytes left may have reached the peer: its outcome is unknown, as for a
    // unary call whose connection broke (those that never left failed just above).
    for (const c of stream.calls.values()) {
      c.settle(
        callFailure(
          status.UNAVAILABLE,
          `the stream to ${peer.id} ended before it answered`,
          c.left,
        ),
      );
    }
    if (this.#closed) return;
    peer.streamFailures++;
    const fields = {
      peer: peer.id,
      address: peer.address,
      code: err === null ? "OK" : status[err.code],
      details: err?.details ?? "",
    };
    // A refusal is a configuration mistake (another cluster, another number of shard workers,
    // not a member): said at every attempt, not once.
    if (
      err?.code === status.FAILED_PRECONDITION ||
      err?.code === status.PERMISSION_DENIED ||
      fields.details.includes(TUNNEL_REFUSED)
    ) {
      this.#log.warn("raft peer refused the stream", fields);
    } else if (peer.wasConnected) {
      this.#log.warn("raft peer stream lost", fields);
    } else {
      this.#log.debug("raft peer stream failed", fields);
    }
    peer.wasConnected = false;
    this.#backOff(peer);
    this.#reportUnreachable(peer.id);
  }

  #backOff(peer: Peer): void {
    // "Equal jitter": half the delay is fixed, half random, so retries of several nodes spread.
    const delay = peer.backoffMs / 2 + (peer.backoffMs / 2) * this.#random();
    peer.retryAt = this.#now() + delay;
    peer.backoffMs = Math.min(this.#maxBackoff, peer.backoffMs * 2);
  }

  /**
   * Whether `bytes` more would take `stream` past its in-flight budget or the node's. One frame
   * is always admitted to a stream with nothing in flight, whatever the node-wide total: no peer
   * is starved by the others' backlog.
   */
  #overBudget(stream: Stream, bytes: number): boolean {
    return (
      stream.inFlightBytes > 0 &&
      (stream.inFlightBytes + bytes > this.#maxInFlight ||
        this.#inFlightTotal + bytes > this.#maxInFlightTotal)
    );
  }

  #drop(peer: Peer, bytes: number): void {
    peer.framesDropped++;
    peer.bytesDropped += bytes;
    this.#reportUnreachable(peer.id);
  }

  #reportUnreachable(to: NodeId): void {
    const report = this.#onUnreachable;
    if (report === undefined || this.#unreachable.has(to)) return;
    this.#unreachable.add(to);
    setImmediate(() => {
      this.#unreachable.delete(to);
      if (!this.#closed) report(to);
    });
  }
}

/** A failed peer call as grpc-js reports one: code, details, trailing metadata. */
function callError(result: CallResult): ServiceError {
  const metadata = metadataOf(result.trailers);
  const code = result.code === status.OK ? status.INTERNAL : result.code;
  const details = result.code === status.OK ? "an answer without a message" : result.details;
  return Object.assign(new Error(`${code} ${status[code]}: ${details}`), {
    code,
    details,
    metadata,
  });
}
