/**
 * `cairn cluster`'s picture of a cluster with more nodes than the replication factor. Each node's
 * view (Meta.WatchCluster) lists every shard where the meta group places it, but knows the leader
 * of a shard only when it holds one of its replicas: about 3/n of the shards on n nodes. The
 * command asks the other members for theirs and puts them together here: each shard as the view
 * that knows most about it shows it.
 */
import type { ClusterView, MemberInfo, ShardInfo } from "../client/index.ts";

/** A view and the member that answered it ("" when the answering node is not known). */
export interface AnsweredView {
  readonly node: string;
  readonly view: ClusterView;
}

/**
 * The members whose views know leaders `view` does not: every other member that may hold
 * replicas (active or decommissioning) and gossip has alive; none when `view` knows every leader.
 */
export function membersToAsk(view: ClusterView, answered: string): MemberInfo[] {
  if (view.shards.every((s) => s.leader !== "")) return [];
  return view.nodes.filter(
    (n) =>
      n.id !== answered &&
      n.rpcAddr !== "" &&
      n.state === "alive" &&
      (n.memberState === "active" || n.memberState === "decommissioning"),
  );
}

/**
 * `first` with each shard taken from the view that knows most about it: the highest term, then a
 * known leader over none, then the leader's own view (its replicas are the group's latest).
 * Members and the rest are `first`'s.
 */
export function mergeViews(first: AnsweredView, others: readonly AnsweredView[]): ClusterView {
  const best = new Map<number, { shard: ShardInfo; rank: number }>();
  for (const { node, view } of [first, ...others]) {
    for (const s of view.shards) {
      const rank = s.term * 4 + (s.leader === "" ? 0 : s.leader === node ? 2 : 1);
      const was = best.get(s.id);
      if (was === undefined || rank > was.rank) best.set(s.id, { shard: s, rank });
    }
  }
  const shards = [...best.values()].map((b) => b.shard).sort((a, b) => a.id - b.id);
  return { ...first.view, shards };
}

/** How many of `view`'s shards each member leads, as the view knows it. */
export function leaderCounts(view: ClusterView): Map<string, number> {
  const counts = new Map<string, number>();
  for (const s of view.shards) {
    if (s.leader !== "") counts.set(s.leader, (counts.get(s.leader) ?? 0) + 1);
  }
  return counts;
}
