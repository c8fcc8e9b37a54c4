/**
 * Replica GC (design.md §5.2; docs/architecture.md, "An elastic cluster"): a replica that a
 * move took off this node is deleted, so that a decommissioned node, or one that gave shards
 * away, keeps no copy of data it no longer owns (CockroachDB's replica GC queue, TiKV's
 * destroy-peer). The driver does the removal itself, durably and crash-safely
 * (src/replication/multi-raft-removal.ts); this part decides which replicas may go.
 *
 * The rule (`isRemovable`), on the committed meta state this node has applied, never its
 * gossip view: the shard is created, no move of it is under way (a move's old replica stays
 * until the move is settled, and settle-shard commits only once the group's voters are exactly
 * the shard's nodes: src/node/replicas.ts), its nodes do not include this one, and it is not
 * the meta group (every member keeps a replica of shard 0, and a decommissioned one keeps its
 * copy of the cluster's state; removing it would make the node forget it was ever a member).
 *
 * A stale meta state must not delete a replica a newer state needs (a move back onto this
 * node, whose learner is this very replica, caught up and promoted). So the rule is asked
 * twice: once to pick the replica, and again once the replica is out of the driver's table
 * (it acknowledges nothing more) and this node's meta state is synced with the meta group's
 * commit (a read index). A move back needs this node's replica to acknowledge, and is
 * committed in the meta group before the group adds the replica: a sync after the replica went
 * silent sees it. When the second answer is no, or the sync fails, the replica is put back. A
 * node decommissioned or removed skips the sync (hasLeftForGood): no move can ever target it
 * again, and it no longer holds a replica of the meta group to sync through.
 *
 * A pass runs from the upkeep timer (every 2 s, src/node/node.ts), so at start too once the
 * meta state is known, and removes at most REMOVALS_PER_PASS replicas, one at a time: a
 * decommissioned node's hundreds of replicas go over a few minutes, without a burst of deletes
 * or meta syncs. Each removal is logged at INFO with the shard and the bytes freed, and
 * counted (cairn_replicas_removed_total, cairn_replica_removed_bytes_total).
 */
import type { MetaState } from "../cluster/index.ts";
import type { Logger } from "../ops/index.ts";
import type { MultiRaft, RemovalOutcome } from "../replication/index.ts";

/** Replicas removed per pass at most (one at a time). */
export const REMOVALS_PER_PASS = 8;

/**
 * Whether shard `shard`'s replica on node `node` may be deleted, as of `meta` (committed and
 * applied here): see the module doc. False when unsure.
 */
export function isRemovable(meta: MetaState | null, shard: number, node: string): boolean {
  if (meta === null || meta.clusterId === null) return false;
  if (shard === 0 || !meta.shards.has(shard) || meta.isMoving(shard)) return false;
  // A node this state does not record as a member (not admitted yet here) keeps what it has. (A
  // removed member is still recorded, `removed`: it deletes what moved off it, as a
  // decommissioned one does.)
  if (meta.stateOf(node) === undefined) return false;
  const nodes = meta.nodesOf(shard);
  return nodes.length > 0 && !nodes.includes(node);
}

/**
 * Whether `meta` records node `node` decommissioned or removed: it never gets a replica again
 * (moves place replicas on active members only, and neither state leads back to active for
 * this data directory: a new node under the id starts a new life with another incarnation,
 * whose replicas are others), so no newer meta state can need a replica it holds, and the
 * rule needs no sync. (Such a node is no member of the meta group any more either: a sync,
 * through its own replica of it, would never end.)
 */
export function hasLeftForGood(meta: MetaState | null, node: string): boolean {
  const state = meta?.stateOf(node);
  return state === "decommissioned" || state === "removed";
}

export interface ReplicaGcOptions {
  readonly store: MultiRaft;
  readonly nodeId: string;
  /** The meta state applied here (ClusterState.meta). */
  meta(): MetaState | null;
  /** Brings the meta state here up to the meta group's commit (MultiRaft.syncMeta). */
  syncMeta(): Promise<void>;
  /** A replica was removed, with `bytes` of tables freed (the metrics). */
  removed(bytes: number): void;
  readonly log: Logger;
}

export class ReplicaGc {
  readonly #o: ReplicaGcOptions;
  #running = false;

  constructor(options: ReplicaGcOptions) {
    this.#o = options;
  }

  /** Starts a pass unless one runs. Resolves when it ends (tests await it); never rejects. */
  pass(): Promise<void> {
    if (this.#running) return Promise.resolve();
    this.#running = true;
    return this.#pass()
      .catch((err: unknown) =>
        this.#o.log.warn("replica GC pass failed", {
          error: err instanceof Error ? err.message : String(err),
        }),
      )
      .finally(() => {
        this.#running = false;
      });
  }

  async #pass(): Promise<void> {
    const { store, nodeId } = this.#o;
    const picked = store
      .shardIds()
      .filter((id) => isRemovable(this.#o.meta(), id, nodeId))
      .slice(0, REMOVALS_PER_PASS);
    for (const id of picked) {
      let outcome: RemovalOutcome;
      try {
        outcome = await store.removeReplica(id, async () => {
          if (!hasLeftForGood(this.#o.meta(), nodeId)) await this.#o.syncMeta();
          return isRemovable(this.#o.meta(), id, nodeId);
        });
      } catch (err) {
        this.#o.log.warn("removing a replica moved off this node failed", {
          shard_id: id,
          error: err instanceof Error ? err.message : String(err),
        });
        return;
      }
      if (outcome.kind === "kept") {
        this.#o.log.debug("replica moved off this node kept", {
          shard_id: id,
          reason: outcome.reason,
        });
        continue;
      }
      this.#o.removed(outcome.bytes);
      this.#o.log.info("replica moved off this node removed", {
        shard_id: id,
        bytes_freed: outcome.bytes,
        ...(outcome.directoryError === undefined
          ? {}
          : {
              directory_error:
                outcome.directoryError instanceof Error
                  ? outcome.directoryError.message
                  : String(outcome.directoryError),
            }),
      });
    }
  }
}
