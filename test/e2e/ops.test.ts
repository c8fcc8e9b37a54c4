/**
 * End to end, against the real process: the operators' HTTP endpoints exactly as the contract
 * says, JSON logs, configuration precedence and errors, and start-up failures.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { createSocket } from "node:dgram";
import { createServer, type Server } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CATALOGUE, checkHistogram, familyTypes, samples } from "../ops/prom-text.ts";
import { connect } from "../support/grpc-client.ts";
import { cleanEnv, type Exit, spawnCairn, startServer } from "../support/server-process.ts";
import { writeReplayFixture } from "../support/wal-fixture.ts";

let dir: string;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "cairn-e2e-ops-"));
});
after(async () => {
  await rm(dir, { recursive: true, force: true });
});

/** Runs `cairn` to completion; returns its exit and output. */
function run(
  args: string[],
  env: Record<string, string> = {},
): Promise<Exit & { stdout: string; stderr: string }> {
  const proc = spawnCairn(args, cleanEnv(env));
  let stdout = "";
  let stderr = "";
  proc.stdout?.on("data", (d: Buffer) => {
    stdout += d.toString();
  });
  proc.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  return new Promise((resolve) =>
    proc.once("exit", (code, signal) => resolve({ code, signal, stdout, stderr })),
  );
}

