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
 *     per-peer budget (one frame is always admitted when nothing is in flight).
 * Each such drop, and each stream failure, is reported through `onUnreachable` (deferred, never
 * from inside send()), so that the leader stops pipelining to that peer and probes it instead.
 * A failed stream is reopened by the first send() after an exponential backoff with jitter
 * (capped at `maxBackoffMs`); the gRPC channel's own reconnect backoff is capped the same way.
 *
 * Caveats: a snapshot travels whole in one frame, so the receiving server must accept messages
 * as large as the largest snapshot (`RAFT_SERVER_OPTIONS`); frames above `maxFrameBytes` are
 * dropped and logged. No TLS yet (insecure channels; mTLS later, design.md §5.1).
 */
import {
  Client,
  type ClientWritableStream,
  credentials,
  Metadata,
  type ServerReadableStream,
  type ServerUnaryCall,
  type sendUnaryData,
  type ServiceDefinition,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import { loadRaftProto } from "../api/proto.ts";
import type { RaftFrame, RaftFrame__Output } from "../api/generated/cairn/v1/RaftFrame.ts";
import type { RaftHandlers } from "../api/generated/cairn/v1/Raft.ts";
import type { MetaProposal__Output } from "../api/generated/cairn/v1/MetaProposal.ts";
import type { MetaProposalReply } from "../api/generated/cairn/v1/MetaProposalReply.ts";
import type { ReadIndexReply } from "../api/generated/cairn/v1/ReadIndexReply.ts";
import type { ReadIndexRequest__Output } from "../api/generated/cairn/v1/ReadIndexRequest.ts";
import { LEADER_HINT_KEY } from "../api/wire.ts";
import { CairnError } from "../common/errors.ts";
import { nodeOfReplica } from "../cluster/index.ts";
import type { RaftStreamAck } from "../api/generated/cairn/v1/RaftStreamAck.ts";
import type { NodeId } from "../raft/index.ts";
import { NotLeaderError, nodeId as toNodeId } from "../raft/index.ts";
import { decodeBatch, encodeBatch } from "./codec.ts";
import type { RaftTransport, ShardMessage } from "./multi-raft.ts";

type LogFields = Readonly<Record<string, unknown>>;

/** What the transport logs through; the node's `Logger` (src/ops) fits. */
export interface PeerLogger {
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
}

const silent: PeerLogger = {
  debug: () => undefined,
  info: () => undefined,
  warn: () => undefined,
  error: () => undefined,
};

/** Options the receiving gRPC server needs: a frame may carry a whole snapshot. */
export const RAFT_SERVER_OPTIONS = {
  "grpc.max_receive_message_length": 256 * 1024 * 1024,
} as const;

/**
 * A node's cluster id, or a function returning it as it is now: "" while the node has not yet
 * learnt it (a new node before the meta group's bootstrap reached it). Two ends whose ids are
 * both known and differ never talk; an end that does not know its id yet is accepted.
 */
export type ClusterIdSource = string | (() => string);

function currentId(source: ClusterIdSource): string {
  return typeof source === "string" ? source : source();
}

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
  /** Larger frames are dropped (the receiver would refuse them). Default 256 MiB. */
  readonly maxFrameBytes?: number;
  /** First delay before reopening a failed stream. Default 50 ms. */
  readonly initialBackoffMs?: number;
  /** The delay doubles per failure up to this. Default 1000 ms. */
  readonly maxBackoffMs?: number;
  /** In [0, 1): the jitter's randomness. Default Math.random. */
  readonly random?: () => number;
  /** Milliseconds, for the backoff. Default performance.now. */
  readonly now?: () => number;
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
}

interface Stream {
  readonly call: ClientWritableStream<Buffer>;
  inFlightBytes: number;
  accepted: boolean;
  /** Outcome callbacks of frames written and not yet handed to the connection. */
  readonly owed: Set<(delivered: boolean) => void>;
  /** Resolves once the call has ended, however. */
  readonly ended: Promise<void>;
}

interface Peer {
  readonly id: NodeId;
  address: string | null;
  client: Client | null;
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
}

const CLOSE_DEADLINE_MS = 1000;

