/**
 * The file `cairn backup` writes and `cairn restore` reads: every key of a range with its value,
 * in key order, each record checksummed, and an end record that counts them.
 *
 *     file    = "CAIRNBAK" | u32 format (1) | u32 n | header (n bytes of JSON) | u32 crc32c(header)
 *               | record* | [skipped] | end
 *     record  = u8 1 | u32 key length | u32 value length | key | value | u32 crc
 *     skipped = u8 3 | u32 n | n bytes of JSON, the shards left out (ascending ids) | u32 crc
 *     end     = u8 2 | u64 records | u64 key and value bytes | u32 crc
 *
 * Integers are big-endian. A record's crc is CRC32C of its bytes from the type byte on, seeded
 * with the previous record's crc (the header's for the first): a record damaged, dropped, moved
 * or repeated fails a check, and so does a file cut short (no end record) or with bytes after
 * its end. Keys are strictly ascending, and inside the header's range (a restore checks only that
 * range for keys already there: a record outside it would be written over live data). A reader
 * bounds every length before it allocates (keys 1..65,535 bytes, values up to 64 MiB: the most a
 * node accepts), so a hostile file costs a bounded amount of memory.
 *
 * The format is logical (keys and values, no versions): a backup restores into a cluster of any
 * size, shard count or build. The one mention of shards is the `skipped` record, only in a
 * partial backup (`cairn backup --skip-unavailable`): the shards of the source cluster none of
 * whose replicas answered, whose keys it lacks (a build before it refuses such a file, as a
 * record of unknown type).
 *
 * A restore reads a backup twice, to check it and then to write it; the second reading is given
 * the first's trace (openBackup's `same`: the header's bytes, and the chained checksum at the end
 * of each batch of entries given), and refuses a file changed in between (BackupChangedError) where
 * it differs: its header before any entry is given, each batch before it is given, the end record
 * at the end. The chained checksum covers every byte before it, so it costs nothing more to keep.
 */
import { once } from "node:events";
import { constants } from "node:fs";
import { type FileHandle, link, open, unlink } from "node:fs/promises";
import { dirname } from "node:path";
import { crc32c } from "../storage/common/crc32c.ts";

const MAGIC = Buffer.from("CAIRNBAK", "latin1");
export const BACKUP_FORMAT = 1;
const RECORD = 1;
const END = 2;
const SKIPPED = 3;
/** Largest key and value a node accepts (limits.max_key_bytes, limits.max_value_bytes maxima). */
const MAX_KEY_BYTES = 65_535;
const MAX_VALUE_BYTES = 64 * 1024 * 1024;
const MAX_HEADER_BYTES = 64 * 1024;
/** The skipped shards' record: shard ids below 65,536, as JSON (6 bytes an id at most). */
const MAX_SHARD_ID = 65_535;
const MAX_SKIPPED_BYTES = 6 * (MAX_SHARD_ID + 1) + 2;
/** Bytes gathered before a write, and read at a time. */
const CHUNK_BYTES = 1024 * 1024;
/**
 * Most key and value bytes of a batch of entries read (one entry may be larger): a batch of 256
 * values of up to 64 MiB each held gigabytes.
 */
const BATCH_BYTES = 4 * 1024 * 1024;

/** What a backup says about itself. */
export interface BackupHeader {
  /** When the backup started (ISO 8601). */
  readonly created: string;
  /** The range backed up: a prefix, or start/end (end exclusive), base64; {} for every key. */
  readonly range: { readonly prefix?: string; readonly start?: string; readonly end?: string };
  readonly consistency: "linearizable" | "serializable";
}

/** What a backup holds, counted by its end record. */
export interface BackupTotals {
  /** Keys, and their key and value bytes. */
  readonly records: number;
  readonly bytes: number;
  /** The shards left out of a partial backup (none of their replicas answered); [] when whole. */
  readonly skippedShards: readonly number[];
}

export interface BackupEntry {
  readonly key: Uint8Array;
  readonly value: Uint8Array;
}

/** A backup file that is not one, is damaged, or is cut short; the message says where. */
export class BackupDamagedError extends Error {
  constructor(path: string, offset: number, what: string) {
    super(`${path} is not a whole backup: ${what} (at byte ${offset})`);
    this.name = "BackupDamagedError";
  }
}

