/**
 * Node-wide caches shared by every engine: verified data blocks and tables' indexes and filters
 * bounded by bytes, and open file descriptors bounded by count (1024 engines with dozens of tables each would otherwise exceed
 * the service's open-file limit).
 */
import { closeSync, openSync } from "node:fs";
import type { ParsedBlock } from "./format.ts";

/** A cached block, linked into the cache's recency list. */
interface BlockEntry {
  readonly block: ParsedBlock;
  readonly offset: number;
  readonly set: BlockSet;
  /** Value of the cache's clock when the entry last moved to the newest end. */
  stamp: number;
  /** Towards the most recently used entry. */
  newer: BlockEntry | undefined;
  /** Towards the least recently used entry. */
  older: BlockEntry | undefined;
}

/**
 * One table's blocks in the block cache, by offset in the file. The table owns it (no key is
 * built per lookup, and a table's blocks are found without its index); the cache adds to it and
 * evicts from it.
 */
export type BlockSet = Map<number, BlockEntry>;

export function newBlockSet(): BlockSet {
  return new Map();
}

/**
 * Cache of verified blocks bounded by their approximate memory, evicting the least recently used,
 * as LevelDB's: each table's entries are found in the table's own `BlockSet`, and all entries are
 * linked in one recency list. A hit costs one Map lookup by a small integer; it moves the entry
 * to the newest end only if it is not among the most recent quarter already (a move touches
 * two neighbours, cache misses on a large cache).
 */
export class BlockCache {
  readonly capacityBytes: number;
  #bytes = 0;
  #newest: BlockEntry | undefined;
  #oldest: BlockEntry | undefined;
  #count = 0;
  #clock = 0;
  hits = 0;
  misses = 0;

  constructor(capacityBytes: number) {
    this.capacityBytes = capacityBytes;
  }

  get bytes(): number {
    return this.#bytes;
  }

  get(set: BlockSet, offset: number): ParsedBlock | undefined {
    const entry = set.get(offset);
    if (entry === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    if (this.#clock - entry.stamp > this.#count >>> 2) {
      this.#unlink(entry);
      this.#pushNewest(entry);
    }
    return entry.block;
  }

  set(set: BlockSet, offset: number, block: ParsedBlock): void {
    if (block.charge > this.capacityBytes) return;
    const old = set.get(offset);
    if (old !== undefined) this.#remove(old);
    const entry: BlockEntry = { block, offset, set, stamp: 0, newer: undefined, older: undefined };
    set.set(offset, entry);
    this.#pushNewest(entry);
    this.#count++;
    this.#bytes += block.charge;
    while (this.#bytes > this.capacityBytes && this.#oldest !== undefined) {
      this.#remove(this.#oldest);
    }
  }

  /** Drops every block of a table (its file was deleted or closed). */
  evictTable(set: BlockSet): void {
    for (const entry of set.values()) {
      this.#unlink(entry);
      this.#count--;
      this.#bytes -= entry.block.charge;
    }
    set.clear();
  }

  #remove(entry: BlockEntry): void {
    this.#unlink(entry);
    entry.set.delete(entry.offset);
    this.#count--;
    this.#bytes -= entry.block.charge;
  }

  #unlink(entry: BlockEntry): void {
    if (entry.newer === undefined) this.#newest = entry.older;
    else entry.newer.older = entry.older;
    if (entry.older === undefined) this.#oldest = entry.newer;
    else entry.older.newer = entry.newer;
    entry.newer = undefined;
    entry.older = undefined;
  }

  #pushNewest(entry: BlockEntry): void {
    entry.stamp = ++this.#clock;
    entry.older = this.#newest;
    if (this.#newest === undefined) this.#oldest = entry;
    else this.#newest.newer = entry;
    this.#newest = entry;
  }
}

/** What a table needs in memory to be read: its index and bloom filter. */
export interface TableMeta {
  readonly index: ParsedBlock;
  /**
   * The index's keys' first four bytes as big-endian u32 (0-padded): a point read's binary search
   * compares these, in one small array, and reads a key string only on a tie.
   */
  readonly prefixes: Uint32Array;
  /** The index's block handles: offset and size of data block i at [2i] and [2i + 1]. */
  readonly handles: Float64Array;
  readonly filter: Uint8Array;
  /** Approximate memory held (the parsed index with its keys made strings, and the filter). */
  readonly charge: number;
}

