/**
 * The main thread's side of the gRPC I/O threads (src/api/io-threads.ts), over a real worker
 * thread that runs a stand-in script: an I/O thread that ended on its own does not hold the
 * node's stop. (The real threads: test/api/h2-limits.test.ts, test/e2e/io-threads.test.ts.)
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { IoThreads, MethodTable } from "../../src/api/io-threads.ts";
import { withTimeout } from "../support/timeout.ts";

/** A worker thread running `source` (an ES module). */
const script = (source: string): URL =>
  new URL(`data:text/javascript,${encodeURIComponent(source)}`);

describe("gRPC I/O threads", () => {
  it("a thread that ended (crashed) before the stop does not hold the stop", async () => {
    // Listens, then ends as a crash would.
    const crashing = script(`
      import { parentPort } from "node:worker_threads";
      parentPort.postMessage({ kind: "listening", port: 1 });
      setImmediate(() => process.exit(3));
    `);
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
      threadScript: crashing,
    });
    assert.equal(await threads.start(), 1);
    assert.match((await failure).message, /exited with code 3/);
    // The node stops after the failure: its gRPC server's close waits for the threads.
    await withTimeout(threads.close(100), 5_000, "the stop of a node whose I/O thread crashed");
  });
});
