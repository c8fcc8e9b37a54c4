/**
 * The clock of call deadlines: milliseconds since the epoch, as gRPC's deadlines (grpc-js takes
 * and gives them so) and the `grpc-timeout` a request's deadline is read from. A deadline crosses
 * threads (an I/O thread reads it, the main thread or a shard worker serves the call), and each
 * thread's `performance.now()` counts from its own start; the wall clock is the one clock they
 * share. So a step of the wall clock (NTP, `date -s`) moves the deadlines of the calls in flight
 * at that moment, and nothing else: every duration a node measures across calls (timeouts,
 * budgets, backoffs, Raft's and SWIM's timers) runs on the monotonic clock
 * (`performance.now()`), and ESLint refuses `Date.now()` anywhere else in `src/` (but for a TLS
 * certificate's validity, which is wall-clock time).
 */
export function deadlineClock(): number {
  // eslint-disable-next-line no-restricted-properties -- the one wall-clock reading of call deadlines
  return Date.now();
}
