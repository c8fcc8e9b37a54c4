/**
 * The Raft log as the core sees it: the stable prefix in RaftStorage plus an unstable tail of
 * entries (and possibly a snapshot) that Ready has handed to the driver but that are not yet
 * known to be persisted.
 *
 * Invariants: `applied ≤ committed ≤ lastIndex()`; committed entries are never truncated;
 * unstable entries start at `#offset`, which is ≤ storage.lastIndex() + 1.
 *
 * The entries persisted lately and not yet applied are also kept here (`#kept`, the ones just
 * before `#offset`, at most KEEP_MAX of them and KEEP_MAX_BYTES of payload): they are what the
 * next Readies apply and what the group's messages ask terms of, and storage would rebuild each
 * of them (the WAL holds their fields in slots and their bytes in chunks). They are the objects
 * storage was given, so they equal what it holds. Of the last applied entry only the term is
 * kept (a follower's next append names it as the entry it follows): an entry kept past its apply
 * would stay as long as its group is idle, outside the WAL's memory budget.
 */
import { clearArray, dropFront } from "../common/arrays.ts";
import { RaftInvariantError } from "./errors.ts";
import type { RaftStorage } from "./storage.ts";
import type { Entry, LogIndex, Snapshot, Term } from "./types.ts";
import { logIndex, term } from "./types.ts";

/** At most this many persisted, unapplied entries are kept in `#kept`… */
const KEEP_MAX = 64;
/** …with at most this many bytes of payload (large entries are read from storage). */
const KEEP_MAX_BYTES = 64 * 1024;

export class RaftLog {
  readonly storage: RaftStorage;
  committed: LogIndex;
  applied: LogIndex;
  #unstableSnapshot: Snapshot | null = null;
  #unstable: Entry[] = [];
  #offset: LogIndex;
  /** Persisted entries not yet applied, ending just before `#offset` (see the top). */
  #kept: Entry[] = [];
  /** The payload bytes of `#kept`. */
  #keptBytes = 0;
  /** The index of the last applied entry whose term is known here (-1: none), and that term. */
  #appliedIndex = -1;
  #appliedTerm = term(0);

  constructor(storage: RaftStorage) {
    this.storage = storage;
    this.#offset = logIndex(storage.lastIndex() + 1);
    this.committed = logIndex(storage.firstIndex() - 1);
    this.applied = this.committed;
  }

