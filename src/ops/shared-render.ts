/**
 * A costly answer (`GET /metrics`, `GET /health`: milliseconds of the node's CPU for 1,024
 * shards; `GET /health/quick`, which asks every shard worker) rendered for many requests at
 * once, and at most a tenth of the time.
 *
 * The operators' server takes any request (no authentication, by the contract). Rendered once a
 * request, 8 keep-alive connections asking for `/metrics` in a loop held the node's main thread
 * and cut its Puts from 10,800/s to 1,400/s. Here:
 *
 * - a request shares the next render that starts after it arrived: never one begun before it
 *   (an answer never predates its request), and every request that arrives meanwhile shares it;
 * - a render that took `d` lets the next start `gapFactor × d` after it ended at the soonest
 *   (at most `maxGapMs`): renders take at most 1 / (1 + gapFactor) of the time, however many ask.
 *
 * A scraper or a probe asking now and then never waits; a flood waits its turn, answered by the
 * same few renders.
 */

export interface SharedRenderOptions {
  /** The next render starts this many times the last one's time after it ended. Default 9. */
  readonly gapFactor?: number;
  /** The longest wait between renders, whatever the last one took (ms). Default 1000. */
  readonly maxGapMs?: number;
  /** The clock (ms); tests give their own. Default performance.now. */
  readonly now?: () => number;
  /** Waits `ms`; tests give their own. Default setTimeout. */
  readonly sleep?: (ms: number) => Promise<void>;
}

export class SharedRender<T> {
  readonly #render: () => Promise<T>;
  readonly #gapFactor: number;
  readonly #maxGapMs: number;
  readonly #now: () => number;
  readonly #sleep: (ms: number) => Promise<void>;
  /** The next render, not started yet: what a new request waits for. */
  #next: Promise<T> | null = null;
  /** The render running, if any. */
  #running: Promise<T> | null = null;
  /** No render starts before this time. */
  #notBefore = -Infinity;
  #renders = 0;

  constructor(render: () => Promise<T>, options: SharedRenderOptions = {}) {
    this.#render = render;
    this.#gapFactor = options.gapFactor ?? 9;
    this.#maxGapMs = options.maxGapMs ?? 1_000;
    this.#now = options.now ?? (() => performance.now());
    this.#sleep =
      options.sleep ??
      ((ms) =>
        new Promise((resolve) => {
          setTimeout(resolve, ms).unref();
        }));
  }

  /** The answer of the next render to start (now, when none runs and the gap has passed). */
  get(): Promise<T> {
    this.#next ??= this.#startNext();
    return this.#next;
  }

  /** Renders started so far. */
  get renders(): number {
    return this.#renders;
  }

  async #startNext(): Promise<T> {
    // After get() has recorded this render as the next one (an async function runs at once up
    // to its first await).
    await this.#running?.catch(() => undefined);
    for (;;) {
      const wait = this.#notBefore - this.#now();
      if (wait <= 0) break;
      await this.#sleep(wait);
    }
    // From here, a new request waits for the render after this one.
    this.#next = null;
    this.#renders++;
    const started = this.#now();
    const running = this.#render();
    this.#running = running;
    try {
      return await running;
    } finally {
      const ended = this.#now();
      this.#notBefore = ended + Math.min((ended - started) * this.#gapFactor, this.#maxGapMs);
      if (this.#running === running) this.#running = null;
    }
  }
}
