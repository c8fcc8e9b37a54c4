/**
 * The in-memory twin of the LSM engine behind `ShardEngine`, for the deterministic simulation of
 * the driver. It keeps the LSM's durability contract exactly, without its cost:
 *
 * - writes apply to memory at once (versions per key, so a pinned snapshot reads the past);
 * - `flush()` writes the whole state as one image file `image-<seq>` through the given
 *   FileSystem (write, fsync, directory fsync, then the older images are removed), and only then
 *   raises `flushedSeq`: after a crash the engine reopens at the newest complete image, and the
 *   driver must replay its WAL above it, as with the LSM's manifest;
 * - it flushes by itself every `flushEvery` writes (the LSM's memtable rotation), in the
 *   background, so what is durable trails what is applied by a varying amount.
 *
 * Caveats: images are the whole state (fine for the simulation's tens of keys); no levels, no
 * back-pressure (`backpressure()` is always "none").
 */
import { join } from "node:path";
import { CairnError } from "../common/errors.ts";
import type { FileSystem } from "../storage/index.ts";
import { crc32c, decodeSnapshotStream, ensureDir } from "../storage/index.ts";
import type { Backpressure, LsmSnapshot, ScanOptions, WriteOp } from "../storage/index.ts";
import type { ShardEngine } from "./engine.ts";

const IMAGE_PREFIX = "image-";
const MAGIC = 0x43_4d_45_31; // "CME1"

interface Versioned {
  readonly seq: number;
  /** null: deleted at `seq`. */
  readonly value: Uint8Array | null;
}

export interface MemoryEngineOptions {
  /** Flush in the background after this many writes (default 64). */
  readonly flushEvery?: number;
}

export class MemoryEngine implements ShardEngine {
  readonly #fs: FileSystem;
  readonly #dir: string;
  readonly #flushEvery: number;
  /** Key (latin1 string of the bytes, so it sorts as the bytes do) → versions, oldest first. */
  readonly #keys = new Map<string, Versioned[]>();
  readonly #pinned = new Map<number, number>();
  #lastSeq: number;
  #flushedSeq: number;
  #imageSeq: number;
  #sinceFlush = 0;
  #flushing: Promise<void> = Promise.resolve();
  #failure: unknown = undefined;
  #closed = false;

  private constructor(
    fs: FileSystem,
    dir: string,
    options: MemoryEngineOptions,
    flushedSeq: number,
  ) {
    this.#fs = fs;
    this.#dir = dir;
    this.#flushEvery = options.flushEvery ?? 64;
    this.#lastSeq = flushedSeq;
    this.#flushedSeq = flushedSeq;
    this.#imageSeq = flushedSeq;
  }

  /** Opens the engine in `dir`, at its newest complete image. */
  static async open(
    fs: FileSystem,
    dir: string,
    options: MemoryEngineOptions = {},
  ): Promise<MemoryEngine> {
    await ensureDir(fs, dir);
    const images = (await fs.readdir(dir))
      .filter((n) => n.startsWith(IMAGE_PREFIX))
      .map((n) => Number(n.slice(IMAGE_PREFIX.length)))
      .sort((a, b) => b - a);
    for (const seq of images) {
      const state = decodeImage(await fs.readFile(join(dir, `${IMAGE_PREFIX}${seq}`)));
      // An image whose write a crash cut short is skipped: an older one is complete.
      if (state === null || state.seq !== seq) continue;
      const engine = new MemoryEngine(fs, dir, options, seq);
      for (const [key, value] of state.entries) engine.#keys.set(key, [{ seq, value }]);
      return engine;
    }
    return new MemoryEngine(fs, dir, options, 0);
  }

  get flushedSeq(): number {
    return this.#flushedSeq;
  }

  get failure(): unknown {
    return this.#failure;
  }

