/**
 * Forwarding of KV calls to the shard's leader (design.md §5.1: any node accepts any request).
 *
 * A Put, Delete or linearizable Get refused here with NotLeaderError is sent again, unchanged, to
 * the leader's `cairn.v1.KV` service, and the leader's answer (response or status, and trailing
 * metadata) goes back to the caller as is: a response's `cairn-served-by` names the node that
 * served it, not this one (set here to the node forwarded to when its answer lacks it). What
 * must stay true:
 *
 * - **One hop.** A forwarded call carries `cairn-forwarded`; a node that receives one answers
 *   NOT_LEADER itself instead of forwarding again, so two nodes with stale views cannot bounce a
 *   call between them. When the node forwarded to refuses NOT_LEADER naming yet another node
 *   (the group moved: a transfer or an election), this node sends the call again, there:
 *   NOT_LEADER proves nothing was applied. To a node that already refused it, after a pause
 *   (its leadership was being handed over). At most five forwards per call.
 * - **The caller's deadline bounds the forward**, capped at `maxDeadlineMs`; a caller that gives
 *   up (deadline, cancel) cancels the forward.
 * - **Never claim "not applied" unless it is true.** When the leader could not be reached the
 *   request was never sent: the caller gets NOT_LEADER (UNAVAILABLE, retryable, leader hint) and
 *   may retry a write. A forward that broke after it was sent is relayed as the failure it is
 *   (for a write: outcome unknown), with the leader hint added.
 *
 * - **A forward follows the shard's leader.** When this node learns that another node now leads
 *   the shard of a call in flight to the old leader (a paused or cut-off leader may never answer,
 *   and its partners have elected another), the forward is cut after a grace period
 *   (`leaderChangeGraceMs`, the election timeout) and the caller gets CAIRN_ERR_LEADER_CHANGED
 *   naming the new leader, rather than at its deadline: a read retries there; a write's outcome
 *   is unknown, as for any broken forward. The grace lets a leader that handed its group over
 *   answer first: it held the write, and refuses it NOT_LEADER naming the new leader, which this
 *   node then follows (the write lands instead of ending "outcome unknown").
 *
 * In a cluster the forward goes on the node's Raft stream to the leader (`peerCall`:
 * GrpcTransport.call, a RaftFrame.call frame), served there by peer-calls.ts and answered on the
 * leader's stream back; otherwise over the node's own gRPC client (grpc-channel.ts), one channel
 * per leader address. Both know whether the leader can have seen the request at all (`sent`),
 * which is what "not applied" rests on. On the streams, a cancelled forward is not cancelled at
 * the leader (it runs to its end, unheard): a write it took applies, as a write already proposed
 * would anyway.
 *
 * Authority: the caller was checked (authz.ts) by the front end of the node it reached, before
 * its call was dispatched; a forward on the peers' streams is served as the peer's (a node
 * forwards only what it admitted), and one over gRPC carries the caller's bearer token, checked
 * again where it lands.
 *
 * Caveats: one channel per leader address, kept until close (a cluster has few nodes); Scan is
 * not forwarded (it reads every shard this node holds, not one shard's leader).
 */
