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
 * The members other than `answered` whose views may know leaders: those that may hold replicas
 * (active or decommissioning) and gossip has alive.
 */
export function replicaHolders(view: ClusterView, answered: string): MemberInfo[] {
  return view.nodes.filter(
    (n) =>
      n.id !== answered &&
      n.rpcAddr !== "" &&
      n.state === "alive" &&
      (n.memberState === "active" || n.memberState === "decommissioning"),
  );
}

/**
 * The members to ask for the leaders `view` does not know first-hand (replicaHolders): none when
 * the answering node holds a replica of every shard and knows its leader. A leader of a shard it
 * holds no replica of is second-hand (it learnt it before a move took its replica off) and may
 * have changed since: a dead member was shown leading a third of them.
 */
export function membersToAsk(view: ClusterView, answered: string): MemberInfo[] {
  if (view.shards.every((s) => s.leader !== "" && s.replicas.includes(answered))) return [];
  return replicaHolders(view, answered);
}

/**
 * A picture `cairn cluster` shows: the answering node's view (its `epoch`, members and cluster)
 * with each shard taken from the view that knows most about it. The epoch counts that node's
 * changes only: two pictures may differ in what the other members' views told (`others`) and
 * still show the same epoch.
 */
export interface MergedView extends ClusterView {
  /** The member that answered ("" when the answering node is not known). */
  readonly node: string;
  /** The other members' views it was merged with, and their epochs. */
  readonly others: readonly { readonly node: string; readonly epoch: number }[];
}

/**
 * `first` with each shard taken from the view that knows most about it: the highest term, then a
 * known leader over none, then the leader's own view (its replicas are the group's latest).
 * Members and the rest are `first`'s.
 */
export function mergeViews(first: AnsweredView, others: readonly AnsweredView[]): MergedView {
  const best = new Map<number, { shard: ShardInfo; rank: number }>();
  for (const { node, view } of [first, ...others]) {
    for (const s of view.shards) {
      const rank = s.term * 4 + (s.leader === "" ? 0 : s.leader === node ? 2 : 1);
      const was = best.get(s.id);
      if (was === undefined || rank > was.rank) best.set(s.id, { shard: s, rank });
    }
  }
  const shards = [...best.values()].map((b) => b.shard).sort((a, b) => a.id - b.id);
  return {
    ...first.view,
    shards,
    node: first.node,
    others: others.map(({ node, view }) => ({ node, epoch: view.epoch })),
  };
}

/** How many of `view`'s shards each member leads, as the view knows it. */
export function leaderCounts(view: ClusterView): Map<string, number> {
  const counts = new Map<string, number>();
  for (const s of view.shards) {
    if (s.leader !== "") counts.set(s.leader, (counts.get(s.leader) ?? 0) + 1);
  }
  return counts;
}

/** Opens one node's view stream (CairnClient.watchCluster on `endpoint`), ended by `signal`. */
export type WatchOne = (endpoint: string, signal: AbortSignal) => AsyncIterable<ClusterView>;

/** How long the first view printed waits for the other members' first views, at most. */
const FIRST_VIEW_WAIT_MS = 1_000;
/** After a member's watch failed, it is opened again no sooner than this. */
const REFOLLOW_MS = 2_000;

/**
 * Follows `endpoint`'s view and, once it lacks a first-hand leader, beside it the views of the members it
 * lists that may hold replicas (membersToAsk's: followed as they appear, dropped as they leave the
 * list, opened again no sooner than 2 s after a failure); yields `endpoint`'s view with each shard
 * taken from the view that knows most about it (mergeViews), after each change of any of them,
 * the first once the members followed sent theirs (1 s at most). Returns when `endpoint`'s stream
 * ends, `signal` aborts or the caller stops iterating; throws when `endpoint`'s stream fails
 * (another member's failure only leaves its leaders to the others).
 */
