/**
 * The work a worker thread does: build SSTables from a memtable's arena (flush) or from sorted
 * entries (snapshot import), and merge tables (compaction). Synchronous file I/O is fine here: it
 * never runs on the event loop. Every table is written, fsynced, and its directory fsynced before
 * the job reports it, so a manifest edit naming it can never point at a file a crash could lose.
 * A job's large buffers (the tables it builds, a compaction's inputs read whole) come from the
 * worker's BufferPool and go back to it when the job is done with them.
 */
import {
  closeSync,
  fstatSync,
  fsyncSync,
  openSync,
  readFileSync,
  readSync,
  writeSync,
} from "node:fs";
import { join } from "node:path";
import { fsyncDirSync } from "../common/fs-util.ts";
import { BufferPool } from "./buffer-pool.ts";
import { EntryCursor, encodedEntryEnd, TableBuilder, type TableProps } from "./format.ts";
import { VersionFilter } from "./gc.ts";
import { MergingIterator, TableIterator, type BlockSource } from "./iterators.ts";
import { keyOrder } from "./key-order.ts";
import { loadBlock, loadTableMeta, parseOrThrow } from "./table.ts";

export interface BuiltTable {
  readonly number: number;
  readonly size: number;
  readonly props: TableProps;
}

export interface BuildJob {
  readonly type: "build";
  readonly dir: string;
  /** File numbers to use, in order; one table per number at most. */
  readonly numbers: readonly number[];
  /** Entries in the shared entry encoding, in internal order. */
  readonly data: Uint8Array;
  /** Start a new table once one reaches this size (only between two different keys). */
  readonly targetFileBytes: number;
  /** Data blocks close at this size (default BLOCK_BYTES). */
  readonly blockBytes?: number;
}

/** A memtable's flush: its arena, sorted and filtered in the worker. */
export interface FlushJob {
  readonly type: "flush";
  readonly dir: string;
  /** One file number: a flush writes one table. */
  readonly numbers: readonly number[];
  /** The memtable's arena: entries in the shared entry encoding, in the order they were written. */
  readonly arena: readonly Uint8Array[];
  /** The oldest sequence a reader can read at: which replaced versions must stay. */
  readonly smallestSnapshot: number;
  readonly blockBytes?: number;
}

export interface CompactJob {
  readonly type: "compact";
  readonly dir: string;
  readonly numbers: readonly number[];
  /** Input tables, any order. */
  readonly inputs: readonly string[];
  readonly targetFileBytes: number;
  readonly smallestSnapshot: number;
  /** No data for these keys exists below the output level: tombstones may go. */
  readonly bottom: boolean;
  readonly blockBytes?: number;
}

export type Job = BuildJob | FlushJob | CompactJob;

export function tablePath(dir: string, number: number): string {
  return `${join(dir, String(number).padStart(6, "0"))}.sst`;
}

