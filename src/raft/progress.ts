/**
 * The leader's view of one follower.
 *
 * - `probe`: the follower's log position is unknown; one append at a time, then wait for the
 *   answer (or a heartbeat response) before sending the next.
 * - `replicate`: the position is known; stream appends optimistically, at most `maxInflight`
 *   unacknowledged messages at once, and no more once they carry `maxInflightBytes`.
 * - `snapshot`: the follower needs entries the log no longer has; a snapshot is on its way and
 *   nothing else is sent until it is acknowledged or reported failed.
 *
 * Invariant: `match < next`.
 */
import type { LogIndex } from "./types.ts";
import { logIndex } from "./types.ts";

export type ProgressState = "probe" | "replicate" | "snapshot";

/**
 * A bounded FIFO of the unacknowledged appends: the last index of each, and its entries' bytes.
 * Full at `capacity` messages, or once they carry `maxBytes` (etcd's MaxInflightBytes): a
 * message count alone lets a follower that catches up be sent capacity × the message size at
 * once (256 MiB with the defaults), to be framed, buffered and queued at both ends. The last
 * message may take it past `maxBytes`, by one message at most.
 */
export class Inflights {
  readonly #capacity: number;
  readonly #maxBytes: number;
  #items: LogIndex[] = [];
  #sizes: number[] = [];
  #start = 0;
  #bytes = 0;

  constructor(capacity: number, maxBytes: number) {
    this.#capacity = capacity;
    this.#maxBytes = maxBytes;
  }

  get count(): number {
    return this.#items.length - this.#start;
  }

  isFull(): boolean {
    return this.count >= this.#capacity || this.#bytes >= this.#maxBytes;
  }

  add(last: LogIndex, bytes: number): void {
    this.#items.push(last);
    this.#sizes.push(bytes);
    this.#bytes += bytes;
  }

  /** Frees every in-flight message whose last index is ≤ `index`. */
  freeLE(index: LogIndex): void {
    while (this.#start < this.#items.length && (this.#items[this.#start] as LogIndex) <= index) {
      this.#bytes -= this.#sizes[this.#start] as number;
      this.#start++;
    }
    if (this.#start > 64 && this.#start * 2 > this.#items.length) {
      this.#items = this.#items.slice(this.#start);
      this.#sizes = this.#sizes.slice(this.#start);
      this.#start = 0;
    }
  }

  reset(): void {
    this.#items = [];
    this.#sizes = [];
    this.#start = 0;
    this.#bytes = 0;
  }
}

export class Progress {
  match: LogIndex;
  next: LogIndex;
  state: ProgressState = "probe";
  /** While in `snapshot`: the index of the snapshot being sent. */
  pendingSnapshot: LogIndex = logIndex(0);
  /** Heard from since the last CheckQuorum round. */
  recentActive: boolean;
  /** In `probe`: an append is outstanding; send nothing more until an answer. */
  probeSent = false;
  /** An append went to this follower since the leader's last tick heartbeat round. */
  appendedSinceHeartbeat = false;
  /** Highest ReadIndex round this follower has confirmed in the current term. */
  readAck = 0;
  /**
   * The highest commit index sent to this follower in this term that it can commit (one its log
   * holds once the message lands): what a deferred commit (RaftConfig.deferCommitBroadcast)
   * still owes it. A hint only: a follower that restarts forgets what it was told, and learns
   * it again from the next append or heartbeat.
   */
  commitSent: LogIndex = logIndex(0);
  readonly inflights: Inflights;

  constructor(
    next: LogIndex,
    maxInflight: number,
    maxInflightBytes: number,
    recentActive: boolean,
  ) {
    this.match = logIndex(0);
    this.next = next;
    this.recentActive = recentActive;
    this.inflights = new Inflights(maxInflight, maxInflightBytes);
  }

  sentCommit(index: number): void {
    if (index > this.commitSent) this.commitSent = logIndex(index);
  }

  becomeProbe(): void {
    const next =
      this.state === "snapshot"
        ? Math.max(this.match + 1, this.pendingSnapshot + 1)
        : this.match + 1;
    this.#reset("probe");
    this.next = logIndex(next);
  }

  becomeReplicate(): void {
    this.#reset("replicate");
    this.next = logIndex(this.match + 1);
  }

  becomeSnapshot(snapshotIndex: LogIndex): void {
    this.#reset("snapshot");
    this.pendingSnapshot = snapshotIndex;
  }

  #reset(state: ProgressState): void {
    this.state = state;
    this.probeSent = false;
    this.pendingSnapshot = logIndex(0);
    this.inflights.reset();
  }

  /** An acknowledgement up to `n`: returns whether it told us anything new. */
  maybeUpdate(n: LogIndex): boolean {
    let updated = false;
    if (this.match < n) {
      this.match = n;
      this.probeSent = false;
      updated = true;
    }
    if (this.next < n + 1) this.next = logIndex(n + 1);
    return updated;
  }

  /**
   * The follower lost entries it acknowledged (its log was destroyed and it is refilled): its
   * match index means nothing any more. Probe again from `next` (≥ 1).
   */
  forgetMatch(next: LogIndex): void {
    this.match = logIndex(0);
    this.becomeProbe();
    this.next = logIndex(Math.max(1, next));
  }

  /**
   * A rejection of the append at `rejected`, with the follower's hint of where to probe next.
   * Returns false when the rejection is stale (answers an older append).
   */
  maybeDecrTo(rejected: LogIndex, hint: LogIndex): boolean {
    if (this.state === "replicate") {
      if (rejected <= this.match) return false;
      this.next = logIndex(this.match + 1);
      return true;
    }
    if (this.next - 1 !== rejected) return false;
    this.next = logIndex(Math.max(Math.min(rejected, hint + 1), this.match + 1));
    this.probeSent = false;
    return true;
  }

  isPaused(): boolean {
    switch (this.state) {
      case "probe":
        return this.probeSent;
      case "replicate":
        return this.inflights.isFull();
      case "snapshot":
        return true;
    }
  }

  describe(): string {
    const extra =
      this.state === "snapshot"
        ? ` pending=${this.pendingSnapshot}`
        : this.probeSent
          ? " paused"
          : "";
    return `${this.state} match=${this.match} next=${this.next}${extra}`;
  }
}
