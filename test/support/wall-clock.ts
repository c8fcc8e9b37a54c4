/**
 * A step of this process's wall clock, as NTP stepping the system clock at boot, a VM resumed on
 * another host or an operator's `date -s` makes one: `Date.now()` jumps by `ms`, while the
 * monotonic clocks (`performance.now()`, `process.hrtime`, and the timers, which run on it) go on
 * as before. Only `Date.now` is replaced (`new Date()` keeps the real time): it is what code
 * measuring durations on the wall clock calls. Returns the function that undoes the step.
 */
export function stepWallClock(ms: number): () => void {
  const real = Date.now;
  Date.now = () => real() + ms;
  return () => {
    Date.now = real;
  };
}
