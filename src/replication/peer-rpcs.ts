/**
 * The unary calls this node makes of its peers (cairn.v1.Raft; raft-service.ts answers them):
 * ProposeMeta (to the meta group's leader: a shard's creation, a rejoin), ReadIndex (one call of
 * ReadIndexBatcher's, read-index.ts), ConfirmTerms (a leader's term checks, term-confirm.ts) and
 * ScanShards (a peer's share of a scan). Each goes through the node's own gRPC client to the
 * peer (peer-links.ts), and fails as grpc-js would report it: a ServiceError with the code, the
 * details and the trailers (the leader hint, a CairnError's code).
 */
import { type ServiceError, status } from "@grpc/grpc-js";
import { loadRaftProto } from "../api/proto.ts";
import type { ReadIndexResult__Output } from "../api/generated/cairn/v1/ReadIndexResult.ts";
import { type CallResult, metadataOf } from "../api/grpc-channel.ts";
import { nodeOfReplica } from "../cluster/index.ts";
import { type CallCut, deadlineClock } from "../common/index.ts";
import type { NodeId } from "../raft/index.ts";
import { nodeId as toNodeId } from "../raft/index.ts";
import { type ClusterIdSource, currentClusterId } from "./handshake.ts";
import type { ScanRequest } from "./multi-raft.ts";
import type { PeerLinks } from "./peer-links.ts";
import type { ScanPage } from "./scan-merge.ts";
import type { TermCheck } from "./term-confirm.ts";

export class PeerRpcs {
  readonly #links: PeerLinks;
  readonly #clusterId: ClusterIdSource;
  /** This node's replica id, the voucher of its reads (ReadIndex). */
  readonly #replicaId: NodeId;
  /** Aborted when the transport closes: calls are refused from then on. */
  readonly #closing: AbortSignal;

  constructor(
    links: PeerLinks,
    clusterId: ClusterIdSource,
    replicaId: NodeId,
    closing: AbortSignal,
  ) {
    this.#links = links;
    this.#clusterId = clusterId;
    this.#replicaId = replicaId;
    this.#closing = closing;
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
   * One ReadIndex call to node `node` for `shards`, with this node's replica's term in each
   * (ReadIndexBatcher's ReadIndexCall): resolves with the results, in order.
   */
  async readIndex(
    node: NodeId,
    shards: number[],
    terms: number[],
    timeoutMs: number,
  ): Promise<readonly ReadIndexResult__Output[]> {
    const method = loadRaftProto().cairn.v1.Raft.service.ReadIndex;
    const reply = await this.#unary(
      node,
      method,
      {
        cluster_id: currentClusterId(this.#clusterId),
        shard_ids: shards,
        replica: this.#replicaId,
        terms,
      },
      timeoutMs,
    );
    return reply.results;
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
   * (cairn.v1.Raft ScanShards): the keys of those shards in the range, merged in key order, a
   * page of at most `req.limit` items within `req.maxBytes`. Rejects with the call's error
   * (NotLeaderError's code in the trailers when `to` does not replicate one of them). `cut`
   * cancels the call (its asking scan's client cancelled): the peer sees RST_STREAM, its call
   * cancelled, and stops waiting for its shards' read indexes (raft-service.ts), as a peer of
   * an earlier build stops at the call's deadline.
   */
  async scanShards(
    to: NodeId,
    shards: readonly number[],
    req: ScanRequest,
    timeoutMs: number,
    cut?: CallCut,
  ): Promise<ScanPage> {
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
        max_bytes: req.maxBytes,
      },
      timeoutMs,
      cut,
    );
    const items = reply.items.map((i) => ({
      key: i.key,
      value: i.value,
      version: { index: Number(i.index), term: Number(i.term) },
    }));
    // A peer of an earlier build says nothing of `more`; a full page of its may have been cut.
    return { items, more: reply.more || items.length >= req.limit };
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
    cut?: CallCut,
  ): Promise<Res> {
    if (this.#closing.aborted) return Promise.reject(new Error("the transport is closed"));
    // `to` may name a replica (a leader hint): its node is who answers.
    const node = toNodeId(nodeOfReplica(to));
    const address = this.#links.address(node);
    if (address === null) {
      return Promise.reject(new Error(`the address of ${node} is not known`));
    }
    let bytes: Buffer;
    try {
      bytes = method.requestSerialize(request);
    } catch (err) {
      return Promise.reject(err as Error);
    }
    return this.#links
      .channel(this.#links.link(node), address)
      .unary(method.path, bytes, {
        deadline: deadlineClock() + timeoutMs,
        ...(cut === undefined ? {} : { cut }),
      })
      .then((result) => {
        if (result.code !== status.OK || result.message === null) throw callError(result);
        return method.responseDeserialize(result.message);
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
