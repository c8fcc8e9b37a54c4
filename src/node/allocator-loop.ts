/**
 * Runs the allocator (src/cluster/allocator.ts) on the node that leads the meta group: each
 * pass feeds it the committed meta state and this node's gossip view, and proposes what it
 * returns, one command after the other. A pass while the previous one's proposals are still
 * under way does nothing, so at most one batch is in flight.
 *
 * `cluster.dead_after_ms` is counted from the last time this node's gossip had the member
 * alive, and never from before this node took the meta group's leadership or first saw the
 * member: a new leader does not inherit its predecessor's clocks, so it waits a whole
 * `dead_after_ms` before it marks any member dead (a member marked dead too late costs time;
 * too early, a needless move), and a member just admitted gets as long to show up alive.
 */
import { allocate, type MetaCommand, type MetaState } from "../cluster/index.ts";
import type { Logger } from "../ops/index.ts";

export interface AllocatorHost {
  readonly nodeId: string;
  readonly deadAfterMs: number;
  readonly maxMoves: number;
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
  /** When gossip last had each member alive (performance.now()), since this node leads. */
  readonly #lastAlive = new Map<string, number>();
  #busy = false;

  constructor(host: AllocatorHost) {
    this.#host = host;
  }

  /** One pass; `now` is performance.now() (tests pass their own). */
  pass(now = performance.now()): void {
    const host = this.#host;
    const meta = host.meta();
    if (meta === null || meta.clusterId === null || !host.leadsMeta()) {
      this.#lastAlive.clear();
      return;
    }
    const alive = host.alive();
    for (const id of meta.members.keys()) {
      // A member's clock starts when this leader first sees it (a new leader, a new member).
      if (alive.has(id) || id === host.nodeId || !this.#lastAlive.has(id))
        this.#lastAlive.set(id, now);
    }
    const unreachableLong = new Set(
      [...meta.members.keys()].filter(
        (id) => now - (this.#lastAlive.get(id) ?? now) >= host.deadAfterMs,
      ),
    );
    if (this.#busy) return;
    const cmds = allocate({
      meta,
      unreachableLong,
      alive,
      caughtUp: (node) => host.metaCaughtUp(node),
      maxMoves: host.maxMoves,
      tolerance: host.tolerance,
    });
    if (cmds.length === 0) return;
    this.#busy = true;
    void this.#proposeAll(cmds).then((committed) => {
      this.#busy = false;
      if (committed > 0) this.#host.proposed?.();
    });
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