import type { Metadata } from "@grpc/grpc-js";
import {
  type ServerUnaryCall,
  type ServiceDefinition,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import {
  type CallResult,
  GrpcChannel,
  type Metadata as GrpcChannelMetadata,
  metadataOf,
} from "./grpc-channel.ts";
import { type NodeId, nodeId, NotLeaderError } from "../raft/index.ts";
import { LeaderChangedError, LeaderUnreachableError, toServiceError } from "./errors.ts";

export { LeaderChangedError, LeaderUnreachableError };
import { ERROR_CODE_KEY, FORWARDED_KEY, LEADER_HINT_KEY, SERVED_BY_KEY } from "./wire.ts";
import { CallCut, callDeadline, deadlineClock, IntMap } from "../common/index.ts";
import type { PeerTls } from "../common/peer-tls.ts";

/** A forwarded call's deadline is at most this far away unless RpcServerOptions says otherwise. */
export const DEFAULT_FORWARD_DEADLINE_MS = 10_000;

/**
 * The most times one call is sent on (the first forward and the refusals followed), and the
 * pauses before sending it again to a node that already refused it: a leadership handed over
 * settles within a few round trips (#followRefusal).
 */
const MAX_FORWARDS = 5;
const FOLLOW_PAUSES_MS = [20, 60, 150] as const;

/** ForwardOptions.leaderChangeGraceMs unless given: the default election timeout. */
export const DEFAULT_LEADER_CHANGE_GRACE_MS = 1_000;

export interface ForwardOptions {
  /** This node's id: a refusal naming it is answered here, not forwarded (followRefusal aside). */
  readonly nodeId: string;
  /** The `rpc_addr` of a node, or null when it is not known (then the caller gets the hint). */
  addressOf(nodeId: string): string | null;
  /** Cap of a forwarded call's deadline, in ms (the caller's deadline applies when sooner). */
  readonly maxDeadlineMs?: number;
  /**
   * How long a forward to a node that no longer leads the shard may still be answered by it
   * before it is cut (ms; default DEFAULT_LEADER_CHANGE_GRACE_MS). A leader that handed its
   * group over answers within a round (NOT_LEADER naming the new leader, then followed, or the
   * write's outcome); one paused or cut off never does. 0 cuts at once.
   */
  readonly leaderChangeGraceMs?: number;
  /**
   * Shard leaders as this node learns them, for cutting forwards to a deposed leader: the shard
   * of a request's key, and a subscription to leader changes (returns unsubscribe). Without it a
   * forward to a leader that does not answer waits for its deadline.
   */
  readonly leaders?: {
    shardOf(key: Uint8Array): number;
    watch(listener: (shard: number, leader: string | null) => void): () => void;
    /**
     * What a forwarded write found about its shard's leader: `leader` served it (or a refusal
     * named it), or null when the node tried did not (unreachable, or refused naming none).
     * How a node learns the leaders of shards it holds no replica of (KvStore.leaderElsewhere).
     */
    learned?(shard: number, leader: string | null): void;
  };
  /**
   * Sends a forward over the peer streams instead of a gRPC call of its own (GrpcTransport.call:
   * the request in a RaftFrame.call, the answer in a RaftFrame.reply); resolves as a unary call
   * would, `sent` false only when no byte can have reached `leader`. Without it, forwards go
   * over this node's gRPC client to the leader's `rpc_addr`.
   */
  readonly peerCall?: (
    leader: NodeId,
    path: string,
    request: Buffer,
    options: { readonly deadline: number; readonly cut: CallCut },
  ) => Promise<CallResult>;
  /**
   * Peer TLS (src/common/peer-tls.ts): the forwards that go over this node's gRPC client go over
   * TLS, the leader's certificate checked against its node id. Absent: cleartext.
   */
  readonly tls?: PeerTls;
}

/** A forward in flight to `leader`: cut (answered LeaderChangedError) when another leads. */
interface InFlight {
  /** Its key in the shard's table of forwards in flight. */
  readonly id: number;
  readonly leader: NodeId;
  /** `leader` leads the shard now: cut the forward after the grace period, unless answered. */
  deposed(leader: string): void;
}

/** The KV methods that may be forwarded. */
export type ForwardedMethod = "Put" | "Get" | "Delete";

/** What the caller is to receive: the leader's response and trailer, or a status. */
export type ForwardReply<Res> =
  | { readonly ok: true; readonly response: Res; readonly trailer: Metadata }
  | { readonly ok: false; readonly error: Partial<ServiceError> };

export class Forwarder {
  readonly #options: ForwardOptions;
  readonly #service: ServiceDefinition;
  readonly #maxDeadlineMs: number;
  readonly #graceMs: number;
  readonly #maxMessageBytes: number;
  /** One channel per leader address, reused by every forward to it. */
  readonly #channels = new Map<string, GrpcChannel>();
  /**
   * Forwards in flight, per shard (when `leaders` is given), by id. A shard's table is kept once
   * made (a table per shard at most), and it is an IntMap: a Map's or a Set's churn promotes what
   * its entries reach (src/common/int-map.ts).
   */
  readonly #inFlight = new Map<number, IntMap<InFlight>>();
  #nextForward = 1;
  readonly #unwatch: (() => void) | null;
  #closed = false;

  /** `service` is cairn.v1.KV's definition; messages are bounded by `maxMessageBytes` both ways. */
  constructor(options: ForwardOptions, service: ServiceDefinition, maxMessageBytes: number) {
    this.#options = options;
    this.#service = service;
    this.#maxDeadlineMs = options.maxDeadlineMs ?? DEFAULT_FORWARD_DEADLINE_MS;
    this.#graceMs = options.leaderChangeGraceMs ?? DEFAULT_LEADER_CHANGE_GRACE_MS;
    this.#maxMessageBytes = maxMessageBytes;
    this.#unwatch =
      options.leaders?.watch((shard, leader) => this.#leaderChanged(shard, leader)) ?? null;
  }

  /**
   * Sends `call` to the leader when `err` says another node leads and the call may go there;
   * null when the call must be answered here with `err`: not NotLeaderError, leader unknown or
   * this node, no known address, the call was itself forwarded, or the forwarder is closed.
   * The promise never rejects.
   */
  maybeForward<Req, Res>(
    method: ForwardedMethod,
    err: unknown,
    call: ServerUnaryCall<Req, Res>,
  ): Promise<ForwardReply<Res>> | null {
    if (!(err instanceof NotLeaderError) || err.leader === null) return null;
    return this.forwardTo(method, err.leader, call);
  }

  /**
   * maybeForward for a call this node knows `leader` leads before asking its store (the early
   * route of kv-service): no refusal built only to be read here. Building one was 0.9% of three
   * nodes' main threads under Put c=256 (~8 µs a forwarded Put, in CairnError's constructor).
   */
  forwardTo<Req, Res>(
    method: ForwardedMethod,
    leader: NodeId,
    call: ServerUnaryCall<Req, Res>,
  ): Promise<ForwardReply<Res>> | null {
    if (this.#closed || leader === this.#options.nodeId) return null;
    if (call.metadata.get(FORWARDED_KEY).length > 0) return null;
    const address = this.#options.addressOf(leader);
    if (address === null || address === "") return null;
    return this.#send(method, leader, address, call).then((r) =>
      this.#followRefusal(method, r, leader, call),
    );
  }

  /**
   * The node forwarded to refused the call NOT_LEADER naming another node (its group moved on:
   * a transfer or an election between this node's view and the call's arrival). NOT_LEADER
   * proves the call was not applied, so it is sent again, to the node named; this node sends
   * it, never the refusing one (one hop per forward). A node named that already refused this
   * call (two nodes naming each other: a leadership being handed over, each view a step behind
   * the other, as in a move's transfer) is tried again after a pause (FOLLOW_PAUSES_MS),
   * within the caller's deadline; after MAX_FORWARDS sends the last refusal is the answer (a
   * loop that does not resolve: the caller may retry). Any other answer is final.
   */
  async #followRefusal<Req, Res>(
    method: ForwardedMethod,
    first: ForwardReply<Res>,
    firstTried: NodeId,
    call: ServerUnaryCall<Req, Res>,
  ): Promise<ForwardReply<Res>> {
    let r = first;
    let tried = firstTried;
    const refused = new Set<string>();
    let pauses = 0;
    for (let sent = 1; sent < MAX_FORWARDS; sent++) {
      if (r.ok || this.#closed || call.cancelled) return r;
      const metadata = r.error.metadata;
      if (metadata?.get(ERROR_CODE_KEY)[0] !== "CAIRN_ERR_NOT_LEADER") return r;
      refused.add(tried);
      const hint = metadata.get(LEADER_HINT_KEY)[0];
      // The node named may be this one (it was elected meanwhile): the call comes back to it,
      // marked, and is served here. A result naming the node just tried is final: it could
      // not be reached (the hint is the caller's to retry) or names itself.
      if (typeof hint !== "string" || hint === "" || hint === tried) return r;
      const address = this.#options.addressOf(hint);
      if (address === null || address === "") return r;
      if (refused.has(hint)) {
        const pause = FOLLOW_PAUSES_MS[pauses++];
        const deadline = callDeadline(call);
        if (pause === undefined || deadlineClock() + pause >= deadline) return r;
        await new Promise((resolve) => setTimeout(resolve, pause));
        if (this.#closed || call.cancelled) return r;
      }
      tried = nodeId(hint);
      r = await this.#send(method, tried, address, call);
    }
    return r;
  }

  /** Closes every channel; later refusals are answered here (NOT_LEADER with the hint). */
  close(): void {
    this.#closed = true;
    this.#unwatch?.();
    for (const channel of this.#channels.values()) channel.close();
    this.#channels.clear();
  }

  #send<Req, Res>(
    method: ForwardedMethod,
    leader: NodeId,
    address: string,
    call: ServerUnaryCall<Req, Res>,
  ): Promise<ForwardReply<Res>> {
    const deadline = Math.min(callDeadline(call), deadlineClock() + this.#maxDeadlineMs);
    const def = this.#service[method];
    let request: Buffer;
    try {
      if (def === undefined) throw new Error(`cairn.v1.KV has no method ${method}`);
      request = def.requestSerialize(call.request);
    } catch (err) {
      // A bug (the request did not serialize): answered INTERNAL, never left hanging.
      return Promise.resolve({ ok: false, error: toServiceError(err) });
    }
    const shard = this.#shardOf(call.request);
    // Cut by the caller's cancel or by a leader change, on either path.
    const cut = new CallCut();
    let newLeader: string | null = null;
    let timer: NodeJS.Timeout | null = null;
    const graceMs = this.#graceMs;
    const onCancelled = (): void => cut.cut();
    const inFlight: InFlight = {
      id: this.#nextForward++,
      leader,
      deposed(to) {
        if (newLeader !== null) return; // the first leader named after it decides
        newLeader = to;
        if (graceMs <= 0) cut.cut();
        else timer = setTimeout(() => cut.cut(), graceMs).unref();
      },
    };
    call.once("cancelled", onCancelled);
    if (call.cancelled) cut.cut();
    if (shard !== null) this.#track(shard, inFlight, true);
    // A call sent back to this node (it was elected meanwhile, #followRefusal) goes over gRPC:
    // a node has no peer stream to itself.
    const peerCall = leader === this.#options.nodeId ? undefined : this.#options.peerCall;
    const sent =
      peerCall === undefined
        ? this.#channel(address, leader).unary(def.path, request, {
            deadline,
            metadata: forwardedMetadata(call.metadata),
            cut,
          })
        : peerCall(leader, def.path, request, { deadline, cut });
    return sent.then((result) => {
      if (timer !== null) clearTimeout(timer);
      call.removeListener("cancelled", onCancelled);
      if (shard !== null) this.#track(shard, inFlight, false);
      if (newLeader !== null && result.code === status.CANCELLED) {
        return { ok: false, error: toServiceError(new LeaderChangedError(leader, newLeader)) };
      }
      if (shard !== null) this.#learn(shard, leader, result, method === "Get");
      return reply(result, (bytes) => def.responseDeserialize(bytes) as Res, leader, address);
    });
  }

  /**
   * Tells `leaders.learned` what a forwarded write to `leader` found (only a shard's leader
   * serves a write; a linearizable Get may be served by a follower, so a Get's answer teaches
   * nothing, `get`). A call that could not be sent at all, a Get's too, says `leader` is not
   * the one to ask now.
   */
  #learn(shard: number, leader: NodeId, result: CallResult, get: boolean): void {
    const learned = this.#options.leaders?.learned;
    if (learned === undefined) return;
    if (!result.sent) {
      learned(shard, null);
      return;
    }
    if (get) return;
    if (result.code === status.OK) {
      learned(shard, leader);
      return;
    }
    if (trailer(result, ERROR_CODE_KEY) !== "CAIRN_ERR_NOT_LEADER") return;
    const hint = trailer(result, LEADER_HINT_KEY);
    learned(shard, hint !== undefined && hint !== leader ? hint : null);
  }

  /** The shard of a forwarded request, when leaders are followed. */
  #shardOf(request: unknown): number | null {
    const leaders = this.#options.leaders;
    const key = (request as { key?: unknown }).key;
    if (leaders === undefined || !(key instanceof Uint8Array)) return null;
    return leaders.shardOf(key);
  }

  #track(shard: number, f: InFlight, add: boolean): void {
    let table = this.#inFlight.get(shard);
    if (add) {
      if (table === undefined) this.#inFlight.set(shard, (table = new IntMap()));
      table.set(f.id, f);
    } else {
      table?.delete(f.id);
    }
  }

  #leaderChanged(shard: number, leader: string | null): void {
    if (leader === null) return;
    const table = this.#inFlight.get(shard);
    if (table === undefined || table.size === 0) return;
    for (const f of table.values()) if (f.leader !== leader) f.deposed(leader);
  }

  #channel(address: string, leader: NodeId): GrpcChannel {
    // By node and address: with TLS the channel checks the certificate of the node it dials.
    const key = `${leader}@${address}`;
    let channel = this.#channels.get(key);
    if (channel === undefined) {
      const tls = this.#options.tls;
      channel = new GrpcChannel(address, {
        maxMessageBytes: this.#maxMessageBytes,
        // A leader's node that comes back is reached within a second.
        reconnectBackoffMs: RECONNECT_BACKOFF_MS,
        ...(tls === undefined ? {} : { tls: () => tls.dial(leader) }),
      });
      this.#channels.set(key, channel);
    }
    return channel;
  }
}

