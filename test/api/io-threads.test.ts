/**
 * The main thread's side of the gRPC I/O threads (src/api/io-threads.ts), over a real worker
 * thread that runs a stand-in script: an I/O thread that ended on its own does not hold the
 * node's stop. (The real threads: test/api/h2-limits.test.ts, test/e2e/io-threads.test.ts.)
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { IoThreads, MethodTable } from "../../src/api/io-threads.ts";
import { withTimeout } from "../support/timeout.ts";

/** A worker thread running `source` (an ES module). */
const script = (source: string): URL =>
  new URL(`data:text/javascript,${encodeURIComponent(source)}`);

/** One I/O thread running `threadScript`; `failure` is the first failure it reports. */
function ioThreads(threadScript: URL): { threads: IoThreads; failure: Promise<Error> } {
  let failed!: (err: Error) => void;
  const failure = new Promise<Error>((resolve) => (failed = resolve));
  const threads = new IoThreads({
    count: 1,
    host: "127.0.0.1",
    port: 0,
    mainAddress: "127.0.0.1:1",
    internalKey: "test",
    table: new MethodTable(),
    serverOptions: {},
    onFailure: (err) => failed(err),
    threadScript,
  });
  return { threads, failure };
}

describe("gRPC I/O threads", () => {
  it("a thread that ended (crashed) before the stop does not hold the stop", async () => {
    // Listens, then ends as a crash would.
    const crashing = script(`
      import { parentPort } from "node:worker_threads";
      parentPort.postMessage({ kind: "listening", port: 1 });
      setImmediate(() => process.exit(3));
    `);
    const { threads, failure } = ioThreads(crashing);
    assert.equal(await threads.start(), 1);
    assert.match(
      (await withTimeout(failure, 5_000, "the node hearing of its thread's end")).message,
      /exited with code 3/,
    );
    // The node stops after the failure: its gRPC server's close waits for the threads.
    await withTimeout(threads.close(100), 5_000, "the stop of a node whose I/O thread crashed");
  });

  it("a thread that ends at once after it listens is heard (both emitted together)", async (t) => {
    // A Worker that exits before the main thread read its messages has them emitted at its
    // exit, its "exit" right after: the exit listener added once "listening" was awaited missed
    // it, and the node never learnt that its I/O thread was gone (seen as a CI hang).
    const dir = mkdtempSync(join(tmpdir(), "cairn-io-"));
    t.after(() => rmSync(dir, { recursive: true, force: true }));
    const flag = join(dir, "ended");
    const crashing = script(`
      import { parentPort } from "node:worker_threads";
      import { writeFileSync } from "node:fs";
      parentPort.postMessage({ kind: "listening", port: 1 });
      writeFileSync(${JSON.stringify(flag)}, "");
      process.exit(3);
    `);
    const { threads, failure } = ioThreads(crashing);
    const started = threads.start();
    // The main thread busy until the thread has ended: its messages wait for the exit.
    const pause = new Int32Array(new SharedArrayBuffer(4));
    for (let i = 0; i < 1000 && !existsSync(flag); i++) Atomics.wait(pause, 0, 0, 10);
    Atomics.wait(pause, 0, 0, 200);
    assert.equal(await started, 1);
    assert.match(
      (await withTimeout(failure, 5_000, "the node hearing of its thread's end")).message,
      /exited with code 3/,
    );
    await withTimeout(threads.close(100), 5_000, "the stop");
  });

  it("a thread that ends before it listens fails the start (it waited for ever)", async () => {
    const { threads } = ioThreads(script(`process.exit(4);`));
    await assert.rejects(
      withTimeout(threads.start(), 5_000, "the start"),
      /exited with code 4 before it listened/,
    );
  });
});
