/**
 * `cairn health` and `cairn metrics` reach a node whatever port its HTTP server has. Seen
 * failing: they used fetch, which refuses the WHATWG "bad ports" without trying (6000, 6665–6669,
 * 10080, …): `cairn health --quick --http-endpoint 127.0.0.1:6000` said "unavailable: bad port"
 * and exited 3, a code that says "retry" for a call that could never succeed.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { createServer as createHttpServer } from "node:http";
import { createServer, type AddressInfo } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { claimPort } from "../support/ports.ts";
import { runCairn, startServer } from "../support/server-process.ts";

/** Unprivileged ports of fetch's list of bad ports (fetch.spec.whatwg.org, "bad port"). */
const BAD_PORTS = [
  6000, 6665, 6666, 6667, 6668, 6669, 10080, 6679, 6697, 5060, 5061, 6566, 4190, 4045, 3659, 2049,
  1719, 1720, 1723,
];

/** Whether a TCP listener can take 127.0.0.1:port now. */
function bindsTcp(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const srv = createServer();
    srv.once("error", () => resolve(false));
    srv.listen({ port, host: "127.0.0.1", exclusive: true }, () => srv.close(() => resolve(true)));
  });
}

/** A bad port free on loopback, claimed against the other test files; null when none is. */
async function freeBadPort(): Promise<number | null> {
  for (const port of BAD_PORTS) if (claimPort(port) && (await bindsTcp(port))) return port;
  return null;
}

describe("cairn health and metrics on any HTTP port", () => {
  it("answer for a node whose http_addr is one of fetch's bad ports", async (t) => {
    const port = await freeBadPort();
    if (port === null) {
      t.skip(`every port of ${BAD_PORTS.join(", ")} is taken on this machine`);
      return;
    }
    const dir = await mkdtemp(join(tmpdir(), "cairn-e2e-bad-port-"));
    try {
      const server = await startServer({
        dataDir: dir,
        args: ["--http-addr", `127.0.0.1:${port}`],
      });
      try {
        assert.equal(server.http, `127.0.0.1:${port}`);
        const endpoint = ["--http-endpoint", server.http];
        const quick = await runCairn(["health", "--quick", ...endpoint]);
        assert.equal(quick.code, 0, quick.err);
        assert.equal(quick.out, "OK\n");
        const report = await runCairn(["health", "--output", "json", ...endpoint]);
        assert.equal(report.code, 0, report.err);
        assert.equal((JSON.parse(report.out) as { status: string }).status, "healthy");
        const metrics = await runCairn(["metrics", ...endpoint]);
        assert.equal(metrics.code, 0, metrics.err);
        assert.match(metrics.out, /# TYPE kv_requests_total counter/);
      } finally {
        assert.deepEqual(await server.stop("SIGTERM"), { code: 0, signal: null });
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  it("keep the command's deadline for an answer that never ends, and bound its size", async () => {
    // One server: /health/quick sends its headers and then nothing; /metrics sends more than
    // the 64 MiB an answer may hold, and more, until its client goes.
    const chunk = Buffer.alloc(1024 * 1024, 0x61);
    const server = createHttpServer((req, res) => {
      res.writeHead(200, { "content-type": "text/plain" });
      if (req.url === "/health/quick") {
        res.flushHeaders();
        return;
      }
      const more = (): void => {
        while (res.write(chunk));
        if (!res.destroyed) res.once("drain", more);
      };
      more();
    });
    await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
    const endpoint = `127.0.0.1:${(server.address() as AddressInfo).port}`;
    try {
      const started = performance.now();
      const stuck = await runCairn([
        "health",
        "--quick",
        "--http-endpoint",
        endpoint,
        "--timeout",
        "500",
      ]);
      assert.equal(stuck.code, 3, stuck.err);
      assert.match(stuck.err, new RegExp(`unavailable: ${endpoint.replace(/\./g, "\\.")}: `));
      assert.ok(performance.now() - started < 10_000, "the deadline held");
      const big = await runCairn(["metrics", "--http-endpoint", endpoint, "--timeout", "20000"]);
      assert.equal(big.code, 3, big.err);
      assert.match(big.err, /larger than 67108864 bytes/);
      assert.equal(big.out, "");
    } finally {
      server.closeAllConnections();
      server.close();
    }
  });
});
