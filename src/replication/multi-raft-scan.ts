/**
 * The multi-raft driver's scans: which shards a scan reads (open here, or through a replica on
 * another node), reading them, and merging their key-ordered lists; and scanShards, a peer's
 * share of a scan asked by another node.
 */
import { nodeOfReplica } from "../cluster/index.ts";
import { CallCut } from "../common/index.ts";
import { NotLeaderError, type NodeId } from "../raft/index.ts";
import {
  leaderNode,
  type MultiRaftOptions,
  OPEN_CONCURRENCY,
  type ScanRequest,
  type ShardTable,
} from "./multi-raft-options.ts";
import { assertServesSerializable, servesSerializable } from "./multi-raft-reads.ts";
import { type ClientCall, ReadCancelledError, ReadPastDeadlineError } from "./request-errors.ts";
import { mergeCursors, mergePages, type ScanPage } from "./scan-merge.ts";
import type { ShardReplica } from "./shard.ts";

/**
 * The error of a scan none of whose asked replicas of shard `id` answered (UNAVAILABLE, as
 * NotLeaderError: the client retries, through another node too), naming the shard and them.
 */
function noReplicaAnswered(id: number, nodes: readonly string[], err: unknown): NotLeaderError {
  const e = new NotLeaderError(err instanceof NotLeaderError ? err.leader : null);
  const last = err instanceof Error ? err.message : String(err);
  e.message = `no replica of shard ${id} answered (asked: ${nodes.join(", ")}; the last: ${last})`;
  return e;
}

/**
 * A scan's client call as its shards' barriers see it. Each barrier waiting on a leader's read
 * index listens for the call's cancellation, and a scan waits on up to every shard: on the call
 * itself (an EventEmitter) that warned past 10 listeners and removed each in linear time. This
 * listens to the call once (for as long as the call lives) and tells every barrier.
 */
export class ScanCall implements ClientCall {
  cancelled: boolean;
  readonly #listeners = new Set<() => void>();

  /** `call`: the client's, whose cancellation this passes on; null when there is none. */
  constructor(call: ClientCall | null) {
    this.cancelled = call?.cancelled ?? false;
    call?.once("cancelled", () => this.cancel());
  }

