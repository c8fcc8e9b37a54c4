/**
 * The simulation's judge. It sees every Ready every member handles and every client outcome,
 * and throws a ViolationError on the first broken property:
 *
 *  election-safety      at most one leader per term (S1)
 *  log-matching         same (index, term) ⇒ same entry and the same log before it (S2)
 *  leader-completeness  a new leader of term T holds every entry committed in a term before T
 *                       (S3). Not those a later term's leader committed meanwhile: a candidate
 *                       may count votes of term T that arrive after the voters moved on to
 *                       T+1 and its leader committed there (seed 937841, 5 members); such a
 *                       leader commits nothing, every voter being past its term.
 *  state-machine-safety no two members commit or apply different entries at one index (S4)
 *  commit-monotonic     a member's commit index never decreases while it runs (S5)
 *  commit-rule          a leader advances its commit index only onto an entry of its own term
 *                       (§5.4.2: never commit a prior-term entry by counting replicas). A
 *                       leader's first Ready may show a prior-term commit it learnt as a
 *                       candidate (another member's commit index, carried by a vote request or
 *                       refusal): allowed if another member is already seen committing that
 *                       entry. It can have counted nothing yet (its first appends leave with
 *                       that Ready, and a message of an earlier term counts for nothing).
 *  durability           every acknowledged write is committed when acknowledged, and applied
 *                       by every member of the final configuration in the end
 *
 * Linearizability of the clients' reads and writes together is judged at the end of a run by the
 * shared history checker (test/support/linearizability.ts), per key.
 */
import type { Entry, NodeId, Ready } from "../../../src/raft/index.ts";
import { describeEntry, logIndex } from "../../../src/raft/index.ts";
import type { Host } from "../support/host.ts";
import { ViolationError } from "./violation.ts";

interface Committed {
  readonly term: number;
  readonly data: string;
  /** The lowest current term of a member seen committing it: the term it was committed in. */
  inTerm: number;
}

interface AckedWrite {
  readonly key: string;
  readonly index: number;
  readonly term: number;
  readonly ackedAt: number;
}

const decoder = new TextDecoder();
const FULL_CHECK_EVERY = 100;

export class Checker {
  readonly #hosts: readonly Host[];
  readonly #leaders = new Map<number, NodeId>();
  /** (index/term) → data of every entry any member persisted. */
  readonly #seen = new Map<string, string>();
  /** index → the entry committed there, from every member's commit index. */
  readonly #committed = new Map<number, Committed>();
  readonly #commitOf = new Map<NodeId, number>();
  /** The term each member led at its last Ready, or -1. */
  readonly #ledAt = new Map<NodeId, number>();
  readonly #acked: AckedWrite[] = [];
  #maxAcked = 0;
  #maxCommitted = 0;
  #lastFull = 0;

  constructor(hosts: readonly Host[]) {
    this.#hosts = hosts;
    for (const h of hosts) this.#commitOf.set(h.id, h.raw.status().commit);
  }

  committedTerm(index: number): number | undefined {
    return this.#committed.get(index)?.term;
  }

  maxAckedIndex(): number {
    return this.#maxAcked;
  }

  maxCommittedIndex(): number {
    return this.#maxCommitted;
  }

