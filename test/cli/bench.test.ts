/** `cairn bench` end to end against a real server, and its workload generator. */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { keyOf, operations, seededRandom, zipfian } from "../../src/cli/bench-workload.ts";
import { run } from "../../src/cli/run.ts";
import { runInProcess } from "../support/cli-run.ts";
import { freePort } from "../support/ports.ts";
import { CAIRN, cleanEnv, ROOT, startServer } from "../support/server-process.ts";

/** A TCP port nothing listens on: bound, read, closed. */
/**
 * A port nothing listens on: below Linux's ephemeral range and claimed (freePort). One probed
 * free at port 0 and released was ephemeral, and another test's process bound it meanwhile: the
 * calls failed at once, 996 of them, not at their deadline (a CI run).
 */
function closedPort(): Promise<number> {
  return freePort();
}

/** `cairn bench ARGS --output json`; `onStderr` sees the whole stderr so far at each chunk. */
async function bench(
  args: readonly string[],
  onStderr: (err: string) => void = () => {},
): Promise<{ code: number | null; out: string; err: string }> {
  const proc = spawn(CAIRN, ["bench", ...args, "--output", "json"], {
    cwd: ROOT,
    env: cleanEnv(),
  });
  let out = "";
  let err = "";
  proc.stdout.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr.on("data", (d: Buffer) => {
    err += d.toString();
    onStderr(err);
  });
  const code = await new Promise<number | null>((r) => proc.once("close", r));
  return { code, out, err };
}