/** The forwarding channels' reconnect backoff (see #channel). */
const RECONNECT_BACKOFF_MS = 1_000;

const FORWARDED = [[FORWARDED_KEY, "1"]] as const;

/**
 * The metadata of a forward over gRPC: marked forwarded, and with the caller's `authorization`
 * (its bearer token) so the node served checks the caller's own role again (authz.ts). On the
 * peers' streams nothing is carried: the forwarding node checked its caller before the call
 * was dispatched, and the node served trusts a peer with what it forwards.
 */
function forwardedMetadata(metadata: Metadata): GrpcChannelMetadata {
  const authorization = metadata.get("authorization")[0];
  return typeof authorization === "string"
    ? [...FORWARDED, ["authorization", authorization]]
    : FORWARDED;
}

function reply<Res>(
  r: CallResult,
  decode: (bytes: Buffer) => Res,
  leader: NodeId,
  address: string,
): ForwardReply<Res> {
  if (r.code === status.OK) {
    if (r.message === null) {
      return {
        ok: false,
        error: toServiceError(new Error(`leader ${leader} answered OK without a message`)),
      };
    }
    try {
      const response = decode(r.message);
      // The node that answered named itself (kv-service.ts); one that did not (an older
      // version) is still the one this call reached: a forwarded call is never forwarded again.
      const trailer = metadataOf(r.trailers);
      if (trailer.get(SERVED_BY_KEY).length === 0) trailer.set(SERVED_BY_KEY, leader);
      return { ok: true, response, trailer };
    } catch (err) {
      return { ok: false, error: toServiceError(err) };
    }
  }
  if (!r.sent) {
    // Never sent: nothing was applied, and saying so lets the client retry a write.
    return { ok: false, error: toServiceError(new LeaderUnreachableError(leader, address, r)) };
  }
  const metadata = metadataOf(r.trailers);
  if (metadata.get(LEADER_HINT_KEY).length === 0) metadata.set(LEADER_HINT_KEY, leader);
  return { ok: false, error: { code: r.code, details: r.details, metadata } };
}

/** The first value of trailing metadata `key` in a call's result. */
function trailer(r: CallResult, key: string): string | undefined {
  for (const [k, v] of r.trailers) if (k === key) return v;
  return undefined;
}
