/**
 * Internal iterators walk versions in internal order (user key ascending, sequence descending).
 * Visibility at a snapshot and tombstones are resolved above them (user iterators, compaction).
 */
import { versionAt, versionCount, type MemNode, type Memtable } from "./memtable.ts";
import {
  blockHandleOf,
  blockKey,
  blockKind,
  blockSeq,
  blockValue,
  entryEnd,
  entryStart,
  seekInBlock,
  type BlockHandle,
  type ParsedBlock,
} from "./format.ts";

export interface InternalIterator {
  valid: boolean;
  key: string;
  seq: number;
  kind: number;
  value(): Uint8Array;
  next(): void;
  /** Positions at the first version at or after (key, seq); first version if key is undefined. */
  seek(key: string | undefined, seq: number): void;
}

/**
 * Walks a memtable's skip list. A read may index writes made after this iterator stood on a
 * node: indexing overwrites the node's inline (newest) version in place and pushes the old one
 * onto `older`. So the iterator copies the version it stands on (sequence, kind, where its value
 * is) rather than keep the node's fields, and finds the next version by sequence rather than by
 * position (issue 50: a paused scan returned a value written after its snapshot).
 */
export class MemIterator implements InternalIterator {
  valid = false;
  key = "";
  seq = 0;
  kind = 0;
  readonly #mem: Memtable;
  #node: MemNode | null = null;
  /** The version stood on, copied (see the class comment). */
  readonly #version = { seq: 0, kind: 0, chunk: 0, at: 0, size: 0 };

  constructor(mem: Memtable) {
    this.#mem = mem;
  }

  /** Stands on the newest version of #node with seq < `below` (or the next node's newest). */
  #load(below: number): void {
    for (let node = this.#node; node !== null; node = node.next[0] ?? null) {
      const n = versionCount(node);
      for (let i = 0; i < n; i++) {
        const v = versionAt(node, i);
        if (v.seq >= below) continue;
        this.#node = node;
        const own = this.#version;
        own.seq = v.seq;
        own.kind = v.kind;
        own.chunk = v.chunk;
        own.at = v.at;
        own.size = v.size;
        this.valid = true;
        this.key = node.key;
        this.seq = v.seq;
        this.kind = v.kind;
        return;
      }
      below = Infinity;
    }
    this.#node = null;
    this.valid = false;
  }

  value(): Uint8Array {
    return this.valid ? this.#mem.value(this.#version) : EMPTY;
  }

  next(): void {
    this.#load(this.seq);
  }

  seek(key: string | undefined, seq: number): void {
    this.#node = this.#mem.seek(key);
    const node = this.#node;
    // Versions of the key itself above `seq` come before the target in internal order.
    this.#load(node !== null && node.key === key ? seq + 1 : Infinity);
  }
}

const EMPTY = new Uint8Array(0);

/** Where a table iterator gets its blocks (the block cache on the main thread, a buffer in a worker). */
export interface BlockSource {
  readonly index: ParsedBlock;
  /** The data block at `handle`, the `ordinal`-th of the table (its index entry's position). */
  readBlock(handle: BlockHandle, ordinal: number): ParsedBlock;
}

export class TableIterator implements InternalIterator {
  valid = false;
  key = "";
  seq = 0;
  kind = 0;
  readonly #table: BlockSource;
  #blockIndex = 0;
  #block: ParsedBlock | null = null;
  #i = 0;

  constructor(table: BlockSource) {
    this.#table = table;
  }

  value(): Uint8Array {
    const b = this.#block as ParsedBlock;
    return blockValue(b, this.#i);
  }

  /** The current entry's encoded bytes: `block[start, end)` (compactions copy them as is). */
  encoded(): { block: Buffer; start: number; end: number } {
    const b = this.#block as ParsedBlock;
    const i = this.#i;
    return {
      block: b.data,
      start: entryStart(b, i),
      end: entryEnd(b, i),
    };
  }

  #load(): void {
    for (;;) {
      const b = this.#block;
      if (b === null) {
        this.valid = false;
        return;
      }
      if (this.#i < b.count) {
        this.valid = true;
        this.key = blockKey(b, this.#i);
        this.seq = blockSeq(b, this.#i);
        this.kind = blockKind(b, this.#i);
        return;
      }
      this.#openBlock(this.#blockIndex + 1);
      this.#i = 0;
    }
  }

  #openBlock(n: number): void {
    this.#blockIndex = n;
    const index = this.#table.index;
    this.#block = n < index.count ? this.#table.readBlock(blockHandleOf(index, n), n) : null;
  }

  next(): void {
    this.#i++;
    this.#load();
  }

  seek(key: string | undefined, seq: number): void {
    if (key === undefined) {
      this.#openBlock(0);
      this.#i = 0;
    } else {
      // The first block whose last entry is at or after the target holds the target, if any.
      this.#openBlock(seekInBlock(this.#table.index, key, seq));
      this.#i = this.#block === null ? 0 : seekInBlock(this.#block, key, seq);
    }
    this.#load();
  }
}

/** Merges children into one internal order; among equal (key, seq) the earlier child wins. */
export class MergingIterator implements InternalIterator {
  valid = false;
  key = "";
  seq = 0;
  kind = 0;
  readonly #children: InternalIterator[];
  /** Min-heap of indexes into #children (valid ones only). */
  #heap: number[] = [];

  constructor(children: InternalIterator[]) {
    this.#children = children;
  }

  #less(a: number, b: number): boolean {
    const x = this.#children[a] as InternalIterator;
    const y = this.#children[b] as InternalIterator;
    if (x.key !== y.key) return x.key < y.key;
    if (x.seq !== y.seq) return x.seq > y.seq;
    return a < b;
  }

  #siftDown(i: number): void {
    const h = this.#heap;
    for (;;) {
      const l = 2 * i + 1;
      if (l >= h.length) return;
      let m = l;
      const r = l + 1;
      if (r < h.length && this.#less(h[r] as number, h[l] as number)) m = r;
      if (!this.#less(h[m] as number, h[i] as number)) return;
      const t = h[i] as number;
      h[i] = h[m] as number;
      h[m] = t;
      i = m;
    }
  }

  #top(): void {
    const first = this.#heap[0];
    if (first === undefined) {
      this.valid = false;
      return;
    }
    const c = this.#children[first] as InternalIterator;
    this.valid = true;
    this.key = c.key;
    this.seq = c.seq;
    this.kind = c.kind;
  }

  value(): Uint8Array {
    return (this.#children[this.#heap[0] as number] as InternalIterator).value();
  }

  /** The child positioned at the current entry. */
  current(): InternalIterator {
    return this.#children[this.#heap[0] as number] as InternalIterator;
  }

  next(): void {
    const first = this.#heap[0] as number;
    const c = this.#children[first] as InternalIterator;
    c.next();
    if (!c.valid) {
      const last = this.#heap.pop() as number;
      if (this.#heap.length > 0 && last !== first) this.#heap[0] = last;
    }
    if (this.#heap.length > 0) this.#siftDown(0);
    this.#top();
  }

  seek(key: string | undefined, seq: number): void {
    this.#heap = [];
    this.#children.forEach((c, i) => {
      c.seek(key, seq);
      if (c.valid) this.#heap.push(i);
    });
    for (let i = (this.#heap.length >> 1) - 1; i >= 0; i--) this.#siftDown(i);
    this.#top();
  }
}
