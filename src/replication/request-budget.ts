/**
 * The node-wide budget for the requests waiting in the multi-raft driver (driver invariant 5,
 * docs/raft.md): the bytes of every queued proposal and read, bounded by
 * MultiRaftOptions.maxPendingBytes; past it, requests are refused as retryable back-pressure.
 */
import { CairnError } from "../common/errors.ts";

/** What a waiting request costs the node beyond its payload (promises, closures, queues). */
export const REQUEST_OVERHEAD_BYTES = 512;

export class RequestBudget {
  readonly #maxPendingBytes: number;
  /** Bytes of the requests waiting in the driver now. */
  #pendingBytes = 0;

  constructor(maxPendingBytes: number) {
    this.#maxPendingBytes = maxPendingBytes;
  }

  /** Bytes of the requests waiting now. */
  get pendingBytes(): number {
    return this.#pendingBytes;
  }

  /**
   * Takes `bytes` of the node-wide budget for waiting requests, or refuses the request. One
   * request is always admitted when nothing waits, however large, so no request is refused
   * forever. Given back with unreserve.
   */
  reserve(bytes: number): void {
    if (this.#pendingBytes > 0 && this.#pendingBytes + bytes > this.#maxPendingBytes) {
      throw new CairnError(
        "CAIRN_ERR_BACKPRESSURE",
        `the node has ${this.#pendingBytes} bytes of requests waiting (limit ${this.#maxPendingBytes}); retry later`,
        { retryable: true },
      );
    }
    this.#pendingBytes += bytes;
  }

  unreserve(bytes: number): void {
    this.#pendingBytes -= bytes;
  }
}
