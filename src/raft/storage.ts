/**
 * What the Raft core reads from stable storage. The core never writes: the driver persists what
 * Ready hands it (into this storage, or a WAL feeding it) and then calls advance().
 *
 * Contract, for every implementation:
 * - `firstIndex() - 1` ≤ snapshot index ≤ `lastIndex()`.
 * - `term(i)` is defined for `firstIndex() - 1 ≤ i ≤ lastIndex()` (the snapshot's term at
 *   `firstIndex() - 1`); the core never asks outside that range.
 * - `entries(lo, hi, maxBytes)` returns the entries `[lo, hi)` with `firstIndex() ≤ lo < hi ≤
 *   lastIndex() + 1`, cut after `maxBytes` of payload but never empty.
 * - `initialState()` is the persisted hard state and the configuration in force at the snapshot.
 * - `snapshot()` is consistent at one index: see its documentation.
 */
import { CairnError } from "../common/errors.ts";
import type {
  ConfChange,
  ConfState,
  Entry,
  HardState,
  LogIndex,
  NodeId,
  Snapshot,
  Term,
} from "./types.ts";
import { confAfter, decodeConfChange, encodeConfChange, logIndex, term } from "./types.ts";

export interface RaftStorage {
  initialState(): { hardState: HardState; confState: ConfState };
  /**
   * Entries [lo, hi), at most `maxBytes` of payload but at least one, in a new array the caller
   * owns (RaftLog.slice appends to it).
   */
  entries(lo: LogIndex, hi: LogIndex, maxBytes: number): Entry[];
  term(i: LogIndex): Term;
  firstIndex(): LogIndex;
  lastIndex(): LogIndex;
  /**
   * The newest snapshot, consistent at one index: `meta.index` and `meta.term` name the last entry
   * it covers, `meta.conf` is the configuration in force AT that index (after applying every
   * conf-change entry up to and including it, and none after it — not the configuration of
   * today), and `data` is the state machine's image at that same index. The core installs
   * `meta.conf` on a member that receives the snapshot, so a configuration from another index
   * would give that member the wrong voters until the log corrects it, or never, if the
   * conf-change entries in between are compacted away.
   *
   * The leader sends this snapshot to members that need compacted entries. A member not in
   * `meta.conf` (added after the snapshot was taken) ignores it, so the driver must then send a
   * newer snapshot instead, taken at its applied index (as the test host does).
   */
  snapshot(): Snapshot;
}

export const EMPTY_CONF: ConfState = { voters: [], learners: [] };
export const EMPTY_HARD_STATE: HardState = { term: term(0), vote: null, commit: logIndex(0) };

/** Cut `entries` after `maxBytes` of payload, keeping at least the first entry. */
export function limitSize(entries: Entry[], maxBytes: number): Entry[] {
  let size = 0;
  for (let i = 0; i < entries.length; i++) {
    size += (entries[i] as Entry).data.length;
    if (i > 0 && size > maxBytes) return entries.slice(0, i);
  }
  return entries;
}

function rangeError(message: string): CairnError {
  return new CairnError("CAIRN_ERR_RAFT_LOG_RANGE", message);
}

/**
 * An in-memory RaftStorage: the twin of the durable one, used by tests and the simulation.
 * `#entries[0]` is a dummy holding the index and term of the compaction point.
 */
export class MemoryStorage implements RaftStorage {
  #hardState: HardState = EMPTY_HARD_STATE;
  #snapshot: Snapshot;
  #entries: Entry[];

