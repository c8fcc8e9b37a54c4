/**
 * DiskWatch (src/node/disk-watch.ts): a node tells the meta group when its data directory's disk
 * is nearly full and when it has room again, over a real meta state that its proposals change.
 */
import assert from "node:assert/strict";
import { statfs } from "node:fs/promises";
import { tmpdir } from "node:os";
import { describe, it } from "node:test";
import { type MetaCommand, MetaState } from "../../src/cluster/index.ts";
import { DISK_ROOM_MARGIN, DiskWatch, usedPercentOf } from "../../src/node/disk-watch.ts";
import { silentLogger } from "../../src/ops/index.ts";

const member = (id: string) => ({ id, rpcAddr: `${id}:7447`, httpAddr: `${id}:8080` });

function founded(): MetaState {
  return MetaState.empty().apply({
    op: "bootstrap",
    clusterId: "c",
    totalShards: 16,
    replicationFactor: 3,
    members: ["n1", "n2", "n3"].map(member),
  }).state;
}

interface World {
  meta: MetaState;
  used: number;
  fail?: boolean;
  /** n2 refuses Puts (its disk's reserve, storage.min_free_bytes). */
  refused?: boolean;
}

/** A watch of n2 over `meta`, its disk at `disk.used` percent; proposals apply to `meta`. */
function watch(world: World, fullPercent = 95) {
  const proposed: MetaCommand[] = [];
  const w = new DiskWatch({
    nodeId: "n2",
    fullPercent,
    putsRefused: () => world.refused === true,
    meta: () => world.meta,
    usedPercent: () => Promise.resolve(world.used),
    propose: (cmd) => {
      proposed.push(cmd);
      if (world.fail === true) return Promise.reject(new Error("no meta leader"));
      const r = world.meta.apply(cmd);
      if (r.outcome.kind === "rejected") return Promise.reject(new Error(r.outcome.reason));
      world.meta = r.state;
      return Promise.resolve();
    },
    log: silentLogger,
  });
  return { w, proposed };
}

describe("a node's disk reported to the meta group", () => {
  it("reports a full disk once, and room again only below the margin", async () => {
    const world = { meta: founded(), used: 50 };
    const { w, proposed } = watch(world);
    assert.equal(await w.check(), null, "room: nothing to say");
    world.used = 95;
    assert.deepEqual(await w.check(), { op: "set-disk", id: "n2", full: true });
    assert.deepEqual(world.meta.roomyMembers(), ["n1", "n3"]);
    assert.equal(await w.check(), null, "recorded already: no second entry");
    // Within the margin below the threshold it stays full (no flapping around 95 %).
    world.used = 95 - DISK_ROOM_MARGIN + 1;
    assert.equal(await w.check(), null);
    world.used = 95 - DISK_ROOM_MARGIN;
    assert.deepEqual(await w.check(), { op: "set-disk", id: "n2", full: false });
    assert.deepEqual(world.meta.roomyMembers(), ["n1", "n2", "n3"]);
    assert.equal(proposed.length, 2);
  });

  it("proposes again after a failed proposal, and says nothing when off or not a member", async () => {
    const world = { meta: founded(), used: 99, fail: true };
    const { w, proposed } = watch(world);
    assert.equal(await w.check(), null);
    world.fail = false;
    assert.deepEqual(await w.check(), { op: "set-disk", id: "n2", full: true });
    assert.equal(proposed.length, 2);
    // 100: off.
    const off = watch({ meta: founded(), used: 100 }, 100);
    assert.equal(await off.w.check(), null);
    assert.equal(off.proposed.length, 0);
    // Before the cluster is known, and for a node that is not a member: nothing.
    const unknown = watch({ meta: MetaState.empty(), used: 99 });
    assert.equal(await unknown.w.check(), null);
    assert.equal(unknown.proposed.length, 0);
  });

  it("reports the disk full while Puts are refused, whatever its used share", async () => {
    for (const fullPercent of [95, 100]) {
      const world: World = { meta: founded(), used: 60 };
      const { w, proposed } = watch(world, fullPercent);
      assert.equal(await w.check(), null);
      world.refused = true;
      assert.deepEqual(await w.check(), { op: "set-disk", id: "n2", full: true }, `${fullPercent}`);
      assert.deepEqual(world.meta.roomyMembers(), ["n1", "n3"]);
      assert.equal(await w.check(), null, "recorded already");
      world.refused = false;
      assert.deepEqual(await w.check(), { op: "set-disk", id: "n2", full: false });
      assert.equal(proposed.length, 2);
    }
    // Taking Puts again is not room enough while the share is over the threshold's margin.
    const world: World = { meta: founded(), used: 93, refused: true };
    const { w } = watch(world);
    assert.deepEqual(await w.check(), { op: "set-disk", id: "n2", full: true });
    world.refused = false;
    assert.equal(await w.check(), null);
    world.used = 95 - DISK_ROOM_MARGIN;
    assert.deepEqual(await w.check(), { op: "set-disk", id: "n2", full: false });
  });

  it("checks at once when Puts come to be refused or taken, within an interval", async () => {
    const world: World = { meta: founded(), used: 50 };
    const { w, proposed } = watch(world);
    w.maybeCheck(0);
    await new Promise((resolve) => setImmediate(resolve));
    world.refused = true;
    w.maybeCheck(1_000);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(proposed, [{ op: "set-disk", id: "n2", full: true }]);
    w.maybeCheck(2_000);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(proposed.length, 1, "no change: the interval holds");
    world.refused = false;
    w.maybeCheck(3_000);
    await new Promise((resolve) => setImmediate(resolve));
    assert.deepEqual(proposed.at(-1), { op: "set-disk", id: "n2", full: false });
    // A proposal that failed is made again at the next call, not an interval later.
    world.refused = true;
    world.fail = true;
    w.maybeCheck(4_000);
    await new Promise((resolve) => setImmediate(resolve));
    world.fail = false;
    w.maybeCheck(5_000);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(proposed.length, 4);
    assert.deepEqual(world.meta.members.get("n2")?.diskFull, true);
  });

  it("checks at most once an interval", async () => {
    const world = { meta: founded(), used: 99 };
    let reads = 0;
    const w = new DiskWatch({
      nodeId: "n2",
      fullPercent: 95,
      putsRefused: () => false,
      meta: () => world.meta,
      usedPercent: () => {
        reads++;
        return Promise.resolve(world.used);
      },
      propose: () => Promise.resolve(),
      log: silentLogger,
    });
    w.maybeCheck(0);
    w.maybeCheck(5_000);
    w.maybeCheck(9_999);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(reads, 1);
    w.maybeCheck(10_000);
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(reads, 2);
  });

  it("counts usage as df does: used over used and available blocks, rounded up", async () => {
    assert.equal(usedPercentOf({ blocks: 1000, bfree: 100, bavail: 50 }), 95);
    assert.equal(usedPercentOf({ blocks: 1000, bfree: 1000, bavail: 950 }), 0);
    assert.equal(usedPercentOf({ blocks: 1000, bfree: 0, bavail: 0 }), 100);
    assert.equal(usedPercentOf({ blocks: 3, bfree: 2, bavail: 2 }), 34);
    assert.equal(usedPercentOf({ blocks: 0, bfree: 0, bavail: 0 }), 0);
    const real = usedPercentOf(await statfs(tmpdir()));
    assert.ok(real >= 0 && real <= 100, `${real}`);
  });
});
