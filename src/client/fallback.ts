/**
 * Where a call goes when it is not routed to a leader: before the first view, for a shard whose
 * leader the client cannot follow, and after a routed attempt could not connect.
 *
 * The configured endpoints are where the client starts, and they go stale: nodes are replaced,
 * decommissioned and removed. The cluster view names the members serving now, so those the view
 * shows serving come first (`servingMembers`); the configured endpoints come after them, for a
 * view gone stale itself (every member's address changed while the client's watch was down), and
 * alone without a view. Within a call, an address that already failed to connect comes last, and
 * so does one whose channel is in reconnect backoff (grpc-js's TRANSIENT_FAILURE): each such try
 * costs the call an attempt, and one to a node that accepts and never answers its whole connect
 * budget. Pure: the caller says which channels are failing and whose turn it is.
 *
 * Caveat: a member the view shows serving may be gone all the same (the view lags gossip by a
 * few seconds); it costs one attempt per call, then the call's failed set rules it out.
 */
import type { ClusterView } from "./types.ts";

/**
 * The addresses of the members `view` shows serving, in the view's order: alive to gossip and
 * active members of the cluster (not joining, decommissioning or gone), with an address that
 * `allowed` accepts (a cleartext token goes to loopback addresses only).
 */
export function servingMembers(
  view: ClusterView | null,
  allowed: (address: string) => boolean,
): string[] {
  if (view === null) return [];
  // A set, not a look-up in the list so far: a view is what a node sent, of any size, and that
  // look-up made its members' count squared (60,000 members: 20 s of the event loop).
  const out = new Set<string>();
  for (const n of view.nodes) {
    if (isServing(n) && n.rpcAddr !== "" && allowed(n.rpcAddr)) out.add(n.rpcAddr);
  }
  return [...out];
}

/** Whether a member of a view takes calls: alive to gossip and an active member. */
function isServing(n: ClusterView["nodes"][number]): boolean {
  return n.state === "alive" && n.memberState === "active";
}

export interface FallbackCandidates {
  /** The members the view shows serving (`servingMembers`). */
  readonly members: readonly string[];
  /** The configured endpoints. */
  readonly endpoints: readonly string[];
  /** Addresses that failed to connect earlier in this call. */
  readonly failed: ReadonlySet<string>;
  /** Whether the client's channel to `address` is in TRANSIENT_FAILURE (none yet: false). */
  readonly isFailing: (address: string) => boolean;
}

/**
 * The address of the next fallback attempt. The first of these groups that holds an address is
 * taken, and `turn` (a counter the caller moves on each pick) rotates through it, so the load
 * spreads: the members neither failed in this call nor failing; the endpoints likewise; every
 * address not failed in this call; every address. Members come before endpoints in each.
 */
export function pickFallback(c: FallbackCandidates, turn: number): string {
  const endpoints = c.endpoints.filter((e) => !c.members.includes(e));
  const all = [...c.members, ...endpoints];
  const usable = (a: string): boolean => !c.failed.has(a) && !c.isFailing(a);
  const groups = [
    c.members.filter(usable),
    endpoints.filter(usable),
    all.filter((a) => !c.failed.has(a)),
    all,
  ];
  const group = groups.find((g) => g.length > 0) ?? [];
  const picked = group[turn % group.length];
  if (picked === undefined) throw new TypeError("pickFallback: no member and no endpoint");
  return picked;
}
