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
  const views = answers.filter(
    (a): a is ViewAnswer & { members: readonly string[] } =>
      a !== undefined && a.clusterId === clusterId && a.members !== undefined,
  );
  if (views.length === 0 || views.length < Math.min(2, asked)) return false;
  return views.every((v) => !v.members.includes(self));
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
