/**
 * One shard's view of the WAL, in memory: its uncompacted entries, its latest hard state and
 * snapshot metadata. Both live appends and recovery replay go through the same methods, so the
 * state after a restart is the state before it by construction.
 *
 * The entries are held in one array of numbers, not as an object each: per entry its term, type,
 * and where its bytes are in the shard's chunks (buffers the bytes are copied into, in order:
 * 1 KiB first, each next one twice the last, up to 16 KiB), side by side. One array, not a column
 * each: an append or a read touches one object and the cache lines of one slot, where five
 * columns were five cold objects and five lines. A node holds every uncompacted entry of every
 * shard (hundreds of thousands under load); as objects, each with a view of the buffer it
 * arrived in, they were the largest part of the garbage collector's live set, and a follower's
 * entries kept whole the peer frames they arrived in (a few kilobytes each, for a hundred bytes
 * used). `entry()` builds an entry when it is read.
 *
 * Invariants:
 *  1. The log is contiguous above the compaction point: the entry at `compactIndex + 1 + i` is in
 *     slot `#first + i`, for `0 ≤ i < #count`.
 *  2. `term(compactIndex) === compactTerm`; entries at or below `compactIndex` are gone.
 *  3. `bytes` is the sum of `entryBytes()` over the entries held.
 *  4. Bytes written to a chunk are never written again: a truncated suffix's bytes stay where
 *     they were (new entries go after them), and a chunk is dropped, never reused, once no entry
 *     is in it. An entry read earlier (its `data` a view of a chunk, perhaps still queued for a
 *     peer) keeps its bytes whatever the log does next.
 *  5. The chunks held are those from the first entry's to the last one written. Beyond the
 *     entries' bytes they hold the compacted part of the first, the room left in the last, the
 *     ends of chunks the next entry did not fit in, and truncated suffixes' bytes.
 */
import { CairnError } from "../../common/index.ts";
import type { WalDroppedLog, WalEntry, WalHardState, WalSnapshotMeta } from "./types.ts";

/**
 * Per-entry overhead counted toward the memory budget beyond its bytes: its slot (five numbers,
 * 40 bytes) and the array's spare capacity.
 */
const ENTRY_OVERHEAD_BYTES = 48;
/** A slot of #slots: the entry's term, its type, its chunk's number, offset there and length. */
const SLOT = 5;
const TERM = 0;
const TYPE = 1;
const CHUNK = 2;
const START = 3;
const LENGTH = 4;
const INITIAL_SLOTS = 16;
/**
 * A log's first chunk, and the size its chunks double to (a larger entry gets a chunk of its own
 * size). A new shard's log starts small: a node opens its 1,024 shards' logs when they are
 * created, where a 16 KiB buffer each cost ~55 µs to allocate (zeroed memory outside the heap,
 * and the collections that much external memory brings) against 5 µs for 1 KiB.
 */
const FIRST_CHUNK_BYTES = 1024;
const CHUNK_BYTES = 16 * 1024;
const NO_BYTES = new Uint8Array(0);

export function entryBytes(e: WalEntry): number {
  return e.data.length + ENTRY_OVERHEAD_BYTES;
}

export class ShardLog {
  compactIndex = 0;
  compactTerm = 0;
  hardState: WalHardState | undefined = undefined;
  snapshot: WalSnapshotMeta | undefined = undefined;
  bytes = 0;
  /**
   * Set during recovery when an entry arrives above a hole (its predecessors were in a deleted
   * segment); a later compaction record must cover the hole or recovery fails. Meanwhile
   * compactIndex is `holeBelow - 1`, a placeholder: an entry at or below it is an overwrite.
   */
  holeBelow = 0;
  /**
   * The shard's replica here was deleted (drop()): only its term and vote are kept, in
   * `hardState`. Cleared by the next record of the shard (a replica created here again).
   */
  dropped = false;
  /**
   * The last entry of the log the shard's last drop deleted (drop()), while the shard's log has
   * held no entry and no snapshot since: kept through hard states (a replica created again
   * whose term moved), gone with its first entry or snapshot. null: dropped by a drop record
   * without it (a version before kind 6), the entry unknown. undefined: none.
   */
  droppedLog: WalDroppedLog | null | undefined = undefined;