  observeReady(h: Host, rd: Ready, now: number): void {
    const status = h.raw.status();
    if (rd.softState?.role === "leader") {
      const prev = this.#leaders.get(status.term);
      if (prev !== undefined && prev !== h.id) {
        this.#fail(
          "election-safety",
          now,
          `${prev} and ${h.id} are both leaders of term ${status.term}`,
        );
      }
      this.#leaders.set(status.term, h.id);
      this.#checkLeaderCompleteness(h, now);
    }
    for (const e of rd.entries) {
      const key = `${e.index}/${e.term}`;
      const data = entryData(e);
      const prev = this.#seen.get(key);
      if (prev !== undefined && prev !== data) {
        this.#fail(
          "log-matching",
          now,
          `two different entries at ${key}: ${prev} and ${data} (${h.id})`,
        );
      }
      this.#seen.set(key, data);
    }
    const before = this.#commitOf.get(h.id) ?? 0;
    if (status.commit < before) {
      this.#fail("commit-monotonic", now, `${h.id} commit went from ${before} to ${status.commit}`);
    }
    const ledBefore = status.role === "leader" && this.#ledAt.get(h.id) === status.term;
    this.#ledAt.set(h.id, status.role === "leader" ? status.term : -1);
    if (status.commit > before && status.role === "leader") {
      const at = h.raw.entries(logIndex(status.commit), logIndex(status.commit + 1))?.[0];
      // A new leader's first Ready may show a commit index learnt as a candidate: another
      // member's, so one that member's Readies registered before the message carrying it left.
      const learnt = !ledBefore && this.#committed.get(status.commit)?.term === at?.term;
      if (at !== undefined && at.term !== status.term && !learnt) {
        this.#fail(
          "commit-rule",
          now,
          `leader ${h.id} (term ${status.term}) advanced its commit index to ${describeEntry(at)} of an earlier term`,
        );
      }
    }
    if (status.commit > before) {
      const lo = Math.max(before + 1, status.firstIndex);
      for (const e of h.raw.entries(logIndex(lo), logIndex(status.commit + 1)) ?? []) {
        this.#registerCommitted(h, e, now);
      }
      this.#commitOf.set(h.id, status.commit);
    }
    for (const e of rd.committedEntries) this.#registerCommitted(h, e, now);
  }

  onRestart(h: Host): void {
    // A restarted member starts from its persisted commit index, which may trail what it knew.
    this.#commitOf.set(h.id, h.raw.status().commit);
    this.#ledAt.set(h.id, -1);
  }

  checkStep(now: number, running: (id: NodeId) => boolean): void {
    if (now - this.#lastFull < FULL_CHECK_EVERY) return;
    this.#lastFull = now;
    this.#checkLogMatching(now, running);
  }

  /** A client was told its write (whatever its outcome) was applied at (index, term). */
  onWriteAcknowledged(key: string, index: number, term: number, now: number): void {
    const c = this.#committed.get(index);
    if (c === undefined || c.term !== term) {
      this.#fail(
        "durability",
        now,
        `write to ${key} acknowledged at ${term}/${index} but that entry is not committed`,
      );
    }
    this.#acked.push({ key, index, term, ackedAt: now });
    this.#maxAcked = Math.max(this.#maxAcked, index);
  }

  /** After the heal: every member applied every acknowledged write, and all agree. */
  checkFinal(now: number, members: readonly NodeId[]): void {
    this.#checkLogMatching(now, (id) => members.includes(id));
    for (const h of this.#hosts) {
      if (!members.includes(h.id)) continue;
      const applied = new Map(h.sm.entries.map((e) => [e.index as number, e]));
      for (const w of this.#acked) {
        const e = applied.get(w.index);
        if (e === undefined || e.term !== w.term) {
          this.#fail(
            "durability",
            now,
            `${h.id} never applied acknowledged write to ${w.key} at ${w.term}/${w.index} (applied ${h.sm.appliedIndex}, has ${e === undefined ? "nothing" : `${e.term}/${e.index} ${decoder.decode(e.data)}`} there)`,
          );
        }
      }
    }
  }

  #registerCommitted(h: Host, e: Entry, now: number): void {
    const data = entryData(e);
    const prev = this.#committed.get(e.index);
    const inTerm = h.raw.status().term;
    if (prev === undefined) {
      this.#committed.set(e.index, { term: e.term, data, inTerm });
      this.#maxCommitted = Math.max(this.#maxCommitted, e.index);
    } else if (prev.term !== e.term || prev.data !== data) {
      this.#fail(
        "state-machine-safety",
        now,
        `index ${e.index} committed as ${prev.term} ${prev.data} and, at ${h.id}, as ${e.term} ${data}`,
      );
    } else {
      prev.inTerm = Math.min(prev.inTerm, inTerm);
    }
  }

  #checkLeaderCompleteness(h: Host, now: number): void {
    const s = h.raw.status();
    for (const [index, c] of this.#committed) {
      if (index < s.firstIndex) continue; // inside the snapshot
      if (c.inTerm >= s.term) continue; // committed by a later term's leader (see the top)
      if (index > s.lastIndex) {
        this.#fail(
          "leader-completeness",
          now,
          `new leader ${h.id} (term ${s.term}) lacks committed index ${index} (last ${s.lastIndex})`,
        );
      }
      const mine = h.raw.entries(logIndex(index), logIndex(index + 1))?.[0];
      if (mine === undefined || mine.term !== c.term) {
        this.#fail(
          "leader-completeness",
          now,
          `new leader ${h.id} (term ${s.term}) has ${mine === undefined ? "nothing" : describeEntry(mine)} at committed index ${index} (term ${c.term})`,
        );
      }
    }
  }

  #checkLogMatching(now: number, running: (id: NodeId) => boolean): void {
    const live = this.#hosts.filter((h) => running(h.id));
    const logs = live.map((h) => {
      const s = h.raw.status();
      return {
        id: h.id,
        first: s.firstIndex as number,
        entries: h.raw.entries(s.firstIndex, logIndex(s.lastIndex + 1)) ?? [],
      };
    });
    for (let a = 0; a < logs.length; a++) {
      for (let b = a + 1; b < logs.length; b++) {
        const la = logs[a];
        const lb = logs[b];
        if (la === undefined || lb === undefined) continue;
        const lo = Math.max(la.first, lb.first);
        const hi = Math.min(la.first + la.entries.length, lb.first + lb.entries.length) - 1;
        // From the highest index where terms agree, everything below must be identical.
        let agreeing = false;
        for (let i = hi; i >= lo; i--) {
          const ea = la.entries[i - la.first] as Entry;
          const eb = lb.entries[i - lb.first] as Entry;
          if (!agreeing && ea.term === eb.term) agreeing = true;
          if (agreeing && (ea.term !== eb.term || entryData(ea) !== entryData(eb))) {
            this.#fail(
              "log-matching",
              now,
              `${la.id} and ${lb.id} agree above index ${i} but differ there: ${describeEntry(ea)} vs ${describeEntry(eb)}`,
            );
          }
        }
      }
    }
  }

  #fail(kind: string, at: number, message: string): never {
    throw new ViolationError({ kind, at, message });
  }
}

function entryData(e: Entry): string {
  return `${e.type}:${decoder.decode(e.data)}`;
}
