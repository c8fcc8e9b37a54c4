/**
 * A group's leader makes its group's members what the meta group says (design.md §5.1, §5.2;
 * src/node/cluster.ts), one membership change at a time, each pass starting from what the
 * group's configuration is now (so a crash at any step resumes where it stood):
 *
 *   0. a created shard whose group no replica opened yet (the request that created it never
 *      reached one of its replicas, or it was moved before any did) is opened by its initial
 *      voters: the first-ranked leads it as a request would have made it, and takes the steps
 *      below (without a leader, nothing would re-replicate it when its voters fail);
 *   1. remove a retired replica (its node rejoined with a wiped data directory; the group runs
 *      on its other voters meanwhile);
 *   2. add each of the shard's nodes' current replica that the group lacks, as a learner (the
 *      leader refills it by log or snapshot);
 *   3. promote a learner once it holds the whole committed log, while its node is alive (a dead
 *      voter added could leave the group without a majority alive);
 *   4. once every node of the shard has a voter, remove the members the shard no longer has
 *      (a move's old replica): learners first, then voters, a dead one first, a live one only
 *      when the voters left keep a majority alive (another failure mid-move may otherwise leave
 *      the group without a quorum it had). An old voter of the meta group (shard 0) on a member
 *      that keeps a learner of it (step 5) is demoted to learner instead (add-learner on a voter,
 *      one change: the member's replica goes on following the group; from cluster version 4). The leader never removes
 *      or demotes itself:
 *      it hands leadership to the first of the shard's nodes whose voter holds the whole log
 *      (and is alive, when the caller knows), which removes it; with none such it keeps leading
 *      and serving (a handover to a dead node would refuse the shard's requests until the meta
 *      group redirects the move, up to `cluster.dead_after_ms`). The group never has
 *      fewer caught-up voters than the shard has nodes, so a move never drops below a quorum;
 *   5. the meta group (shard 0) also keeps a learner on every other member that is joining,
 *      active or decommissioning: a member learns the cluster's state from its log;
 *   6. a move whose group now has exactly the shard's nodes as voters is settled in the meta
 *      group (settle-shard), which lets the allocator start the next one.
 *
 * Safety rests on Raft's membership changes: the new replica never votes nor counts toward a
 * commit before the promotion commits, and it never speaks as the old replica (messages for it
 * are dropped, MultiRaft.receive). A leader whose meta state is behind the group (a member it
 * knows neither as current nor as retired) changes nothing until it catches up. Nor does a
 * leader whose meta state may be older than a placement its group's earlier leaders acted on
 * (LeaderMetaCheck below): such a leader knows every member, yet would undo a settled move
 * (add the old replica back as a learner, promote it, remove the new one), and the old node,
 * whose meta state says the move settled, would then delete a replica the group counts as a
 * voter (replica-gc.ts).
 */
import type { ConfChange } from "../raft/index.ts";
import { nodeId } from "../raft/index.ts";
import { isMetaHolder, type MetaState, nodeOfReplica, VERSION_DEMOTION } from "../cluster/index.ts";
import type { MultiRaft } from "../replication/index.ts";

/** Membership changes started per pass. */
const CHANGES_PER_PASS = 32;

export interface GroupMembers {
  readonly voters: readonly string[];
  readonly learners: readonly string[];
}

/** What a group's leader does next (nextReplicaChange). */
export type ReplicaStep =
  | ConfChange
  /** Hand leadership to replica `to`: this leader's node is leaving the shard. */
  | { readonly type: "transfer"; readonly to: string }
  /** The group's voters are the shard's nodes: settle the move in the meta group. */
  | { readonly type: "settle"; readonly nodes: readonly string[] };

/**
 * The next step shard `shard`'s group needs so that its voters are the current replicas of the
 * shard's nodes, or null when none (or when this meta state is behind the group). `self` is the
 * leader's replica; `caughtUp` tells whether a member holds the whole committed log; `alive`,
 * whether a node is alive by gossip (unknown: taken as alive).
 */
