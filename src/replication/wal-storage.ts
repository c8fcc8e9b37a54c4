/**
 * One shard's Raft log as the Raft core reads it, backed by the node-wide WAL (which keeps each
 * shard's uncompacted entries in memory). The driver writes through the WAL; this view only
 * reads. The configuration at the compaction point comes from the shard's state machine, which
 * records it as conf-change entries are applied (see commands.ts).
 */
import { CairnError } from "../common/errors.ts";
import type {
  ConfState,
  Entry,
  HardState,
  LogIndex,
  RaftStorage,
  Snapshot,
  Term,
} from "../raft/index.ts";
import { EMPTY_CONF, logIndex, term } from "../raft/index.ts";
import type { Wal, WalEntry } from "../storage/index.ts";

/** WAL entry type tags for Raft entry types. */
export const WAL_NORMAL = 0;
export const WAL_CONF_CHANGE = 1;

export function toWalEntry(e: Entry): WalEntry {
  return {
    term: e.term,
    index: e.index,
    type: e.type === "normal" ? WAL_NORMAL : WAL_CONF_CHANGE,
    data: e.data,
  };
}

function fromWalEntry(e: WalEntry): Entry {
  return {
    term: term(e.term),
    index: logIndex(e.index),
    type: e.type === WAL_CONF_CHANGE ? "conf-change" : "normal",
    data: e.data,
  };
}

const EMPTY = new Uint8Array(0);

export class WalRaftStorage implements RaftStorage {
  readonly #wal: Wal;
  readonly #shard: number;
  /** The configuration as of the state machine's applied state (≥ the compaction point). */
  conf: ConfState;
  /**
   * Builds a snapshot of the state machine at its applied index (set by the driver). Without
   * one, a snapshot is only the compaction point's position, with no data: enough for a group
   * that never sends one (a single voter).
   */
  snapshotSource: (() => Snapshot) | null = null;

  constructor(wal: Wal, shard: number, conf: ConfState = EMPTY_CONF) {
    this.#wal = wal;
    this.#shard = shard;
    this.conf = conf;
  }

  /**
   * The hard state on disk, its commit index raised to the snapshot's index when below it. A
   * round that installs a snapshot appends its mark and then its hard state in one write; a
   * power cut that tears the write between the two keeps the mark and the hard state of an
   * earlier round (driver simulation, seed 990000 of five nodes: commit 10 under a snapshot at
   * 13, and the node could not open its data). A snapshot holds only committed state (a leader
   * sends what it applied), so its index is committed: what the lost record said. Its term and
   * vote are the earlier round's: that round promised nothing in a later term (its answers and
   * votes leave only once it is durable).
   */
  initialState(): { hardState: HardState; confState: ConfState } {
    const hs = this.#wal.hardState(this.#shard);
    const snapshotIndex = this.firstIndex() - 1;
    // (None at all when the torn round was the replica's first with a hard state: a new
    // learner's first snapshot.)
    const hardState: HardState = {
      term: term(hs?.term ?? 0),
      vote: (hs?.vote ?? null) as HardState["vote"],
      commit: logIndex(Math.max(hs?.commit ?? 0, snapshotIndex)),
    };
    return { hardState, confState: this.conf };
  }

  entries(lo: LogIndex, hi: LogIndex, maxBytes: number): Entry[] {
    return this.#wal.entries(this.#shard, lo, hi, maxBytes).map(fromWalEntry);
  }

  term(i: LogIndex): Term {
    const t = this.#wal.term(this.#shard, i);
    if (t === undefined) {
      throw new CairnError(
        "CAIRN_ERR_RAFT_LOG_RANGE",
        `shard ${this.#shard}: no term for index ${i}`,
      );
    }
    return term(t);
  }

  firstIndex(): LogIndex {
    return logIndex(this.#wal.firstIndex(this.#shard));
  }

  lastIndex(): LogIndex {
    return logIndex(this.#wal.lastIndex(this.#shard));
  }

  snapshot(): Snapshot {
    if (this.snapshotSource !== null) return this.snapshotSource();
    const index = logIndex(this.#wal.firstIndex(this.#shard) - 1);
    return { meta: { index, term: this.term(index), conf: this.conf }, data: EMPTY };
  }
}
