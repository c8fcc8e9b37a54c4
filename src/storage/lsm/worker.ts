/** Entry point of a compaction worker thread: runs jobs from the pool, one at a time. */
import { parentPort } from "node:worker_threads";
import { CorruptionError } from "../common/index.ts";
import { BufferPool } from "./buffer-pool.ts";
import { releaseFlushScratch, runJob, type Job } from "./jobs.ts";

/**
 * What the pool keeps between jobs: a compaction of L0 into L1 reads a few tables of the
 * memtable's size and L1's overlapping 2 MiB tables whole, and builds one table at a time.
 */
const POOL_BYTES = 64 * 1024 * 1024;
/** A worker with no job for this long lets its pool's buffers (and a flush's arrays) go. */
const POOL_IDLE_MS = 2_000;

const port = parentPort;
if (port === null) throw new Error("worker.ts must run in a worker thread");
const pool = new BufferPool(POOL_BYTES);
const idle = setTimeout(() => {
  pool.clear();
  releaseFlushScratch();
}, POOL_IDLE_MS).unref();
port.on("message", (msg: { id: number; job: Job }) => {
  try {
    port.postMessage({ id: msg.id, ok: true, tables: runJob(msg.job, pool) });
  } catch (err) {
    const e = err as Error & { code?: string };
    port.postMessage({
      id: msg.id,
      ok: false,
      error: {
        message: e.message,
        code: e.code,
        ...(err instanceof CorruptionError
          ? { file: err.file, offset: err.offset, message: err.what }
          : {}),
      },
    });
  } finally {
    idle.refresh();
  }
});
