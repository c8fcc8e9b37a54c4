import assert from "node:assert/strict";
import { after, describe, it } from "node:test";
import { KIND_PUT } from "../../src/storage/lsm/format.ts";
import { runFlush, tablePath, type Job } from "../../src/storage/lsm/jobs.ts";
import { Memtable } from "../../src/storage/lsm/memtable.ts";
import { WorkerPool } from "../../src/storage/lsm/worker-pool.ts";
import { withTimeout } from "../support/timeout.ts";
import { tempDir } from "./helpers.ts";

const pool = new WorkerPool(1);
after(() => pool.close());

/** A memtable's arena of `n` keys with 1 KiB values. */
function arena(n: number, tag: string): Uint8Array[] {
  const mem = new Memtable();
  for (let i = 0; i < n; i++) {
    mem.put(
      Buffer.from(`${tag}${String(i).padStart(6, "0")}`),
      i + 1,
      KIND_PUT,
      Buffer.alloc(1024, i),
    );
  }
  return mem.arena();
}

describe("worker pool", () => {
  it("runs a flush before compactions queued ahead of it (issue 50, bug 7)", async () => {
    const dir = tempDir("pool");
    // Inputs for four compactions, built here (not through the pool).
    const inputs: string[] = [];
    for (let n = 1; n <= 4; n++) {
      runFlush({
        type: "flush",
        dir,
        numbers: [n],
        arena: arena(2000, `t${n}-`),
        smallestSnapshot: 0,
      });
      inputs.push(tablePath(dir, n));
    }
    const order: string[] = [];
    const runs: Promise<unknown>[] = [];
    const run = (name: string, job: Job): void => {
      runs.push(pool.run(job).then(() => order.push(name)));
    };
    for (let c = 0; c < 4; c++) {
      run(`compact ${c}`, {
        type: "compact",
        dir,
        numbers: [100 + 10 * c, 101 + 10 * c],
        inputs: [inputs[c] as string],
        targetFileBytes: Infinity,
        smallestSnapshot: 0,
        bottom: true,
      });
    }
    run("flush", {
      type: "flush",
      dir,
      numbers: [500],
      arena: arena(10, "f"),
      smallestSnapshot: 0,
    });
    assert.equal(pool.queued, 4, "one job runs, four wait");
    await Promise.all(runs);
    // The one worker was busy with the first compaction; the flush goes next.
    assert.deepEqual(order, ["compact 0", "flush", "compact 1", "compact 2", "compact 3"]);
  });

  it("a job whose thread exits without an error (process.exit) fails, and the next job gets a new thread", async () => {
    // A stand-in for worker.ts: it ends its thread, with no error event, on a job for "exit",
    // and answers any other with no tables.
    const script = new URL(
      `data:text/javascript,${encodeURIComponent(`
        import { parentPort } from "node:worker_threads";
        parentPort.on("message", ({ id, job }) => {
          if (job.dir === "exit") process.exit(3);
          parentPort.postMessage({ id, ok: true, tables: [] });
        });
      `)}`,
    );
    const one = new WorkerPool(1, script);
    const job = (dir: string): Job => ({
      type: "flush",
      dir,
      numbers: [1],
      arena: [],
      smallestSnapshot: 0,
    });
    try {
      await withTimeout(
        assert.rejects(one.run(job("exit")), {
          code: "CAIRN_ERR_LSM_JOB",
          message: /exited \(code 3\)/,
        }),
        10_000,
        "the job of the thread that exited to settle",
      );
      assert.equal(one.started, 0, "the thread that ended is out of the pool");
      const tables = await withTimeout(one.run(job("table")), 10_000, "the next job");
      assert.deepEqual(tables, []);
      assert.equal(one.started, 1, "a new thread took it");
    } finally {
      await one.close();
    }
  });

  it("starts a thread only when a job needs one, and never more than its size", async () => {
    const two = new WorkerPool(2);
    try {
      assert.equal(two.started, 0, "none at construction");
      const dir = tempDir("pool-lazy");
      const flush = (n: number): Job => ({
        type: "flush",
        dir,
        numbers: [n],
        arena: arena(10, `l${n}-`),
        smallestSnapshot: 0,
      });
      await two.run(flush(1));
      assert.equal(two.started, 1, "one job, one thread");
      await two.run(flush(2));
      assert.equal(two.started, 1, "an idle thread is used again");
      await Promise.all([3, 4, 5, 6].map((n) => two.run(flush(n))));
      assert.equal(two.started, 2, "four at once: the pool's two");
    } finally {
      await two.close();
    }
  });
});
