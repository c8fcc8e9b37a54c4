/**
 * The SSTable file format (see docs/storage.md § SSTable for the picture):
 *
 *     data block 0 | crc | data block 1 | crc | ... | index | crc | filter | crc | props | crc | footer
 *
 * An entry (in data and index blocks alike) is
 *     varint keyLength | key | u8 kind | u64 seq | varint valueLength | value
 * sorted by key ascending, then seq descending; a data or index block ends with
 *     u32 entryOffset[count] | u32 keyPrefix[count] | u32 count
 * so that a lookup reads it in place: its binary search compares the keys' first four bytes
 * (big-endian, 0-padded: `keyPrefix`) in one small array and reads an entry only on a tie. Data
 * blocks close once their entries reach ~4 KiB. The index holds one entry per data block: the block's last key and seq, and as value the block's
 * u64 offset and u32 size. The filter is a bloom filter over the user keys; props is UTF-8 JSON.
 * The 48-byte footer holds the index, filter and props handles (u64 offset, u32 size each), the
 * u32 format version and the 8-byte magic "CAIRNSST". Every block is followed by the CRC32C of its
 * bytes (`blockChecksum`), verified on every read. All integers little-endian.
 */
import { crc32c } from "../common/index.ts";
import { buildBloom, keyHash } from "./bloom.ts";
import { keyPrefix } from "./keys.ts";

export const BLOCK_BYTES = 4096;
export const FOOTER_BYTES = 48;
/**
 * 5: blocks carry their keys' first four bytes beside the entry offsets (a lookup in a block
 * touches two or three cache lines in all instead of one or two per probe). 4: block checksums
 * are CRC32C again, computed with the CPU's instruction through the native addon (~0.25 µs per
 * 4 KiB block, against ~0.9 µs for zlib's CRC-32 of versions 2 and 3, and ~2.3 µs for the
 * JavaScript CRC32C, which stays the path without the addon). 3: data and index blocks end with
 * their entries' offsets (read in place, not parsed into arrays). Older tables are refused.
 */
export const FORMAT_VERSION = 5;
export const TABLE_MAGIC = Buffer.from("CAIRNSST", "latin1");
export const CRC_BYTES = 4;

/** The checksum after every block of a table: CRC32C of its bytes, as every other checksum. */
export function blockChecksum(bytes: Uint8Array): number {
  return crc32c(bytes);
}

/** blockChecksum of `bytes[0, size)`, without a view. */
export function blockChecksumOf(bytes: Uint8Array, size: number): number {
  return crc32c(bytes, 0, 0, size);
}

export const KIND_DELETE = 0;
export const KIND_PUT = 1;

export interface BlockHandle {
  readonly offset: number;
  readonly size: number;
}

/** What a table says about itself (its props block); kept in the manifest as well. */
export interface TableProps {
  /** Smallest and largest user keys, as binary strings. */
  readonly smallest: string;
  readonly largest: string;
  readonly entries: number;
  readonly tombstones: number;
  readonly minSeq: number;
  readonly maxSeq: number;
}

interface Latin1Write {
  latin1Write(s: string, offset: number, length: number): number;
}

/** A growable byte buffer. */
export class ByteSink {
  buf: Buffer;
  length = 0;

  /** Writes into `buf` (a new buffer of `capacity` bytes by default), growing past it by doubling. */
  constructor(capacity = 8192, buf: Buffer = Buffer.allocUnsafe(capacity)) {
    this.buf = buf;
  }

  ensure(extra: number): void {
    if (this.length + extra <= this.buf.length) return;
    const bigger = Buffer.allocUnsafe(Math.max(this.buf.length * 2, this.length + extra));
    this.buf.copy(bigger, 0, 0, this.length);
    this.buf = bigger;
  }

