/**
 * Leadership confirmation for linearizable reads, coalesced per peer node: the cheap form of a
 * ReadIndex heartbeat round.
 *
 * A leader of term T may serve a read at its commit index I (taken when the read arrived, once an
 * entry of T is committed) when, after the read arrived, a quorum of the group's voters was
 * still at a term ≤ T. Any write acknowledged before the read was committed either by this
 * leader (so at or below I) or by a leader of an earlier term (so at or below I too: leader
 * completeness, and an entry of T is committed), or by a leader of a later term T' — whose
 * election needed a quorum that had durably moved to T' before the write was acknowledged,
 * and which shares a member with the confirming quorum: that member could not have answered
 * "≤ T". That is all a ReadIndex heartbeat round proves (Raft thesis §6.4); it does not need the
 * heartbeat's other effects. So instead of one round per group (a heartbeat to every follower of
 * every group read, each stepping its Raft group and answering), a leader node asks each peer
 * node once for every group it reads: "is your replica of shard s at a term ≤ T?", answered
 * from the replicas' current terms without touching their groups (MultiRaft.confirmTerms).
 *
 * Calls are batched per peer node with one in flight: a check asked while a call is out waits
 * for the next call. A check must never take the answer of a call sent before it was asked:
 * that answer may predate the read (the planted bug `confirmByEarlierCall` does exactly that).
 */

/**
 * A follower's read, asked of its leader (the ReadIndex call): the follower's replica and its
 * term in the group when the read was asked, after the read arrived there. A term no higher than
 * the leader's is the same yes a term check would give, so the leader counts the follower
 * toward its quorum without asking it (MultiRaft#confirmLeadership).
 */
export interface ReadVoucher {
  readonly replica: string;
  readonly term: number;
}

/** Whether `replica` (a voter, on the node asked) is at a term ≤ `term` in group `shard`. */
export interface TermCheck {
  readonly shard: number;
  readonly term: number;
  readonly replica: string;
}

/**
 * Asks node `node` to check every `checks` entry; resolves with one answer per check, in order
 * (true: confirmed). Rejects when the node could not be asked or did not answer in time.
 */
export type ConfirmTerms = (node: string, checks: readonly TermCheck[]) => Promise<boolean[]>;

interface Waiter {
  readonly check: TermCheck;
  /** checkKey(check): waiters with the same key share one entry of a call. */
  readonly key: string;
  readonly answer: (confirmed: boolean) => void;
}

interface PeerBatch {
  /** Checks asked since the call in flight (if any) was sent. */
  waiting: Waiter[];
  /** Checks of the call in flight (taken by the planted bug). */
  inFlight: Waiter[] | null;
}

export class TermConfirmer {
  readonly #call: ConfirmTerms;
  readonly #peers = new Map<string, PeerBatch>();
  readonly #answerEarlierCalls: boolean;

  constructor(call: ConfirmTerms, options: { confirmByEarlierCall?: boolean } = {}) {
    this.#call = call;
    this.#answerEarlierCalls = options.confirmByEarlierCall === true;
  }

  /**
   * Asks node `node` whether `check` holds, in the next call to it. `answer` is called once:
   * true when the node confirmed, false when it refused, could not be asked or did not answer.
   */
  ask(node: string, check: TermCheck, answer: (confirmed: boolean) => void): void {
    let batch = this.#peers.get(node);
    if (batch === undefined) {
      batch = { waiting: [], inFlight: null };
      this.#peers.set(node, batch);
    }
    const waiter = { check, key: checkKey(check), answer };
    if (this.#answerEarlierCalls && batch.inFlight !== null) {
      // Planted bug: join the call already sent, whose answer may predate this read.
      batch.inFlight.push(waiter);
      return;
    }
    batch.waiting.push(waiter);
    if (batch.inFlight === null) this.#send(node, batch);
  }

  #send(node: string, batch: PeerBatch): void {
    const waiters = batch.waiting;
    batch.waiting = [];
    batch.inFlight = waiters;
    // One entry per distinct check: many reads of one shard share it.
    const slots = new Map<string, number>();
    const checks: TermCheck[] = [];
    for (const w of waiters) {
      if (slots.has(w.key)) continue;
      slots.set(w.key, checks.length);
      checks.push(w.check);
    }
    const settle = (answers: readonly boolean[] | null): void => {
      // The planted bug may have added waiters to this call after it left.
      const all = batch.inFlight ?? waiters;
      batch.inFlight = null;
      for (const w of all) {
        const slot = slots.get(w.key);
        w.answer(answers !== null && slot !== undefined && answers[slot] === true);
      }
      if (batch.waiting.length > 0) this.#send(node, batch);
      else if (this.#peers.get(node) === batch) this.#peers.delete(node);
    };
    let promise: Promise<boolean[]>;
    try {
      promise = this.#call(node, checks);
    } catch {
      promise = Promise.reject(new Error("confirmTerms threw"));
    }
    promise.then(
      (answers) => settle(answers.length === checks.length ? answers : null),
      () => settle(null),
    );
  }
}

function checkKey(c: TermCheck): string {
  return `${c.shard}/${c.term}/${c.replica}`;
}
