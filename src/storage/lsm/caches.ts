/**
 * Node-wide caches shared by every engine: verified data blocks and tables' indexes and filters
 * bounded by bytes, and open file descriptors bounded by count (1024 engines with dozens of tables each would otherwise exceed
 * the service's open-file limit).
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";
import { mapFile, mappedFaults } from "../../common/native.ts";
import { CorruptionError } from "../common/index.ts";
import type { ParsedBlock } from "./format.ts";

/** A cached block, linked into the cache's recency list. */
interface BlockEntry {
  readonly block: ParsedBlock;
  /** Its slot in its table's set: the block's ordinal in the table. */
  readonly slot: number;
  readonly set: BlockSet;
  /** Value of the cache's clock when the entry last moved to the newest end. */
  stamp: number;
  /** Towards the most recently used entry. */
  newer: BlockEntry | undefined;
  /** Towards the least recently used entry. */
  older: BlockEntry | undefined;
}

/**
 * One table's blocks in the block cache, by their ordinal in the table (the index entry's
 * position): an array slot, no hashing. The table owns it; the cache adds to it and evicts from it.
 */
export class BlockSet {
  readonly slots: Array<BlockEntry | undefined>;
  /** Blocks cached. */
  size = 0;

  /** `blocks`: the table's block count, when known (the slots are laid out at once). */
  constructor(blocks = 0) {
    this.slots = new Array<BlockEntry | undefined>(blocks);
  }
}

