/**
 * Polling in a chaos run (the rotation's checks, and every check after the heal), with bounds
 * that hold whatever the cluster does: each wait has its own limit, and a phase that waits once
 * per key has one more, shared by its keys. Without the
 * shared one, a cluster that never answers again (a membership change that failed, a node that
 * never came back) made a run wait out every key's limit in turn, on every member: 30 s × 25
 * keys × 5 members, an hour before the run could say so.
 */

/** The run's clock: real time in a run, a fake one in tests. */
export interface Clock {
  now(): number;
  sleep(ms: number): Promise<void>;
}

export const REAL_CLOCK: Clock = {
  now: () => performance.now(),
  sleep: (ms) => new Promise((r) => setTimeout(r, Math.max(0, ms))),
};

/** How often a probe runs again. */
export const POLL_EVERY_MS = 200;

/**
 * Runs `probe` every POLL_EVERY_MS until it gives a value (a rejection counts as none), for at
 * most `timeoutMs`; undefined if it gave none in time.
 */
export async function eventually<T>(
  timeoutMs: number,
  probe: () => Promise<T | undefined>,
  clock: Clock = REAL_CLOCK,
): Promise<T | undefined> {
  const deadline = clock.now() + timeoutMs;
  while (clock.now() < deadline) {
    try {
      const v = await probe();
      if (v !== undefined) return v;
    } catch {
      // try again
    }
    await clock.sleep(POLL_EVERY_MS);
  }
  return undefined;
}

export interface EachLimits {
  /** How long one key may take. */
  readonly perKeyMs: number;
  /** How long the whole phase may take: a key whose turn comes later is not tried. */
  readonly phaseMs: number;
}

export interface EachOutcome<T> {
  /** Each key that gave a value, and the value. */
  readonly got: Map<string, T>;
  /** The keys that gave none within their time (the phase's time, if less was left). */
  readonly late: string[];
  /** The keys not tried: the phase's time ran out before their turn. */
  readonly untried: string[];
}

/** `eventually(probe(key))` for each key in turn, within `limits`. */
export async function eventuallyEach<T>(
  keys: Iterable<string>,
  probe: (key: string) => Promise<T | undefined>,
  limits: EachLimits,
  clock: Clock = REAL_CLOCK,
): Promise<EachOutcome<T>> {
  const outcome: EachOutcome<T> = { got: new Map(), late: [], untried: [] };
  const end = clock.now() + limits.phaseMs;
  for (const key of keys) {
    const left = end - clock.now();
    if (left <= 0) {
      outcome.untried.push(key);
      continue;
    }
    const v = await eventually(Math.min(limits.perKeyMs, left), () => probe(key), clock);
    if (v === undefined) outcome.late.push(key);
    else outcome.got.set(key, v);
  }
  return outcome;
}
