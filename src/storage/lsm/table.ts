/**
 * An open SSTable on the main thread: its properties (key range, sequences, counts) and footer
 * stay in memory; its index and bloom filter are held while the node-wide table cache accounts
 * for them, and reloaded (and re-verified) from the file after it evicted them; data blocks are
 * read through the node-wide file cache (views of the mapped file, or pread without the native
 * addon), checked against their checksum, parsed and kept in the node-wide block cache (in this
 * table's own set of blocks).
 */
import { CorruptionError } from "../common/index.ts";
import { bloomMayContain, keyHash } from "./bloom.ts";
import {
  newBlockSet,
  type BlockCache,
  type BlockSet,
  type FileCache,
  type MetaHolder,
  type TableCache,
  type TableMeta,
} from "./caches.ts";
import {
  CRC_BYTES,
  FOOTER_BYTES,
  KIND_DELETE,
  blockChecksumOf,
  blockHandleOf,
  blockKey,
  blockKind,
  blockSeq,
  blockValueCopy,
  compareBlockKey,
  decodeFooter,
  materializeKeys,
  parseBlockOf,
  propsFromJson,
  seekInBlock,
  type BlockHandle,
  type Footer,
  type ParsedBlock,
  type TableProps,
} from "./format.ts";
import type { BlockSource } from "./iterators.ts";
import { keyPrefix } from "./keys.ts";

/**
 * Checks `raw`, a block of `size` bytes at `offset` read with the checksum after it: whole, and
 * matching its checksum. Throws CorruptionError.
 */
function checkBlock(path: string, offset: number, size: number, raw: Buffer): void {
  if (raw.length !== size + CRC_BYTES) {
    throw new CorruptionError(path, offset, "block extends past the end of the file");
  }
  if (blockChecksumOf(raw, size) !== raw.readUInt32LE(size)) {
    throw new CorruptionError(path, offset, "block checksum mismatch");
  }
}

/** Reads and verifies one block from `read(offset, length)`; throws CorruptionError. */
export function loadBlock(
  path: string,
  handle: BlockHandle,
  read: (offset: number, length: number) => Buffer,
): Buffer {
  const raw = read(handle.offset, handle.size + CRC_BYTES);
  checkBlock(path, handle.offset, handle.size, raw);
  return raw.subarray(0, handle.size);
}

/** Parses the block `data[0, size)` (all of `data` by default); throws CorruptionError. */
export function parseOrThrow(
  path: string,
  offset: number,
  data: Buffer,
  size = data.length,
): ParsedBlock {
  const block = parseBlockOf(data, size);
  if (block === undefined) throw new CorruptionError(path, offset, "block does not parse");
  return block;
}

/** Index and filter of a table, from a reader over its bytes, verified. */
function loadIndexAndFilter(
  path: string,
  footer: Footer,
  read: (offset: number, length: number) => Buffer,
): TableMeta {
  const index = parseOrThrow(path, footer.index.offset, loadBlock(path, footer.index, read));
  materializeKeys(index);
  const prefixes = new Uint32Array(index.count);
  const handles = new Float64Array(2 * index.count);
  for (let i = 0; i < index.count; i++) {
    prefixes[i] = keyPrefix(blockKey(index, i));
    const handle = blockHandleOf(index, i);
    handles[2 * i] = handle.offset;
    handles[2 * i + 1] = handle.size;
  }
  const filter = new Uint8Array(loadBlock(path, footer.filter, read));
  // Per index entry beyond the block: its key string and slot (~48 bytes), prefix and handle.
  const charge = index.charge + index.count * (48 + 4 + 16) + filter.length;
  return { index, prefixes, handles, filter, charge };
}

/**
 * Throws CorruptionError unless each of the footer's handles lies, with its checksum, within the
 * bytes before the footer. The footer has no checksum of its own, and a handle goes straight into
 * an allocation and a read: a flipped high bit of an offset threw a RangeError (a read position
 * past 2^53), of a size allocated 2 GiB first, and a RangeError is not corruption, so the shard
 * was neither moved aside nor refilled and the node failed to start, unexplained.
 */
function checkFooterHandles(path: string, fileSize: number, footer: Footer): void {
  const end = fileSize - FOOTER_BYTES;
  for (const [name, handle] of [
    ["index", footer.index],
    ["filter", footer.filter],
    ["properties", footer.props],
  ] as const) {
    if (!Number.isSafeInteger(handle.offset) || handle.offset + handle.size + CRC_BYTES > end) {
      throw new CorruptionError(
        path,
        end,
        `footer's ${name} block (offset ${handle.offset}, ${handle.size} bytes) is not within the table's ${end} bytes before its footer`,
      );
    }
  }
}

/** Footer, index, filter and props of a table, from a reader over its bytes. */
export function loadTableMeta(
  path: string,
  fileSize: number,
  read: (offset: number, length: number) => Buffer,
): TableMeta & { footer: Footer; props: TableProps } {
  if (fileSize < FOOTER_BYTES) throw new CorruptionError(path, 0, "file shorter than a footer");
  const footer = decodeFooter(read(fileSize - FOOTER_BYTES, FOOTER_BYTES));
  if (typeof footer === "string") {
    throw new CorruptionError(path, fileSize - FOOTER_BYTES, footer);
  }
  checkFooterHandles(path, fileSize, footer);
  const meta = loadIndexAndFilter(path, footer, read);
  const propsBytes = loadBlock(path, footer.props, read);
  let props: TableProps;
  try {
    props = propsFromJson(propsBytes.toString("utf8"));
  } catch (cause) {
    throw new CorruptionError(path, footer.props.offset, "properties do not parse", { cause });
  }
  return { ...meta, footer, props };
}

