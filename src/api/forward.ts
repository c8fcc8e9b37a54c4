/**
 * Forwarding of KV calls to the shard's leader (design.md §5.1: any node accepts any request).
 *
 * A Put, Delete or linearizable Get refused here with NotLeaderError is sent again, unchanged, to
 * the leader's `cairn.v1.KV` service, and the leader's answer (response or status, and trailing
 * metadata) goes back to the caller as is. What must stay true:
 *
 * - **One hop.** A forwarded call carries `cairn-forwarded`; a node that receives one answers
 *   NOT_LEADER itself instead of forwarding again, so two nodes with stale views cannot bounce a
 *   call between them.
 * - **The caller's deadline bounds the forward**, capped at `maxDeadlineMs`; a caller that gives
 *   up (deadline, cancel) cancels the forward.
 * - **Never claim "not applied" unless it is true.** When the leader could not be reached the
 *   request was never sent: the caller gets NOT_LEADER (UNAVAILABLE, retryable, leader hint) and
 *   may retry a write. A forward that broke after it was sent is relayed as the failure it is
 *   (for a write: outcome unknown), with the leader hint added.
 *
 * - **A forward follows the shard's leader.** When this node learns that another node now leads
 *   the shard of a call in flight to the old leader (a paused or cut-off leader may never answer,
 *   and its partners have elected another), the forward is cut and the caller gets
 *   CAIRN_ERR_LEADER_CHANGED naming the new leader, at once rather than at its deadline: a read
 *   retries there; a write's outcome is unknown, as for any broken forward.
 *
 * Caveats: one channel per leader address, kept until close (a cluster has few nodes); Scan is
 * not forwarded (it reads every shard this node holds, not one shard's leader).
 */
import {
  Client,
  type ClientUnaryCall,
  credentials,
  Metadata,
  type ServerUnaryCall,
  type ServiceDefinition,
  type ServiceError,
  status,
  type StatusObject,
} from "@grpc/grpc-js";
import { type NodeId, NotLeaderError } from "../raft/index.ts";
import { LeaderChangedError, LeaderUnreachableError, toServiceError } from "./errors.ts";

export { LeaderChangedError, LeaderUnreachableError };
import { CONNECT_FAILURE_DETAILS, ERROR_CODE_KEY, FORWARDED_KEY, LEADER_HINT_KEY } from "./wire.ts";

/** A forwarded call's deadline is at most this far away unless RpcServerOptions says otherwise. */
export const DEFAULT_FORWARD_DEADLINE_MS = 10_000;

export interface ForwardOptions {
  /** This node's id: a hint naming it is never followed. */
  readonly nodeId: string;
  /** The `rpc_addr` of a node, or null when it is not known (then the caller gets the hint). */
  addressOf(nodeId: string): string | null;
  /** Cap of a forwarded call's deadline, in ms (the caller's deadline applies when sooner). */
  readonly maxDeadlineMs?: number;
  /**
   * Shard leaders as this node learns them, for cutting forwards to a deposed leader: the shard
   * of a request's key, and a subscription to leader changes (returns unsubscribe). Without it a
   * forward to a leader that does not answer waits for its deadline.
   */
  readonly leaders?: {
    shardOf(key: Uint8Array): number;
    watch(listener: (shard: number, leader: string | null) => void): () => void;
  };
}

/** A forward in flight to `leader`: cut (answered LeaderChangedError) when another leads. */
interface InFlight {
  readonly leader: NodeId;
  abandon(leader: string): void;
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
  readonly #maxMessageBytes: number;
  /** One client (one channel) per leader address, reused by every forward to it. */
  readonly #clients = new Map<string, Client>();
  /** Forwards in flight by shard, when `leaders` is given. */
  readonly #inFlight = new Map<number, Set<InFlight>>();
  readonly #unwatch: (() => void) | null;
  #closed = false;

