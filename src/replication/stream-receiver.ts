/**
 * The receiving end of a peer's cairn.v1.Raft Stream: the call opens with a handshake frame,
 * checked by handshake.ts's rules as this node knows them at that moment (a refusal ends the
 * call with its status; an acceptance is answered with response headers); every later frame is
 * a batch of Raft messages, handed to the driver with the sender's node id, or a forwarded KV
 * call or its reply, handed to `calls`. A malformed frame, or one of another kind, ends the call
 * INVALID_ARGUMENT (CAIRN_ERR_INVALID_ARGUMENT); the sender's half-close ends it OK. Each
 * refusal is logged at warn, within RefusalLog's bound (peer-logger.ts): a caller makes them at
 * will.
 *
 * Frames are decoded here (frame-decode.ts), straight into Raft messages: no protobuf objects on
 * a replicated write's path. `streamReceiver` serves a call however it arrives: from the node's
 * front end directly (a RawStreamCall, src/api/handoff.ts), or from grpc-js (`grpcStream`, for
 * a stream the I/O threads proxy to the main thread's server).
 */
import {
  Metadata,
  type ServerReadableStream,
  type sendUnaryData,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import { type MetadataPairs, type RawStreamHandler, toMetadata } from "../api/handoff.ts";
import { MALFORMED_REQUEST_CODE } from "../api/strict-wire.ts";
import { ERROR_CODE_KEY, PEER_KEY } from "../api/wire.ts";
import type { RaftStreamAck } from "../api/generated/cairn/v1/RaftStreamAck.ts";
import { nodeOfReplica } from "../cluster/index.ts";
import type { NodeId } from "../raft/index.ts";
import { nodeId as toNodeId } from "../raft/index.ts";
import { type Frame, type PeerCall, type PeerReply } from "./frame-codec.ts";
import { decodeBatchMessages, decodeFrame } from "./frame-decode.ts";
import {
  handshakeRefusal,
  type PeerCheck,
  type PeerRefusalKind,
  senderRefusal,
} from "./handshake.ts";
import type { ShardMessage } from "./multi-raft.ts";
import { type LogFields, type PeerLogger, RefusalLog } from "./peer-logger.ts";
import type { SnapshotMetrics } from "./snapshot-transfer.ts";

const EMPTY_MESSAGE = new Uint8Array(0);
const MALFORMED_TRAILER: MetadataPairs = [[ERROR_CODE_KEY, MALFORMED_REQUEST_CODE]];

/**
 * Where the KV calls forwarded over the streams go (RaftFrame.call and .reply; src/api/forward.ts):
 * `serve` runs a call peer `from` sent, and answers it on this node's own stream to `from`
 * (GrpcTransport.reply); `replied` takes the answer to a call this node sent `from`
 * (GrpcTransport.receiveReply).
 */
export interface ForwardedCalls {
  serve(from: NodeId, call: PeerCall): void;
  replied(from: NodeId, reply: PeerReply): void;
}

/** Ends an open call of the service with `err`, or OK with null (RaftService.endAll). */
export type EndCall = (err: Partial<ServiceError> | null) => void;

export interface StreamReceiverOptions {
  /** This node: streams addressed to another node are refused. */
  readonly self: NodeId;
  /** What a handshake is checked against, as this node knows it now. */
  readonly peerCheck: () => PeerCheck;
  /** A handshake was refused (handshake.ts), by kind: for a counter. */
  readonly refused?: ((kind: PeerRefusalKind) => void) | undefined;
  /** Without it, forwarded calls and replies are dropped. */
  readonly calls?: ForwardedCalls | undefined;
  /** A peer's stream was accepted: the peer is up now (RaftServiceOptions.connected). */
  readonly connected?: ((from: NodeId) => void) | undefined;
  readonly log: PeerLogger;
  /**
   * Where the refusals are logged, bounded (the service's, shared with its other calls).
   * Default: a RefusalLog of `log`'s, of these streams alone.
   */
  readonly refusals?: RefusalLog | undefined;
  /** The calls open now: each is added while open, and ended by the service's endAll(). */
  readonly open: Set<EndCall>;
  /** A snapshot in a frame, dropped, counts as a failed receive (see streamReceiver). */
  readonly metrics?: SnapshotMetrics | undefined;
}

/**
 * The accepted Streams from senders the meta state does not record that are kept; past it, the
 * oldest is ended. Such a sender's handshake is taken when it names the cluster's id (a member
 * that joined while this node's meta state was behind: handshake.ts), which Meta.WatchCluster
 * gives anyone, and once taken a Stream counts against none of the clients' bounds: one
 * connection held 1,000 of them (`rpc.max_concurrent_streams`), each under a made-up node id,
 * and every connection as many. The honest ones are a few members joining at once
 * (`cluster.max_joining`), far under it; the oldest goes first, so a flood must go on opening
 * streams to keep one out, and an honest sender ended opens another after its backoff (1 s).
 */
export const UNKNOWN_PEER_STREAMS = 64;

/**
 * The accepted Streams of one receiving service, by sender node: one each. A sender opens a new
 * Stream only once its last one ended on its side (peer-links.ts), so a newer one means the
 * older is dead, and it is ended here (a half-open connection would have held it until its
 * keepalive failed); a caller posing as a member can hold no more than one under its name.
 * Those of senders the meta state does not record are UNKNOWN_PEER_STREAMS at most.
 */
export class AcceptedStreams {
  readonly #bySender = new Map<string, EndCall>();
  /** The senders of #bySender not recorded as members, oldest first. */
  readonly #unknown = new Set<string>();

  /** Streams accepted and not ended (for tests). */
  get size(): number {
    return this.#bySender.size;
  }

  /**
   * `finish` ends the Stream just accepted from node `from` (`unknown`: not recorded as a
   * member); the one it replaces, and past UNKNOWN_PEER_STREAMS the oldest unknown sender's,
   * end now.
   */
  accept(from: string, unknown: boolean, finish: EndCall): void {
    const older = this.#bySender.get(from);
    this.#bySender.set(from, finish);
    this.#unknown.delete(from);
    older?.({
      code: status.ABORTED,
      details: `a newer stream from node ${from} replaced this one`,
    });
    if (!unknown) return;
    this.#unknown.add(from);
    if (this.#unknown.size <= UNKNOWN_PEER_STREAMS) return;
    const oldest = this.#unknown.values().next().value as string;
    const end = this.#bySender.get(oldest);
    this.#unknown.delete(oldest);
    this.#bySender.delete(oldest);
    end?.({
      code: status.RESOURCE_EXHAUSTED,
      details: `more than ${UNKNOWN_PEER_STREAMS} streams from nodes this node's meta state does not record: the oldest ended`,
    });
  }

  /** The Stream `finish` of node `from` ended (however). */
  ended(from: string, finish: EndCall): void {
    if (this.#bySender.get(from) !== finish) return;
    this.#bySender.delete(from);
    this.#unknown.delete(from);
  }
}

/**
 * One Stream call's receiving end, whatever serves it: hands every batch's messages to `handler`
 * with the sender's node id (MultiRaft.receive fits).
 *
 * But for snapshots: a snapshot comes over InstallSnapshot (GrpcTransport moves each there),
 * whose receiver checks its length, checksum and image, the image at the index its header says
 * (SnapshotAssembler). One in a frame skipped all of that, straight to the driver: a correct
 * sender never sends one, so it is dropped (the rest of its frame delivered), logged as a
 * refused snapshot and counted as a failed receive.
 */
export function streamReceiver(
  handler: (from: string, messages: ShardMessage[]) => void,
  options: StreamReceiverOptions,
): RawStreamHandler {
  const { self, peerCheck, log, open } = options;
  // A caller makes a refusal at will (a stranger, a malformed frame): its lines are bounded.
  const refusals = options.refusals ?? new RefusalLog(log);
  // One accepted Stream a sender, over every call this receiving end serves (the front end's
  // and grpc-js's alike).
  const accepted = new AcceptedStreams();
  return (call) => {
    let from: NodeId | null = null;
    /** The sender's replica id: the `from` of every message it sends. */
    let fromReplica: NodeId | null = null;
    let done = false;
    const finish = (err: Partial<ServiceError> | null, trailer: MetadataPairs | null = null) => {
      if (done) return;
      done = true;
      open.delete(finish);
      if (from !== null) accepted.ended(from, finish);
      // The answer, RaftStreamAck, has no fields: its encoding is empty.
      if (err === null) call.finish(status.OK, "OK", EMPTY_MESSAGE);
      else call.finish(err.code ?? status.UNKNOWN, err.details ?? "", null, trailer);
    };
    open.add(finish);
    const refuse = (code: status, details: string, fields: LogFields): void => {
      refusals.warn("raft stream refused", { ...fields, code: status[code], details });
      // A frame refused as malformed is the sender's mistake, with the code a client's
      // malformed request carries.
      finish({ code, details }, code === status.INVALID_ARGUMENT ? MALFORMED_TRAILER : null);
    };
    const onHandshake = (frame: Frame): void => {
      if (frame.kind !== "handshake") {
        refuse(status.FAILED_PRECONDITION, "the first frame must be a handshake", {
          peer_addr: call.peer,
        });
        return;
      }
      const hs = frame.handshake;
      // Not the cluster id: the log says whom a refusal was for, not what it would have taken.
      const fields = { peer: hs.from_node_id, peer_addr: call.peer, to: hs.to_node_id };
      const check = peerCheck();
      const refusal = senderRefusal(hs.from_node_id, call.sender) ?? handshakeRefusal(hs, check);
      if (refusal !== null) {
        options.refused?.(refusal.kind);
        refuse(refusal.code, refusal.reason, fields);
        return;
      }
      from = toNodeId(hs.from_node_id);
      accepted.accept(from, check.membership?.(from) === "unknown", finish);
      fromReplica = toNodeId(hs.from_replica_id === "" ? hs.from_node_id : hs.from_replica_id);
      // Response headers tell the sender its handshake was accepted.
      call.sendHeaders();
      log.debug("raft stream accepted", fields);
      options.connected?.(from);
    };
    /** `messages` without their snapshots, each logged and counted (see the doc above). */
    const dropSnapshots = (
      messages: readonly ShardMessage[],
      peer: NodeId,
      peerAddr: string,
    ): ShardMessage[] => {
      const kept: ShardMessage[] = [];
      for (const m of messages) {
        if (m.message.type !== "snapshot") {
          kept.push(m);
          continue;
        }
        options.metrics?.failed("receive");
        refusals.warn("raft snapshot refused", {
          peer,
          peer_addr: peerAddr,
          shard_id: m.shard,
          code: status[status.INVALID_ARGUMENT],
          details: "a snapshot in a Stream frame: snapshots come over InstallSnapshot",
        });
      }
      return kept;
    };
    return {
      message(bytes) {
        if (done) return;
        let frame: Frame;
        try {
          frame = decodeFrame(bytes);
        } catch (err) {
          refuse(status.INVALID_ARGUMENT, `malformed raft frame: ${String(err)}`, {
            peer: from ?? "",
            peer_addr: call.peer,
          });
          return;
        }
        if (from === null) {
          onHandshake(frame);
          return;
        }
        if (frame.kind === "call" || frame.kind === "reply") {
          try {
            if (frame.kind === "call") options.calls?.serve(from, frame.call);
            else options.calls?.replied(from, frame.reply);
          } catch (err) {
            log.error("forwarded call handler failed", { peer: from, error: String(err) });
          }
          return;
        }
        if (frame.kind !== "batch") {
          refuse(
            status.INVALID_ARGUMENT,
            "a frame after the handshake must be a batch, a call or a reply",
            { peer: from },
          );
          return;
        }
        let messages: ShardMessage[];
        try {
          const to = frame.toReplicaId === "" ? self : toNodeId(frame.toReplicaId);
          if (nodeOfReplica(to) !== self) throw new Error(`addressed to replica ${to}`);
          messages = decodeBatchMessages(frame.body, fromReplica ?? from, to);
        } catch (err) {
          refuse(status.INVALID_ARGUMENT, `malformed raft frame: ${String(err)}`, { peer: from });
          return;
        }
        if (messages.some((m) => m.message.type === "snapshot")) {
          messages = dropSnapshots(messages, from, call.peer);
          if (messages.length === 0) return;
        }
        try {
          handler(from, messages);
        } catch (err) {
          log.error("raft frame handler failed", { peer: from, error: String(err) });
        }
      },
      end: () => finish(null),
      // A cancelled or broken call: nothing can be answered any more.
      cancelled() {
        done = true;
        open.delete(finish);
        if (from !== null) accepted.ended(from, finish);
      },
    };
  };
}

/** The same receiving end under grpc-js's server (I/O threads proxy the stream to it). */
export function grpcStream(
  receive: RawStreamHandler,
): (
  call: ServerReadableStream<Buffer, RaftStreamAck>,
  callback: sendUnaryData<RaftStreamAck>,
) => void {
  return (call, callback) => {
    let answered = false;
    const sink = receive({
      peer: call.getPeer(),
      sender: String(call.metadata.get(PEER_KEY)[0] ?? ""),
      // Proxied from the front end, which checked the connection's certificate.
      identity: null,
      sendHeaders: () => call.sendMetadata(new Metadata()),
      finish(code, details, _message, trailer) {
        if (answered) return;
        answered = true;
        if (code === status.OK) callback(null, {});
        else callback({ code, details, metadata: toMetadata(trailer ?? null) });
      },
    });
    call.on("data", (frame: Buffer) => sink.message(frame));
    call.on("end", () => sink.end());
    call.on("cancelled", () => {
      answered = true;
      sink.cancelled();
    });
    call.on("error", () => {
      sink.cancelled();
      if (answered) return;
      answered = true;
      callback({ code: status.CANCELLED, details: "stream error" });
    });
  };
}
