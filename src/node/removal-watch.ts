/**
 * A decommissioned member that is still running learns from its peers that it was removed, and
 * stops (etcd's removed member does the same). Once decommissioned it no longer follows the meta
 * group (it holds no replica of shard 0), so its own meta state can never show the removal:
 * every few seconds it reads the cluster view of a few live peers (Meta.WatchCluster, as the
 * meta leader's duplicate-id probe does), and a view lists every member but removed ones.
 *
 * The rule (removedByViews): the member is removed when at least one peer of its cluster
 * answered with a view, none of the views lists it, and, with two live peers or more, at least
 * two answered. A peer that refuses views (joining, or decommissioned itself) says nothing. A
 * mistaken verdict could only stop a decommissioned node, which serves nothing.
 *
 * A member still `decommissioning` in its own state asks too: the meta leader removes a
 * decommissioned member's learner of the meta group right after it commits `decommissioned`,
 * and a node cut off in between (a pause, a partition) never learns that commit; it would serve
 * on, on a view frozen there, and never stop once removed. The views tell it
 * (decommissionedByViews, by the same count of answers as removedByViews): every view that
 * answered lists it `decommissioned`, or not at all. `decommissioned` ends a member's life
 * (only `removed` follows), so a view from a committed state that says so cannot be undone.
 */
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

/** The live peers a check asks: up to REMOVAL_PROBES gossip members alive, other than `self`. */
export function peersToAsk(
  self: string,
  members: readonly MemberView[],
): { id: string; rpcAddr: string }[] {
  return members
    .filter((m) => m.state === "alive" && m.meta.id !== self)
    .slice(0, REMOVAL_PROBES)
    .map((m) => ({ id: m.meta.id, rpcAddr: m.meta.rpcAddr }));
}
