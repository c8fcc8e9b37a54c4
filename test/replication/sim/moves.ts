/**
 * Replica moves in the driver simulation (design.md §5.2): what a seed with four or five nodes
 * does to its cluster's membership, and the checks that hold a move to its contract.
 *
 * Such a seed founds its cluster on three members (replication factor 3) and, during the chaos,
 * admits the other nodes (`join`; the allocator makes each `active` once its copy of the meta
 * group caught up and moves replicas onto it), then takes some members away: `decommission`
 * (every replica moves off, the ones it leads among them, and the node stops once
 * `decommissioned`) or `kill` (the node stops for good; the allocator marks it `dead` after
 * `dead_after` and re-replicates its shards; the operator may then `remove` it). At most
 * nodes − 3 members leave, so that every shard can end on three active members. Moves under way
 * are struck: their source, destination, group leader or the meta leader (where the allocator
 * runs) crashes and restarts mid-move.
 *
 * What moves the replicas is the product's code, as a node runs it every 2 s
 * (src/node/node.ts #startUpkeep): the allocator loop on the meta leader
 * (src/node/allocator-loop.ts, src/cluster/allocator.ts) proposes MetaState commands, and every
 * group's leader takes the next step `nextReplicaChange` names (src/node/replicas.ts) through
 * the driver's conf changes, leadership transfers and settle-shard proposals.
 *
 * Checked, beside linearizability, liveness and restarts:
 *   - at every conf change a group's leader applies: its voters are on distinct nodes, and a
 *     quorum of them is caught up (CaughtUpLedger);
 *   - after the chaos and a settle period: every shard has exactly `replication_factor` voters,
 *     the current replicas of its meta record's nodes, each on a distinct active member; no
 *     learner is left but the meta group's; no move is pending (placementProblems).
 *
 * Caveats: the meta group is modelled, not run: a command commits when its proposal lands
 * (after a simulated delay, unless the proposing process died first, or could not reach the
 * meta leader), and each node applies it a little later, or, cut off from the meta leader or
 * down, once it reaches it again (its own lagging copy; simulator.ts); shard 0 is an ordinary
 * group here. "Caught up" is what the leaders' progress said at some pass since the replica
 * joined its group (match ≥ commit), not at the instant of the change.
 */
import type { Rng } from "../../../src/common/rng.ts";
import { isMetaHolder, type MetaState, nodeOfReplica } from "../../../src/cluster/index.ts";

/** A member leaves: decommissioned, or stopped for good (then dead, perhaps removed). */
export type LeaveKind = "decommission" | "kill";

export interface MoveProfile {
  /** cluster.dead_after_ms, shortened to the simulation's few seconds. */
  readonly deadAfterMs: number;
  /** cluster.rebalance.max_moves. */
  readonly maxMoves: number;
  /** cluster.rebalance.tolerance. */
  readonly tolerance: number;
  /** Simulated ms from the chaos's start at which each node beyond the founding three joins. */
  readonly joinAt: readonly number[];
  /** The members that leave, and from when (a leave waits until enough members are active). */
  readonly leaves: readonly { readonly kind: LeaveKind; readonly at: number }[];
  /** Mean simulated ms between strikes on a move under way (Infinity: none). */
  readonly strikeEveryMs: number;
  /** Simulated ms a meta proposal takes to commit: 1..this. */
  readonly commitMs: number;
  /** Simulated ms a node takes to apply a committed meta command: 0..this. */
  readonly applyLagMs: number;
}

/** The founding members of a seed with moves; the others join. */
export const FOUNDERS = 3;

/** Draws what a seed with `nodes` nodes (4 or 5) does to its membership in `chaosMs`. */
export function drawMoveProfile(rng: Rng, nodes: number, chaosMs: number): MoveProfile {
  const third = Math.max(1, Math.floor(chaosMs / 3));
  const joinAt = Array.from({ length: nodes - FOUNDERS }, () => 20 + rng.int(third));
  const leaves = Array.from({ length: rng.int(nodes - FOUNDERS + 1) }, () => ({
    kind: (rng.int(2) === 0 ? "decommission" : "kill") as LeaveKind,
    at: third + rng.int(third),
  }));
  return {
    deadAfterMs: [300, 600, 1000][rng.int(3)] as number,
    maxMoves: 1 + rng.int(4),
    tolerance: [0, 1, 2][rng.int(3)] as number,
    joinAt,
    leaves,
    strikeEveryMs: [100, 300, Infinity][rng.int(3)] as number,
    commitMs: [2, 10, 40][rng.int(3)] as number,
    applyLagMs: [0, 10, 100][rng.int(3)] as number,
  };
}

/** What a group's leader reports of its group (MultiRaft.shardInfo). */
export interface LeaderView {
  readonly term: number;
  readonly voters: readonly string[];
  readonly learners: readonly string[];
}