  constructor(snapshot?: Snapshot) {
    this.#snapshot = snapshot ?? {
      meta: { index: logIndex(0), term: term(0), conf: EMPTY_CONF },
      data: new Uint8Array(0),
    };
    this.#entries = [dummy(this.#snapshot.meta.index, this.#snapshot.meta.term)];
  }

  /**
   * A storage for a founding member of a new group: one committed conf-change entry per member
   * at term 1, so that any member replaying the log from index 1 learns the whole configuration.
   */
  static bootstrap(voters: readonly NodeId[], learners: readonly NodeId[] = []): MemoryStorage {
    const s = new MemoryStorage();
    const changes: ConfChange[] = [
      ...voters.map((node): ConfChange => ({ type: "add-voter", node })),
      ...learners.map((node): ConfChange => ({ type: "add-learner", node })),
    ];
    s.append(
      changes.map((cc, i): Entry => ({
        term: term(1),
        index: logIndex(i + 1),
        type: "conf-change",
        data: encodeConfChange(cc),
      })),
    );
    s.setHardState({ term: term(1), vote: null, commit: logIndex(changes.length) });
    return s;
  }

  initialState(): { hardState: HardState; confState: ConfState } {
    return { hardState: this.#hardState, confState: this.#snapshot.meta.conf };
  }

  hardState(): HardState {
    return this.#hardState;
  }

  setHardState(hs: HardState): void {
    this.#hardState = hs;
  }

  firstIndex(): LogIndex {
    return logIndex(this.#offset() + 1);
  }

  lastIndex(): LogIndex {
    return logIndex(this.#offset() + this.#entries.length - 1);
  }

  term(i: LogIndex): Term {
    const e = this.#entries[i - this.#offset()];
    if (e === undefined) {
      throw rangeError(`term(${i}) outside [${this.#offset()}, ${this.lastIndex()}]`);
    }
    return e.term;
  }

  entries(lo: LogIndex, hi: LogIndex, maxBytes: number): Entry[] {
    const off = this.#offset();
    if (lo <= off || hi > this.lastIndex() + 1 || lo > hi) {
      throw rangeError(`entries(${lo}, ${hi}) outside (${off}, ${this.lastIndex() + 1}]`);
    }
    return limitSize(this.#entries.slice(lo - off, hi - off), maxBytes);
  }

  snapshot(): Snapshot {
    return this.#snapshot;
  }

  /** An independent copy (what a crash would leave on disk, in crash tests). */
  clone(): MemoryStorage {
    const c = new MemoryStorage(this.#snapshot);
    c.#entries = [...this.#entries];
    c.#hardState = this.#hardState;
    return c;
  }

  /** Append entries, replacing any existing suffix from `entries[0].index` on. */
  append(entries: readonly Entry[]): void {
    const first = entries[0];
    if (first === undefined) return;
    const off = this.#offset();
    const last = entries[entries.length - 1] as Entry;
    if (last.index <= off) return; // wholly compacted already
    if (first.index > this.lastIndex() + 1) {
      throw new CairnError(
        "CAIRN_ERR_RAFT_LOG_GAP",
        `append at ${first.index} leaves a gap after ${this.lastIndex()}`,
      );
    }
    const keep = entries.filter((e) => e.index > off);
    this.#entries.length = (keep[0] as Entry).index - off;
    for (const e of keep) this.#entries.push(e);
  }

  /** Replace the whole log by a snapshot received from the leader. */
  applySnapshot(snap: Snapshot): void {
    if (snap.meta.index <= this.#snapshot.meta.index) return;
    this.#snapshot = snap;
    this.#entries = [dummy(snap.meta.index, snap.meta.term)];
  }

  /**
   * Record a snapshot of the state machine at `index` (≤ lastIndex) without dropping entries.
   * `conf` must be the configuration in force at `index` (see RaftStorage.snapshot()); the log
   * since the previous snapshot determines it, so a different one is refused.
   */
  createSnapshot(index: LogIndex, conf: ConfState, data: Uint8Array): Snapshot {
    if (index <= this.#snapshot.meta.index) return this.#snapshot;
    if (index > this.lastIndex()) {
      throw rangeError(`snapshot at ${index} beyond last index ${this.lastIndex()}`);
    }
    const atIndex = this.confAt(index);
    if (!sameConf(conf, atIndex)) {
      throw new CairnError(
        "CAIRN_ERR_RAFT_LOG_CONF",
        `snapshot at ${index} with configuration ${describeConfState(conf)}, but the log says ${describeConfState(atIndex)} there`,
      );
    }
    this.#snapshot = { meta: { index, term: this.term(index), conf: atIndex }, data };
    return this.#snapshot;
  }

  /** The configuration in force at `index`: the snapshot's, then the conf changes up to `index`. */
  confAt(index: LogIndex): ConfState {
    let conf = this.#snapshot.meta.conf;
    if (index < this.#snapshot.meta.index) {
      throw rangeError(
        `configuration at ${index}: compacted into snapshot ${this.#snapshot.meta.index}`,
      );
    }
    if (index === this.#snapshot.meta.index) return conf;
    for (const e of this.entries(this.firstIndex(), logIndex(index + 1), Infinity)) {
      if (e.type === "conf-change") conf = confAfter(conf, decodeConfChange(e.data));
    }
    return conf;
  }

  /** Drop the entries before `index`, which must be covered by the snapshot. */
  compact(index: LogIndex): void {
    const off = this.#offset();
    if (index <= off) return;
    if (index > this.lastIndex() || index > this.#snapshot.meta.index) {
      throw rangeError(`compact(${index}) beyond snapshot ${this.#snapshot.meta.index}`);
    }
    const at = this.#entries[index - off] as Entry;
    this.#entries = [dummy(at.index, at.term), ...this.#entries.slice(index - off + 1)];
  }

  #offset(): number {
    return (this.#entries[0] as Entry).index;
  }
}

function sameConf(a: ConfState, b: ConfState): boolean {
  const same = (x: readonly NodeId[], y: readonly NodeId[]): boolean =>
    x.length === y.length && [...x].sort().every((id, i) => id === [...y].sort()[i]);
  return same(a.voters, b.voters) && same(a.learners, b.learners);
}

function describeConfState(c: ConfState): string {
  return `voters=(${c.voters.join(" ")}) learners=(${c.learners.join(" ")})`;
}

function dummy(index: LogIndex, t: Term): Entry {
  return { term: t, index, type: "normal", data: new Uint8Array(0) };
}
