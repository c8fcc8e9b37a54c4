/**
 * The members a node's own meta state records, for the membership to join and re-contact
 * through besides `cluster.seed_nodes` (MembershipOptions.recorded). A member restarted
 * gracefully (SIGTERM: a rolling restart) announced its leave: its peers hold it `left` and never
 * probe it again, so it comes back into gossip only through a full-state exchange it starts. The
 * seeds alone were not enough: after the runbook's decommission and removal of the first seeds,
 * they name no live member (or another cluster's nodes), the member stayed out of gossip for
 * good while it served, and the meta group marked it dead after `cluster.dead_after_ms` and
 * re-created its replicas elsewhere.
 *
 * Listed: every member the meta state records but this node and those that left for good
 * (decommissioned, removed: hasLeftForGood), at the `rpc_addr` recorded for it (SWIM's UDP runs
 * on the RPC port number); the serving ones first (active, decommissioning), then those joining,
 * then the rest (dead). None before this node knows its cluster (a new node: the seeds only).
 * What keeps a node that left for good out is unchanged: the meta group refuses its rejoin
 * (CAIRN_ERR_NODE_REMOVED, CAIRN_ERR_NODE_DECOMMISSIONED) and its peers' views stop a removed
 * member that runs (ClusterState.removalLoop); gossip lets no member into the meta group.
 */
import type { MetaState } from "../cluster/index.ts";
import type { RecordedMember } from "../membership/index.ts";
import { hasLeftForGood } from "./replica-gc.ts";

export function recordedMembers(meta: MetaState | null, self: string): RecordedMember[] {
  if (meta === null || meta.clusterId === null) return [];
  const rank = (id: string): number => {
    const state = meta.stateOf(id);
    return state === "active" || state === "decommissioning" ? 0 : state === "joining" ? 1 : 2;
  };
  return [...meta.members.values()]
    .filter((m) => m.id !== self && !hasLeftForGood(meta, m.id) && m.rpcAddr !== "")
    .sort((a, b) => rank(a.id) - rank(b.id))
    .map((m) => ({ id: m.id, rpcAddr: m.rpcAddr }));
}
