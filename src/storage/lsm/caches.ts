/**
 * Node-wide caches shared by every engine: parsed data blocks and tables' indexes and filters
 * bounded by bytes, and open file descriptors bounded by count (1024 engines with dozens of tables each would otherwise exceed
 * the service's open-file limit).
 */
import { closeSync, openSync } from "node:fs";
import type { ParsedBlock } from "./format.ts";

interface CacheEntry {
  readonly block: ParsedBlock;
  /** Value of the insertion counter when the entry last moved to the back of the order. */
  stamp: number;
}

/**
 * Cache of parsed blocks bounded by their approximate memory, evicting the least recently used.
 * Map order is the recency order; a hit moves its entry to the back only if it is not already
 * among the most recent quarter of insertions, so a hot block's hits cost one Map lookup.
 */
export class BlockCache {
  readonly capacityBytes: number;
  #bytes = 0;
  readonly #map = new Map<string, CacheEntry>();
  #clock = 0;
  hits = 0;
  misses = 0;

  constructor(capacityBytes: number) {
    this.capacityBytes = capacityBytes;
  }

  get bytes(): number {
    return this.#bytes;
  }

  get(id: string): ParsedBlock | undefined {
    const entry = this.#map.get(id);
    if (entry === undefined) {
      this.misses++;
      return undefined;
    }
    this.hits++;
    if (this.#clock - entry.stamp > this.#map.size >>> 2) {
      this.#map.delete(id);
      this.#map.set(id, entry);
      entry.stamp = ++this.#clock;
    }
    return entry.block;
  }

  set(id: string, block: ParsedBlock): void {
    if (block.charge > this.capacityBytes) return;
    const old = this.#map.get(id);
    if (old !== undefined) {
      this.#bytes -= old.block.charge;
      this.#map.delete(id);
    }
    this.#map.set(id, { block, stamp: ++this.#clock });
    this.#bytes += block.charge;
    while (this.#bytes > this.capacityBytes) {
      const first = this.#map.entries().next();
      if (first.done === true) break;
      this.#map.delete(first.value[0]);
      this.#bytes -= first.value[1].block.charge;
    }
  }

  /** Drops every block of a table (its file was deleted; its id will never be reused). */
  evictTable(tableId: string, blockOffsets: Iterable<number>): void {
    for (const offset of blockOffsets) {
      const id = `${tableId}:${offset}`;
      const entry = this.#map.get(id);
      if (entry !== undefined) {
        this.#map.delete(id);
        this.#bytes -= entry.block.charge;
      }
    }
  }
}

/** What a table needs in memory to be read: its index and bloom filter. */
export interface TableMeta {
  readonly index: ParsedBlock;
  readonly filter: Uint8Array;
  /** Approximate memory held (the parsed index with its keys made strings, and the filter). */
  readonly charge: number;
}

/**
 * The node's table cache: indexes and bloom filters of tables across all engines, bounded by their
 * memory and evicting the least recently used (as LevelDB's TableCache closes LRU tables). A table
 * whose entry was evicted reloads and re-verifies it from its file on its next read. Without it,
 * every open table kept them resident: ~3 % of the data, gigabytes over 1024 shards.
 */
export class TableCache {
  readonly capacityBytes: number;
  #bytes = 0;
  readonly #map = new Map<string, TableMeta>();
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

  get(id: string): TableMeta | undefined {
    const meta = this.#map.get(id);
    if (meta !== undefined && this.#map.size > 1) {
      // Map order is the recency order.
      this.#map.delete(id);
      this.#map.set(id, meta);
    }
    return meta;
  }

  set(id: string, meta: TableMeta): void {
    this.loads++;
    this.delete(id);
    // Larger than the whole cache: used for the read at hand, then dropped.
    if (meta.charge > this.capacityBytes) return;
    this.#map.set(id, meta);
    this.#bytes += meta.charge;
    while (this.#bytes > this.capacityBytes) {
      const first = this.#map.entries().next();
      if (first.done === true) break;
      this.#map.delete(first.value[0]);
      this.#bytes -= first.value[1].charge;
    }
  }

  /** Whether the entry is in memory, without touching its recency. */
  peek(id: string): TableMeta | undefined {
    return this.#map.get(id);
  }

  delete(id: string): void {
    const old = this.#map.get(id);
    if (old !== undefined) {
      this.#map.delete(id);
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
