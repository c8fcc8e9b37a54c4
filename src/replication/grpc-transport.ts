/**
 * The peer transport over gRPC (cairn.v1.Raft, proto/cairn/v1/raft.proto): MultiRaft instances
 * on different nodes exchange Raft messages through it (RaftTransport), and the node makes its
 * other calls of its peers through it. This is the sending end; raft-service.ts the receiving.
 *
 * GrpcTransport keeps the interface the node and the driver use, and does one thing itself: a
 * round's messages for a peer become one frame on the long-lived stream to that peer's node
 * (every shard's, in the driver's order; frame-encode.ts encodes it), or several in order when
 * one would pass the frame's limits (many groups catching a peer up at once), and the round's snapshot
 * messages go to the snapshot sender instead (the rest of the round still goes in the frame, at
 * once). The rest is done by parts, each behind a narrow interface:
 *
 *   peer-links.ts       the connections: per-peer channels, the stream and its handshake,
 *                       backoff, the in-flight budgets, unreachable reports (PeerLinks)
 *   snapshot-sender.ts  snapshots, each on an InstallSnapshot call, one in flight per peer,
 *                       paced node-wide (SnapshotSender)
 *   call-forwarder.ts   client KV calls forwarded on the streams, and the answers (CallForwarder)
 *   peer-rpcs.ts        the unary calls: ProposeMeta, ReadIndex, ConfirmTerms, ScanShards
 *   read-index.ts       followers' reads batched into ReadIndex calls (ReadIndexBatcher)
 *
 * Delivery is best effort, as Raft wants it: send() never blocks or throws. A frame is dropped,
 * never queued without bound, when the stream to the peer is down (it failed and its backoff
 * has not passed, or the peer's address is unknown), when it is larger than `maxFrameBytes`
 * (logged), or when the bytes in flight to the peer, or to every peer together, are over their
 * budget. Each drop, and each stream failure, is reported through `onUnreachable` (deferred,
 * never from inside send()), so that the leader stops pipelining to that peer and probes it
 * instead. A snapshot is never dropped for the budget: its outcome is what `sent` hears.
 *
 * Snapshots are read from their streams as they go out (streamsSnapshots: the driver's snapshots
 * hold a pinned engine version, not bytes); every one handed to send() is released, sent or not.
 *
 * The channels are cleartext or mutual TLS (peer-links.ts, `tls`; src/common/peer-tls.ts).
 */
import { setMaxListeners } from "node:events";
import type { Interceptor } from "@grpc/grpc-js";
import type { CallResult } from "../api/grpc-channel.ts";
import type { CallCut } from "../common/index.ts";
import { nodeOfReplica } from "../cluster/index.ts";
import type { NodeId } from "../raft/index.ts";
import { nodeId as toNodeId } from "../raft/index.ts";
import { MAX_FRAME_ITEMS, type PeerReply } from "./frame-codec.ts";
import { encodeBatchFrame } from "./frame-encode.ts";
import type { ClusterIdSource } from "./handshake.ts";
import { type CallOptions, CallForwarder } from "./call-forwarder.ts";
import type { PeerTls } from "../common/peer-tls.ts";
import { type PeerLogger, silentLogger } from "./peer-logger.ts";
import { type LinkStats, PeerLinks } from "./peer-links.ts";
import { PeerRpcs } from "./peer-rpcs.ts";
import { RAFT_SERVER_OPTIONS } from "./raft-service.ts";
import { ReadIndexBatcher } from "./read-index.ts";
import type { RaftTransport, ScanRequest, ShardMessage } from "./multi-raft.ts";
import type { ScanPage } from "./scan-merge.ts";
import type { TermCheck } from "./term-confirm.ts";
import { type PaceClock, systemPaceClock } from "./rate-limiter.ts";
import { releaseSnapshot } from "./snapshot-pins.ts";
import {
  type OutgoingSnapshot,
  SnapshotSender,
  snapshotSendConcurrency,
  type SnapshotStats,
} from "./snapshot-sender.ts";
import type { SnapshotMetrics } from "./snapshot-transfer.ts";