/** A table whose index and filter the table cache accounts for; it drops them when told. */
export interface MetaHolder {
  dropMeta(): void;
}

interface MetaEntry {
  readonly charge: number;
  /** Value of the cache's clock when the entry last moved to the back of the recency order. */
  stamp: number;
}

/**
 * The node's table cache: the memory of tables' indexes and bloom filters across all engines,
 * bounded, evicting the least recently used (as LevelDB's TableCache closes LRU tables). The
 * tables hold their own index and filter; an evicted one is told to drop them and reloads and
 * re-verifies them from its file on its next read. Without it, every open table kept them
 * resident: ~3 % of the data, gigabytes over 1024 shards.
 */
export class TableCache {
  readonly capacityBytes: number;
  #bytes = 0;
  /** Map order is the recency order. */
  readonly #map = new Map<MetaHolder, MetaEntry>();
  #clock = 0;
  /** Entries loaded from files (at open, install and after evictions). */
  loads = 0;

  constructor(capacityBytes: number) {
    this.capacityBytes = capacityBytes;
  }

  get bytes(): number {
    return this.#bytes;
  }

  /** Tables whose index and filter are in memory. */
  get count(): number {
    return this.#map.size;
  }

  /**
   * Accounts for a holder's newly loaded index and filter; evicts others to make room. False
   * when they are larger than the whole cache: the holder uses them for the read at hand only.
   */
  add(holder: MetaHolder, charge: number): boolean {
    this.loads++;
    this.remove(holder);
    if (charge > this.capacityBytes) return false;
    this.#map.set(holder, { charge, stamp: ++this.#clock });
    this.#bytes += charge;
    while (this.#bytes > this.capacityBytes) {
      const first = this.#map.entries().next();
      if (first.done === true) break;
      const [evicted, entry] = first.value;
      this.#map.delete(evicted);
      this.#bytes -= entry.charge;
      evicted.dropMeta();
    }
    return true;
  }

  /**
   * Marks a holder used. It moves to the back of the order only if it is not already among the
   * most recent quarter, so the tables every read probes cost no Map update.
   */
  touch(holder: MetaHolder): void {
    const entry = this.#map.get(holder);
    if (entry !== undefined && this.#clock - entry.stamp > this.#map.size >>> 2) {
      this.#map.delete(holder);
      this.#map.set(holder, entry);
      entry.stamp = ++this.#clock;
    }
  }

  /** Whether the holder's index and filter are accounted for, without touching its recency. */
  has(holder: MetaHolder): boolean {
    return this.#map.has(holder);
  }

  /** Forgets a holder (its table is closed); it is not told to drop anything. */
  remove(holder: MetaHolder): void {
    const old = this.#map.get(holder);
    if (old !== undefined) {
      this.#map.delete(holder);
      this.#bytes -= old.charge;
    }
  }
}

/** Least-recently-used set of open read-only file descriptors, bounded by count. */
export class FileCache {
  readonly capacity: number;
  readonly #fds = new Map<string, number>();

  constructor(capacity: number) {
    this.capacity = capacity;
  }

  get openFiles(): number {
    return this.#fds.size;
  }

  /** A descriptor for `path`, valid until the next call into this cache. */
  fd(path: string): number {
    const fd = this.#fds.get(path);
    if (fd !== undefined) {
      this.#fds.delete(path);
      this.#fds.set(path, fd);
      return fd;
    }
    const opened = openSync(path, "r");
    this.#fds.set(path, opened);
    while (this.#fds.size > this.capacity) {
      const first = this.#fds.entries().next();
      if (first.done === true) break;
      this.#fds.delete(first.value[0]);
      closeSync(first.value[1]);
    }
    return opened;
  }

  close(path: string): void {
    const fd = this.#fds.get(path);
    if (fd !== undefined) {
      this.#fds.delete(path);
      closeSync(fd);
    }
  }

  closeAll(): void {
    for (const fd of this.#fds.values()) closeSync(fd);
    this.#fds.clear();
  }
}