/**
 * A backup read a second time that is not the file the first reading checked (it was overwritten
 * in place since); the message says where it differs.
 */
export class BackupChangedError extends Error {
  constructor(path: string, offset: number, what: string) {
    super(`${path} changed since it was checked: ${what} (at byte ${offset})`);
    this.name = "BackupChangedError";
  }
}

/**
 * What a whole reading of a backup saw, for a second reading to be compared with (openBackup's
 * `same`): the header's bytes (from the first byte to the header's checksum), the batch size of
 * its entries, at the end of each batch and at the end record the records read so far and the
 * chained checksum there (pairs, in order), and its totals. A few bytes a batch (up to `batch`
 * entries or about 4 MiB).
 */
export interface BackupTrace {
  readonly head: Buffer;
  readonly batch: number;
  readonly marks: readonly number[];
  readonly totals: BackupTotals;
}

/** Where a backup's bytes go: a file (fileSink) or a stream (streamSink). */
export interface BackupSink {
  write(data: Buffer): Promise<void>;
  /** Every byte written: make the backup whole where it goes. */
  finish(): Promise<void>;
  /** The backup will not finish: leave nothing that looks like one. */
  abort(): Promise<void>;
}

/**
 * A sink to `<path>.partial` that `finish` makes `path`: synced, then linked (which never
 * replaces an existing file), then the partial name removed. `abort` removes the partial file.
 * Refuses a `path` that exists, a `<path>.partial` left by a backup that did not finish, and a
 * directory whose file system refuses hard links (checked here, by linking the empty partial
 * file to `<path>.partial.link` and removing that).
 */
export async function fileSink(path: string): Promise<BackupSink> {
  await refuseExisting(path);
  const partial = `${path}.partial`;
  const file = await open(
    partial,
    constants.O_WRONLY | constants.O_CREAT | constants.O_EXCL,
    0o600,
  );
  // A file system without hard links (FAT, some FUSE mounts) refused the link in finish(): after
  // the whole backup was written, which the failure then removed. A copy or a rename instead
  // would not do: a copy crashed midway leaves a cut-short file named `path`, and a rename
  // replaces a file made there since the check. So it is tried here, before the first key.
  const probe = `${partial}.link`;
  await link(partial, probe).catch(async (err: NodeJS.ErrnoException) => {
    await file.close();
    await unlink(partial);
    throw new Error(
      `the file system of ${dirname(path)} refuses hard links (${err.code ?? err.message}): a backup is written to FILE.partial and linked as FILE once whole, so that it never replaces a file. Back up to a directory on another file system, or write the backup to standard output ('cairn backup - > FILE')`,
    );
  });
  await unlink(probe);
  return {
    async write(data) {
      let at = 0;
      while (at < data.length) at += (await file.write(data, at)).bytesWritten;
    },
    async finish() {
      await file.sync();
      await file.close();
      await link(partial, path);
      await unlink(partial);
      await syncDirectory(dirname(path));
    },
    async abort() {
      await file.close().catch(() => undefined);
      await unlink(partial).catch(() => undefined);
    },
  };
}

/**
 * A sink to a stream (`cairn backup -`: standard output), waiting for it to drain. A backup cut
 * short there has no end record, which a restore refuses.
 */
export function streamSink(stream: NodeJS.WritableStream): BackupSink {
  return {
    async write(data) {
      if (!stream.write(data)) await once(stream, "drain");
    },
    finish: () => Promise.resolve(),
    abort: () => Promise.resolve(),
  };
}

/** Writes a backup, record by record, to a sink (see the module comment for the format). */
export class BackupWriter {
  readonly #sink: BackupSink;
  readonly #inRange: (key: Uint8Array) => boolean;
  #chunks: Buffer[] = [];
  #buffered = 0;
  #crc: number;
  #lastKey: Uint8Array | null = null;
  #records = 0;
  #bytes = 0;

