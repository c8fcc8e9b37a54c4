/**
 * The memtable: a skip list of user keys (binary strings) for ordered iteration plus a Map for
 * O(1) point reads. Each key keeps its versions oldest first; a version with the sequence of the
 * key's newest version replaces it (several writes to one key in one batch: the last wins).
 * Byte-accounted: `bytes` approximates the memory held, and drives rotation at `memtable_bytes`.
 */
import { KIND_DELETE } from "./format.ts";

const MAX_HEIGHT = 12;
/** Rough per-version and per-key overhead of the JS objects, for accounting. */
const VERSION_OVERHEAD = 40;
const NODE_OVERHEAD = 96;

export interface Version {
  readonly seq: number;
  readonly kind: number;
  readonly value: Uint8Array;
}

export interface MemNode {
  readonly key: string;
  /** Oldest first. */
  readonly versions: Version[];
  readonly next: Array<MemNode | null>;
}

export class Memtable {
  readonly #head: MemNode = { key: "", versions: [], next: new Array(MAX_HEIGHT).fill(null) };
  readonly #map = new Map<string, MemNode>();
  #height = 1;
  #rand = 0x2545f491;
  bytes = 0;
  minSeq = Number.MAX_SAFE_INTEGER;
  maxSeq = 0;
  versions = 0;

  get isEmpty(): boolean {
    return this.versions === 0;
  }

  get keyCount(): number {
    return this.#map.size;
  }

  put(key: string, seq: number, kind: number, value: Uint8Array): void {
    if (seq < this.minSeq) this.minSeq = seq;
    if (seq > this.maxSeq) this.maxSeq = seq;
    const node = this.#map.get(key);
    const version: Version = { seq, kind, value };
    if (node !== undefined) {
      const last = node.versions[node.versions.length - 1] as Version;
      if (last.seq === seq) {
        this.bytes += value.length - last.value.length;
        node.versions[node.versions.length - 1] = version;
        return;
      }
      node.versions.push(version);
      this.bytes += value.length + VERSION_OVERHEAD;
      this.versions++;
      return;
    }
    const created = this.#insert(key, version);
    this.#map.set(key, created);
    this.bytes += key.length + value.length + VERSION_OVERHEAD + NODE_OVERHEAD;
    this.versions++;
  }

  /**
   * The newest version of `key` with seq ≤ `seq`: a put gives its value, a delete gives `null`
   * (the key is known to be absent), no version gives undefined (look further down).
   */
  get(key: string, seq: number): Uint8Array | null | undefined {
    const node = this.#map.get(key);
    if (node === undefined) return undefined;
    const vs = node.versions;
    for (let i = vs.length - 1; i >= 0; i--) {
      const v = vs[i] as Version;
      if (v.seq <= seq) return v.kind === KIND_DELETE ? null : v.value;
    }
    return undefined;
  }

  /** First node with key ≥ `key` (or the first node when `key` is undefined). */
  seek(key: string | undefined): MemNode | null {
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

  #insert(key: string, version: Version): MemNode {
    const update: MemNode[] = new Array(MAX_HEIGHT);
    let x = this.#head;
    for (let level = this.#height - 1; level >= 0; level--) {
      for (;;) {
        const nx = x.next[level] ?? null;
        if (nx !== null && nx.key < key) x = nx;
        else break;
      }
      update[level] = x;
    }
    const height = this.#randomHeight();
    if (height > this.#height) {
      for (let level = this.#height; level < height; level++) update[level] = this.#head;
      this.#height = height;
    }
    const node: MemNode = { key, versions: [version], next: new Array(height).fill(null) };
    for (let level = 0; level < height; level++) {
      const prev = update[level] as MemNode;
      node.next[level] = prev.next[level] ?? null;
      prev.next[level] = node;
    }
    return node;
  }
}
