/**
 * The multi-raft driver's replica removal (replica GC; docs/architecture.md, "An elastic
 * cluster"): a replica that a move took off this node is closed, its records in the WAL dropped
 * but for its term and vote, and its directory deleted, so that a node keeps no copy of data it
 * no longer owns. Which replicas may go is the caller's decision (src/node/replica-gc.ts, from
 * the committed meta state); this part only makes the removal safe and crash-proof.
 *
 * The steps, and what a crash after each leaves:
 *
 *   1. The replica leaves the driver's table (ShardReplica.removed): no round collects it any
 *      more, no tick, message or request reaches it, and a round already holding its Ready, or
 *      an apply under way, finishes first. Nothing on disk changed: a crash reopens it whole.
 *   2. `confirm()`, the caller's last word, asked only now: a replica out of the table answers
 *      nothing, so a meta state read after this point (synced with the meta group) covers
 *      every move that could have counted on it. On "no" the replica goes back into the table
 *      as it was, having missed a few messages (as after a network blip). A close counts as
 *      "no" at once, whatever confirm() still waits for (stop()): the replica is closed whole.
 *   3. Its waiting requests fail with NotLeaderError naming the shard's replica now, its
 *      snapshot pins are released and its engine closed.
 *   4. Wal.drop, synced: its entries, snapshot and compaction mark are gone, its term and vote
 *      kept (a replica created here again, by a later move back, starts from them and never
 *      votes twice in a term), and its log's last entry (that replica votes as this log would
 *      until it gets an entry or a snapshot: ShardReplica.recreated, Wal.droppedLog). Durable
 *      before anything is deleted. A crash from here on: the shard is dropped in the WAL, so
 *      start-up never opens it, and deletes what is left of its directory (Groups.openAtStart).
 *   5. Its directory is deleted (and its parent synced). Should that fail partway, the removal
 *      is done all the same: what is left is deleted at the next start, or before the shard is
 *      opened again here if a move brings it back first (Groups#openShard).
 *
 * Meanwhile Groups.shard() waits for the removal to end before it opens the shard (a move back
 * onto this node may send its first messages while the old replica is being removed). Caveat:
 * the bytes reported freed are the engine's table bytes (the memtable's and the WAL's share are
 * not counted).
 */
import { rm } from "node:fs/promises";
import { dirname, join } from "node:path";
import type { DenseMap } from "../common/index.ts";
import { NotLeaderError } from "../raft/index.ts";
import { type FileSystem, nodeFileSystem, type Wal } from "../storage/index.ts";
import {
  leaderNode,
  type MultiRaftOptions,
  type ReplicationObserver,
  ShuttingDownError,
} from "./multi-raft-options.ts";
import type { ShardReplica } from "./shard.ts";
import type { SnapshotPins } from "./snapshot-pins.ts";

/** What a removal did (MultiRaft.removeReplica). */
export type RemovalOutcome =
  | {
      readonly kind: "removed";
      readonly shard: number;
      /** The engine's table bytes the directory held. */
      readonly bytes: number;
      /**
       * Deleting the directory failed (start-up, or a move back before it, deletes it again);
       * the rest is done.
       */
      readonly directoryError: unknown;
    }
  | { readonly kind: "kept"; readonly shard: number; readonly reason: string };

/** What the removal needs of the driver. */
export interface RemovalHost {
  readonly options: Pick<MultiRaftOptions, "dataDir" | "transport" | "fs">;
  readonly observer: ReplicationObserver | undefined;
  readonly shards: Pick<DenseMap<ShardReplica>, "get" | "set" | "delete">;
  readonly wal: Pick<Wal, "drop" | "sync">;
  readonly snapshotPins: SnapshotPins | null;
  /** The ticker (multi-raft-quiesce.ts). */
  readonly sleep: { setTicking(s: ShardReplica, ticking: boolean): void };
  /** Resolves once no round runs (multi-raft-round.ts). */
  whenRoundsIdle(): Promise<void>;
  /** The replicas the shard is placed on now, first-ranked first (Groups.placedOn). */
  placedOn(id: number): readonly string[];
  /** Shard `id` is being opened here. */
  opening(id: number): boolean;
  markDirty(s: ShardReplica): void;
  /** The node is closed or failed. */
  stopped(): boolean;
  /** Fails the node. */
  fail(err: unknown): void;
}

export class Removal {
  readonly #host: RemovalHost;
  /** Removals under way, by shard: Groups.shard() waits for them. */
  readonly #removing = new Map<number, Promise<void>>();
  /** Resolves (false: not confirmed) once the driver closes (stop()). */
  readonly #stopping = Promise.withResolvers<false>();

  constructor(host: RemovalHost) {
    this.#host = host;
  }

  /** The removal of shard `id` under way, if any (resolves when it ended, whatever it did). */
  removing(id: number): Promise<void> | undefined {
    return this.#removing.get(id);
  }

