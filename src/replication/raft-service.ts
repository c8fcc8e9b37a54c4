/**
 * The receiving end of cairn.v1.Raft (proto/cairn/v1/raft.proto), the peers' service a node
 * serves on `rpc_addr`: the Stream of Raft frames (stream-receiver.ts), InstallSnapshot
 * (snapshot-receiver.ts), and the unary calls a peer makes of this node: ProposeMeta (a member
 * proposing to the meta group led here), ReadIndex (read-index.ts), ConfirmTerms (term-confirm.ts)
 * and ScanShards. Every call is checked against handshake.ts's rules first (the Stream's and a
 * snapshot's handshake; a unary call's `cairn-peer` metadata and cluster id); a refusal is
 * logged at warn, at most 10 lines of each message and code every 10 s (RefusalLog,
 * peer-logger.ts), and counted, every one (`refused`). GrpcTransport is the sending end.
 */
import {
  Metadata,
  type ServerUnaryCall,
  type sendUnaryData,
  type ServiceDefinition,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import { loadRaftProto } from "../api/proto.ts";
import { handMalformed } from "../api/strict-wire.ts";
import type { RawStreamHandler } from "../api/handoff.ts";
import type { RaftHandlers } from "../api/generated/cairn/v1/Raft.ts";
import type { ConfirmTermsReply } from "../api/generated/cairn/v1/ConfirmTermsReply.ts";
import type { ConfirmTermsRequest__Output } from "../api/generated/cairn/v1/ConfirmTermsRequest.ts";
import type { MetaProposal__Output } from "../api/generated/cairn/v1/MetaProposal.ts";
import type { MetaProposalReply } from "../api/generated/cairn/v1/MetaProposalReply.ts";
import type { ReadIndexReply } from "../api/generated/cairn/v1/ReadIndexReply.ts";
import type { ReadIndexRequest__Output } from "../api/generated/cairn/v1/ReadIndexRequest.ts";
import type { ScanShardsReply } from "../api/generated/cairn/v1/ScanShardsReply.ts";
import type { ScanShardsRequest__Output } from "../api/generated/cairn/v1/ScanShardsRequest.ts";
import { ERROR_CODE_KEY, LEADER_HINT_KEY, PEER_KEY } from "../api/wire.ts";
import { decodeMetaCommand } from "../cluster/index.ts";
import { callDeadline } from "../common/deadline-clock.ts";
import { CairnError } from "../common/errors.ts";
import { type NodeId, NotLeaderError, nodeId as toNodeId } from "../raft/index.ts";
import {
  type ClusterIdSource,
  currentClusterId,
  type PeerCheck,
  type PeerMembership,
  peerRefusal,
  type PeerRefusalKind,
} from "./handshake.ts";
import type { ScanRequest, ShardMessage } from "./multi-raft.ts";
import { type LogBound, type PeerLogger, RefusalLog, silentLogger } from "./peer-logger.ts";
import { MAX_READ_INDEX_SHARDS, readIndexResults } from "./read-index.ts";
import type { ClientCall } from "./request-errors.ts";
import { clearSnapshotDir, type SnapshotDisk } from "./snapshot-file.ts";
import { snapshotReceiver } from "./snapshot-receiver.ts";
import {
  SNAPSHOT_MIN_PROGRESS_BYTES,
  SNAPSHOT_PROGRESS_WINDOW_MS,
  type SnapshotMetrics,
} from "./snapshot-transfer.ts";
import type { ScanPage } from "./scan-merge.ts";
import {
  type EndCall,
  type ForwardedCalls,
  grpcStream,
  streamReceiver,
} from "./stream-receiver.ts";
import type { ReadVoucher, TermCheck } from "./term-confirm.ts";

const MIB = 1024 * 1024;

/**
 * Options the receiving gRPC server needs. A frame carries one round's messages for the peer:
 * appends of at most 1 MiB each, past that only a single entry, whose largest is a Put of
 * `limits.max_value_bytes` (at most 64 MiB) and its key; 128 MiB leaves room for the rest of the
 * round. Snapshots go in chunks of their own (InstallSnapshot), not in frames.
 */
export const RAFT_SERVER_OPTIONS = {
  "grpc.max_receive_message_length": 128 * MIB,
} as const;

/**
 * Whether `command` is node `from`'s own request to join (design.md §5.2): the one call taken
 * from a node that is not a member yet. The meta group decides whether it is admitted.
 */
function isOwnJoin(command: Uint8Array, from: unknown): boolean {
  try {
    const cmd = decodeMetaCommand(command);
    return cmd.op === "join" && typeof from === "string" && cmd.member.id === from;
  } catch {
    return false;
  }
}

/** The one unary peer call a member that does not know its cluster id makes (its rejoin). */
const PROPOSE_META = "/cairn.v1.Raft/ProposeMeta";

/**
 * The largest meta command a ProposeMeta call may carry. Its JSON is parsed for any caller (is
 * it a node's own join? isOwnJoin) before the caller is checked, on the main thread, at ~20
 * times its size (8 MiB of `{},`: +171 MiB of heap, 0.6 s), and the peers' unary calls take
 * 128 MiB. A peer's largest honest command (a join, a move naming 16 nodes) is under 1 KiB.
 */
const MAX_META_COMMAND_BYTES = 64 * 1024;

/** Checks one ConfirmTerms call may carry (a leader sends one per shard, term and replica). */
const MAX_TERM_CHECKS = 65_536;
/**
 * The most bytes of keys and values a ScanShards reply carries (scan-merge.ts counts them),
 * well inside the 64 MiB the peers' unary calls receive (peer-links.ts).
 */
const PEER_SCAN_MAX_BYTES = 16 * MIB;

/**
 * Snapshots a node (or shard worker) receives at once (snapshot-receiver.ts): a peer sends one at
 * a time to each other node, so a cluster of up to 33 nodes all sending to one stays under it;
 * past it, a sender's group tries again later.
 */
export const MAX_SNAPSHOT_RECEIVES = 32;

export interface RaftServiceOptions {
  readonly clusterId: ClusterIdSource;
  /**
   * Proposes a meta command (encodeMetaCommand bytes) to the meta group here and resolves once
   * it is applied; rejects with NotLeaderError when this node does not lead it. `from` is the
   * caller's `cairn-peer` ("" if none). Without it, ProposeMeta answers UNIMPLEMENTED.
   */
  readonly proposeMeta?: (command: Uint8Array, from: string) => Promise<void>;
  /**
   * Confirms this node's leadership of a shard and answers a follower's read index
   * (MultiRaft.readIndexAsLeader), waiting until `deadline` at most (on deadlineClock()). Without
   * it, ReadIndex answers UNIMPLEMENTED.
   */
  readonly readIndex?: (
    shard: number,
    voucher: ReadVoucher | undefined,
    deadline: number,
  ) => Promise<number>;
  /**
   * A peer leader's term checks, answered at once (MultiRaft.confirmTerms). Without it,
   * ConfirmTerms answers UNIMPLEMENTED.
   */
  readonly confirmTerms?: (checks: readonly TermCheck[]) => boolean[];
  /**
   * A peer's share of a scan: the keys of `shards` (each replicated here) in the range, merged,
   * a page of at most `req.limit` items within `req.maxBytes` (MultiRaft.scanShards), its read
   * barriers waited for until `deadline` at most (the call's, on deadlineClock(): the asking
   * scan's client's, or the asker's request timeout) or until `call` is cancelled. Without it,
   * ScanShards answers UNIMPLEMENTED.
   */
  readonly scanShards?: (
    shards: readonly number[],
    req: ScanRequest,
    deadline: number,
    call: ClientCall,
  ) => Promise<ScanPage>;
  /**
   * KV calls forwarded over the streams (RaftFrame.call and .reply; src/api/forward.ts):
   * `serve` runs a call peer `from` sent, and answers it on this node's own stream to `from`
   * (GrpcTransport.reply); `replied` takes the answer to a call this node sent `from`
   * (GrpcTransport.receiveReply). Without it both are dropped: the sender fails its calls at
   * their deadlines.
   */
  readonly calls?: ForwardedCalls;
  /**
   * A peer's stream was accepted: the peer is up now, whatever this node's own stream to it
   * last met (GrpcTransport.heardFrom ends that stream's backoff, so that the answers to the
   * calls the peer forwards here, which go back on that stream, are not dropped).
   */
  readonly connected?: (from: NodeId) => void;
  /** This node: streams addressed to another node are refused. */
  readonly nodeId: string;
  /**
   * What this node's meta state says of `node` (PeerCheck.membership): once the cluster id is
   * known, only members' calls are taken (PERMISSION_DENIED otherwise), and those of a node not
   * known here that names this cluster (a member that joined since).
   */
  readonly membership?: (node: string) => PeerMembership;
  /** A peer's call or stream was refused (handshake.ts), by kind: for a counter. */
  readonly refused?: (kind: PeerRefusalKind) => void;
  readonly logger?: PeerLogger;
  /**
   * The refusals' WARN lines (a stream, a call, a snapshot refused): at most 10 of each message
   * and code every 10 s by default (RefusalLog); every refusal is still counted (`refused`, the
   * snapshot metrics).
   */
  readonly refusalLog?: LogBound;
  /**
   * Where incoming snapshots are written as they arrive (a directory of the node's own, emptied
   * here: what a previous run left is never read), then read back as a stream when the follower
   * installs them (snapshot-file.ts). Without it (tests of the service) they are assembled in
   * memory.
   */
  readonly snapshotDir?: string;
  /**
   * The disk `snapshotDir` is on, when the node keeps a reserve of it free
   * (`storage.min_free_bytes`: DiskReserve): a snapshot whose file and the tables its install
   * builds would take the reserve is refused (RESOURCE_EXHAUSTED), before the disk is full.
   */
  readonly snapshotDisk?: SnapshotDisk;
  /**
   * Larger snapshots are refused (RESOURCE_EXHAUSTED). Default: none with `snapshotDir` (the
   * disk is the limit), else 4 GiB (held in memory).
   */
  readonly maxSnapshotBytes?: number;
  /**
   * A snapshot call that brings fewer than `snapshotMinProgressBytes` of data in this long fails
   * (DEADLINE_EXCEEDED), so that neither a sender gone without a word nor a caller that trickles
   * holds its partial snapshot and its receive slot here (ms; snapshot-receiver.ts). Default
   * 60 s (SNAPSHOT_PROGRESS_WINDOW_MS).
   */
  readonly snapshotProgressWindowMs?: number;
  /** See `snapshotProgressWindowMs`. Default 1 MiB (SNAPSHOT_MIN_PROGRESS_BYTES). */
  readonly snapshotMinProgressBytes?: number;
  /** Snapshots received at once, past their header (more: RESOURCE_EXHAUSTED). Default 32. */
  readonly maxSnapshotReceives?: number;
  readonly metrics?: SnapshotMetrics;
}

export interface RaftService {
  /** cairn.v1.Raft: `server.addService(service.definition, service.implementation)`. */
  readonly definition: ServiceDefinition;
  readonly implementation: RaftHandlers;
  /** Stream's receiving end for a front end that serves it directly (MethodTable.addRawStream). */
  readonly rawStream: { readonly path: string; readonly handler: RawStreamHandler };
  /**
   * Ends every open stream and snapshot call (UNAVAILABLE): the senders back off and reconnect
   * elsewhere/later.
   */
  endAll(): void;
}

/**
 * The receiving end of cairn.v1.Raft: checks each stream's handshake, then hands every frame's
 * messages to `handler` with the sender's node id (MultiRaft.receive fits); hands it each
 * snapshot of an InstallSnapshot call the same way, once the call brought it whole and verified.
 */
export function createRaftService(
  handler: (from: string, messages: ShardMessage[]) => void,
  options: RaftServiceOptions,
): RaftService {
  const log = options.logger ?? silentLogger;
  // Anything that reaches the peer port can be refused at will: one bound for the service's lines.
  const refusals = new RefusalLog(log, options.refusalLog);
  const self = toNodeId(options.nodeId);
  const open = new Set<EndCall>();
  if (options.snapshotDir !== undefined) clearSnapshotDir(options.snapshotDir);

  /** What a peer's call is checked against, as this node knows it now. */
  const peerCheck = (): PeerCheck => ({
    clusterId: currentClusterId(options.clusterId),
    self,
    ...(options.membership === undefined ? {} : { membership: options.membership }),
  });

  /**
   * Why a peer's unary call is refused before it is served: its sender (`cairn-peer`) and the
   * cluster id it names do not pass peerRefusal (every unary call but ProposeMeta needs the id:
   * only a node with shards makes them; a member rejoining without its data proposes), or this
   * node does not offer the service (`serve` not given; `missing` says what it does not do).
   * Null when it may be served.
   */
  const unaryRefusal = (
    call: ServerUnaryCall<unknown, unknown>,
    theirs: string,
    serve: unknown,
    missing: string,
    admitsNonMember = false,
  ): Partial<ServiceError> | null => {
    const [from] = call.metadata.get(PEER_KEY);
    const sender = typeof from === "string" ? from : "";
    const check = peerCheck();
    const refusal = peerRefusal(
      sender,
      theirs,
      admitsNonMember ? { clusterId: check.clusterId, self: check.self } : check,
      call.getPath() !== PROPOSE_META,
    );
    if (refusal !== null) {
      options.refused?.(refusal.kind);
      refusals.warn("raft call refused", {
        peer: sender,
        peer_addr: call.getPeer(),
        method: call.getPath(),
        code: status[refusal.code],
        details: refusal.reason,
      });
      return { code: refusal.code, details: refusal.reason };
    }
    if (serve === undefined) return { code: status.UNIMPLEMENTED, details: `this node ${missing}` };
    return null;
  };

  const receiveStream = streamReceiver(handler, {
    self,
    peerCheck,
    refused: options.refused,
    calls: options.calls,
    connected: options.connected,
    log,
    refusals,
    open,
    metrics: options.metrics,
  });

  const definition = loadRaftProto().cairn.v1.Raft.service;
  return {
    // Stream's frames reach the handler as bytes: frame-decode.ts decodes them.
    // A snapshot chunk that does not decode reaches snapshotReceiver, which refuses it as the
    // peer's mistake (grpc-js would answer its decoder's throw INTERNAL).
    definition: {
      ...definition,
      Stream: { ...definition.Stream, requestDeserialize: (frame: Buffer) => frame },
      InstallSnapshot: handMalformed(definition.InstallSnapshot),
    },
    rawStream: { path: definition.Stream.path, handler: receiveStream },
    implementation: {
      Stream: grpcStream(receiveStream),
      InstallSnapshot: snapshotReceiver(handler, {
        peerCheck,
        refused: options.refused,
        maxBytes:
          options.maxSnapshotBytes ??
          (options.snapshotDir === undefined ? 4 * 1024 * MIB : Number.MAX_SAFE_INTEGER),
        dir: options.snapshotDir,
        disk: options.snapshotDisk,
        progressWindowMs: options.snapshotProgressWindowMs ?? SNAPSHOT_PROGRESS_WINDOW_MS,
        minProgressBytes: options.snapshotMinProgressBytes ?? SNAPSHOT_MIN_PROGRESS_BYTES,
        maxReceives: options.maxSnapshotReceives ?? MAX_SNAPSHOT_RECEIVES,
        metrics: options.metrics,
        log,
        refusals,
        open,
      }),
      ProposeMeta(
        call: ServerUnaryCall<MetaProposal__Output, MetaProposalReply>,
        callback: sendUnaryData<MetaProposalReply>,
      ): void {
        const command = call.request.command;
        if (command.length > MAX_META_COMMAND_BYTES) {
          callback({
            code: status.INVALID_ARGUMENT,
            details: `a meta command of ${command.length} bytes; at most ${MAX_META_COMMAND_BYTES}`,
          });
          return;
        }
        const propose = options.proposeMeta;
        const [from] = call.metadata.get(PEER_KEY);
        const refusal = unaryRefusal(
          call,
          call.request.cluster_id,
          propose,
          "takes no meta proposals",
          isOwnJoin(call.request.command, from),
        );
        if (refusal !== null || propose === undefined) {
          callback(refusal);
          return;
        }
        propose(call.request.command, typeof from === "string" ? from : "").then(
          () => callback(null, {}),
          (err: unknown) => callback(peerCallError(err)),
        );
      },
      ReadIndex(
        call: ServerUnaryCall<ReadIndexRequest__Output, ReadIndexReply>,
        callback: sendUnaryData<ReadIndexReply>,
      ): void {
        const readIndex = options.readIndex;
        const refusal = unaryRefusal(
          call,
          call.request.cluster_id,
          readIndex,
          "serves no read index",
        );
        if (refusal !== null || readIndex === undefined) {
          callback(refusal);
          return;
        }
        const shards = call.request.shard_ids;
        if (shards.length > MAX_READ_INDEX_SHARDS) {
          callback({
            code: status.INVALID_ARGUMENT,
            details: `${shards.length} shards in one ReadIndex call; at most ${MAX_READ_INDEX_SHARDS}`,
          });
          return;
        }
        void readIndexResults(readIndex, call.request).then((results) =>
          callback(null, { results }),
        );
      },
      ConfirmTerms(
        call: ServerUnaryCall<ConfirmTermsRequest__Output, ConfirmTermsReply>,
        callback: sendUnaryData<ConfirmTermsReply>,
      ): void {
        const r = call.request;
        const confirm = options.confirmTerms;
        const refusal = unaryRefusal(call, r.cluster_id, confirm, "confirms no terms");
        if (refusal !== null || confirm === undefined) {
          callback(refusal);
          return;
        }
        const n = r.shard_ids.length;
        if (r.terms.length !== n || r.replicas.length !== n || n > MAX_TERM_CHECKS) {
          callback({
            code: status.INVALID_ARGUMENT,
            details: `term checks: ${n} shards, ${r.terms.length} terms, ${r.replicas.length} replicas (equal, at most ${MAX_TERM_CHECKS})`,
          });
          return;
        }
        const checks: TermCheck[] = [];
        for (let i = 0; i < n; i++) {
          checks.push({
            shard: r.shard_ids[i] as number,
            term: r.terms[i] as number,
            replica: r.replicas[i] as string,
          });
        }
        callback(null, { confirmed: confirm(checks) });
      },
      ScanShards(
        call: ServerUnaryCall<ScanShardsRequest__Output, ScanShardsReply>,
        callback: sendUnaryData<ScanShardsReply>,
      ): void {
        const r = call.request;
        const scan = options.scanShards;
        const refusal = unaryRefusal(call, r.cluster_id, scan, "serves no scans for peers");
        if (refusal !== null || scan === undefined) {
          callback(refusal);
          return;
        }
        const shardsProblem = scanShardsProblem(r.shard_ids);
        if (shardsProblem !== null) {
          callback({ code: status.INVALID_ARGUMENT, details: shardsProblem });
          return;
        }
        const maxBytes = Number(r.max_bytes);
        // An asker of an earlier build (no max_bytes) pages by count only.
        const countOnly = !(maxBytes > 0);
        const req: ScanRequest = {
          start: r.start,
          end: r.has_end ? r.end : null,
          limit: r.limit,
          // A reply fits the peers' unary message limit, whatever the asker asked, and is held
          // whole in memory first: bounded for a count-only asker too, whose limit is whatever
          // its call says (a forged one's, any).
          maxBytes: countOnly ? PEER_SCAN_MAX_BYTES : Math.min(maxBytes, PEER_SCAN_MAX_BYTES),
          linearizable: r.linearizable,
        };
        // Its asker's call ended (it timed out, or its connection closed): no wait goes on.
        scan(r.shard_ids, req, callDeadline(call), call).then(
          ({ items, more }) =>
            // A count-only asker reads no `more`: a page the bytes cut before its limit would
            // read as the range's end, keys missing from its scan. Refused instead.
            countOnly && more && items.length < r.limit
              ? callback({
                  code: status.RESOURCE_EXHAUSTED,
                  details: `a scan's share asked by count only (a peer of an earlier build, which reads no \`more\`) holds more than ${PEER_SCAN_MAX_BYTES / MIB} MiB before its limit of ${r.limit} keys: scan with a smaller limit, or upgrade the asking node`,
                })
              : callback(null, {
                  more,
                  items: items.map((i) => ({
                    key: i.key,
                    value: i.value,
                    index: i.version.index,
                    term: i.version.term,
                  })),
                }),
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

/**
 * Why a ScanShards call's shards are refused, or null. An honest asker names each shard it asks
 * of this node once (Scanner groups a scan's shards by node), and a cluster has at most
 * MAX_READ_INDEX_SHARDS. Each id named is opened, pinned at a snapshot and read as a cursor of
 * its own: a forged call that named a million copies of one shard (~1 MB on the wire) made a
 * million of each.
 */
function scanShardsProblem(ids: readonly number[]): string | null {
  if (ids.length > MAX_READ_INDEX_SHARDS)
    return `${ids.length} shards in one ScanShards call; at most ${MAX_READ_INDEX_SHARDS}`;
  const seen = new Set<number>();
  for (const id of ids) {
    if (seen.has(id)) return `shard ${id} twice in one ScanShards call`;
    seen.add(id);
  }
  return null;
}

/**
 * A peer call's failure as a gRPC status: not the leader → UNAVAILABLE with the leader hint; a
 * CairnError's code in the trailers (`cairn-error-code`), as the client API sends it.
 */
function peerCallError(err: unknown): Partial<ServiceError> {
  const metadata = new Metadata();
  if (err instanceof NotLeaderError) {
    if (err.leader !== null) metadata.set(LEADER_HINT_KEY, err.leader);
    return { code: status.UNAVAILABLE, details: err.message, metadata };
  }
  const retryable = err instanceof CairnError && err.retryable;
  if (err instanceof CairnError) metadata.set(ERROR_CODE_KEY, err.code);
  // A request this node refuses as malformed is the caller's mistake, not a fault here.
  const invalid = err instanceof CairnError && err.code === "CAIRN_ERR_INVALID_ARGUMENT";
  return {
    code: retryable ? status.UNAVAILABLE : invalid ? status.INVALID_ARGUMENT : status.INTERNAL,
    details: err instanceof Error ? err.message : String(err),
    metadata,
  };
}