  varint(n: number): void {
    this.ensure(5);
    let v = n >>> 0;
    while (v >= 0x80) {
      this.buf[this.length++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
    this.buf[this.length++] = v;
  }

  u32(n: number): void {
    this.ensure(4);
    this.buf.writeUInt32LE(n >>> 0, this.length);
    this.length += 4;
  }

  u64(n: number): void {
    this.ensure(8);
    this.buf.writeUInt32LE(n >>> 0, this.length);
    this.buf.writeUInt32LE(Math.floor(n / 0x1_0000_0000), this.length + 4);
    this.length += 8;
  }

  u8(n: number): void {
    this.ensure(1);
    this.buf[this.length++] = n;
  }

  latin1(s: string): void {
    this.ensure(s.length);
    // Node's internal writer (present on every Buffer): no encoding lookup nor argument checks.
    this.length += (this.buf as unknown as Latin1Write).latin1Write(s, this.length, s.length);
  }

  bytes(b: Uint8Array, start = 0, end = b.length): void {
    this.ensure(end - start);
    if (start === 0 && end === b.length) {
      // A whole array (a value): TypedArray#set is a builtin memcpy, without Buffer#copy's checks.
      this.buf.set(b, this.length);
    } else {
      // Buffer#copy takes a range: no subarray object per call on this hot path.
      Buffer.prototype.copy.call(b, this.buf, this.length, start, end);
    }
    this.length += end - start;
  }

  view(): Buffer {
    return this.buf.subarray(0, this.length);
  }
}

/**
 * Appends one entry in the shared entry encoding: one capacity check, then the fields stored
 * byte by byte (see writeEntry).
 */
export function putEntry(
  sink: ByteSink,
  key: string,
  kind: number,
  seq: number,
  value: Uint8Array,
): void {
  sink.ensure(key.length + value.length + 19); // two varints of ≤ 5 bytes, kind, seq
  sink.length = writeEntry(sink.buf, sink.length, key, kind, seq, value);
}

/** Bytes of an entry with a key and a value of these lengths in the shared entry encoding. */
export function entryLength(keyLength: number, valueLength: number): number {
  return varintLength(keyLength) + keyLength + 9 + varintLength(valueLength) + valueLength;
}

function varintLength(n: number): number {
  return n < 0x80 ? 1 : n < 0x4000 ? 2 : n < 0x20_0000 ? 3 : n < 0x1000_0000 ? 4 : 5;
}

/**
 * Writes one entry in the shared entry encoding at `at` (the caller made room: entryLength);
 * returns the position after it. The memtable's arena and every table builder write entries
 * with this, field by field: no per-entry objects, and short keys and values by loop.
 */
export function writeEntry(
  buf: Buffer,
  at: number,
  key: string | Uint8Array,
  kind: number,
  seq: number,
  value: Uint8Array,
): number {
  const keyLength = key.length;
  const valueLength = value.length;
  let p = putVarint(buf, at, keyLength);
  if (typeof key !== "string") {
    // The key's bytes (a write's key, as the memtable's arena takes it).
    if (keyLength <= 64) for (let i = 0; i < keyLength; i++) buf[p + i] = key[i] as number;
    else buf.set(key, p);
    p += keyLength;
  } else if (keyLength <= 32) {
    // Below this a loop beats the native writer's call.
    for (let i = 0; i < keyLength; i++) buf[p + i] = key.charCodeAt(i);
    p += keyLength;
  } else {
    p += (buf as unknown as Latin1Write).latin1Write(key, p, keyLength);
  }
  buf[p] = kind;
  const lo = seq >>> 0;
  const hi = Math.floor(seq / 0x1_0000_0000);
  buf[p + 1] = lo;
  buf[p + 2] = lo >>> 8;
  buf[p + 3] = lo >>> 16;
  buf[p + 4] = lo >>> 24;
  buf[p + 5] = hi;
  buf[p + 6] = hi >>> 8;
  buf[p + 7] = hi >>> 16;
  buf[p + 8] = hi >>> 24;
  p = putVarint(buf, p + 9, valueLength);
  if (valueLength <= 64) {
    // Below this a loop beats TypedArray#set's call.
    for (let i = 0; i < valueLength; i++) buf[p + i] = value[i] as number;
  } else {
    buf.set(value, p);
  }
  return p + valueLength;
}

/** An entry of the shared entry encoding, as `read` found it (one object, reused). */
export class EntryCursor {
  key = "";
  kind = 0;
  seq = 0;
  /** The value's length: it ends where the entry does. */
  valueLength = 0;
  /** Where the entry ends (the next one starts). */
  end = 0;

  /** Reads the entry at `at` of `data` (entries Cairn wrote: a memtable's, an import's). */
  read(data: Buffer, at: number): void {
    const keyLength = varintAt(data, at);
    let p = skipVarint(data, at);
    this.key = (data as unknown as Latin1Slice).latin1Slice(p, p + keyLength);
    p += keyLength;
    this.kind = data[p] as number;
    this.seq = readU64(data, p + 1);
    p += 9;
    this.valueLength = varintAt(data, p);
    this.end = skipVarint(data, p) + this.valueLength;
  }
}

/** Where the entry at `at` of `data` ends (entries Cairn wrote), reading only its framing. */
export function encodedEntryEnd(data: Buffer, at: number): number {
  const p = skipVarint(data, at) + varintAt(data, at) + 9;
  return skipVarint(data, p) + varintAt(data, p);
}

/** Writes `n` (< 2^32) as a varint at `at`; returns the position after it. */
function putVarint(buf: Buffer, at: number, n: number): number {
  let v = n >>> 0;
  let p = at;
  while (v >= 0x80) {
    buf[p++] = (v & 0x7f) | 0x80;
    v >>>= 7;
  }
  buf[p] = v;
  return p + 1;
}

export function readU64(buf: Uint8Array, at: number): number {
  return u32At(buf, at) + u32At(buf, at + 4) * 0x1_0000_0000;
}

/**
 * A data or index block, verified and validated, read in place: it is cached as its bytes and a
 * few numbers, and a lookup decodes only the entries its binary search visits. The block ends
 * with `u32 entryOffset[count] | u32 count`; entry i starts at `entryOffset[i]`. Key strings are
 * made lazily by blockKey() (scans, and index blocks once per table); a point read compares bytes
 * in place and makes none.
 */
export interface ParsedBlock {
  readonly count: number;
  readonly data: Buffer;
  /** Where the entry offset array starts: the end of the last entry. */
  readonly offsetsAt: number;
  /** Where the key prefix array starts (after the offsets). */
  readonly prefixesAt: number;
  /** Key strings made so far, allocated at the first. */
  keys: Array<string | undefined> | undefined;
  /**
   * How many of `keys` are made. seekInBlock compares strings only once all are: a scan that
   * stops early and one that starts late make the two ends and nothing between (issue 50).
   */
  keysMade: number;
  /** Approximate memory held, for the block cache's accounting. */
  readonly charge: number;
}

/** Node's internal, argument-check-free latin1 decoder (present on every Buffer). */
interface Latin1Slice {
  latin1Slice(start: number, end: number): string;
}

function u32At(data: Uint8Array, at: number): number {
  return (
    ((data[at] as number) |
      ((data[at + 1] as number) << 8) |
      ((data[at + 2] as number) << 16) |
      ((data[at + 3] as number) << 24)) >>>
    0
  );
}

/**
 * A varint the block's validation already checked, or that Cairn wrote (at most 4 bytes:
 * lengths < 2^28).
 */
function varintAt(data: Uint8Array, at: number): number {
  let b = data[at] as number;
  if (b < 0x80) return b;
  let n = b & 0x7f;
  let shift = 7;
  for (let i = at + 1; ; i++) {
    b = data[i] as number;
    n |= (b & 0x7f) << shift;
    if (b < 0x80) return n;
    shift += 7;
  }
}

/** The position just after the varint at `at`. */
function skipVarint(data: Uint8Array, at: number): number {
  let i = at;
  while ((data[i] as number) >= 0x80) i++;
  return i + 1;
}

/** Where entry i starts. */
export function entryStart(block: ParsedBlock, i: number): number {
  return u32At(block.data, block.offsetsAt + 4 * i);
}

/** Where entry i ends (the next one starts, or the offset array). */
export function entryEnd(block: ParsedBlock, i: number): number {
  return i + 1 < block.count ? entryStart(block, i + 1) : block.offsetsAt;
}

/** Where entry i's key ends: its kind byte, then its u64 seq, then the value. */
function keyEnd(block: ParsedBlock, i: number): number {
  const at = entryStart(block, i);
  return skipVarint(block.data, at) + varintAt(block.data, at);
}

export function blockKey(block: ParsedBlock, i: number): string {
  const keys = (block.keys ??= new Array<string | undefined>(block.count));
  let k = keys[i];
  if (k === undefined) {
    const at = entryStart(block, i);
    const start = skipVarint(block.data, at);
    k = (block.data as unknown as Latin1Slice).latin1Slice(start, start + varintAt(block.data, at));
    keys[i] = k;
    block.keysMade++;
  }
  return k;
}

export function blockKind(block: ParsedBlock, i: number): number {
  return block.data[keyEnd(block, i)] as number;
}

export function blockSeq(block: ParsedBlock, i: number): number {
  return readU64(block.data, keyEnd(block, i) + 1);
}

export function blockValue(block: ParsedBlock, i: number): Buffer {
  const at = keyEnd(block, i) + 9;
  const start = skipVarint(block.data, at);
  return block.data.subarray(start, start + varintAt(block.data, at));
}

/** The value of entry i, copied into a buffer of its own (a block may be a view of a mapping). */
export function blockValueCopy(block: ParsedBlock, i: number): Buffer {
  const at = keyEnd(block, i) + 9;
  const start = skipVarint(block.data, at);
  const length = varintAt(block.data, at);
  const value = Buffer.allocUnsafe(length);
  block.data.copy(value, 0, start, start + length);
  return value;
}

/** Compares the i-th key of a block with `key` (binary string) in unsigned byte order. */
export function compareBlockKey(block: ParsedBlock, i: number, key: string): number {
  const data = block.data;
  const at = entryStart(block, i);
  const len = varintAt(data, at);
  const start = skipVarint(data, at);
  const n = len < key.length ? len : key.length;
  for (let j = 0; j < n; j++) {
    const d = (data[start + j] as number) - key.charCodeAt(j);
    if (d !== 0) return d;
  }
  return len - key.length;
}

function readVarint32(data: Buffer, at: number, end: number): number {
  // Returns value * 8 + bytes consumed (≤ 5), or -1 when malformed; lengths stay < 2^28.
  let n = 0;
  let shift = 0;
  let i = at;
  for (;;) {
    if (i >= end || shift > 21) return -1;
    const b = data[i++] as number;
    n |= (b & 0x7f) << shift;
    if (b < 0x80) return n * 8 + (i - at);
    shift += 7;
  }
}

/**
 * Validates a block's structure (its checksum matched already): the offset array fits, and the
 * entries it points at are contiguous, each with its key, kind, seq and value inside the block.
 * Nothing is copied. Returns undefined when the bytes do not parse (the caller reports
 * corruption: a block whose checksum matched but does not parse was written wrong, never served).
 */
export function parseBlock(data: Buffer): ParsedBlock | undefined {
  return parseBlockOf(data, data.length);
}

/** parseBlock of `data[0, size)`: `data` may run on (a block read with its checksum after it). */
export function parseBlockOf(data: Buffer, size: number): ParsedBlock | undefined {
  if (size < 4 || size > data.length) return undefined;
  const count = u32At(data, size - 4);
  const offsetsAt = size - 4 - 8 * count;
  const prefixesAt = offsetsAt + 4 * count;
  if (count === 0 || offsetsAt < 0) return undefined;
  let at = 0;
  for (let i = 0; i < count; i++) {
    if (u32At(data, offsetsAt + 4 * i) !== at) return undefined;
    // One-byte varints (keys and values under 128 bytes) inline; longer ones through
    // readVarint32. `at < offsetsAt` keeps every read inside the block.
    if (at >= offsetsAt) return undefined;
    const k0 = data[at] as number;
    let keyAt: number;
    let keyLength: number;
    if (k0 < 0x80) {
      keyAt = at + 1;
      keyLength = k0;
    } else {
      const k = readVarint32(data, at, offsetsAt);
      if (k < 0) return undefined;
      keyAt = at + (k & 7);
      keyLength = Math.floor(k / 8);
    }
    at = keyAt + keyLength + 9;
    if (at >= offsetsAt) return undefined;
    if (u32At(data, prefixesAt + 4 * i) !== bytesPrefix(data, keyAt, keyLength)) return undefined;
    const v0 = data[at] as number;
    if (v0 < 0x80) {
      at += 1 + v0;
    } else {
      const v = readVarint32(data, at, offsetsAt);
      if (v < 0) return undefined;
      at += (v & 7) + Math.floor(v / 8);
    }
    if (at > offsetsAt) return undefined;
  }
  if (at !== offsetsAt) return undefined;
  return {
    count,
    data,
    offsetsAt,
    prefixesAt,
    keys: undefined,
    keysMade: 0,
    charge: size + BLOCK_OVERHEAD,
  };
}

/** keyPrefix of the key stored at `data[at, at + length)`. */
function bytesPrefix(data: Uint8Array, at: number, length: number): number {
  return (
    (((length > 0 ? (data[at] as number) : 0) << 24) |
      ((length > 1 ? (data[at + 1] as number) : 0) << 16) |
      ((length > 2 ? (data[at + 2] as number) : 0) << 8) |
      (length > 3 ? (data[at + 3] as number) : 0)) >>>
    0
  );
}

/** Memory of a cached block beyond its bytes: the block object, the Buffer view, the cache entry. */
const BLOCK_OVERHEAD = 200;

/** Index of the first entry at or after (key, seq) in internal order; `block.count` if none. */
export function seekInBlock(block: ParsedBlock, key: string, seq: number): number {
  let lo = 0;
  let hi = block.count;
  if (block.keysMade === block.count) {
    // Every key made (an index block, or a block a scan walked whole): compare strings natively.
    const keys = block.keys as string[];
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      const k = keys[mid] as string;
      if (k < key || (k === key && blockSeq(block, mid) > seq)) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }
  // The prefixes first (one small array, monotonic in the key); the entry itself only on a tie.
  const kp = keyPrefix(key);
  const data = block.data;
  const prefixesAt = block.prefixesAt;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    const p = u32At(data, prefixesAt + 4 * mid);
    const c = p !== kp ? p - kp : compareBlockKey(block, mid, key);
    if (c < 0 || (c === 0 && blockSeq(block, mid) > seq)) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** Makes every key string of a block now (for blocks searched many times, like an index). */
export function materializeKeys(block: ParsedBlock): void {
  for (let i = 0; i < block.count; i++) blockKey(block, i);
}

export function blockHandleOf(block: ParsedBlock, i: number): BlockHandle {
  const v = keyEnd(block, i) + 9;
  const at = skipVarint(block.data, v);
  return { offset: readU64(block.data, at), size: u32At(block.data, at + 8) };
}

export interface Footer {
  readonly index: BlockHandle;
  readonly filter: BlockHandle;
  readonly props: BlockHandle;
}

export function decodeFooter(buf: Buffer): Footer | string {
  if (buf.length !== FOOTER_BYTES) return "short footer";
  if (!buf.subarray(40, 48).equals(TABLE_MAGIC)) return "bad table magic";
  const version = buf.readUInt32LE(36);
  if (version !== FORMAT_VERSION) return `unsupported table format version ${version}`;
  const handle = (at: number): BlockHandle => ({
    offset: readU64(buf, at),
    size: buf.readUInt32LE(at + 8),
  });
  return { index: handle(0), filter: handle(12), props: handle(24) };
}

export function propsToJson(p: TableProps): string {
  return JSON.stringify({
    ...p,
    smallest: Buffer.from(p.smallest, "latin1").toString("hex"),
    largest: Buffer.from(p.largest, "latin1").toString("hex"),
  });
}

export function propsFromJson(text: string): TableProps {
  const raw = JSON.parse(text) as TableProps;
  return {
    ...raw,
    smallest: Buffer.from(raw.smallest, "hex").toString("latin1"),
    largest: Buffer.from(raw.largest, "hex").toString("latin1"),
  };
}

/** Closes a block: its entries' offsets and key prefixes, then their count. Clears both lists. */
function appendEntryOffsets(sink: ByteSink, starts: number[], prefixes: number[]): void {
  for (const at of starts) sink.u32(at);
  for (const p of prefixes) sink.u32(p);
  sink.u32(starts.length);
  starts.length = 0;
  prefixes.length = 0;
}

/**
 * Builds one table in memory from entries added in internal order. Pure (no I/O): the worker
 * writes `finish()`'s bytes to disk.
 */
export class TableBuilder {
  /** The table so far; the open data block is built in place at its end (no copy per block). */
  readonly #out: ByteSink;
  /** Where the open data block starts in #out. */
  #blockStart = 0;
  readonly #index = new ByteSink(16 * 1024);
  /** Where each entry of the open data block and of the index starts. */
  readonly #blockStarts: number[] = [];
  readonly #indexStarts: number[] = [];
  /** keyPrefix of each of those entries' keys. */
  readonly #blockPrefixes: number[] = [];
  readonly #indexPrefixes: number[] = [];
  readonly #hashes: number[] = [];
  #lastKey = "";
  #lastSeq = 0;
  #smallest: string | undefined;
  #entries = 0;
  #tombstones = 0;
  #minSeq = Number.MAX_SAFE_INTEGER;
  #maxSeq = 0;

  /** A data block closes after the entry that makes it this large. */
  readonly #blockBytes: number;

  /**
   * `capacity`: the table's expected size (its buffer grows by doubling, a copy each time);
   * `buffer`: where to build it instead of a new buffer of that size (a compaction worker's
   * BufferPool); `blockBytes`: where data blocks close (tests make them tiny).
   */
  constructor(capacity = 1 << 20, buffer?: Buffer, blockBytes = BLOCK_BYTES) {
    this.#out = new ByteSink(capacity, buffer);
    this.#blockBytes = blockBytes;
  }

  /** The buffer the table is built in (finish()'s bytes are a view of it), to reuse once written. */
  get buffer(): Buffer {
    return this.#out.buf;
  }

  get entries(): number {
    return this.#entries;
  }

  /** Bytes so far (data blocks written plus the open block). */
  get estimatedBytes(): number {
    return this.#out.length;
  }

  get lastKey(): string {
    return this.#lastKey;
  }

  /** Adds an entry given as already-encoded bytes `raw[start, end)` with its key, kind and seq. */
  addEncoded(
    raw: Uint8Array,
    start: number,
    end: number,
    key: string,
    kind: number,
    seq: number,
  ): void {
    if (this.#entries === 0) this.#smallest = key;
    if (this.#entries === 0 || key !== this.#lastKey) this.#hashes.push(keyHash(key));
    this.#blockStarts.push(this.#out.length - this.#blockStart);
    this.#blockPrefixes.push(keyPrefix(key));
    this.#out.bytes(raw, start, end);
    this.#noteEntry(key, kind, seq);
  }

  add(key: string, kind: number, seq: number, value: Uint8Array): void {
    if (this.#entries === 0) this.#smallest = key;
    if (this.#entries === 0 || key !== this.#lastKey) this.#hashes.push(keyHash(key));
    this.#blockStarts.push(this.#out.length - this.#blockStart);
    this.#blockPrefixes.push(keyPrefix(key));
    putEntry(this.#out, key, kind, seq, value);
    this.#noteEntry(key, kind, seq);
  }

  #noteEntry(key: string, kind: number, seq: number): void {
    this.#lastKey = key;
    this.#lastSeq = seq;
    this.#entries++;
    if (kind === KIND_DELETE) this.#tombstones++;
    if (seq < this.#minSeq) this.#minSeq = seq;
    if (seq > this.#maxSeq) this.#maxSeq = seq;
    if (this.#out.length - this.#blockStart >= this.#blockBytes) this.#closeBlock();
  }

  #closeBlock(): void {
    const out = this.#out;
    const offset = this.#blockStart;
    if (out.length === offset) return;
    appendEntryOffsets(out, this.#blockStarts, this.#blockPrefixes);
    const handle = { offset, size: out.length - offset };
    out.u32(blockChecksum(out.buf.subarray(offset, offset + handle.size)));
    this.#blockStart = out.length;
    const value = Buffer.allocUnsafe(12);
    value.writeUInt32LE(handle.offset >>> 0, 0);
    value.writeUInt32LE(Math.floor(handle.offset / 0x1_0000_0000), 4);
    value.writeUInt32LE(handle.size, 8);
    this.#indexStarts.push(this.#index.length);
    this.#indexPrefixes.push(keyPrefix(this.#lastKey));
    putEntry(this.#index, this.#lastKey, KIND_PUT, this.#lastSeq, value);
  }

  #writeBlock(bytes: Uint8Array): BlockHandle {
    const handle = { offset: this.#out.length, size: bytes.length };
    this.#out.bytes(bytes);
    this.#out.u32(blockChecksum(bytes));
    return handle;
  }

  /** Closes the table; returns its bytes and properties. Requires at least one entry. */
  finish(): { bytes: Buffer; props: TableProps } {
    this.#closeBlock();
    const props: TableProps = {
      smallest: this.#smallest ?? "",
      largest: this.#lastKey,
      entries: this.#entries,
      tombstones: this.#tombstones,
      minSeq: this.#minSeq,
      maxSeq: this.#maxSeq,
    };
    appendEntryOffsets(this.#index, this.#indexStarts, this.#indexPrefixes);
    const index = this.#writeBlock(this.#index.view());
    const filter = this.#writeBlock(buildBloom(this.#hashes));
    const propsHandle = this.#writeBlock(Buffer.from(propsToJson(props), "utf8"));
    for (const h of [index, filter, propsHandle]) {
      this.#out.u64(h.offset);
      this.#out.u32(h.size);
    }
    this.#out.u32(FORMAT_VERSION);
    this.#out.bytes(TABLE_MAGIC);
    return { bytes: this.#out.view(), props };
  }
}
