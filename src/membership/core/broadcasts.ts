/**
 * The queue of membership updates waiting to be piggybacked (SWIM's dissemination component).
 *
 * Invariants: at most one pending update per member (a newer one replaces the older); updates sent
 * fewer times go first, newer before older among equals; an update is dropped once sent `limit`
 * times, where the caller passes limit = retransmitMult · ceil(log10(n + 1)).
 */
import type { Update } from "./messages.ts";
import type { MemberId } from "./types.ts";
import { updateBytes } from "./codec.ts";

interface Pending {
  readonly update: Update;
  readonly bytes: number;
  /** Insertion order; larger is newer. */
  readonly order: number;
  transmits: number;
}

export function updateSubject(u: Update): MemberId {
  return u.kind === "alive" ? u.meta.id : u.id;
}

export class BroadcastQueue {
  readonly #pending = new Map<MemberId, Pending>();
  #order = 0;

  get size(): number {
    return this.#pending.size;
  }

  /** Queues `u`, replacing any pending update about the same member. */
  enqueue(u: Update): void {
    this.#pending.set(updateSubject(u), {
      update: u,
      bytes: updateBytes(u),
      order: this.#order++,
      transmits: 0,
    });
  }

  /** Drops the pending update about `id` (a member forgotten to make room). */
  forget(id: MemberId): void {
    this.#pending.delete(id);
  }

  /**
   * Takes updates for one message within `budget` bytes and counts them as sent once more.
   * Updates for which `skip` is true stay queued without counting a send.
   */
  take(budget: number, limit: number, skip: (u: Update) => boolean = () => false): Update[] {
    if (this.#pending.size === 0) return [];
    const candidates = [...this.#pending.values()].sort(
      (a, b) => a.transmits - b.transmits || b.order - a.order,
    );
    const out: Update[] = [];
    let left = budget;
    for (const p of candidates) {
      if (out.length === 255) break;
      if (p.bytes > left || skip(p.update)) continue;
      out.push(p.update);
      left -= p.bytes;
      p.transmits += 1;
      if (p.transmits >= limit) this.#pending.delete(updateSubject(p.update));
    }
    return out;
  }
}
