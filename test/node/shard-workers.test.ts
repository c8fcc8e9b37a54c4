/**
 * The main thread's handle on a shard worker (src/node/shard-workers.ts, WorkerHandle), over a
 * real worker thread that runs a stand-in script: the questions it asks (/health/quick, /health,
 * /metrics), and the workers' stop (stopWorkers), end whatever the thread does. (The real workers:
 * test/e2e/shard-workers.test.ts.)
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { stopWorkers, WorkerHandle } from "../../src/node/shard-workers.ts";
import { createLogger } from "../../src/ops/index.ts";
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

function handle(source: URL, fatal: Error[] = [], index = 0): WorkerHandle {
  return new WorkerHandle(index, {} as ShardWorkerSetup, [], (err) => fatal.push(err), source);
}

/**
 * A worker that drains at "stop" and, at "close", closes its shards (`close`: a statement) and
 * says it stopped.
 */
const stopping = (close: string): URL =>
  script(`
    import { parentPort } from "node:worker_threads";
    parentPort.on("message", (m) => {
      if (m.type === "stop") parentPort.postMessage({ type: "drained" });
      if (m.type === "close") {
        ${close}
        parentPort.postMessage({ type: "stopped" });
      }
    });
  `);

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

  it("a stop ends, a worker that hangs closing its shards terminated after the grace and logged", async () => {
    const fatal: Error[] = [];
    // Its close never ends: its event loop is stuck.
    const hung = handle(stopping("for (;;) {}"), fatal, 1);
    const workers = [handle(stopping(""), fatal, 0), hung];
    const lines: Record<string, unknown>[] = [];
    const log = createLogger({
      sink: { write: (l: string) => lines.push(JSON.parse(l) as Record<string, unknown>) },
    });
    const graceMs = 300;
    const started = performance.now();
    await withTimeout(stopWorkers(workers, 0, log, graceMs), 10_000, "the stop to end");
    assert.ok(performance.now() - started >= graceMs - 5, "the grace was given");
    const said = lines.filter((l) => l["level"] === "ERROR");
    assert.deepEqual(
      said.map((l) => [l["message"], (l["fields"] as Record<string, unknown>)["shard_worker"]]),
      [["a shard worker did not stop in time; its thread is terminated", 1]],
      "the hung worker, and only it, is named",
    );
    assert.deepEqual(fatal, [], "a stop is not a failure");
    await assert.rejects(hung.ask("quick"), /was stopped/);
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