  /**
   * Tells every share listening that the scan is over: its client cancelled, or one share
   * failed, which fails the scan (Scanner.scan's peers, RoutedStore's shard workers).
   */
  cancel(): void {
    this.cancelled = true;
    // (Each listener removes itself as it runs.)
    for (const listener of [...this.#listeners]) listener();
    this.#listeners.clear();
  }

  once(_event: "cancelled", listener: () => void): this {
    this.#listeners.add(listener);
    return this;
  }

  removeListener(_event: "cancelled", listener: () => void): this {
    this.#listeners.delete(listener);
    return this;
  }
}

/** What scans need of the driver. */
export interface ScanHost {
  readonly options: Pick<
    MultiRaftOptions,
    "transport" | "ownsShard" | "createdShards" | "syncMeta" | "acceptsReplica" | "remoteScan"
  >;
  readonly shards: ShardTable;
  readonly replicaId: NodeId;
  readonly totalShards: number;
  assertOpen(): void;
  checkShardId(id: number): void;
  /** The shard's replicas, first-ranked first (MultiRaftOptions.replicasOf). */
  replicasOf(id: number): readonly string[];
  /** The shard open here for a request, opened if this node replicates it (else NotLeaderError). */
  shardForRequest(id: number): Promise<ShardReplica>;
  /** The shard's replicas now (Groups.placedOn). */
  placedOn(id: number): readonly string[];
  /** A move took the shard's replica open here off this node (Groups.placedElsewhere). */
  placedElsewhere(id: number): boolean;
  /**
   * Waits until a linearizable read of the shard may be served here (the ReadIndex rule), until
   * `deadline` at most or until `call` is cancelled (Reads.readBarrier).
   */
  readBarrier(s: ShardReplica, deadline: number, call: ClientCall | null): Promise<void>;
  /** Waits until `shards` have replayed their own logs, for a serializable read (Reads.untilReplayed). */
  untilReplayed(
    shards: Iterable<ShardReplica>,
    deadline: number,
    call: ClientCall | null,
  ): Promise<void>;
  /**
   * The meta state here as recent as any acknowledged meta command (MultiRaft.syncMeta), waited
   * for until `deadline` at most or until `call` is cancelled.
   */
  syncMeta(deadline: number, call: ClientCall | null): Promise<void>;
}

export class Scanner {
  readonly #host: ScanHost;

  constructor(host: ScanHost) {
    this.#host = host;
  }

  /**
   * Keys in [start, end) across every shard, in key order, at most `limit` within `maxBytes`.
   * Keys are hashed over shards, so every active shard is read (a shard never accessed holds no
   * keys) and the results merged (scan-merge.ts); `more` tells whether keys may remain after the
   * last one returned.
   *
   * `deadline` is its call's (on deadlineClock(); Infinity: none): a linearizable scan stops
   * waiting for its shards' read indexes and applies then, here and on the peers it asks, as a
   * Get does (ReadPastDeadlineError), and gives their shares of the request budget back; so it
   * does once its client's `call` is cancelled, the calls to the peers cancelled with it.
   */
  async scan(
    req: ScanRequest,
    deadline = Infinity,
    call: ClientCall | null = null,
  ): Promise<ScanPage> {
    const { local, remote } = await this.#plan(req.linearizable, deadline, call);
    if (remote.size === 0) {
      return mergePages(
        [await this.#scanLocal(local, req, deadline, call)],
        req.limit,
        req.maxBytes,
      );
    }
    // Its own barriers and its calls to peers hear the cancellation through one listener, and
    // hear it too when another share fails: the scan fails with it, and a call still waiting on
    // a peer went on holding its share of that peer's request budget until its deadline or 10 s.
    const shares = new ScanCall(call);
    try {
      const pages = await Promise.all([
        this.#scanLocal(local, req, deadline, shares),
        ...[...remote].map(([node, ids]) => this.#scanRemote(node, ids, req, deadline, shares)),
      ]);
      return mergePages(pages, req.limit, req.maxBytes);
    } catch (err) {
      shares.cancel();
      throw err;
    }
  }

  /**
   * A peer's share of a scan (cairn.v1.Raft ScanShards): the keys of `ids`, each a shard this
   * node replicates (else NotLeaderError naming a replica), in the range, merged in key order,
   * a page as `scan` gives; linearizable reads confirmed as for this node's own scans, until
   * `deadline` at most (the asker's call's), or until the asker cancels its `call`.
   */
  async scanShards(
    ids: readonly number[],
    req: ScanRequest,
    deadline = Infinity,
    call: ClientCall | null = null,
  ): Promise<ScanPage> {
    this.#host.assertOpen();
    for (const id of ids) this.#host.checkShardId(id);
    const shards = await Promise.all(ids.map((id) => this.#host.shardForRequest(id)));
    if (!req.linearizable) {
      await this.#host.untilReplayed(shards, deadline, call);
      // A replica being refilled or a learner: the asker reads the shard from its next replica.
      for (const s of shards) assertServesSerializable(s);
    }
    return this.#scanLocal(shards, req, deadline, call);
  }

  /**
   * Keys of `shards` (open here) in the range, merged: each shard read at a snapshot pinned at
   * once, as far as the page needs; a linearizable one waits for their barriers until
   * `deadline` at most, or until `call` is cancelled.
   */
  async #scanLocal(
    shards: readonly ShardReplica[],
    req: ScanRequest,
    deadline: number,
    call: ClientCall | null,
  ): Promise<ScanPage> {
    if (req.linearizable) {
      // Its barriers, one a shard, hear the call's cancellation through one listener (ScanCall).
      const barriers = call === null || shards.length < 2 ? call : new ScanCall(call);
      await Promise.all(shards.map((s) => this.#host.readBarrier(s, deadline, barriers)));
    } else this.#host.assertOpen();
    const reads = shards.map((s) => ({ sm: s.sm, snap: s.sm.lsm.snapshot() }));
    try {
      const cursors = reads.map(({ sm, snap }) => sm.scan(req.start, req.end, snap));
      return mergeCursors(cursors, req.limit, req.maxBytes);
    } finally {
      for (const { snap } of reads) snap.release();
    }
  }

  /**
   * Keys of `ids`, shards this node does not replicate or holds nothing of, through their other
   * replicas: all of them from `node` first; the shards of a node that fails from their next
   * replica in rank order (from the first, when that node replicates them no more), until one
   * answers or every replica failed (the last error), or with `skipUnavailable` (serializable)
   * left out and named in the page. Each is asked with the call's `deadline`, and cancelled
   * once its client's `call` is: the peer stops waiting for its shards' read indexes then, not
   * at the deadline or its request timeout (10 s), which a client sending none and cancelling
   * at once otherwise held its share of the budget for.
   */
  async #scanRemote(
    node: string,
    ids: readonly number[],
    req: ScanRequest,
    deadline: number,
    call: ClientCall | null,
  ): Promise<ScanPage> {
    const remote = this.#host.options.remoteScan;
    if (remote === undefined) {
      throw new NotLeaderError(leaderNode(this.#host.placedOn(ids[0] ?? 0)[0]));
    }
    if (call?.cancelled === true) throw new ReadCancelledError();
    const cut = new CallCut();
    const cancelled = (): void => cut.cut();
    call?.once("cancelled", cancelled);
    try {
      return await remote(node, ids, req, deadline, cut);
    } catch (err) {
      // Its client has gone: the shards' other replicas are not asked for it.
      if (cut.isCut) throw new ReadCancelledError();
      if (ids.length === 0 || err instanceof ReadPastDeadlineError) throw err;
      // Each shard to its next replica after `node`, grouped again by node; one with none
      // left fails the scan, or, when the scan skips them, is left out of it.
      const skip = req.skipUnavailable === true && !req.linearizable;
      const next = new Map<string, number[]>();
      const skipped: number[] = [];
      for (const id of ids) {
        const nodes = this.#otherReplicas(id);
        // A node that is no replica of the shard now (a move took it off while it was asked:
        // a repair after nodes were lost does) is followed by every replica of now, from the
        // first. Looked for in vain, the shard failed the scan, or was left out of it as lost
        // (a backup --skip-unavailable called partial, its keys missing) while they answered.
        const after = nodes[nodes.indexOf(node) + 1];
        if (after === undefined) {
          if (!skip) throw noReplicaAnswered(id, nodes, err);
          skipped.push(id);
          continue;
        }
        next.set(after, [...(next.get(after) ?? []), id]);
      }
      const pages = await Promise.all(
        [...next].map(([n, group]) => this.#scanRemote(n, group, req, deadline, call)),
      );
      if (skipped.length > 0) pages.push({ items: [], more: false, skipped });
      return mergePages(pages, req.limit, req.maxBytes);
    } finally {
      call?.removeListener("cancelled", cancelled);
    }
  }

  /**
   * The shard's replica nodes in rank order, this one left out: a scan asks them for shards
   * this node holds nothing of (being refilled, never opened here), where it would answer with
   * none of their keys.
   */
  #otherReplicas(id: number): string[] {
    const self = nodeOfReplica(this.#host.replicaId);
    return this.#host
      .placedOn(id)
      .map(nodeOfReplica)
      .filter((n) => n !== self);
  }

  /**
   * The shards a scan reads: `local`, open here, and `remote`, the shards this node does not
   * replicate, grouped by the replica node to ask (the first-ranked, usually the leader). On a
   * single node, those open here (a shard never opened holds no keys). In a cluster a shard may
   * hold keys on its other replicas only (this node missed its creation, or restarted before
   * hearing of it, or is not one of its replicas): a linearizable scan reads every shard created
   * cluster-wide (`createdShards`, after syncing the meta state), opening those it replicates
   * and not open yet through their groups; without `createdShards` (the simulation), every
   * shard this node replicates. A serializable scan reads the shards open here, and through
   * their other replicas those the meta state here records as created and not open here.
   */
  async #plan(
    linearizable: boolean,
    deadline: number,
    call: ClientCall | null,
  ): Promise<{ local: ShardReplica[]; remote: Map<string, number[]> }> {
    const remote = new Map<string, number[]>();
    const owns = this.#host.options.ownsShard ?? (() => true);
    // A shard worker reads its own shards (here or on the same worker of their replicas).
    const createdShards = this.#host.options.createdShards;
    const created =
      createdShards === undefined ? undefined : () => createdShards().filter((id) => owns(id));
    const elsewhere = (id: number): boolean =>
      this.#host.placedElsewhere(id) ||
      (!this.#host.placedOn(id).includes(this.#host.replicaId) &&
        this.#host.options.acceptsReplica?.(id) !== true);
    const ask = (node: string, id: number): void => {
      remote.set(node, [...(remote.get(node) ?? []), id]);
    };
    const place = (id: number): void =>
      ask(nodeOfReplica(this.#host.placedOn(id)[0] ?? this.#host.replicaId), id);
    /** A shard this node holds nothing of, from its first other replica; false: it has none. */
    const placeOther = (id: number): boolean => {
      const other = this.#otherReplicas(id)[0];
      if (other !== undefined) ask(other, id);
      return other !== undefined;
    };
    if (this.#host.options.transport === undefined || !linearizable) {
      if (this.#host.options.transport !== undefined && created !== undefined) {
        for (const id of created()) {
          if (this.#host.shards.has(id)) continue;
          if (elsewhere(id)) {
            place(id);
            continue;
          }
          // Placed here but not open: this node never heard of the shard (down when it was
          // created, or behind), so it holds none of its keys. Its other replicas are read, as
          // for a replica being refilled; a shard with none is one this node alone replicates,
          // never opened, so empty. Leaving it out hid a shard whose other replicas are lost
          // for good: a backup of what survives came out whole.
          placeOther(id);
        }
      }
      const local: ShardReplica[] = [];
      // A replica still replaying its log may not know yet that it is a voter of its group.
      await this.#host.untilReplayed(this.#host.shards.values(), deadline, call);
      for (const s of this.#host.shards.values()) {
        if (this.#host.placedElsewhere(s.id)) {
          place(s.id);
          continue;
        }
        if (servesSerializable(s)) {
          local.push(s);
          continue;
        }
        // Being refilled here (refill.ts), or a learner not promoted yet: read from another
        // replica (the first-ranked other than this node, then the next ones: #scanRemote).
        if (!placeOther(s.id)) throw new NotLeaderError(leaderNode(s.raw.lead));
      }
      return { local, remote };
    }
    let ids: readonly number[];
    if (created !== undefined) {
      // Every shard created before the scan arrived is in the meta state once it is synced.
      await (this.#host.options.syncMeta?.(deadline, call) ?? this.#host.syncMeta(deadline, call));
      ids = created();
    } else {
      ids = Array.from({ length: this.#host.totalShards }, (_, id) => id).filter((id) => owns(id));
    }
    const local: ShardReplica[] = [];
    const queue = ids.filter((id) => {
      if (
        (this.#host.shards.has(id) && !this.#host.placedElsewhere(id)) ||
        this.#host.options.remoteScan === undefined ||
        !elsewhere(id)
      )
        return true;
      place(id);
      return false;
    });
    const opener = async (): Promise<void> => {
      for (let id = queue.shift(); id !== undefined; id = queue.shift()) {
        local.push(await this.#host.shardForRequest(id));
      }
    };
    await Promise.all(Array.from({ length: OPEN_CONCURRENCY }, opener));
    return { local, remote };
  }
}