export function nextReplicaChange(
  meta: MetaState,
  shard: number,
  self: string,
  group: GroupMembers,
  caughtUp: (replica: string) => boolean,
  alive: (node: string) => boolean = () => true,
): ReplicaStep | null {
  const nodes = meta.nodesOf(shard);
  if (nodes.length === 0) return null;
  const targets = nodes.map((n) => meta.replicaOf(n));
  const members = [...group.voters, ...group.learners];
  const current = (replica: string): boolean => meta.replicaOf(nodeOfReplica(replica)) === replica;
  if (members.some((m) => !current(m) && !meta.isRetired(m))) return null;
  const retired = members.find((m) => meta.isRetired(m) && m !== self);
  if (retired !== undefined) return { type: "remove", node: nodeId(retired) };
  for (const replica of targets) {
    if (!members.includes(replica)) return { type: "add-learner", node: nodeId(replica) };
  }
  // A learner whose node gossip has not alive waits (the allocator redirects the move once the
  // member is dead): its match index stays at the commit index while the shard is idle, and
  // promoted, a dead voter may leave no majority alive (a repair's learner dying beside the dead
  // voter it replaces: two of four alive, the group without a quorum for good). A live learner
  // promoted never does.
  const ready = group.learners.find(
    (l) => targets.includes(l) && caughtUp(l) && alive(nodeOfReplica(l)),
  );
  if (ready !== undefined) return { type: "add-voter", node: nodeId(ready) };
  // Steps 4 to 6 wait until every node of the shard has a caught-up voter.
  if (targets.some((t) => !group.voters.includes(t))) return null;
  const metaLearner = (replica: string): boolean =>
    shard === 0 && isMetaHolder(meta.stateOf(nodeOfReplica(replica)));
  const oldLearner = group.learners.find((l) => !targets.includes(l) && !metaLearner(l));
  if (oldLearner !== undefined) return { type: "remove", node: nodeId(oldLearner) };
  // A dead old voter goes first, and a live one only if the voters left keep a majority alive.
  // (Removing the first old voter: a move redirected after its new node died had five voters,
  // two of them down; removing a live one left two of four alive, and the group no quorum.)
  const oldVoters = group.voters.filter((v) => !targets.includes(v));
  const isAlive = (replica: string): boolean => alive(nodeOfReplica(replica));
  const oldVoter = oldVoters.find((v) => v !== self && !isAlive(v)) ?? oldVoters[0];
  if (oldVoter !== undefined) {
    if (isAlive(oldVoter)) {
      const left = group.voters.filter((v) => v !== oldVoter);
      if (left.filter(isAlive).length * 2 <= left.length) return null;
    }
    // The meta group's voter on a member that keeps a learner of it (step 5) is demoted, in one
    // change: removed and added back a pass later, the member's copy of the cluster's metadata
    // stopped following the group in between (its Admin calls, synced through it, timed out).
    // Not before every member's build applies a demotion (VERSION_DEMOTION).
    if (oldVoter !== self) {
      const demote = metaLearner(oldVoter) && meta.version >= VERSION_DEMOTION;
      return { type: demote ? "add-learner" : "remove", node: nodeId(oldVoter) };
    }
    // (Driver simulation seed 90199: the first node died for good mid-move; its replica, still
    // a voter, was asked to lead again and again while the leader refused the shard's reads.)
    const to = targets.find(
      (t) => group.voters.includes(t) && caughtUp(t) && alive(nodeOfReplica(t)),
    );
    return to === undefined ? null : { type: "transfer", to };
  }
  if (shard === 0) {
    for (const [id, m] of meta.members) {
      if (!isMetaHolder(m.state ?? "active")) continue;
      const replica = meta.replicaOf(id);
      if (!members.includes(replica)) return { type: "add-learner", node: nodeId(replica) };
    }
  }
  return meta.isMoving(shard) ? { type: "settle", nodes } : null;
}

/** What replaceReplicas does with the steps that are not membership changes. */
export interface ReplicaEffects {
  /** Proposes settle-shard for `shard` to the meta group. */
  settle(shard: number, nodes: readonly string[]): Promise<void>;
  /**
   * A step of `shard` succeeded: its next step may be ready now (a learner added is promoted
   * once caught up, a promotion lets the old replica go), so the caller may pass again soon
   * rather than at its next tick.
   */
  stepped?(shard: number, step: ReplicaStep): void;
  /**
   * `shard`, led here, has no step to take now but a learner to promote once it catches up (a
   * move's, or a wiped node's new replica): the caller may pass again shortly to promote it
   * once it has, rather than at its next tick.
   */
  waiting?(shard: number): void;
  /** `shard` has nothing under way here: no step to take, no learner to wait for, or no lead. */
  idle?(shard: number): void;
  /**
   * Whether the meta state this pass reads is known to hold every placement the group's earlier
   * leaders acted on, `term` being the leader's (LeaderMetaCheck.fresh); when false the group
   * takes no step this pass. Absent: always.
   */
  metaFresh?(shard: number, term: number): boolean;
  /**
   * Tests only (CAIRN_TESTING_MOVE_STEP_HOLD_MS): a group waits this long after each step
   * before its next one, so that a test can crash a node at a chosen step of a move.
   */
  readonly holdAfterStepMs?: number;
}

/**
 * One pass over the groups led here (or over `only` of them): starts the next step of each that
 * needs one (at most one under way per group). Returns how many it started. First, opens the
 * group of a created shard that may never have started, where this node is one of its initial
 * voters (step 0 below).
 */
