/**
 * The multi-raft driver's apply: a persisted Ready's committed entries applied to the shard's
 * state machine, the reads they unblock served, and the group advanced. In place when the
 * engine takes the writes at once; otherwise beside the next rounds, the shard sitting rounds
 * out until it is done (ShardReplica.applying; driver invariant 4, docs/raft.md).
 */
import { IntMap } from "../common/index.ts";
import type { ConfState, Ready } from "../raft/index.ts";
import { confChanged, type MetaVotersNote } from "./meta-voters.ts";
import type { ReplicationObserver } from "./multi-raft-options.ts";
import type { ShardReplica } from "./shard.ts";

/** What the apply needs of the driver. */
export interface ApplyHost {
  readonly observer: ReplicationObserver | undefined;
  /** Fails the node (an apply that could not write). */
  fail(err: unknown): void;
  /** The group has input for the next round (an apply done beside the rounds). */
  markDirty(s: ShardReplica): void;
  /** The ticker (multi-raft-quiesce.ts): keeps its list in step with the group. */
  readonly sleep: { trackSleep(s: ShardReplica): void };
  /** The record of the meta group's voters (meta-voters.ts); null on a single node. */
  readonly metaVoters: MetaVotersNote | null;
}

export class Applier {
  readonly #host: ApplyHost;
  /**
   * Shard applies in flight, by shard (one at most each), for close() to wait on. An IntMap, not
   * a Set: a Set's churn promotes what it holds (src/common/int-map.ts).
   */
  readonly #applies = new IntMap<Promise<void>>();

  constructor(host: ApplyHost) {
    this.#host = host;
  }

  /** Resolves once no apply is in flight. */
  async whenIdle(): Promise<void> {
    while (this.#applies.size > 0) await Promise.allSettled(this.#applies.values());
  }

  /**
   * Applies a persisted Ready's committed entries to the shard, serves the reads they unblock,
   * and advances the group. In the common case (KV entries, an engine with no back-pressure) all
   * of it is done before returning, with no promise per entry or per Ready: null. Otherwise (an
   * engine that throttles or stalls, a configuration change, a meta entry) the promise of its
   * end, which runs beside the next rounds and delays only its own shard. Never rejects: a
   * failure fails the node.
   */
  applyReady(s: ShardReplica, rd: Ready): Promise<void> | null {
    const conf = s.storage.conf;
    let pending: Promise<void> | null;
    try {
      pending = s.applyCommitted(rd.committedEntries);
      if (pending === null) {
        this.#advance(s, rd, conf);
        return null;
      }
    } catch (err) {
      this.#host.fail(err);
      return null;
    }
    return this.#advanceAfter(pending, s, rd, conf);
  }

  /**
   * `s` applies `rd` (#applyReady) until `pending` settles. A method of its own: a closure
   * over `s` in the round's apply loop (RoundLoop#applyAll) had V8 allocate a context for every
   * group of every round.
   */
  applyingUntil(s: ShardReplica, pending: Promise<void>): void {
    const applying: Promise<void> = pending.finally(() => {
      this.#applies.delete(s.id);
      s.applying = null;
      if (s.installed !== null || s.raw.hasReady() || s.hasInput() || s.campaignWhenReady) {
        this.#host.markDirty(s);
      }
    });
    s.applying = applying;
    this.#applies.set(s.id, applying);
  }

  /** #applyReady's end once `pending`, the apply of `rd`, settles (closures kept out of it). */
  #advanceAfter(
    pending: Promise<void>,
    s: ShardReplica,
    rd: Ready,
    conf: ConfState,
  ): Promise<void> {
    return pending.then(
      () => this.#advance(s, rd, conf),
      (err: unknown) => this.#host.fail(err),
    );
  }

  /** The rest of #applyReady once `rd`'s entries are applied (`conf`: the one before them). */
  #advance(s: ShardReplica, rd: Ready, conf: ConfState): void {
    try {
      if (s.storage.conf !== conf) confChanged(this.#host, s.id, s.storage.conf);
      s.confirmReads(rd);
      s.raw.advance();
      // Refilled after its directory was lost (refill.ts): serves again.
      const lost = s.refill;
      if (lost !== null && !s.raw.recovering && s.sm.appliedIndex >= lost.commit) {
        s.refill = null;
        this.#host.observer?.shardRefilled?.(s.id);
      }
      // A conf change applied by advance() may change the role, which wakes the group.
      this.#host.sleep.trackSleep(s);
      if (rd.hardState !== null) {
        this.#host.observer?.raftState?.(s.id, rd.hardState.term, rd.hardState.commit);
      }
    } catch (err) {
      this.#host.fail(err);
    }
  }
}
