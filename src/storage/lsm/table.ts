/**
 * An open SSTable on the main thread: its index, bloom filter and properties stay in memory;
 * data blocks are read with pread through the node-wide file cache, checked against their
 * CRC32C, parsed and kept in the node-wide block cache.
 */
import { fstatSync, readSync } from "node:fs";
import { crc32c, CorruptionError } from "../common/index.ts";
import { bloomMayContain, keyHash } from "./bloom.ts";
import type { BlockCache, FileCache } from "./caches.ts";
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

/** Footer, index, filter and props of a table, from a reader over its bytes. */
export function loadTableMeta(
  path: string,
  fileSize: number,
  read: (offset: number, length: number) => Buffer,
): { index: ParsedBlock; filter: Uint8Array; props: TableProps } {
  if (fileSize < FOOTER_BYTES) throw new CorruptionError(path, 0, "file shorter than a footer");
  const footer = decodeFooter(read(fileSize - FOOTER_BYTES, FOOTER_BYTES));
  if (typeof footer === "string") {
    throw new CorruptionError(path, fileSize - FOOTER_BYTES, footer);
  }
  const index = parseOrThrow(path, footer.index.offset, loadBlock(path, footer.index, read));
  materializeKeys(index);
  const filter = loadBlock(path, footer.filter, read);
  const propsBytes = loadBlock(path, footer.props, read);
  let props: TableProps;
  try {
    props = propsFromJson(propsBytes.toString("utf8"));
  } catch (cause) {
    throw new CorruptionError(path, footer.props.offset, "properties do not parse", { cause });
  }
  return { index, filter: new Uint8Array(filter), props };
}

export class Table implements BlockSource {
  readonly number: number;
  readonly path: string;
  readonly fileSize: number;
  readonly index: ParsedBlock;
  readonly filter: Uint8Array;
  readonly props: TableProps;
  readonly #id: string;
  readonly #blockCache: BlockCache;
  readonly #files: FileCache;
  /** Readers holding this table (iterators, exports); it is deleted when obsolete and unpinned. */
  pins = 0;
  obsolete = false;

  private constructor(
    number: number,
    path: string,
    fileSize: number,
    meta: { index: ParsedBlock; filter: Uint8Array; props: TableProps },
    id: string,
    blockCache: BlockCache,
    files: FileCache,
  ) {
    this.number = number;
    this.path = path;
    this.fileSize = fileSize;
    this.index = meta.index;
    this.filter = meta.filter;
    this.props = meta.props;
    this.#id = id;
    this.#blockCache = blockCache;
    this.#files = files;
  }

  static open(
    number: number,
    path: string,
    cacheId: string,
    blockCache: BlockCache,
    files: FileCache,
  ): Table {
    const fileSize = fstatSync(files.fd(path)).size;
    const read = (offset: number, length: number): Buffer => {
      const buf = Buffer.allocUnsafe(length);
      const n = readSync(files.fd(path), buf, 0, length, offset);
      return buf.subarray(0, n);
    };
    const meta = loadTableMeta(path, fileSize, read);
    return new Table(number, path, fileSize, meta, cacheId, blockCache, files);
  }

  /** Bytes of memory this open table holds outside the block cache. */
  get residentBytes(): number {
    // Index keys are made as strings at open: about 40 bytes each beyond the block itself.
    return this.index.charge + this.index.count * 40 + this.filter.length + 256;
  }

  readBlock(handle: BlockHandle): ParsedBlock {
    const id = `${this.#id}:${handle.offset}`;
    const cached = this.#blockCache.get(id);
    if (cached !== undefined) return cached;
    const data = loadBlock(this.path, handle, (offset, length) => {
      const buf = Buffer.allocUnsafe(length);
      const n = readSync(this.#files.fd(this.path), buf, 0, length, offset);
      return buf.subarray(0, n);
    });
    const block = parseOrThrow(this.path, handle.offset, data);
    this.#blockCache.set(id, block);
    return block;
  }

  /** As Memtable.get: a value, null for a tombstone, undefined when the table has no version. */
  get(key: string, seq: number, hash: number): Uint8Array | null | undefined {
    if (key < this.props.smallest || key > this.props.largest) return undefined;
    if (!bloomMayContain(this.filter, hash)) return undefined;
    const index = this.index;
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
    const offsets: number[] = [];
    for (let b = 0; b < this.index.count; b++) offsets.push(blockHandleOf(this.index, b).offset);
    this.#blockCache.evictTable(this.#id, offsets);
    this.#files.close(this.path);
  }
}

export { keyHash };
