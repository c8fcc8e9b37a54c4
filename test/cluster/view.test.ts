import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type ClusterView,
  ClusterViewPublisher,
  rpcAddressOf,
  type ViewClock,
} from "../../src/cluster/index.ts";

describe("rpcAddressOf", () => {
  const view: ClusterView = {
    epoch: 1,
    total_shards: 16,
    cluster_id: "c1",
    incarnation: "",
    cluster_version: 1,
    first_seed: false,
    shards: [],
    nodes: [
      { id: "n1", rpc_addr: "10.0.0.1:7447", http_addr: "10.0.0.1:8080", state: "alive" },
      { id: "n2", rpc_addr: "10.0.0.2:7447", http_addr: "10.0.0.2:8080", state: "suspect" },
      { id: "n3", rpc_addr: "10.0.0.3:7447", http_addr: "10.0.0.3:8080", state: "dead" },
      { id: "n4", rpc_addr: "", http_addr: "", state: "alive" },
    ],
  };

  it("gives the address of a live or suspect member, null for dead, unknown or addressless", () => {
    assert.equal(rpcAddressOf(view, "n1"), "10.0.0.1:7447");
    assert.equal(rpcAddressOf(view, "n2"), "10.0.0.2:7447");
    assert.equal(rpcAddressOf(view, "n3"), null);
    assert.equal(rpcAddressOf(view, "n4"), null);
    assert.equal(rpcAddressOf(view, "n9"), null);
  });
});

describe("ClusterViewPublisher", () => {
  const published = async (p: ClusterViewPublisher): Promise<ClusterView> => {
    await Promise.resolve(); // views are published at the end of the microtask
    return p.current();
  };
  const shard = (id: number, leader = "n1", term = 1) => ({
    id,
    leader,
    term,
    replicas: ["n1", "n2"],
  });

  it("lists shards by id whatever the order they open in, one view per burst of changes", async () => {
    const p = new ClusterViewPublisher(16);
    const views: ClusterView[] = [];
    p.subscribe((v) => views.push(v));
    for (const id of [7, 2, 15, 0, 9, 2, 3]) p.setShard(shard(id));
    const v = await published(p);
    assert.deepEqual(
      v.shards.map((s) => s.id),
      [0, 2, 3, 7, 9, 15],
    );
    assert.equal(views.length, 2, "the initial view, then one for the burst");
    assert.equal(v.epoch, 1);
  });

  it("replaces a shard whose leader, term or replicas changed, and publishes nothing when none did", async () => {
    const p = new ClusterViewPublisher(16);
    for (const id of [4, 1, 8]) p.setShard(shard(id));
    const first = await published(p);
    p.setShard(shard(4));
    assert.equal((await published(p)).epoch, first.epoch, "same shard, no new view");
    p.setShard(shard(4, "n2", 2));
    const second = await published(p);
    assert.equal(second.epoch, first.epoch + 1);
    assert.deepEqual(
      second.shards.map((s) => [s.id, s.leader, s.term]),
      [
        [1, "n1", 1],
        [4, "n2", 2],
        [8, "n1", 1],
      ],
    );
    assert.equal(first.shards[1]?.leader, "n1", "an earlier view is never changed afterwards");
  });

  it("gives subscribers at most one view per interval: a change after a quiet spell at once, a burst's last state at the interval's end", async () => {
    // A manual clock: timers run when the test advances it.
    let now = 1_000;
    const timers: { at: number; fn: () => void }[] = [];
    const clock: ViewClock = {
      now: () => now,
      setTimeout: (fn, ms) => void timers.push({ at: now + ms, fn }),
    };
    const advance = (ms: number): void => {
      now += ms;
      for (const t of timers.splice(0).sort((a, b) => a.at - b.at)) {
        if (t.at <= now) t.fn();
        else timers.push(t);
      }
    };
    const p = new ClusterViewPublisher(16, { clock, minIntervalMs: 100 });
    const seen: number[][] = [];
    p.subscribe((v) => seen.push(v.shards.map((s) => s.id)));
    p.setShard(shard(1));
    await published(p);
    assert.deepEqual(seen, [[], [1]], "the first change goes out at once");
    // Ten more changes, one per turn, within the interval: current() follows each at once...
    for (let id = 2; id <= 11; id++) {
      advance(5);
      p.setShard(shard(id));
      assert.equal((await published(p)).shards.length, id);
    }
    // ... and the subscribers get none of them before the interval ends, then the last state.
    assert.equal(seen.length, 2);
    advance(49);
    assert.equal(seen.length, 2);
    advance(1);
    assert.equal(seen.length, 3);
    assert.deepEqual(seen[2], [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]);
    // A change after a quiet interval goes out at once again.
    advance(500);
    p.setShard(shard(12));
    await published(p);
    assert.equal(seen.length, 4);
    assert.equal(timers.length, 0);
  });
});
