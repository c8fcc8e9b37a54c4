/**
 * Paces bytes to a rate (the node-wide `raft.snapshot_rate_bytes_per_sec`, and
 * `cluster.rebalance.rate_bytes_per_sec` for snapshots to learners): the generic cell rate
 * algorithm, a token bucket kept as one time, `#paidUntil`, when every byte reserved so far is
 * paid for at the rate.
 *
 * take(n) reserves its n bytes at once, in call order, and then waits until they are due: so
 * transfers to several peers share the rate first come, first served, and none can starve the
 * others by asking often. A limiter that was idle lets `burstBytes` through at once, never more:
 * idle time is not banked beyond that.
 */

/** Time for the limiter (milliseconds); tests pass a virtual one. */
export interface PaceClock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

export const systemPaceClock: PaceClock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
};

/** What a transfer waits on before each chunk: a RateLimiter, or several in turn (inTurn). */
export interface Pacer {
  /** Resolves when `bytes` more may be sent. */
  take(bytes: number): Promise<void>;
}

export class RateLimiter implements Pacer {
  readonly bytesPerSec: number;
  readonly #burstMs: number;
  readonly #clock: PaceClock;
  #paidUntil = Number.NEGATIVE_INFINITY;

  constructor(bytesPerSec: number, burstBytes: number, clock: PaceClock = systemPaceClock) {
    if (!(bytesPerSec > 0 && Number.isFinite(bytesPerSec))) {
      throw new RangeError(`the rate must be a positive number of bytes/s, got ${bytesPerSec}`);
    }
    if (!(burstBytes >= 0 && Number.isFinite(burstBytes))) {
      throw new RangeError(`the burst must be a number of bytes, got ${burstBytes}`);
    }
    this.bytesPerSec = bytesPerSec;
    this.#burstMs = (burstBytes * 1000) / bytesPerSec;
    this.#clock = clock;
  }

  /** Resolves when `bytes` more may be sent. The reservation is made at the call. */
  take(bytes: number): Promise<void> {
    const now = this.#clock.now();
    this.#paidUntil = Math.max(this.#paidUntil, now) + (bytes * 1000) / this.bytesPerSec;
    // The bytes may go once what is still unpaid before them fits in the burst.
    const wait = this.#paidUntil - this.#burstMs - now;
    return wait > 0 ? this.#clock.sleep(wait) : Promise.resolve();
  }
}

/**
 * Bytes paced by each limiter in turn: the first's wait, then the second's, so that each one
 * reserves the bytes only once they reach it. A transfer held back by a narrow limiter (a move's
 * snapshot at `cluster.rebalance.rate_bytes_per_sec`) then takes from a wider, shared one (the
 * node-wide limiter) only what it actually sends, and does not reserve that one's rate ahead of
 * other transfers while it waits.
 */
export function inTurn(...limiters: readonly Pacer[]): Pacer {
  return {
    async take(bytes: number): Promise<void> {
      for (const limiter of limiters) await limiter.take(bytes);
    },
  };
}
