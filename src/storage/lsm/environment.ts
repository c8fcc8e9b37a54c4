/**
 * Resources one node shares among all its engines: the block cache, the table cache, the open-file
 * cache, the worker pool, the memtable budget and the metrics sink. Create one per node; close it
 * last.
 */
import { cpus } from "node:os";
import { BufferPool } from "./buffer-pool.ts";
import { BlockCache, FileCache, TableCache } from "./caches.ts";
import { NO_METRICS, type LsmMetrics } from "./metrics.ts";
import { WorkerPool } from "./worker-pool.ts";

export interface LsmEnvironmentOptions {
  /** Bytes of verified data blocks kept across all engines. Default 256 MiB. */
  readonly blockCacheBytes?: number;
  /**
   * Bytes of tables' indexes and bloom filters kept across all engines (the table cache); an
   * evicted table reloads them from its file on its next read. Default 256 MiB.
   */
  readonly tableCacheBytes?: number;
  /** Open SSTable descriptors (and mappings) across all engines. Default 4096. */
  readonly maxOpenFiles?: number;
  /**
   * Read SSTables' data blocks through a mapping where the native addon is loaded (default
   * true): a block read is a view of the mapping, no system call or copy. False reads them with
   * pread, as without the addon. Either way every block is verified against its checksum when it enters the block cache.
   */
  readonly mapTables?: boolean;
  /**
   * Bytes of memtables across all engines, active and immutable (until their flush is installed).
   * Default 512 MiB. When the active ones exceed half of it, the engine with the largest active
   * memtable rotates it and flushes; while the total is at or above it, writes of every engine
   * stall until flushes bring it back below. So the total never exceeds the budget by more than
   * one write batch and the arena chunk it may start (64 KiB, or its entry when larger).
   */
  readonly memtableBudgetBytes?: number;
  /** Worker threads for flushes and compactions. Default min(2, CPUs). */
  readonly workers?: number;
  readonly metrics?: LsmMetrics;
}

/** What the environment needs from an engine to enforce the memtable budget. */
export interface BudgetMember {
  readonly activeMemtableBytes: number;
  rotateForBudget(): void;
}

export class LsmEnvironment {
  readonly blockCache: BlockCache;
  readonly tableCache: TableCache;
  readonly files: FileCache;
  readonly pool: WorkerPool;
  readonly metrics: LsmMetrics;
  readonly memtableBudgetBytes: number;
  /**
   * Shared buffers an imported snapshot's tables are encoded in for a worker to build
   * (LsmEngine.importSnapshot): reused from one table and import to the next rather than
   * allocated for each (buffer-pool.ts says why); at most 16 MiB kept free.
   */
  readonly importBuffers = new BufferPool(16 << 20, (n) => Buffer.from(new SharedArrayBuffer(n)));
  readonly #members = new Set<BudgetMember>();
  #activeBytes = 0;
  #totalBytes = 0;
  /** Engines with writes stalled by the budget: called once the total is back below it. */
  #budgetWaiters: Array<() => void> = [];

  constructor(options: LsmEnvironmentOptions = {}) {
    this.blockCache = new BlockCache(options.blockCacheBytes ?? 256 * 1024 * 1024);
    this.tableCache = new TableCache(options.tableCacheBytes ?? 256 * 1024 * 1024);
    this.files = new FileCache(options.maxOpenFiles ?? 4096, { map: options.mapTables ?? true });
    this.pool = new WorkerPool(options.workers ?? Math.max(1, Math.min(2, cpus().length)));
    this.metrics = options.metrics ?? NO_METRICS;
    this.memtableBudgetBytes = options.memtableBudgetBytes ?? 512 * 1024 * 1024;
  }

  join(member: BudgetMember): void {
    this.#members.add(member);
  }

  leave(member: BudgetMember): void {
    this.#members.delete(member);
  }

  /** Bytes of the engines' active memtables. */
  get activeMemtableBytes(): number {
    return this.#activeBytes;
  }

  /** Bytes of all memtables, active and immutable, not yet installed as tables. */
  get memtableBytes(): number {
    return this.#totalBytes;
  }

  /** True while writes must wait for flushes to bring the memtables back under the budget. */
  get overBudget(): boolean {
    return this.#totalBytes >= this.memtableBudgetBytes;
  }

  /** Calls `wake` (once) when the memtables are back below the budget. */
  waitForBudget(wake: () => void): void {
    this.#budgetWaiters.push(wake);
  }

  /**
   * Engines report every change of their memtables' sizes here: `active` of the active one,
   * `total` of active and immutable ones (a rotation moves bytes out of `active` only, an installed
   * flush out of `total`).
   */
  noteBytes(active: number, total: number): void {
    this.#activeBytes += active;
    this.#totalBytes += total;
    if (total < 0 && !this.overBudget && this.#budgetWaiters.length > 0) {
      const waiters = this.#budgetWaiters;
      this.#budgetWaiters = [];
      for (const wake of waiters) wake();
    }
    // Half the budget for active memtables, half for those waiting for their flush. The scan for
    // the largest runs only when active bytes cross that line: each rotation takes the largest
    // out of them, so at most once per (budget / 2 / engines) bytes written, not on every write.
    if (active > 0 && this.#activeBytes > this.memtableBudgetBytes / 2) {
      let largest: BudgetMember | undefined;
      for (const m of this.#members) {
        if (largest === undefined || m.activeMemtableBytes > largest.activeMemtableBytes) {
          largest = m;
        }
      }
      largest?.rotateForBudget();
    }
  }

  async close(): Promise<void> {
    await this.pool.close();
    this.files.closeAll();
  }
}
