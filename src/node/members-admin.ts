/**
 * Admin's member calls in cluster mode (design.md §5.2). DecommissionNode, RecommissionNode and
 * RemoveNode each propose the member's next state to the meta group, which refuses a change a
 * member's life does not allow (CAIRN_ERR_INVALID_ARGUMENT naming why); GetNode answers the
 * standing and changes nothing. Decommissioning is refused up front when it would leave fewer
 * active members than the replication factor, or fewer with room on their disk (`set-disk`): its
 * replicas would have nowhere to go, and the move would wait until a member is added or a disk
 * freed. Recommissioning cancels a decommission under way (CockroachDB's `node recommission`):
 * the member is active again, the moves that already took replicas off it stand, and the
 * allocator evens replicas back onto it; once the member is decommissioned it has left the meta
 * group and comes back only as a new member (an empty data directory, under its id or another).
 *
 * The up-front check reads the meta state before the proposal, and the meta group's rules do not
 * repeat it (a rule of its own would be a new cluster version): two decommissions at once could
 * each pass it and together leave too few active members, and neither could then finish. So a
 * node runs its decommissions one at a time, and once one applied it checks again: if another
 * node's decommission ran at the same time and the two leave too few, it cancels its own
 * (recommission) and refuses, CAIRN_ERR_PRECONDITION, saying so. (Both may cancel; never
 * neither. A cancel that fails is refused the same way, saying the member may still be
 * decommissioning, not as the cancel's retryable failure.)
 */
import type { MemberAdmin, NodeStanding } from "../api/index.ts";
import type { MemberState, MetaState } from "../cluster/index.ts";
import { CairnError, NotMemberError } from "../common/errors.ts";
import { type ClusterState, errorCodeOf, proposalFailure } from "./cluster.ts";

/** How long a member call waits for the meta group. */
const PROPOSE_TIMEOUT_MS = 10_000;

/**
 * `syncMeta` brings this node's copy of the meta group up to the group's commit (a ReadIndex of
 * shard 0, MultiRaft.syncMeta): every call decides on the meta state as committed, not as this
 * node applied it so far. (On a node that trailed, RecommissionNode right after a decommission
 * found the member still `active` and answered so, changing nothing: chaos seeds 6005–6007.)
 */