/**
 * Per shard, the replicas that have held their group's whole committed log (by a leader's
 * progress) since they last joined it, and are not being refilled: the voters a quorum may be
 * counted on. Fed by every leader's view at each upkeep pass; a leader of an older term than one
 * already seen is not listened to (its configuration may be behind).
 */
export class CaughtUpLedger {
  readonly #caughtUp = new Map<number, Set<string>>();
  readonly #term = new Map<number, number>();

  /** A group founded with `voters`: each holds the (empty) log. */
  found(shard: number, voters: readonly string[]): void {
    this.#caughtUp.set(shard, new Set(voters));
  }

  /** What shard `shard`'s leader sees now. */
  note(shard: number, leader: LeaderView, isCaughtUp: (replica: string) => boolean): void {
    if (leader.term < (this.#term.get(shard) ?? 0)) return;
    this.#term.set(shard, leader.term);
    let set = this.#caughtUp.get(shard);
    if (set === undefined) this.#caughtUp.set(shard, (set = new Set()));
    const members = [...leader.voters, ...leader.learners];
    for (const r of set) if (!members.includes(r)) set.delete(r);
    for (const r of members) if (isCaughtUp(r)) set.add(r);
  }

  /** `replica` lost its copy (its shard directory, being refilled). */
  lost(shard: number, replica: string): void {
    this.#caughtUp.get(shard)?.delete(replica);
  }

  /**
   * What is wrong with the configuration `voters` a leader of term `term` just applied, or null:
   * two voters on one node, or fewer caught-up voters than a quorum.
   */
  check(shard: number, term: number, voters: readonly string[]): string | null {
    const nodes = new Set(voters.map(nodeOfReplica));
    if (nodes.size !== voters.length) {
      return `shard ${shard}'s voters ${voters.join(",")} put two replicas on one node`;
    }
    if (term < (this.#term.get(shard) ?? 0)) return null;
    const set = this.#caughtUp.get(shard) ?? new Set<string>();
    const caughtUp = voters.filter((v) => set.has(v));
    const quorum = Math.floor(voters.length / 2) + 1;
    if (caughtUp.length >= quorum) return null;
    return `shard ${shard}'s voters ${voters.join(",")} (term ${term}) count ${caughtUp.length} caught up (${caughtUp.join(",") || "none"}), fewer than a quorum of ${quorum}`;
  }
}

/**
 * What keeps the cluster from its settled placement, or [] when it is there: for every shard
 * in the meta record, `leaderOf(shard)` (its group's leader's view, or null when none is
 * known) has exactly the current replicas of the shard's nodes as voters, each node an active
 * member, the shard's factor of them; no learner but the meta group's holders; no move pending.
 * A shard no node opened (no client touched it) and that no move names is left out.
 */
export function placementProblems(
  meta: MetaState,
  leaderOf: (shard: number) => LeaderView | null,
  opened: (shard: number) => boolean,
): string[] {
  const problems: string[] = [];
  const factor0 = meta.shards.get(0)?.length ?? meta.replicationFactor;
  for (const shard of [...meta.shards.keys()].sort((a, b) => a - b)) {
    const nodes = meta.nodesOf(shard);
    if (meta.isMoving(shard)) problems.push(`shard ${shard}: its move to ${nodes} is pending`);
    const want = shard === 0 ? factor0 : meta.replicationFactor;
    if (nodes.length !== want) problems.push(`shard ${shard}: ${nodes.length} nodes, not ${want}`);
    const inactive = nodes.filter((n) => meta.stateOf(n) !== "active");
    if (inactive.length > 0) {
      problems.push(
        `shard ${shard}: on ${inactive.map((n) => `${n} (${meta.stateOf(n)})`).join(", ")}`,
      );
    }
    if (!opened(shard)) continue;
    const leader = leaderOf(shard);
    if (leader === null) {
      problems.push(`shard ${shard}: no leader`);
      continue;
    }
    const targets = nodes.map((n) => meta.replicaOf(n)).sort();
    const voters = [...leader.voters].sort();
    if (JSON.stringify(voters) !== JSON.stringify(targets)) {
      problems.push(`shard ${shard}: voters ${voters.join(",")}, the meta record ${targets}`);
    }
    // The meta group keeps a learner on every other member that holds a copy of it.
    const holds = (replica: string): boolean =>
      shard === 0 &&
      isMetaHolder(meta.stateOf(nodeOfReplica(replica))) &&
      meta.replicaOf(nodeOfReplica(replica)) === replica;
    const stray = leader.learners.filter((l) => !holds(l));
    if (stray.length > 0) problems.push(`shard ${shard}: learners ${stray.join(",")} left`);
    if (shard === 0) {
      const missing = [...meta.members.keys()]
        .filter((id) => isMetaHolder(meta.stateOf(id)))
        .map((id) => meta.replicaOf(id))
        .filter((r) => !leader.voters.includes(r) && !leader.learners.includes(r));
      if (missing.length > 0) problems.push(`shard 0: no copy on ${missing.join(",")}`);
    }
  }
  return problems;
}
