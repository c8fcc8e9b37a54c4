/**
 * One shard's LSM engine. See README.md for the concept, invariants and caveats, and
 * docs/storage.md for the file formats.
 */
import { existsSync } from "node:fs";
import { copyFile, mkdir, open, readdir, rename, unlink } from "node:fs/promises";
import { join } from "node:path";
import { CairnError } from "../../common/index.ts";
import { CorruptionError, fsyncDir } from "../common/index.ts";
import { keyHash } from "./bloom.ts";
import type { BudgetMember, LsmEnvironment } from "./environment.ts";
import { BLOCK_BYTES, entryLength, KIND_DELETE, KIND_PUT, writeEntry } from "./format.ts";
import { MemIterator, MergingIterator, TableIterator, type InternalIterator } from "./iterators.ts";
import { LevelIterator } from "./level-iterator.ts";
import { tablePath, type BuiltTable } from "./jobs.ts";
import {
  LEVELS,
  MANIFEST_ROLL_BYTES,
  Manifest,
  applyEdit,
  emptyState,
  type FileMeta,
  type ManifestState,
  type VersionEdit,
} from "./manifest.ts";
import { Memtable } from "./memtable.ts";
import { keyFromBytes, keyPrefix, keyToBytes, prefixEnd } from "./keys.ts";
import { overlapping, pickCompaction, pickWholeLevel, type PlannerConfig } from "./planner.ts";
import { decodeSnapshotStream, encodeSnapshotFrames } from "./snapshot-stream.ts";
import { Table } from "./table.ts";

export interface LsmOptions {
  /** Shard id, for metrics labels. */
  readonly shardId?: number;
  /**
   * Rotate the memtable once its entries reach this size as a table would hold them (its memory,
   * counted against the node's memtable budget, is about twice that). Default 4 MiB.
   */
  readonly memtableBytes?: number;
  /** Compact L0 into L1 at this many L0 files. Default 4. */
  readonly l0CompactionTrigger?: number;
  /** Delay each write by 1 ms while L0 holds more files than this. Default 10. */
  readonly l0SlowdownTrigger?: number;
  /** Hold writes while L0 holds this many files. Default 20. */
  readonly l0StopTrigger?: number;
  /** Budget of L1; level n holds levelBaseBytes × 10^(n-1). Default 10 MiB. */
  readonly levelBaseBytes?: number;
  /** Compaction output files close at this size. Default 2 MiB. */
  readonly targetFileBytes?: number;
  /** Hold writes while this many memtables wait for their flush. Default 2. */
  readonly maxImmutableMemtables?: number;
  /**
   * Data blocks of new tables close after the entry that makes them this large. Default 4096.
   * Tests make them tiny, so that a few keys span many blocks.
   */
  readonly blockBytes?: number;
  /**
   * Roll the manifest (rewrite it as one snapshot of the version) once it exceeds this and 4×
   * its last snapshot. Default 256 KiB (MANIFEST_ROLL_BYTES). Tests make it tiny, so that a few
   * edits roll it.
   */
  readonly manifestRollBytes?: number;
  /**
   * The caller's log dropped its entries up to this sequence, each once a flush held it (the
   * WAL's compaction). A manifest holding less lost edits: cut at a record boundary, or lost
   * with CURRENT. The tables no edit names may then be what the lost edits added, the only copy
   * of those entries: kept, not deleted as a crash's orphans, for the caller to refuse the shard
   * (or refill it) with them still on disk. Default 0: an unnamed table is a crash's orphan.
   */
  readonly logDroppedThrough?: number;
}

export type WriteOp =
  | { readonly type: "put"; readonly key: Uint8Array; readonly value: Uint8Array }
  | { readonly type: "delete"; readonly key: Uint8Array };

export interface ScanOptions {
  /** Inclusive lower bound. */
  readonly start?: Uint8Array;
  /** Exclusive upper bound. */
  readonly end?: Uint8Array;
  /** Only keys starting with these bytes (combined with start/end if given). */
  readonly prefix?: Uint8Array;
  readonly snapshot?: LsmSnapshot;
  readonly limit?: number;
}

/** A pinned read point: reads at it see exactly the writes with seq ≤ `seq`. */
export interface LsmSnapshot {
  readonly seq: number;
  release(): void;
}

export type Backpressure = "none" | "throttle" | "stall";

export interface LsmStats {
  readonly filesPerLevel: number[];
  readonly bytesPerLevel: number[];
  readonly memtableBytes: number;
  readonly immutableMemtables: number;
  readonly flushedSeq: number;
  readonly lastSeq: number;
  readonly flushes: number;
  readonly compactions: number;
  readonly residentBytes: number;
}

interface QueuedWrite {
  readonly seq: number;
  readonly ops: readonly WriteOp[];
  readonly resolve: () => void;
  readonly reject: (err: unknown) => void;
}

const EMPTY = new Uint8Array(0);
const RESOLVED = Promise.resolve();
/**
 * Flushes of one engine in flight at once. Two: a flush's table build and fsync in a worker
 * overlap the next memtable's (a flush of a 4 MiB memtable took 40–150 ms on a loaded 2-core
 * machine, about as long as filling the next one at 400k keys/s).
 */
const MAX_CONCURRENT_FLUSHES = 2;
/** An imported snapshot's tables are built in buffers of at most this (plus an entry). */
const MAX_IMPORT_TABLE_BYTES = 64 * 1024 * 1024;

export class LsmEngine implements BudgetMember {
  readonly dir: string;
  readonly #env: LsmEnvironment;
  readonly #shardId: number;
  readonly #memtableBytes: number;
  readonly #l0Slowdown: number;
  readonly #l0Stop: number;
  readonly #targetFileBytes: number;
  readonly #maxImmutables: number;
  readonly #blockBytes: number;
  readonly #manifestRollBytes: number;
  readonly #planner: PlannerConfig;

  /**
   * Undefined for a new engine until its first edit: nothing of it is durable before its first
   * flush (its writes are in the caller's log), so its creation costs no fsync.
   */
  #manifest: Manifest | undefined;
  #manifestCreation: Promise<Manifest> | undefined;
  /**
   * Resolves once `dir` exists. A new engine makes it just before writing its first table, not
   * at open: under a busy disk a mkdir waits for the file system's journal (~0.4 ms each, while
   * the WAL syncs), and a node's first writes open up to a thousand engines, most of them in the
   * first second of a fill. Its name is made durable with the manifest (Manifest.create).
   */
  #dirMade: Promise<void> | undefined;
  readonly #state: ManifestState;
  /** Open tables by level, mirroring #state.levels. */
  #levels: Table[][];
  /**
   * Per level, the first four bytes of each table's largest key (`keyPrefix`): a point read's
   * search for its table compares these, in one small array, and reads a key string only on a
   * tie (the tables' props are scattered over the heap: a cache miss or three per probe).
   */
  #largestPrefixes: Uint32Array[];
  /**
   * Whether a reader at an older sequence may be open: a pinned snapshot, or a scan under way
   * (it reads at the sequence it started at). With neither, the memtables' index keeps one
   * version of a key written again.
   */
  readonly #readersBelow = (): boolean => this.#snapshots.size > 0 || this.#openScans > 0;
  #mem = new Memtable(this.#readersBelow);
  #immutables: Memtable[] = [];
  #lastSeq: number;
  #acceptedSeq: number;
  readonly #snapshots = new Map<number, number>();
  /** Scans started and not yet ended (scan()): each reads at the sequence it started at. */
  #openScans = 0;
  readonly #pointers: Array<string | undefined> = new Array(LEVELS).fill(undefined);
  /** A full compaction in progress: the next level to merge down, and the level it ends in. */
  #manual: { next: number; target: number } | undefined;