export function memberAdmin(
  cluster: ClusterState,
  syncMeta: () => Promise<void> = () => Promise.resolve(),
): MemberAdmin {
  const metaNow = (): MetaState => {
    const meta = cluster.meta;
    if (meta === null || meta.clusterId === null) {
      throw new CairnError("CAIRN_ERR_NOT_READY", "this node has not joined its cluster yet", {
        retryable: true,
      });
    }
    // Decommissioned (or removed), this node left the meta group: its state stopped there, and
    // a sync through its replica of the group never ends (the call waited PROPOSE_TIMEOUT_MS,
    // then timed out, retryable, as though the meta group were slow). Another member answers.
    if (cluster.staleViewReason() !== null) {
      throw new NotMemberError(cluster.notServingReason() ?? "this node left its cluster", true);
    }
    return meta;
  };
  const synced = async (): Promise<MetaState> => {
    metaNow();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () =>
          reject(
            new CairnError(
              "CAIRN_ERR_TIMEOUT",
              `the meta group did not confirm its state within ${PROPOSE_TIMEOUT_MS} ms`,
              { retryable: true },
            ),
          ),
        PROPOSE_TIMEOUT_MS,
      );
    });
    try {
      await Promise.race([syncMeta(), late]);
    } finally {
      clearTimeout(timer);
    }
    return metaNow();
  };
  const standingOf = (node: string): NodeStanding => {
    const meta = metaNow();
    return { state: meta.stateOf(node) ?? "", replicas: meta.replicaCounts().get(node) ?? 0 };
  };
  /**
   * Proposes member `node`'s state `to`, and answers its standing with it: the proposal resolves
   * once the meta leader applied it, which this node's copy of the meta group may not have yet
   * (it answered a recommission through another node "decommissioning").
   */
  const setState = async (node: string, to: MemberState): Promise<NodeStanding> => {
    await proposeState(node, to);
    return { ...standingOf(node), state: to };
  };
  /** Proposes member `node`'s state `to`; a failure as the CairnError the call answers. */
  const proposeState = async (node: string, to: MemberState): Promise<void> => {
    try {
      await cluster.propose({ op: "set-state", id: node, state: to }, PROPOSE_TIMEOUT_MS);
    } catch (err) {
      throw proposalFailure(err, `record member ${node} as ${to}`);
    }
  };
  /** Why decommissioning `node` leaves too few members for its replicas, or null. */
  const tooFewLeft = (meta: MetaState, node: string): string | null => {
    const left = meta.activeMembers().filter((n) => n !== node).length;
    if (left < meta.replicationFactor) {
      return `decommissioning ${node} would leave ${left} active member(s) for replication factor ${meta.replicationFactor}: its replicas would have nowhere to go; add a member first`;
    }
    const roomy = meta.roomyMembers().filter((n) => n !== node);
    if (roomy.length < meta.replicationFactor) {
      const full = meta
        .activeMembers()
        .filter((n) => n !== node && !roomy.includes(n))
        .join(", ");
      return `decommissioning ${node} would leave ${roomy.length} active member(s) with room on their disk for replication factor ${meta.replicationFactor} (full: ${full}; cluster.disk_full_percent): its replicas would have nowhere to go; free disk or add a member first`;
    }
    return null;
  };
  /** The decommission this node is running; the next waits for it. */
  let decommissioning: Promise<unknown> = Promise.resolve();
  const decommission = async (node: string): Promise<NodeStanding> => {
    const meta = await synced();
    known(meta, node);
    const state = meta.stateOf(node);
    if (state === "active") {
      const why = tooFewLeft(meta, node);
      if (why !== null) throw new CairnError("CAIRN_ERR_PRECONDITION", why);
      const standing = await setState(node, "decommissioning");
      const after = await synced();
      // Those that began decommissioning since this one's check: active then. One may be
      // decommissioned already (it held no replica: the allocator's next pass ends it), or
      // even removed since; it left all the same.
      const others = [...after.members.keys()]
        .filter((n) => n !== node && meta.stateOf(n) === "active" && isLeaving(after.stateOf(n)))
        .join(", ");
      const now = after.stateOf(node) === "decommissioning" ? tooFewLeft(after, node) : null;
      if (now !== null && others !== "") {
        const why = `${now} (${others} began decommissioning at the same time)`;
        try {
          await proposeState(node, "active");
        } catch (err) {
          // Not the cancel's own failure, retryable: a client retrying the decommission would
          // find the member decommissioning and call it under way, too few left.
          throw new CairnError(
            "CAIRN_ERR_PRECONDITION",
            `${why}; cancelling ${node}'s decommission failed (${err instanceof Error ? err.message : String(err)}): ${node} may still be decommissioning; run \`cairn node recommission ${node}\``,
            { cause: err },
          );
        }
        throw new CairnError(
          "CAIRN_ERR_PRECONDITION",
          `${why}; ${node}'s decommission was cancelled: it is active again`,
        );
      }
      return standing;
    } else if (state !== "decommissioning" && state !== "decommissioned") {
      throw new CairnError(
        "CAIRN_ERR_INVALID_ARGUMENT",
        `member ${node} is ${state ?? "unknown"}: only an active member can be decommissioned`,
      );
    }
    return standingOf(node);
  };
  const known = (meta: MetaState, node: string): void => {
    if (meta.stateOf(node) === undefined) {
      // The members, and apart the ids retired for good (the meta state keeps their records).
      const ids = [...meta.members.keys()];
      const removed = ids.filter((n) => meta.stateOf(n) === "removed");
      const members = ids.filter((n) => !removed.includes(n)).join(", ");
      const retired = removed.length === 0 ? "" : ` (removed: ${removed.join(", ")})`;
      throw new CairnError(
        "CAIRN_ERR_INVALID_ARGUMENT",
        `${JSON.stringify(node)} is not a member of the cluster; its members are ${members}${retired}`,
      );
    }
  };
  return {
    decommission(node) {
      const run = decommissioning.then(
        () => decommission(node),
        () => decommission(node),
      );
      decommissioning = run.catch(() => undefined);
      return run;
    },
    async recommission(node) {
      const meta = await synced();
      known(meta, node);
      const state = meta.stateOf(node);
      if (state === "decommissioning") {
        return setState(node, "active");
      } else if (state !== "active") {
        throw new CairnError("CAIRN_ERR_INVALID_ARGUMENT", notRecommissioned(node, state));
      }
      return standingOf(node);
    },
    async standing(node) {
      known(await synced(), node);
      return standingOf(node);
    },
    async remove(node) {
      const meta = await synced();
      known(meta, node);
      if (meta.stateOf(node) !== "removed") {
        try {
          return await setState(node, "removed");
        } catch (err) {
          // Refused by the meta group (whose state this node's may trail by a moment): what to
          // do, by the state here, in place of the meta group's words.
          const now = metaNow();
          const why = notRemovable(node, now.stateOf(node), now.replicaCounts().get(node) ?? 0);
          if (errorCodeOf(err) !== "CAIRN_ERR_INVALID_ARGUMENT" || why === null) throw err;
          throw new CairnError("CAIRN_ERR_INVALID_ARGUMENT", why, { cause: err });
        }
      }
      return standingOf(node);
    },
  };
}

