/**
 * Empties `a` and keeps its backing store for the pushes that follow. `a.length = 0` has V8 drop
 * the backing store, so the next push allocates a new one (17 slots, ~150 bytes): on a queue
 * emptied every round that is an allocation per round and queue. Popping on V8's fast path only
 * turns slots into holes, references included, and never shrinks the store.
 */
export function clearArray(a: unknown[]): void {
  while (a.length > 0) a.pop();
}

/** Removes the first `n` elements of `a` in place, keeping its backing store (see clearArray). */
export function dropFront(a: unknown[], n: number): void {
  if (n <= 0) return;
  const keep = a.length - n;
  for (let i = 0; i < keep; i++) a[i] = a[i + n];
  while (a.length > Math.max(keep, 0)) a.pop();
}
