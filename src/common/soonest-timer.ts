/**
 * One pending call of a function, at the soonest time asked for: `request(ms)` runs it `ms` from
 * now unless a call already pending comes sooner; a request for sooner than the pending one
 * moves it earlier (a plain "one timer at a time" guard would make it wait for the later one).
 * The timer does not keep the process alive.
 */
export class SoonestTimer {
  readonly #run: () => void;
  #timer: NodeJS.Timeout | null = null;
  /** When the pending call is due (performance.now()); meaningless while none is pending. */
  #due = 0;

  constructor(run: () => void) {
    this.#run = run;
  }

  /** Runs the function `delayMs` from now, or sooner if a call already pending is due sooner. */
  request(delayMs: number): void {
    const due = performance.now() + delayMs;
    if (this.#timer !== null) {
      if (this.#due <= due) return;
      clearTimeout(this.#timer);
    }
    this.#due = due;
    this.#timer = setTimeout(this.#fire, delayMs);
    this.#timer.unref();
  }

  /** Drops the pending call, if any. */
  cancel(): void {
    if (this.#timer !== null) clearTimeout(this.#timer);
    this.#timer = null;
  }

  readonly #fire = (): void => {
    this.#timer = null;
    this.#run();
  };
}
