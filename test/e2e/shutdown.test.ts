/** Graceful shutdown is not held up by open WatchCluster streams (they never end by themselves). */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { connect, type Reply } from "../support/grpc-client.ts";
import { startServer } from "../support/server-process.ts";

describe("graceful shutdown, end to end", () => {
  it("ends open WatchCluster streams and exits 0 well within the drain timeout", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-stop-"));
    try {
      const server = await startServer({ dataDir: dir });
      const c = connect(server.rpc);
      const stream = (
        c.meta as unknown as { WatchCluster: (r: Reply) => NodeJS.EventEmitter }
      ).WatchCluster({});
      const ended = new Promise<void>((resolve) => {
        stream.on("error", () => resolve());
        stream.on("end", () => resolve());
      });
      await new Promise((resolve) => stream.once("data", resolve));
      const started = performance.now();
      const exit = await server.stop("SIGTERM");
      const took = performance.now() - started;
      await ended;
      c.close();
      assert.deepEqual(exit, { code: 0, signal: null });
      // The drain timeout is 10 s; an open watch must not hold the shutdown for it.
      assert.ok(took < 5000, `shutdown took ${Math.round(took)} ms`);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
