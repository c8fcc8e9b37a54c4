/**
 * Shard workers talking to each other (shard-workers.ts). Each worker owns the shards whose id
 * mod N is its index and serves `rpc_addr` itself; a call on a key of another worker's shard is
 * handed to that worker over the MessagePort the two share, and its answer comes back the same
 * way. What one event-loop turn hands a sibling (calls, answers, cluster-view changes) leaves in
 * one message at setImmediate, not one message per call.
 *
 * - `Sibling`: one end of a worker pair's port.
 * - `RoutedStore`: the KV and Admin store a worker's gRPC services use: its own driver for the
 *   shards it owns, the owner otherwise; a scan reads every worker and merges.
 * - `SharedViews`: the cluster view (Meta.WatchCluster) of every worker's shards in each worker.
 */
import { closeSync } from "node:fs";
import type { MessagePort } from "node:worker_threads";
import type { AdminStore, KvStore } from "../api/store.ts";
import {
  ClusterViewPublisher,
  decodeMetaCommand,
  encodeMetaCommand,
  type MemberView,
  type MetaRecord,
  MetaState,
  type ShardView,
} from "../cluster/index.ts";
import { CairnError, deadlineClock, IntMap } from "../common/index.ts";
import { NotLeaderError, nodeId } from "../raft/index.ts";
import { type Admission, type ClusterState, errorCodeOf, type MetaProposer } from "./cluster.ts";
import {
  type ApplyOutcome,
  type ClientCall,
  mergePages,
  type MultiRaft,
  ReadCancelledError,
  ReadPastDeadlineError,
  REQUEST_OVERHEAD_BYTES,
  ScanCall,
  type ScanPage,
  type ScanRequest,
  type ShardInfo,
  ShuttingDownError,
  type SnapshotResult,
  type StoredItem,
  type Version,
} from "../replication/index.ts";

/**
 * What one worker asks another to do with a shard it owns. A client's KV or Admin call carries
 * its `deadline` (KvStore: on deadlineClock(), the same in every thread; absent, none).
 */
export type SiblingCall =
  | {
      readonly op: "put";
      readonly key: Uint8Array;
      readonly value: Uint8Array;
      readonly expected: Version | undefined;
      readonly deadline?: number | undefined;
    }
  | {
      readonly op: "delete";
      readonly key: Uint8Array;
      readonly expected: Version | undefined;
      readonly deadline?: number | undefined;
    }
  | {
      readonly op: "get";
      readonly key: Uint8Array;
      readonly linearizable: boolean;
      readonly deadline?: number | undefined;
    }
  | { readonly op: "scan"; readonly req: ScanRequest; readonly deadline?: number | undefined }
  /** Admin calls, with their client's deadline too. */
  | { readonly op: "snapshot"; readonly shard: number; readonly deadline?: number | undefined }
  | {
      readonly op: "transfer";
      readonly shard: number;
      readonly to: string;
      readonly deadline?: number | undefined;
    }
  /** Cluster mode, to the worker that holds shard 0: propose a meta command (MetaProposer). */
  | {
      readonly op: "propose-meta";
      readonly cmd: Uint8Array;
      readonly timeoutMs: number;
      readonly first: string | null;
    }
  /**
   * Cluster mode, to the worker that holds shard 0: sync the meta state with the meta group's
   * commit (MultiRaft.syncMeta) and answer the version of the state shared after it. A scan's
   * carries its deadline, and its client's cancellation crosses with it (Sibling.call).
   */
  | { readonly op: "sync-meta"; readonly deadline?: number | undefined };

/** The meta state as worker 0 shares it: its records, and a version that grows with each apply. */
export interface SharedMeta {
  readonly version: number;
  readonly records: readonly MetaRecord[];
}

/** What the worker that holds shard 0 serves for the others in a cluster. */
export interface MetaServer {
  readonly proposer: MetaProposer;
  /** The version of the latest meta state applied (and shared at the end of the turn). */
  version(): number;
}

/** An error as it crosses threads: what toServiceError and the metrics read of it. */
export interface WireError {
  readonly code: string | null;
  readonly message: string;
  readonly retryable: boolean;
  readonly leader: string | null;
}

/**
 * A call as it crosses: its id, and whether its client may cancel it (a Get's or Scan's: the
 * owner then serves it with a HandedOverCall, which `Envelope.cancels` cancels).
 */
type PostedCall = SiblingCall & { readonly id: number; readonly cancellable?: true };

interface Envelope {
  readonly calls: readonly PostedCall[];
  /** Calls posted earlier whose clients cancelled them: the owner stops serving them. */
  readonly cancels: readonly number[];
  readonly replies: readonly {
    readonly id: number;
    readonly value?: unknown;
    readonly error?: WireError;
  }[];
  readonly shards: readonly ShardView[];
  readonly members: readonly MemberView[] | null;
  /** Whether the node is its cluster's first seed (ClusterView.first_seed), when it changed. */
  readonly firstSeed: boolean | null;
  /** Connections the sender accepted for the receiver: a descriptor each, and bytes read. */
  readonly connections: readonly { readonly fd: number; readonly rest: Uint8Array | null }[];
  /** The meta state, from the worker that holds shard 0, as of its last apply this turn. */
  readonly meta: SharedMeta | null;
  /**
   * From the worker that holds shard 0: this member was decommissioned in entries the meta
   * state never applied (ClusterState.onDecommissionedUnseen).
   */
  readonly decommissioned: boolean;
  /**
   * From the worker that holds shard 0, when it changed: why this node is not yet a member
   * (the founding, the join: ClusterState.onAdmissionChanged).
   */
  readonly admission: Admission | null;
  /** The sender's own gRPC server on loopback (its streaming calls), once it serves. */
  readonly streamAddress: string | null;
}

