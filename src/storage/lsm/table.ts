/**
 * An open SSTable on the main thread: its properties (key range, sequences, counts) and footer
 * stay in memory; its index and bloom filter live in the node-wide table cache and are reloaded
 * (and re-verified) from the file when evicted; data blocks are read with pread through the
 * node-wide file cache, checked against their CRC32C, parsed and kept in the node-wide block
 * cache.
 */
import { fstatSync, readSync } from "node:fs";
import { crc32c, CorruptionError } from "../common/index.ts";
import { bloomMayContain, keyHash } from "./bloom.ts";
import type { BlockCache, FileCache, TableCache, TableMeta } from "./caches.ts";
import {
  CRC_BYTES,
  FOOTER_BYTES,
  KIND_DELETE,
  blockHandleOf,
  blockKind,
  blockValue,
  compareBlockKey,
  decodeFooter,
  materializeKeys,
  parseBlock,
  propsFromJson,
  seekInBlock,
  type BlockHandle,
  type Footer,
  type ParsedBlock,
  type TableProps,
} from "./format.ts";
import type { BlockSource } from "./iterators.ts";

/** Reads and verifies one block from `read(offset, length)`; throws CorruptionError. */
export function loadBlock(
  path: string,
  handle: BlockHandle,
  read: (offset: number, length: number) => Buffer,
): Buffer {
  const raw = read(handle.offset, handle.size + CRC_BYTES);
  if (raw.length !== handle.size + CRC_BYTES) {
    throw new CorruptionError(path, handle.offset, "block extends past the end of the file");
  }
  const data = raw.subarray(0, handle.size);
  if (crc32c(data) !== raw.readUInt32LE(handle.size)) {
    throw new CorruptionError(path, handle.offset, "block checksum mismatch");
  }
  return data;
}

export function parseOrThrow(path: string, offset: number, data: Buffer): ParsedBlock {
  const block = parseBlock(data);
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
  const filter = new Uint8Array(loadBlock(path, footer.filter, read));
  // Index keys are made strings: about 40 bytes each beyond the block itself.
  return { index, filter, charge: index.charge + index.count * 40 + filter.length };
}

/** Footer, index, filter and props of a table, from a reader over its bytes. */
export function loadTableMeta(
  path: string,
  fileSize: number,
  read: (offset: number, length: number) => Buffer,
): { footer: Footer; index: ParsedBlock; filter: Uint8Array; props: TableProps; charge: number } {
  if (fileSize < FOOTER_BYTES) throw new CorruptionError(path, 0, "file shorter than a footer");
  const footer = decodeFooter(read(fileSize - FOOTER_BYTES, FOOTER_BYTES));
  if (typeof footer === "string") {
    throw new CorruptionError(path, fileSize - FOOTER_BYTES, footer);
  }
  const { index, filter, charge } = loadIndexAndFilter(path, footer, read);
  const propsBytes = loadBlock(path, footer.props, read);
  let props: TableProps;
  try {
    props = propsFromJson(propsBytes.toString("utf8"));
  } catch (cause) {
    throw new CorruptionError(path, footer.props.offset, "properties do not parse", { cause });
  }
  return { footer, index, filter, props, charge };
}

/** The node-wide caches a table reads through. */
export interface TableCaches {
  readonly blockCache: BlockCache;
  readonly tableCache: TableCache;
  readonly files: FileCache;
}

export class Table implements BlockSource {
  readonly number: number;
  readonly path: string;
  readonly fileSize: number;
  readonly props: TableProps;
  readonly #footer: Footer;
  readonly #id: string;
  readonly #caches: TableCaches;
  /** Readers holding this table (iterators, exports); it is deleted when obsolete and unpinned. */
  pins = 0;
  obsolete = false;

  private constructor(
    number: number,
    path: string,
    fileSize: number,
    footer: Footer,
    props: TableProps,
    id: string,
    caches: TableCaches,
  ) {
    this.number = number;
    this.path = path;
    this.fileSize = fileSize;
    this.#footer = footer;
    this.props = props;
    this.#id = id;
    this.#caches = caches;
  }

  /** Opens a table: reads and verifies footer, index, filter and props; caches index and filter. */
  static open(number: number, path: string, cacheId: string, caches: TableCaches): Table {
    const fileSize = fstatSync(caches.files.fd(path)).size;
    const meta = loadTableMeta(path, fileSize, (offset, length) =>
      readAt(caches.files, path, offset, length),
    );
    const table = new Table(number, path, fileSize, meta.footer, meta.props, cacheId, caches);
    caches.tableCache.set(`${cacheId}:meta`, meta);
    return table;
  }

  /** Index and filter: from the table cache, or reloaded from the file if evicted. */
  #meta(): TableMeta {
    const key = `${this.#id}:meta`;
    const cached = this.#caches.tableCache.get(key);
    if (cached !== undefined) return cached;
    const meta = loadIndexAndFilter(this.path, this.#footer, (offset, length) =>
      readAt(this.#caches.files, this.path, offset, length),
    );
    this.#caches.tableCache.set(key, meta);
    return meta;
  }

  get index(): ParsedBlock {
    return this.#meta().index;
  }

  /** Bytes of memory this table holds outside the block cache now (its index and filter if loaded). */
  get residentBytes(): number {
    return this.#caches.tableCache.peek(`${this.#id}:meta`)?.charge ?? 0;
  }

  readBlock(handle: BlockHandle): ParsedBlock {
    const id = `${this.#id}:${handle.offset}`;
    const cached = this.#caches.blockCache.get(id);
    if (cached !== undefined) return cached;
    const data = loadBlock(this.path, handle, (offset, length) =>
      readAt(this.#caches.files, this.path, offset, length),
    );
    const block = parseOrThrow(this.path, handle.offset, data);
    this.#caches.blockCache.set(id, block);
    return block;
  }

  /** As Memtable.get: a value, null for a tombstone, undefined when the table has no version. */
  get(key: string, seq: number, hash: number): Uint8Array | null | undefined {
    if (key < this.props.smallest || key > this.props.largest) return undefined;
    const { index, filter } = this.#meta();
    if (!bloomMayContain(filter, hash)) return undefined;
    for (let b = seekInBlock(index, key, seq); b < index.count; b++) {
      const block = this.readBlock(blockHandleOf(index, b));
      const i = seekInBlock(block, key, seq);
      if (i < block.count) {
        if (compareBlockKey(block, i, key) !== 0) return undefined;
        if (blockKind(block, i) === KIND_DELETE) return null;
        return blockValue(block, i);
      }
    }
    return undefined;
  }

  evictFromCaches(): void {
    const key = `${this.#id}:meta`;
    // Blocks are found through the index; if it was evicted, they age out of the block cache on
    // their own (the table's id is never reused), rather than reloading the index to find them.
    const meta = this.#caches.tableCache.peek(key);
    if (meta !== undefined) {
      const offsets: number[] = [];
      for (let b = 0; b < meta.index.count; b++) offsets.push(blockHandleOf(meta.index, b).offset);
      this.#caches.blockCache.evictTable(this.#id, offsets);
      this.#caches.tableCache.delete(key);
    }
    this.#caches.files.close(this.path);
  }
}

/** `length` bytes at `offset` of `path` (fewer at the end of the file), through the fd cache. */
function readAt(files: FileCache, path: string, offset: number, length: number): Buffer {
  const buf = Buffer.allocUnsafe(length);
  const n = readSync(files.fd(path), buf, 0, length, offset);
  return buf.subarray(0, n);
}

export { keyHash };