const MIB = 1024 * 1024;

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
  /** Milliseconds, for the backoff and for `departedIdleMs`. Default performance.now. */
  readonly now?: () => number;
  /** Snapshot data leaving this node, to every peer together, in bytes/s. Default 64 MiB/s. */
  readonly snapshotRateBytesPerSec?: number;
  /**
   * Snapshot data leaving this node for learners (a move's new replica), to every peer together,
   * in bytes/s; paced by the node-wide rate too. Default: the node-wide rate.
   */
  readonly snapshotLearnerRateBytesPerSec?: number;
  /** Data bytes per InstallSnapshot chunk; also the rate limiters' burst. Default 1 MiB. */
  readonly snapshotChunkBytes?: number;
  /**
   * A snapshot transfer fails when gRPC takes longer than this to take one chunk, or the peer to
   * answer after the last (ms; the rate limiter's waits do not count). Default 30 s.
   */
  readonly snapshotStallTimeoutMs?: number;
  /**
   * The pace the peers' receivers hold a snapshot transfer to (RaftServiceOptions' options of
   * the same names): this node streams few enough at once for each to keep it
   * (snapshotSendConcurrency). Default the receivers' defaults, 1 MiB in each 60 s.
   */
  readonly snapshotProgressWindowMs?: number;
  readonly snapshotMinProgressBytes?: number;
  /**
   * A shard's snapshots to a peer that refused one as too large for it are held back this long
   * (ms), doubled each time it refuses again, up to 8 times it (snapshot-sender.ts). Default 60 s.
   */
  readonly snapshotTooLargeHoldMs?: number;
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
  /**
   * Whether node `node` has left the cluster for good (decommissioned, removed: the meta state
   * applied here). A link to such a node that nothing used for `departedIdleMs` is forgotten
   * (forgetDeparted). Default: none has.
   */
  readonly departed?: (node: NodeId) => boolean;
  /** See `departed`; also how often links are looked at. Milliseconds (`now`'s). Default 60 s. */
  readonly departedIdleMs?: number;
  /**
   * Whether the meta state applied here records node `node` as a member, in any state. Links to
   * other nodes (answers to a sender the state here does not know yet: handshake.ts) are kept
   * while in use, and at most UNKNOWN_PEER_LINKS of them idle (peer-links.ts). Default: every
   * node is.
   */
  readonly known?: (node: NodeId) => boolean;
  /**
   * Peer TLS (`tls.peer_ca_file`; src/common/peer-tls.ts): every connection to a peer is TLS,
   * presenting this node's certificate and taking the peer's only when it names the node id
   * dialed. Absent: cleartext.
   */
  readonly tls?: PeerTls;
}

/** Counters and state of a peer, for metrics and tests: its connection's and its snapshots'. */
export type PeerStats = LinkStats & SnapshotStats;

export class GrpcTransport implements RaftTransport {
  /** Snapshots are read from their streams as they go out (snapshot-transfer.ts). */
  readonly streamsSnapshots = true;
  readonly nodeId: NodeId;
  readonly #replicaId: NodeId;
  readonly #log: PeerLogger;
  readonly #maxFrame: number;
  /** Aborted by close(): the parts stop (snapshot transfers in flight are cut). */
  readonly #closing = new AbortController();
  #closed = false;
  readonly #links: PeerLinks;
  /** Client calls forwarded over the streams, waiting for their answers (see call()). */
  readonly #forwarder: CallForwarder;
  readonly #snapshots: SnapshotSender;
  /** The unary calls to peers. */
  readonly #rpcs: PeerRpcs;
  /** Followers' reads waiting for a ReadIndex call, per leader node (see readIndex). */
  readonly #reads: ReadIndexBatcher;
  readonly #departed: ((node: NodeId) => boolean) | undefined;
  readonly #departedIdleMs: number;
  readonly #now: () => number;
  /** Runs forgetDeparted every `departedIdleMs` (with `departed` only). */
  readonly #departedSweep: NodeJS.Timeout | undefined;