/** Whether a member in `state` is leaving, or has left, by a decommission. */
function isLeaving(state: MemberState | undefined): boolean {
  return state === "decommissioning" || state === "decommissioned" || state === "removed";
}

/** Why member `node`, in `state` (not decommissioning or active), cannot be recommissioned. */
function notRecommissioned(node: string, state: string | undefined): string {
  const why =
    state === "decommissioned"
      ? "its decommission is complete and it has left the meta group; start it on an empty data directory to join again as a new member under its id (or retire it: cairn node remove)"
      : state === "dead"
        ? "it becomes active again by itself once it is reachable (before cairn node remove)"
        : state === "joining"
          ? "it becomes active by itself once it has caught up on the meta group"
          : state === "removed"
            ? "it was retired for good; a node on an empty data directory may join under its id as a new member"
            : "only a decommissioning member can be recommissioned";
  return `member ${node} is ${state ?? "unknown"}: ${why}`;
}

/**
 * Why member `node`, in `state` with `replicas` placed on it, cannot be removed yet, or null when
 * it can (decommissioned, or dead and holding none). The meta group refused it in its own words
 * (TRANSITIONS, and no replica left); these say what to do.
 */
function notRemovable(node: string, state: string | undefined, replicas: number): string | null {
  switch (state) {
    case "active":
      return `member ${node} is active: decommission it first (cairn node decommission ${node} --wait), or, if its machine is gone for good, it becomes dead once unreachable for cluster.dead_after_ms and can be removed once its replicas are re-created elsewhere`;
    case "joining":
      return `member ${node} is joining: stop it; once unreachable for cluster.dead_after_ms it is dead, and can be removed`;
    case "decommissioning":
      return `member ${node} is still decommissioning, ${replicas} replica(s) left: remove it once it is decommissioned (cairn node decommission ${node} --wait)`;
    case "dead":
      return replicas === 0
        ? null
        : `member ${node} is dead and ${replicas} shard(s) are still placed on it, being re-created on the other members (cairn_cluster_shards_underreplicated): remove it once none is left (a shard never shrinks below its replication factor: with no active member to take them, add one)`;
    default:
      return null;
  }
}
