/**
 * Resources one node shares among all its engines: the block cache, the open-file cache, the
 * worker pool, the memtable budget and the metrics sink. Create one per node; close it last.
 */
import { cpus } from "node:os";
import { BlockCache, FileCache } from "./caches.ts";
import { NO_METRICS, type LsmMetrics } from "./metrics.ts";
import { WorkerPool } from "./worker-pool.ts";

export interface LsmEnvironmentOptions {
  /** Bytes of parsed data blocks kept across all engines. Default 256 MiB. */
  readonly blockCacheBytes?: number;
  /** Open SSTable descriptors across all engines. Default 4096. */
  readonly maxOpenFiles?: number;
  /**
   * Bytes of active memtables across all engines. Default 512 MiB. When exceeded, the engine
   * with the largest active memtable rotates it and flushes.
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
  readonly files: FileCache;
  readonly pool: WorkerPool;
  readonly metrics: LsmMetrics;
  readonly memtableBudgetBytes: number;
  readonly #members = new Set<BudgetMember>();
  #activeBytes = 0;
  #nextCacheId = 1;

  constructor(options: LsmEnvironmentOptions = {}) {
    this.blockCache = new BlockCache(options.blockCacheBytes ?? 256 * 1024 * 1024);
    this.files = new FileCache(options.maxOpenFiles ?? 4096);
    this.pool = new WorkerPool(options.workers ?? Math.max(1, Math.min(2, cpus().length)));
    this.metrics = options.metrics ?? NO_METRICS;
    this.memtableBudgetBytes = options.memtableBudgetBytes ?? 512 * 1024 * 1024;
  }

  /** A process-unique prefix for block cache keys (table numbers repeat across engines). */
  cacheId(): string {
    return `t${this.#nextCacheId++}`;
  }

  join(member: BudgetMember): void {
    this.#members.add(member);
  }

  leave(member: BudgetMember): void {
    this.#members.delete(member);
  }

  get activeMemtableBytes(): number {
    return this.#activeBytes;
  }

  /** Engines report every change of their active memtable's size here. */
  noteActiveBytes(delta: number): void {
    this.#activeBytes += delta;
    if (this.#activeBytes <= this.memtableBudgetBytes) return;
    let largest: BudgetMember | undefined;
    for (const m of this.#members) {
      if (largest === undefined || m.activeMemtableBytes > largest.activeMemtableBytes) largest = m;
    }
    largest?.rotateForBudget();
  }

  async close(): Promise<void> {
    await this.pool.close();
    this.files.closeAll();
  }
}