export async function* watchMerged(
  watch: WatchOne,
  endpoint: string,
  signal: AbortSignal,
  now: () => number = () => performance.now(),
): AsyncGenerator<MergedView> {
  interface Followed {
    readonly addr: string;
    readonly stop: AbortController;
    view: ClusterView | null;
  }
  const followed = new Map<string, Followed>();
  const failedAt = new Map<string, number>();
  /** `endpoint`'s latest view (a holder: the stream's loop below sets it). */
  const own: { view: ClusterView | null } = { view: null };
  let failure: unknown = null;
  let ended = false;
  let changed = false;
  let last = "";
  let firstWait: NodeJS.Timeout | null = null;
  let firstWaitOver = false;
  let wake: () => void = () => {};
  const notify = (): void => {
    changed = true;
    wake();
  };
  // Ends the streams of `endpoint` and of the members followed when `signal` aborts or the
  // caller stops iterating.
  const done = new AbortController();
  const abort = (): void => {
    done.abort();
    notify();
  };
  signal.addEventListener("abort", abort, { once: true });
  void (async () => {
    try {
      for await (const v of watch(endpoint, done.signal)) {
        own.view = v;
        notify();
      }
    } catch (err) {
      failure = err;
    }
    ended = true;
    notify();
  })();
  const follow = (id: string, addr: string): void => {
    const f: Followed = { addr, stop: new AbortController(), view: null };
    followed.set(id, f);
    const cut = (): void => f.stop.abort();
    done.signal.addEventListener("abort", cut, { once: true });
    void (async () => {
      try {
        for await (const v of watch(addr, f.stop.signal)) {
          f.view = v;
          notify();
        }
      } catch {
        // Down, refusing (decommissioned) or cut: its shards keep what the others know.
      }
      done.signal.removeEventListener("abort", cut);
      if (followed.get(id) !== f) return;
      followed.delete(id);
      if (!f.stop.signal.aborted) failedAt.set(id, now());
      notify();
    })();
  };
  try {
    for (;;) {
      if (!changed) await new Promise<void>((resolve) => (wake = resolve));
      changed = false;
      if (failure !== null) throw failure;
      if (ended || done.signal.aborted) return;
      const view = own.view;
      if (view === null) continue;
      const node = view.nodes.find((n) => n.rpcAddr === endpoint)?.id ?? "";
      const holders = new Map(replicaHolders(view, node).map((m) => [m.id, m.rpcAddr]));
      for (const [id, f] of followed) {
        if (holders.get(id) !== f.addr) {
          f.stop.abort();
          followed.delete(id);
        }
      }
      // Followed from the first view that lacks a first-hand leader (with three nodes, none
      // usually does).
      for (const m of membersToAsk(view, node)) {
        const failed = failedAt.get(m.id);
        if (m.rpcAddr === endpoint || followed.has(m.id)) continue;
        if (failed !== undefined && now() - failed < REFOLLOW_MS) continue;
        failedAt.delete(m.id);
        follow(m.id, m.rpcAddr);
      }
      // The first view waits (up to FIRST_VIEW_WAIT_MS) for the members' first views: printed
      // at once, it would show "(none)" for the leaders they are about to tell.
      if (last === "" && [...followed.values()].some((f) => f.view === null)) {
        firstWait ??= setTimeout(() => {
          firstWaitOver = true;
          notify();
        }, FIRST_VIEW_WAIT_MS);
        if (!firstWaitOver) continue;
      }
      const others: AnsweredView[] = [];
      for (const [id, f] of followed) if (f.view !== null) others.push({ node: id, view: f.view });
      const merged = mergeViews({ node, view }, others);
      // A member's stream opening, failing or repeating what is known changes nothing shown
      // (nor does another member's epoch alone: only what its view tells).
      const shown = JSON.stringify({ ...merged, others: merged.others.map((o) => o.node) });
      if (shown === last) continue;
      last = shown;
      yield merged;
    }
  } finally {
    signal.removeEventListener("abort", abort);
    if (firstWait !== null) clearTimeout(firstWait);
    done.abort();
  }
}
