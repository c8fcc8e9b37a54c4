/**
 * The allocator (design.md §5.2): what the meta group's leader proposes so that every shard
 * lives on `replication_factor` active members and every active member holds its share. A pure
 * function of the committed meta state and of what this node's gossip sees; it only *proposes*
 * (the meta group commits, and refuses a stale move), so a leader change or two allocators
 * racing cannot place a shard twice.
 *
 * One pass, in order (a pass that changes a member's state proposes only that: the next one moves
 * replicas on the state it made):
 *   1. members' lives: a `joining` member whose copy of the meta group caught up becomes
 *      `active` while gossip has it alive; a `joining` or `active` member gossip has had unreachable for
 *      `cluster.dead_after_ms` becomes `dead`, and a `dead` one seen alive again `active` (it
 *      comes back empty of moved replicas); a `decommissioning` member that holds no replica,
 *      once no move is under way, becomes `decommissioned`. A `decommissioning` member stays
 *      so however long it is unreachable (CockroachDB keeps a node's decommissioning apart from
 *      its liveness): its replicas move off it all the same, it is decommissioned once none is
 *      left, and should it come back first, its decommission goes on (as `dead`, it came back
 *      `active`, the operator's decommission forgotten; from cluster version 2 the meta group
 *      refuses the `dead` this step proposed on a state where the member was still active,
 *      should a decommission commit first: VERSION_DECOMMISSION_STAYS);
 *   2. repairs: a shard with a replica on a member that is not active (dead, decommissioning,
 *      decommissioned, removed) gets an active member in its place, at the same rank (or loses
 *      it, when no member can take it and the shard keeps `replication_factor` replicas
 *      without it: a meta group founded on more members); a shard with fewer replicas than its
 *      factor gets one more. A shard never shrinks below the factor: a 3-member cluster
 *      cannot decommission one of them (the move waits for a fourth member). The shards with
 *      the fewest copies running (on members gossip has alive) go first: a dead member's
 *      before a decommission's;
 *   3. balance: while the most loaded active member holds more than `tolerance` replicas above
 *      the least loaded (and at least two: one apart, a move only swaps them, so 0 acts as 1),
 *      one of its shards moves to that member (shard 0, the meta group, is repaired but not
 *      balanced).
 * A member whose disk is nearly full (`diskFull`, which it reports itself) is no repair's or
 * balancing move's target, nor the "least loaded" of step 3 (and the meta group refuses a
 * move onto it proposed before its mark committed); its replicas stay, and it may still be
 * the most loaded one, which gives some away.
 * At most `maxMoves` shards move at once (moves under way included): each move is a snapshot
 * sent, and foreground traffic keeps its share of the disk and the network. Balancing moves are
 * also paced (`balanceMoves`, from `cluster.rebalance.moves_per_minute`): a new replica costs
 * every node CPU (the snapshot built, sent and installed, the group's membership changes, a
 * fourth copy's rounds), and spreading load can wait where a repair cannot (CockroachDB's
 * rebalance and recovery snapshot rates; PD's store limit in TiKV, operations a minute).
 *
 *   4. leaders, once no replica moves nor waits for the pace or a move slot: evenLeaders
 *      (below), within the same `tolerance`. With balancing stopped (`max_moves` or
 *      `moves_per_minute` 0) no move waits: the leaders are evened on the placement as it is.
 *
 * A move needs its group's leader, so a quorum of the group's voters alive: no move starts on
 * a shard fewer than half of whose nodes gossip has alive (when settled, its nodes are its
 * group's voters), nor onto a member gossip does not have alive. Before, two members dead at
 * once gave the shards holding both a repair each, in shard order, that could never finish:
 * they took every move slot, and the hundreds of shards that had lost one replica were never
 * repaired (a helper review of 2026-12-06). Such a shard stays under-replicated until one of
 * its nodes comes back. A move that began before its group lost its quorum cannot finish
 * either: one the allocator loop has seen under way, unchanged, for STALLED_AFTER_MS (`stalled`)
 * no longer takes a move slot, nor holds back the leaders' evening; up to `maxMoves` of them,
 * so that no more than twice `maxMoves` shards ever move at once (a big shard's move, whose
 * snapshot takes longer than that at the byte rate, goes unchanged as long).
 * A replacement keeps the rank of the replica it replaces, so a shard's preferred leader (its
 * first-ranked node) moves with it; rendezvous ranks spread leaders only about evenly, which
 * step 4 mends.
 */
