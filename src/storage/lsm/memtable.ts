/**
 * The memtable: a Map of user keys (binary strings) for O(1) point reads and writes, and a skip
 * list for ordered iteration that new keys join lazily: a put only adds to the Map and a pending
 * list; the first ordered read after it (a scan's seek, a flush) sorts the pending keys and links
 * them into the skip list in order, each insertion starting where the previous one ended (a
 * write-only memtable is sorted once, at its flush, and appended to an empty list). A random
 * insertion into a skip list of 30k keys costs ~0.7–1 µs of pointer chasing; sorting costs ~0.4.
 * Each key keeps its versions while a reader may need them (the engine says when none can: see
 * `put`); a version with the sequence of the key's newest version replaces it (several writes to
 * one key in one batch: the last wins).
 * Byte-accounted: `bytes` approximates the memory held, and drives rotation at `memtable_bytes`.
 */
import { KIND_DELETE } from "./format.ts";

const MAX_HEIGHT = 12;
/** Rough per-version and per-key overhead of the JS objects, for accounting. */
const VERSION_OVERHEAD = 40;
const NODE_OVERHEAD = 96;
/** An entry's framing in a table: two short varints, the kind and the u64 seq. */
const ENTRY_FRAMING = 13;

export interface Version {
  readonly seq: number;
  readonly kind: number;
  readonly value: Uint8Array;
}

/**
 * A key of the skip list. Its newest version is inlined (most keys have one version, and a node
 * per write is the allocation that dominates the write path); older ones are in `older`, oldest
 * first.
 */
export interface MemNode {
  readonly key: string;
  seq: number;
  kind: number;
  value: Uint8Array;
  /**
   * `value.length`, kept beside `seq`: a write to a key already here needs only the node's own
   * fields, not a read of the old value's object, a cache miss of its own on a large memtable.
   */
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

export class Memtable {
  readonly #head: MemNode = {
    key: "",
    seq: 0,
    kind: 0,
    value: new Uint8Array(0),
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
  bytes = 0;
  /**
   * Bytes of the entries as a table would hold them (key, value and 13 bytes of framing per
   * version): what rotation compares with `memtableBytes`, as LevelDB compares its write buffer's
   * contents. `bytes` adds the JS objects' overhead, for the node's memory budget.
   */
  dataBytes = 0;
  minSeq = Number.MAX_SAFE_INTEGER;
  maxSeq = 0;
  versions = 0;

  get isEmpty(): boolean {
    return this.versions === 0;
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
    return this.versions === 0 && this.maxSeq === 0;
  }

  get keyCount(): number {
    return this.#map.size;
  }

  /**
   * Adds a version of `key`. With `keepOlder` false the caller knows no reader can see below
   * `seq` (no snapshot, no scan open): the key's versions are replaced by this one instead of
   * kept beneath it, so a key written again and again holds one version, not one per write.
   */
  put(key: string, seq: number, kind: number, value: Uint8Array, keepOlder = true): void {
    if (seq < this.minSeq) this.minSeq = seq;
    if (seq > this.maxSeq) this.maxSeq = seq;
    const node = this.#map.get(key);
    if (node !== undefined) {
      if (node.seq === seq || !keepOlder) {
        // The same sequence (several writes to the key in one batch: the last wins) replaces
        // the newest version alone.
        if (!keepOlder && node.older !== null) {
          for (const v of node.older) {
            this.bytes -= v.value.length + VERSION_OVERHEAD;
            this.dataBytes -= key.length + v.value.length + ENTRY_FRAMING;
            this.versions--;
          }
          node.older = null;
        }
        this.bytes += value.length - node.size;
        this.dataBytes += value.length - node.size;
        node.seq = seq;
        node.kind = kind;
        node.value = value;
        node.size = value.length;
        return;
      }
      (node.older ??= []).push({ seq: node.seq, kind: node.kind, value: node.value });
      node.seq = seq;
      node.kind = kind;
      node.value = value;
      node.size = value.length;
      this.bytes += value.length + VERSION_OVERHEAD;
      this.dataBytes += key.length + value.length + ENTRY_FRAMING;
      this.versions++;
      return;
    }
    const added: MemNode = {
      key,
      seq,
      kind,
      value,
      size: value.length,
      older: null,
      next: NOT_LINKED,
    };
    this.#map.set(key, added);
    this.#pending.push(added);
    this.#pendingSorted = false;
    this.bytes += key.length + value.length + VERSION_OVERHEAD + NODE_OVERHEAD;
    this.dataBytes += key.length + value.length + ENTRY_FRAMING;
    this.versions++;
  }

