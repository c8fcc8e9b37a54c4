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
import type { MessagePort } from "node:worker_threads";
import type { AdminStore, KvStore } from "../api/store.ts";
import { type MemberView, ClusterViewPublisher, type ShardView } from "../cluster/index.ts";
import { CairnError, IntMap } from "../common/index.ts";
import { NotLeaderError, nodeId } from "../raft/index.ts";
import {
  type ApplyOutcome,
  type MultiRaft,
  type ScanRequest,
  type ShardInfo,
  ShuttingDownError,
  type SnapshotResult,
  type StoredItem,
  type Version,
} from "../replication/index.ts";

/** What one worker asks another to do with a shard it owns. */
export type SiblingCall =
  | {
      readonly op: "put";
      readonly key: Uint8Array;
      readonly value: Uint8Array;
      readonly expected: Version | undefined;
    }
  | { readonly op: "delete"; readonly key: Uint8Array; readonly expected: Version | undefined }
  | { readonly op: "get"; readonly key: Uint8Array; readonly linearizable: boolean }
  | { readonly op: "scan"; readonly req: ScanRequest }
  | { readonly op: "snapshot"; readonly shard: number }
  | { readonly op: "transfer"; readonly shard: number; readonly to: string };

/** An error as it crosses threads: what toServiceError and the metrics read of it. */
export interface WireError {
  readonly code: string | null;
  readonly message: string;
  readonly retryable: boolean;
  readonly leader: string | null;
}

interface Envelope {
  readonly calls: readonly (SiblingCall & { readonly id: number })[];
  readonly replies: readonly {
    readonly id: number;
    readonly value?: unknown;
    readonly error?: WireError;
  }[];
  readonly shards: readonly ShardView[];
  readonly members: readonly MemberView[] | null;
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

/** What a worker does with a call a sibling handed it: its own driver serves it. */
export type SiblingServer = (call: SiblingCall) => Promise<unknown>;

export class Sibling {
  readonly #port: MessagePort;
  readonly #serve: SiblingServer;
  readonly #onView: (shards: readonly ShardView[], members: readonly MemberView[] | null) => void;
  /** Calls in flight by id (an IntMap: see its header for why not a `Map` on this path). */
  readonly #pending = new IntMap<{ resolve(v: unknown): void; reject(e: unknown): void }>();
  #nextId = 1;
  #calls: (SiblingCall & { id: number })[] = [];
  #replies: { id: number; value?: unknown; error?: WireError }[] = [];
  #shards: ShardView[] = [];
  #members: readonly MemberView[] | null = null;
  #scheduled = false;
  #closed = false;

  constructor(
    port: MessagePort,
    serve: SiblingServer,
    onView: (shards: readonly ShardView[], members: readonly MemberView[] | null) => void,
  ) {
    this.#port = port;
    this.#serve = serve;
    this.#onView = onView;
    port.on("message", (m: Envelope) => this.#receive(m));
    // The sibling closed its end, or its thread ended: nothing waiting on it will be answered.
    port.on("close", () => this.close());
  }

  /** Asks the sibling to run `call` on a shard it owns. */
  call(call: SiblingCall): Promise<unknown> {
    if (this.#closed) return Promise.reject(new ShuttingDownError());
    const id = this.#nextId++;
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject });
      this.#calls.push({ ...call, id });
      this.#schedule();
    });
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

  /** Fails what still waits on the sibling and stops listening. */
  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#port.close();
    for (const { reject } of this.#pending.values()) reject(new ShuttingDownError());
    this.#pending.clear();
  }

  #receive(m: Envelope): void {
    if (m.shards.length > 0 || m.members !== null) this.#onView(m.shards, m.members);
    for (const r of m.replies) {
      const waiting = this.#pending.get(r.id);
      if (waiting === undefined) continue;
      this.#pending.delete(r.id);
      if (r.error === undefined) waiting.resolve(r.value);
      else waiting.reject(fromWireError(r.error));
    }
    for (const call of m.calls) {
      const id = call.id;
      this.#serve(call).then(
        (value) => this.#reply({ id, value }),
        (err: unknown) => this.#reply({ id, error: toWireError(err) }),
      );
    }
  }

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
      replies: this.#replies,
      shards: this.#shards,
      members: this.#members,
    };
    this.#calls = [];
    this.#replies = [];
    this.#shards = [];
    this.#members = null;
    this.#port.postMessage(envelope);
  };
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