describe("operators' HTTP interface, end to end", () => {
  it("serves /health/quick, /health and /metrics exactly as the contract says", async () => {
    const server = await startServer({ dataDir: join(dir, "main") });
    try {
      const base = `http://${server.http}`;
      const c = connect(server.rpc);
      for (let i = 0; i < 20; i++)
        await c.call(c.kv, "Put", { key: Buffer.from(`m${i}`), value: Buffer.from("v") });
      await c.call(c.kv, "Get", { key: Buffer.from("m1") });
      await c.call(c.kv, "Get", { key: Buffer.from("absent") });
      await c
        .call(c.kv, "Put", { key: Buffer.alloc(0), value: Buffer.from("v") })
        .catch(() => undefined);
      c.close();

      const quick = await fetch(`${base}/health/quick`);
      assert.equal(quick.status, 200);
      assert.match(quick.headers.get("content-type") ?? "", /^text\/plain/);
      assert.equal(await quick.text(), "OK");

      const health = await fetch(`${base}/health`);
      assert.equal(health.status, 200);
      const report = (await health.json()) as Record<string, unknown>;
      assert.equal(report["status"], "healthy");
      assert.equal(report["node_id"], "n1");
      assert.equal(report["total_shards"], 1024);
      assert.equal(typeof report["uptime_seconds"], "number");
      const shards = report["shards"] as Record<string, unknown>[];
      assert.equal(report["active_shards"], shards.length);
      assert.ok(shards.length > 1, "the writes activated several shards");
      for (const s of shards) {
        assert.deepEqual(Object.keys(s).sort(), [
          "commit_index",
          "id",
          "is_leader",
          "last_applied",
          "raft_term",
          "status",
        ]);
        assert.equal(s["is_leader"], true);
      }
      assert.deepEqual(report["nodes"], [
        { id: "n1", rpc_addr: server.rpc, http_addr: server.http, state: "alive" },
      ]);

      const metrics = await fetch(`${base}/metrics`);
      assert.equal(metrics.status, 200);
      assert.equal(metrics.headers.get("content-type"), "text/plain; version=0.0.4");
      const text = await metrics.text();
      const types = familyTypes(text);
      for (const [name, type] of CATALOGUE) assert.equal(types.get(name), type, `family ${name}`);
      const all = samples(text);
      const count = (name: string, labels: Record<string, string>): number =>
        all
          .filter(
            (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
          )
          .reduce((a, s) => a + s.value, 0);
      assert.ok(count("kv_requests_total", { operation: "put", status: "success" }) >= 20);
      // The empty key is the client's mistake (invalid), not the server's error.
      assert.equal(count("kv_requests_total", { operation: "put", status: "invalid" }), 1);
      assert.equal(count("kv_requests_total", { operation: "put", status: "error" }), 0);
      assert.equal(
        count("kv_request_duration_ms_count", {
          operation: "get",
          status: "success",
          result: "found",
        }),
        1,
      );
      assert.equal(
        count("kv_request_duration_ms_count", {
          operation: "get",
          status: "success",
          result: "not_found",
        }),
        1,
      );
      checkHistogram(text, "kv_request_duration_ms", [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]);
      // Every acknowledged Put waited for a durable WAL write: the node counts them.
      assert.ok(count("cairn_wal_write_duration_seconds_count", {}) >= 1);
      assert.ok(count("cairn_wal_written_bytes_total", {}) > 20 * 10);
      assert.ok(count("raft_term", { shard_id: "0" }) >= 1);
      assert.ok(count("raft_commit_index", { shard_id: "0", node_id: "n1" }) >= 1);
      assert.equal(count("swim_cluster_size", {}), 1);
      assert.ok(count("process_resident_memory_bytes", {}) > 0);
      // The 20 writes sit in memtables far from their flush size: the gauge shows them all the
      // same (it is read at the scrape, not reported only when a memtable rotates).
      assert.ok(
        count("lsm_memtable_size_bytes", {}) >= 20 * 3,
        `lsm_memtable_size_bytes: ${count("lsm_memtable_size_bytes", {})}`,
      );

      // Every active shard has its tables' series, one per level, though a new engine reports
      // nothing at its open (they are read from the open engines at the scrape).
      for (const s of shards) {
        const levels = all.filter(
          (x) => x.name === "lsm_sstable_count" && x.labels["shard_id"] === String(s["id"]),
        );
        assert.deepEqual(
          levels.map((x) => x.labels["level"]).sort(),
          ["L0", "L1", "L2", "L3", "L4", "L5", "L6"],
          `shard ${String(s["id"])}`,
        );
        assert.ok(levels.every((x) => x.value === 0));
      }

      const missing = await fetch(`${base}/nope`);
      assert.equal(missing.status, 404);
      const post = await fetch(`${base}/health`, { method: "POST" });
      assert.equal(post.status, 405);
    } finally {
      assert.deepEqual(await server.stop(), { code: 0, signal: null });
    }
    // Every log line is one JSON object with the five fields, and no key or value appears.
    assert.ok(server.lines.length >= 3);
    for (const line of server.lines) {
      const rec = JSON.parse(line) as Record<string, unknown>;
      assert.deepEqual(
        Object.keys(rec).sort(),
        ["fields", "level", "message", "target", "timestamp"],
        line,
      );
      assert.ok(!Number.isNaN(Date.parse(String(rec["timestamp"]))));
      assert.match(String(rec["level"]), /^(TRACE|DEBUG|INFO|WARN|ERROR)$/);
      assert.equal(typeof rec["fields"], "object");
      assert.ok(!line.includes("m1"), `a key leaked into a log line: ${line}`);
    }
  });

  it("answers 503 UNAVAILABLE while shard 0 has no leader, then 200 OK", async () => {
    const data = join(dir, "replay");
    // A long committed log left by a crash: the node replays it before shard 0 can lead.
    await writeReplayFixture(data, "n1", 100_000);
    const server = await startServer({ dataDir: data, untilHttp: true });
    try {
      const seen: number[] = [];
      const deadline = performance.now() + 60_000;
      while (performance.now() < deadline) {
        const res = await fetch(`http://${server.http}/health/quick`);
        const body = await res.text();
        assert.equal(body, res.status === 200 ? "OK" : "UNAVAILABLE");
        if (seen[seen.length - 1] !== res.status) seen.push(res.status);
        if (res.status === 200) break;
      }
      assert.deepEqual(seen, [503, 200]);
      // Shard 0 leads but may still be applying the replayed log: healthy or degraded, never down.
      const health = await fetch(`http://${server.http}/health`);
      assert.equal(health.status, 200);
      assert.match(((await health.json()) as { status: string }).status, /^(healthy|degraded)$/);
    } finally {
      assert.equal((await server.stop()).code, 0);
    }
  });

  it("drains and exits 0 on a SIGTERM that arrives while the node is still starting", async () => {
    // A long log to replay keeps start() running after the HTTP server listens: the signal lands
    // inside it. Before the handlers were installed first, the default action killed the node.
    const data = join(dir, "sigterm-starting");
    await writeReplayFixture(data, "n1", 20_000);
    const server = await startServer({ dataDir: data, untilHttp: true });
    assert.deepEqual(await server.stop("SIGTERM"), { code: 0, signal: null });
    assert.ok(
      server.lines.some((l) => l.includes('"shutting down"')),
      "the node logs its shutdown",
    );
  });

  it("answers 404 'metrics export disabled' when telemetry.prometheus.enabled is false", async () => {
    const server = await startServer({
      dataDir: join(dir, "nometrics"),
      env: { CAIRN_TELEMETRY_PROMETHEUS_ENABLED: "false" },
    });
    try {
      const res = await fetch(`http://${server.http}/metrics`);
      assert.equal(res.status, 404);
      assert.equal(await res.text(), "metrics export disabled");
    } finally {
      await server.stop();
    }
  });
});

describe("configuration, end to end", () => {
  it("takes defaults < YAML file < CAIRN_* environment < flags", async () => {
    const file = join(dir, "cairn.yaml");
    await writeFile(file, "node_id: from-file\ncluster:\n  total_shards: 64\n");
    const nodeIdOf = async (
      args: string[],
      env: Record<string, string>,
    ): Promise<[string, number]> => {
      const server = await startServer({
        dataDir: join(dir, `prec-${args.length}-${Object.keys(env).length}`),
        args: ["--config", file, ...args],
        env,
      });
      try {
        const report = (await (await fetch(`http://${server.http}/health`)).json()) as {
          node_id: string;
          total_shards: number;
        };
        return [report.node_id, report.total_shards];
      } finally {
        await server.stop();
      }
    };
    // startServer passes --node-id n1; a later flag wins over it, so the file and env cases
    // are checked through keys the harness does not set.
    assert.deepEqual(await nodeIdOf([], {}), ["n1", 64]);
    assert.deepEqual(await nodeIdOf([], { CAIRN_CLUSTER_TOTAL_SHARDS: "32" }), ["n1", 32]);
    assert.deepEqual(await nodeIdOf(["--node-id", "from-flag"], { CAIRN_NODE_ID: "from-env" }), [
      "from-flag",
      64,
    ]);
  });

  it("uses the file, then the environment, for the node id", async () => {
    const file = join(dir, "cairn-id.yaml");
    await writeFile(file, "node_id: from-file\nrpc_addr: 127.0.0.1:0\nhttp_addr: 127.0.0.1:0\n");
    const idWith = async (env: Record<string, string>, data: string): Promise<string> => {
      const proc = spawnCairn(
        ["serve", "--config", file, "--data-dir", join(dir, data)],
        cleanEnv(env),
      );
      const line = await new Promise<string>((resolve, reject) => {
        let buf = "";
        proc.stdout?.on("data", (d: Buffer) => {
          buf += d.toString();
          const started = buf.split("\n").find((l) => l.includes('"node started"'));
          if (started !== undefined) resolve(started);
        });
        proc.once("exit", () => reject(new Error(`exited before starting: ${buf}`)));
      });
      proc.kill("SIGTERM");
      await new Promise((r) => proc.once("exit", r));
      return (JSON.parse(line) as { fields: { node_id: string } }).fields.node_id;
    };
    assert.equal(await idWith({}, "id-file"), "from-file");
    assert.equal(await idWith({ CAIRN_NODE_ID: "from-env" }, "id-env"), "from-env");
  });

  it("rejects a bad configuration with a message naming the key, exit code 2", async () => {
    const file = join(dir, "bad.yaml");
    await writeFile(file, "cluster:\n  total_shards: lots\nunknown_key: 1\n");
    const r = await run(["serve", "--config", file, "--data-dir", join(dir, "bad")]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /cluster\.total_shards/);
    assert.match(r.stderr, /unknown_key/);
    const flag = await run([
      "serve",
      "--rpc-addr",
      "not-an-address",
      "--data-dir",
      join(dir, "bad2"),
    ]);
    assert.equal(flag.code, 2);
    assert.match(flag.stderr, /rpc_addr/);
    const usage = await run(["serve", "--no-such-flag"]);
    assert.equal(usage.code, 2);
  });

  it("fails to start with exit code 1 and names the address and setting when a port is taken", async () => {
    const blocker: Server = createServer();
    await new Promise<void>((resolve) => blocker.listen(0, "127.0.0.1", resolve));
    const port = (blocker.address() as { port: number }).port;
    try {
      const http = await run([
        "serve",
        "--http-addr",
        `127.0.0.1:${port}`,
        "--rpc-addr",
        "127.0.0.1:0",
        "--data-dir",
        join(dir, "inuse1"),
      ]);
      assert.equal(http.code, 1);
      assert.match(http.stderr, new RegExp(`127\\.0\\.0\\.1:${port}`));
      assert.match(http.stderr, /http_addr/);
      const rpc = await run([
        "serve",
        "--rpc-addr",
        `127.0.0.1:${port}`,
        "--http-addr",
        "127.0.0.1:0",
        "--data-dir",
        join(dir, "inuse2"),
      ]);
      assert.equal(rpc.code, 1);
      assert.match(rpc.stderr, new RegExp(`127\\.0\\.0\\.1:${port}`));
      assert.match(rpc.stderr, /rpc_addr/);
    } finally {
      blocker.close();
    }
  });

  it("refuses to share rpc_addr with a running node (SO_REUSEPORT would let it), for any shard_workers", async () => {
    // Seen failing: the gRPC listeners bind with SO_REUSEPORT (the I/O threads and shard workers
    // share the port), so a second node of the same user bound the first one's port too, took
    // some of its new connections, and only failed later, binding SWIM's UDP port, with
    // "bind EADDRINUSE" (CAIRN_ERR_INTERNAL) instead of naming the setting.
    const first = await startServer({ dataDir: join(dir, "holder") });
    const c = connect(first.rpc);
    try {
      await c.call(c.kv, "Put", { key: Buffer.from("mine"), value: Buffer.from("1") });
      // SWIM's UDP socket on the same port number, taken by another process: named too.
      const udp = createSocket("udp4");
      await new Promise<void>((resolve) => udp.bind(0, "127.0.0.1", resolve));
      const udpPort = udp.address().port;
      try {
        // The three intruders at once: each refusal stands alone (its own data directory; the
        // first node holds the rpc port, the socket above the other).
        const [one, two, third] = await Promise.all([
          ...["1", "2"].map((workers) =>
            run(
              [
                "serve",
                "--rpc-addr",
                first.rpc,
                "--http-addr",
                "127.0.0.1:0",
                "--data-dir",
                join(dir, `intruder-${workers}`),
              ],
              { CAIRN_SHARD_WORKERS: workers },
            ),
          ),
          run([
            "serve",
            "--rpc-addr",
            `127.0.0.1:${udpPort}`,
            "--http-addr",
            "127.0.0.1:0",
            "--data-dir",
            join(dir, "intruder-udp"),
          ]),
        ]);
        for (const second of [one, two]) {
          assert.ok(second !== undefined);
          assert.equal(second.code, 1, second.stderr);
          assert.match(
            second.stderr,
            new RegExp(
              `address ${first.rpc.replace(/\./g, "\\.")} is already in use \\(rpc_addr\\)`,
            ),
          );
        }
        assert.ok(third !== undefined);
        assert.equal(third.code, 1, third.stderr);
        assert.match(
          third.stderr,
          new RegExp(`127\\.0\\.0\\.1:${udpPort} is already in use \\(rpc_addr`),
        );
      } finally {
        udp.close();
      }
      // The first node still serves on its address.
      const got = await c.call(c.kv, "Get", { key: Buffer.from("mine") });
      assert.equal((got["value"] as Buffer).toString(), "1");
    } finally {
      c.close();
      assert.deepEqual(await first.stop("SIGTERM"), { code: 0, signal: null });
    }
  });

  it("prints help for the command and for serve", async () => {
    const top = await run(["--help"]);
    assert.equal(top.code, 0);
    assert.match(top.stdout, /serve/);
    const serveHelp = await run(["serve", "--help"]);
    assert.equal(serveHelp.code, 0);
    assert.match(serveHelp.stdout, /--rpc-addr/);
    assert.match(serveHelp.stdout, /Exit codes/);
  });
});
