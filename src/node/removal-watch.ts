/**
 * A decommissioned member that is still running learns from its peers that it was removed, and
 * stops (etcd's removed member does the same). Once decommissioned it no longer follows the meta
 * group (it holds no replica of shard 0), so its own meta state can never show the removal:
 * every few seconds it reads the cluster view of a few live peers (Meta.WatchCluster, as the
 * meta leader's duplicate-id probe does), and a view lists every member but removed ones.
 *
 * The rule (removedByViews): the member is removed when at least one peer of its cluster
 * answered with a view, none of the views lists it, and, with two live peers or more, at least
 * two answered. A peer that refuses views (joining, or decommissioned itself) says nothing: a check
 * asks first the members its state has serving views (peersToAsk), and one that got too few views
 * asks the next peers in that order. A mistaken verdict could only stop a decommissioned node,
 * which serves nothing.
 *
 * So does, for a minute, a member back from a pause of `cluster.dead_after_ms` or longer (a
 * frozen VM, SIGSTOP): it may have been marked dead and removed meanwhile, which its own state,
 * out of the meta group once dead, never shows. (Caveat: one that ran on, cut off from its peers'
 * gossip, has no live peer to ask, and does not learn it.)
 *
 * A member still `decommissioning` in its own state asks too: the meta leader removes a
 * decommissioned member's learner of the meta group right after it commits `decommissioned`,
 * and a node cut off in between (a pause, a partition) never learns that commit; it would serve
 * on, on a view frozen there, and never stop once removed. The views tell it
 * (decommissionedByViews, by the same count of answers as removedByViews): every view that
 * answered lists it `decommissioned`, or not at all. `decommissioned` ends a member's life
 * (only `removed` follows), so a view from a committed state that says so cannot be undone.
 */
import type { MemberState } from "../cluster/index.ts";
import type { MemberView } from "../membership/index.ts";

/** How often a decommissioned node reads its peers' views. */
export const REMOVAL_CHECK_MS = 5_000;
/** Peers asked per check at most. */
export const REMOVAL_PROBES = 3;

/** What a probe of a peer's view tells of its cluster (MemberProbe, from probeMember). */
export interface ViewAnswer {
  /** Its cluster's id, "" when it has none. */
  readonly clusterId: string;
  /**
   * The member ids its view lists; absent when it streams no view (joining, or decommissioned:
   * it names itself in its refusal).
   */
  readonly members?: readonly string[];
  /** The members its view lists as `decommissioned`. */
  readonly decommissioned?: readonly string[];
}

/**
 * Whether `answers` (of the `asked` peers probed) show member `self` of cluster `clusterId`
 * removed: see the module's rule.
 */
export function removedByViews(
  self: string,
  clusterId: string,
  asked: number,
  answers: readonly (ViewAnswer | undefined)[],
): boolean {
  const views = enoughViews(clusterId, asked, answers);
  return views !== null && views.every((v) => !v.members.includes(self));
}

/**
 * Whether `answers` (of the `asked` peers probed) show member `self` of cluster `clusterId`
 * decommissioned (or removed): see the module's rule.
 */
export function decommissionedByViews(
  self: string,
  clusterId: string,
  asked: number,
  answers: readonly (ViewAnswer | undefined)[],
): boolean {
  const views = enoughViews(clusterId, asked, answers);
  return (
    views !== null &&
    views.every((v) => !v.members.includes(self) || (v.decommissioned ?? []).includes(self))
  );
}

/**
 * The views of cluster `clusterId` among `answers`, or null when too few answered to judge: none,
 * or one when two peers or more were asked.
 */
function enoughViews(
  clusterId: string,
  asked: number,
  answers: readonly (ViewAnswer | undefined)[],
): (ViewAnswer & { members: readonly string[] })[] | null {
  const views = answers.filter(
    (a): a is ViewAnswer & { members: readonly string[] } =>
      a !== undefined && a.clusterId === clusterId && a.members !== undefined,
  );
  return views.length === 0 || views.length < Math.min(2, asked) ? null : views;
}

/**
 * Whether `answers` (of the `asked` peers probed) hold enough views of cluster `clusterId` to judge
 * by (removedByViews, decommissionedByViews): a check that had too few asks other peers next.
 */
export function answeredEnough(
  clusterId: string,
  asked: number,
  answers: readonly (ViewAnswer | undefined)[],
): boolean {
  return enoughViews(clusterId, asked, answers) !== null;
}

/**
 * How likely a member is to answer with a view, by this node's meta state (`stateOf`; undefined
 * for a member it does not know, one that joined after its state): active and decommissioning
 * members stream views; a joining, decommissioned or removed one refuses them, and a dead one
 * rarely answers.
 */
function viewRank(state: MemberState | undefined): number {
  switch (state) {
    case "active":
    case "decommissioning":
      return 0;
    case undefined:
      return 1;
    case "joining":
    case "dead":
      return 2;
    case "decommissioned":
    case "removed":
      return 3;
  }
}

/**
 * The live peers a check asks: up to REMOVAL_PROBES gossip members alive, other than `self`, those
 * likeliest to answer with a view first (viewRank by `stateOf`), in id order within a rank. `turn`
 * (the checks since one last had enough views) moves the window along that order, so that peers
 * that never answer (decommissioned since this node's state was taken) do not hold every check.
 */
export function peersToAsk(
  self: string,
  members: readonly MemberView[],
  stateOf: (id: string) => MemberState | undefined = () => undefined,
  turn = 0,
): { id: string; rpcAddr: string }[] {
  const alive = members
    .filter((m) => m.state === "alive" && m.meta.id !== self)
    .map((m) => ({
      id: m.meta.id as string,
      rpcAddr: m.meta.rpcAddr,
      rank: viewRank(stateOf(m.meta.id)),
    }))
    .sort((a, b) => a.rank - b.rank || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  if (alive.length <= REMOVAL_PROBES) return alive.map(({ id, rpcAddr }) => ({ id, rpcAddr }));
  const start = (turn * REMOVAL_PROBES) % alive.length;
  const picked = [...alive.slice(start), ...alive.slice(0, start)].slice(0, REMOVAL_PROBES);
  return picked.map(({ id, rpcAddr }) => ({ id, rpcAddr }));
}
