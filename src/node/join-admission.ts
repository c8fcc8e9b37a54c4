/**
 * How many nodes the meta group's leader lets in at once (design.md §5.2): the bound on the
 * members table, which the network feeds. A node that is not a member yet asks to join with one
 * peer call (cairn.v1.Raft ProposeMeta, the one call taken from a non-member), and each member it
 * adds is a learner of the meta group, which its leader then replicates to. Nothing bounded them:
 * a runaway autoscaler, pods started with random names, or anything that reaches a node's port
 * with the cluster id and no peer TLS could add members without end, each a learner the meta
 * leader sends its log to.
 *
 * Two bounds, checked by the node that proposes the admission (the meta leader, where peers
 * propose meta commands), before it proposes:
 *
 * - at most `cluster.max_joining` members `joining` at once (etcd's `--max-learners`): a join past
 *   it is refused, retryably, and the node asks again (every 2 s) until one of those before it is
 *   `active` (or, stopped before that, `dead`);
 * - at most MAX_MEMBERS members recorded, removed ones aside: a join of a new id past it, or
 *   of a removed member's new life (a member again), is refused until the operator removes
 *   members.
 *
 * Admissions in flight count too (a flood of concurrent joins, each checked before any applies,
 * would otherwise all fit). The check is the proposer's, not the state machine's: every build
 * applies a join the same way, so replicas of different builds in a rolling restart never
 * disagree about the members. A node that is already a member offering its join again (it asks
 * until it hears the answer) is not a new admission and is never refused here.
 */
import { type MetaCommand, type MetaState, startsNewLife } from "../cluster/index.ts";
import { CairnError } from "../common/errors.ts";

/**
 * The most members a cluster records (removed ones aside): a join of a new id, or a removed
 * member's new life, past it is refused.
 */
export const MAX_MEMBERS = 1024;

/** The refusal's code (retryable: the node joining asks again). */
export const MEMBER_LIMIT = "CAIRN_ERR_MEMBER_LIMIT";

export class JoinAdmission {
  readonly #maxJoining: number;
  readonly #maxMembers: number;
  /** Admissions being proposed now, by node id: whether each adds a member (a new id). */
  readonly #pending = new Map<string, boolean>();

  constructor(maxJoining: number, maxMembers = MAX_MEMBERS) {
    this.#maxJoining = maxJoining;
    this.#maxMembers = maxMembers;
  }

  /** Admissions being proposed now (for tests). */
  get pending(): number {
    return this.#pending.size;
  }

  /**
   * Makes room for `cmd` when it would make a node `joining` (a join of a new id, or a join or
   * rejoin that starts a decommissioned or removed member's new life), and returns what to call
   * once its proposal has settled; throws CAIRN_ERR_MEMBER_LIMIT (retryable) when there is no
   * room. Any other command, or one the meta group would not count as an admission, passes.
   */
  admit(meta: MetaState | null, cmd: MetaCommand): () => void {
    const pass = (): void => undefined;
    if (meta === null || meta.clusterId === null) return pass;
    if (cmd.op !== "join" && cmd.op !== "rejoin") return pass;
    const id = cmd.op === "join" ? cmd.member.id : cmd.id;
    const incarnation = cmd.op === "join" ? cmd.member.incarnation : cmd.incarnation;
    const previous = meta.members.get(id);
    // A new id (a join only: the meta group refuses a rejoin of one), or a new life.
    const newId = previous === undefined && cmd.op === "join";
    const newLife =
      previous !== undefined && incarnation !== undefined && startsNewLife(previous, incarnation);
    if (!newId && !newLife) return pass;
    // Whether it adds a member to the count: a new id, or a removed member's new life (removed
    // ones are not counted; a decommissioned one's is counted already).
    const adds = newId || previous?.state === "removed";
    // The same node asking again while its first offer is still being proposed.
    if (this.#pending.has(id)) return pass;
    let joining = this.#pending.size;
    let members = 0;
    for (const m of meta.members.values()) {
      if (m.state === "joining") joining++;
      if (m.state !== "removed") members++;
    }
    for (const addsMember of this.#pending.values()) if (addsMember) members++;
    if (joining >= this.#maxJoining) {
      throw new CairnError(
        MEMBER_LIMIT,
        `${joining} node(s) are joining the cluster already, at most ${this.#maxJoining} at once (cluster.max_joining): ${id} is admitted once one of them is active`,
        { retryable: true },
      );
    }
    if (adds && members >= this.#maxMembers) {
      throw new CairnError(
        MEMBER_LIMIT,
        `the cluster has ${members} members, at most ${this.#maxMembers}: remove dead or decommissioned members (cairn node remove) before ${id} may join`,
        { retryable: true },
      );
    }
    this.#pending.set(id, adds);
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#pending.delete(id);
    };
  }
}