/** What a worker does with what a sibling sends it. */
export interface SiblingHandlers {
  /** Runs a call on a shard this worker owns. */
  readonly serve: SiblingServer;
  /**
   * Changes to the sibling's shards in the cluster view, the members list, and whether the node
   * is the first seed (null: unchanged).
   */
  onView(
    shards: readonly ShardView[],
    members: readonly MemberView[] | null,
    firstSeed: boolean | null,
  ): void;
  /** A connection the sibling accepted for this worker (RpcServer.adopt serves it). */
  onConnection(fd: number, rest: Buffer | null): void;
  /** The meta state, as the worker that holds shard 0 applied it. */
  onMeta(meta: SharedMeta): void;
  /** The worker that holds shard 0 learnt this member was decommissioned (Envelope.decommissioned). */
  onDecommissioned(): void;
  /** The worker that holds shard 0 said why this node is not yet a member (Envelope.admission). */
  onAdmission(admission: Admission): void;
  /** The sibling's own gRPC server's address, for the streaming calls aimed at it. */
  onStreamAddress(address: string): void;
}

export function toWireError(err: unknown): WireError {
  if (err instanceof CairnError) {
    return {
      code: err.code,
      message: err.message,
      retryable: err.retryable,
      leader: err instanceof NotLeaderError ? err.leader : null,
    };
  }
  return {
    code: null,
    message: err instanceof Error ? err.message : String(err),
    retryable: false,
    leader: null,
  };
}

/** The error a sibling threw, rebuilt so the API maps it as it would have in that worker. */
export function fromWireError(e: WireError): Error {
  if (e.code === null) return new Error(e.message);
  const err =
    e.code === "CAIRN_ERR_NOT_LEADER"
      ? new NotLeaderError(e.leader === null ? null : nodeId(e.leader))
      : new CairnError(e.code, e.message, { retryable: e.retryable });
  err.message = e.message;
  return err;
}

/**
 * What a worker does with a call a sibling handed it: its own driver serves it; `client` is the
 * asker's client's call as it crosses (HandedOverCall; null for a call no client may cancel).
 */
export type SiblingServer = (call: SiblingCall, client: ClientCall | null) => Promise<unknown>;

/**
 * A sibling's call, on the owner, as the read serving it sees its client's call (ClientCall):
 * cancelled when the asker says its client cancelled (Envelope.cancels), or when the asker's
 * end closes. A read listens once (a scan's shards through ScanCall), so a list will do.
 */
class HandedOverCall implements ClientCall {
  cancelled = false;
  #listeners: (() => void)[] = [];

  once(_event: "cancelled", listener: () => void): this {
    this.#listeners.push(listener);
    return this;
  }

  removeListener(_event: "cancelled", listener: () => void): this {
    this.#listeners = this.#listeners.filter((l) => l !== listener);
    return this;
  }

  cancel(): void {
    if (this.cancelled) return;
    this.cancelled = true;
    const listeners = this.#listeners;
    this.#listeners = [];
    for (const listener of listeners) listener();
  }
}

/**
 * How long past its own bound (the driver's request timeout, or a meta proposal's timeout) a
 * call waits for the sibling's answer. The owner's driver fails its requests at that bound
 * itself, a little late (its expiry scan runs 64 times a timeout), and its answer crosses back
 * in the next turn: with a second more, that answer, which says what happened, comes first
 * whenever the owner's event loop runs at all.
 */
const ANSWER_GRACE_MS = 1_000;

export interface SiblingOptions {
  /**
   * The driver's request timeout (MultiRaftOptions.requestTimeoutMs): what the owner's driver
   * takes at most to answer a call (a meta proposal: its own timeoutMs). A call not answered
   * within it and ANSWER_GRACE_MS fails here (SiblingTimeoutError), or at its client's deadline
   * when that comes first.
   */
  readonly requestTimeoutMs: number;
  /**
   * The bytes of calls this worker may have in the sibling's hands (posted or about to be, and
   * not answered yet, whether or not their clients still wait): the owner's share of
   * `limits.max_pending_bytes`, what its driver admits at once. Absent: no bound.
   */
  readonly maxPendingBytes?: number;
}

/**
 * What a call in a sibling's hands costs: its key and value (a message copies them), and what
 * it costs beyond (REQUEST_OVERHEAD_BYTES, as the driver counts a request).
 */
function callBytes(call: SiblingCall): number {
  switch (call.op) {
    case "put":
      return call.key.byteLength + call.value.byteLength + REQUEST_OVERHEAD_BYTES;
    case "delete":
    case "get":
      return call.key.byteLength + REQUEST_OVERHEAD_BYTES;
    case "propose-meta":
      return call.cmd.byteLength + REQUEST_OVERHEAD_BYTES;
    default:
      return REQUEST_OVERHEAD_BYTES;
  }
}