  /** The slot of the entry at compactIndex + 1, and how many entries there are. */
  #first = 0;
  #count = 0;
  /** SLOT numbers per slot (TERM, TYPE, CHUNK, START, LENGTH); capacity `#slots.length / SLOT`. */
  #slots = new Float64Array(0);
  /** The chunks held, oldest first; `#chunks[i]` is chunk number `#firstChunk + i`. */
  #chunks: Uint8Array[] = [];
  #firstChunk = 0;
  /** The last chunk (the one written to) and the end of what was written there. */
  #tail = NO_BYTES;
  #tailEnd = 0;

  get lastIndex(): number {
    return this.compactIndex + this.#count;
  }

  /**
   * Appends `e`; an entry at an index already present replaces it and every entry after it
   * (Raft's log-matching overwrite of a conflicting suffix). `e.data` is copied.
   */
  append(e: WalEntry, recovering: boolean): void {
    this.dropped = false;
    this.droppedLog = undefined;
    if (e.index <= this.compactIndex) {
      if (this.holeBelow === 0) return;
      // Above a hole, compactIndex is a placeholder, not a compaction: this entry was written
      // above the real compaction point and replaced every entry from its index on, those held
      // here too. Its predecessors were in the deleted segment, so the hole now starts here;
      // the compaction mark that let that segment go covers it, and comes later (before this
      // entry, it had made it one at or below the compaction point, refused by Wal.append).
      this.#startHole(e.index);
    } else if (e.index > this.lastIndex + 1) {
      if (!recovering) {
        throw new CairnError(
          "CAIRN_ERR_WAL_GAP",
          `WAL append: entry ${e.index} leaves a gap after ${this.lastIndex}`,
        );
      }
      this.#startHole(e.index);
    } else if (e.index <= this.lastIndex) {
      // The suffix's bytes stay where they are (invariant 4).
      const slots = this.#slots;
      const keep = e.index - this.compactIndex - 1;
      for (let s = this.#first + keep; s < this.#first + this.#count; s++) {
        this.bytes -= (slots[s * SLOT + LENGTH] as number) + ENTRY_OVERHEAD_BYTES;
      }
      this.#count = keep;
    }
    this.#push(e);
  }

  /** Drops entries up to `index` (inclusive); `term` is the term of the entry at `index`. */
  compact(index: number, term: number): void {
    this.dropped = false;
    if (this.holeBelow !== 0 && index >= this.holeBelow - 1) {
      // Recovery met this shard's first surviving entry before the compaction record that
      // covers what came before it (that record sits in a later segment): the hole is filled,
      // and a mark at exactly the hole's edge brings the term the placeholder lacked.
      this.holeBelow = 0;
      if (index === this.compactIndex) this.compactTerm = term;
    }
    if (index <= this.compactIndex) return;
    if (index >= this.lastIndex) {
      this.#clear();
    } else {
      const drop = index - this.compactIndex;
      const slots = this.#slots;
      for (let s = this.#first; s < this.#first + drop; s++) {
        this.bytes -= (slots[s * SLOT + LENGTH] as number) + ENTRY_OVERHEAD_BYTES;
      }
      this.#first += drop;
      this.#count -= drop;
      // The chunks before the first entry's hold nothing any more (invariant 5).
      const firstChunk = this.#slots[this.#first * SLOT + CHUNK] as number;
      if (firstChunk > this.#firstChunk) {
        this.#chunks.splice(0, firstChunk - this.#firstChunk);
        this.#firstChunk = firstChunk;
      }
    }
    this.compactIndex = index;
    this.compactTerm = term;
  }

  /** Installs a snapshot: the whole log is replaced by the snapshot's position. */
  applySnapshot(meta: WalSnapshotMeta): void {
    this.dropped = false;
    this.droppedLog = undefined;
    this.#clear();
    this.compactIndex = meta.index;
    this.compactTerm = meta.term;
    this.snapshot = meta;
    this.holeBelow = 0;
  }