import type { MemberState, MetaCommand, MetaState } from "./meta.ts";
import { rendezvousWeight, VERSION_MOVE_ORIGIN } from "./meta.ts";

export interface AllocatorInput {
  readonly meta: MetaState;
  /** Members gossip has had unreachable (not alive) for at least `cluster.dead_after_ms`. */
  readonly unreachableLong: ReadonlySet<string>;
  /** Members gossip has alive now. */
  readonly alive: ReadonlySet<string>;
  /** Whether a joining member's replica of the meta group holds its whole committed log. */
  readonly caughtUp: (node: string) => boolean;
  /** Shards moving at once, at most (moves under way count). */
  readonly maxMoves: number;
  /**
   * Balancing moves (step 3) this pass may start, at most, within `maxMoves`: the loop's pace
   * (`cluster.rebalance.moves_per_minute`). Repairs are not paced by it.
   */
  readonly balanceMoves: number;
  /**
   * Balancing moves are stopped (`moves_per_minute` 0), not waiting for the pace: no balancing
   * move will ever come, so none holds back the leaders' evening (step 4), as with `maxMoves`
   * 0. Absent: false.
   */
  readonly balancingStopped?: boolean;
  /** Replicas (and leaders) the most loaded active member may hold above the least loaded. */
  readonly tolerance: number;
  /**
   * Moving shards whose move has not changed for STALLED_AFTER_MS (AllocatorLoop): most likely
   * their group lost its quorum. They take no move slot, up to `maxMoves` of them. Absent: none.
   */
  readonly stalled?: ReadonlySet<number>;
}

/** How long a move goes unchanged before it no longer takes a move slot (`stalled`). */
export const STALLED_AFTER_MS = 10 * 60_000;

/**
 * Whether `cmd` is a balancing move (step 3): one active member's replica handed to another,
 * the shard's size unchanged. Anything else a pass moves is a repair.
 */
export function isBalancingMove(meta: MetaState, cmd: MetaCommand): boolean {
  return (
    cmd.op === "move-shard" &&
    cmd.nodes.length === cmd.from.length &&
    cmd.from.every((n) => meta.stateOf(n) === "active")
  );
}

