/**
 * The chaos run's polling after the heal (poll.ts), on a fake clock: a phase that waits once per
 * key ends within its own time however many keys go unanswered.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type Clock, eventually, eventuallyEach, POLL_EVERY_MS } from "./poll.ts";

/** A clock that moves only when slept on, or when a probe says a call took time. */
function fakeClock(): Clock & { advance(ms: number): void } {
  let t = 0;
  return {
    now: () => t,
    sleep: (ms) => {
      t += ms;
      return Promise.resolve();
    },
    advance: (ms) => {
      t += ms;
    },
  };
}

const keys = (n: number): string[] => Array.from({ length: n }, (_, i) => `k${i}`);

describe("chaos polling after the heal", () => {
  it("ends a phase in its own time when no key is ever answered", async () => {
    const clock = fakeClock();
    let probes = 0;
    const out = await eventuallyEach(
      keys(25),
      () => {
        probes++;
        clock.advance(5_000); // each call waits out its deadline
        return Promise.reject(new Error("deadline exceeded"));
      },
      { perKeyMs: 30_000, phaseMs: 60_000 },
      clock,
    );
    // Each key's own limit alone would have taken 25 × 30 s.
    assert.ok(clock.now() <= 60_000 + 5_000 + POLL_EVERY_MS, `took ${clock.now()} ms`);
    assert.deepEqual(out.late, ["k0", "k1"]);
    assert.deepEqual(out.untried, keys(25).slice(2));
    assert.equal(out.got.size, 0);
    assert.ok(probes <= 12, `${probes} probes`);
  });

  it("gives the phase's remaining time to a key when less than its own is left", async () => {
    const clock = fakeClock();
    const out = await eventuallyEach(
      keys(3),
      () => Promise.resolve(undefined),
      { perKeyMs: 30_000, phaseMs: 40_000 },
      clock,
    );
    assert.deepEqual(out.late, ["k0", "k1"]);
    assert.deepEqual(out.untried, ["k2"]);
    assert.ok(clock.now() >= 40_000 && clock.now() <= 40_000 + POLL_EVERY_MS);
  });

  it("reads every key that answers, after failures, and goes on past one that never does", async () => {
    const clock = fakeClock();
    const tries = new Map<string, number>();
    const out = await eventuallyEach(
      keys(4),
      (key) => {
        const n = (tries.get(key) ?? 0) + 1;
        tries.set(key, n);
        if (key === "k1") return Promise.resolve(undefined); // never
        if (n < 3) return Promise.reject(new Error("unavailable"));
        return Promise.resolve(`${key}@${n}`);
      },
      { perKeyMs: 10_000, phaseMs: 120_000 },
      clock,
    );
    assert.deepEqual(
      [...out.got],
      [
        ["k0", "k0@3"],
        ["k2", "k2@3"],
        ["k3", "k3@3"],
      ],
    );
    assert.deepEqual(out.late, ["k1"]);
    assert.deepEqual(out.untried, []);
  });

  it("eventually gives up after its limit, and returns at the first value", async () => {
    const clock = fakeClock();
    assert.equal(await eventually(1_000, () => Promise.resolve(undefined), clock), undefined);
    assert.ok(clock.now() >= 1_000 && clock.now() <= 1_000 + POLL_EVERY_MS);
    const start = clock.now();
    let n = 0;
    assert.equal(
      await eventually(1_000, () => Promise.resolve(++n === 2 ? 7 : undefined), clock),
      7,
    );
    assert.equal(clock.now() - start, POLL_EVERY_MS);
  });
});
