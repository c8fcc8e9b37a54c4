/**
 * The nodes gossip declared dead or gone (left): groups led here sleep with their replicas on
 * them lagging (MultiRaftOptions.nodeDown), and wake when one is back.
 *
 * Fed by gossip, which is unauthenticated UDP (docs/membership.md, "Bounds"): a forger announces
 * made-up members and then their deaths. SWIM forgets each once its tombstone expires, its table
 * within `maxMembers`, but a set that only grew kept every id ever declared down: at the default
 * tombstone time (5 minutes) a table's worth every 5 minutes, ~600,000 ids a day, for good. So
 * once it holds more than `max`, the ids that neither gossip nor the meta state knows now are
 * dropped: nodeDown is asked only about a group's replicas, which are the meta state's members,
 * and one gossip still holds is kept as it is.
 */

/** How many ids are kept before those nobody knows are dropped (gossip's 2,048, the meta's 1,024). */
export const DOWN_NODES_MAX = 4096;

export class DownNodes {
  readonly #down = new Set<string>();
  readonly #known: () => Iterable<string>;
  readonly #max: number;

  /** `known`: the ids gossip's table and the meta state hold now (kept past `max`). */
  constructor(known: () => Iterable<string>, max = DOWN_NODES_MAX) {
    this.#known = known;
    this.#max = max;
  }

  get size(): number {
    return this.#down.size;
  }

  has(id: string): boolean {
    return this.#down.has(id);
  }

  /**
   * Gossip's latest word on node `id`: dead or left marks it down; anything else after that
   * brings it back, and returns true (the groups led here with a replica there wake).
   */
  note(id: string, state: string): boolean {
    if (state !== "dead" && state !== "left") return this.#down.delete(id);
    this.#down.add(id);
    if (this.#down.size > this.#max) this.#prune();
    return false;
  }

  #prune(): void {
    const known = new Set(this.#known());
    for (const id of this.#down) if (!known.has(id)) this.#down.delete(id);
  }
}