export function replaceReplicas(
  store: MultiRaft,
  meta: MetaState | null,
  underWay: Set<number>,
  onError: (shard: number, err: unknown) => void,
  effects?: ReplicaEffects,
  alive?: (node: string) => boolean,
  only?: Iterable<number>,
): number {
  if (meta === null || meta.clusterId === null) return 0;
  // A created shard whose group no replica opened (the request that created it never reached
  // one) has no leader: nothing re-replicates it when its voters fail, nothing moves it. Its
  // initial voters here open it (MultiRaft.startGroup; the next pass finds it led). A pass
  // over `only` (the moving shards, between ticks) looks at those.
  for (const id of only ?? meta.shards.keys()) {
    store.startGroup(id)?.catch((err: unknown) => onError(id, err));
  }
  let started = 0;
  for (const id of only ?? store.shardIds()) {
    if (started >= CHANGES_PER_PASS) break;
    if (underWay.has(id)) continue;
    const info = store.leads(id) ? store.shardInfo(id) : null;
    if (info === null || info.role !== "leader") {
      effects?.idle?.(id);
      continue;
    }
    // Passed again once the sync that makes it fresh is done (LeaderMetaCheck's onSynced).
    if (effects?.metaFresh?.(id, info.term) === false) continue;
    const step = nextReplicaChange(
      meta,
      id,
      store.replicaId,
      info,
      (r) => store.isCaughtUp(id, r),
      alive,
    );
    if (step === null) {
      // A move, or the replacement of a wiped node's replica, waits here for its learner to
      // catch up (or for a node to come back).
      if (meta.isMoving(id) || hasLearnerToPromote(meta, id, info)) effects?.waiting?.(id);
      else effects?.idle?.(id);
      continue;
    }
    let work: Promise<void>;
    if (step.type === "transfer") work = store.transferLeader(id, step.to);
    else if (step.type === "settle") {
      if (effects === undefined) continue;
      work = effects.settle(id, step.nodes);
    } else work = store.changeMembership(id, step, info); // refused if `info` is stale by then
    started++;
    underWay.add(id);
    const hold = effects?.holdAfterStepMs ?? 0;
    work
      .then(
        async () => {
          effects?.stepped?.(id, step);
          if (hold > 0) await new Promise((resolve) => setTimeout(resolve, hold));
          underWay.delete(id);
        },
        (err: unknown) => {
          underWay.delete(id);
          onError(id, err);
        },
      )
      .catch((err: unknown) => onError(id, err));
  }
  return started;
}

/** Whether `group` has a learner that is one of `shard`'s placed replicas (to be promoted). */
function hasLearnerToPromote(meta: MetaState, shard: number, group: GroupMembers): boolean {
  if (group.learners.length === 0) return false;
  return meta.nodesOf(shard).some((n) => group.learners.includes(meta.replicaOf(n)));
}

/**
 * Which groups led here may take membership steps on this node's meta state (ReplicaEffects.
 * metaFresh). A node's meta state may lag the meta group by any time: a node restarted on an
 * old state, or cut off from the meta group's leader while its shards' peers still reach it.
 * A group's earlier leader may have acted on a newer one: moved the shard and had the move
 * settled. The new leader, on the old state, would see the shard settled on its old nodes
 * and move it back (helper review of 2026-12-06: a replica-GC pass on the old node then deleted
 * a voter of the group, leaving it one failure from no quorum). So a leader takes its first step
 * in a term only after a sync of its meta state (a ReadIndex of shard 0, MultiRaft.syncMeta)
 * that began after it was seen leading in that term: every meta command committed before its
 * election, every placement its group's earlier leaders acted on among them, is then in its
 * state. One sync serves every group waiting; a node leading hundreds of shards after a restart
 * syncs once. Bounded: one record a shard (total_shards), one sync in flight.
 */
export class LeaderMetaCheck {
  readonly #sync: () => Promise<void>;
  readonly #onSynced: () => void;
  readonly #onError: (err: unknown) => void;
  readonly #now: () => number;
  /** The term a group was last seen led here in, and when it was first seen so. */
  readonly #seen = new Map<number, { term: number; at: number }>();
  /** When the last sync that completed began (-Infinity: none yet). */
  #syncedFrom = -Infinity;
  #syncing = false;

  constructor(options: {
    /** Brings this node's meta state up to the meta group's commit. */
    sync: () => Promise<void>;
    /** A sync completed: groups waiting for it may take their steps (pass again). */
    onSynced: () => void;
    /** A sync failed (the meta group unreachable): the next pass asks again. */
    onError: (err: unknown) => void;
    now?: () => number;
  }) {
    this.#sync = options.sync;
    this.#onSynced = options.onSynced;
    this.#onError = options.onError;
    this.#now = options.now ?? (() => performance.now());
  }

  /** Whether group `shard`, led here in `term`, may take a step; false starts a sync. */
  fresh(shard: number, term: number): boolean {
    let seen = this.#seen.get(shard);
    if (seen === undefined || seen.term !== term) {
      seen = { term, at: this.#now() };
      this.#seen.set(shard, seen);
    }
    if (this.#syncedFrom >= seen.at) return true;
    this.#request();
    return false;
  }

  /**
   * Starts a sync unless one is under way. One that began before a group was seen leading does
   * not serve it: its completion passes again, and that pass asks for another.
   */
  #request(): void {
    if (this.#syncing) return;
    this.#syncing = true;
    const from = this.#now();
    this.#sync().then(
      () => {
        this.#syncing = false;
        if (from > this.#syncedFrom) this.#syncedFrom = from;
        this.#onSynced();
      },
      (err: unknown) => {
        this.#syncing = false;
        this.#onError(err);
      },
    );
  }
}
