/**
 * `cairn health` against a tiny HTTP server on loopback that answers what the test scripts: an
 * answer that is not a Cairn node's /health report (JSON of another shape, a status no node
 * sends) is a failed command, exit 5, never "healthy".
 */
import assert from "node:assert/strict";
import { createServer, type Server } from "node:http";
import type { AddressInfo } from "node:net";
import { networkInterfaces } from "node:os";
import { after, before, describe, it } from "node:test";
import { run } from "../../src/cli/run.ts";
import { type CliRun, runInProcess } from "../support/cli-run.ts";

/** What the server answers next: HTTP status and body. */
let next = { status: 200, body: "" };
let server: Server;
let endpoint = "";

before(async () => {
  server = createServer((_req, res) => {
    res.writeHead(next.status, { "content-type": "application/json" });
    res.end(next.body);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  endpoint = `127.0.0.1:${(server.address() as AddressInfo).port}`;
});

after(() => server.close());

/** `cairn health ARGS` run in this process against the scripted server (or `at`). */
async function health(
  status: number,
  body: string,
  args: readonly string[] = [],
  at = endpoint,
): Promise<CliRun> {
  next = { status, body };
  return runInProcess(run, ["health", "--http-endpoint", at, ...args]);
}

const report = {
  status: "healthy",
  node_id: "n1",
  uptime_seconds: 3.2,
  total_shards: 16,
  active_shards: 16,
  shards: [
    { id: 0, status: "healthy", is_leader: true, raft_term: 2, commit_index: 9, last_applied: 9 },
  ],
  nodes: [],
};

describe("cairn health against answers that are not a node's report", () => {
  it("a node's report: healthy, exit 0; unhealthy (503), exit 3", async () => {
    const ok = await health(200, JSON.stringify(report));
    assert.equal(ok.code, 0, ok.err);
    assert.match(ok.out, /^status: healthy\nnode: n1/);
    const json = await health(200, JSON.stringify(report), ["--output", "json"]);
    assert.deepEqual(JSON.parse(json.out), report);
    const down = await health(503, JSON.stringify({ ...report, status: "unhealthy" }));
    assert.equal(down.code, 3, down.err);
  });

  it("JSON of another shape, with HTTP 200 or 503, is a failed command (exit 5), not a health", async () => {
    const bodies = [
      "{}",
      "[]",
      "null",
      "5",
      '"healthy"',
      '{"status": 5}',
      '{"status": "ok"}',
      JSON.stringify({ ...report, status: "fine" }),
      JSON.stringify({ ...report, node_id: 1 }),
      JSON.stringify({ ...report, total_shards: "16" }),
      JSON.stringify({ ...report, shards: {} }),
      JSON.stringify({ ...report, shards: [null] }),
      JSON.stringify({ ...report, nodes: [{ id: "n2" }] }),
      // A status the HTTP status contradicts: a node answers 503 exactly when unhealthy.
      JSON.stringify({ ...report, status: "unhealthy" }),
    ];
    for (const body of bodies) {
      for (const output of ["text", "json"]) {
        const got = await health(200, body, ["--output", output]);
        assert.equal(got.code, 5, `${body} (${output}): exit ${got.code}, ${got.out}${got.err}`);
        assert.equal(got.out, "", body);
        assert.match(got.err, /not a Cairn node's health report/, body);
      }
    }
    const wrong503 = await health(503, JSON.stringify(report));
    assert.equal(wrong503.code, 5, wrong503.err);
    const empty503 = await health(503, "{}");
    assert.equal(empty503.code, 5, empty503.err);
  });

  it("an HTTP status no node answers /health with is a failed command (exit 5)", async () => {
    const got = await health(404, JSON.stringify(report));
    assert.equal(got.code, 5, got.err);
    assert.match(got.err, /HTTP 404/);
  });

  // The interface of the IPv6 loopback address (`lo` on Linux, `lo0` on macOS), if the host has
  // one: a zone that names it reaches ::1.
  const loopback = Object.entries(networkInterfaces()).find(([, addresses]) =>
    (addresses ?? []).some((a) => a.family === "IPv6" && a.address === "::1"),
  )?.[0];

  it(
    "an IPv6 endpoint with a zone ([::1%lo]:PORT) is asked as the client library asks it",
    { skip: loopback === undefined ? "no IPv6 loopback on this host" : false },
    async () => {
      // The endpoint parser takes a zone, and gRPC connects through it; `cairn health` built a
      // WHATWG URL, which has no zones: "Invalid URL", exit 3 (unavailable), the node not asked.
      const v6 = createServer((_req, res) => {
        res.writeHead(200, { "content-type": "application/json" });
        res.end(JSON.stringify(report));
      });
      await new Promise<void>((resolve) => v6.listen(0, "::1", resolve));
      try {
        const port = (v6.address() as AddressInfo).port;
        const got = await health(200, "", [], `[::1%${loopback}]:${port}`);
        assert.equal(got.code, 0, got.err);
        assert.match(got.out, /^status: healthy\nnode: n1/);
      } finally {
        v6.close();
      }
    },
  );
});

describe("cairn health and metrics read only what they use", () => {
  // They ask the HTTP server, which has neither TLS nor tokens: a profile's CAIRN_TOKEN beside
  // off-host CAIRN_ENDPOINTS, or a CAIRN_CACERT that names no file, failed them with a usage
  // error (exit 2) about a connection they never make.
  const env = {
    CAIRN_ENDPOINTS: "10.0.0.5:7447",
    CAIRN_TOKEN: "a-token-of-the-grpc-commands",
    CAIRN_CACERT: "/nonexistent/ca.crt",
  };

  it("health: the gRPC commands' endpoints, TLS files and token are not read", async () => {
    next = { status: 200, body: JSON.stringify(report) };
    const got = await runInProcess(run, ["health", "--http-endpoint", endpoint], { env });
    assert.equal(got.code, 0, got.err);
    assert.match(got.out, /^status: healthy/);
    const flags = await runInProcess(run, [
      "health",
      "--http-endpoint",
      endpoint,
      "--endpoints",
      "10.0.0.5:7447",
      "--token",
      "a-token-of-the-grpc-commands",
    ]);
    assert.equal(flags.code, 0, flags.err);
  });

  it("metrics: the same", async () => {
    next = { status: 200, body: "raft_term 2\n" };
    const got = await runInProcess(run, ["metrics", "--http-endpoint", endpoint], { env });
    assert.equal(got.code, 0, got.err);
    assert.equal(got.out, "raft_term 2\n");
  });

  it("--output and --timeout still apply, and a bad one is still a usage error", async () => {
    next = { status: 200, body: JSON.stringify(report) };
    const json = await runInProcess(run, ["health", "--http-endpoint", endpoint, "-w", "json"], {
      env,
    });
    assert.equal(json.code, 0, json.err);
    assert.equal(JSON.parse(json.out).status, "healthy");
    const bad = await runInProcess(run, ["metrics", "--http-endpoint", endpoint, "--timeout", "0"]);
    assert.equal(bad.code, 2);
    assert.match(bad.err, /--timeout must be a whole number/);
  });
});
