/**
 * One shard's view of the WAL, in memory: its uncompacted entries, its latest hard state and
 * snapshot metadata. Both live appends and recovery replay go through the same methods, so the
 * state after a restart is the state before it by construction.
 *
 * The entries are held in columns, not as an object each: their terms, types, and where their
 * bytes are in the shard's chunks (16 KiB buffers the bytes are copied into, in order). A node
 * holds every uncompacted entry of every shard (hundreds of thousands under load); as objects,
 * each with a view of the buffer it arrived in, they were the largest part of the garbage
 * collector's live set, and a follower's entries kept whole the peer frames they arrived in (a
 * few kilobytes each, for a hundred bytes used). `entry()` builds an entry when it is read.
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
import type { WalEntry, WalHardState, WalSnapshotMeta } from "./types.ts";

/**
 * Per-entry overhead counted toward the memory budget beyond its bytes: its five columns (25
 * bytes) and their spare capacity.
 */
const ENTRY_OVERHEAD_BYTES = 32;
const INITIAL_SLOTS = 16;
/** A chunk's size; a larger entry gets a chunk of its own size. */
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
   * segment); a later compaction record must cover the hole or recovery fails.
   */
  holeBelow = 0;

  /** The slot of the entry at compactIndex + 1, and how many entries there are. */
  #first = 0;
  #count = 0;
  #terms = new Float64Array(0);
  #types = new Uint8Array(0);
  /** Where each entry's bytes are: its chunk's number, the offset there, and how many. */
  #chunkOf = new Float64Array(0);
  #starts = new Int32Array(0);
  #lengths = new Int32Array(0);
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
    if (e.index <= this.compactIndex) return;
    if (e.index > this.lastIndex + 1) {
      if (!recovering) {
        throw new CairnError(
          "CAIRN_ERR_WAL_GAP",
          `WAL append: entry ${e.index} leaves a gap after ${this.lastIndex}`,
        );
      }
      this.#clear();
      this.compactIndex = e.index - 1;
      this.compactTerm = 0;
      this.holeBelow = e.index;
    } else if (e.index <= this.lastIndex) {
      // The suffix's bytes stay where they are (invariant 4).
      const lengths = this.#lengths;
      const keep = e.index - this.compactIndex - 1;
      for (let s = this.#first + keep; s < this.#first + this.#count; s++) {
        this.bytes -= (lengths[s] as number) + ENTRY_OVERHEAD_BYTES;
      }
      this.#count = keep;
    }
    this.#push(e);
  }

  /** Drops entries up to `index` (inclusive); `term` is the term of the entry at `index`. */
  compact(index: number, term: number): void {
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
      const lengths = this.#lengths;
      for (let s = this.#first; s < this.#first + drop; s++) {
        this.bytes -= (lengths[s] as number) + ENTRY_OVERHEAD_BYTES;
      }
      this.#first += drop;
      this.#count -= drop;
      // The chunks before the first entry's hold nothing any more (invariant 5).
      const firstChunk = this.#chunkOf[this.#first] as number;
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
    this.#clear();
    this.compactIndex = meta.index;
    this.compactTerm = meta.term;
    this.snapshot = meta;
    this.holeBelow = 0;
  }

  term(index: number): number | undefined {
    if (index === this.compactIndex) return this.compactTerm;
    if (index < this.compactIndex || index > this.lastIndex) return undefined;
    return this.#terms[this.#first + index - this.compactIndex - 1];
  }

  /**
   * The entry at `index` (compactIndex < index ≤ lastIndex, unchecked), its `data` a view of
   * bytes that are never written again (invariant 4).
   */
  entry(index: number): WalEntry {
    const slot = this.#first + index - this.compactIndex - 1;
    const length = this.#lengths[slot] as number;
    let data: Uint8Array = NO_BYTES;
    if (length > 0) {
      // (An empty entry may have come before any chunk: it has none.)
      const chunk = this.#chunks[(this.#chunkOf[slot] as number) - this.#firstChunk] as Uint8Array;
      const start = this.#starts[slot] as number;
      data = chunk.subarray(start, start + length);
    }
    return { term: this.#terms[slot] as number, index, type: this.#types[slot] as number, data };
  }

  /** Bytes of the payload of the entry at `index` (compactIndex < index ≤ lastIndex, unchecked). */
  dataLength(index: number): number {
    return this.#lengths[this.#first + index - this.compactIndex - 1] as number;
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
    if (this.#first + this.#count === this.#terms.length) this.#makeSlot();
    const length = e.data.length;
    if (this.#tailEnd + length > this.#tail.length) {
      this.#tail = new Uint8Array(Math.max(CHUNK_BYTES, length));
      this.#tailEnd = 0;
      this.#chunks.push(this.#tail);
    }
    const slot = this.#first + this.#count;
    this.#terms[slot] = e.term;
    this.#types[slot] = e.type;
    this.#chunkOf[slot] = this.#firstChunk + this.#chunks.length - 1;
    this.#starts[slot] = this.#tailEnd;
    this.#lengths[slot] = length;
    this.#tail.set(e.data, this.#tailEnd);
    this.#tailEnd += length;
    this.#count++;
    this.bytes += length + ENTRY_OVERHEAD_BYTES;
  }

  /** Room for one more slot after the last: the held slots moved to the front, or grown. */
  #makeSlot(): void {
    const first = this.#first;
    const count = this.#count;
    const capacity = this.#terms.length;
    if (first > 0 && count < capacity / 2) {
      this.#terms.copyWithin(0, first, first + count);
      this.#types.copyWithin(0, first, first + count);
      this.#chunkOf.copyWithin(0, first, first + count);
      this.#starts.copyWithin(0, first, first + count);
      this.#lengths.copyWithin(0, first, first + count);
    } else {
      const grown = Math.max(INITIAL_SLOTS, 2 * capacity);
      const terms = new Float64Array(grown);
      const types = new Uint8Array(grown);
      const chunkOf = new Float64Array(grown);
      const starts = new Int32Array(grown);
      const lengths = new Int32Array(grown);
      terms.set(this.#terms.subarray(first, first + count));
      types.set(this.#types.subarray(first, first + count));
      chunkOf.set(this.#chunkOf.subarray(first, first + count));
      starts.set(this.#starts.subarray(first, first + count));
      lengths.set(this.#lengths.subarray(first, first + count));
      this.#terms = terms;
      this.#types = types;
      this.#chunkOf = chunkOf;
      this.#starts = starts;
      this.#lengths = lengths;
    }
    this.#first = 0;
  }
}