export class GrpcTransport implements RaftTransport {
  readonly nodeId: NodeId;
  readonly #replicaId: NodeId;
  readonly #clusterId: ClusterIdSource;
  readonly #resolve: (nodeId: string) => string | null;
  readonly #log: PeerLogger;
  readonly #onUnreachable: ((to: NodeId) => void) | undefined;
  readonly #maxInFlight: number;
  readonly #maxFrame: number;
  readonly #initialBackoff: number;
  readonly #maxBackoff: number;
  readonly #random: () => number;
  readonly #now: () => number;
  readonly #serialize: (frame: RaftFrame) => Buffer;
  readonly #path: string;
  readonly #peers = new Map<NodeId, Peer>();
  readonly #unreachable = new Set<NodeId>();
  #closed = false;

  constructor(options: GrpcTransportOptions) {
    this.nodeId = toNodeId(options.nodeId);
    this.#replicaId = toNodeId(options.replicaId ?? options.nodeId);
    this.#clusterId = options.clusterId;
    this.#resolve = options.peers;
    this.#log = options.logger ?? silent;
    this.#onUnreachable = options.onUnreachable;
    this.#maxInFlight = options.maxInFlightBytesPerPeer ?? 16 * 1024 * 1024;
    this.#maxFrame =
      options.maxFrameBytes ?? RAFT_SERVER_OPTIONS["grpc.max_receive_message_length"];
    this.#initialBackoff = options.initialBackoffMs ?? 50;
    this.#maxBackoff = Math.max(this.#initialBackoff, options.maxBackoffMs ?? 1000);
    this.#random = options.random ?? Math.random;
    this.#now = options.now ?? (() => performance.now());
    const method = loadRaftProto().cairn.v1.Raft.service.Stream;
    this.#serialize = method.requestSerialize;
    this.#path = method.path;
  }