  constructor(options: GrpcTransportOptions) {
    this.nodeId = toNodeId(options.nodeId);
    this.#replicaId = toNodeId(options.replicaId ?? options.nodeId);
    this.#log = options.logger ?? silentLogger;
    this.#now = options.now ?? (() => performance.now());
    this.#maxFrame =
      options.maxFrameBytes ?? RAFT_SERVER_OPTIONS["grpc.max_receive_message_length"];
    this.#links = new PeerLinks({
      self: this.nodeId,
      replicaId: this.#replicaId,
      clusterId: options.clusterId,
      resolve: options.peers,
      log: this.#log,
      onUnreachable: options.onUnreachable,
      maxInFlightBytesPerPeer: options.maxInFlightBytesPerPeer ?? 16 * MIB,
      maxInFlightBytes: options.maxInFlightBytes ?? 64 * MIB,
      maxFrameBytes: this.#maxFrame,
      initialBackoffMs: options.initialBackoffMs ?? 50,
      maxBackoffMs: options.maxBackoffMs ?? 1000,
      random: options.random ?? Math.random,
      now: this.#now,
      interceptors: options.interceptors ?? [],
      shardWorker: options.shardWorker,
      tls: options.tls,
      closing: this.#closing.signal,
      known: options.known,
      // A link with a snapshot in flight or waiting is in use; a dropped one's idle lane goes
      // with it (the lane holds the link).
      inUse: (id) => this.#snapshots.busy(id),
      dropped: (id) => this.#snapshots.forget(id),
    });
    this.#forwarder = new CallForwarder(this.#links, this.#log);
    const chunkBytes = options.snapshotChunkBytes ?? MIB;
    const rateBytesPerSec = options.snapshotRateBytesPerSec ?? DEFAULT_SNAPSHOT_RATE_BYTES_PER_SEC;
    const learnerRateBytesPerSec = options.snapshotLearnerRateBytesPerSec ?? rateBytesPerSec;
    this.#snapshots = new SnapshotSender({
      links: this.#links,
      self: this.nodeId,
      replicaId: this.#replicaId,
      clusterId: options.clusterId,
      chunkBytes,
      rateBytesPerSec,
      learnerRateBytesPerSec,
      clock: options.snapshotClock ?? systemPaceClock,
      maxTransfers: snapshotSendConcurrency({
        rateBytesPerSec,
        learnerRateBytesPerSec,
        chunkBytes,
        ...(options.snapshotProgressWindowMs === undefined
          ? {}
          : { progressWindowMs: options.snapshotProgressWindowMs }),
        ...(options.snapshotMinProgressBytes === undefined
          ? {}
          : { minProgressBytes: options.snapshotMinProgressBytes }),
      }),
      tooLargeHoldMs: options.snapshotTooLargeHoldMs ?? 60_000,
      stallTimeoutMs: options.snapshotStallTimeoutMs ?? 30_000,
      metrics: options.metrics,
      log: this.#log,
      shardWorker: options.shardWorker?.index,
      closing: this.#closing.signal,
    });
    // One listener per snapshot transfer in flight, one per peer: many peers are not a leak.
    setMaxListeners(0, this.#closing.signal);
    this.#rpcs = new PeerRpcs(
      this.#links,
      options.clusterId,
      this.#replicaId,
      this.#closing.signal,
    );
    this.#reads = new ReadIndexBatcher((node, shards, terms, timeoutMs) =>
      this.#rpcs.readIndex(node, shards, terms, timeoutMs),
    );
    this.#departed = options.departed;
    this.#departedIdleMs = options.departedIdleMs ?? 60_000;
    if (this.#departed !== undefined) {
      this.#departedSweep = setInterval(() => this.forgetDeparted(), this.#departedIdleMs);
      this.#departedSweep.unref();
    }
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
    // Dropped, snapshots with the rest: what a snapshot's stream pins goes now.
    if (outcome === false) for (const m of messages) releaseSnapshot(m.message);
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
    const snapshots: OutgoingSnapshot[] = [];
    const rest: ShardMessage[] = [];
    for (const m of messages) {
      if (m.message.type === "snapshot") snapshots.push({ shard: m.shard, message: m.message });
      else rest.push(m);
    }
    if (snapshots.length === 0) return this.#sendFrame(to, rest, sent);
    if (rest.length > 0) this.#sendFrame(to, rest, undefined);
    this.#snapshots.enqueue(toNodeId(nodeOfReplica(to)), snapshots, sent);
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

  /**
   * Like #send, for messages that are not snapshots; `to` is a replica id. A round whose frame
   * would pass the size or item limit goes in several frames, in order (frameChunks). Sent whole,
   * the round of a peer that many groups catch up at once was dropped whatever its size (a node
   * back after ~600 MB of writes over 192 shards: rounds of 280–460 MB built and thrown away,
   * until its groups' probes fell in different rounds), and a round of small entries past the
   * peer's item limit (2^20, some 20 MiB of them) likewise. A frame dropped drops the rest of
   * the round with it (a group's later messages would only meet a gap); `sent` hears true once
   * every frame was handed over.
   */
  #sendFrame(
    to: NodeId,
    messages: readonly ShardMessage[],
    sent: ((delivered: boolean) => void) | undefined,
  ): boolean | null {
    const chunks = frameChunks(messages, this.#maxFrame);
    if (chunks.length === 1) return this.#sendChunk(to, chunks[0] as FrameChunk, sent);
    let owed = 0;
    let delivered = true;
    const settle =
      sent === undefined
        ? undefined
        : (ok: boolean): void => {
            delivered &&= ok;
            if (--owed === 0) sent(delivered);
          };
    for (const [i, chunk] of chunks.entries()) {
      owed++;
      const outcome = this.#sendChunk(to, chunk, settle);
      if (outcome === null) continue;
      owed--;
      delivered &&= outcome;
      if (!outcome) {
        // The rest of the round, not encoded: each frame of it counted dropped.
        const peer = this.#links.link(toNodeId(nodeOfReplica(to)));
        for (let rest = i + 1; rest < chunks.length; rest++) this.#links.countDropped(peer, 0);
        break;
      }
    }
    return owed === 0 ? delivered : null;
  }

  /** One frame of #sendFrame's round. */
  #sendChunk(
    to: NodeId,
    { messages, items }: FrameChunk,
    sent: ((delivered: boolean) => void) | undefined,
  ): boolean | null {
    const node = toNodeId(nodeOfReplica(to));
    const links = this.#links;
    const peer = links.link(node);
    const stream = links.stream(peer);
    if (stream === null) {
      links.drop(peer, 0);
      return false;
    }
    if (items > MAX_FRAME_ITEMS) {
      // The peer would refuse it and end the stream (frame-codec.ts): dropped here, as one over
      // the size limit is, and the groups probe the peer with smaller appends.
      this.#log.warn("raft frame over the item limit dropped", {
        peer: to,
        items,
        limit: MAX_FRAME_ITEMS,
      });
      links.drop(peer, 0);
      return false;
    }
    const frame = encodeBatchFrame(messages, to === node ? "" : to);
    if (frame.length > this.#maxFrame) {
      this.#log.warn("raft frame over the size limit dropped", {
        peer: to,
        bytes: frame.length,
        limit: this.#maxFrame,
      });
      links.drop(peer, frame.length);
      return false;
    }
    if (links.overBudget(stream, frame.length)) {
      links.drop(peer, frame.length);
      return false;
    }
    links.write(peer, stream, frame, sent);
    return null;
  }

  /** A stream from node `from` was accepted here (RaftServiceOptions.connected): PeerLinks.heardFrom. */
  heardFrom(from: string): void {
    this.#links.heardFrom(toNodeId(from));
  }

  /**
   * Forwards a client's unary KV call to node `to` on the stream to it and resolves with its
   * answer; never rejects. What each outcome means: CallForwarder.call (call-forwarder.ts).
   */
  call(to: string, method: string, request: Uint8Array, options: CallOptions): Promise<CallResult> {
    return this.#forwarder.call(to, method, request, options);
  }

  /**
   * Sends the answer to call `reply.id` of node `to` on the stream to it. Dropped (logged at
   * debug) when that stream is down or over its budget: the caller then fails the call at its
   * deadline or when its own stream to this node ends.
   */
  reply(to: string, reply: PeerReply): void {
    this.#forwarder.reply(to, reply);
  }

  /** The answer node `from` sent to a call this node forwarded there (RaftFrame.reply). */
  receiveReply(from: string, reply: PeerReply): void {
    this.#forwarder.receiveReply(from, reply);
  }

  /** Hands the frames written this turn to the connections now (RaftTransport.flush). */
  flush(): void {
    this.#links.flush();
  }

  /** Counters and state per peer, for metrics and tests. */
  stats(): Record<string, PeerStats> {
    const out: Record<string, PeerStats> = {};
    for (const p of this.#links.links()) {
      out[p.id] = { ...this.#links.stats(p), ...this.#snapshots.stats(p.id) };
    }
    return out;
  }

  /**
   * Node `node` left the cluster for good (decommissioned, removed: ClusterState.onMemberLeft):
   * what the transport keeps of it goes, so that members that come and go leave nothing behind.
   * Its stream is cut and its channels closed (PeerLinks.forget: what the stream owed is settled
   * lost, the calls waiting on it and the unary calls in flight fail UNAVAILABLE, it is reported
   * unreachable), its snapshot transfer in flight is cut and those waiting are reported lost,
   * their pinned versions released (SnapshotSender.forget). Anything sent to the id later (a
   * new member under it) starts a new link, from the start. Not for a peer only unreachable,
   * which may come back.
   */
  forgetPeer(node: string): void {
    if (this.#closed) return;
    const id = toNodeId(node);
    this.#snapshots.forget(id);
    this.#links.forget(id);
  }

  /**
   * Forgets (forgetPeer) each peer that left the cluster for good (`departed`) whose link nothing
   * used for `departedIdleMs`, and that has no snapshot in flight or waiting. forgetPeer, when the
   * member leaves, drops its link; this drops one made again after that by what was still sent
   * to it: frames of a group whose move off it was still under way when it was removed (the
   * meta group removes a dead member once no shard is placed on it, while moves off it may
   * still be running), answers to a replica it left behind or to its last calls. Such a link
   * stays while it is used (so that a node behind on the meta log, which takes a new member
   * under the id for the one that left, still reaches it), and at most about twice
   * `departedIdleMs` after. Runs every `departedIdleMs`.
   */
  forgetDeparted(): void {
    const departed = this.#departed;
    if (departed === undefined || this.#closed) return;
    for (const id of this.#links.unusedSince(this.#now() - this.#departedIdleMs)) {
      if (departed(id) && !this.#snapshots.busy(id)) this.forgetPeer(id);
    }
  }

  /**
   * Ends every stream (half-close: frames already written still go out), waits for them to
   * finish within a second, cuts the rest and closes the channels. Snapshot transfers are cut at
   * once, and those waiting are reported lost; forwarded calls waiting fail. send() drops
   * everything after, and the other calls are refused.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#departedSweep);
    this.#closing.abort();
    this.#forwarder.close();
    this.#snapshots.dropQueued();
    await this.#links.close();
  }

  /**
   * Asks node `to`, which should lead the meta group, to propose `command` (encodeMetaCommand)
   * there; resolves once it is applied on `to`. Rejects with the call's error: UNAVAILABLE with
   * the leader hint (`cairn-leader` in the trailers) when `to` does not lead the meta group.
   */
  proposeMeta(to: NodeId, command: Uint8Array, timeoutMs: number): Promise<void> {
    return this.#rpcs.proposeMeta(to, command, timeoutMs);
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
  confirmTerms(to: NodeId, checks: readonly TermCheck[], timeoutMs: number): Promise<boolean[]> {
    return this.#rpcs.confirmTerms(to, checks, timeoutMs);
  }

  /**
   * Asks node `to`, a replica of every shard in `shards`, for its share of a scan
   * (cairn.v1.Raft ScanShards): the keys of those shards in the range, merged in key order, a
   * page of at most `req.limit` items within `req.maxBytes`. Rejects with the call's error
   * (NotLeaderError's code in the trailers when `to` does not replicate one of them); `cut`
   * cancels the call (CANCELLED; `to` stops waiting for its shards' read indexes).
   */
  scanShards(
    to: NodeId,
    shards: readonly number[],
    req: ScanRequest,
    timeoutMs: number,
    cut?: CallCut,
  ): Promise<ScanPage> {
    return this.#rpcs.scanShards(to, shards, req, timeoutMs, cut);
  }
}

/** A run of a round's messages that goes in one frame, and the items it decodes to. */
interface FrameChunk {
  readonly messages: readonly ShardMessage[];
  /** Its messages and their entries (MAX_FRAME_ITEMS). */
  readonly items: number;
}

/**
 * `messages` cut, in order, into runs whose frames stay within `maxFrameBytes` and
 * MAX_FRAME_ITEMS, by an estimate made before encoding anything (an entry's data and at most
 * ENTRY_OVERHEAD bytes of framing, a message's MESSAGE_OVERHEAD); one message over them is a run
 * of its own (and dropped as too large). Most rounds are one run: `messages` itself.
 */
function frameChunks(messages: readonly ShardMessage[], maxFrameBytes: number): FrameChunk[] {
  const chunks: FrameChunk[] = [];
  let start = 0;
  let bytes = FRAME_OVERHEAD;
  let items = 0;
  for (const [i, { message }] of messages.entries()) {
    let mBytes = MESSAGE_OVERHEAD;
    let mItems = 1;
    if (message.type === "append") {
      for (const e of message.entries) mBytes += ENTRY_OVERHEAD + e.data.length;
      mItems += message.entries.length;
    }
    if (i > start && (bytes + mBytes > maxFrameBytes || items + mItems > MAX_FRAME_ITEMS)) {
      chunks.push({ messages: messages.slice(start, i), items });
      start = i;
      bytes = FRAME_OVERHEAD;
      items = 0;
    }
    bytes += mBytes;
    items += mItems;
  }
  chunks.push({ messages: start === 0 ? messages : messages.slice(start), items });
  return chunks;
}

/**
 * frameChunks's estimate: what a frame, a message and an entry cost beyond an entry's data, at
 * most (frame-encode.ts: a frame's handshake-less header; a message's tags, its varint fields and
 * its shard's item; an entry's tag, length, term, index and type, varints of 10 bytes at most).
 */
const FRAME_OVERHEAD = 1024;
const MESSAGE_OVERHEAD = 256;
const ENTRY_OVERHEAD = 48;
