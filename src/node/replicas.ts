/**
 * Replica replacement after a rejoin (design.md §5.1; src/node/cluster.ts). When a node whose
 * data directory was wiped comes back, the meta group records its new incarnation and retires the
 * old one. Each group it replicates still lists the old replica, which will never answer again;
 * the group's leader replaces it, one membership change at a time:
 *
 *   1. remove the retired replica (the group runs on its other voters meanwhile);
 *   2. add the node's current replica as a learner (the leader refills it by log or snapshot);
 *   3. promote the learner once it holds the whole committed log.
 *
 * Safety rests on Raft's membership changes: the new replica never votes nor counts toward a
 * commit before the promotion commits, and it never speaks as the old replica (messages for it
 * are dropped, MultiRaft.receive). A leader whose meta state is behind the group (a member it
 * knows neither as current nor as retired) changes nothing until it catches up.
 */
import type { ConfChange } from "../raft/index.ts";
import { nodeId } from "../raft/index.ts";
import { type MetaState, nodeOfReplica } from "../cluster/index.ts";
import type { MultiRaft } from "../replication/index.ts";

/** Membership changes started per pass. */
const CHANGES_PER_PASS = 32;

export interface GroupMembers {
  readonly voters: readonly string[];
  readonly learners: readonly string[];
}

/**
 * The next membership change shard `shard`'s group needs so that its voters are the current
 * replicas of the shard's nodes, or null when none (or when this meta state is behind the
 * group). `self` is the leader's replica (never removed here); `caughtUp` tells whether a
 * learner holds the whole committed log.
 */
export function nextReplicaChange(
  meta: MetaState,
  shard: number,
  self: string,
  group: GroupMembers,
  caughtUp: (replica: string) => boolean,
): ConfChange | null {
  const nodes = meta.nodesOf(shard);
  if (nodes.length === 0) return null;
  const members = [...group.voters, ...group.learners];
  const current = (replica: string): boolean => meta.replicaOf(nodeOfReplica(replica)) === replica;
  if (members.some((m) => !current(m) && !meta.isRetired(m))) return null;
  const retired = members.find((m) => meta.isRetired(m) && m !== self);
  if (retired !== undefined) return { type: "remove", node: nodeId(retired) };
  for (const n of nodes) {
    const replica = meta.replicaOf(n);
    if (!members.includes(replica)) return { type: "add-learner", node: nodeId(replica) };
  }
  const ready = group.learners.find((l) => nodes.includes(nodeOfReplica(l)) && caughtUp(l));
  return ready === undefined ? null : { type: "add-voter", node: nodeId(ready) };
}

/**
 * One pass over the groups led here: starts the next replica change of each that needs one
 * (at most one under way per group). Returns how many changes it started.
 */
export function replaceReplicas(
  store: MultiRaft,
  meta: MetaState | null,
  underWay: Set<number>,
  onError: (shard: number, err: unknown) => void,
): number {
  if (meta === null || meta.clusterId === null) return 0;
  let started = 0;
  for (const id of store.shardIds()) {
    if (started >= CHANGES_PER_PASS) break;
    if (underWay.has(id) || !store.leads(id)) continue;
    const info = store.shardInfo(id);
    if (info === null || info.role !== "leader") continue;
    const change = nextReplicaChange(meta, id, store.replicaId, info, (r) =>
      store.isCaughtUp(id, r),
    );
    if (change === null) continue;
    started++;
    underWay.add(id);
    store
      .changeMembership(id, change)
      .catch((err: unknown) => onError(id, err))
      .finally(() => underWay.delete(id));
  }
  return started;
}