function writeTable(dir: string, number: number, builder: TableBuilder): BuiltTable {
  const { bytes, props } = builder.finish();
  const path = tablePath(dir, number);
  const fd = openSync(path, "wx");
  try {
    let written = 0;
    while (written < bytes.length) written += writeSync(fd, bytes, written);
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
  return { number, size: bytes.length, props };
}

/** What an OutputSet needs of its job. */
interface OutputJob {
  readonly dir: string;
  readonly numbers: readonly number[];
  readonly targetFileBytes: number;
  readonly blockBytes?: number;
}

/**
 * Splits output tables at key boundaries once they reach the target size. Each table is built in
 * a buffer from the pool, given back once the table is written.
 */
class OutputSet {
  readonly #job: OutputJob;
  readonly #pool: BufferPool;
  readonly tables: BuiltTable[] = [];
  /** The table being built; none until an entry comes after the last one closed. */
  #builder: TableBuilder | null = null;
  /** Initial buffer size of each table: the expected table size, so it rarely grows. */
  readonly #capacity: number;

  /** `expectedBytes`: about how much the job writes in all (its input's size). */
  constructor(job: OutputJob, expectedBytes: number, pool: BufferPool) {
    this.#job = job;
    this.#pool = pool;
    // Entries plus offset arrays, key prefixes, index and filter: ~15% over the entries.
    this.#capacity = Math.ceil(Math.min(job.targetFileBytes, expectedBytes) * 1.15) + 65536;
  }

  /** Call before adding an entry for `key`: closes the current table if it is full. */
  maybeSplit(key: string): void {
    const b = this.#builder;
    if (
      b !== null &&
      b.entries > 0 &&
      key !== b.lastKey &&
      b.estimatedBytes >= this.#job.targetFileBytes
    ) {
      this.#close(b);
    }
  }

  get builder(): TableBuilder {
    this.#builder ??= new TableBuilder(
      this.#capacity,
      this.#pool.take(this.#capacity),
      this.#job.blockBytes,
    );
    return this.#builder;
  }

  #close(builder: TableBuilder): void {
    const number = this.#job.numbers[this.tables.length];
    if (number === undefined) throw new Error("compaction job ran out of reserved file numbers");
    this.tables.push(writeTable(this.#job.dir, number, builder));
    // Written: nothing refers to its bytes any more (a BuiltTable's props are copies).
    this.#pool.give(builder.buffer);
    this.#builder = null;
  }

  finish(): BuiltTable[] {
    const b = this.#builder;
    if (b !== null && b.entries > 0) this.#close(b);
    else if (b !== null) this.#pool.give(b.buffer);
    if (this.tables.length > 0) fsyncDirSync(this.#job.dir);
    return this.tables;
  }
}

function asBuffer(bytes: Uint8Array): Buffer {
  return Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
}

/** Keeps no buffer: for jobs run without a worker's pool (tests). */
const NO_POOL = new BufferPool(0);

export function runBuild(job: BuildJob, pool = NO_POOL): BuiltTable[] {
  const out = new OutputSet(job, job.data.length, pool);
  const data = asBuffer(job.data);
  const entry = new EntryCursor();
  for (let at = 0; at < data.length; at = entry.end) {
    entry.read(data, at);
    out.maybeSplit(entry.key);
    out.builder.addEncoded(data, at, entry.end, entry.key, entry.kind, entry.seq);
  }
  return out.finish();
}

/**
 * Builds the table of a memtable from its arena: the entries in internal order (key ascending,
 * sequence descending; of two writes of one key in one batch, the later), without the versions
 * no reader can see (the memtable dropped most of them already; the arena keeps their bytes).
 */
export function runFlush(job: FlushJob, pool = NO_POOL): BuiltTable[] {
  const chunks = job.arena.map(asBuffer);
  const { kinds, seqs, chunkOf, starts, ends } = flushScratch(countEntries(chunks));
  const keys: string[] = [];
  const entry = new EntryCursor();
  let bytes = 0;
  let n = 0;
  for (let c = 0; c < chunks.length; c++) {
    const data = chunks[c] as Buffer;
    bytes += data.length;
    for (let at = 0; at < data.length; at = entry.end) {
      entry.read(data, at);
      keys.push(entry.key);
      kinds[n] = entry.kind;
      seqs[n] = entry.seq;
      chunkOf[n] = c;
      starts[n] = at;
      ends[n] = entry.end;
      n++;
    }
  }
  // Equal keys: newest sequence first, and of one sequence the later write first.
  const order = keyOrder(keys, (a, b) => (seqs[b] as number) - (seqs[a] as number) || b - a);
  const out = new OutputSet({ ...job, targetFileBytes: Infinity }, bytes, pool);
  const filter = new VersionFilter(job.smallestSnapshot, false);
  let lastKey: string | undefined;
  let lastSeq = -1;
  for (const i of order) {
    const key = keys[i] as string;
    const seq = seqs[i] as number;
    const kind = kinds[i] as number;
    // An earlier write of the same batch: the later one, just added, replaced it.
    if (key === lastKey && seq === lastSeq) continue;
    lastKey = key;
    lastSeq = seq;
    if (!filter.keep(key, seq, kind)) continue;
    const data = chunks[chunkOf[i] as number] as Buffer;
    out.builder.addEncoded(data, starts[i] as number, ends[i] as number, key, kind, seq);
  }
  return out.finish();
}

/** runFlush's per-entry arrays, kept from one flush to the next (see flushScratch). */
interface FlushScratch {
  readonly kinds: Uint8Array;
  readonly seqs: Float64Array;
  readonly chunkOf: Uint32Array;
  readonly starts: Uint32Array;
  readonly ends: Uint32Array;
}

let scratch: FlushScratch | undefined;

/**
 * Arrays for `n` entries' fields. A worker runs one job at a time and runFlush is synchronous,
 * so one set serves every flush of the thread until an idle worker lets it go
 * (releaseFlushScratch); it grows by a quarter beyond the largest flush seen. Typed arrays,
 * unlike growing JS arrays, leave no garbage behind and give the collector nothing to scan or
 * copy while the flush runs; new ones each time would be new memory, which the first touch
 * makes slow (BENCHMARKS.md, "Compactions reuse their buffers").
 */
function flushScratch(n: number): FlushScratch {
  if (scratch === undefined || scratch.starts.length < n) {
    const capacity = n + (n >>> 2);
    scratch = {
      kinds: new Uint8Array(capacity),
      seqs: new Float64Array(capacity),
      chunkOf: new Uint32Array(capacity),
      starts: new Uint32Array(capacity),
      ends: new Uint32Array(capacity),
    };
  }
  return scratch;
}

/** Lets a flush's arrays go (a worker idle for a while); the next flush makes new ones. */
export function releaseFlushScratch(): void {
  scratch = undefined;
}

/** Entries in an arena's chunks (their framing only: no key is read). */
function countEntries(chunks: readonly Buffer[]): number {
  let n = 0;
  for (const data of chunks) {
    for (let at = 0; at < data.length; n++) at = encodedEntryEnd(data, at);
  }
  return n;
}

/**
 * A table file read whole, as a block source (a compaction's input; tests read tables so):
 * `file` is its bytes, read here unless given.
 */
export function bufferSource(
  path: string,
  file: Buffer = readFileSync(path),
): BlockSource & { fileSize: number } {
  const read = (offset: number, length: number): Buffer => file.subarray(offset, offset + length);
  const meta = loadTableMeta(path, file.length, read);
  return {
    fileSize: file.length,
    index: meta.index,
    readBlock: (handle) => parseOrThrow(path, handle.offset, loadBlock(path, handle, read)),
  };
}

/** The file at `path` read whole into `buffer`, a buffer from `pool`: `file` is a view of it. */
function readWhole(path: string, pool: BufferPool): { file: Buffer; buffer: Buffer } {
  const fd = openSync(path, "r");
  try {
    const size = fstatSync(fd).size;
    const buffer = pool.take(size);
    let read = 0;
    while (read < size) {
      const n = readSync(fd, buffer, read, size - read, read);
      if (n === 0) throw new Error(`${path}: the file ended at ${read} of ${size} bytes`);
      read += n;
    }
    return { file: buffer.subarray(0, size), buffer };
  } finally {
    closeSync(fd);
  }
}

export function runCompact(job: CompactJob, pool = NO_POOL): BuiltTable[] {
  const reads = job.inputs.map((path) => ({ path, ...readWhole(path, pool) }));
  const sources = reads.map((r) => bufferSource(r.path, r.file));
  const merged = new MergingIterator(sources.map((s) => new TableIterator(s)));
  // Every child is a TableIterator: entries are copied in their encoded form, not re-encoded.
  const filter = new VersionFilter(job.smallestSnapshot, job.bottom);
  const out = new OutputSet(
    job,
    sources.reduce((bytes, s) => bytes + s.fileSize, 0),
    pool,
  );
  for (merged.seek(undefined, 0); merged.valid; merged.next()) {
    const { key, seq, kind } = merged;
    if (!filter.keep(key, seq, kind)) continue;
    out.maybeSplit(key);
    const { block, start, end } = (merged.current() as TableIterator).encoded();
    out.builder.addEncoded(block, start, end, key, kind, seq);
  }
  const tables = out.finish();
  // Every entry kept was copied into the outputs: nothing refers to the inputs' bytes any more.
  for (const r of reads) pool.give(r.buffer);
  return tables;
}

export function runJob(job: Job, pool = NO_POOL): BuiltTable[] {
  switch (job.type) {
    case "build":
      return runBuild(job, pool);
    case "flush":
      return runFlush(job, pool);
    case "compact":
      return runCompact(job, pool);
  }
}
