/**
 * The memtable: every write is appended, encoded as a table entry, to an arena of byte chunks,
 * and that is all a write does. The index over the arena is built when a read needs it: a Map
 * of user keys (binary strings) finds a key's versions for O(1) point reads, and a skip list for
 * ordered iteration that keys join lazily (the first ordered read after they are indexed sorts
 * them and links them into the skip list in order, each insertion starting where the previous
 * one ended). A read first indexes the entries written since the last one (`#catchUp`).
 *
 * Why lazily: a memtable that is only written (a shard taking Puts) never builds its index, and
 * its flush does not need one. The index is a JS object per key, a string, and a hash table that
 * is cold in the cache on a node of a thousand shards; built per write, it made three nodes'
 * Puts at c=256 ~15–30 % slower (BENCHMARKS.md, "The memtable indexed when read").
 *
 * The arena is what a flush hands to a worker: its chunks are shared memory, and the worker sorts
 * the entries, drops the versions no reader can see and builds the table (`runFlush`). The main
 * thread neither walks the nodes nor encodes anything to flush, and holds no value objects: a
 * value is copied into the arena once, and read back as a view of it.
 *
 * The index keeps a key's versions while a reader may need them: when it indexes entries and
 * `readersBelow()` says no reader (snapshot, scan under way) is open, a key's versions are
 * replaced by the newest instead of kept beneath it (a reader opened later reads at a sequence
 * at or above every entry written so far). A version with the sequence of the key's newest
 * version replaces it (several writes to one key in one batch: the last wins). The arena keeps
 * the bytes of every write until the memtable is flushed, as LevelDB's does: the flush drops
 * what the index would have dropped.
 * Byte-accounted: `dataBytes` is the arena's contents, which drives rotation at `memtable_bytes`;
 * `bytes` approximates the memory held (the arena's chunks, and the index once built).
 */
import { EntryCursor, entryLength, KIND_DELETE, writeEntry } from "./format.ts";
import { keyOrder } from "./key-order.ts";

const MAX_HEIGHT = 12;
/** Rough per-version and per-key overhead of the JS objects, for accounting. */
const VERSION_OVERHEAD = 40;
const NODE_OVERHEAD = 96;
/**
 * The arena's first chunk, and its largest: each new chunk doubles the last, so a node with a
 * thousand small memtables (one per shard) does not hold 64 KiB for each. A write that starts a
 * chunk adds the chunk to the memory accounted at once: at most this much, or its own entry's
 * size when larger (the node's memtable budget is exceeded by at most one write and a chunk).
 */
const FIRST_CHUNK_BYTES = 1024;
export const MAX_CHUNK_BYTES = 64 * 1024;

/** A version of a key: its value is `size` bytes at `at` in arena chunk `chunk`. */
export interface Version {
  readonly seq: number;
  readonly kind: number;
  readonly chunk: number;
  readonly at: number;
  readonly size: number;
}

/**
 * A key of the skip list. Its newest version is inlined (most keys have one version); older ones
 * are in `older`, oldest first.
 */
export interface MemNode {
  readonly key: string;
  seq: number;
  kind: number;
  chunk: number;
  at: number;
  size: number;
  older: Version[] | null;
  /** Successors per level: empty until the node is linked into the skip list. */
  next: Array<MemNode | null>;
}

/** Number of versions of a node. */
export function versionCount(node: MemNode): number {
  return node.older === null ? 1 : node.older.length + 1;
}

/** The `i`-th version of a node, newest first (i = 0 is the newest). */
export function versionAt(node: MemNode, i: number): Version {
  if (i === 0) return node;
  const older = node.older as Version[];
  return older[older.length - i] as Version;
}

const NO_VALUE = new Uint8Array(0);