  /**
   * The newest version of `key` with seq ≤ `seq`: a put gives its value, a delete gives `null`
   * (the key is known to be absent), no version gives undefined (look further down).
   */
  get(key: string, seq: number): Uint8Array | null | undefined {
    const node = this.#map.get(key);
    if (node === undefined) return undefined;
    if (node.seq <= seq) return node.kind === KIND_DELETE ? null : node.value;
    const older = node.older;
    if (older === null) return undefined;
    for (let i = older.length - 1; i >= 0; i--) {
      const v = older[i] as Version;
      if (v.seq <= seq) return v.kind === KIND_DELETE ? null : v.value;
    }
    return undefined;
  }

  /**
   * First node with key ≥ `key` (or the first node when `key` is undefined). The nodes from there
   * on are linked through `next[0]`; keys put later may join the list (in order) at a later seek.
   */
  seek(key: string | undefined): MemNode | null {
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

  /**
   * Every node in key order, as a new array, without linking the pending ones (for a flush: an
   * immutable memtable that no scan read is sorted once and never linked).
   */
  sortedNodes(): MemNode[] {
    const pending = this.#sortPending();
    const out: MemNode[] = [];
    let p = 0;
    for (let node = this.#head.next[0] ?? null; node !== null; node = node.next[0] ?? null) {
      while (p < pending.length && (pending[p] as MemNode).key < node.key) {
        out.push(pending[p++] as MemNode);
      }
      out.push(node);
    }
    while (p < pending.length) out.push(pending[p++] as MemNode);
    return out;
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

/** 2^21: a node's index fits below this in sortByKey's packed numbers. */
const INDEX_SPAN = 2_097_152;

/**
 * `nodes` (distinct binary-string keys) in key order, as a new array. A flush sorts the ~30,000
 * keys a 4 MiB memtable gathers; a comparator sort of strings took ~0.4 µs a key of the main
 * thread in `bench:lsm`. Here each node becomes one number, the four characters after the keys'
 * common prefix (zero past a key's end: a shorter key never sorts after a longer one with the
 * same characters) times 2^21 plus its index, exact in a double, and a typed array's native
 * numeric sort orders them; only nodes whose four characters tie are compared as strings, in
 * runs. About 3× faster on random keys; keys alike past their common prefix fall back to runs.
 */
export function sortByKey(nodes: readonly MemNode[]): MemNode[] {
  const n = nodes.length;
  if (n < 2 || n >= INDEX_SPAN) return nodes.slice().sort(compareNodes);
  const first = (nodes[0] as MemNode).key;
  let lcp = first.length;
  for (let i = 1; i < n && lcp > 0; i++) {
    const key = (nodes[i] as MemNode).key;
    const m = Math.min(lcp, key.length);
    let j = 0;
    while (j < m && key.charCodeAt(j) === first.charCodeAt(j)) j++;
    lcp = j;
  }
  const packed = new Float64Array(n);
  for (let i = 0; i < n; i++) {
    const key = (nodes[i] as MemNode).key;
    let prefix = 0;
    for (let j = lcp; j < lcp + 4; j++) {
      const c = j < key.length ? key.charCodeAt(j) : 0;
      // Keys are binary strings (one byte a character); anything else is compared whole.
      if (c > 255) return nodes.slice().sort(compareNodes);
      prefix = prefix * 256 + c;
    }
    packed[i] = prefix * INDEX_SPAN + i;
  }
  packed.sort();
  const out = new Array<MemNode>(n);
  for (let i = 0; i < n; i++) out[i] = nodes[(packed[i] as number) % INDEX_SPAN] as MemNode;
  // Runs of equal prefixes, in index order so far: ordered by the whole key.
  for (let i = 0; i < n;) {
    const prefix = Math.floor((packed[i] as number) / INDEX_SPAN);
    let j = i + 1;
    while (j < n && Math.floor((packed[j] as number) / INDEX_SPAN) === prefix) j++;
    if (j - i > 1) {
      const run = out.slice(i, j).sort(compareNodes);
      for (let k = 0; k < run.length; k++) out[i + k] = run[k] as MemNode;
    }
    i = j;
  }
  return out;
}

function compareNodes(a: MemNode, b: MemNode): number {
  return a.key < b.key ? -1 : a.key > b.key ? 1 : 0;
}
