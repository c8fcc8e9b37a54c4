/**
 * A start that fails on rpc_addr writes nothing that binds the data directory. Seen failing: the
 * node opened its storage (the shard workers' WALs) before it bound rpc_addr, so a first start
 * with shard_workers 2 and a wrong node id on a port in use left wal-worker-0/1, and the next
 * start, on a free port with the defaults, was refused ("was written with shard_workers 2, but
 * shard_workers is 1"), as docs/operations.md says a failed first start never is.
 */
import assert from "node:assert/strict";
import { createSocket, type Socket } from "node:dgram";
import { mkdtemp, readdir, rm } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { startExpectingExit } from "../support/failed-start.ts";
import { freePort } from "../support/ports.ts";
import { startServer } from "../support/server-process.ts";

/** Takes `port` on loopback over TCP (a listener) or UDP (a bound socket); resolves its release. */
async function occupy(protocol: "tcp" | "udp", port: number): Promise<() => Promise<void>> {
  if (protocol === "tcp") {
    const server: Server = createServer();
    await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
    return () => new Promise((resolve) => server.close(() => resolve()));
  }
  const socket: Socket = createSocket("udp4");
  await new Promise<void>((resolve) => socket.bind(port, "127.0.0.1", resolve));
  return () => new Promise((resolve) => socket.close(() => resolve()));
}

describe("a start that fails on rpc_addr", () => {
  for (const [protocol, workers] of [
    ["tcp", "2"],
    ["udp", "2"],
    ["udp", "1"],
  ] as const) {
    it(`leaves a new data directory to the next start (port taken over ${protocol.toUpperCase()}, shard_workers ${workers})`, async () => {
      const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-rpc-first-"));
      try {
        const port = await freePort();
        const release = await occupy(protocol, port);
        try {
          const failed = await startExpectingExit({
            dataDir: dir,
            args: ["--rpc-addr", `127.0.0.1:${port}`, "--node-id", "wrong-id"],
            env: { CAIRN_SHARD_WORKERS: workers },
          });
          assert.equal(failed.code, 1, failed.stderr);
          assert.match(failed.stderr, new RegExp(`127\\.0\\.0\\.1:${port} is already in use`));
          assert.match(failed.stderr, /rpc_addr/);
          assert.equal(failed.errorCode, "CAIRN_ERR_ADDRESS_IN_USE");
          const wals = (await readdir(dir)).filter((n) => n.startsWith("wal"));
          assert.deepEqual(wals, [], "no WAL created by the failed start");
        } finally {
          await release();
        }
        // The next start, on another port with the defaults (shard_workers 1) and node id n1.
        const server = await startServer({ dataDir: dir });
        assert.deepEqual(await server.stop("SIGTERM"), { code: 0, signal: null });
      } finally {
        await rm(dir, { recursive: true, force: true });
      }
    });
  }
});