/** The commands this pass proposes, in order (each valid against `meta` alone). */
export function allocate(input: AllocatorInput): MetaCommand[] {
  const { meta } = input;
  if (meta.clusterId === null) return [];
  const out: MetaCommand[] = [];
  out.push(...lives(input));
  // A member's state changes first: the moves are the next pass's, on the state they make (a
  // move onto a member this pass marks dead, or off one it marks active, was refused or wasted).
  if (out.length > 0) return out;
  const shards = [...meta.shards.keys()].sort((a, b) => a - b);
  const moving = movingNotStalled(input);
  // A stalled move frees its slot, but the moves under way never pass twice maxMoves: a move
  // unchanged for STALLED_AFTER_MS may just be slow (a big shard's snapshot at the byte rate,
  // shared with the other moves' snapshots). Without the bound, each STALLED_AFTER_MS let
  // maxMoves more start beside such moves, each slower for the others', without end.
  let budget = Math.min(input.maxMoves - moving, 2 * input.maxMoves - meta.movingCount());
  const active = meta.activeMembers();
  if (active.length === 0) return out;
  // A member whose disk is nearly full takes no new replica (it may still give some away), nor
  // does one gossip does not have alive (its learner would not catch up).
  const roomy = meta.roomyMembers().filter((id) => input.alive.has(id));
  // How many of a shard's nodes gossip has alive: its copies that run.
  const running = (nodes: readonly string[]): number =>
    nodes.filter((n) => input.alive.has(n)).length;
  // A move needs its group's leader (see the module comment).
  const led = (shard: number): boolean => {
    const nodes = meta.nodesOf(shard);
    return running(nodes) * 2 > nodes.length;
  };
  // Active members only: a replica on any other is a repair's to move, not a load to even.
  const counts = meta.replicaCounts();
  const load = new Map(active.map((id) => [id, counts.get(id) ?? 0]));
  // The meta group keeps the voters it was founded with (more than the factor when founded on
  // more members) and grows to the factor when founded on fewer.
  const factor0 = Math.max(meta.shards.get(0)?.length ?? 1, meta.replicationFactor);
  const wantOf = (shard: number): number =>
    Math.min(shard === 0 ? factor0 : meta.replicationFactor, active.length);

  // 2. Repairs. None is needed (the common case, looked at without going over every shard)
  // when every member holding a replica is active and every shard is placed on its factor.
  const wantMost = Math.min(meta.replicationFactor, active.length);
  const needsRepair =
    [...counts].some(([id, n]) => n > 0 && meta.stateOf(id) !== "active") ||
    meta.fewestReplicas() < wantMost ||
    (meta.shards.has(0) && meta.nodesOf(0).length < Math.min(factor0, active.length));
  // The shards whose copies that run are the fewest short of their factor go first: a dead
  // member's shards (two copies of three run) before a decommission's (three run, one of them
  // on the member leaving). In shard order, a decommission under way when a member died took
  // half of the move slots, and the dead member's shards stayed a failure away from losing
  // their quorum twice as long. Likewise, within a shard, a node that does not run is replaced
  // before one that is leaving.
  const urgency = (shard: number): number => wantOf(shard) - running(meta.nodesOf(shard));
  for (const shard of needsRepair ? mostUrgentFirst(shards, urgency) : []) {
    const nodes = meta.nodesOf(shard);
    const inactive = nodes.filter((n) => meta.stateOf(n) !== "active");
    const bad = inactive.find((n) => !input.alive.has(n)) ?? inactive[0];
    // A move under way is left to finish, unless its new node is gone too (a learner that
    // will never catch up): it is redirected, in the slot it already holds.
    const underWay = meta.isMoving(shard);
    if (underWay && bad === undefined) continue;
    if (budget <= 0 && !underWay) continue;
    if (!underWay && !led(shard)) continue;
    const want = wantOf(shard);
    // A shard on active members only, at its factor, needs no repair (the common case).
    if (bad === undefined && nodes.length >= want) continue;
    const spare = bestSpare(shard, nodes, roomy, load);
    let next: string[] | null = null;
    if (bad !== undefined && spare !== undefined) {
      next = nodes.map((n) => (n === bad ? spare : n));
    } else if (bad !== undefined && nodes.length - 1 >= Math.max(want, meta.replicationFactor)) {
      // No member to take it, and the shard keeps its factor without it (the meta group,
      // founded on more members than the factor): it shrinks.
      next = nodes.filter((n) => n !== bad);
    } else if (bad === undefined && nodes.length < want && spare !== undefined) {
      next = [...nodes, spare];
    }
    if (next === null) continue;
    out.push({ op: "move-shard", shard, from: nodes, nodes: next });
    if (spare !== undefined && next.includes(spare)) load.set(spare, (load.get(spare) ?? 0) + 1);
    if (bad !== undefined && load.has(bad)) load.set(bad, (load.get(bad) ?? 0) - 1);
    if (!underWay) budget--;
  }

  // 3. Balance, only once nothing needs repair (a repair already moves toward balance).
  if (out.some((c) => c.op === "move-shard")) return out;
  const moved = new Set<number>();
  const roomySet = new Set(roomy);
  budget = Math.min(budget, input.balanceMoves);
  // A balancing move the pace (or a full set of move slots) holds back for now: the rebalance
  // is not over.
  let heldBack = false;
  for (;;) {
    const byLoad = [...load.entries()].sort((a, b) => a[1] - b[1] || cmp(a[0], b[0]));
    const least = byLoad.find(([id]) => roomySet.has(id));
    const most = byLoad[byLoad.length - 1];
    // One apart, a move would only swap the two (and the next pass swap them back): a
    // tolerance of 0 acts as 1.
    const spread = most === undefined || least === undefined ? 0 : most[1] - least[1];
    if (least === undefined || most === undefined || spread <= Math.max(1, input.tolerance)) break;
    const shard = shards.find((s) => {
      if (s === 0 || moved.has(s) || meta.isMoving(s)) return false;
      const nodes = meta.nodesOf(s);
      return nodes.includes(most[0]) && !nodes.includes(least[0]) && led(s);
    });
    if (shard === undefined) break;
    if (budget <= 0) {
      // Not with max_moves 0 nor moves_per_minute 0: every balancing move is stopped, not
      // waiting, and leaders are evened on the placement as it is. (With moves_per_minute 0 the
      // leaders of a cluster whose replicas were not even were never evened: the pace held
      // every pass's balancing move back for good.)
      heldBack = input.maxMoves > 0 && input.balancingStopped !== true;
      break;
    }
    const nodes = meta.nodesOf(shard);
    out.push({
      op: "move-shard",
      shard,
      from: nodes,
      nodes: nodes.map((n) => (n === most[0] ? least[0] : n)),
    });
    moved.add(shard);
    load.set(most[0], most[1] - 1);
    load.set(least[0], least[1] + 1);
    budget--;
  }

  // 4. Leaders, once no replica moves nor waits to (a leadership handed over pauses the shard's
  // writes for a moment: not on top of a rebalance's snapshots; and leaders evened between two
  // paced moves would be evened on a placement the next moves change again).
  if (out.some((c) => c.op === "move-shard") || moving > 0 || heldBack) return out;
  out.push(...evenLeaders(input, shards));
  return out;
}

