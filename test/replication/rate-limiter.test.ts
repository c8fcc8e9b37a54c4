/**
 * RateLimiter on a virtual clock: how long it makes each take() wait, never a real sleep.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { inTurn, type PaceClock, RateLimiter } from "../../src/replication/index.ts";

const KIB = 1024;

/** A clock that stands still unless the test moves it; sleep() records the delay asked for. */
function stillClock(): PaceClock & { at: number; sleeps: number[] } {
  const clock = {
    at: 0,
    sleeps: [] as number[],
    now: () => clock.at,
    sleep: (ms: number): Promise<void> => {
      clock.sleeps.push(ms);
      return Promise.resolve();
    },
  };
  return clock;
}

describe("RateLimiter", () => {
  it("lets a burst through at once, then spaces the bytes at the rate", async () => {
    const clock = stillClock();
    // 100 KiB/s with a 10 KiB burst: 10 KiB is due every 100 ms.
    const limiter = new RateLimiter(100 * KIB, 10 * KIB, clock);
    for (let i = 0; i < 4; i++) await limiter.take(10 * KIB);
    assert.deepEqual(clock.sleeps, [100, 200, 300]);
  });

  it("shares the rate among concurrent callers in call order (one limiter per node)", async () => {
    const clock = stillClock();
    const limiter = new RateLimiter(100 * KIB, 10 * KIB, clock);
    // Two transfers take turns: each reservation queues behind every earlier one.
    await Promise.all([
      limiter.take(10 * KIB),
      limiter.take(10 * KIB),
      limiter.take(20 * KIB),
      limiter.take(10 * KIB),
    ]);
    assert.deepEqual(clock.sleeps, [100, 300, 400]);
  });

  it("banks no more than the burst while idle", async () => {
    const clock = stillClock();
    const limiter = new RateLimiter(100 * KIB, 10 * KIB, clock);
    await limiter.take(10 * KIB);
    clock.at = 60_000;
    // A minute idle buys one burst, not six megabytes.
    await limiter.take(10 * KIB);
    await limiter.take(10 * KIB);
    assert.deepEqual(clock.sleeps, [100]);
    // Time that passed while waiting counts: at the due time, the next chunk waits a period.
    clock.at += 100;
    await limiter.take(10 * KIB);
    assert.deepEqual(clock.sleeps, [100, 100]);
  });

  it("paces a chunk larger than the burst by its excess", async () => {
    const clock = stillClock();
    const limiter = new RateLimiter(100 * KIB, 10 * KIB, clock);
    await limiter.take(50 * KIB);
    assert.deepEqual(clock.sleeps, [400]);
  });

  it("inTurn paces at the narrower limiter, and the wider one counts the bytes once they pass", async () => {
    // A clock that moves by what the limiters sleep.
    const clock = stillClock();
    const sleep = clock.sleep;
    clock.sleep = (ms) => {
      clock.at += ms;
      return sleep(ms);
    };
    // The node-wide limiter: 10 KiB every 100 ms; the learners': 10 KiB every 200 ms.
    const node = new RateLimiter(100 * KIB, 10 * KIB, clock);
    const learners = inTurn(new RateLimiter(50 * KIB, 10 * KIB, clock), node);
    for (let i = 0; i < 4; i++) await learners.take(10 * KIB);
    assert.deepEqual(clock.sleeps, [200, 200, 200]);
    assert.equal(clock.at, 600);
    // The node-wide limiter took each chunk as it went (the last at 600, paid until 700), not
    // ahead of time: a voter's chunk now waits one node-wide period, not the learners' backlog.
    await node.take(10 * KIB);
    assert.deepEqual(clock.sleeps, [200, 200, 200, 100]);
  });

  it("refuses a rate that is not a positive number", () => {
    assert.throws(() => new RateLimiter(0, 1), RangeError);
    assert.throws(() => new RateLimiter(Number.POSITIVE_INFINITY, 1), RangeError);
    assert.throws(() => new RateLimiter(1, -1), RangeError);
  });
});
