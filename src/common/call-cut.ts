/**
 * A one-shot cancellation with one listener: what a node's own peer calls (GrpcChannel, and a
 * forward on the Raft streams, GrpcTransport.call) need of an AbortSignal — has it been cut, and
 * being told when it is — without an AbortController and EventTarget listeners per call: those
 * were ~0.7 % of three nodes' main-thread samples under Put c=256 (V8's CPU profile;
 * BENCHMARKS.md), for a signal that is almost never raised.
 */
export class CallCut {
  #cut = false;
  #listener: (() => void) | null = null;

  /** Whether cut() was called. */
  get isCut(): boolean {
    return this.#cut;
  }

  /** Cuts (once): the listener, if any, is called now and dropped. */
  cut(): void {
    if (this.#cut) return;
    this.#cut = true;
    const listener = this.#listener;
    this.#listener = null;
    listener?.();
  }

  /**
   * Sets the one listener, told at cut() (null clears it; a later call replaces it). Not called
   * for a cut that already happened: check isCut first.
   */
  listen(listener: (() => void) | null): void {
    this.#listener = this.#cut ? null : listener;
  }
}
