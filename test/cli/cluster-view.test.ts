/**
 * `cairn cluster` puts the members' views together (src/cli/cluster-view.ts): each node knows the
 * leaders of the shards it holds a replica of, and the command takes each shard from the view
 * that knows most about it.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  leaderCounts,
  type MergedView,
  membersToAsk,
  mergeViews,
  watchMerged,
} from "../../src/cli/cluster-view.ts";
import type { ClusterView, MemberInfo, ShardInfo } from "../../src/client/index.ts";

const member = (id: string, memberState: string, state = "alive"): MemberInfo => ({
  id,
  rpcAddr: `${id}:7447`,
  httpAddr: `${id}:8080`,
  state,
  memberState,
  replicas: 3,
  diskFull: false,
  build: 1,
});

function view(shards: ShardInfo[]): ClusterView {
  return {
    epoch: 7,
    totalShards: 16,
    clusterId: "c1",
    clusterVersion: 1,
    nodes: [
      member("n1", "active"),
      member("n2", "active"),
      member("n3", "decommissioning"),
      member("n4", "joining"),
      member("n5", "active", "dead"),
      member("n6", "decommissioned"),
    ],
    shards,
  };
}

describe("cairn cluster's merged view", () => {
  it("asks the members that may hold replicas only when a leader is not known first-hand", () => {
    const known = view([{ id: 1, leader: "n1", replicas: ["n1", "n2", "n3"], term: 2 }]);
    assert.deepEqual(membersToAsk(known, "n1"), []);
    // n1 holds no replica of shard 2: the leader it names was learnt before a move took its
    // replica off, and may be gone (a dead member was shown leading a third of such shards).
    const secondHand = view([
      ...known.shards,
      { id: 2, leader: "n5", replicas: ["n2", "n3", "n5"], term: 3 },
    ]);
    assert.deepEqual(
      membersToAsk(secondHand, "n1").map((m) => m.id),
      ["n2", "n3"],
    );
    const partial = view([
      ...known.shards,
      { id: 2, leader: "", replicas: ["n2", "n3", "n5"], term: 0 },
    ]);
    assert.deepEqual(
      membersToAsk(partial, "n1").map((m) => m.id),
      ["n2", "n3"],
      "alive members that are active or decommissioning, not the node that answered",
    );
  });

  it("takes each shard from the view that knows most: term, a known leader, the leader's own", () => {
    const n1 = view([
      { id: 1, leader: "n1", replicas: ["n1", "n2", "n3"], term: 2 },
      { id: 2, leader: "", replicas: ["n2", "n3", "n5"], term: 0 },
      { id: 3, leader: "n2", replicas: ["n1", "n2", "n3"], term: 4 },
    ]);
    const n2 = view([
      { id: 1, leader: "n1", replicas: ["n1", "n2", "n3"], term: 2 },
      { id: 2, leader: "n2", replicas: ["n2", "n3", "n5", "n1"], term: 3 },
      // An election under way in a later term: no leader yet, and that is what is shown.
      { id: 3, leader: "", replicas: ["n1", "n2", "n3"], term: 5 },
    ]);
    const n3 = view([
      { id: 2, leader: "n2", replicas: ["n2", "n3", "n5"], term: 3 },
      { id: 4, leader: "n3", replicas: ["n3", "n5", "n2"], term: 1 },
    ]);
    const merged = mergeViews({ node: "n1", view: n1 }, [
      { node: "n3", view: { ...n3, epoch: 40 } },
      { node: "n2", view: { ...n2, epoch: 12 } },
    ]);
    assert.deepEqual(merged.shards, [
      { id: 1, leader: "n1", replicas: ["n1", "n2", "n3"], term: 2 },
      { id: 2, leader: "n2", replicas: ["n2", "n3", "n5", "n1"], term: 3 },
      { id: 3, leader: "", replicas: ["n1", "n2", "n3"], term: 5 },
      { id: 4, leader: "n3", replicas: ["n3", "n5", "n2"], term: 1 },
    ]);
    assert.equal(merged.epoch, 7, "the epoch is the answering node's");
    assert.equal(merged.node, "n1");
    assert.deepEqual(merged.others, [
      { node: "n3", epoch: 40 },
      { node: "n2", epoch: 12 },
    ]);
    assert.equal(merged.nodes, n1.nodes, "the members are the first view's");
    assert.deepEqual([...leaderCounts(merged)].sort(), [
      ["n1", 1],
      ["n2", 1],
      ["n3", 1],
    ]);
  });
});

/** A node's view stream a test feeds: views, then an end (null) or a failure. */
class FakeStream {
  readonly #queue: (ClusterView | Error | null)[] = [];
  #wake: (() => void) | null = null;
  signal: AbortSignal | null = null;
  opened = 0;