  constructor(sink: BackupSink, header: BackupHeader) {
    this.#sink = sink;
    this.#inRange = rangeCheck(header.range);
    const json = Buffer.from(JSON.stringify(header), "utf8");
    const head = Buffer.alloc(16);
    MAGIC.copy(head, 0);
    head.writeUInt32BE(BACKUP_FORMAT, 8);
    head.writeUInt32BE(json.length, 12);
    this.#crc = crc32c(json);
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(this.#crc);
    this.#push(head, json, crc);
  }

  /** A backup to the file `path` (fileSink: it must not exist). */
  static async create(path: string, header: BackupHeader): Promise<BackupWriter> {
    return new BackupWriter(await fileSink(path), header);
  }

  /** Keys and value bytes written so far. */
  get records(): number {
    return this.#records;
  }
  get bytes(): number {
    return this.#bytes;
  }

  /** Adds a key (above every key added before) and its value. */
  async add(key: Uint8Array, value: Uint8Array): Promise<void> {
    if (this.#lastKey !== null && Buffer.compare(key, this.#lastKey) <= 0)
      throw new Error("backup keys must be added in strictly ascending order");
    if (key.length === 0 || key.length > MAX_KEY_BYTES || value.length > MAX_VALUE_BYTES)
      throw new Error(`a key of ${key.length} bytes or a value of ${value.length} bytes`);
    if (!this.#inRange(key)) throw new Error("a backup key outside the backup's range");
    this.#lastKey = key;
    const head = Buffer.alloc(9);
    head[0] = RECORD;
    head.writeUInt32BE(key.length, 1);
    head.writeUInt32BE(value.length, 5);
    let crc = crc32c(head, this.#crc);
    crc = crc32c(key, crc);
    crc = crc32c(value, crc);
    this.#crc = crc;
    const tail = Buffer.alloc(4);
    tail.writeUInt32BE(crc);
    this.#push(head, Buffer.from(key), Buffer.from(value), tail);
    this.#records++;
    this.#bytes += key.length + value.length;
    if (this.#buffered >= CHUNK_BYTES) await this.#flush();
  }

  /**
   * Ends the backup and makes it whole where it goes; returns what it holds. `skippedShards`:
   * the shards the scan left out (a partial backup), recorded before the end.
   */
  async finish(skippedShards: readonly number[] = []): Promise<BackupTotals> {
    if (skippedShards.length > 0) {
      const json = Buffer.from(JSON.stringify(skippedShards), "utf8");
      const head = Buffer.alloc(5);
      head[0] = SKIPPED;
      head.writeUInt32BE(json.length, 1);
      this.#crc = crc32c(json, crc32c(head, this.#crc));
      const tail = Buffer.alloc(4);
      tail.writeUInt32BE(this.#crc);
      this.#push(head, json, tail);
    }
    const end = Buffer.alloc(17);
    end[0] = END;
    end.writeBigUInt64BE(BigInt(this.#records), 1);
    end.writeBigUInt64BE(BigInt(this.#bytes), 9);
    const tail = Buffer.alloc(4);
    tail.writeUInt32BE(crc32c(end, this.#crc));
    this.#push(end, tail);
    await this.#flush();
    await this.#sink.finish();
    return { records: this.#records, bytes: this.#bytes, skippedShards };
  }

  /** Stops a backup that will not finish (a file sink's partial file is removed). */
  abort(): Promise<void> {
    return this.#sink.abort();
  }

  #push(...parts: Buffer[]): void {
    for (const p of parts) {
      this.#chunks.push(p);
      this.#buffered += p.length;
    }
  }

  async #flush(): Promise<void> {
    const data = Buffer.concat(this.#chunks, this.#buffered);
    this.#chunks = [];
    this.#buffered = 0;
    await this.#sink.write(data);
  }
}

async function refuseExisting(path: string): Promise<void> {
  for (const p of [path, `${path}.partial`, `${path}.partial.link`]) {
    const exists = await open(p, constants.O_RDONLY).then(
      async (f) => {
        await f.close();
        return true;
      },
      (e: NodeJS.ErrnoException) => {
        if (e.code === "ENOENT") return false;
        throw e;
      },
    );
    if (exists)
      throw new Error(
        p === path
          ? `${path} exists; a backup never replaces a file`
          : `${p} exists, left by a backup that did not finish; remove it first`,
      );
  }
}

async function syncDirectory(dir: string): Promise<void> {
  const d = await open(dir, constants.O_RDONLY);
  try {
    await d.sync();
  } finally {
    await d.close();
  }
}

/** An open backup: its header, then its entries, read and checked a chunk at a time. */
export interface BackupReader {
  readonly header: BackupHeader;
  /**
   * The entries in key order, in batches of up to `batch` entries and about 4 MiB (a batch ends
   * with the entry that reaches it); throws BackupDamagedError at the first check that fails,
   * once the entries before it were given.
   */
  entries(batch?: number): AsyncGenerator<BackupEntry[]>;
  /** What it holds, known once `entries` reached the end record. */
  readonly totals: BackupTotals | null;
  /** What this reading saw, known once `entries` reached the end record (openBackup's `same`). */
  readonly trace: BackupTrace | null;
  close(): Promise<void>;
}

/**
 * Opens a backup and checks its header (BackupDamagedError if it is not a backup); errors name
 * it `name` (default: its path). `source` is a path, or a file already open, which is read from
 * its first byte whatever its position (a restore reads one file twice: to check it, then to
 * write it) and which the reader's close() leaves open. `same`: the trace of a reading of it
 * before (BackupReader.trace); this one is then refused, BackupChangedError, where it is not that
 * file any more: its header here, and every batch of entries before it is given (what fails
 * another check is refused so too: that reading passed it). Its entries are batched as that
 * reading's were.
 */
export async function openBackup(
  source: string | FileHandle,
  name = typeof source === "string" ? source : "the backup",
  same: BackupTrace | null = null,
): Promise<BackupReader> {
  const owned = typeof source === "string";
  const file = owned ? await open(source, constants.O_RDONLY) : source;
  try {
    const src = new ChunkSource(name, file, owned, same !== null);
    const head = Buffer.from(await src.take(16));
    if (!head.subarray(0, 8).equals(MAGIC)) throw src.damaged(0, "not a Cairn backup");
    const format = head.readUInt32BE(8);
    if (format !== BACKUP_FORMAT)
      throw src.damaged(8, `format ${format}; this build reads format ${BACKUP_FORMAT}`);
    const n = head.readUInt32BE(12);
    if (n > MAX_HEADER_BYTES) throw src.damaged(12, `a header of ${n} bytes`);
    const headerBytes = Buffer.from(await src.take(n));
    const seed = crc32c(headerBytes);
    if ((await src.take(4)).readUInt32BE(0) !== seed)
      throw src.damaged(16 + n, "the header's checksum does not match");
    const header = parseHeader(headerBytes, () => src.damaged(16, "the header is not valid"));
    const crc = Buffer.alloc(4);
    crc.writeUInt32BE(seed);
    const whole = Buffer.concat([head, headerBytes, crc]);
    if (same !== null && !whole.equals(same.head))
      throw src.changed(0, "its header is not the one checked (another backup?)");
    return new Reader(src, header, seed, whole, same);
  } catch (err) {
    if (owned) await file.close();
    throw err;
  }
}

class Reader implements BackupReader {
  readonly header: BackupHeader;
  totals: BackupTotals | null = null;
  trace: BackupTrace | null = null;
  readonly #src: ChunkSource;
  #crc: number;
  /** The header's bytes, for the trace. */
  readonly #head: Buffer;
  /** The trace of the reading this one must match, if any. */
  readonly #same: BackupTrace | null;

  constructor(
    src: ChunkSource,
    header: BackupHeader,
    seed: number,
    head: Buffer,
    same: BackupTrace | null,
  ) {
    this.#src = src;
    this.header = header;
    this.#crc = seed;
    this.#head = head;
    this.#same = same;
  }

  async *entries(batch = 256): AsyncGenerator<BackupEntry[]> {
    const src = this.#src;
    const same = this.#same;
    const size = same?.batch ?? batch;
    let records = 0;
    let bytes = 0;
    let last: Buffer | null = null;
    let out: BackupEntry[] = [];
    let outBytes = 0;
    let skippedShards: readonly number[] | null = null;
    const inRange = rangeCheck(this.header.range);
    // This reading's marks (see BackupTrace), or where it is in `same`'s; the batch being read
    // starts at byte `from`, after `before` records.
    const marks: number[] = [];
    let next = 0;
    let from = src.offset;
    let before = 0;
    // Before a batch is given (and at the end record): the records and chained checksum so far
    // are the checked reading's there, or this one is refused, nothing of the batch given.
    const mark = (atEnd = false): void => {
      if (same === null) marks.push(records, this.#crc);
      else if (same.marks[next] !== records || same.marks[next + 1] !== this.#crc)
        throw src.changed(
          from,
          `what follows record ${before}, up to ${atEnd ? "the end" : `record ${records}`}, is not what was checked`,
        );
      next += 2;
      from = src.offset;
      before = records;
    };
    for (;;) {
      const at = src.offset;
      const type = (await src.take(1))[0];
      if (skippedShards !== null && type !== END)
        throw src.damaged(at, "the skipped shards' record is not the last before the end");
      if (type === SKIPPED) {
        const head = Buffer.from([SKIPPED, ...(await src.take(4))]);
        const n = head.readUInt32BE(1);
        if (n > MAX_SKIPPED_BYTES) throw src.damaged(at, `a skipped shards' record of ${n} bytes`);
        const json = Buffer.from(await src.take(n));
        const crc = crc32c(json, crc32c(head, this.#crc));
        if ((await src.take(4)).readUInt32BE(0) !== crc)
          throw src.damaged(at, "the skipped shards' record's checksum does not match");
        skippedShards = parseSkipped(json, () =>
          src.damaged(at, "the skipped shards' record is not valid"),
        );
        this.#crc = crc;
        continue;
      }
      if (type === END) {
        const rest = Buffer.from(await src.take(20));
        const end = Buffer.concat([Buffer.from([END]), rest.subarray(0, 16)]);
        const endCrc = crc32c(end, this.#crc);
        if (rest.readUInt32BE(16) !== endCrc)
          throw src.damaged(at, "the end record's checksum does not match");
        const wantRecords = rest.readBigUInt64BE(0);
        const wantBytes = rest.readBigUInt64BE(8);
        if (wantRecords !== BigInt(records) || wantBytes !== BigInt(bytes))
          throw src.damaged(at, `the end counts ${wantRecords} records; the file has ${records}`);
        if (!(await src.atEnd())) throw src.damaged(src.offset, "bytes after the end record");
        this.#crc = endCrc;
        const totals = { records, bytes, skippedShards: skippedShards ?? [] };
        mark(true);
        const was = same?.totals;
        if (
          was !== undefined &&
          (next !== same?.marks.length ||
            was.records !== records ||
            was.bytes !== bytes ||
            was.skippedShards.join() !== totals.skippedShards.join())
        )
          throw src.changed(at, "its end record is not the one checked");
        if (out.length > 0) yield out;
        this.totals = totals;
        if (same === null) this.trace = { head: this.#head, batch: size, marks, totals };
        return;
      }
      if (type !== RECORD) throw src.damaged(at, `a record of unknown type ${type}`);
      const lengths = Buffer.from(await src.take(8));
      const keyLength = lengths.readUInt32BE(0);
      const valueLength = lengths.readUInt32BE(4);
      if (keyLength === 0 || keyLength > MAX_KEY_BYTES || valueLength > MAX_VALUE_BYTES)
        throw src.damaged(at, `a record of a ${keyLength}-byte key, a ${valueLength}-byte value`);
      const key = Buffer.from(await src.take(keyLength));
      const value = Buffer.from(await src.take(valueLength));
      let crc = crc32c(Buffer.from([RECORD]), this.#crc);
      crc = crc32c(lengths, crc);
      crc = crc32c(key, crc);
      crc = crc32c(value, crc);
      if ((await src.take(4)).readUInt32BE(0) !== crc)
        throw src.damaged(at, `record ${records + 1}'s checksum does not match`);
      if (last !== null && Buffer.compare(key, last) <= 0)
        throw src.damaged(at, `record ${records + 1}'s key is not above the one before`);
      if (!inRange(key))
        throw src.damaged(at, `record ${records + 1}'s key is outside the backup's range`);
      this.#crc = crc;
      last = key;
      records++;
      bytes += keyLength + valueLength;
      out.push({ key, value });
      outBytes += keyLength + valueLength;
      if (out.length >= size || outBytes >= BATCH_BYTES) {
        mark();
        yield out;
        out = [];
        outBytes = 0;
      }
    }
  }

  close(): Promise<void> {
    return this.#src.close();
  }
}

function parseHeader(bytes: Buffer, damaged: () => Error): BackupHeader {
  let h: unknown;
  try {
    h = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw damaged();
  }
  if (typeof h !== "object" || h === null) throw damaged();
  const { created, range, consistency } = h as Record<string, unknown>;
  if (typeof created !== "string" || typeof range !== "object" || range === null) throw damaged();
  if (consistency !== "linearizable" && consistency !== "serializable") throw damaged();
  const r = range as Record<string, unknown>;
  for (const k of ["prefix", "start", "end"])
    if (r[k] !== undefined && typeof r[k] !== "string") throw damaged();
  return { created, range: r as BackupHeader["range"], consistency };
}

/**
 * Whether a key lies in a header's range: a prefix, else [start, end) (either may be absent),
 * decoded as the restore's emptiness check decodes it (backup-commands.ts, scanRangeOf).
 */
function rangeCheck(range: BackupHeader["range"]): (key: Uint8Array) => boolean {
  const dec = (s: string): Buffer => Buffer.from(s, "base64");
  if (range.prefix !== undefined) {
    const prefix = dec(range.prefix);
    return (key) =>
      key.length >= prefix.length && Buffer.compare(key.subarray(0, prefix.length), prefix) === 0;
  }
  const start = range.start === undefined ? null : dec(range.start);
  // An empty end is none: the scan sends it as absent.
  const end = range.end === undefined ? null : dec(range.end);
  return (key) =>
    (start === null || Buffer.compare(key, start) >= 0) &&
    (end === null || end.length === 0 || Buffer.compare(key, end) < 0);
}

/** The skipped shards' record's ids: ascending shard numbers (a shard count is below 2^16). */
function parseSkipped(bytes: Buffer, damaged: () => Error): readonly number[] {
  let ids: unknown;
  try {
    ids = JSON.parse(bytes.toString("utf8"));
  } catch {
    throw damaged();
  }
  if (!Array.isArray(ids) || ids.length === 0) throw damaged();
  let prev = -1;
  for (const id of ids as unknown[]) {
    if (!Number.isSafeInteger(id) || (id as number) <= prev || (id as number) > MAX_SHARD_ID)
      throw damaged();
    prev = id as number;
  }
  return ids as number[];
}

/** A file read a chunk at a time; `take(n)` returns its next n bytes (a view, valid until the next take). */
class ChunkSource {
  readonly #path: string;
  readonly #file: FileHandle;
  /** The file was opened for this source, which closes it. */
  readonly #owned: boolean;
  /** A second reading of a file checked before: what fails a check is a changed file. */
  readonly #again: boolean;
  /**
   * Where the next read starts: null for a file opened here, read on from its position (a pipe
   * has no other); a file given is read from its first byte, whatever its position.
   */
  #position: number | null;
  #buf = Buffer.alloc(0);
  #at = 0;
  #base = 0;
  #eof = false;

  constructor(path: string, file: FileHandle, owned: boolean, again = false) {
    this.#path = path;
    this.#file = file;
    this.#owned = owned;
    this.#again = again;
    this.#position = owned ? null : 0;
  }

  /** Bytes of the file taken so far. */
  get offset(): number {
    return this.#base + this.#at;
  }

  damaged(offset: number, what: string): BackupDamagedError | BackupChangedError {
    return this.#again
      ? this.changed(offset, what)
      : new BackupDamagedError(this.#path, offset, what);
  }

  changed(offset: number, what: string): BackupChangedError {
    return new BackupChangedError(this.#path, offset, what);
  }

  async take(n: number): Promise<Buffer> {
    while (this.#buf.length - this.#at < n) {
      if (this.#eof) throw this.damaged(this.offset, "the file ends inside a record (cut short)");
      await this.#fill(n);
    }
    const out = this.#buf.subarray(this.#at, this.#at + n);
    this.#at += n;
    return out;
  }

  async atEnd(): Promise<boolean> {
    if (this.#buf.length > this.#at) return false;
    if (!this.#eof) await this.#fill(1);
    return this.#buf.length === this.#at;
  }

  async #fill(need: number): Promise<void> {
    const left = this.#buf.subarray(this.#at);
    const next = Buffer.allocUnsafe(Math.max(CHUNK_BYTES, need) + left.length);
    left.copy(next, 0);
    const { bytesRead } = await this.#file.read(
      next,
      left.length,
      next.length - left.length,
      this.#position,
    );
    if (this.#position !== null) this.#position += bytesRead;
    if (bytesRead === 0) this.#eof = true;
    this.#base += this.#at;
    this.#buf = next.subarray(0, left.length + bytesRead);
    this.#at = 0;
  }

  close(): Promise<void> {
    return this.#owned ? this.#file.close() : Promise.resolve();
  }
}