  readonly #writeQueue: QueuedWrite[] = [];
  #draining = false;
  /** Flushes under way (at most MAX_CONCURRENT_FLUSHES): immutables[0, #flushesStarted). */
  #flushesRunning = 0;
  #flushesStarted = 0;
  /** Settles when the last started flush has installed (or failed): flushes install in order. */
  #installTail: Promise<void> = Promise.resolve();
  #compacting = false;
  #paused = false;
  #importing = false;
  #closed = false;
  /** close() has begun: background work is paused for good, and flush() refused. */
  #closing = false;
  #failure: unknown = undefined;
  /** Reads that met pages a mapped table lost, and the error of the last: see #lostPage. */
  #losses = 0;
  #lastLoss: CorruptionError | undefined;
  /** Resolved whenever background work finishes; waiters re-check their condition. */
  #idleWaiters: Array<() => void> = [];
  /** Unlinks of obsolete tables in flight. */
  readonly #deletions = new Set<Promise<void>>();
  #flushes = 0;
  #compactions = 0;
  /** What this engine has reported to the environment's memtable budget (see #syncBudget). */
  #reportedActiveBytes = 0;
  #reportedTotalBytes = 0;
  /** The write at the head of the queue has waited out its throttling delay. */
  #throttled = false;

  private constructor(
    dir: string,
    env: LsmEnvironment,
    options: LsmOptions,
    manifest: Manifest | undefined,
    state: ManifestState,
    levels: Table[][],
    fresh: boolean,
  ) {
    this.dir = dir;
    this.#env = env;
    this.#shardId = options.shardId ?? 0;
    this.#memtableBytes = options.memtableBytes ?? 4 * 1024 * 1024;
    this.#l0Slowdown = options.l0SlowdownTrigger ?? 10;
    this.#l0Stop = options.l0StopTrigger ?? 20;
    this.#targetFileBytes = options.targetFileBytes ?? 2 * 1024 * 1024;
    this.#maxImmutables = options.maxImmutableMemtables ?? 2;
    this.#blockBytes = options.blockBytes ?? BLOCK_BYTES;
    this.#manifestRollBytes = options.manifestRollBytes ?? MANIFEST_ROLL_BYTES;
    this.#planner = {
      l0Trigger: options.l0CompactionTrigger ?? 4,
      levelBaseBytes: options.levelBaseBytes ?? 10 * 1024 * 1024,
      sizeRatio: 10,
      levels: LEVELS,
    };
    this.#manifest = manifest;
    this.#dirMade = fresh ? undefined : Promise.resolve();
    this.#state = state;
    this.#levels = levels;
    this.#largestPrefixes = largestPrefixes(levels);
    this.#lastSeq = state.flushedSeq;
    this.#acceptedSeq = state.flushedSeq;
  }

  /**
   * Opens (or creates) the engine in `dir`. Verifies every live table's footer, index, filter and
   * properties, writes a fresh manifest, and removes files no manifest names (orphans of a crash;
   * kept when the manifest is behind the caller's log: LsmOptions.logDroppedThrough).
   * The caller then replays its log above `flushedSeq`. A new engine (no manifest in `dir`) writes
   * its manifest at its first flush instead: until then it holds nothing durable, and a crash
   * leaves an empty engine whose writes the caller replays from its log.
   */
  static async open(
    dir: string,
    env: LsmEnvironment,
    options: LsmOptions = {},
  ): Promise<LsmEngine> {
    // No directory yet: a new engine, with nothing to load, verify or clean up (a node's first
    // write to each of its shards opens one). The directory is made with its first table
    // (#dirMade); until then nothing of the engine is on disk.
    const fresh = !existsSync(dir);
    const { state, current, tail } = fresh
      ? { state: emptyState(), current: undefined, tail: undefined }
      : await Manifest.load(dir);
    // Behind the caller's log, the manifest lost edits (LsmOptions.logDroppedThrough).
    const lostEdits = state.flushedSeq < (options.logDroppedThrough ?? 0);
    // Tables no edit read names, when an edit after them was not read (a torn or damaged tail)
    // or was lost: any could be what that edit added (a table's number, allocated before its
    // edit, does not tell). Kept, never deleted as a crash's orphans.
    const named = new Set(state.levels.flat().map((f) => f.number));
    const unaccounted =
      fresh || (tail === undefined && !lostEdits)
        ? []
        : (await readdir(dir))
            .filter((n) => /^\d+\.sst$/.test(n) && !named.has(Number(n.slice(0, -4))))
            .sort();
    if (tail?.kind === "damaged") {
      throw new CorruptionError(
        join(dir, current ?? "CURRENT"),
        tail.offset,
        `last manifest record damaged: written in full but its checksum fails, so its edit may ` +
          `have been acknowledged (a crash leaves a partial record, not this); refusing to drop ` +
          `it${unaccounted.length === 0 ? "" : `, or the table(s) it may add: ${unaccounted.join(", ")}`}`,
      );
    }
    const levels: Table[][] = [];
    if (fresh) {
      // Nothing to load, verify, clean up or compact: a node's first writes open up to a
      // thousand of these at once, so the path does only what an empty engine needs.
      for (let level = 0; level < LEVELS; level++) levels.push([]);
      // No level report either: every count is zero, and a node's scrape reads them
      // (tablesPerLevel) from every open engine.
      const engine = new LsmEngine(dir, env, options, undefined, state, levels, true);
      env.join(engine);
      return engine;
    }
    // What fails below leaves no table of this engine in the node's caches: its files stay
    // open there under paths a table of the same number may take again (a cluster node refills
    // a corrupt shard's directory in the same start: corrupt-shard.ts).
    let manifest: Manifest | undefined;
    let quarantined: string[];
    try {
      for (const files of state.levels) {
        const tables: Table[] = [];
        levels.push(tables);
        for (const f of files) {
          const path = tablePath(dir, f.number);
          try {
            const table = Table.open(f.number, path, env);
            // Pushed first: a mismatch below evicts it from the caches with the others.
            tables.push(table);
            checkRecordedMeta(table, f);
          } catch (err) {
            env.files.close(path);
            if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
            throw new CorruptionError(path, 0, "table named by the manifest is missing", {
              cause: err,
            });
          }
        }
      }
      state.nextFileNumber = Math.max(state.nextFileNumber, 1);
      // Numbers of the tables kept (aside, or where they are) are not reused: their names stay
      // unambiguous.
      for (const n of unaccounted) {
        state.nextFileNumber = Math.max(state.nextFileNumber, Number(n.slice(0, -4)) + 1);
      }
      // A torn tail: its edit was never acknowledged, so the tables it would have added are
      // orphans, yet they and a copy of the torn manifest are kept aside (QUARANTINE_DIR), not
      // deleted: a tail read as torn that was not is still recoverable by hand. Done before the
      // fresh manifest replaces the torn one, so a crash in between repeats it on the next open.
      quarantined =
        tail === undefined || current === undefined
          ? []
          : await quarantine(dir, current, unaccounted);
      // Without CURRENT nothing was durable: no table is live, and no manifest is needed until the
      // first edit (#appendEdit writes it).
      manifest =
        current === undefined
          ? undefined
          : await Manifest.create(
              dir,
              state,
              Number(current.slice(9)) + 1,
              true,
              options.manifestRollBytes,
            );
      const live = new Set(state.levels.flat().map((f) => tablePath(dir, f.number)));
      for (const name of fresh ? [] : await readdir(dir)) {
        const path = join(dir, name);
        const orphanTable = name.endsWith(".sst") && !lostEdits && !live.has(path);
        const oldManifest = name.startsWith("MANIFEST-") && name !== manifest?.fileName;
        if (orphanTable || oldManifest || name.endsWith(".tmp")) await unlink(path);
      }
    } catch (err) {
      for (const t of levels.flat()) t.evictFromCaches();
      await manifest?.close().catch(() => undefined);
      throw err;
    }
    const engine = new LsmEngine(dir, env, options, manifest, state, levels, fresh);
    engine.quarantined = quarantined;
    env.join(engine);
    engine.#reportLevels();
    engine.#maybeCompact();
    return engine;
  }

  /**
   * What this open moved into QUARANTINE_DIR (paths): the manifest whose torn tail it dropped and
   * the tables that edit may have added. Empty on a clean open. The caller logs it.
   */
  quarantined: readonly string[] = [];

  /** Highest sequence contained in SSTables: replay the log above it after a restart. */
  get flushedSeq(): number {
    return this.#state.flushedSeq;
  }

  /** Highest sequence applied (memtables included). */
  get lastSeq(): number {
    return this.#lastSeq;
  }

  /** Active memtable bytes as counted in the node's budget (none once failed or closed). */
  get activeMemtableBytes(): number {
    return this.#reportedActiveBytes;
  }

  // --- writes ---

  /**
   * Applies a batch at sequence `seq` (the Raft index; strictly increasing, gaps allowed). Resolves
   * when it is applied: at once normally, after a 1 ms delay while L0 holds more than
   * l0SlowdownTrigger files, and only once flushes/compactions catch up while writes are stalled.
   * Batches apply in call order; none is ever dropped.
   *
   * An empty batch (`write(seq, [])`) records `seq` as applied although no key changed (a leader
   * no-op, a failed compare-and-set, a delete of a missing key): `lastSeq` becomes `seq` at once
   * and the next flush (`flush()`, or the automatic one when the memtable fills) makes
   * `flushedSeq ≥ seq`, so the driver's WAL compaction is not pinned at the last entry that
   * wrote something. It costs no I/O by itself; when only empty batches arrived since the last
   * flush, `flush()` appends one manifest edit and builds no table. Calling it once with the
   * highest such index is enough: entries in between need no call.
   */
  write(seq: number, ops: readonly WriteOp[]): Promise<void> {
    try {
      if (this.writeNow(seq, ops)) return RESOLVED;
    } catch (err) {
      return Promise.reject(err as Error);
    }
    this.#acceptedSeq = seq;
    const { promise, resolve, reject } = Promise.withResolvers<undefined>();
    this.#writeQueue.push({ seq, ops, resolve: () => resolve(undefined), reject });
    this.#drainWrites();
    return promise;
  }

  /**
   * write(), done before returning when nothing would make it wait (no back-pressure, no
   * earlier write queued): returns true once reads see the batch. Returns false, having done
   * nothing, when it would wait: call write() instead. Throws what write() would reject with.
   */
  writeNow(seq: number, ops: readonly WriteOp[]): boolean {
    if (this.#failure !== undefined) throw this.#failedError();
    if (this.#closed) throw closedError();
    if (this.#importing) throw importingError();
    if (!Number.isSafeInteger(seq) || seq <= this.#acceptedSeq) {
      throw new CairnError(
        "CAIRN_ERR_LSM_SEQUENCE",
        `LSM write: sequence ${seq} is not above the last one (${this.#acceptedSeq})`,
      );
    }
    if (this.#writeQueue.length > 0 || this.backpressure() !== "none") return false;
    this.#acceptedSeq = seq;
    this.#apply(seq, ops);
    return true;
  }

  /** The back-pressure writes meet now. */
  backpressure(): Backpressure {
    const l0 = (this.#levels[0] as Table[]).length;
    if (l0 >= this.#l0Stop || this.#immutables.length >= this.#maxImmutables) return "stall";
    // The node's memtables (all engines, flushing ones included) are at the shared budget.
    if (this.#env.overBudget) return "stall";
    if (l0 > this.#l0Slowdown) return "throttle";
    return "none";
  }

  #apply(seq: number, ops: readonly WriteOp[]): void {
    const mem = this.#mem;
    mem.advance(seq);
    for (const op of ops) {
      if (op.type === "put") mem.put(op.key, seq, KIND_PUT, op.value);
      else mem.put(op.key, seq, KIND_DELETE, EMPTY);
    }
    this.#lastSeq = seq;
    // Since the last report: this write, and the index a read built meanwhile.
    this.#noteActive(mem.bytes - this.#reportedActiveBytes);
    if (mem.dataBytes >= this.#memtableBytes) this.#rotate();
  }

  /** A write grew the active memtable by `delta` bytes. */
  #noteActive(delta: number): void {
    if (delta === 0) return;
    this.#reportedActiveBytes += delta;
    this.#reportedTotalBytes += delta;
    this.#env.noteBytes(delta, delta);
  }

  /**
   * Reports the memtables' sizes to the shared budget after a rotation, an installed flush, an
   * import, a failure or close. Immutable memtables count until their flush is installed: they
   * hold the memory until then. A failed or closed engine counts nothing: its memtables will never
   * flush, and counting them would stall every other engine's writes for good.
   */
  #syncBudget(): void {
    let active = 0;
    let total = 0;
    if (!this.#closed && this.#failure === undefined) {
      active = this.#mem.bytes;
      total = active;
      for (const m of this.#immutables) total += m.bytes;
    }
    const dActive = active - this.#reportedActiveBytes;
    const dTotal = total - this.#reportedTotalBytes;
    this.#reportedActiveBytes = active;
    this.#reportedTotalBytes = total;
    if (dActive !== 0 || dTotal !== 0) this.#env.noteBytes(dActive, dTotal);
  }

  #drainWrites(): void {
    if (this.#draining) return;
    this.#draining = true;
    const step = (): void => {
      while (this.#writeQueue.length > 0) {
        if (this.#failure !== undefined) {
          const err = this.#failedError();
          for (const w of this.#writeQueue.splice(0)) w.reject(err);
          break;
        }
        const pressure = this.backpressure();
        if (pressure === "stall") {
          // Woken by #wake() when a flush or compaction of this engine completes, or when the
          // node's memtables are back under the budget.
          this.#idleWaiters.push(step);
          if (this.#env.overBudget) this.#env.waitForBudget(() => this.#wake());
          return;
        }
        if (pressure === "throttle" && !this.#throttled) {
          // After the delay the pressure is checked again: it may have become a stall meanwhile.
          setTimeout(() => {
            this.#throttled = true;
            step();
          }, 1);
          return;
        }
        this.#throttled = false;
        const w = this.#writeQueue.shift() as QueuedWrite;
        this.#apply(w.seq, w.ops);
        w.resolve();
      }
      this.#draining = false;
    };
    step();
  }

  #wake(): void {
    const waiters = this.#idleWaiters;
    this.#idleWaiters = [];
    for (const w of waiters) w();
  }

  // --- reads ---

  /** Pins the current sequence: compactions keep every version it can see until release(). */
  snapshot(): LsmSnapshot {
    const seq = this.#lastSeq;
    this.#snapshots.set(seq, (this.#snapshots.get(seq) ?? 0) + 1);
    let released = false;
    return {
      seq,
      release: () => {
        if (released) return;
        released = true;
        const n = (this.#snapshots.get(seq) ?? 1) - 1;
        if (n === 0) this.#snapshots.delete(seq);
        else this.#snapshots.set(seq, n);
      },
    };
  }

  /**
   * The value of `key` as of `snapshot` (or now). A table found damaged (CorruptionError naming
   * the file) fails the engine as a failed flush does: it refuses writes, and its `failure` tells
   * the driver to take the shard out of service. So does a table that shrank under its mapping
   * (see #lostPage).
   */
  get(key: Uint8Array, snapshot?: LsmSnapshot): Uint8Array | undefined {
    const files = this.#env.files;
    const faults = files.faults;
    let value: Uint8Array | undefined;
    try {
      value = this.#get(key, snapshot);
    } catch (err) {
      const e = files.faults === faults ? err : this.#lostPage(err);
      this.#noteReadError(e);
      throw e;
    }
    if (files.faults !== faults) {
      const e = this.#lostPage();
      this.#noteReadError(e);
      throw e;
    }
    return value;
  }

  /** A read met damage: the engine fails (see get). */
  #noteReadError(err: unknown): void {
    if (err instanceof CorruptionError) this.#fail(err);
  }

  /**
   * A read of this engine met a page that a mapped table's file no longer has (another process
   * cut the file): the addon mapped zeros there (FileCache.faults moved), so what the read saw
   * is void, and so is anything read later through the same pages. The error names the file
   * and offset; the engine fails (#noteReadError), and every table's blocks leave the caches and
   * their files are closed, so no read meets those zeros again: a table read again is mapped
   * anew at its new size, where pread's short reads report the loss. A scan under way stops at
   * its next entry (#losses moved). `cause`: what the read threw, if anything.
   */
  #lostPage(cause?: unknown): CorruptionError {
    const files = this.#env.files;
    const err = new CorruptionError(
      files.lastFault ?? this.dir,
      files.lastFaultOffset,
      "table shrank while open: a read through its mapping met a page past its end (SIGBUS)",
      cause === undefined ? {} : { cause },
    );
    this.#losses++;
    this.#lastLoss = err;
    for (const level of this.#levels) for (const t of level) t.evictFromCaches();
    return err;
  }

  #get(key: Uint8Array, snapshot?: LsmSnapshot): Uint8Array | undefined {
    this.#assertOpen();
    const seq = snapshot?.seq ?? this.#lastSeq;
    const k = keyFromBytes(key);
    let v = this.#mem.get(k, seq);
    if (v !== undefined) return v ?? undefined;
    for (let i = this.#immutables.length - 1; i >= 0; i--) {
      v = (this.#immutables[i] as Memtable).get(k, seq);
      if (v !== undefined) return v ?? undefined;
    }
    const hash = keyHash(k);
    for (const t of this.#levels[0] as Table[]) {
      v = t.get(k, seq, hash);
      if (v !== undefined) return v ?? undefined;
    }
    const kp = keyPrefix(k);
    for (let level = 1; level < LEVELS; level++) {
      const files = this.#levels[level] as Table[];
      const prefixes = this.#largestPrefixes[level] as Uint32Array;
      // The first table whose largest key is ≥ k (keyPrefix is monotonic in the key).
      let lo = 0;
      let hi = files.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        const p = prefixes[mid] as number;
        if (p < kp || (p === kp && (files[mid] as Table).props.largest < k)) lo = mid + 1;
        else hi = mid;
      }
      const t = files[lo];
      if (t !== undefined) {
        v = t.get(k, seq, hash);
        if (v !== undefined) return v ?? undefined;
      }
    }
    return undefined;
  }

  /**
   * Live keys and values in key order, as of `snapshot` (or now). The tables it reads are pinned
   * until the iteration ends: finish it or call `return()` (for..of does). Resumed after
   * `close()`, it throws CAIRN_ERR_LSM_CLOSED.
   */
  *scan(options: ScanOptions = {}): Generator<[Uint8Array, Uint8Array]> {
    this.#assertOpen();
    const seq = options.snapshot?.seq ?? this.#lastSeq;
    let start = options.start === undefined ? undefined : keyFromBytes(options.start);
    let end = options.end === undefined ? undefined : keyFromBytes(options.end);
    if (options.prefix !== undefined) {
      const prefix = keyFromBytes(options.prefix);
      if (start === undefined || start < prefix) start = prefix;
      const pEnd = prefixEnd(prefix);
      if (pEnd !== undefined && (end === undefined || pEnd < end)) end = pEnd;
    }
    const limit = options.limit ?? Infinity;
    const children: InternalIterator[] = [new MemIterator(this.#mem)];
    for (let i = this.#immutables.length - 1; i >= 0; i--) {
      children.push(new MemIterator(this.#immutables[i] as Memtable));
    }
    const pinned: Table[] = [];
    for (const t of this.#levels[0] as Table[]) {
      children.push(new TableIterator(t));
      pinned.push(t);
    }
    for (let level = 1; level < LEVELS; level++) {
      const files = this.#levels[level] as Table[];
      if (files.length === 0) continue;
      children.push(new LevelIterator(files));
      pinned.push(...files);
    }
    for (const t of pinned) t.pins++;
    this.#openScans++;
    // Pages lost under a mapping met since the scan last resumed, by it or by another read of
    // the engine (see #lostPage).
    const files = this.#env.files;
    let faults = files.faults;
    const losses = this.#losses;
    /** The error that stops the scan: its own read met a lost page, or another read did. */
    const lost = (): CorruptionError => {
      if (files.faults === faults) return this.#lastLoss as CorruptionError;
      faults = files.faults;
      return this.#lostPage();
    };
    try {
      const it = new MergingIterator(children);
      it.seek(start, seq);
      let decided: string | undefined;
      let emitted = 0;
      while (it.valid && emitted < limit) {
        const k = it.key;
        if (end !== undefined && k >= end) break;
        if (it.seq <= seq && k !== decided) {
          decided = k;
          if (it.kind === KIND_PUT) {
            emitted++;
            // A copy: the value may be a view of a mapped table, which could shrink later.
            const entry: [Uint8Array, Uint8Array] = [keyToBytes(k), Buffer.from(it.value())];
            if (files.faults !== faults || this.#losses !== losses) throw lost();
            yield entry;
            // Resumed after close(): the tables it pinned are out of the node's caches, whose
            // paths a new engine in this directory may have taken since, so it reads no more.
            if (this.#closed) throw closedError();
            faults = files.faults;
          }
        }
        it.next();
      }
      if (files.faults !== faults || this.#losses !== losses) throw lost();
    } catch (err) {
      const e = files.faults === faults ? err : this.#lostPage(err);
      this.#noteReadError(e);
      throw e;
    } finally {
      this.#openScans--;
      for (const t of pinned) {
        t.pins--;
        // Not once closed: close() has returned, and its caller may reuse the directory. The
        // next open removes the table, which no manifest names any more.
        if (t.pins === 0 && t.obsolete && !this.#closed) this.#deleteTable(t);
      }
    }
  }

  // --- flush ---

  /**
   * Rotates the active memtable and resolves once it, and every memtable before it, is in an
   * SSTable (or was replaced by an imported snapshot).
   */
  async flush(): Promise<void> {
    this.#assertOpen();
    // Closing: no flush runs again, and the memtable rotated would wait for one for ever.
    if (this.#closing) throw closedError();
    this.#rotate();
    // The newest memtable now waiting: flushes install in order, so once it has left the list
    // every one before it has too. Not "until none waits": a write stalled on a full list is
    // applied, and rotates a memtable, by the wake-up that tells this loop its own is in, so
    // under writes that keep coming that never held (and the driver's maintenance, which
    // awaits flushes before compacting the WAL, waited as long).
    const last = this.#immutables.at(-1);
    while (last !== undefined && this.#immutables.includes(last)) {
      if (this.#failure !== undefined) throw this.#failedError();
      if (this.#closed) throw closedError();
      await new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
    }
    if (this.#failure !== undefined) throw this.#failedError();
  }

  rotateForBudget(): void {
    this.#rotate();
  }

  #rotate(): void {
    // A memtable that only saw empty batches still rotates: its flush advances flushedSeq.
    if (this.#mem.isBlank) return;
    this.#immutables.push(this.#mem);
    this.#mem = new Memtable(this.#readersBelow);
    this.#syncBudget();
    this.#reportMemtable();
    this.#maybeFlush();
  }

  #smallestSnapshot(): number {
    let smallest = this.#lastSeq;
    for (const seq of this.#snapshots.keys()) if (seq < smallest) smallest = seq;
    return smallest;
  }

  #allocate(n: number): number[] {
    const first = this.#state.nextFileNumber;
    this.#state.nextFileNumber += n;
    return Array.from({ length: n }, (_, i) => first + i);
  }

  /**
   * Starts flushes of the immutable memtables, oldest first, up to MAX_CONCURRENT_FLUSHES at a
   * time: their tables build in parallel (a flush's worker time and fsync overlap the next one's),
   * and each installs only after the one before it, so L0 and `flushedSeq` advance in order.
   */
  #maybeFlush(): void {
    while (
      this.#flushesRunning < MAX_CONCURRENT_FLUSHES &&
      !this.#paused &&
      !this.#closed &&
      this.#failure === undefined
    ) {
      const mem = this.#immutables[this.#flushesStarted];
      if (mem === undefined) return;
      this.#flushesStarted++;
      this.#flushesRunning++;
      const built = this.#buildFlush(mem);
      // Awaited below only once the flushes before it have installed. A build that failed
      // before then (a full disk, a worker that exited) was a rejection nobody handled, which
      // ends the process; it fails the engine now instead.
      built.catch((err: unknown) => this.#fail(err));
      const installed = this.#installTail
        .then(() => built)
        .then(async (tables) => {
          const edit: VersionEdit = {
            add: tables.map((t) => fileMeta(0, t)),
            flushedSeq: mem.maxSeq,
            nextFileNumber: this.#state.nextFileNumber,
          };
          await this.#appendEdit(edit);
          this.#install(edit, []);
          this.#immutables.shift();
          this.#flushesStarted--;
          this.#flushes++;
          this.#syncBudget();
          this.#reportMemtable();
        });
      // The next flush installs after this one settles; if this one failed, the engine has
      // failed and the next one's #appendEdit refuses.
      this.#installTail = installed.catch(() => undefined);
      installed
        .catch((err: unknown) => this.#fail(err))
        .finally(() => {
          this.#flushesRunning--;
          this.#maybeFlush();
          this.#maybeCompact();
          this.#wake();
        });
    }
  }

  /**
   * Builds the SSTable of an immutable memtable in a worker (none when it holds no version):
   * the worker reads the arena in shared memory and sorts, filters and encodes it there.
   */
  #buildFlush(mem: Memtable): Promise<BuiltTable[]> {
    // Only empty batches: the flush is a manifest edit advancing flushedSeq, no table.
    if (mem.isEmpty) return Promise.resolve([]);
    const job = {
      type: "flush",
      dir: this.dir,
      numbers: this.#allocate(1),
      arena: mem.arena(),
      smallestSnapshot: this.#smallestSnapshot(),
      blockBytes: this.#blockBytes,
    } as const;
    return this.#madeDir().then(() => this.#env.pool.run(job));
  }

  /** Makes the engine's directory before its first table (see #dirMade). */
  #madeDir(): Promise<void> {
    return (this.#dirMade ??= mkdir(this.dir, { recursive: true }).then(() => undefined));
  }

  // --- compaction ---

  /** Resolves once no compaction is needed or running (and no flush is pending). */
  async compactUntilIdle(): Promise<void> {
    for (;;) {
      if (this.#failure !== undefined) throw this.#failedError();
      if (this.#closing) throw closedError();
      this.#maybeCompact();
      if (!this.#compacting && this.#flushesRunning === 0 && this.#immutables.length === 0) return;
      await new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
    }
  }

  /**
   * Merges every level down into the deepest one that holds files (L1 if only L0 does), one
   * pass per level as LevelDB's `CompactRange` over all keys: writes made meanwhile may land
   * above it again. Resolves when the pass is done; a point read then probes one table.
   */
  async compactFully(): Promise<void> {
    while (this.#manual !== undefined) await this.#idle();
    await this.flush();
    let deepest = 1;
    for (let level = 1; level < LEVELS; level++) {
      if ((this.#levels[level] as Table[]).length > 0) deepest = level;
    }
    this.#manual = { next: 0, target: deepest };
    for (;;) {
      if (this.#failure !== undefined || this.#closed) {
        this.#manual = undefined;
        throw this.#closed ? closedError() : this.#failedError();
      }
      this.#maybeCompact();
      if (this.#manual === undefined && !this.#compacting) return;
      await this.#idle();
    }
  }

  #idle(): Promise<void> {
    return new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
  }

  #maybeCompact(): void {
    if (this.#compacting || this.#paused || this.#closed || this.#failure !== undefined) return;
    const planned = this.#levels.map(plannedFiles);
    let pick = null;
    const manual = this.#manual;
    if (manual !== undefined) {
      while (pick === null && manual.next < manual.target)
        pick = pickWholeLevel(planned, manual.next++);
      if (pick === null) this.#manual = undefined;
    }
    pick ??= pickCompaction(planned, this.#pointers, this.#planner);
    if (pick === null) return;
    this.#compacting = true;
    this.#pointers[pick.level] = pick.pointer;
    const inputs = [...pick.inputs, ...pick.overlaps].map((f) => f.table);
    const outLevel = pick.level + 1;
    const started = performance.now();
    const removed = [
      ...pick.inputs.map((f) => ({ level: pick.level, number: f.number })),
      ...pick.overlaps.map((f) => ({ level: outLevel, number: f.number })),
    ];
    let work: Promise<VersionEdit>;
    if (pick.level > 0 && pick.overlaps.length === 0 && pick.inputs.length === 1) {
      // Trivial move: nothing to merge, the file changes level in the manifest only.
      const t = (pick.inputs[0] as PlannedTable).table;
      work = Promise.resolve({ remove: removed, add: [{ ...metaOf(t), level: outLevel }] });
    } else {
      let smallest = (inputs[0] as Table).props.smallest;
      let largest = (inputs[0] as Table).props.largest;
      let bytes = 0;
      for (const t of inputs) {
        if (t.props.smallest < smallest) smallest = t.props.smallest;
        if (t.props.largest > largest) largest = t.props.largest;
        bytes += t.fileSize;
      }
      let bottom = true;
      for (let l = outLevel + 1; l < LEVELS; l++) {
        if (overlapping(plannedFiles(this.#levels[l] as Table[]), smallest, largest).length > 0) {
          bottom = false;
        }
      }
      const numbers = this.#allocate(Math.ceil(bytes / this.#targetFileBytes) + 2);
      work = this.#env.pool
        .run({
          type: "compact",
          dir: this.dir,
          numbers,
          inputs: inputs.map((t) => t.path),
          targetFileBytes: this.#targetFileBytes,
          smallestSnapshot: this.#smallestSnapshot(),
          bottom,
          blockBytes: this.#blockBytes,
        })
        .then((tables) => ({
          remove: removed,
          add: tables.map((t) => fileMeta(outLevel, t)),
          nextFileNumber: this.#state.nextFileNumber,
        }));
    }
    work
      .then(async (edit) => {
        await this.#appendEdit(edit);
        const moved = new Set((edit.add ?? []).map((f) => f.number));
        this.#install(
          edit,
          inputs.filter((t) => !moved.has(t.number)),
        );
        this.#compactions++;
        this.#env.metrics.compactionDuration(pick.level, "success", performance.now() - started);
      })
      .catch((err: unknown) => {
        this.#env.metrics.compactionDuration(pick.level, "failure", performance.now() - started);
        this.#fail(err);
      })
      .finally(() => {
        this.#compacting = false;
        this.#maybeCompact();
        this.#wake();
      });
  }

  /**
   * Makes an edit durable, unless the engine has failed: a flush or compaction that finishes after
   * a failure must not install its result nor delete its inputs (the failed edit may or may not
   * be on disk, so the in-memory version no longer describes it). Throws then.
   *
   * `writing` is called just before the edit's first byte is written (Manifest.append): when the
   * edit fails without having called it, no manifest names what it adds. The engine was refused,
   * the first manifest could not be made (the one made in part holds the state before the edit,
   * never the edit), or the manifest could not be opened.
   */
  async #appendEdit(edit: VersionEdit, writing?: () => void): Promise<void> {
    if (this.#failure !== undefined) throw this.#failedError();
    const manifest =
      this.#manifest ??
      (await (this.#manifestCreation ??= Manifest.create(
        this.dir,
        this.#state,
        1,
        false,
        this.#manifestRollBytes,
      ).then((m) => {
        this.#manifest = m;
        return m;
      })));
    await manifest.append(edit, writing);
    if (this.#failure !== undefined) throw this.#failedError();
  }

  /** Applies a durable edit to the in-memory version; `obsolete` tables are deleted when unpinned. */
  #install(edit: VersionEdit, obsolete: Table[]): void {
    const byNumber = new Map<number, Table>();
    for (const level of this.#levels) for (const t of level) byNumber.set(t.number, t);
    applyEdit(this.#state, edit);
    for (const f of edit.add ?? []) {
      if (!byNumber.has(f.number)) {
        byNumber.set(f.number, Table.open(f.number, tablePath(this.dir, f.number), this.#env));
      }
    }
    this.#levels = this.#state.levels.map((files) =>
      files.map((f) => byNumber.get(f.number) as Table),
    );
    this.#largestPrefixes = largestPrefixes(this.#levels);
    for (const t of obsolete) {
      t.obsolete = true;
      if (t.pins === 0) this.#deleteTable(t);
    }
    this.#reportLevels();
  }

  #deleteTable(t: Table): void {
    t.evictFromCaches();
    const done = unlink(t.path)
      .catch(() => {
        // Already gone, or removable as an orphan on the next open: the manifest no longer names it.
      })
      .finally(() => this.#deletions.delete(done));
    // close() waits for these: a caller may reuse the directory as soon as it returns.
    this.#deletions.add(done);
  }

  // --- snapshots of the whole engine (for Raft snapshots) ---

  /**
   * A consistent image of every live key at `snapshot` (or now), as a stream of self-checking
   * frames (docs/storage.md § Snapshot stream). Holds a snapshot until the stream ends.
   */
  async *exportSnapshot(snapshot?: LsmSnapshot): AsyncGenerator<Uint8Array> {
    const own = snapshot ?? this.snapshot();
    try {
      yield* encodeSnapshotFrames(own.seq, this.scan({ snapshot: own }));
    } finally {
      if (snapshot === undefined) own.release();
    }
  }

  /**
   * Replaces the whole engine by a snapshot stream from exportSnapshot (of any engine). After it
   * resolves, the engine holds exactly the snapshot, `flushedSeq` and `lastSeq` equal its sequence
   * and the caller's log continues above it. Writes must not run concurrently. Refused once
   * close() has begun or the engine has failed; close() during an import stops it at its next
   * step (the next item of `chunks`, or once the table being built is), before its reset edit,
   * unless that edit is under way: then close() waits for the import to finish. A failure of the
   * engine during an import stops it the same way.
   */
  async importSnapshot(chunks: AsyncIterable<Uint8Array>): Promise<void> {
    this.#assertOpen();
    // close() has begun: it does not wait for an import that starts now, and the directory may
    // be another's once it returns (an import after it wrote tables and a reset edit there).
    if (this.#closing) throw closedError();
    // A failed engine refuses the reset edit (#appendEdit): refused now, not after building
    // the whole shard's tables.
    if (this.#failure !== undefined) throw this.#failedError();
    // A queued write would land on top of the snapshot with an older sequence: refuse instead.
    if (this.#importing || this.#writeQueue.length > 0) throw importingError();
    this.#importing = true;
    this.#paused = true;
    /**
     * The reset edit is being made durable, or is: from then on the engine's files may be the
     * snapshot's, and only a reopen can tell. Before it nothing of the engine changed (a
     * damaged stream, a failed source, a table build that failed, a close), so a failure then
     * leaves the engine as it was, the tables built so far deleted (issue 50: a rejected stream
     * failed it for good).
     */
    let committing = false;
    /**
     * Bytes of the reset edit may be in the manifest file: a reopen may replay the edit, which
     * names the tables. Until then, a failure of the edit fails the engine (its first manifest
     * may be half made, or its manifest refuses edits) but no manifest names the tables, and
     * they are deleted as before `committing` (a new engine whose first manifest could not be
     * made left them, orphans, until the next open).
     */
    let editWritten = false;
    /** The numbers of the tables this import builds (allocated, perhaps not yet written). */
    const numbers: number[] = [];
    try {
      while (this.#flushesRunning > 0 || this.#compacting) {
        await new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
      }
      if (this.#closing) throw closedError();
      // A flush waited for may have failed the engine.
      if (this.#failure !== undefined) throw this.#failedError();
      const built: BuiltTable[] = [];
      let seq = -1;
      // The table being encoded: each entry is written, as it comes (the stream's entries are
      // views valid until the next), into a shared buffer from the environment's pool, handed to
      // a worker once it reaches the target size, and back in the pool for the next table.
      const pool = this.#env.importBuffers;
      const room = Math.min(this.#targetFileBytes, MAX_IMPORT_TABLE_BYTES) + 65_536;
      let table: Buffer | null = null;
      let at = 0;
      const submit = async (): Promise<void> => {
        if (table === null) return;
        const data = table;
        const length = at;
        table = null;
        at = 0;
        const mine = this.#allocate(1);
        numbers.push(...mine);
        await this.#madeDir();
        built.push(
          ...(await this.#env.pool.run({
            type: "build",
            dir: this.dir,
            numbers: mine,
            data: data.subarray(0, length),
            targetFileBytes: Infinity,
            blockBytes: this.#blockBytes,
          })),
        );
        // Only once the worker is done with it (a failed job's buffer is left to the collector).
        pool.give(data);
      };
      for await (const item of decodeSnapshotStream(chunks)) {
        // close() has begun: the import stops here, the engine as it was (the snapshot is sent
        // again: the caller's log does not record it before the import resolves).
        if (this.#closing) throw closedError();
        // The engine failed meanwhile (a read met a damaged table): its reset edit would be
        // refused, so the import stops here too, its tables deleted.
        if (this.#failure !== undefined) throw this.#failedError();
        if (item.kind === "header") {
          seq = item.seq;
          continue;
        }
        const length = entryLength(item.key.length, item.value.length);
        if (table !== null && at + length > table.length) await submit();
        table ??= pool.take(Math.max(room, length));
        at = writeEntry(table, at, item.key, KIND_PUT, seq, item.value);
        if (at >= this.#targetFileBytes) await submit();
      }
      await submit();
      if (this.#closing) throw closedError();
      // Checked here, before `committing`: the refusal is the engine's earlier failure, not one
      // of the reset edit (#appendEdit would refuse it too, before writing: the tables deleted).
      if (this.#failure !== undefined) throw this.#failedError();
      committing = true;
      const edit: VersionEdit = {
        reset: true,
        add: built.map((t) => fileMeta(LEVELS - 1, t)),
        flushedSeq: seq,
        nextFileNumber: this.#state.nextFileNumber,
      };
      await this.#appendEdit(edit, () => {
        editWritten = true;
      });
      const old = this.#levels.flat();
      this.#mem = new Memtable(this.#readersBelow);
      this.#immutables = [];
      this.#flushesStarted = 0;
      this.#syncBudget();
      this.#install(edit, old);
      this.#lastSeq = seq;
      this.#acceptedSeq = seq;
      this.#reportMemtable();
    } catch (err) {
      if (committing) this.#fail(err);
      if (!editWritten) {
        // No edit names them. Deleted now, not by the next open: a node may take many
        // snapshots, failed or stopped, before it restarts, and the directory is let go by
        // close(), which waits for this.
        await Promise.all(
          numbers.map((n) => unlink(tablePath(this.dir, n)).catch(() => undefined)),
        );
      }
      throw err;
    } finally {
      this.#importing = false;
      // close() may have begun meanwhile: background work stays paused for it.
      this.#paused = this.#closing;
      this.#maybeFlush();
      this.#maybeCompact();
      // Writes stalled and flush() callers that waited out the import re-check their condition.
      this.#wake();
    }
  }

  // --- lifecycle and introspection ---

  /** Tables per level, L0 first (stats().filesPerLevel, without the rest). */
  get tablesPerLevel(): number[] {
    return this.#levels.map((l) => l.length);
  }

  /** Bytes of the active and immutable memtables (stats().memtableBytes, without the rest). */
  get memtableBytes(): number {
    let bytes = this.#mem.bytes;
    for (const m of this.#immutables) bytes += m.bytes;
    return bytes;
  }

  stats(): LsmStats {
    return {
      filesPerLevel: this.#levels.map((l) => l.length),
      bytesPerLevel: this.#levels.map((l) => l.reduce((a, t) => a + t.fileSize, 0)),
      memtableBytes: this.#mem.bytes + this.#immutables.reduce((a, m) => a + m.bytes, 0),
      immutableMemtables: this.#immutables.length,
      flushedSeq: this.#state.flushedSeq,
      lastSeq: this.#lastSeq,
      flushes: this.#flushes,
      compactions: this.#compactions,
      residentBytes: this.#levels.flat().reduce((a, t) => a + t.residentBytes, 0),
    };
  }

  /**
   * Waits for running background jobs and closes. Memtables are dropped, not flushed: their
   * writes are in the caller's log above `flushedSeq`. Call flush() first for a clean stop. An
   * import under way is stopped at its next step, its tables deleted, as a memtable is dropped
   * (the caller's log has not recorded the snapshot, which is sent again), or, once its reset
   * edit is under way, finishes: either way nothing of it is written after this resolves.
   */
  async close(): Promise<void> {
    if (this.#closed) return;
    this.#paused = true;
    this.#closing = true;
    while (this.#flushesRunning > 0 || this.#compacting || this.#importing) {
      await new Promise<void>((resolve) => this.#idleWaiters.push(resolve));
    }
    this.#closed = true;
    const err = closedError();
    for (const w of this.#writeQueue.splice(0)) w.reject(err);
    this.#wake();
    this.#syncBudget();
    this.#env.leave(this);
    for (const t of this.#levels.flat()) t.evictFromCaches();
    await this.#manifest?.close();
    await Promise.all(this.#deletions);
  }

  /** The error that stopped background work, if any; the engine refuses writes after it. */
  get failure(): unknown {
    return this.#failure;
  }

  #fail(err: unknown): void {
    this.#failure ??= err;
    this.#syncBudget();
    this.#wake();
  }

  #failedError(): CairnError {
    if (this.#failure instanceof CairnError) return this.#failure;
    return new CairnError("CAIRN_ERR_LSM_FAILED", "LSM background work failed; reopen the engine", {
      cause: this.#failure,
    });
  }

  #assertOpen(): void {
    if (this.#closed) throw closedError();
  }

  #reportLevels(): void {
    this.#levels.forEach((files, level) =>
      this.#env.metrics.sstableCount(this.#shardId, level, files.length),
    );
  }

  #reportMemtable(): void {
    this.#env.metrics.memtableSize(this.#shardId, this.stats().memtableBytes);
  }
}

interface PlannedTable {
  readonly number: number;
  readonly size: number;
  readonly smallest: string;
  readonly largest: string;
  readonly table: Table;
}

/**
 * Throws CorruptionError unless `table`, as opened, is what the manifest recorded of it (`f`):
 * its size, key range, sequences and entry count. A table checks only its own blocks, so a file
 * whose bytes became another whole table's (a stray copy or write, a file restored alone from
 * an older backup) opened in its place, and served that table's keys: a table deleting a key
 * replaced by an older one holding it brought the key back.
 */
function checkRecordedMeta(table: Table, f: FileMeta): void {
  const { props } = table;
  const differs: string[] = [];
  if (table.fileSize !== f.size) differs.push(`${table.fileSize} bytes, recorded ${f.size}`);
  if (props.entries !== f.entries) differs.push(`${props.entries} entries, recorded ${f.entries}`);
  if (props.minSeq !== f.minSeq || props.maxSeq !== f.maxSeq) {
    differs.push(`sequences ${props.minSeq}..${props.maxSeq}, recorded ${f.minSeq}..${f.maxSeq}`);
  }
  if (props.smallest !== f.smallest || props.largest !== f.largest) {
    differs.push("another key range");
  }
  if (differs.length > 0) {
    throw new CorruptionError(
      table.path,
      0,
      `table is not the one the manifest records (${differs.join("; ")})`,
    );
  }
}

/** Where an open keeps what it could not account for, one folder per damaged manifest. */
export const QUARANTINE_DIR = "quarantine";

/**
 * Copies `manifest` and moves `tables` (files of `dir`) into `dir/quarantine/<manifest>/`, and
 * makes both durable. Returns the paths there.
 */
async function quarantine(
  dir: string,
  manifest: string,
  tables: readonly string[],
): Promise<string[]> {
  const into = join(dir, QUARANTINE_DIR, manifest);
  await mkdir(into, { recursive: true });
  // The copy's data is synced here, its name by the directory syncs below.
  await copyFile(join(dir, manifest), join(into, manifest));
  const copy = await open(join(into, manifest), "r+");
  try {
    await copy.sync();
  } finally {
    await copy.close();
  }
  for (const name of tables) await rename(join(dir, name), join(into, name));
  await fsyncDir(into);
  await fsyncDir(join(dir, QUARANTINE_DIR));
  await fsyncDir(dir);
  return [manifest, ...tables].map((name) => join(into, name));
}

function plannedFiles(tables: readonly Table[]): PlannedTable[] {
  return tables.map((t) => ({
    number: t.number,
    size: t.fileSize,
    smallest: t.props.smallest,
    largest: t.props.largest,
    table: t,
  }));
}

function fileMeta(level: number, t: BuiltTable): FileMeta {
  return {
    level,
    number: t.number,
    size: t.size,
    smallest: t.props.smallest,
    largest: t.props.largest,
    minSeq: t.props.minSeq,
    maxSeq: t.props.maxSeq,
    entries: t.props.entries,
  };
}

function metaOf(t: Table): FileMeta {
  return fileMeta(0, { number: t.number, size: t.fileSize, props: t.props });
}

function importingError(): CairnError {
  return new CairnError(
    "CAIRN_ERR_LSM_IMPORTING",
    "LSM engine is importing a snapshot, or writes are still queued: writes and imports must not overlap",
    { retryable: true },
  );
}

function closedError(): CairnError {
  return new CairnError("CAIRN_ERR_LSM_CLOSED", "LSM engine is closed");
}

/** Shared by every empty level: a zero-length array holds nothing to mutate. */
const NO_PREFIXES = new Uint32Array(0);

function largestPrefixes(levels: readonly (readonly Table[])[]): Uint32Array[] {
  const prefixes: Uint32Array[] = [];
  for (const files of levels) {
    if (files.length === 0) {
      prefixes.push(NO_PREFIXES);
      continue;
    }
    const level = new Uint32Array(files.length);
    for (let i = 0; i < files.length; i++) level[i] = keyPrefix((files[i] as Table).props.largest);
    prefixes.push(level);
  }
  return prefixes;
}
