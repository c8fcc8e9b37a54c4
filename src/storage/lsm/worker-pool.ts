/**
 * One pool of worker threads per node, shared by every engine: flushes and compactions of all
 * shards queue here, so their CPU use is bounded by the pool size whatever the shard count.
 * Flushes go first: writes stall on memtables waiting for their flush, never directly on a
 * compaction, so a flush queued behind compactions (a second or more of work each) stalled
 * writes for all of them (LevelDB runs a pending memtable flush before any compaction; RocksDB
 * gives flushes a pool of their own). A flush waits at most for the jobs already running.
 *
 * Threads start when a job first needs one, not with the pool: a thread's start costs ~0.1 s of
 * CPU, and a node that never flushes (a short-lived or idle one; most of a test suite's) would
 * pay it for every thread of the pool. A thread that ends (an error escaped a job, or it exited
 * without one) fails the job it ran; the next job needing a thread starts another.
 */
import { Worker } from "node:worker_threads";
import { CairnError } from "../../common/index.ts";
import { CorruptionError } from "../common/index.ts";
import type { BuiltTable, Job } from "./jobs.ts";

interface Pending {
  readonly job: Job;
  readonly transfer: ArrayBuffer[];
  readonly resolve: (tables: BuiltTable[]) => void;
  readonly reject: (err: unknown) => void;
}

interface Reply {
  id: number;
  ok: boolean;
  tables?: BuiltTable[];
  error?: { message: string; code?: string; file?: string; offset?: number };
}

export class WorkerPool {
  readonly size: number;
  readonly #idle: Worker[] = [];
  readonly #all: Worker[] = [];
  /** Waiting flushes, then other jobs (compactions, an import's tables), each in call order. */
  readonly #flushQueue: Pending[] = [];
  readonly #queue: Pending[] = [];
  readonly #running = new Map<number, { worker: Worker; pending: Pending }>();
  #nextId = 1;
  #closed = false;
  readonly #script: URL;

  /** `script`: the threads' entry point, worker.ts (tests run others). */
  constructor(size: number, script: URL = new URL("./worker.ts", import.meta.url)) {
    this.size = size;
    this.#script = script;
  }

  /** Threads started so far (at most `size`). */
  get started(): number {
    return this.#all.length;
  }

  #spawn(): void {
    const worker = new Worker(this.#script);
    worker.on("message", (reply: Reply) => this.#onReply(worker, reply));
    worker.on("error", (err) => this.#onCrash(worker, err));
    // A thread can end without an error (process.exit in it, a terminate): its job would never
    // be answered, and an idle one would take the next job and never answer it. After an
    // 'error' it has been removed already, and this does nothing.
    worker.on("exit", (code) =>
      this.#onCrash(
        worker,
        this.#closed
          ? closedError()
          : new CairnError(
              "CAIRN_ERR_LSM_JOB",
              `an LSM worker thread exited (code ${code}) before it answered its job`,
            ),
      ),
    );
    // Idle workers must not keep the process alive; busy ones are referenced while they run.
    worker.unref();
    this.#all.push(worker);
    this.#idle.push(worker);
  }

  get queued(): number {
    return this.#flushQueue.length + this.#queue.length;
  }

  run(job: Job, transfer: ArrayBuffer[] = []): Promise<BuiltTable[]> {
    if (this.#closed) {
      return Promise.reject(new CairnError("CAIRN_ERR_LSM_CLOSED", "worker pool is closed"));
    }
    const { promise, resolve, reject } = Promise.withResolvers<BuiltTable[]>();
    (job.type === "flush" ? this.#flushQueue : this.#queue).push({
      job,
      transfer,
      resolve,
      reject,
    });
    this.#dispatch();
    return promise;
  }

  #dispatch(): void {
    while (this.queued > 0) {
      if (this.#idle.length === 0) {
        if (this.#all.length >= this.size) return;
        this.#spawn();
      }
      const worker = this.#idle.pop() as Worker;
      const pending = (this.#flushQueue.shift() ?? this.#queue.shift()) as Pending;
      const id = this.#nextId++;
      this.#running.set(id, { worker, pending });
      worker.ref();
      worker.postMessage({ id, job: pending.job }, pending.transfer);
    }
  }

  #onReply(worker: Worker, reply: Reply): void {
    const running = this.#running.get(reply.id);
    if (running === undefined) return;
    this.#running.delete(reply.id);
    worker.unref();
    this.#idle.push(worker);
    if (reply.ok) {
      running.pending.resolve(reply.tables ?? []);
    } else {
      const e = reply.error ?? { message: "unknown worker error" };
      running.pending.reject(
        e.file !== undefined && e.offset !== undefined
          ? new CorruptionError(e.file, e.offset, e.message)
          : new CairnError(e.code ?? "CAIRN_ERR_LSM_JOB", e.message),
      );
    }
    this.#dispatch();
  }

  /**
   * A worker died (an error escaped a job, or its thread ended): fail its job; the next job
   * needing one starts another.
   */
  #onCrash(worker: Worker, err: unknown): void {
    const index = this.#all.indexOf(worker);
    if (index < 0) return; // its 'error', then its 'exit'
    for (const [id, r] of this.#running) {
      if (r.worker === worker) {
        this.#running.delete(id);
        r.pending.reject(err);
      }
    }
    this.#all.splice(index, 1);
    const idle = this.#idle.indexOf(worker);
    if (idle >= 0) this.#idle.splice(idle, 1);
    if (!this.#closed) this.#dispatch();
  }

  async close(): Promise<void> {
    this.#closed = true;
    for (const p of [...this.#flushQueue.splice(0), ...this.#queue.splice(0)]) {
      p.reject(closedError());
    }
    await Promise.all(this.#all.map((w) => w.terminate()));
  }
}

function closedError(): CairnError {
  return new CairnError("CAIRN_ERR_LSM_CLOSED", "worker pool closed");
}
