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
 * `deadline` (on deadlineClock(); Infinity: none) on another monotonic clock, one that reads
 * `now` at this instant (a driver's simulated clock, say).
 */
export function deadlineOn(now: number, deadline: number): number {
  return deadline === Infinity ? Infinity : now + (deadline - deadlineClock());
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
 * Marks a served call whose `getDeadline()` is on deadlineClock(): the front end's
 * (src/api/io-threads.ts HandedCall). The value alone cannot tell: grpc-js's Server gives a
 * number too, on the wall clock (ms since the epoch).
 */
export const DEADLINE_ON_CLOCK: unique symbol = Symbol("cairn.deadlineOnClock");

/** A served call, as callDeadline reads it. */
export interface ServedCall {
  getDeadline(): Date | number;
  readonly [DEADLINE_ON_CLOCK]?: true;
}

/**
 * A served call's deadline on deadlineClock(), Infinity for none. The front end's calls (marked
 * DEADLINE_ON_CLOCK) give one already; any other is grpc-js's (its Server, or a test serving
 * through it), whose deadline is on the wall clock, a number or a Date, and is moved onto it.
 */
export function callDeadline(call: ServedCall): number {
  const d = call.getDeadline();
  if (call[DEADLINE_ON_CLOCK] === true) return d as number;
  const wall = typeof d === "number" ? d : d.getTime();
  return wall === Infinity ? Infinity : deadlineClock() + (wall - grpcJsDeadline(0));
}

function monotonicMs(): number {
  const [seconds, nanos] = process.hrtime();
  return seconds * 1000 + nanos / 1e6;
}