/** Runs a sibling's call on this worker's own driver. */
export function serveSibling(
  local: MultiRaft,
  transfer: (shard: number, to: string) => Promise<string>,
): SiblingServer {
  return async (call) => {
    switch (call.op) {
      case "put":
        return local.put(call.key, call.value, call.expected);
      case "delete":
        return local.delete(call.key, call.expected);
      case "get": {
        const item = await local.get(call.key, call.linearizable);
        return item === null ? null : ownItem(item);
      }
      case "scan":
        return (await local.scan(call.req)).items.map(ownItem);
      case "snapshot":
        return local.snapshotShard(call.shard);
      case "transfer":
        return transfer(call.shard, call.to);
    }
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

  put(key: Uint8Array, value: Uint8Array, expected?: Version): Promise<ApplyOutcome> {
    const owner = this.#owner(this.#local.shardOf(key));
    if (owner === null) return this.#local.put(key, value, expected);
    return owner.call({
      op: "put",
      key: own(key),
      value: own(value),
      expected,
    }) as Promise<ApplyOutcome>;
  }

  delete(key: Uint8Array, expected?: Version): Promise<ApplyOutcome> {
    const owner = this.#owner(this.#local.shardOf(key));
    if (owner === null) return this.#local.delete(key, expected);
    return owner.call({ op: "delete", key: own(key), expected }) as Promise<ApplyOutcome>;
  }

  get(key: Uint8Array, linearizable: boolean): Promise<StoredItem | null> {
    const owner = this.#owner(this.#local.shardOf(key));
    if (owner === null) return this.#local.get(key, linearizable);
    return owner.call({ op: "get", key: own(key), linearizable }) as Promise<StoredItem | null>;
  }

  /** Every worker's keys in the range, merged: each gives at most limit + 1, as shards do. */
  async scan(req: ScanRequest): Promise<{ items: StoredItem[]; more: boolean }> {
    const wider: ScanRequest = { ...req, limit: req.limit + 1 };
    const lists = await Promise.all(
      this.#siblings.map((s) =>
        s === null
          ? this.#local.scan(wider).then((r) => r.items)
          : (s.call({ op: "scan", req: wider }) as Promise<StoredItem[]>),
      ),
    );
    const merged = lists.flat().sort((a, b) => Buffer.compare(a.key, b.key));
    return { items: merged.slice(0, req.limit), more: merged.length > req.limit };
  }

  snapshotShard(id: number): Promise<SnapshotResult> {
    const owner = this.#owner(id);
    if (owner === null) return this.#local.snapshotShard(id);
    return owner.call({ op: "snapshot", shard: id }) as Promise<SnapshotResult>;
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
   * driver (the Admin service's single-node checks), a sibling on its own.
   */
  transfer(
    id: number,
    to: string,
    here: (id: number, to: string) => Promise<string>,
  ): Promise<string> {
    const owner = this.#owner(id);
    if (owner === null) return here(id, to);
    return owner.call({ op: "transfer", shard: id, to }) as Promise<string>;
  }
}

/**
 * The cluster view of one shard worker, with every worker's shards in it: a change to one of
 * this worker's shards (or to the members, in the worker that runs membership) is passed to
 * every sibling, and theirs are applied here as they arrive.
 */
export class SharedViews extends ClusterViewPublisher {
  #siblings: readonly Sibling[] = [];

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

  /** What a sibling shared: applied here only, never passed on. */
  applyShared(shards: readonly ShardView[], members: readonly MemberView[] | null): void {
    for (const v of shards) super.setShard(v);
    if (members !== null) super.setMembers(members);
  }
}