  /** `service` is cairn.v1.KV's definition; messages are bounded by `maxMessageBytes` both ways. */
  constructor(options: ForwardOptions, service: ServiceDefinition, maxMessageBytes: number) {
    this.#options = options;
    this.#service = service;
    this.#maxDeadlineMs = options.maxDeadlineMs ?? DEFAULT_FORWARD_DEADLINE_MS;
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
    if (this.#closed || !(err instanceof NotLeaderError) || err.leader === null) return null;
    if (err.leader === this.#options.nodeId) return null;
    if (call.metadata.get(FORWARDED_KEY).length > 0) return null;
    const address = this.#options.addressOf(err.leader);
    if (address === null || address === "") return null;
    return this.#send(method, err.leader, address, call);
  }

  /** Closes every channel; later refusals are answered here (NOT_LEADER with the hint). */
  close(): void {
    this.#closed = true;
    this.#unwatch?.();
    for (const client of this.#clients.values()) client.close();
    this.#clients.clear();
  }

  #send<Req, Res>(
    method: ForwardedMethod,
    leader: NodeId,
    address: string,
    call: ServerUnaryCall<Req, Res>,
  ): Promise<ForwardReply<Res>> {
    const metadata = new Metadata();
    metadata.set(FORWARDED_KEY, "1");
    const deadline = Math.min(deadlineMs(call.getDeadline()), Date.now() + this.#maxDeadlineMs);
    const shard = this.#shardOf(call.request);
    return new Promise((resolve) => {
      let response: Res | undefined;
      let outgoing: ClientUnaryCall | undefined = undefined;
      let newLeader: string | null = null;
      const onCancelled = (): void => outgoing?.cancel();
      const inFlight: InFlight = {
        leader,
        abandon(to) {
          newLeader = to;
          outgoing?.cancel();
        },
      };
      try {
        const def = this.#service[method];
        if (def === undefined) throw new Error(`cairn.v1.KV has no method ${method}`);
        outgoing = this.#client(address).makeUnaryRequest(
          def.path,
          def.requestSerialize,
          def.responseDeserialize,
          call.request,
          metadata,
          { deadline },
          (_err, value?: Res) => {
            response = value;
          },
        );
      } catch (err) {
        // A bug (the request did not serialize): answered INTERNAL, never left hanging.
        resolve({ ok: false, error: toServiceError(err) });
        return;
      }
      call.once("cancelled", onCancelled);
      if (call.cancelled) outgoing.cancel();
      if (shard !== null) this.#track(shard, inFlight, true);
      // grpc-js emits 'status' after the callback, with the trailer; it always comes.
      outgoing.on("status", (s: StatusObject) => {
        call.removeListener("cancelled", onCancelled);
        if (shard !== null) this.#track(shard, inFlight, false);
        if (newLeader !== null && s.code === status.CANCELLED) {
          resolve({ ok: false, error: toServiceError(new LeaderChangedError(leader, newLeader)) });
          return;
        }
        resolve(reply(s, response, leader, address));
      });
    });
  }

  /** The shard of a forwarded request, when leaders are followed. */
  #shardOf(request: unknown): number | null {
    const leaders = this.#options.leaders;
    const key = (request as { key?: unknown }).key;
    if (leaders === undefined || !(key instanceof Uint8Array)) return null;
    return leaders.shardOf(key);
  }

  #track(shard: number, f: InFlight, add: boolean): void {
    let set = this.#inFlight.get(shard);
    if (add) {
      if (set === undefined) this.#inFlight.set(shard, (set = new Set()));
      set.add(f);
    } else if (set !== undefined) {
      set.delete(f);
      if (set.size === 0) this.#inFlight.delete(shard);
    }
  }

  #leaderChanged(shard: number, leader: string | null): void {
    if (leader === null) return;
    const set = this.#inFlight.get(shard);
    if (set === undefined) return;
    for (const f of [...set]) if (f.leader !== leader) f.abandon(leader);
  }

  #client(address: string): Client {
    let client = this.#clients.get(address);
    if (client === undefined) {
      client = new Client(address, credentials.createInsecure(), {
        "grpc.max_receive_message_length": this.#maxMessageBytes,
        "grpc.max_send_message_length": this.#maxMessageBytes,
        // A leader's node that comes back is reached within a second: grpc-js's own backoff
        // grows to 120 s while it is down, and every forward meanwhile fails.
        "grpc.initial_reconnect_backoff_ms": RECONNECT_BACKOFF_MS,
        "grpc.max_reconnect_backoff_ms": RECONNECT_BACKOFF_MS,
      });
      this.#clients.set(address, client);
    }
    return client;
  }
}

/** The forwarding channels' reconnect backoff (see #client). */
const RECONNECT_BACKOFF_MS = 1_000;

function reply<Res>(
  s: StatusObject,
  response: Res | undefined,
  leader: NodeId,
  address: string,
): ForwardReply<Res> {
  if (s.code === status.OK) {
    if (response !== undefined) return { ok: true, response, trailer: s.metadata };
    return {
      ok: false,
      error: toServiceError(new Error(`leader ${leader} answered OK without a message`)),
    };
  }
  const fromCairn = s.metadata.get(ERROR_CODE_KEY).length > 0;
  if (!fromCairn && s.code === status.UNAVAILABLE && CONNECT_FAILURE_DETAILS.test(s.details)) {
    // Never sent: nothing was applied, and saying so lets the client retry a write.
    return { ok: false, error: toServiceError(new LeaderUnreachableError(leader, address, s)) };
  }
  const metadata = s.metadata.clone();
  if (metadata.get(LEADER_HINT_KEY).length === 0) metadata.set(LEADER_HINT_KEY, leader);
  return { ok: false, error: { code: s.code, details: s.details, metadata } };
}

function deadlineMs(d: Date | number): number {
  return typeof d === "number" ? d : d.getTime();
}