/** The node-wide caches a table reads through. */
export interface TableCaches {
  readonly blockCache: BlockCache;
  readonly tableCache: TableCache;
  readonly files: FileCache;
}

export class Table implements BlockSource, MetaHolder {
  readonly number: number;
  readonly path: string;
  readonly fileSize: number;
  readonly props: TableProps;
  readonly #footer: Footer;
  readonly #caches: TableCaches;
  /** Index and filter, while the table cache accounts for them. */
  #meta: TableMeta | undefined;
  /** This table's blocks in the block cache, by ordinal. */
  readonly #blocks: BlockSet;
  /** Readers holding this table (iterators, exports); it is deleted when obsolete and unpinned. */
  pins = 0;
  obsolete = false;

  private constructor(
    number: number,
    path: string,
    fileSize: number,
    footer: Footer,
    props: TableProps,
    caches: TableCaches,
    blocks: number,
  ) {
    this.#blocks = newBlockSet(blocks);
    this.number = number;
    this.path = path;
    this.fileSize = fileSize;
    this.#footer = footer;
    this.props = props;
    this.#caches = caches;
  }

  /** Opens a table: reads and verifies footer, index, filter and props; caches index and filter. */
  static open(number: number, path: string, caches: TableCaches): Table {
    const fileSize = caches.files.size(path);
    const meta = loadTableMeta(path, fileSize, (offset, length) =>
      caches.files.read(path, offset, length),
    );
    const table = new Table(
      number,
      path,
      fileSize,
      meta.footer,
      meta.props,
      caches,
      meta.index.count,
    );
    table.#hold(meta);
    return table;
  }

  #hold(meta: TableMeta): void {
    if (this.#caches.tableCache.add(this, meta.charge)) this.#meta = meta;
  }

  /** Called by the table cache when it evicts this table's index and filter. */
  dropMeta(): void {
    this.#meta = undefined;
  }

  /** Index and filter: held, or reloaded from the file if the table cache evicted them. */
  #loadedMeta(): TableMeta {
    const held = this.#meta;
    if (held !== undefined) {
      this.#caches.tableCache.touch(this);
      return held;
    }
    const meta = loadIndexAndFilter(this.path, this.#footer, (offset, length) =>
      this.#caches.files.read(this.path, offset, length),
    );
    this.#hold(meta);
    return meta;
  }

  get index(): ParsedBlock {
    return this.#loadedMeta().index;
  }

  /** Bytes of memory this table holds outside the block cache now (its index and filter if loaded). */
  get residentBytes(): number {
    return this.#meta?.charge ?? 0;
  }

  readBlock(handle: BlockHandle, ordinal: number): ParsedBlock {
    return this.#readBlockAt(ordinal, handle.offset, handle.size);
  }

  #readBlockAt(ordinal: number, offset: number, size: number): ParsedBlock {
    const cached = this.#caches.blockCache.get(this.#blocks, ordinal);
    if (cached !== undefined) return cached;
    // One view of the file (block and checksum) per miss: no reader closure, no subarray.
    const raw = this.#caches.files.block(this.path, offset, size + CRC_BYTES);
    checkBlock(this.path, offset, size, raw);
    const block = parseOrThrow(this.path, offset, raw, size);
    this.#caches.blockCache.set(this.#blocks, ordinal, block);
    return block;
  }

  /**
   * As Memtable.get: a value, null for a tombstone, undefined when the table has no version. The
   * value is a copy: a block may be a view of the file's mapping, which the file could shrink
   * under (FileCache); the caller checks the file cache's `faults` around the call.
   */
  get(key: string, seq: number, hash: number): Uint8Array | null | undefined {
    if (key < this.props.smallest || key > this.props.largest) return undefined;
    const { index, prefixes, handles, filter } = this.#loadedMeta();
    if (!bloomMayContain(filter, hash)) return undefined;
    // The first index entry at or after (key, seq): seekInBlock's search, on the prefixes first.
    const keys = index.keys as string[];
    const kp = keyPrefix(key);
    let lo = 0;
    let hi = index.count;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const p = prefixes[mid] as number;
      let before = p < kp;
      if (p === kp) {
        const k = keys[mid] as string;
        before = k < key || (k === key && blockSeq(index, mid) > seq);
      }
      if (before) lo = mid + 1;
      else hi = mid;
    }
    for (let b = lo; b < index.count; b++) {
      const block = this.#readBlockAt(b, handles[2 * b] as number, handles[2 * b + 1] as number);
      const i = seekInBlock(block, key, seq);
      if (i < block.count) {
        if (compareBlockKey(block, i, key) !== 0) return undefined;
        if (blockKind(block, i) === KIND_DELETE) return null;
        return blockValueCopy(block, i);
      }
    }
    return undefined;
  }

  evictFromCaches(): void {
    this.#caches.blockCache.evictTable(this.#blocks);
    this.#caches.tableCache.remove(this);
    this.#meta = undefined;
    this.#caches.files.close(this.path);
  }
}

export { keyHash };
