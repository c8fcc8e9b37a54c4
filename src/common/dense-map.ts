/**
 * A map from small non-negative integers (shard ids) to values: an array indexed by the key.
 *
 * Why not a `Map`: the driver and the WAL look a shard up by id several times for every Raft
 * message (its replica, its log's first and last index, the term at an index), and a `Map`'s
 * lookup hashes the key and walks a bucket chain in a table of a thousand entries, where an
 * array's is one bounds check and one load. Iteration is in key order.
 *
 * Keys are integers in [0, MAX_KEY] (shard ids are below 65,536; the array grows to the largest
 * key set); anything else is a RangeError on `set` and absent on `get`, `has` and `delete`.
 */
export class DenseMap<V> implements ReadonlyDenseMap<V> {
  static readonly MAX_KEY = 2 ** 20 - 1;
  #slots: (V | undefined)[] = [];
  #size = 0;

  /** A map of `entries` (a later entry for a key replaces an earlier one). */
  static of<V>(entries: Iterable<readonly [number, V]>): DenseMap<V> {
    const map = new DenseMap<V>();
    for (const [key, value] of entries) map.set(key, value);
    return map;
  }

  get size(): number {
    return this.#size;
  }

  /** A copy (of the slots array: one pointer a key up to the largest). */
  clone(): DenseMap<V> {
    const copy = new DenseMap<V>();
    copy.#slots = this.#slots.slice();
    copy.#size = this.#size;
    return copy;
  }

  get(key: number): V | undefined {
    return this.#slots[key];
  }

  has(key: number): boolean {
    return this.#slots[key] !== undefined;
  }

  /** `value` must not be undefined (it stands for an absent key). */
  set(key: number, value: V): this {
    if (!Number.isInteger(key) || key < 0 || key > DenseMap.MAX_KEY) {
      throw new RangeError(`DenseMap: key ${key} is not an integer in [0, ${DenseMap.MAX_KEY}]`);
    }
    if (value === undefined) throw new RangeError("DenseMap: undefined is not a value");
    const slots = this.#slots;
    while (slots.length <= key) slots.push(undefined);
    if (slots[key] === undefined) this.#size++;
    slots[key] = value;
    return this;
  }

  delete(key: number): boolean {
    const slots = this.#slots;
    if (slots[key] === undefined) return false;
    slots[key] = undefined;
    this.#size--;
    return true;
  }

  clear(): void {
    this.#slots = [];
    this.#size = 0;
  }

  *keys(): Generator<number, undefined> {
    const slots = this.#slots;
    for (let key = 0; key < slots.length; key++) if (slots[key] !== undefined) yield key;
  }

  *values(): Generator<V, undefined> {
    const slots = this.#slots;
    for (let key = 0; key < slots.length; key++) {
      const value = slots[key];
      if (value !== undefined) yield value;
    }
  }

  *entries(): Generator<[number, V], undefined> {
    const slots = this.#slots;
    for (let key = 0; key < slots.length; key++) {
      const value = slots[key];
      if (value !== undefined) yield [key, value];
    }
  }

  [Symbol.iterator](): Generator<[number, V], undefined> {
    return this.entries();
  }
}

/** What a DenseMap's reader may call: an immutable value hands out this view. */
export interface ReadonlyDenseMap<V> {
  readonly size: number;
  get(key: number): V | undefined;
  has(key: number): boolean;
  clone(): DenseMap<V>;
  keys(): Generator<number, undefined>;
  values(): Generator<V, undefined>;
  entries(): Generator<[number, V], undefined>;
  [Symbol.iterator](): Generator<[number, V], undefined>;
}