/** prefer-leader commands a pass proposes at most (each a leadership transfer). */
const LEADER_MOVES_PER_PASS = 16;

/**
 * Step 4: while an alive active member with room leads more than `tolerance` shards above
 * another (0 acts as 1; by MetaState.leaderWanted), one of its shards records one of its other
 * replicas that leads fewer by more than that as preferred leader (nextLeaderMove); leader
 * spreading (src/node/cluster.ts) then hands the leadership over. Not shard 0 (the meta group's
 * leader moves only with its replicas), nor a shard whose preferred leader an operator set
 * (Admin.TransferLeader records the same prefer-leader: the choice stands, so the allocator's own
 * are never moved again either; a shard's first-ranked replica leads the rest).
 */
function evenLeaders(input: AllocatorInput, shards: readonly number[]): MetaCommand[] {
  const { meta } = input;
  const counted = new Set(
    meta.roomyMembers().filter((id) => input.alive.has(id) && !input.unreachableLong.has(id)),
  );
  const leads = new Map([...counted].map((id) => [id, 0]));
  // The shards each counted member should lead, whose leadership it may hand over.
  const ledBy = new Map<string, number[]>();
  for (const shard of shards) {
    const leader = meta.leaderWanted(shard);
    if (leader === undefined || !leads.has(leader)) continue;
    leads.set(leader, (leads.get(leader) ?? 0) + 1);
    const nodes = meta.nodesOf(shard);
    const chosen = meta.leaders.get(shard);
    if (shard === 0 || (chosen !== undefined && nodes.includes(chosen))) continue;
    const led = ledBy.get(leader);
    if (led === undefined) ledBy.set(leader, [shard]);
    else led.push(shard);
  }
  const tolerance = Math.max(1, input.tolerance);
  const out: MetaCommand[] = [];
  const done = new Set<number>();
  while (out.length < LEADER_MOVES_PER_PASS) {
    const next = nextLeaderMove(meta, leads, ledBy, done, tolerance);
    if (next === undefined) break;
    out.push({ op: "prefer-leader", shard: next.shard, node: next.to });
    done.add(next.shard);
    leads.set(next.from, (leads.get(next.from) ?? 0) - 1);
    leads.set(next.to, (leads.get(next.to) ?? 0) + 1);
  }
  return out;
}

/**
 * The next leadership evenLeaders hands over: a shard of the member that leads the most, to the
 * replica of it that leads the fewest, more than `tolerance` fewer. When that member has no such
 * shard, the next one down gives one, and so on while one leads more than `tolerance` above the
 * member that leads the fewest. Before, only the member that leads the most and the one that
 * leads the fewest were paired: on many members a shard's other replicas are a few of many, the
 * latter often held none of the former's shards, and the evening stopped there (30 members:
 * leaders 25 to 41 apart with a tolerance of 2, while the others could take some).
 */
