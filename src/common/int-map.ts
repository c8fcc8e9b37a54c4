/**
 * A map from safe integers to values, for the tables a request passes through (calls in flight
 * by id, HTTP/2 streams, proposals by log index): entries that live a few milliseconds in a table
 * that lives as long as the process.
 *
 * Why not a `Map`: V8 rehashes a `Map`'s table every so many deletions, even at a steady size,
 * and allocates the new table in the old generation when the map lives there. The table it
 * leaves is garbage that still points at every entry it held, and a young collection treats
 * every pointer from the old generation as live: each entry, and all it reaches, survives its
 * young collections until the next full one, so it is promoted. A map of 16–256 entries in
 * flight, each added then deleted, got ~80% of what its entries allocated promoted
 * (`--trace-gc-nvp`); on a node that was ~2 KB of every Put, a sixth of the main thread in young
 * collections, and the full collections behind the p999.
 *
 * Here: open addressing with linear probing, deletion by backward shift (no tombstones, so no
 * rehash at a steady size), and a growth that empties the arrays it leaves behind. Iteration
 * order is unspecified; `values()` and `entries()` are snapshots, safe to mutate the map while
 * walking them.
 */
export class IntMap<V> {
  #keys: Float64Array;
  #values: (V | undefined)[];
  #mask: number;
  #shift: number;
  #size = 0;

  constructor(capacity = 16) {
    let n = 8;
    while (n < capacity * 2) n *= 2;
    this.#keys = new Float64Array(n).fill(Number.NaN);
    this.#values = new Array<V | undefined>(n).fill(undefined);
    this.#mask = n - 1;
    this.#shift = 32 - Math.log2(n);
  }

  get size(): number {
    return this.#size;
  }

  get(key: number): V | undefined {
    const keys = this.#keys;
    for (let i = this.#slot(key); ; i = (i + 1) & this.#mask) {
      const k = keys[i] as number;
      if (k === key) return this.#values[i];
      if (k !== k) return undefined; // NaN: an empty slot ends the probe
    }
  }

  has(key: number): boolean {
    return this.#find(key) >= 0;
  }

  set(key: number, value: V): this {
    if (!Number.isSafeInteger(key)) throw new RangeError(`IntMap: ${key} is not a safe integer`);
    const keys = this.#keys;
    let i = this.#slot(key);
    for (; ; i = (i + 1) & this.#mask) {
      const k = keys[i] as number;
      if (k === key) {
        this.#values[i] = value;
        return this;
      }
      if (k !== k) break;
    }
    keys[i] = key;
    this.#values[i] = value;
    if (++this.#size * 2 > keys.length) this.#grow();
    return this;
  }

  /** Removes `key`; true when it was there. */
  delete(key: number): boolean {
    let hole = this.#find(key);
    if (hole < 0) return false;
    const keys = this.#keys;
    const values = this.#values;
    const mask = this.#mask;
    // Backward shift: move each later entry of the probe run into the hole when its home slot
    // does not lie cyclically in (hole, j]; the run then has no gap and needs no tombstone.
    for (let j = (hole + 1) & mask; ; j = (j + 1) & mask) {
      const k = keys[j] as number;
      if (k !== k) break;
      const home = this.#slot(k);
      const stays = hole <= j ? hole < home && home <= j : hole < home || home <= j;
      if (stays) continue;
      keys[hole] = k;
      values[hole] = values[j];
      hole = j;
    }
    keys[hole] = Number.NaN;
    values[hole] = undefined;
    this.#size--;
    return true;
  }

  clear(): void {
    this.#keys.fill(Number.NaN);
    this.#values.fill(undefined);
    this.#size = 0;
  }

  /** The values, as an array (a snapshot). */
  values(): V[] {
    const out: V[] = [];
    const keys = this.#keys;
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i] as number;
      if (k === k) out.push(this.#values[i] as V);
    }
    return out;
  }

  /** The entries, as an array (a snapshot). */
  entries(): [number, V][] {
    const out: [number, V][] = [];
    const keys = this.#keys;
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i] as number;
      if (k === k) out.push([k, this.#values[i] as V]);
    }
    return out;
  }

  #find(key: number): number {
    const keys = this.#keys;
    for (let i = this.#slot(key); ; i = (i + 1) & this.#mask) {
      const k = keys[i] as number;
      if (k === key) return i;
      if (k !== k) return -1;
    }
  }

  /** Fibonacci hashing of the key's two 32-bit halves: sequential and strided ids spread well. */
  #slot(key: number): number {
    const lo = key >>> 0;
    const hi = Math.floor(key / 4294967296) >>> 0;
    return Math.imul(lo ^ Math.imul(hi, 0x85ebca6b), 0x9e3779b1) >>> this.#shift;
  }

  #grow(): void {
    const keys = this.#keys;
    const values = this.#values;
    const n = keys.length * 2;
    this.#keys = new Float64Array(n).fill(Number.NaN);
    this.#values = new Array<V | undefined>(n).fill(undefined);
    this.#mask = n - 1;
    this.#shift = 32 - Math.log2(n);
    this.#size = 0;
    for (let i = 0; i < keys.length; i++) {
      const k = keys[i] as number;
      if (k === k) this.set(k, values[i] as V);
    }
    // The old array may be in the old generation: left holding the values, it would keep them
    // alive through young collections (see above).
    values.fill(undefined);
  }
}