export class Memtable {
  readonly #head: MemNode = {
    key: "",
    seq: 0,
    kind: 0,
    chunk: 0,
    at: 0,
    size: 0,
    older: null,
    next: new Array<MemNode | null>(MAX_HEIGHT).fill(null),
  };
  readonly #map = new Map<string, MemNode>();
  #height = 1;
  #rand = 0x2545f491;
  /** Scratch for #link: the rightmost node before the last linked key on each level. */
  readonly #update: MemNode[] = new Array<MemNode>(MAX_HEIGHT);
  /** Nodes in the Map but not yet in the skip list, in insertion order. */
  #pending: MemNode[] = [];
  /** #pending is in key order (nothing was added since #sortPending). */
  #pendingSorted = true;
  /** The arena: entries in the shared entry encoding, in the order they were written. */
  readonly #chunks: Buffer[] = [];
  /** The last chunk (empty before the first write), and how much of it is written. */
  #chunk: Buffer = Buffer.alloc(0);
  #used = 0;
  /** The index covers the arena's entries up to chunk #indexChunk, offset #indexAt. */
  #indexChunk = 0;
  #indexAt = 0;
  readonly #entry = new EntryCursor();
  /** Whether a reader below the newest sequence may be open (see the class comment). */
  readonly #readersBelow: () => boolean;
  #entries = 0;
  #versions = 0;
  bytes = 0;
  /**
   * Bytes of the arena's entries (key, value and their framing, every write): what rotation
   * compares with `memtableBytes`, as LevelDB compares its write buffer's arena. `bytes` counts
   * the arena's chunks whole and the index's JS objects, for the node's memory budget.
   */
  dataBytes = 0;
  maxSeq = 0;

  /** `readersBelow`: see the class comment; without it every version is kept. */
  constructor(readersBelow: () => boolean = () => true) {
    this.#readersBelow = readersBelow;
  }

  get isEmpty(): boolean {
    return this.#entries === 0;
  }

  /** Versions in the index (reading this indexes what was written before). */
  get versions(): number {
    this.#catchUp();
    return this.#versions;
  }

  /**
   * Records `seq` as applied without a version (a batch that wrote nothing): a flush of this
   * memtable then makes it durable as part of `flushedSeq`.
   */
  advance(seq: number): void {
    if (seq > this.maxSeq) this.maxSeq = seq;
  }

  /** True when flushing this memtable would change nothing: no version, no applied sequence. */
  get isBlank(): boolean {
    return this.#entries === 0 && this.maxSeq === 0;
  }

  get keyCount(): number {
    this.#catchUp();
    return this.#map.size;
  }

  /**
   * The arena's written bytes, chunk by chunk (views of shared memory: a worker reads them as
   * they are). Entries are in the order they were written; each lies within one chunk.
   */
  arena(): Uint8Array[] {
    const out = this.#chunks.slice(0, -1);
    if (this.#chunks.length > 0) out.push(this.#chunk.subarray(0, this.#used));
    return out;
  }

  /** The value of a version (a view of the arena: valid while the memtable is referenced). */
  value(v: Version): Uint8Array {
    if (v.size === 0) return NO_VALUE;
    return (this.#chunks[v.chunk] as Buffer).subarray(v.at, v.at + v.size);
  }

  /** Adds a version of `key` (its bytes, or a binary string): appends it to the arena. */
  put(key: Uint8Array | string, seq: number, kind: number, value: Uint8Array): void {
    if (seq > this.maxSeq) this.maxSeq = seq;
    const length = entryLength(key.length, value.length);
    if (this.#used + length > this.#chunk.length) this.#grow(length);
    this.#used = writeEntry(this.#chunk, this.#used, key, kind, seq, value);
    this.dataBytes += length;
    this.#entries++;
  }

  /** Indexes the entries written since the last read. */
  #catchUp(): void {
    const last = this.#chunks.length - 1;
    if (last < 0 || (this.#indexChunk === last && this.#indexAt === this.#used)) return;
    const keepOlder = this.#readersBelow();
    const entry = this.#entry;
    for (;;) {
      const c = this.#indexChunk;
      const chunk = this.#chunks[c] as Buffer;
      const end = c === last ? this.#used : chunk.length;
      for (let at = this.#indexAt; at < end; at = entry.end) {
        entry.read(chunk, at);
        const size = entry.valueLength;
        this.#index(entry.key, entry.seq, entry.kind, c, entry.end - size, size, keepOlder);
      }
      this.#indexAt = end;
      if (c === last) return;
      this.#indexChunk = c + 1;
      this.#indexAt = 0;
    }
  }

  /** Adds an arena entry's version to the index. */
  #index(
    key: string,
    seq: number,
    kind: number,
    chunk: number,
    at: number,
    size: number,
    keepOlder: boolean,
  ): void {
    const node = this.#map.get(key);
    if (node !== undefined) {
      if (node.seq === seq || !keepOlder) {
        // The same sequence (several writes to the key in one batch: the last wins) replaces
        // the newest version alone.
        if (!keepOlder && node.older !== null) {
          this.bytes -= node.older.length * VERSION_OVERHEAD;
          this.#versions -= node.older.length;
          node.older = null;
        }
      } else {
        (node.older ??= []).push({
          seq: node.seq,
          kind: node.kind,
          chunk: node.chunk,
          at: node.at,
          size: node.size,
        });
        this.bytes += VERSION_OVERHEAD;
        this.#versions++;
      }
      node.seq = seq;
      node.kind = kind;
      node.chunk = chunk;
      node.at = at;
      node.size = size;
      return;
    }
    const added: MemNode = { key, seq, kind, chunk, at, size, older: null, next: NOT_LINKED };
    this.#map.set(key, added);
    this.#pending.push(added);
    this.#pendingSorted = false;
    this.bytes += key.length + NODE_OVERHEAD;
    this.#versions++;
  }

  /**
   * Starts a new chunk that holds at least `length` bytes. The full chunk is kept as what was
   * written (its unused end stays allocated, and counted in `bytes`).
   */
  #grow(length: number): void {
    const last = this.#chunk.length;
    if (this.#chunks.length > 0) {
      this.#chunks[this.#chunks.length - 1] = this.#chunk.subarray(0, this.#used);
    }
    const size = Math.max(length, Math.min(MAX_CHUNK_BYTES, Math.max(FIRST_CHUNK_BYTES, last * 2)));
    this.#chunk = Buffer.from(new SharedArrayBuffer(size));
    this.#chunks.push(this.#chunk);
    this.#used = 0;
    this.bytes += size;
  }

  /**
   * The newest version of `key` with seq ≤ `seq`: a put gives its value, a delete gives `null`
   * (the key is known to be absent), no version gives undefined (look further down).
   */
  get(key: string, seq: number): Uint8Array | null | undefined {
    this.#catchUp();
    const node = this.#map.get(key);
    if (node === undefined) return undefined;
    if (node.seq <= seq) return node.kind === KIND_DELETE ? null : this.value(node);
    const older = node.older;
    if (older === null) return undefined;
    for (let i = older.length - 1; i >= 0; i--) {
      const v = older[i] as Version;
      if (v.seq <= seq) return v.kind === KIND_DELETE ? null : this.value(v);
    }
    return undefined;
  }

  /**
   * First node with key ≥ `key` (or the first node when `key` is undefined). The nodes from there
   * on are linked through `next[0]`; keys put later may join the list (in order) at a later seek.
   */
  seek(key: string | undefined): MemNode | null {
    this.#catchUp();
    if (this.#pending.length > 0) this.#linkPending();
    if (key === undefined) return this.#head.next[0] ?? null;
    let x = this.#head;
    for (let level = this.#height - 1; level >= 0; level--) {
      for (;;) {
        const nx = x.next[level] ?? null;
        if (nx !== null && nx.key < key) x = nx;
        else break;
      }
    }
    return x.next[0] ?? null;
  }

  #randomHeight(): number {
    let h = 1;
    for (;;) {
      // xorshift32: cheap and good enough to shape the list; no need for an injected Rng.
      let r = this.#rand;
      r ^= r << 13;
      r ^= r >>> 17;
      r ^= r << 5;
      this.#rand = r >>> 0;
      if (h >= MAX_HEIGHT || (this.#rand & 3) !== 0) return h;
      h++;
    }
  }

  /** The pending nodes, sorted by key (kept sorted: a later call costs nothing). */
  #sortPending(): MemNode[] {
    if (!this.#pendingSorted) {
      this.#pending = sortByKey(this.#pending);
      this.#pendingSorted = true;
    }
    return this.#pending;
  }

  /** Links the pending nodes into the skip list, in key order. */
  #linkPending(): void {
    const pending = this.#sortPending();
    this.#pending = [];
    const head = this.#head;
    const update = this.#update;
    for (let level = 0; level < MAX_HEIGHT; level++) update[level] = head;
    for (const node of pending) {
      // update[level] precedes the previous (smaller) key on its level, so it precedes this one:
      // each level's search starts from there or from the node the level above ended at,
      // whichever is further along.
      let x = head;
      for (let level = this.#height - 1; level >= 0; level--) {
        const from = update[level] as MemNode;
        if (from !== head && (x === head || from.key > x.key)) x = from;
        for (;;) {
          const nx = x.next[level] ?? null;
          if (nx !== null && nx.key < node.key) x = nx;
          else break;
        }
        update[level] = x;
      }
      const height = this.#randomHeight();
      if (height > this.#height) {
        for (let level = this.#height; level < height; level++) update[level] = head;
        this.#height = height;
      }
      node.next = new Array<MemNode | null>(height);
      for (let level = 0; level < height; level++) {
        const prev = update[level] as MemNode;
        node.next[level] = prev.next[level] ?? null;
        prev.next[level] = node;
        // The new node now precedes every later (larger) key on this level.
        update[level] = node;
      }
    }
  }
}

/** The successors of a node not yet linked (shared: never written). */
const NOT_LINKED: Array<MemNode | null> = [];

/** The nodes in key order, as a new array (the nodes' keys are distinct). */
function sortByKey(nodes: readonly MemNode[]): MemNode[] {
  const order = keyOrder(nodes.map((n) => n.key));
  const out = new Array<MemNode>(nodes.length);
  for (let i = 0; i < order.length; i++) out[i] = nodes[order[i] as number] as MemNode;
  return out;
}