  /**
   * Ends the removals under way, for close(): one waiting for its `confirm()` stops waiting
   * (not confirmed: the replica is closed as it is, its directory kept), the others finish
   * their I/O. Resolves once none is under way. A confirm() may wait on what only a running
   * driver answers: replica GC's syncs the meta state (a read on shard 0), and on a node
   * leading the meta group whose peers stopped answering (a node's stop closes the transport
   * before the store) that read never reaches a quorum. Rounds, which would expire it, have
   * stopped, and close() fails pending reads only after this: waiting for confirm() there
   * kept close() from ever returning.
   */
  async stop(): Promise<void> {
    this.#stopping.resolve(false);
    await Promise.allSettled([...this.#removing.values()]);
  }

  /**
   * Removes shard `id`'s replica here (the steps in the module doc) if it is open, not being
   * opened or removed, does not lead its group, and `confirm()` resolves true once it is out
   * of the table. The meta group (shard 0) is never removed here, nor anything on a single
   * node.
   */
  async remove(id: number, confirm: () => Promise<boolean>): Promise<RemovalOutcome> {
    const kept = (reason: string): RemovalOutcome => ({ kind: "kept", shard: id, reason });
    if (this.#host.options.transport === undefined) return kept("a single node removes nothing");
    if (id === 0) return kept("the meta group is never removed");
    if (this.#host.stopped()) return kept("the node is stopping");
    if (this.#removing.has(id)) return kept("its removal is under way");
    if (this.#host.opening(id)) return kept("it is being opened");
    const s = this.#host.shards.get(id);
    if (s === undefined) return kept("it is not open here");
    // A leader leaving its shard hands leadership over first (src/node/replicas.ts).
    if (s.raw.role === "leader") return kept("it leads its group");
    const ended = Promise.withResolvers<undefined>();
    this.#removing.set(id, ended.promise);
    try {
      return await this.#remove(s, confirm);
    } finally {
      this.#removing.delete(id);
      ended.resolve(undefined);
    }
  }

  async #remove(s: ShardReplica, confirm: () => Promise<boolean>): Promise<RemovalOutcome> {
    const id = s.id;
    const host = this.#host;
    // 1. Out of the table: no round, tick, message or request reaches it from here on.
    s.removed = true;
    host.shards.delete(id);
    host.sleep.setTicking(s, false);
    await host.whenRoundsIdle();
    while (s.applying !== null) await s.applying.catch(() => undefined);
    // 2. The caller's last word, now that the replica acknowledges nothing more; a close does
    // not wait for it (stop()).
    const confirmed = await Promise.race([confirm().catch(() => false), this.#stopping.promise]);
    if (!confirmed || host.stopped()) {
      s.removed = false;
      if (!host.stopped()) {
        host.shards.set(id, s);
        host.sleep.setTicking(s, true);
        host.markDirty(s);
      } else {
        // close() closes what is in the table: this one is closed here.
        s.failAll(new ShuttingDownError());
        await s.sm.lsm.close().catch(() => undefined);
      }
      return { kind: "kept", shard: id, reason: "not confirmed once closed" };
    }
    // 3. Its requests go to the shard's replicas now; its engine closes.
    s.failAll(new NotLeaderError(leaderNode(host.placedOn(id)[0])));
    const bytes = s.sm.lsm.stats().bytesPerLevel.reduce((a, b) => a + b, 0);
    try {
      host.snapshotPins?.releaseEngine(s.sm.lsm);
      await s.sm.lsm.close();
      // 4. Durable first: from here on the shard is gone whatever happens. Should it come back
      // here, even after a restart, it votes as this log would: the drop records the log's last
      // entry (Wal.droppedLog, ShardReplica.recreated).
      host.wal.drop(id);
      await host.wal.sync();
    } catch (err) {
      // The replica is out of the table with its engine closed, or the WAL failed: the node
      // restarts, and reopens it whole or finds it dropped.
      host.fail(err);
      throw err;
    }
    // 5. Its files.
    let directoryError: unknown = undefined;
    try {
      await removeShardDir(host.options.fs, shardDir(host.options.dataDir, id));
    } catch (err) {
      directoryError = err;
    }
    host.observer?.shardRemoved?.(id, bytes);
    return { kind: "removed", shard: id, bytes, directoryError };
  }
}

/** Shard `id`'s directory under `dataDir`. */
export function shardDir(dataDir: string, id: number): string {
  return join(dataDir, "shards", String(id));
}

/**
 * Deletes a shard's directory and what it holds, then syncs its parent so that the deletion is
 * durable. On the real file system, recursively; on another (`MultiRaftOptions.fs`, a
 * simulation's memory file system, whose engines keep their files flat) the files it lists.
 * A replica that never flushed a table has no directory, and a node none of whose replicas did
 * has no parent either (`<data_dir>/shards`): then there is nothing to delete or to sync.
 */
export async function removeShardDir(fs: FileSystem | undefined, dir: string): Promise<void> {
  const files = fs ?? nodeFileSystem;
  if (files === nodeFileSystem) {
    await rm(dir, { recursive: true, force: true });
  } else {
    let names: string[];
    try {
      names = await files.readdir(dir);
    } catch (err) {
      if ((err as { code?: unknown }).code === "ENOENT") return;
      throw err;
    }
    for (const name of names) await files.unlink(join(dir, name));
  }
  try {
    await files.fsyncDir(dirname(dir));
  } catch (err) {
    if ((err as { code?: unknown }).code !== "ENOENT") throw err;
  }
}
