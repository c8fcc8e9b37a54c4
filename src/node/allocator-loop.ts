/**
 * Runs the allocator (src/cluster/allocator.ts) on the node that leads the meta group: each
 * pass feeds it the committed meta state and this node's gossip view, and proposes what it
 * returns, one command after the other. A pass while the previous one's proposals are still
 * under way does nothing, so at most one batch is in flight.
 *
 * `cluster.dead_after_ms` is counted from the last time this node's gossip had the member
 * alive. Every node keeps these clocks at every pass, whether it leads the meta group or not,
 * so a node that takes the leadership acts on what it saw as a follower: under faults that keep
 * moving the meta group's leadership (the predecessor killed, paused or cut off again and
 * again), a dead member is still marked dead `dead_after_ms` after it died, and not only once
 * one leader has held on for `dead_after_ms` in a row (chaos seed 616: four minutes late).
 *
 * A clock never counts from before this node first saw the member (a member just admitted gets
 * a whole `dead_after_ms` to show up alive; so does every member after this node starts), nor
 * from before it first saw the member's current incarnation (a new node under a decommissioned
 * or removed member's id, a StatefulSet's pod back on an empty volume, is a member just admitted
 * however long ago the old one was last seen: it was marked dead at the first pass where gossip
 * did not have it alive yet, its old life's tombstone still around, then active once seen, never
 * held back while joining), nor from before this node last saw fewer than half of the active and
 * decommissioning members alive: a node cut off from the others sees them all unreachable, and
 * its gossip may still show some of them unreachable for a moment after the cut heals; the time
 * it was cut off is not time they were dead (a member marked dead too late costs time; too
 * early, a needless move). Joining members are not counted there: they may never show up (a
 * node that crashed right after asking to join, or a flood of join requests), and as many of
 * them as there were members kept every node "cut off" at every pass, so that nobody, dead or
 * joining, was ever marked dead.
 *
 * A move is `stalled` (src/cluster/allocator.ts) once every pass of this node for
 * STALLED_AFTER_MS has seen it under way with the same nodes; these clocks too are kept at
 * every pass, one a moving shard.
 */
import {
  allocate,
  isBalancingMove,
  type MetaCommand,
  type MetaState,
  STALLED_AFTER_MS,
} from "../cluster/index.ts";
import type { Logger } from "../ops/index.ts";

export interface AllocatorHost {
  readonly nodeId: string;
  readonly deadAfterMs: number;
  readonly maxMoves: number;
  /** Balancing moves started a minute, at most (`cluster.rebalance.moves_per_minute`; 0: none). */
  readonly movesPerMinute: number;
  readonly tolerance: number;
  meta(): MetaState | null;
  /** Whether this node leads the meta group (shard 0) now. */
  leadsMeta(): boolean;
  /** The members gossip has alive now. */
  alive(): ReadonlySet<string>;
  /** Whether member `node`'s replica of the meta group holds its whole committed log. */
  metaCaughtUp(node: string): boolean;
  propose(cmd: MetaCommand): Promise<void>;
  /** A batch of proposals ended with at least one committed: their effects may start now. */
  proposed?(): void;
  readonly log: Logger;
}

export class AllocatorLoop {
  readonly #host: AllocatorHost;
  /** When gossip last had each member alive (performance.now()), since this node first saw it. */
  readonly #lastAlive = new Map<string, number>();
  /** Each member's incarnation when its clock started: another one starts it again. */
  readonly #incarnations = new Map<string, string | undefined>();
  /** The last pass at which this node saw fewer than half of the members alive. */
  #cutOffAt: number | null = null;
  #busy = false;
  /** The balancing moves this node may start now (a token bucket; see #balanceBudget). */
  #tokens: number;
  #tokensAt: number | null = null;
  /** Each moving shard's nodes as last seen, and since when this node has seen them so. */
  readonly #movingSince = new Map<number, { nodes: string; since: number }>();

  constructor(host: AllocatorHost) {
    this.#host = host;
    this.#tokens = this.#burst();
  }

  /**
   * The bucket holds two seconds of the pace (at least one move), so that passes two seconds
   * apart (the upkeep's) keep it, and a new meta leader starts no more than that at once.
   */
  #burst(): number {
    return Math.max(1, this.#host.movesPerMinute / 30);
  }