  write(seq: number, ops: readonly WriteOp[]): Promise<void> {
    try {
      this.writeNow(seq, ops);
      return Promise.resolve();
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  /** Never waits: there is no back-pressure here. */
  writeNow(seq: number, ops: readonly WriteOp[]): boolean {
    if (this.#failure !== undefined) throw this.#failedError();
    if (this.#closed) throw closedError();
    if (!Number.isSafeInteger(seq) || seq <= this.#lastSeq) {
      throw new CairnError(
        "CAIRN_ERR_LSM_SEQUENCE",
        `engine write: sequence ${seq} is not above the last one (${this.#lastSeq})`,
      );
    }
    this.#lastSeq = seq;
    for (const op of ops) {
      const key = Buffer.from(op.key).toString("latin1");
      const value = op.type === "put" ? op.value : null;
      const versions = this.#keys.get(key);
      if (versions === undefined) this.#keys.set(key, [{ seq, value }]);
      else versions.push({ seq, value });
    }
    if (++this.#sinceFlush >= this.#flushEvery) void this.flush().catch(() => undefined);
    return true;
  }

  get(key: Uint8Array, snapshot?: LsmSnapshot): Uint8Array | undefined {
    this.#assertReadable();
    const versions = this.#keys.get(Buffer.from(key).toString("latin1"));
    return versions === undefined ? undefined : (visible(versions, snapshot?.seq) ?? undefined);
  }

  *scan(options: ScanOptions): Generator<[Uint8Array, Uint8Array]> {
    this.#assertReadable();
    const start =
      options.start === undefined ? null : Buffer.from(options.start).toString("latin1");
    const end = options.end === undefined ? null : Buffer.from(options.end).toString("latin1");
    const prefix =
      options.prefix === undefined ? null : Buffer.from(options.prefix).toString("latin1");
    let left = options.limit ?? Infinity;
    for (const key of [...this.#keys.keys()].sort()) {
      if (left <= 0) return;
      if (start !== null && key < start) continue;
      if (end !== null && key >= end) return;
      if (prefix !== null && !key.startsWith(prefix)) continue;
      const value = visible(this.#keys.get(key) as Versioned[], options.snapshot?.seq);
      if (value === null) continue;
      left--;
      yield [new Uint8Array(Buffer.from(key, "latin1")), value];
    }
  }

  snapshot(): LsmSnapshot {
    const seq = this.#lastSeq;
    this.#pinned.set(seq, (this.#pinned.get(seq) ?? 0) + 1);
    let released = false;
    return {
      seq,
      release: () => {
        if (released) return;
        released = true;
        const n = (this.#pinned.get(seq) ?? 1) - 1;
        if (n === 0) this.#pinned.delete(seq);
        else this.#pinned.set(seq, n);
      },
    };
  }

  /** Writes an image of everything written so far; flushes run one at a time, in order. */
  flush(): Promise<void> {
    if (this.#failure !== undefined) return Promise.reject(this.#failedError());
    const next = this.#flushing.then(() => this.#writeImage());
    this.#flushing = next.catch(() => undefined);
    return next;
  }

  backpressure(): Backpressure {
    return "none";
  }

  /** None: this engine keeps no memtable apart from its image. */
  get memtableBytes(): number {
    return 0;
  }

  /** None: this engine keeps no tables. */
  get tablesPerLevel(): readonly number[] {
    return [];
  }

  stats(): { readonly bytesPerLevel: readonly number[] } {
    let bytes = 0;
    for (const [key, versions] of this.#keys) {
      const last = versions.at(-1)?.value ?? null;
      if (last !== null) bytes += key.length + last.length;
    }
    return { bytesPerLevel: [bytes] };
  }

  /** Replaces everything with the snapshot stream's content, durably (an image at its seq). */
  async importSnapshot(chunks: AsyncIterable<Uint8Array>): Promise<void> {
    if (this.#failure !== undefined) throw this.#failedError();
    const entries: [string, Uint8Array][] = [];
    let seq = -1;
    for await (const item of decodeSnapshotStream(chunks)) {
      if (item.kind === "header") seq = item.seq;
      // Copied: an entry is a view valid until the next item is asked for.
      else entries.push([Buffer.from(item.key).toString("latin1"), Buffer.from(item.value)]);
    }
    // A follower takes a snapshot only beyond what it applied: seq is above every image.
    await this.#flushing;
    this.#keys.clear();
    for (const [key, value] of entries) this.#keys.set(key, [{ seq, value }]);
    this.#lastSeq = seq;
    await this.flush();
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    await this.#flushing;
  }

  async #writeImage(): Promise<void> {
    const seq = this.#lastSeq;
    if (seq === this.#imageSeq) return;
    this.#sinceFlush = 0;
    const entries: [string, Uint8Array][] = [];
    for (const [key, versions] of this.#keys) {
      const value = visible(versions, seq);
      if (value !== null) entries.push([key, value]);
    }
    const image = encodeImage(seq, entries);
    const name = join(this.#dir, `${IMAGE_PREFIX}${seq}`);
    const old = this.#imageSeq;
    try {
      const file = await this.#fs.open(name, { create: true, truncate: true });
      try {
        let at = 0;
        while (at < image.length) at += await file.write(image, at, image.length - at, at);
        await file.sync();
      } finally {
        await file.close();
      }
      await this.#fs.fsyncDir(this.#dir);
      this.#imageSeq = seq;
      this.#flushedSeq = Math.max(this.#flushedSeq, seq);
      this.#prune();
      if (old > 0) {
        await this.#fs.unlink(join(this.#dir, `${IMAGE_PREFIX}${old}`));
        await this.#fs.fsyncDir(this.#dir);
      }
    } catch (err) {
      this.#failure ??= err;
      throw this.#failedError();
    }
  }

  /** Drops versions no pinned snapshot can see any more. */
  #prune(): void {
    const oldest = Math.min(this.#lastSeq, ...this.#pinned.keys());
    for (const [key, versions] of this.#keys) {
      let keep = versions.length - 1;
      while (keep > 0 && (versions[keep] as Versioned).seq > oldest) keep--;
      if (keep > 0) versions.splice(0, keep);
      if (versions.length === 1 && (versions[0] as Versioned).value === null) {
        this.#keys.delete(key);
      }
    }
  }

  #assertReadable(): void {
    if (this.#failure !== undefined) throw this.#failedError();
    if (this.#closed) throw closedError();
  }

  #failedError(): CairnError {
    return new CairnError("CAIRN_ERR_LSM_FAILED", "memory engine failed", {
      cause: this.#failure,
    });
  }
}

/** The value of the newest version at or below `seq` (the newest of all without it). */
function visible(versions: readonly Versioned[], seq: number | undefined): Uint8Array | null {
  for (let i = versions.length - 1; i >= 0; i--) {
    const v = versions[i] as Versioned;
    if (seq === undefined || v.seq <= seq) return v.value;
  }
  return null;
}

function closedError(): CairnError {
  return new CairnError("CAIRN_ERR_LSM_CLOSED", "memory engine is closed");
}

/** u32 magic | u64 seq | u32 count | (u32 klen | key | u32 vlen | value)* | u32 crc32c(all before) */
function encodeImage(seq: number, entries: readonly [string, Uint8Array][]): Buffer {
  let size = 16 + 4;
  for (const [k, v] of entries) size += 8 + k.length + v.length;
  const buf = Buffer.alloc(size);
  buf.writeUInt32LE(MAGIC, 0);
  buf.writeBigUInt64LE(BigInt(seq), 4);
  buf.writeUInt32LE(entries.length, 12);
  let at = 16;
  for (const [k, v] of entries) {
    buf.writeUInt32LE(k.length, at);
    buf.write(k, at + 4, "latin1");
    at += 4 + k.length;
    buf.writeUInt32LE(v.length, at);
    buf.set(v, at + 4);
    at += 4 + v.length;
  }
  buf.writeUInt32LE(crc32c(buf.subarray(0, at)), at);
  return buf;
}

function decodeImage(buf: Buffer): { seq: number; entries: [string, Uint8Array][] } | null {
  if (buf.length < 20 || buf.readUInt32LE(0) !== MAGIC) return null;
  if (crc32c(buf.subarray(0, buf.length - 4)) !== buf.readUInt32LE(buf.length - 4)) return null;
  const seq = Number(buf.readBigUInt64LE(4));
  const count = buf.readUInt32LE(12);
  const entries: [string, Uint8Array][] = [];
  let at = 16;
  for (let i = 0; i < count; i++) {
    const kl = buf.readUInt32LE(at);
    const key = buf.toString("latin1", at + 4, at + 4 + kl);
    at += 4 + kl;
    const vl = buf.readUInt32LE(at);
    entries.push([key, new Uint8Array(buf.subarray(at + 4, at + 4 + vl))]);
    at += 4 + vl;
  }
  return { seq, entries };
}
