/**
 * The main thread's handle on a shard worker (src/node/shard-workers.ts, WorkerHandle), over a
 * real worker thread that runs a stand-in script: the questions it asks (/health/quick, /health,
 * /metrics) settle whatever the thread does. (The real workers: test/e2e/shard-workers.test.ts.)
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { WorkerHandle } from "../../src/node/shard-workers.ts";
import type { ShardWorkerSetup } from "../../src/node/worker-protocol.ts";
import { withTimeout } from "../support/timeout.ts";

/** A worker thread running `source` (an ES module). */
const script = (source: string): URL =>
  new URL(`data:text/javascript,${encodeURIComponent(source)}`);

/** A worker that reads the main thread's messages and never answers one (a stuck worker). */
const SILENT = script(`
  import { parentPort } from "node:worker_threads";
  parentPort.on("message", () => {});
`);

function handle(source: URL, fatal: Error[] = []): WorkerHandle {
  return new WorkerHandle(0, {} as ShardWorkerSetup, [], (err) => fatal.push(err), source);
}

describe("a shard worker's handle", () => {
  it("a question in flight when the thread is ended fails, rather than waiting for ever", async () => {
    const fatal: Error[] = [];
    const worker = handle(SILENT, fatal);
    let outcome = "pending";
    const asked = worker.ask("metrics").then(
      () => (outcome = "answered"),
      () => (outcome = "failed"),
    );
    await worker.terminate();
    await withTimeout(asked, 2_000, "the question to settle").catch(() => undefined);
    assert.equal(outcome, "failed", "an HTTP request waiting on it would hold the stop");
    assert.deepEqual(fatal, [], "a stop is not a failure");
    await assert.rejects(worker.ask("quick"), /was stopped/);
  });

  it("a worker that does not answer the quick check (stuck) makes it fail within a second, not hang", async () => {
    const worker = handle(SILENT);
    try {
      const started = performance.now();
      await withTimeout(
        assert.rejects(worker.ask("quick"), /did not answer/),
        5_000,
        "the quick check's answer",
      );
      // The probes (deploy/k8s) time out after 2 s: a 503 must come before that.
      assert.ok(performance.now() - started < 2_000);
    } finally {
      await worker.terminate();
    }
  });
});