export function newBlockSet(blocks = 0): BlockSet {
  return new BlockSet(blocks);
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

  get(set: BlockSet, slot: number): ParsedBlock | undefined {
    const entry = set.slots[slot];
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

  set(set: BlockSet, slot: number, block: ParsedBlock): void {
    if (block.charge > this.capacityBytes) return;
    const old = set.slots[slot];
    if (old !== undefined) this.#remove(old);
    const entry: BlockEntry = { block, slot, set, stamp: 0, newer: undefined, older: undefined };
    set.slots[slot] = entry;
    set.size++;
    this.#pushNewest(entry);
    this.#count++;
    this.#bytes += block.charge;
    while (this.#bytes > this.capacityBytes && this.#oldest !== undefined) {
      this.#remove(this.#oldest);
    }
  }

  /** Drops every block of a table (its file was deleted or closed). */
  evictTable(set: BlockSet): void {
    const slots = set.slots;
    for (let i = 0; i < slots.length; i++) {
      const entry = slots[i];
      if (entry === undefined) continue;
      this.#unlink(entry);
      this.#count--;
      this.#bytes -= entry.block.charge;
      slots[i] = undefined;
    }
    set.size = 0;
  }

  #remove(entry: BlockEntry): void {
    this.#unlink(entry);
    entry.set.slots[entry.slot] = undefined;
    entry.set.size--;
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
  /** Used since it was loaded or last passed over by an eviction (its second chance). */
  referenced: boolean;
}

/**
 * The node's table cache: the memory of tables' indexes and bloom filters across all engines,
 * bounded, evicting one not used lately (LevelDB's TableCache closes the least recently used
 * table; this is the second-chance approximation of that order, see `evictFirst`). The
 * tables hold their own index and filter; an evicted one is told to drop them and reloads and
 * re-verifies them from its file on its next read. Without it, every open table kept them
 * resident: ~3 % of the data, gigabytes over 1024 shards.
 */
export class TableCache {
  readonly capacityBytes: number;
  #bytes = 0;
  /** Map order is the eviction order: insertion, and the moves of `evictFirst`. */
  readonly #map = new Map<MetaHolder, MetaEntry>();
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
    this.#map.set(holder, { charge, referenced: false });
    this.#bytes += charge;
    while (this.#bytes > this.capacityBytes) {
      const evicted = evictFirst(this.#map, holder);
      if (evicted === undefined) break;
      this.#bytes -= evicted[1].charge;
      evicted[0].dropMeta();
    }
    return true;
  }

  /** Marks a holder used: a flag, no reordering (a read probes several tables). */
  touch(holder: MetaHolder): void {
    const entry = this.#map.get(holder);
    if (entry !== undefined) entry.referenced = true;
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

/**
 * Removes and returns the entry to evict from a cache kept in a Map whose order is that of
 * insertion: the first one not used since it was inserted or last passed over, never `keep` (the
 * entry being added). A used one is passed over once: its flag is cleared and it moves to the
 * back (its second chance, as a CLOCK cache's hand). Marking an entry used is then a flag write
 * where true LRU order costs a Map delete and insert on every use; the order differs only among
 * entries used since the last eviction. Ends within two passes: a pass clears every flag it
 * meets. Undefined when nothing but `keep` is left.
 */
function evictFirst<K, V extends { referenced: boolean }>(
  map: Map<K, V>,
  keep: K,
): [K, V] | undefined {
  if (map.size <= (map.has(keep) ? 1 : 0)) return undefined;
  for (;;) {
    const first = map.entries().next();
    if (first.done === true) return undefined;
    const [key, entry] = first.value;
    map.delete(key);
    if (!entry.referenced && key !== keep) return first.value;
    entry.referenced = false;
    map.set(key, entry);
  }
}

/** An open table file: its descriptor, and its mapping once a data block was read. */
interface OpenFile {
  readonly fd: number;
  readonly size: number;
  /** Read since it was opened or last passed over by an eviction (see `evictFirst`). */
  referenced: boolean;
  /** Mapping of the whole file; undefined until the first block read; null if mapping failed. */
  view: Buffer | undefined | null;
}

const EMPTY = Buffer.alloc(0);
/** Mapping ids of this thread (see `FileCache.faults`), across its file caches. */
let nextMappingId = 1;

/**
 * Set of open, read-only SSTable files, bounded by count (closing one not read lately first: the
 * second-chance order of `evictFirst`). A table's footer, index, filter and properties are read
 * with pread (copies, loaded once per table-cache load); its data blocks are read through a
 * mapping of the file where the native addon is loaded (a block is then a view of the mapping:
 * no system call, no copy, no allocation, as LevelDB's mmap'd tables), mapped at the first block
 * read, and with pread otherwise. Only tables that serve reads are mapped, and only the pages of
 * the blocks read count in the process's RSS (a table opened after a flush or compaction is read
 * through pread alone).
 *
 * A mapping is unmapped only once the garbage collector has collected every view of it, so a
 * block read from a file stays valid however long its holder keeps it, even after the file is
 * closed here or deleted; a deleted table's disk space is freed when its last view is
 * collected. Only installed SSTables are read through this cache: Cairn never writes them, but
 * another process could cut one (issue 50, bug 3). A read of a page a mapped file lost raises
 * SIGBUS, which the addon turns into a page of zeros and a count (`mapFile`): a reader of blocks
 * must compare `faults` before and after its reads and report corruption (`lastFault`) if it
 * moved, and must hand out copies of what it read, never views (see LsmEngine.get and scan).
 */
export class FileCache {
  readonly capacity: number;
  /** Maps a file: the addon's, unless it is not loaded or mapping was turned off. */
  readonly #map: typeof mapFile;
  readonly #files = new Map<string, OpenFile>();
  /** Files that could not be mapped (e.g. the process's limit of mappings) and were read with pread. */
  mapFailures = 0;
  /** The ids given to mapFile for the open files' mappings, by path, and the reverse. */
  readonly #ids = new Map<string, number>();
  readonly #paths = new Map<number, string>();

  constructor(capacity: number, options: { readonly map?: boolean } = {}) {
    this.capacity = capacity;
    this.#map = (options.map ?? true) ? mapFile : undefined;
  }

  /** Whether data blocks are read through mappings (the addon is loaded, mapping not turned off). */
  get mapping(): boolean {
    return this.#map !== undefined;
  }

  get openFiles(): number {
    return this.#files.size;
  }

  /**
   * Pages of mapped files this thread read after they were lost (the files shrank), every
   * FileCache's: a reader compares it before and after reading blocks.
   */
  get faults(): number {
    return mappedFaults === undefined ? 0 : Atomics.load(mappedFaults.counts, 0);
  }

  /** The file of the last lost page read (see `faults`), if it is one of this cache's. */
  get lastFault(): string | undefined {
    return mappedFaults === undefined ? undefined : this.#paths.get(mappedFaults.id);
  }

  /** The offset in its file of the last lost page read. */
  get lastFaultOffset(): number {
    return mappedFaults?.offset ?? 0;
  }

  /** Size of the file in bytes (as when it was opened here). */
  size(path: string): number {
    return this.#open(path).size;
  }

  /** `length` bytes at `offset` of `path` (fewer at the end of the file), read into a new buffer. */
  read(path: string, offset: number, length: number): Buffer {
    return pread(this.#open(path), offset, length);
  }

  /**
   * A data block: `length` bytes at `offset` of `path`, fewer at the end of the file. A view of
   * the file's mapping where files are mapped (valid as long as it is held; see `faults` before
   * trusting what is read through it), else as `read`.
   */
  block(path: string, offset: number, length: number): Buffer {
    const file = this.#open(path);
    let view = file.view;
    if (view === undefined) {
      view = null;
      if (this.#map !== undefined && file.size > 0) {
        try {
          view = this.#map(file.fd, file.size, this.#idOf(path));
        } catch {
          // Mapping failed (e.g. vm.max_map_count reached): this file is read with pread.
          this.mapFailures++;
        }
      }
      file.view = view;
    }
    if (view === null) return pread(file, offset, length);
    const end = Math.min(offset + length, file.size);
    return offset < end ? view.subarray(offset, end) : EMPTY;
  }

  /** The id of `path`'s mappings: one per file while it is known here, unique on this thread. */
  #idOf(path: string): number {
    let id = this.#ids.get(path);
    if (id === undefined) {
      id = nextMappingId++;
      this.#ids.set(path, id);
      this.#paths.set(id, path);
    }
    return id;
  }

  #open(path: string): OpenFile {
    const known = this.#files.get(path);
    if (known !== undefined) {
      known.referenced = true;
      return known;
    }
    const fd = openSync(path, "r");
    let size: number;
    try {
      const stat = fstatSync(fd);
      // A directory opens for reading, and its first read fails with "EISDIR: illegal operation
      // on a directory, read", which names no file and is no corruption to corrupt-shard.ts.
      if (!stat.isFile()) throw new CorruptionError(path, 0, "table is not a regular file");
      size = stat.size;
    } catch (cause) {
      closeSync(fd);
      throw cause;
    }
    const file: OpenFile = { fd, size, referenced: false, view: undefined };
    this.#files.set(path, file);
    while (this.#files.size > this.capacity) {
      const evicted = evictFirst(this.#files, path);
      if (evicted === undefined) break;
      closeSync(evicted[1].fd);
    }
    return file;
  }

  #forget(path: string, file: OpenFile): void {
    this.#files.delete(path);
    closeSync(file.fd);
  }

  /** Closes the file for good (its table was deleted): its mapping goes with its last view. */
  close(path: string): void {
    const file = this.#files.get(path);
    if (file !== undefined) this.#forget(path, file);
    const id = this.#ids.get(path);
    if (id !== undefined) {
      this.#ids.delete(path);
      this.#paths.delete(id);
    }
  }

  closeAll(): void {
    for (const [path, file] of [...this.#files]) this.#forget(path, file);
    this.#ids.clear();
    this.#paths.clear();
  }
}

function pread(file: OpenFile, offset: number, length: number): Buffer {
  const buf = Buffer.allocUnsafe(length);
  const n = readSync(file.fd, buf, 0, length, offset);
  return buf.subarray(0, n);
}