export class Sibling {
  readonly #port: MessagePort;
  readonly #handlers: SiblingHandlers;
  readonly #requestTimeoutMs: number;
  readonly #maxPendingBytes: number;
  /**
   * The bytes of each call in the sibling's hands by id, until its answer arrives or it is
   * withdrawn before it was posted, and their sum. A call that failed here at its deadline stays
   * counted: it is still in the owner's queue, to be run once its event loop moves again. The
   * clients, told TIMEOUT, send more; without this bound a stuck owner's queue grew with them
   * for as long as it stayed stuck.
   */
  readonly #inHands = new IntMap<number>();
  #inHandsBytes = 0;
  /** Calls in flight by id (an IntMap: see its header for why not a `Map` on this path). */
  readonly #pending = new IntMap<{
    resolve(v: unknown): void;
    reject(e: unknown): void;
    readonly write: boolean;
    /** When the call fails unanswered (performance.now()), and how long that was. */
    readonly deadline: number;
    readonly timeoutMs: number;
    /** That is the client's deadline (SiblingCall.deadline), not the driver's bound. */
    readonly clients: boolean;
  }>();
  /**
   * The timer that fails the calls past their deadline: armed for the earliest deadline of a
   * call in flight (`#expiresAt`), not one timer a call. Most calls are answered long before it
   * fires; it then finds none due and is armed again for the earliest left.
   */
  #expiry: NodeJS.Timeout | null = null;
  #expiresAt = Infinity;
  #nextId = 1;
  /** The calls up to this id have been posted to the sibling (ids are posted in order). */
  #postedThrough = 0;
  #calls: PostedCall[] = [];
  #cancels: number[] = [];
  /**
   * The sibling's cancellable calls this worker serves, by the sibling's id: told when their
   * clients cancel. Each leaves as it is answered or cancelled, all when the sibling's end
   * closes: at most the calls in flight.
   */
  readonly #served = new IntMap<HandedOverCall>();
  #replies: { id: number; value?: unknown; error?: WireError }[] = [];
  #shards: ShardView[] = [];
  #members: readonly MemberView[] | null = null;
  #firstSeed: boolean | null = null;
  #connections: { fd: number; rest: Uint8Array | null }[] = [];
  #meta: SharedMeta | null = null;
  #decommissioned = false;
  #admission: Admission | null = null;
  #streamAddress: string | null = null;
  #scheduled = false;
  #closed = false;

  constructor(port: MessagePort, handlers: SiblingHandlers, options: SiblingOptions) {
    this.#port = port;
    this.#handlers = handlers;
    this.#requestTimeoutMs = options.requestTimeoutMs;
    this.#maxPendingBytes = options.maxPendingBytes ?? Infinity;
    port.on("message", (m: Envelope) => this.#receive(m));
    // The sibling closed its end, or its thread ended: nothing waiting on it will be answered.
    port.on("close", () => this.close());
  }

  /**
   * Asks the sibling to run `call` on a shard it owns. Unanswered within the driver's request
   * timeout (a meta proposal: its own) and ANSWER_GRACE_MS, it fails (SiblingTimeoutError): a
   * sibling whose event loop is stuck never answers, and the calls handed to it would wait for
   * ever, each holding its request's share of the node's budget. A client's call fails at its
   * deadline (SiblingCall.deadline) when that comes first: its client has given up, and a call
   * with a 1 s deadline held its place for 11 s. One already past it is never posted.
   *
   * A read's `client` (its client's call; KvStore) cancelled, the read fails here at once
   * (ReadCancelledError) and the owner's driver stops waiting for it too (Envelope.cancels): it
   * otherwise waited there until the deadline or the driver's 10 s, holding its share of the
   * owner's request budget for a client long gone. One not yet posted is never posted.
   */
  call(call: SiblingCall, client: ClientCall | null = null): Promise<unknown> {
    if (this.#closed) return Promise.reject(new ShuttingDownError());
    if (client?.cancelled === true) return Promise.reject(new ReadCancelledError());
    const write = call.op === "put" || call.op === "delete";
    const bound =
      (call.op === "propose-meta" ? call.timeoutMs : this.#requestTimeoutMs) + ANSWER_GRACE_MS;
    const left =
      "deadline" in call && call.deadline !== undefined
        ? call.deadline - deadlineClock()
        : Infinity;
    if (left <= 0) return Promise.reject(new SiblingTimeoutError(false, 0, true));
    // One call is always let through when none is in the sibling's hands, however large.
    const bytes = callBytes(call);
    if (this.#inHandsBytes > 0 && this.#inHandsBytes + bytes > this.#maxPendingBytes) {
      return Promise.reject(
        new CairnError(
          "CAIRN_ERR_BACKPRESSURE",
          `the shard worker that owns the shard has ${this.#inHandsBytes} bytes of calls unanswered (limit ${this.#maxPendingBytes}); retry later`,
          { retryable: true },
        ),
      );
    }
    const clients = left < bound;
    const timeoutMs = clients ? left : bound;
    const id = this.#nextId++;
    this.#inHands.set(id, bytes);
    this.#inHandsBytes += bytes;
    const deadline = performance.now() + timeoutMs;
    return new Promise((resolve, reject) => {
      if (client === null) {
        this.#pending.set(id, { resolve, reject, write, deadline, timeoutMs, clients });
        this.#calls.push({ ...call, id });
      } else {
        // Listened to until the call settles, whichever way (answer, expiry, close, cancel).
        const onCancel = (): void => this.#cancel(id);
        client.once("cancelled", onCancel);
        this.#pending.set(id, {
          resolve: (v) => {
            client.removeListener("cancelled", onCancel);
            resolve(v);
          },
          reject: (e) => {
            client.removeListener("cancelled", onCancel);
            reject(e);
          },
          write,
          deadline,
          timeoutMs,
          clients,
        });
        this.#calls.push({ ...call, id, cancellable: true });
      }
      this.#schedule();
      if (deadline < this.#expiresAt) this.#armExpiry(deadline);
    });
  }

  /**
   * Call `id`'s client cancelled it: it fails now, and the owner is told to stop serving it,
   * or, not yet posted, it is withdrawn.
   */
  #cancel(id: number): void {
    const waiting = this.#pending.get(id);
    if (waiting === undefined) return;
    this.#pending.delete(id);
    if (id <= this.#postedThrough) {
      this.#cancels.push(id);
      this.#schedule();
    } else {
      this.#calls = this.#calls.filter((c) => c.id !== id);
      this.#answered(id);
    }
    waiting.reject(new ReadCancelledError());
  }

  /** The sibling's calls this worker serves that their clients may yet cancel. */
  get serving(): number {
    return this.#served.size;
  }

  /** The calls waiting for the sibling's answer. */
  get pending(): number {
    return this.#pending.size;
  }

  /** Tells the sibling of a change to one of this worker's shards in the cluster view. */
  shareShard(view: ShardView): void {
    if (this.#closed) return;
    this.#shards.push(view);
    this.#schedule();
  }

  /** Tells the sibling of the members list (the worker that runs membership has it). */
  shareMembers(members: readonly MemberView[]): void {
    if (this.#closed) return;
    this.#members = members;
    this.#schedule();
  }

  /** Tells the sibling whether the node is the first seed (the worker that runs membership knows). */
  shareFirstSeed(firstSeed: boolean): void {
    if (this.#closed) return;
    this.#firstSeed = firstSeed;
    this.#schedule();
  }

  /**
   * Hands the sibling a connection this worker accepted for it: `fd`, a descriptor this worker
   * no longer uses, and the bytes read past the connection's CONNECT. Closed here when the
   * sibling is gone.
   */
  handConnection(fd: number, rest: Buffer | null): void {
    if (this.#closed) {
      closeSync(fd);
      return;
    }
    this.#connections.push({ fd, rest });
    this.#schedule();
  }

  /** Tells the sibling of the meta state (the worker that holds shard 0 applied it). */
  shareMeta(meta: SharedMeta): void {
    if (this.#closed) return;
    this.#meta = meta;
    this.#schedule();
  }

  /** Tells the sibling that this member was decommissioned unseen (Envelope.decommissioned). */
  shareDecommissioned(): void {
    if (this.#closed) return;
    this.#decommissioned = true;
    this.#schedule();
  }

  /** Tells the sibling why this node is not yet a member (Envelope.admission). */
  shareAdmission(admission: Admission): void {
    if (this.#closed) return;
    this.#admission = admission;
    this.#schedule();
  }

  /** Tells the sibling where this worker's own gRPC server serves the streaming calls. */
  shareStreamAddress(address: string): void {
    if (this.#closed) return;
    this.#streamAddress = address;
    this.#schedule();
  }

  /** Fails what still waits on the sibling and stops listening. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#port.close();
    // A write the sibling received may be in its log (and applied, or committed by another
    // replica): its outcome is unknown, as for a proposal its driver abandons. One that never
    // left here, and any read, fails retryably: nothing was applied.
    for (const [id, { reject, write }] of this.#pending.entries()) {
      reject(write && id <= this.#postedThrough ? new SiblingGoneError() : new ShuttingDownError());
    }
    this.#pending.clear();
    this.#inHands.clear();
    this.#inHandsBytes = 0;
    // The sibling's calls served here have nobody to answer: they stop, as at a cancel.
    const served = this.#served.values();
    this.#served.clear();
    for (const call of served) call.cancel();
    if (this.#expiry !== null) clearTimeout(this.#expiry);
    this.#expiry = null;
    for (const c of this.#connections) closeSync(c.fd);
    this.#connections = [];
  }

  #receive(m: Envelope): void {
    const h = this.#handlers;
    if (m.streamAddress !== null) h.onStreamAddress(m.streamAddress);
    if (m.meta !== null) h.onMeta(m.meta);
    if (m.decommissioned) h.onDecommissioned();
    if (m.admission !== null) h.onAdmission(m.admission);
    if (m.shards.length > 0 || m.members !== null || m.firstSeed !== null)
      h.onView(m.shards, m.members, m.firstSeed);
    for (const c of m.connections) {
      h.onConnection(
        c.fd,
        c.rest === null ? null : Buffer.from(c.rest.buffer, c.rest.byteOffset, c.rest.byteLength),
      );
    }
    for (const r of m.replies) {
      this.#answered(r.id);
      const waiting = this.#pending.get(r.id);
      if (waiting === undefined) continue;
      this.#pending.delete(r.id);
      if (r.error === undefined) waiting.resolve(r.value);
      else waiting.reject(fromWireError(r.error));
    }
    for (const call of m.calls) {
      const id = call.id;
      let client: HandedOverCall | null = null;
      if (call.cancellable === true) {
        client = new HandedOverCall();
        this.#served.set(id, client);
      }
      h.serve(call, client).then(
        (value) => {
          if (client !== null) this.#served.delete(id);
          this.#reply({ id, value });
        },
        (err: unknown) => {
          if (client !== null) this.#served.delete(id);
          this.#reply({ id, error: toWireError(err) });
        },
      );
    }
    // After the calls: a cancel never precedes its call (one not posted is withdrawn instead).
    for (const id of m.cancels) {
      const client = this.#served.get(id);
      if (client === undefined) continue; // answered already
      this.#served.delete(id);
      client.cancel();
    }
  }

  /** Call `id` left the sibling's hands (answered, or withdrawn before it was posted). */
  #answered(id: number): void {
    const bytes = this.#inHands.get(id);
    if (bytes === undefined) return;
    this.#inHands.delete(id);
    this.#inHandsBytes -= bytes;
  }

  #armExpiry(at: number): void {
    if (this.#expiry !== null) clearTimeout(this.#expiry);
    this.#expiresAt = at;
    this.#expiry = setTimeout(this.#expire, Math.max(0, at - performance.now()));
    // The port keeps the thread alive while calls wait; this timer alone must not.
    this.#expiry.unref();
  }

  /** Fails the calls past their deadline and arms the timer for the earliest one left. */
  readonly #expire = (): void => {
    this.#expiry = null;
    this.#expiresAt = Infinity;
    if (this.#closed) return;
    const now = performance.now();
    let next = Infinity;
    let unsent = false;
    for (const [id, p] of this.#pending.entries()) {
      if (p.deadline > now) {
        next = Math.min(next, p.deadline);
        continue;
      }
      this.#pending.delete(id);
      // A write the sibling received may be in its log, and be applied yet: its outcome is
      // unknown, as for a proposal past the driver's own deadline. One still here (not yet
      // posted) is withdrawn, so it is never applied, and fails retryably as a read does.
      const sent = id <= this.#postedThrough;
      unsent ||= !sent;
      if (!sent) this.#answered(id);
      p.reject(new SiblingTimeoutError(p.write && sent, p.timeoutMs, p.clients));
    }
    if (unsent) this.#calls = this.#calls.filter((c) => this.#pending.has(c.id));
    if (next !== Infinity) this.#armExpiry(next);
  };

  #reply(reply: { id: number; value?: unknown; error?: WireError }): void {
    if (this.#closed) return;
    this.#replies.push(reply);
    this.#schedule();
  }

  #schedule(): void {
    if (this.#scheduled) return;
    this.#scheduled = true;
    setImmediate(this.#flush);
  }

  readonly #flush = (): void => {
    this.#scheduled = false;
    if (this.#closed) return;
    const envelope: Envelope = {
      calls: this.#calls,
      cancels: this.#cancels,
      replies: this.#replies,
      shards: this.#shards,
      members: this.#members,
      firstSeed: this.#firstSeed,
      connections: this.#connections,
      meta: this.#meta,
      decommissioned: this.#decommissioned,
      admission: this.#admission,
      streamAddress: this.#streamAddress,
    };
    this.#calls = [];
    this.#cancels = [];
    this.#replies = [];
    this.#shards = [];
    this.#members = null;
    this.#firstSeed = null;
    this.#connections = [];
    this.#meta = null;
    this.#decommissioned = false;
    this.#admission = null;
    this.#streamAddress = null;
    this.#postedThrough = this.#nextId - 1;
    this.#port.postMessage(envelope);
  };
}

/**
 * A write handed to the shard worker that owns its shard, which ended (its thread failed, or the
 * node stopped) before it answered: it may be in that worker's log, so its outcome is unknown
 * (CAIRN_ERR_TIMEOUT, as request-errors.ts's ProposalAbandonedError: a retry could apply it twice).
 */
export class SiblingGoneError extends CairnError {
  constructor() {
    super(
      "CAIRN_ERR_TIMEOUT",
      "the shard worker that owns the key's shard ended before it answered; the write's outcome is unknown: it may have been applied",
      { retryable: false },
    );
    this.name = "SiblingGoneError";
  }
}

/**
 * A call handed to the shard worker that owns its shard, which did not answer within the
 * driver's request timeout and a second (its event loop stuck, or too busy to answer), or before
 * the call's own deadline (`clients`): a write it received may be in its log, so the write's
 * outcome is unknown (CAIRN_ERR_TIMEOUT, not retryable, as request-errors.ts's
 * RequestTimeoutError for a write); anything else was not applied, or changes nothing applied
 * twice, and is retried.
 */
export class SiblingTimeoutError extends CairnError {
  constructor(outcomeUnknown: boolean, waitedMs: number, clients = false) {
    const within = clients
      ? `before the call's deadline (${Math.round(waitedMs)} ms)`
      : `within ${Math.round(waitedMs)} ms`;
    super(
      "CAIRN_ERR_TIMEOUT",
      outcomeUnknown
        ? `the shard worker that owns the key's shard did not answer the write ${within}; its outcome is unknown: it may be applied`
        : `the shard worker that owns the shard did not answer ${within}; retry`,
      { retryable: !outcomeUnknown },
    );
    this.name = "SiblingTimeoutError";
  }
}

/**
 * `bytes` in an ArrayBuffer of its own. A message copies a view's whole buffer, and the bytes of
 * a request or of a stored item are usually a view into a larger one (a frame, a block).
 */
function own(bytes: Uint8Array): Uint8Array {
  return bytes.byteOffset === 0 && bytes.byteLength === bytes.buffer.byteLength
    ? bytes
    : new Uint8Array(bytes);
}

function ownItem(item: StoredItem): StoredItem {
  return { ...item, key: own(item.key), value: own(item.value) };
}

/** The shard worker (its index among `workers`) that owns `shard`. */
export function ownerOf(shard: number, workers: number): number {
  return shard % workers;
}

/**
 * Runs a sibling's call on this worker's own driver; `meta` serves the others' meta calls
 * (cluster mode, the worker that holds shard 0).
 */
export function serveSibling(
  local: MultiRaft,
  transfer: (shard: number, to: string) => Promise<string>,
  meta: MetaServer | null,
): SiblingServer {
  return async (call, client) => {
    switch (call.op) {
      case "put":
        return local.put(call.key, call.value, call.expected, call.deadline);
      case "delete":
        return local.delete(call.key, call.expected, call.deadline);
      case "get": {
        // With its client's call as it crossed: the read stops waiting once it is cancelled.
        const item = await local.get(
          call.key,
          call.linearizable,
          call.deadline,
          client ?? undefined,
        );
        return item === null ? null : ownItem(item);
      }
      case "scan": {
        const page = await local.scan(call.req, call.deadline, client ?? undefined);
        const items = page.items.map(ownItem);
        // The shards it left out go with the page: dropped here, a lost shard of this worker's
        // was missing from a scan that skips them without being named.
        return page.skipped === undefined
          ? { items, more: page.more }
          : { items, more: page.more, skipped: [...page.skipped] };
      }
      case "snapshot":
        return local.snapshotShard(call.shard);
      case "transfer":
        return transfer(call.shard, call.to);
      case "propose-meta":
        if (meta === null) throw notMeta();
        return meta.proposer
          .propose(decodeMetaCommand(call.cmd), call.timeoutMs, call.first)
          .catch((err: unknown) => {
            throw withCairnCode(err);
          });
      case "sync-meta":
        if (meta === null) throw notMeta();
        await local.syncMeta(call.deadline ?? Infinity, client);
        return meta.version();
    }
  };
}

/**
 * A meta proposal's error as it may cross to another worker: a refusal by the meta leader on
 * another node is its peer call's error, whose code is in the trailers (errorCodeOf), which
 * toWireError does not read. The asking worker's ClusterState decides by that code (a shard
 * creation placed again from the next state on CAIRN_ERR_INVALID_ARGUMENT, a rejoin's
 * CAIRN_ERR_LOST_STATE); without it, it took every refusal for a failure.
 */
function withCairnCode(err: unknown): unknown {
  if (err instanceof CairnError) return err;
  const code = errorCodeOf(err);
  if (code === null) return err;
  return new CairnError(code, err instanceof Error ? err.message : String(err), {
    retryable: false,
    cause: err,
  });
}

function notMeta(): CairnError {
  return new CairnError("CAIRN_ERR_INTERNAL", "this shard worker does not hold shard 0");
}

/**
 * The meta proposer of a shard worker that does not hold shard 0: its commands go to worker 0,
 * which proposes them through the meta group's leader.
 */
export function siblingProposer(worker0: Sibling): MetaProposer {
  return {
    propose: async (cmd, timeoutMs, first = null) => {
      await worker0.call({ op: "propose-meta", cmd: encodeMetaCommand(cmd), timeoutMs, first });
    },
  };
}

/**
 * The store of one shard worker's gRPC services: the worker's own driver for its shards, the
 * owning sibling for the others (`siblings[i]` is worker i, null for this one).
 */
export class RoutedStore implements KvStore, AdminStore {
  readonly #local: MultiRaft;
  readonly #siblings: readonly (Sibling | null)[];

  constructor(local: MultiRaft, siblings: readonly (Sibling | null)[]) {
    this.#local = local;
    this.#siblings = siblings;
  }

  /** The sibling that owns `shard`; null when this worker does. */
  #owner(shard: number): Sibling | null {
    return this.#siblings[ownerOf(shard, this.#siblings.length)] ?? null;
  }

  put(
    key: Uint8Array,
    value: Uint8Array,
    expected?: Version,
    deadline?: number,
  ): Promise<ApplyOutcome> {
    const owner = this.#owner(this.#local.shardOf(key));
    if (owner === null) return this.#local.put(key, value, expected, deadline);
    return owner.call({
      op: "put",
      key: own(key),
      value: own(value),
      expected,
      deadline,
    }) as Promise<ApplyOutcome>;
  }

  delete(key: Uint8Array, expected?: Version, deadline?: number): Promise<ApplyOutcome> {
    const owner = this.#owner(this.#local.shardOf(key));
    if (owner === null) return this.#local.delete(key, expected, deadline);
    return owner.call({ op: "delete", key: own(key), expected, deadline }) as Promise<ApplyOutcome>;
  }

  /**
   * A read's `call` (KvStore) stops its wait in this worker's driver, or in the owning worker's
   * when it was handed there (Sibling.call).
   */
  get(
    key: Uint8Array,
    linearizable: boolean,
    deadline?: number,
    call?: ClientCall,
  ): Promise<StoredItem | null> {
    const owner = this.#owner(this.#local.shardOf(key));
    if (owner === null) return this.#local.get(key, linearizable, deadline, call);
    return owner.call(
      { op: "get", key: own(key), linearizable, deadline },
      call ?? null,
    ) as Promise<StoredItem | null>;
  }

  /**
   * Every worker's page of keys in the range, merged (scan-merge.ts); each worker's read
   * barriers waited for until `deadline` at most, or until `call` is cancelled (Sibling.call).
   *
   * The first page to fail fails the scan, and cancels the others, here and in their workers:
   * they went on waiting for their shards' read indexes, up to the deadline or the driver's
   * 10 s, each holding its share of its worker's request budget for a scan already answered
   * (and, for a caller with no call to cancel, nothing could stop them).
   */
  async scan(req: ScanRequest, deadline?: number, call?: ClientCall): Promise<ScanPage> {
    // Every worker's share hears the cancellation through one listener on the call (ScanCall),
    // and hears it too when another share fails.
    const shares = new ScanCall(call ?? null);
    try {
      const pages = await Promise.all(
        this.#siblings.map((s) =>
          s === null
            ? this.#local.scan(req, deadline, shares)
            : (s.call({ op: "scan", req, deadline }, shares) as Promise<ScanPage>),
        ),
      );
      return mergePages(pages, req.limit, req.maxBytes);
    } catch (err) {
      shares.cancel();
      throw err;
    }
  }

  snapshotShard(id: number, deadline?: number): Promise<SnapshotResult> {
    const owner = this.#owner(id);
    if (owner === null) return this.#local.snapshotShard(id);
    return owner.call({ op: "snapshot", shard: id, deadline }) as Promise<SnapshotResult>;
  }

  checkShardId(id: number): void {
    this.#local.checkShardId(id);
  }

  /** This worker's shards only: the Admin service asks it through `transfer` for the others. */
  shardInfo(id: number): ShardInfo | null {
    return this.#local.shardInfo(id);
  }

  transferLeader(id: number, to: string): Promise<void> {
    const owner = this.#owner(id);
    if (owner === null) return this.#local.transferLeader(id, to);
    return owner.call({ op: "transfer", shard: id, to }).then(() => undefined);
  }

  /**
   * Admin.TransferLeader on shard `id`, run where it lives: `here` runs it on this worker's
   * driver (the Admin service's single-node checks), a sibling on its own, waited for until the
   * call's `deadline` at most (Sibling.call).
   */
  transfer(
    id: number,
    to: string,
    here: (id: number, to: string) => Promise<string>,
    deadline?: number,
  ): Promise<string> {
    const owner = this.#owner(id);
    if (owner === null) return here(id, to);
    return owner.call({ op: "transfer", shard: id, to, deadline }) as Promise<string>;
  }
}

/**
 * The cluster view of one shard worker, with every worker's shards in it: a change to one of
 * this worker's shards (or to the members, in the worker that runs membership) is passed to
 * every sibling, and theirs are applied here as they arrive.
 */
export class SharedViews extends ClusterViewPublisher {
  #siblings: readonly Sibling[] = [];
  #leaderListeners: ((shard: number, leader: string | null) => void)[] = [];

  /** Tells `listener` of each leader change of a sibling's shard, as it is shared. */
  onShared(listener: (shard: number, leader: string | null) => void): void {
    this.#leaderListeners.push(listener);
  }

  attach(siblings: readonly Sibling[]): void {
    this.#siblings = siblings;
  }

  override setShard(view: ShardView): void {
    super.setShard(view);
    for (const s of this.#siblings) s.shareShard(view);
  }

  override setMembers(members: readonly MemberView[]): void {
    super.setMembers(members);
    for (const s of this.#siblings) s.shareMembers(members);
  }

  /**
   * Only the worker that runs membership learns this node's advertised address, and so whether
   * it is the first seed; every worker's view must say so: another first seed probes this
   * node's view before it founds (ClusterState.bootstrapLoop) on whichever worker its
   * connection lands, and holds back only if it reads that this one is a first seed too.
   */
  override setFirstSeed(firstSeed: boolean): void {
    super.setFirstSeed(firstSeed);
    for (const s of this.#siblings) s.shareFirstSeed(firstSeed);
  }

  /** What a sibling shared: applied here only, never passed on. */
  applyShared(
    shards: readonly ShardView[],
    members: readonly MemberView[] | null,
    firstSeed: boolean | null = null,
  ): void {
    for (const v of shards) {
      super.setShard(v);
      for (const l of this.#leaderListeners) l(v.id, v.leader === "" ? null : v.leader);
    }
    if (members !== null) super.setMembers(members);
    if (firstSeed !== null) super.setFirstSeed(firstSeed);
  }
}

/** How long a worker waits for the meta state a sync named before it gives up (retryably). */
const META_SYNC_TIMEOUT_MS = 10_000;

/**
 * The meta group's state shared between shard workers (cluster mode). Worker 0 holds shard 0:
 * it shares each state it applies, once per event-loop turn (a fill applies many in one), with
 * a version that grows with each apply. The others follow it: their ClusterState applies each
 * state as it arrives, and a linearizable scan first asks worker 0 to sync with the meta group
 * and waits for the state of that version.
 */
export class MetaShare {
  readonly #siblings: readonly (Sibling | null)[];
  /** Worker 0: states applied; the others: the version of the latest state received. */
  #version = 0;
  #toShare: MetaState | null = null;
  #latest: MetaState | null = null;
  #listener: ((state: MetaState) => void) | null = null;
  /** The others: worker 0 said this member was decommissioned unseen, and who hears it. */
  #decommissioned = false;
  #decommissionedListener: (() => void) | null = null;
  /** The others: why this node is not yet a member, as worker 0 last said, and who hears it. */
  #admission: Admission | null = null;
  #admissionListener: ((admission: Admission) => void) | null = null;
  #waiters: { version: number; resolve(): void }[] = [];
  /** `placing` calls waiting: each hears every state received. */
  readonly #placingWatchers = new Set<() => void>();

  constructor(siblings: readonly (Sibling | null)[]) {
    this.#siblings = siblings;
  }

  get version(): number {
    return this.#version;
  }

  /** Worker 0: `state` was applied; the others get it at the end of the turn. */
  share(state: MetaState): void {
    this.#version++;
    if (this.#toShare === null) setImmediate(this.#flush);
    this.#toShare = state;
  }

  readonly #flush = (): void => {
    const state = this.#toShare;
    this.#toShare = null;
    if (state === null) return;
    const meta: SharedMeta = { version: this.#version, records: state.records() };
    for (const s of this.#siblings) s?.shareMeta(meta);
  };

  /** Worker 0: this member was decommissioned in entries no meta state applied says. */
  shareDecommissioned(): void {
    for (const s of this.#siblings) s?.shareDecommissioned();
  }

  /** The others: worker 0 said this member was decommissioned unseen. */
  receivedDecommissioned(): void {
    if (this.#decommissioned) return;
    this.#decommissioned = true;
    this.#decommissionedListener?.();
  }

  /** The others: `listener` hears that worker 0 said so, at once if it has. */
  followDecommissioned(listener: () => void): void {
    this.#decommissionedListener = listener;
    if (this.#decommissioned) listener();
  }

  /** Worker 0: why this node is not yet a member changed (ClusterState.onAdmissionChanged). */
  shareAdmission(admission: Admission): void {
    for (const s of this.#siblings) s?.shareAdmission(admission);
  }

  /** The others: worker 0 said why this node is not yet a member. */
  receivedAdmission(admission: Admission): void {
    this.#admission = admission;
    this.#admissionListener?.(admission);
  }

  /** The others: `listener` hears what worker 0 says of the admission, the latest at once. */
  followAdmission(listener: (admission: Admission) => void): void {
    this.#admissionListener = listener;
    if (this.#admission !== null) listener(this.#admission);
  }

  /** The others: a state worker 0 shared (older ones than the latest are ignored). */
  received(meta: SharedMeta): void {
    if (meta.version <= this.#version) return;
    this.#version = meta.version;
    this.#latest = MetaState.load(meta.records);
    this.#listener?.(this.#latest);
    for (const watcher of [...this.#placingWatchers]) watcher();
    const reached = this.#waiters.filter((w) => w.version <= meta.version);
    if (reached.length === 0) return;
    this.#waiters = this.#waiters.filter((w) => w.version > meta.version);
    for (const w of reached) w.resolve();
  }

  /**
   * The others: the latest state received once one places `shard`, or null if none does within
   * `timeoutMs` (worker 0 shares its state as it opens and replays shard 0, alongside this
   * worker's start).
   */
  placing(shard: number, timeoutMs: number): Promise<MetaState | null> {
    const places = (): boolean => (this.#latest?.nodesOf(shard).length ?? 0) > 0;
    if (places()) return Promise.resolve(this.#latest);
    return new Promise((resolve) => {
      const watcher = (): void => {
        if (!places()) return;
        clearTimeout(timer);
        this.#placingWatchers.delete(watcher);
        resolve(this.#latest);
      };
      const timer = setTimeout(() => {
        this.#placingWatchers.delete(watcher);
        resolve(null);
      }, timeoutMs);
      this.#placingWatchers.add(watcher);
    });
  }

  /** The others: `listener` hears each state received, the latest one at once. */
  follow(listener: (state: MetaState) => void): void {
    this.#listener = listener;
    if (this.#latest !== null) listener(this.#latest);
  }

  /**
   * The others: resolves once the state here is at least what worker 0 applied after syncing
   * with the meta group's commit (MultiRaft.syncMeta there). A scan's sync stops at its
   * `deadline` or once its client's `call` is cancelled, there and in worker 0: it otherwise
   * held worker 0's request budget for its 10 s after the client had gone.
   */
  async sync(deadline = Infinity, call: ClientCall | null = null): Promise<void> {
    const worker0 = this.#siblings[0];
    if (worker0 === null || worker0 === undefined) throw notMeta();
    const version = (await worker0.call({ op: "sync-meta", deadline }, call)) as number;
    if (version <= this.#version) return;
    await this.#reach(version, deadline, call);
  }

  /**
   * Waits for the state of `version`, which worker 0 named after its sync, to arrive here:
   * META_SYNC_TIMEOUT_MS at most, and no longer than the scan's `deadline` (on deadlineClock())
   * or its client's `call`. A fixed 10 s waited past both: a scan sent with a 1 s deadline
   * held its place (and its request's share of the budget in the driver that asked) nine
   * seconds after its client had given up, and one whose client cancelled to the end.
   */
  #reach(version: number, deadline: number, call: ClientCall | null): Promise<void> {
    const started = deadlineClock();
    const left = deadline - started;
    if (left <= 0) return Promise.reject(new ReadPastDeadlineError(0));
    if (call?.cancelled === true) return Promise.reject(new ReadCancelledError());
    const byDeadline = left < META_SYNC_TIMEOUT_MS;
    return new Promise<void>((resolve, reject) => {
      // Whichever way it ends, the waiter leaves the list (a state that never comes does not
      // keep it) and the call's listener goes.
      const settle = (err: Error | null): void => {
        clearTimeout(timer);
        call?.removeListener("cancelled", onCancel);
        this.#waiters = this.#waiters.filter((w) => w !== waiter);
        if (err === null) resolve();
        else reject(err);
      };
      const onCancel = (): void => settle(new ReadCancelledError());
      const waiter = { version, resolve: () => settle(null) };
      this.#waiters.push(waiter);
      call?.once("cancelled", onCancel);
      const timer = setTimeout(
        () =>
          settle(
            byDeadline
              ? new ReadPastDeadlineError(deadlineClock() - started)
              : new CairnError(
                  "CAIRN_ERR_TIMEOUT",
                  `the meta state of shard worker 0 did not reach this one within ${META_SYNC_TIMEOUT_MS} ms`,
                  { retryable: true },
                ),
          ),
        byDeadline ? left : META_SYNC_TIMEOUT_MS,
      );
    });
  }
}

/**
 * A shard worker's ShardCell's `meta` (node.ts): the meta group's state, which worker 0 holds
 * (shard 0 is its). Declared here, not in node.ts, which imports this file.
 */
export interface ShardCellMeta {
  /** The data directory's incarnation, read once for every worker. */
  readonly incarnation: string;
  /** Worker 0: shares the state it applied with the others. */
  share(state: MetaState): void;
  /** The others: `listener` hears every state worker 0 shares (the latest one at once). */
  follow(listener: (state: MetaState) => void): void;
  /** Worker 0: this member was decommissioned in entries no meta state applied says. */
  shareDecommissioned(): void;
  /** The others: `listener` hears that worker 0 said so (at once if it has). */
  followDecommissioned(listener: () => void): void;
  /** Worker 0: why this node is not yet a member changed (ClusterState.onAdmissionChanged). */
  shareAdmission(admission: Admission): void;
  /** The others: `listener` hears why worker 0 says it is not (the latest at once). */
  followAdmission(listener: (admission: Admission) => void): void;
  /** The others: the first state worker 0 shared that places `shard`, within `timeoutMs`. */
  placing(shard: number, timeoutMs: number): Promise<MetaState | null>;
  /** The others: their meta commands go through worker 0. */
  proposer(): MetaProposer;
  /**
   * The others: brings the state here up to the meta group's commit (MultiRaft.syncMeta); a
   * scan's until its deadline or its client's call is cancelled.
   */
  sync(deadline?: number, call?: ClientCall | null): Promise<void>;
}

/**
 * The meta state's side of a shard worker's ShardCell (cluster mode): `share` is the worker's
 * MetaShare, `siblings[0]` worker 0 (null in worker 0 itself, which proposes and syncs through
 * the meta group it holds).
 */
export function shardCellMeta(
  share: MetaShare,
  siblings: readonly (Sibling | null)[],
  incarnation: string,
): ShardCellMeta {
  return {
    incarnation,
    share: (state) => share.share(state),
    follow: (listener) => share.follow(listener),
    shareDecommissioned: () => share.shareDecommissioned(),
    followDecommissioned: (listener) => share.followDecommissioned(listener),
    shareAdmission: (admission) => share.shareAdmission(admission),
    followAdmission: (listener) => share.followAdmission(listener),
    placing: (shard, timeoutMs) => share.placing(shard, timeoutMs),
    // A scan's deadline and client's call go with it, to worker 0's wait too (MetaShare.sync).
    sync: (deadline, call) => share.sync(deadline, call ?? null),
    proposer: () => {
      const worker0 = siblings[0];
      if (worker0 === null || worker0 === undefined) throw new Error("worker 0 proposes itself");
      return siblingProposer(worker0);
    },
  };
}

/**
 * What shard worker `index`'s ClusterState learns of this member that no meta state says,
 * through its ShardCell's `meta`: worker 0 (it runs the loops that learn it) tells the others,
 * which gate their own clients' calls by it: a decommission its meta replica never applied
 * (ClusterState.onDecommissionedUnseen), and why it is not yet a member (the founding, the join:
 * ClusterState.onAdmissionChanged), so that a client reads the same refusal whichever worker
 * its connection landed on.
 */
export function shareMemberStanding(
  cluster: ClusterState,
  meta: ShardCellMeta,
  index: number,
): void {
  if (index === 0) {
    cluster.onDecommissionedUnseen = () => meta.shareDecommissioned();
    cluster.onAdmissionChanged = (admission) => meta.shareAdmission(admission);
  } else {
    meta.followDecommissioned(() => cluster.decommissionedUnseen());
    meta.followAdmission((admission) => cluster.admissionShared(admission));
  }
}
