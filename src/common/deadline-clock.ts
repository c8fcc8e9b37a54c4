/**
 * The clock of call deadlines: milliseconds on the system's monotonic clock (CLOCK_MONOTONIC,
 * what `process.hrtime` reads), the same in every thread of the process. A request's deadline
 * is read from its relative `grpc-timeout` as it arrives, crosses threads (an I/O thread reads
 * it, the main thread or a shard worker serves the call) and goes out again as what is left of
 * it (a forwarded call's `grpc-timeout` or frame timeout), so it never needs the wall clock: a
 * step of the wall clock (NTP, `date -s`, a VM resumed on another host) moves no deadline, as it
 * moves no other duration the node measures (its timeouts, budgets, backoffs and Raft's and
 * SWIM's timers run on `performance.now()`). ESLint refuses `Date.now()` in `src/` but in
 * `grpcJsDeadline` below and a TLS certificate's validity, which is wall-clock time.
 *
 * Each thread's `performance.now()` counts from that thread's start on the same monotonic clock,
 * so the offset to the process's clock is measured once per thread and a reading costs one
 * `performance.now()`.
 */
const offset = monotonicMs() - performance.now();

export function deadlineClock(): number {
  return offset + performance.now();
}

/**
 * A deadline `ms` from now for `@grpc/grpc-js`, which takes deadlines on the wall clock (ms since
 * the epoch) and reads them so; only for calls made through it (the client library, a joining
 * node's probe). A step of the wall clock while such a call is in flight moves its deadline.
 */
export function grpcJsDeadline(ms: number): number {
  // eslint-disable-next-line no-restricted-properties -- grpc-js's deadlines are on the wall clock
  return Date.now() + ms;
}

/**
 * A served call's deadline (`getDeadline()`) on deadlineClock(): a number is one already (the
 * front end's calls, Infinity for none); a Date is grpc-js's, on the wall clock, and is moved
 * onto it.
 */
export function callDeadline(d: Date | number): number {
  return typeof d === "number" ? d : deadlineClock() + (d.getTime() - grpcJsDeadline(0));
}

function monotonicMs(): number {
  const [seconds, nanos] = process.hrtime();
  return seconds * 1000 + nanos / 1e6;
}