  firstIndex(): LogIndex {
    if (this.#unstableSnapshot !== null) return logIndex(this.#unstableSnapshot.meta.index + 1);
    return this.storage.firstIndex();
  }

  lastIndex(): LogIndex {
    if (this.#unstable.length > 0) return logIndex(this.#offset + this.#unstable.length - 1);
    if (this.#unstableSnapshot !== null) return this.#unstableSnapshot.meta.index;
    return this.storage.lastIndex();
  }

  /** Term of entry `i`, or null when `i` is compacted away or beyond the last index. */
  term(i: LogIndex): Term | null {
    if (this.#unstableSnapshot === null) {
      // The common case, asked several times a message, without working out both ends of the
      // log: from `#offset` on the unstable tail holds the entries (none past the last index),
      // and below it storage does (#offset ≤ its last index + 1).
      if (i >= this.#offset) return this.#unstable[i - this.#offset]?.term ?? null;
      const kept = this.#kept[i - this.#offset + this.#kept.length];
      if (kept !== undefined) return kept.term;
      if (i === this.#appliedIndex) return this.#appliedTerm;
      return i < this.storage.firstIndex() - 1 ? null : this.storage.term(i);
    }
    if (i < this.firstIndex() - 1 || i > this.lastIndex()) return null;
    const snap = this.#unstableSnapshot;
    if (snap !== null && i === snap.meta.index) return snap.meta.term;
    if (i >= this.#offset) return (this.#unstable[i - this.#offset] as Entry).term;
    return this.#kept[i - this.#offset + this.#kept.length]?.term ?? this.storage.term(i);
  }

  lastTerm(): Term {
    return this.term(this.lastIndex()) ?? term(0);
  }

  matchTerm(i: LogIndex, t: Term): boolean {
    return this.term(i) === t;
  }

  /** §5.4.1: is a log ending at (lastIndex, lastTerm) at least as up to date as ours? */
  isUpToDate(lastIndex: LogIndex, lastTerm: Term): boolean {
    const myTerm = this.lastTerm();
    return lastTerm > myTerm || (lastTerm === myTerm && lastIndex >= this.lastIndex());
  }

  /**
   * Appends `entries` that follow (prevIndex, prevTerm) if that entry matches, truncating a
   * conflicting suffix; returns the index of the last new entry, or null on mismatch.
   */
  maybeAppend(
    prevIndex: LogIndex,
    prevTerm: Term,
    commit: LogIndex,
    entries: readonly Entry[],
  ): LogIndex | null {
    if (!this.matchTerm(prevIndex, prevTerm)) return null;
    const lastNew = logIndex(prevIndex + entries.length);
    const conflict = this.#findConflict(entries);
    if (conflict !== 0) {
      if (conflict <= this.committed) {
        throw new RaftInvariantError(
          `entry ${conflict} conflicts with committed entry (commit ${this.committed})`,
        );
      }
      this.append(entries, conflict - (prevIndex + 1));
    }
    this.commitTo(logIndex(Math.min(commit, lastNew)));
    return lastNew;
  }

  /** Index of the first entry that is new or whose term differs from ours; 0 if none. */
  #findConflict(entries: readonly Entry[]): number {
    for (const e of entries) {
      if (!this.matchTerm(e.index, e.term)) return e.index;
    }
    return 0;
  }

  /**
   * The largest index ≤ `index` whose term is ≤ `t`, with its term: where two logs may agree.
   * Stops at the first compacted index (term unknown, reported as 0).
   */
  findConflictByTerm(index: LogIndex, t: Term): { index: LogIndex; term: Term } {
    for (let i = index; ; i--) {
      const ti = this.term(logIndex(i));
      if (ti === null) return { index: logIndex(i), term: term(0) };
      if (ti <= t) return { index: logIndex(i), term: ti };
    }
  }

  /**
   * Appends `entries` from `entries[from]` on to the unstable tail, replacing whatever followed
   * the index before the first of them.
   */
  append(entries: readonly Entry[], from = 0): LogIndex {
    const first = entries[from];
    if (first === undefined) return this.lastIndex();
    if (first.index - 1 < this.committed) {
      throw new RaftInvariantError(
        `append at ${first.index} would overwrite committed ${this.committed}`,
      );
    }
    const after = first.index;
    if (after === this.#offset + this.#unstable.length) {
      for (let k = from; k < entries.length; k++) this.#unstable.push(entries[k] as Entry);
    } else if (after <= this.#offset) {
      // Replaces everything unstable and a suffix of storage; the driver truncates storage when it
      // persists these entries.
      this.#kept = this.#kept.slice(0, Math.max(0, after - (this.#offset - this.#kept.length)));
      this.#keptBytes = 0;
      for (const e of this.#kept) this.#keptBytes += e.data.length;
      this.#offset = after;
      this.#unstable = entries.slice(from);
    } else {
      this.#unstable = [...this.#unstable.slice(0, after - this.#offset), ...entries.slice(from)];
    }
    return this.lastIndex();
  }

  commitTo(i: LogIndex): void {
    if (i <= this.committed) return;
    if (i > this.lastIndex()) {
      throw new RaftInvariantError(
        `commit ${i} beyond last index ${this.lastIndex()}: the leader counts on entries this member does not have (was its log lost, e.g. a wiped data directory?)`,
      );
    }
    this.committed = i;
  }

  appliedTo(i: LogIndex): void {
    if (i === 0 || i <= this.applied) return;
    if (i > this.committed)
      throw new RaftInvariantError(`applied ${i} beyond commit ${this.committed}`);
    this.applied = i;
    this.#trimKept();
  }

  /**
   * `#kept` without the applied entries (the last one's term noted), and within KEEP_MAX and
   * KEEP_MAX_BYTES.
   */
  #trimKept(): void {
    const kept = this.#kept;
    if (kept.length === 0) return;
    const from = this.#offset - kept.length;
    let drop = Math.max(0, Math.min(kept.length, this.applied + 1 - from));
    const last = kept[this.applied - from];
    if (last !== undefined) {
      this.#appliedIndex = last.index;
      this.#appliedTerm = last.term;
    }
    let bytes = this.#keptBytes;
    for (let k = 0; k < drop; k++) bytes -= (kept[k] as Entry).data.length;
    while (drop < kept.length && (kept.length - drop > KEEP_MAX || bytes > KEEP_MAX_BYTES)) {
      bytes -= (kept[drop] as Entry).data.length;
      drop++;
    }
    if (drop === 0) return;
    // In place: the group's arrays are reused from one write to the next (clearArray).
    dropFront(kept, drop);
    this.#keptBytes = bytes;
  }

  /** Commits `i` if it is beyond the commit index and from term `t` (§5.4.2). */
  maybeCommit(i: LogIndex, t: Term, anyTerm: boolean): boolean {
    if (i > this.committed && (anyTerm || this.term(i) === t)) {
      this.commitTo(i);
      return true;
    }
    return false;
  }

  hasUnstableEntries(): boolean {
    return this.#unstable.length > 0;
  }

  unstableEntries(): Entry[] {
    return [...this.#unstable];
  }

  unstableSnapshot(): Snapshot | null {
    return this.#unstableSnapshot;
  }

  hasNextCommittedEntries(): boolean {
    return this.committed > Math.max(this.applied, this.firstIndex() - 1);
  }

  /** Committed entries not yet applied, at most `maxBytes` of payload (but at least one). */
  nextCommittedEntries(maxBytes: number): Entry[] {
    const lo = logIndex(Math.max(this.applied + 1, this.firstIndex()));
    if (this.committed < lo) return [];
    return this.slice(lo, logIndex(this.committed + 1), maxBytes) ?? [];
  }

  /** Entries [lo, hi) within `maxBytes`, or null if `lo` is compacted away. */
  slice(lo: LogIndex, hi: LogIndex, maxBytes: number): Entry[] | null {
    if (lo < this.firstIndex()) return null;
    if (hi > this.lastIndex() + 1)
      throw new RaftInvariantError(`slice(${lo}, ${hi}) beyond last ${this.lastIndex()}`);
    if (lo >= hi) return [];
    // An append or a Ready asks for a slice several times a write: in the common case (the
    // entries all kept, or all unstable) it is one array of the right size.
    const keptFrom = this.#offset - this.#kept.length;
    let stored: Entry[] | null = null;
    let bytes = 0;
    if (lo < keptFrom) {
      const storedHi = logIndex(Math.min(hi, keptFrom));
      stored = this.storage.entries(lo, storedHi, maxBytes);
      if (stored.length < storedHi - lo || storedHi === hi) return stored;
      for (const e of stored) bytes += e.data.length;
    }
    // The end of the slice within maxBytes (the first entry always goes in).
    let end = Math.max(lo, keptFrom);
    for (; end < hi; end++) {
      const e = (
        end < this.#offset ? this.#kept[end - keptFrom] : this.#unstable[end - this.#offset]
      ) as Entry;
      bytes += e.data.length;
      if (bytes > maxBytes && (end > lo || stored !== null)) break;
    }
    const from = Math.max(lo, keptFrom);
    const kept =
      from < this.#offset
        ? this.#kept.slice(from - keptFrom, Math.min(end, this.#offset) - keptFrom)
        : null;
    const unstable =
      end > this.#offset
        ? this.#unstable.slice(Math.max(from, this.#offset) - this.#offset, end - this.#offset)
        : null;
    let out = stored ?? kept ?? unstable ?? [];
    if (kept !== null && out !== kept) out = out.concat(kept);
    if (unstable !== null && out !== unstable) out = out.concat(unstable);
    return out;
  }

  /** The driver persisted entries up to (i, t): drop them from the unstable tail. */
  stableTo(i: LogIndex, t: Term): void {
    if (i < this.#offset) return;
    const e = this.#unstable[i - this.#offset];
    if (e === undefined || e.term !== t) return; // replaced meanwhile: still unstable
    const persisted = i + 1 - this.#offset;
    for (let k = 0; k < persisted; k++) {
      const kept = this.#unstable[k] as Entry;
      this.#kept.push(kept);
      this.#keptBytes += kept.data.length;
    }
    if (persisted === this.#unstable.length) clearArray(this.#unstable);
    else dropFront(this.#unstable, persisted);
    this.#offset = logIndex(i + 1);
    this.#trimKept();
  }

  stableSnapTo(i: LogIndex): void {
    if (this.#unstableSnapshot !== null && this.#unstableSnapshot.meta.index === i) {
      this.#unstableSnapshot = null;
    }
  }

  /** Replace the whole log by a snapshot (to be persisted by the driver). */
  restore(s: Snapshot): void {
    this.committed = s.meta.index;
    this.#unstableSnapshot = s;
    this.#unstable = [];
    this.#kept = [];
    this.#keptBytes = 0;
    this.#appliedIndex = -1;
    this.#offset = logIndex(s.meta.index + 1);
  }

  /** The newest snapshot: an unpersisted one received from the leader, else storage's. */
  snapshot(): Snapshot {
    return this.#unstableSnapshot ?? this.storage.snapshot();
  }
}
