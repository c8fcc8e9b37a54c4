/**
 * Internal iterators walk versions in internal order (user key ascending, sequence descending).
 * Visibility at a snapshot and tombstones are resolved above them (user iterators, compaction).
 */
import { versionAt, versionCount, type MemNode, type Memtable, type Version } from "./memtable.ts";
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

export class MemIterator implements InternalIterator {
  valid = false;
  key = "";
  seq = 0;
  kind = 0;
  readonly #mem: Memtable;
  #node: MemNode | null = null;
  /** Version of #node, newest (0) to oldest. */
  #i = 0;
  #version: Version | null = null;

  constructor(mem: Memtable) {
    this.#mem = mem;
  }

  #load(): void {
    const node = this.#node;
    if (node === null) {
      this.valid = false;
      return;
    }
    const v = versionAt(node, this.#i);
    this.valid = true;
    this.key = node.key;
    this.seq = v.seq;
    this.kind = v.kind;
    this.#version = v;
  }

  value(): Uint8Array {
    return this.#version === null ? EMPTY : this.#mem.value(this.#version);
  }

  next(): void {
    const node = this.#node as MemNode;
    if (this.#i + 1 < versionCount(node)) {
      this.#i++;
    } else {
      this.#node = node.next[0] ?? null;
      this.#i = 0;
    }
    this.#load();
  }

  seek(key: string | undefined, seq: number): void {
    this.#node = this.#mem.seek(key);
    this.#i = 0;
    const node = this.#node;
    if (node !== null && node.key === key) {
      const n = versionCount(node);
      while (this.#i < n && versionAt(node, this.#i).seq > seq) this.#i++;
      if (this.#i === n) {
        this.#node = node.next[0] ?? null;
        this.#i = 0;
      }
    }
    this.#load();
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