  /** Refills the bucket at `movesPerMinute`; the whole balancing moves it holds now. */
  #balanceBudget(now: number): number {
    const rate = this.#host.movesPerMinute / 60_000;
    if (this.#tokensAt !== null) {
      this.#tokens = Math.min(
        this.#burst(),
        this.#tokens + Math.max(0, now - this.#tokensAt) * rate,
      );
    }
    this.#tokensAt = now;
    // The epsilon: ten refills of a tenth add up to 0.999…, which is a whole move.
    return rate === 0 ? 0 : Math.floor(this.#tokens + 1e-9);
  }

  /** One pass; `now` is performance.now() (tests pass their own). */
  pass(now = performance.now()): void {
    const host = this.#host;
    const meta = host.meta();
    if (meta === null || meta.clusterId === null) return;
    const alive = host.alive();
    let running = 0;
    let seen = 0;
    for (const [id, m] of meta.members) {
      const here = alive.has(id) || id === host.nodeId;
      // The members that should be running: active or decommissioning (not the joining ones,
      // which may never show up: see the module comment).
      const state = meta.stateOf(id);
      if (state === "active" || state === "decommissioning") {
        running++;
        if (here) seen++;
      }
      // A member's clock starts when this node first sees it (this node started, a new member),
      // or sees it with another incarnation (a new life under its id, a wiped node rejoining).
      const renewed = this.#incarnations.get(id) !== m.incarnation;
      if (here || renewed || !this.#lastAlive.has(id)) this.#lastAlive.set(id, now);
      this.#incarnations.set(id, m.incarnation);
    }
    if (seen * 2 < running) this.#cutOffAt = now;
    const stalled = this.#stalled(meta, now);
    if (!host.leadsMeta()) return;
    const since = (id: string): number =>
      Math.max(this.#lastAlive.get(id) ?? now, this.#cutOffAt ?? -Infinity);
    const unreachableLong = new Set(
      [...meta.members.keys()].filter((id) => now - since(id) >= host.deadAfterMs),
    );
    if (this.#busy) return;
    const cmds = allocate({
      meta,
      unreachableLong,
      // This node is alive, whether or not its gossip view lists it.
      alive: alive.has(host.nodeId) ? alive : new Set([...alive, host.nodeId]),
      stalled,
      caughtUp: (node) => host.metaCaughtUp(node),
      maxMoves: host.maxMoves,
      balanceMoves: this.#balanceBudget(now),
      balancingStopped: host.movesPerMinute === 0,
      tolerance: host.tolerance,
    });
    if (cmds.length === 0) return;
    // A balancing move proposed spends its token whether or not it commits (a refused one was
    // stale: the next pass decides again, at the pace).
    this.#tokens -= cmds.filter((cmd) => isBalancingMove(meta, cmd)).length;
    this.#busy = true;
    void this.#proposeAll(cmds).then((committed) => {
      this.#busy = false;
      if (committed > 0) this.#host.proposed?.();
    });
  }

  /** The moving shards seen under way with the same nodes for STALLED_AFTER_MS. */
  #stalled(meta: MetaState, now: number): Set<number> {
    const moving = meta.movingShards();
    const stalled = new Set<number>();
    for (const shard of this.#movingSince.keys()) {
      if (!meta.isMoving(shard)) this.#movingSince.delete(shard);
    }
    for (const shard of moving) {
      const nodes = meta.nodesOf(shard).join(",");
      const seen = this.#movingSince.get(shard);
      if (seen === undefined || seen.nodes !== nodes) {
        this.#movingSince.set(shard, { nodes, since: now });
      } else if (now - seen.since >= STALLED_AFTER_MS) {
        stalled.add(shard);
      }
    }
    return stalled;
  }

  /** Proposes `cmds` in order; resolves (never rejects) to how many were committed. */
  async #proposeAll(cmds: readonly MetaCommand[]): Promise<number> {
    const log = this.#host.log;
    let committed = 0;
    for (const cmd of cmds) {
      try {
        await this.#host.propose(cmd);
        committed++;
        if (cmd.op === "set-state") {
          log.info("member state changed", { member: cmd.id, state: cmd.state });
        } else if (cmd.op === "move-shard") {
          log.info("moving a shard", { shard_id: cmd.shard, from: cmd.from, to: cmd.nodes });
        } else if (cmd.op === "prefer-leader") {
          log.debug("evening leaders", { shard_id: cmd.shard, leader: cmd.node });
        }
      } catch (err) {
        // A stale move (the meta state changed since the pass) or a lost leadership: the next
        // pass starts from the state as it is then.
        log.debug("allocator proposal refused; the next pass decides again", {
          op: cmd.op,
          error: err instanceof Error ? err.message : String(err),
        });
      }
    }
    return committed;
  }
}