  /**
   * The replica was deleted (replica GC): entries, snapshot and compaction mark go, and the hard
   * state keeps its term and vote with commit 0. A replica created here again starts from that
   * term and vote, as if new, so a vote it gave is never given again in the same term, and
   * votes as the deleted log would (`droppedLog`: its last entry, or null if unknown).
   */
  drop(term: number, vote: string | null, droppedLog: WalDroppedLog | null): void {
    this.#clear();
    this.compactIndex = 0;
    this.compactTerm = 0;
    this.snapshot = undefined;
    this.hardState = { term, vote, commit: 0 };
    this.holeBelow = 0;
    this.dropped = true;
    this.droppedLog = droppedLog;
  }

  term(index: number): number | undefined {
    if (index === this.compactIndex) return this.compactTerm;
    if (index < this.compactIndex || index > this.lastIndex) return undefined;
    return this.#slots[(this.#first + index - this.compactIndex - 1) * SLOT + TERM];
  }

  /**
   * The entry at `index` (compactIndex < index ≤ lastIndex, unchecked), its `data` a view of
   * bytes that are never written again (invariant 4).
   */
  entry(index: number): WalEntry {
    const slots = this.#slots;
    const at = (this.#first + index - this.compactIndex - 1) * SLOT;
    const length = slots[at + LENGTH] as number;
    let data: Uint8Array = NO_BYTES;
    if (length > 0) {
      // (An empty entry may have come before any chunk: it has none.)
      const chunk = this.#chunks[(slots[at + CHUNK] as number) - this.#firstChunk] as Uint8Array;
      const start = slots[at + START] as number;
      data = chunk.subarray(start, start + length);
    }
    return { term: slots[at + TERM] as number, index, type: slots[at + TYPE] as number, data };
  }

  /** Bytes of the payload of the entry at `index` (compactIndex < index ≤ lastIndex, unchecked). */
  dataLength(index: number): number {
    return this.#slots[(this.#first + index - this.compactIndex - 1) * SLOT + LENGTH] as number;
  }

  /**
   * Recovery: the log starts at `index`, its predecessors in a deleted segment; a placeholder
   * compaction point below it until a compaction mark covers the hole (compact()).
   */
  #startHole(index: number): void {
    this.#clear();
    this.compactIndex = index - 1;
    this.compactTerm = 0;
    this.holeBelow = index;
  }

  /** No entry, no chunk (the next entry starts a new one: invariant 4). */
  #clear(): void {
    this.#first = 0;
    this.#count = 0;
    this.#chunks = [];
    this.#firstChunk = 0;
    this.#tail = NO_BYTES;
    this.#tailEnd = 0;
    this.bytes = 0;
  }

  #push(e: WalEntry): void {
    if ((this.#first + this.#count) * SLOT === this.#slots.length) this.#makeSlot();
    const length = e.data.length;
    if (this.#tailEnd + length > this.#tail.length) {
      const size = Math.min(CHUNK_BYTES, Math.max(FIRST_CHUNK_BYTES, 2 * this.#tail.length));
      this.#tail = new Uint8Array(Math.max(size, length));
      this.#tailEnd = 0;
      this.#chunks.push(this.#tail);
    }
    const slots = this.#slots;
    const at = (this.#first + this.#count) * SLOT;
    slots[at + TERM] = e.term;
    slots[at + TYPE] = e.type;
    slots[at + CHUNK] = this.#firstChunk + this.#chunks.length - 1;
    slots[at + START] = this.#tailEnd;
    slots[at + LENGTH] = length;
    this.#tail.set(e.data, this.#tailEnd);
    this.#tailEnd += length;
    this.#count++;
    this.bytes += length + ENTRY_OVERHEAD_BYTES;
  }

  /** Room for one more slot after the last: the held slots moved to the front, or grown. */
  #makeSlot(): void {
    const first = this.#first;
    const count = this.#count;
    const capacity = this.#slots.length / SLOT;
    if (first > 0 && count < capacity / 2) {
      this.#slots.copyWithin(0, first * SLOT, (first + count) * SLOT);
    } else {
      const grown = new Float64Array(Math.max(INITIAL_SLOTS, 2 * capacity) * SLOT);
      grown.set(this.#slots.subarray(first * SLOT, (first + count) * SLOT));
      this.#slots = grown;
    }
    this.#first = 0;
  }
}
