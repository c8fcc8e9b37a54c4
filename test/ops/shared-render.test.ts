import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SharedRender } from "../../src/ops/shared-render.ts";

function deferred(): { promise: Promise<void>; resolve: () => void } {
  let resolve!: () => void;
  const promise = new Promise<void>((r) => (resolve = r));
  return { promise, resolve };
}

/**
 * A render whose time the test sets (`took` ms on the fake clock), held until `release()` when
 * `hold` is set. Each render answers its number (1, 2, …).
 */
function harness(options: { gapFactor?: number; maxGapMs?: number } = {}) {
  let t = 0;
  const slept: number[] = [];
  let count = 0;
  let took = 10;
  let held: { resolve: () => void } | null = null;
  let hold = false;
  let fail: Error | null = null;
  const render = new SharedRender<number>(
    async () => {
      const n = ++count;
      if (hold) {
        const d = deferred();
        held = d;
        await d.promise;
      }
      t += took;
      if (fail !== null) throw fail;
      return n;
    },
    {
      ...options,
      now: () => t,
      sleep: (ms) => {
        slept.push(ms);
        t += ms;
        return Promise.resolve();
      },
    },
  );
  return {
    render,
    slept,
    get now() {
      return t;
    },
    advance: (ms: number) => (t += ms),
    setTook: (ms: number) => (took = ms),
    setHold: (on: boolean) => (hold = on),
    setFail: (err: Error | null) => (fail = err),
    release: () => {
      const h = held as { resolve: () => void } | null;
      held = null;
      h?.resolve();
    },
    get waiting() {
      return held !== null;
    },
  };
}

/** Lets the microtasks queued so far run. */
const settle = (): Promise<void> => new Promise((r) => setImmediate(r));

describe("SharedRender", () => {
  it("a request arriving while a render runs shares the next one, never the running one", async () => {
    const h = harness();
    h.setHold(true);
    const first = h.render.get();
    await settle();
    assert.ok(h.waiting, "the first render runs");
    // Three requests arrive during it: the answer it will give predates them.
    const later = [h.render.get(), h.render.get(), h.render.get()];
    h.setHold(false);
    h.release();
    assert.equal(await first, 1);
    assert.deepEqual(await Promise.all(later), [2, 2, 2]);
    assert.equal(h.render.renders, 2);
  });

  it("requests made together share one render", async () => {
    const h = harness();
    const answers = await Promise.all(Array.from({ length: 50 }, () => h.render.get()));
    assert.deepEqual(new Set(answers), new Set([1]));
    assert.equal(h.render.renders, 1);
  });

  it("spaces renders: the next starts gapFactor times the last one's time after it ended", async () => {
    const h = harness({ gapFactor: 9 });
    h.setTook(10);
    assert.equal(await h.render.get(), 1);
    const ended = h.now;
    assert.equal(await h.render.get(), 2);
    // It waited 90 ms (9 × 10) after the first ended, then took 10.
    assert.deepEqual(h.slept, [90]);
    assert.equal(h.now, ended + 90 + 10);
    // A flood of sequential requests: 10 ms of rendering in every 100.
    for (let i = 0; i < 20; i++) await h.render.get();
    assert.equal(h.render.renders, 22);
    assert.equal(h.now, 10 + 21 * 100);
  });

  it("a request after the gap has passed waits for nothing", async () => {
    const h = harness();
    await h.render.get();
    h.advance(1_000);
    assert.equal(await h.render.get(), 2);
    assert.deepEqual(h.slept, []);
  });

  it("the gap is at most maxGapMs, however long a render took", async () => {
    const h = harness({ gapFactor: 9, maxGapMs: 1_000 });
    h.setTook(5_000);
    await h.render.get();
    await h.render.get();
    assert.deepEqual(h.slept, [1_000]);
  });

  it("a failed render fails the requests that shared it; the next request renders again", async () => {
    const h = harness();
    h.setFail(new Error("collector broke"));
    const shared = [h.render.get(), h.render.get()];
    for (const p of shared) await assert.rejects(p, /collector broke/);
    h.setFail(null);
    assert.equal(await h.render.get(), 2);
  });
});
