/** Entry point of a compaction worker thread: runs jobs from the pool, one at a time. */
import { parentPort } from "node:worker_threads";
import { CorruptionError } from "../common/index.ts";
import { runJob, type Job } from "./jobs.ts";

const port = parentPort;
if (port === null) throw new Error("worker.ts must run in a worker thread");
port.on("message", (msg: { id: number; job: Job }) => {
  try {
    port.postMessage({ id: msg.id, ok: true, tables: runJob(msg.job) });
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
  }
});