function nextLeaderMove(
  meta: MetaState,
  leads: ReadonlyMap<string, number>,
  ledBy: ReadonlyMap<string, readonly number[]>,
  done: ReadonlySet<number>,
  tolerance: number,
): { shard: number; from: string; to: string } | undefined {
  const byCount = [...leads.entries()].sort((a, b) => b[1] - a[1] || cmp(a[0], b[0]));
  const fewest = byCount[byCount.length - 1]?.[1] ?? 0;
  for (const [from, count] of byCount) {
    // No member from here down leads more than `tolerance` above the one that leads the fewest.
    if (count - fewest <= tolerance) return undefined;
    let best: { shard: number; to: string; leads: number } | undefined;
    for (const shard of ledBy.get(from) ?? []) {
      if (done.has(shard)) continue;
      for (const to of meta.nodesOf(shard)) {
        const n = leads.get(to);
        if (n === undefined || count - n <= tolerance) continue;
        if (best === undefined || n < best.leads || (n === best.leads && cmp(to, best.to) < 0)) {
          best = { shard, to, leads: n };
        }
      }
    }
    if (best !== undefined) return { shard: best.shard, from, to: best.to };
  }
  return undefined;
}

/** `shards` by `urgency`, the highest first, in shard order among equals. */
function mostUrgentFirst(shards: readonly number[], urgency: (shard: number) => number): number[] {
  return shards
    .map((shard) => ({ shard, urgency: urgency(shard) }))
    .sort((a, b) => b.urgency - a.urgency || a.shard - b.shard)
    .map((s) => s.shard);
}

/** Moves under way that take a move slot: those not `stalled`. */
function movingNotStalled(input: AllocatorInput): number {
  const stalled = input.stalled;
  const shards = input.meta.movingShards();
  return stalled === undefined ? shards.length : shards.filter((s) => !stalled.has(s)).length;
}

/**
 * Step 1: the members' state changes this pass proposes. From VERSION_MOVE_ORIGIN on, each
 * names the state it changes from: applied on a newer state (a retry after an unknown outcome,
 * a new meta leader's first pass on a state behind its log), it is refused rather than undo
 * what was committed meanwhile (an operator's decommission).
 */
function lives(input: AllocatorInput): MetaCommand[] {
  const { meta } = input;
  const out: MetaCommand[] = [];
  const named = meta.version >= VERSION_MOVE_ORIGIN;
  // A member a move under way may still need as a voter stays decommissioning (the meta group
  // refuses it otherwise, from VERSION_MOVE_ORIGIN on; before, no move may be under way).
  const needed = (id: string): boolean =>
    named ? meta.movingOff(id) !== undefined : meta.movingCount() > 0;
  const counts = meta.replicaCounts();
  const change = (id: string, from: MemberState, state: MemberState): MetaCommand =>
    named ? { op: "set-state", id, state, from } : { op: "set-state", id, state };
  for (const id of [...meta.members.keys()].sort(cmp)) {
    const state = meta.stateOf(id);
    const gone = input.unreachableLong.has(id);
    // Caught up and alive now: one that caught up and then stopped would be handed moves it
    // never runs (they stall until it is marked dead); it waits, and goes dead if it stays away.
    if (state === "joining" && input.alive.has(id) && !gone && input.caughtUp(id)) {
      out.push(change(id, state, "active"));
    } else if ((state === "joining" || state === "active") && gone) {
      out.push(change(id, state, "dead"));
    } else if (state === "dead" && input.alive.has(id) && !gone) {
      out.push(change(id, state, "active"));
    } else if (state === "decommissioning" && counts.get(id) === 0 && !needed(id)) {
      out.push(change(id, state, "decommissioned"));
    }
  }
  return out;
}

/**
 * The member of `candidates` (active, with room) to add to `shard`: not one of its nodes, the
 * fewest replicas, then the highest rendezvous weight for the shard (so equal loads spread
 * alike on every pass).
 */
function bestSpare(
  shard: number,
  nodes: readonly string[],
  candidates: readonly string[],
  load: ReadonlyMap<string, number>,
): string | undefined {
  let best: { id: string; load: number; weight: bigint } | undefined;
  for (const id of candidates) {
    if (nodes.includes(id)) continue;
    const l = load.get(id) ?? 0;
    const weight = rendezvousWeight(shard, id);
    if (
      best === undefined ||
      l < best.load ||
      (l === best.load && (weight > best.weight || (weight === best.weight && id < best.id)))
    ) {
      best = { id, load: l, weight };
    }
  }
  return best?.id;
}

function cmp(a: string, b: string): number {
  return a < b ? -1 : a > b ? 1 : 0;
}