describe("cairn bench", () => {
  it("runs a 3-second mixed workload; its JSON has nonzero throughput and no errors", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cairn-bench-"));
    const server = await startServer({ dataDir: dir });
    try {
      const proc = spawn(
        CAIRN,
        [
          "bench",
          "mixed",
          "--read-ratio",
          "0.5",
          "--duration",
          "3",
          "--warmup",
          "0.5",
          "--keyspace",
          "200",
          "--concurrency",
          "16",
          "--channels",
          "2",
          "--distribution",
          "zipfian",
          "--output",
          "json",
        ],
        { cwd: ROOT, env: cleanEnv({ CAIRN_ENDPOINTS: server.rpc }) },
      );
      let out = "";
      let err = "";
      proc.stdout.on("data", (d: Buffer) => (out += d.toString()));
      proc.stderr.on("data", (d: Buffer) => (err += d.toString()));
      const code = await new Promise<number | null>((r) => proc.once("close", r));
      assert.equal(code, 0, err);
      const r = JSON.parse(out) as {
        ops_per_sec: number;
        error_count: number;
        errors: Record<string, number>;
        duration_s: number;
        latency_ms: Record<string, number>;
        by_operation: Record<string, { ops: number }>;
        client_cpu_percent: number;
      };
      assert.ok(r.ops_per_sec > 0);
      assert.equal(r.error_count, 0, JSON.stringify(r.errors));
      assert.ok(r.duration_s >= 2.9 && r.duration_s <= 3.5, String(r.duration_s));
      assert.ok((r.by_operation["put"]?.ops ?? 0) > 0 && (r.by_operation["get"]?.ops ?? 0) > 0);
      const l = r.latency_ms as {
        p50: number;
        p90: number;
        p99: number;
        p999: number;
        max: number;
      };
      assert.ok(
        0 < l.p50 && l.p50 <= l.p90 && l.p90 <= l.p99 && l.p99 <= l.p999 && l.p999 <= l.max,
      );
      assert.ok(r.client_cpu_percent > 0);
      assert.match(err, /fill: 200 keys/);
      assert.match(err, /^run: /m, "plain progress lines when not a terminal");
    } finally {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("exits non-zero when every operation failed, even those that fail after the run's end", async () => {
    // Nothing listens there; each of the 4 operations in flight fails only once its 3 s deadline
    // passes, after the run ended: those failures were dropped, and it exited 0.
    const dead = await closedPort();
    const r = await bench([
      "put",
      "--endpoints",
      `127.0.0.1:${dead}`,
      "--timeout",
      "3000",
      "--duration",
      "1",
      "--warmup",
      "0.5",
      "--concurrency",
      "4",
      "--channels",
      "1",
    ]);
    assert.notEqual(r.code, 0, r.err);
    const result = JSON.parse(r.out) as { error_count: number; ops: number };
    assert.equal(result.error_count, 4, "every operation issued failed, and is reported");
    assert.equal(result.ops, 0);
  });

  it("exits non-zero and counts every error when the server dies mid-run", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cairn-bench-"));
    const server = await startServer({ dataDir: dir });
    try {
      const run = bench(
        [
          "put",
          "--endpoints",
          server.rpc,
          "--timeout",
          "1000",
          "--duration",
          "4",
          "--warmup",
          "0",
          "--concurrency",
          "4",
          "--channels",
          "1",
        ],
        // The server dies once the run has measured a second (its progress line says so).
        (err) => {
          if (/^run: .*\b1\/4 s/m.test(err) && server.proc.exitCode === null) {
            server.proc.kill("SIGKILL");
          }
        },
      );
      const r = await run;
      assert.notEqual(r.code, 0, r.err);
      const result = JSON.parse(r.out) as { error_count: number; ops: number };
      assert.ok(result.ops > 0, "operations succeeded before the server died");
      assert.ok(result.error_count > 0, "the failures after it died are counted");
      assert.match(r.err, /operations failed/);
    } finally {
      await server.stop();
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("rejects bad arguments with exit 2", async () => {
    for (const args of [
      ["bench"],
      ["bench", "scan"],
      ["bench", "put", "--read-ratio", "0.5"],
      ["bench", "put", "--key-size", "4"],
    ]) {
      const proc = spawn(CAIRN, args, { cwd: ROOT, env: cleanEnv() });
      let err = "";
      proc.stderr.on("data", (d: Buffer) => (err += d.toString()));
      const code = await new Promise<number | null>((r) => proc.once("close", r));
      assert.equal(code, 2, `${args.join(" ")}: ${err}`);
    }
  });
});

describe("cairn bench's numbers", () => {
  it("are decimal digits: an empty, blank, hexadecimal or exponent value is a usage error", async () => {
    // Number() read "" and " " as 0: `--rate "$RATE"` with RATE unset ran without a limit, and
    // `--read-ratio ""` made a mixed workload all Puts (an audit, 2026-12-07). Nothing listens on
    // the endpoint: a run that starts fails its operations (exit 3) instead of refusing (exit 2).
    const dead = `127.0.0.1:${await closedPort()}`;
    const cases: [string[], RegExp][] = [
      [["put", "--rate", ""], /--rate must be a number ≥ 0, not ""/],
      [["put", "--rate", " "], /--rate must be a number/],
      [["put", "--rate", "1e3"], /--rate must be a number/],
      [["mixed", "--read-ratio", ""], /--read-ratio must be a number/],
      [["put", "--value-size", ""], /--value-size must be an integer ≥ 0, not ""/],
      [["put", "--seed", " "], /--seed must be an integer/],
      [["put", "--concurrency", "0x10"], /--concurrency must be an integer/],
      [["put", "--keyspace", "1e3"], /--keyspace must be an integer/],
      [["put", "--warmup", ""], /--warmup must be a number/],
      // So many operations in flight, or connections, ran the process out of memory.
      [["put", "--concurrency", "100000001"], /--concurrency must be an integer from 1 to 100000/],
      [["put", "--channels", "1000000"], /--channels must be an integer from 1 to 1024/],
    ];
    for (const [args, message] of cases) {
      const { code, err } = await runInProcess(
        run,
        ["bench", ...args, "--duration", "0.1", "--timeout", "200", "--endpoints", dead],
        { env: cleanEnv() },
      );
      assert.equal(code, 2, `${args.join(" ")}: ${err}`);
      assert.match(err, message);
    }
    // A fraction may be written without its leading zero, as before.
    const mixed = ["bench", "mixed", "--read-ratio", ".5", "--no-fill", "--warmup", "0"];
    const said = await runInProcess(
      run,
      [...mixed, "--duration", "0.1", "--timeout", "200", "--endpoints", dead, "--output", "json"],
      { env: cleanEnv() },
    );
    assert.equal((JSON.parse(said.out) as { read_ratio: number }).read_ratio, 0.5);
  });
});

describe("bench workload", () => {
  it("keys have the requested size and are unique", () => {
    assert.equal(keyOf(7, 16), "k0000000007xxxxx");
    assert.equal(keyOf(123, 11).length, 11);
    assert.notEqual(keyOf(1, 16), keyOf(10, 16));
  });

  it("is reproducible from its seed and honours the read ratio", () => {
    const spec = { readRatio: 0.9, keyspace: 1000, keySize: 16, distribution: "uniform" as const };
    const a = operations(spec, seededRandom(42));
    const b = operations(spec, seededRandom(42));
    let gets = 0;
    for (let i = 0; i < 10_000; i++) {
      const x = a();
      assert.deepEqual(x, b());
      assert.ok(x.item >= 0 && x.item < 1000);
      if (x.kind === "get") gets++;
    }
    assert.ok(gets > 8700 && gets < 9300, String(gets));
  });

  it("zipfian favours low items and stays in range", () => {
    const next = zipfian(1000, seededRandom(7));
    const counts = new Array<number>(1000).fill(0);
    for (let i = 0; i < 20_000; i++) {
      const v = next();
      assert.ok(v >= 0 && v < 1000);
      counts[v] = (counts[v] ?? 0) + 1;
    }
    assert.ok((counts[0] ?? 0) > (counts[500] ?? 0) * 20);
  });
});