  push(item: ClusterView | Error | null): void {
    this.#queue.push(item);
    this.#wake?.();
  }

  async *open(signal: AbortSignal): AsyncGenerator<ClusterView> {
    this.opened++;
    this.signal = signal;
    const onAbort = (): void => this.#wake?.();
    signal.addEventListener("abort", onAbort);
    try {
      for (;;) {
        if (signal.aborted) return;
        const next = this.#queue.shift();
        if (next === undefined) {
          await new Promise<void>((resolve) => (this.#wake = resolve));
          continue;
        }
        if (next === null) return;
        if (next instanceof Error) throw next;
        yield next;
      }
    } finally {
      signal.removeEventListener("abort", onAbort);
    }
  }
}

describe("cairn cluster --watch's merged view", () => {
  it("follows the members beside its node, drops one that leaves, and fails with its node", async () => {
    const streams = new Map([
      ["n1:7447", new FakeStream()],
      ["n2:7447", new FakeStream()],
    ]);
    const [n1, n2] = [streams.get("n1:7447"), streams.get("n2:7447")] as FakeStream[];
    const controller = new AbortController();
    const views = watchMerged(
      (endpoint, signal) => {
        const s = streams.get(endpoint);
        if (s === undefined) throw new Error(`no stream at ${endpoint}`);
        return s.open(signal);
      },
      "n1:7447",
      controller.signal,
    );
    const members = (n2State: string): MemberInfo[] => [
      member("n1", "active"),
      member("n2", "active", n2State),
    ];
    const own = (n2State: string): ClusterView => ({
      ...view([
        { id: 1, leader: "n1", replicas: ["n1", "n2", "n3"], term: 2 },
        { id: 2, leader: "", replicas: ["n2", "n3", "n4"], term: 0 },
      ]),
      nodes: members(n2State),
    });
    const leaderOf2 = (v: ClusterView): string | undefined =>
      v.shards.find((s) => s.id === 2)?.leader;

    n1?.push(own("alive"));
    // The first view waits for n2's, which comes after n1's.
    const first = views.next();
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(n2?.opened, 1, "n2 is followed beside n1");
    n2?.push({
      ...view([{ id: 2, leader: "n2", replicas: ["n2", "n3", "n4"], term: 3 }]),
      nodes: members("alive"),
    });
    assert.equal(leaderOf2((await first).value as ClusterView), "n2");

    n2?.push({
      ...view([{ id: 2, leader: "n3", replicas: ["n2", "n3", "n4"], term: 4 }]),
      nodes: members("alive"),
    });
    assert.equal(leaderOf2((await views.next()).value as ClusterView), "n3", "n2's next view");

    // n2's epoch moves with nothing else new (a change of a shard its view knows less about
    // than n1's): nothing to show. Then n1's own view moves on, and the view shown has n2's
    // latest epoch beside n1's.
    n2?.push({
      ...view([{ id: 2, leader: "n3", replicas: ["n2", "n3", "n4"], term: 4 }]),
      epoch: 8,
      nodes: members("alive"),
    });
    await new Promise((resolve) => setImmediate(resolve));
    n1?.push({ ...own("alive"), epoch: 9 });
    const next = (await views.next()).value as MergedView;
    assert.equal(next.epoch, 9, "n1's epoch: the view after n2's epoch-only change is n1's next");
    assert.deepEqual(next.others, [{ node: "n2", epoch: 8 }]);

    // n2 is dead by gossip in n1's next view: no longer followed, its leaders no longer shown.
    n1?.push(own("dead"));
    assert.equal(leaderOf2((await views.next()).value as ClusterView), "");
    assert.equal(n2?.signal?.aborted, true, "n2's watch is cut");

    n1?.push(new Error("n1 went away"));
    await assert.rejects(views.next(), /n1 went away/);
    controller.abort();
  });
});