  /**
   * Writes one frame with `messages` on the stream to `to`; drops it when that cannot be done.
   * `sent`, when given, hears once (later, never from inside send()) whether the frame was
   * handed to the connection (true) or dropped (false).
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
      messages = messages.filter((m) => m.message.from === self && m.message.to === to);
      if (messages.length === 0) return false;
    }
    const node = toNodeId(nodeOfReplica(to));
    const peer = this.#peer(node);
    const stream = this.#stream(peer);
    if (stream === null) {
      this.#drop(peer, 0);
      return false;
    }
    const batch = encodeBatch(messages);
    const frame = this.#serialize({
      batch: to === node ? batch : { ...batch, to_replica_id: to },
    });
    if (frame.length > this.#maxFrame) {
      this.#log.warn("raft frame over the size limit dropped", {
        peer: to,
        bytes: frame.length,
        limit: this.#maxFrame,
      });
      this.#drop(peer, frame.length);
      return false;
    }
    if (stream.inFlightBytes > 0 && stream.inFlightBytes + frame.length > this.#maxInFlight) {
      this.#drop(peer, frame.length);
      return false;
    }
    this.#write(peer, stream, frame, sent);
    return null;
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
      };
    }
    return out;
  }

  /**
   * Ends every stream (half-close: frames already written still go out), waits for them to
   * finish within a second, cuts the rest and closes the channels. send() drops everything after.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
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
    }
  }

  #peer(to: NodeId): Peer {
    let p = this.#peers.get(to);
    if (p === undefined) {
      p = {
        id: to,
        address: null,
        client: null,
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
      };
      this.#peers.set(to, p);
    }
    return p;
  }

  /** The channel to `peer` at `address` (a new one when its address changed). */
  #client(peer: Peer, address: string): Client {
    if (peer.client === null || peer.address !== address) {
      peer.client?.close();
      peer.client = new Client(address, credentials.createInsecure(), {
        // The channel's own reconnect backoff must not outlast the transport's (default 120 s).
        "grpc.initial_reconnect_backoff_ms": this.#initialBackoff,
        "grpc.max_reconnect_backoff_ms": this.#maxBackoff,
        // A peer behind a dead connection is found by pings, not by a full budget forever.
        "grpc.keepalive_time_ms": 10_000,
        "grpc.keepalive_timeout_ms": 5_000,
        // This node's connections are its own (not shared with another transport in-process).
        "grpc.use_local_subchannel_pool": 1,
      });
      peer.address = address;
    }
    return peer.client;
  }

  /**
   * Asks node `to`, which should lead the meta group, to propose `command` (encodeMetaCommand)
   * there; resolves once it is applied on `to`. Rejects with the call's error: UNAVAILABLE with
   * the leader hint (`cairn-leader` in the trailers) when `to` does not lead the meta group.
   */
  async proposeMeta(to: NodeId, command: Uint8Array, timeoutMs: number): Promise<void> {
    const method = loadRaftProto().cairn.v1.Raft.service.ProposeMeta;
    await this.#unary(to, method, { cluster_id: currentId(this.#clusterId), command }, timeoutMs);
  }

  /**
   * Asks node `to`, which should lead `shard`, for the index a linearizable read on this node
   * must wait for (cairn.v1.Raft ReadIndex). Rejects like proposeMeta.
   */
  async readIndex(to: NodeId, shard: number, timeoutMs: number): Promise<number> {
    const method = loadRaftProto().cairn.v1.Raft.service.ReadIndex;
    const reply = await this.#unary(
      to,
      method,
      { cluster_id: currentId(this.#clusterId), shard_id: shard },
      timeoutMs,
    );
    return Number(reply.index);
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
    const client = this.#client(this.#peer(node), address);
    return new Promise((resolve, reject) => {
      client.makeUnaryRequest(
        method.path,
        method.requestSerialize,
        method.responseDeserialize,
        request,
        new Metadata(),
        { deadline: Date.now() + timeoutMs },
        (err, res) => (err === null && res !== undefined ? resolve(res) : reject(err)),
      );
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
    const client = this.#client(peer, address);
    let settle = (): void => undefined;
    const ended = new Promise<void>((resolve) => {
      settle = resolve;
    });
    const call = client.makeClientStreamRequest<Buffer, RaftStreamAck>(
      this.#path,
      (frame) => frame,
      () => ({}),
      new Metadata(),
      {},
      (err) => {
        settle();
        this.#ended(peer, stream, err);
      },
    );
    const stream: Stream = { call, inFlightBytes: 0, accepted: false, owed: new Set(), ended };
    // Errors reach the callback above; the listener keeps a late write's error from throwing.
    call.on("error", () => undefined);
    call.on("metadata", () => {
      stream.accepted = true;
      peer.backoffMs = this.#initialBackoff;
      if (!peer.wasConnected) this.#log.info("raft peer connected", { peer: peer.id, address });
      peer.wasConnected = true;
    });
    peer.stream = stream;
    peer.streamsOpened++;
    this.#write(
      peer,
      stream,
      this.#serialize({
        handshake: {
          cluster_id: currentId(this.#clusterId),
          from_node_id: this.nodeId,
          to_node_id: peer.id,
          from_replica_id: this.#replicaId === this.nodeId ? "" : this.#replicaId,
        },
      }),
    );
    return stream;
  }

  #write(peer: Peer, stream: Stream, frame: Buffer, sent?: (delivered: boolean) => void): void {
    stream.inFlightBytes += frame.length;
    peer.framesSent++;
    peer.bytesSent += frame.length;
    // Settled once: by the write's callback, or as lost when the call ends first (#ended).
    if (sent !== undefined) stream.owed.add(sent);
    stream.call.write(frame, (err?: Error | null) => {
      stream.inFlightBytes -= frame.length;
      if (sent !== undefined && stream.owed.delete(sent)) sent(err === undefined || err === null);
    });
  }

  /** The call to `peer` ended: by close(), by the peer (refusal, shutdown) or by the network. */
  #ended(peer: Peer, stream: Stream, err: ServiceError | null): void {
    if (peer.stream === stream) peer.stream = null;
    const owed = [...stream.owed];
    stream.owed.clear();
    for (const sent of owed) sent(false);
    if (this.#closed) return;
    peer.streamFailures++;
    const fields = {
      peer: peer.id,
      address: peer.address,
      code: err === null ? "OK" : status[err.code],
      details: err?.details ?? "",
    };
    if (err?.code === status.FAILED_PRECONDITION) {
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

// ── the receiving side ────────────────────────────────────────────────────────────────────────

export interface RaftServiceOptions {
  readonly clusterId: ClusterIdSource;
  /**
   * Proposes a meta command (encodeMetaCommand bytes) to the meta group here and resolves once
   * it is applied; rejects with NotLeaderError when this node does not lead it. Without it,
   * ProposeMeta answers UNIMPLEMENTED.
   */
  readonly proposeMeta?: (command: Uint8Array) => Promise<void>;
  /**
   * Confirms this node's leadership of a shard and answers a follower's read index
   * (MultiRaft.readIndexAsLeader). Without it, ReadIndex answers UNIMPLEMENTED.
   */
  readonly readIndex?: (shard: number) => Promise<number>;
  /** This node: streams addressed to another node are refused. */
  readonly nodeId: string;
  readonly logger?: PeerLogger;
}

export interface RaftService {
  /** cairn.v1.Raft: `server.addService(service.definition, service.implementation)`. */
  readonly definition: ServiceDefinition;
  readonly implementation: RaftHandlers;
  /** Ends every open stream (UNAVAILABLE): the senders back off and reconnect elsewhere/later. */
  endAll(): void;
}

/**
 * The receiving end of cairn.v1.Raft: checks each stream's handshake, then hands every frame's
 * messages to `handler` with the sender's node id (MultiRaft.receive fits).
 */
export function createRaftService(
  handler: (from: string, messages: ShardMessage[]) => void,
  options: RaftServiceOptions,
): RaftService {
  const log = options.logger ?? silent;
  const self = toNodeId(options.nodeId);
  const open = new Set<(err: Partial<ServiceError> | null) => void>();

  const stream = (
    call: ServerReadableStream<RaftFrame__Output, RaftStreamAck>,
    callback: sendUnaryData<RaftStreamAck>,
  ): void => {
    let from: NodeId | null = null;
    /** The sender's replica id: the `from` of every message it sends. */
    let fromReplica: NodeId | null = null;
    let done = false;
    const finish = (err: Partial<ServiceError> | null): void => {
      if (done) return;
      done = true;
      open.delete(finish);
      if (err === null) callback(null, {});
      else callback(err);
    };
    open.add(finish);
    const refuse = (code: status, details: string, fields: LogFields): void => {
      log.warn("raft stream refused", { ...fields, code: status[code], details });
      finish({ code, details });
    };
    call.on("data", (frame: RaftFrame__Output) => {
      if (done) return;
      if (from === null) {
        const hs = frame.handshake;
        if (frame.frame !== "handshake" || hs === undefined || hs === null) {
          refuse(status.FAILED_PRECONDITION, "the first frame must be a handshake", {
            peer_addr: call.getPeer(),
          });
          return;
        }
        const fields = {
          peer: hs.from_node_id,
          peer_addr: call.getPeer(),
          cluster_id: hs.cluster_id,
          to: hs.to_node_id,
        };
        const ours = currentId(options.clusterId);
        if (hs.cluster_id !== ours && hs.cluster_id !== "" && ours !== "") {
          refuse(
            status.FAILED_PRECONDITION,
            `cluster id mismatch: this node is in cluster ${JSON.stringify(ours)}, the sender in ${JSON.stringify(hs.cluster_id)}`,
            fields,
          );
        } else if (hs.to_node_id !== self) {
          refuse(
            status.FAILED_PRECONDITION,
            `node id mismatch: this node is ${JSON.stringify(self)}, the sender addressed ${JSON.stringify(hs.to_node_id)}`,
            fields,
          );
        } else if (
          hs.from_node_id === "" ||
          hs.from_node_id === self ||
          (hs.from_replica_id !== "" && nodeOfReplica(hs.from_replica_id) !== hs.from_node_id)
        ) {
          refuse(
            status.FAILED_PRECONDITION,
            `invalid sender node id ${JSON.stringify(hs.from_node_id)} (replica ${JSON.stringify(hs.from_replica_id)})`,
            fields,
          );
        } else {
          from = toNodeId(hs.from_node_id);
          fromReplica = toNodeId(hs.from_replica_id === "" ? hs.from_node_id : hs.from_replica_id);
          // Response headers tell the sender its handshake was accepted.
          call.sendMetadata(new Metadata());
          log.debug("raft stream accepted", fields);
        }
        return;
      }
      if (frame.frame !== "batch" || frame.batch === undefined || frame.batch === null) {
        refuse(status.INVALID_ARGUMENT, "a frame after the handshake must be a batch", {
          peer: from,
        });
        return;
      }
      let messages: ShardMessage[];
      try {
        const to = frame.batch.to_replica_id === "" ? self : toNodeId(frame.batch.to_replica_id);
        if (nodeOfReplica(to) !== self) throw new Error(`addressed to replica ${to}`);
        messages = decodeBatch(frame.batch, fromReplica ?? from, to);
      } catch (err) {
        refuse(status.INVALID_ARGUMENT, `malformed raft frame: ${String(err)}`, { peer: from });
        return;
      }
      try {
        handler(from, messages);
      } catch (err) {
        log.error("raft frame handler failed", { peer: from, error: String(err) });
      }
    });
    call.on("end", () => finish(null));
    // A cancelled or broken call: nothing can be answered any more.
    call.on("cancelled", () => {
      done = true;
      open.delete(finish);
    });
    call.on("error", () => finish({ code: status.CANCELLED, details: "stream error" }));
  };

  return {
    definition: loadRaftProto().cairn.v1.Raft.service,
    implementation: {
      Stream: stream,
      ProposeMeta(
        call: ServerUnaryCall<MetaProposal__Output, MetaProposalReply>,
        callback: sendUnaryData<MetaProposalReply>,
      ): void {
        const ours = currentId(options.clusterId);
        const theirs = call.request.cluster_id;
        if (theirs !== "" && ours !== "" && theirs !== ours) {
          callback({
            code: status.FAILED_PRECONDITION,
            details: `cluster id mismatch: this node is in cluster ${JSON.stringify(ours)}, the sender in ${JSON.stringify(theirs)}`,
          });
          return;
        }
        const propose = options.proposeMeta;
        if (propose === undefined) {
          callback({ code: status.UNIMPLEMENTED, details: "this node takes no meta proposals" });
          return;
        }
        propose(call.request.command).then(
          () => callback(null, {}),
          (err: unknown) => callback(peerCallError(err)),
        );
      },
      ReadIndex(
        call: ServerUnaryCall<ReadIndexRequest__Output, ReadIndexReply>,
        callback: sendUnaryData<ReadIndexReply>,
      ): void {
        const ours = currentId(options.clusterId);
        const theirs = call.request.cluster_id;
        if (theirs !== "" && ours !== "" && theirs !== ours) {
          callback({ code: status.FAILED_PRECONDITION, details: "cluster id mismatch" });
          return;
        }
        const readIndex = options.readIndex;
        if (readIndex === undefined) {
          callback({ code: status.UNIMPLEMENTED, details: "this node serves no read index" });
          return;
        }
        readIndex(call.request.shard_id).then(
          (index) => callback(null, { index }),
          (err: unknown) => callback(peerCallError(err)),
        );
      },
    },
    endAll(): void {
      for (const finish of [...open]) {
        finish({ code: status.UNAVAILABLE, details: "the node is shutting down" });
      }
    },
  };
}

/** A peer call's failure as a gRPC status: not the leader → UNAVAILABLE with the leader hint. */
function peerCallError(err: unknown): Partial<ServiceError> {
  const metadata = new Metadata();
  if (err instanceof NotLeaderError) {
    if (err.leader !== null) metadata.set(LEADER_HINT_KEY, err.leader);
    return { code: status.UNAVAILABLE, details: err.message, metadata };
  }
  const retryable = err instanceof CairnError && err.retryable;
  return {
    code: retryable ? status.UNAVAILABLE : status.INTERNAL,
    details: err instanceof Error ? err.message : String(err),
    metadata,
  };
}
