/**
 * `npm run bench:metrics [-- --shards 1024] [--scrapes 300] [--server] [--duration 10] [--json]`
 *
 * How long a node takes to export /metrics (contract §4.3: "about 1 to 5 ms"), in two parts:
 *
 *  1. exposition: one CairnMetrics with `--shards` active shards (the node's sources: every
 *     shard's memtable size and tables on three levels, Raft term and commit index), timed on
 *     `exposeBytes()`, what the HTTP server serves. Two cases: `idle` (nothing moved between two
 *     scrapes) and `churn` (every shard's commit index and memtable size moved, KV requests
 *     recorded: a node under write load). For comparison, prom-client's own formatting of the
 *     same registry (`registry.metrics()`, what /metrics did before issue 51) on the churn case.
 *     Then GET /metrics on an OpsHttpServer over that registry, timed at the client (request
 *     sent to last byte read), churn between requests.
 *  2. with `--server`: a real `cairn serve` (one process, its default 1,024 shards), every shard
 *     created by the fill of `cairn bench get` (20,000 keys), then GET /metrics timed at the client while
 *     `cairn bench put --concurrency 64` loads the node for `--duration` seconds. This includes
 *     the wait for the node's event loop, busy with Puts.
 *
 * Prints median, p99 and max wall time per case, and for the in-process expositions the median
 * CPU time (what an export costs when other processes share the machine). Goal: the
 * exposition's median ≤ 5 ms at 1,024 shards.
 */
import { type ChildProcess, execFile, spawn } from "node:child_process";
import { request } from "node:http";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs, promisify } from "node:util";
import { CairnMetrics, OpsHttpServer, silentLogger } from "../src/ops/index.ts";

const { values: args } = parseArgs({
  options: {
    shards: { type: "string", default: "1024" },
    scrapes: { type: "string", default: "300" },
    server: { type: "boolean", default: false },
    duration: { type: "string", default: "10" },
    json: { type: "boolean", default: false },
  },
});
const SHARDS = Number(args.shards);
const SCRAPES = Number(args.scrapes);
const LEVELS = 3;

interface Summary {
  readonly p50: number;
  readonly p99: number;
  readonly max: number;
  readonly bytes: number;
  /** Median CPU time of this process per export (only where measured in process). */
  readonly cpuP50?: number;
}

const round = (x: number): number => Math.round(x * 100) / 100;

function median(values: readonly number[]): number {
  return [...values].sort((a, b) => a - b)[Math.floor(values.length / 2)] ?? NaN;
}

function summarize(ms: number[], bytes: number): Summary {
  const sorted = [...ms].sort((a, b) => a - b);
  const at = (q: number): number =>
    sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
  return { p50: round(at(0.5)), p99: round(at(0.99)), max: round(at(1)), bytes };
}

/** A registry as a node with `shards` shards has it, and a step that moves every shard. */
function nodeLikeMetrics(): { metrics: CairnMetrics; churn: (round: number) => void } {
  const metrics = new CairnMetrics({ nodeId: "n1" });
  const memtables = new Map<number, number>();
  const tables = new Map<number, number[]>();
  for (let shard = 0; shard < SHARDS; shard++) {
    metrics.initShard(shard);
    metrics.setRaftState(shard, "n1", 2, 10 + shard);
    memtables.set(shard, 4096 + shard);
    tables.set(
      shard,
      Array.from({ length: LEVELS }, (_, level) => (shard + level) % 4),
    );
  }
  metrics.setMemtableSource(() => memtables.entries());
  metrics.setSstableSource(() => tables.entries());
  const churn = (round: number): void => {
    for (let shard = 0; shard < SHARDS; shard++) {
      metrics.setRaftState(shard, "n1", 2, 10 + shard + round);
      memtables.set(shard, 4096 + shard + round * 113);
    }
    for (let i = 0; i < 100; i++) metrics.recordKv("put", "success", (i % 20) / 4);
  };
  return { metrics, churn };
}

async function timeExposition(
  expose: () => Promise<string | Buffer>,
  between: (round: number) => void,
): Promise<Summary> {
  const ms: number[] = [];
  const cpuMs: number[] = [];
  let bytes = 0;
  for (let i = 0; i < SCRAPES + 20; i++) {
    between(i);
    // Wall time, and this process's CPU time: on a machine shared with other work, the second
    // is what the export costs, the first what a scraper waits.
    const cpu = process.cpuUsage();
    const started = performance.now();
    const body = await expose();
    const took = performance.now() - started;
    const used = process.cpuUsage(cpu);
    bytes = Buffer.byteLength(body);
    if (i >= 20) {
      // the first scrapes build the cache and warm the JIT
      ms.push(took);
      cpuMs.push((used.user + used.system) / 1000);
    }
  }
  return { ...summarize(ms, bytes), cpuP50: round(median(cpuMs)) };
}

/** GET `url`, timed from the request to the body's last byte. */
function scrape(url: string): Promise<{ ms: number; bytes: number }> {
  return new Promise((resolve, reject) => {
    const started = performance.now();
    const req = request(url, (res) => {
      let bytes = 0;
      res.on("data", (chunk: Buffer) => (bytes += chunk.length));
      res.on("end", () => {
        if (res.statusCode !== 200) reject(new Error(`GET ${url}: ${res.statusCode}`));
        else resolve({ ms: performance.now() - started, bytes });
      });
      res.on("error", reject);
    });
    req.on("error", reject);
    req.end();
  });
}

async function httpInProcess(): Promise<Summary> {
  const { metrics, churn } = nodeLikeMetrics();
  const server = new OpsHttpServer({
    address: "127.0.0.1:0",
    health: { isQuickHealthy: () => true, report: () => Promise.reject(new Error("unused")) },
    metrics,
    metricsEnabled: true,
    logger: silentLogger,
  });
  const { port } = await server.start();
  const ms: number[] = [];
  let bytes = 0;
  try {
    for (let round = 0; round < SCRAPES + 20; round++) {
      churn(round);
      const r = await scrape(`http://127.0.0.1:${port}/metrics`);
      bytes = r.bytes;
      if (round >= 20) ms.push(r.ms);
    }
  } finally {
    await server.close();
  }
  return summarize(ms, bytes);
}

const execFileAsync = promisify(execFile);
const cairn = join(import.meta.dirname, "..", "bin", "cairn");

/** `cairn serve` on ports the OS picks, resolved with both addresses once it says it started. */
async function startCairn(
  dataDir: string,
): Promise<{ proc: ChildProcess; rpc: string; http: string }> {
  const proc = spawn(
    cairn,
    ["serve", "--data-dir", dataDir, "--rpc-addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0"],
    { stdio: ["ignore", "pipe", "inherit"] },
  );
  const lines = createInterface({ input: proc.stdout as NodeJS.ReadableStream });
  const fields = await new Promise<{ rpc_addr: string; http_addr: string }>((resolve, reject) => {
    lines.on("line", (line) => {
      if (line.includes('"node started"')) {
        resolve((JSON.parse(line) as { fields: { rpc_addr: string; http_addr: string } }).fields);
      }
    });
    proc.once("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
  lines.on("line", () => {}); // keep draining the log
  return { proc, rpc: fields.rpc_addr, http: fields.http_addr };
}

async function realServer(): Promise<{
  idle: Summary;
  quick: Summary;
  loaded: Summary;
  activeShards: number;
}> {
  const dataDir = await mkdtemp(join(tmpdir(), "cairn-bench-metrics-"));
  let proc: ChildProcess | undefined;
  try {
    const started = await startCairn(dataDir);
    proc = started.proc;
    const http = started.http;
    // 20,000 keys cover each of 1,024 shards with near certainty; /health says so below.
    // `bench get` writes its whole keyspace first: 20,000 keys cover each of 1,024 shards with
    // near certainty; /health says how many are active.
    await execFileAsync(cairn, [
      "bench",
      "get",
      "--endpoints",
      started.rpc,
      "--duration",
      "1",
      "--warmup",
      "0",
      "--keyspace",
      "20000",
      "--concurrency",
      "64",
    ]);
    const health = await fetch(`http://${http}/health`);
    const { active_shards: activeShards } = (await health.json()) as { active_shards: number };
    const url = `http://${http}/metrics`;
    // The fill leaves flushes and compactions behind; "idle" is after they had time to finish.
    await new Promise((resolve) => setTimeout(resolve, 10_000));
    const idleMs: number[] = [];
    const quickMs: number[] = [];
    let bytes = 0;
    for (let i = 0; i < 50; i++) {
      const r = await scrape(url);
      bytes = r.bytes;
      idleMs.push(r.ms);
      // What any request costs on this machine now: a shared machine's load shows here too.
      quickMs.push((await scrape(`http://${http}/health/quick`)).ms);
    }
    const load = execFileAsync(cairn, [
      "bench",
      "put",
      "--endpoints",
      started.rpc,
      "--duration",
      String(args.duration),
      "--warmup",
      "1",
      "--keyspace",
      "20000",
      "--concurrency",
      "64",
    ]);
    const loadedMs: number[] = [];
    const until = performance.now() + (Number(args.duration) + 1) * 1000;
    await new Promise((resolve) => setTimeout(resolve, 1500)); // past the bench's warm-up
    while (performance.now() < until - 500) {
      const r = await scrape(url);
      loadedMs.push(r.ms);
      await new Promise((resolve) => setTimeout(resolve, 50)); // ~15 scrapes a second, not a flood
    }
    await load;
    return {
      idle: summarize(idleMs, bytes),
      quick: summarize(quickMs, 2),
      loaded: summarize(loadedMs, bytes),
      activeShards,
    };
  } finally {
    proc?.kill("SIGTERM");
    if (proc !== undefined && proc.exitCode === null) {
      await new Promise((resolve) => proc?.once("exit", resolve));
    }
    await rm(dataDir, { recursive: true, force: true });
  }
}

const results: Record<string, unknown> = { shards: SHARDS, scrapes: SCRAPES };
{
  const { metrics } = nodeLikeMetrics();
  results["exposition_idle"] = await timeExposition(
    () => metrics.exposeBytes(),
    () => {},
  );
}
{
  const { metrics, churn } = nodeLikeMetrics();
  results["exposition_churn"] = await timeExposition(() => metrics.exposeBytes(), churn);
}
{
  const { metrics, churn } = nodeLikeMetrics();
  results["prom_client_churn"] = await timeExposition(() => metrics.registry.metrics(), churn);
}
results["http_in_process_churn"] = await httpInProcess();
if (args.server) results["real_node"] = await realServer();

if (args.json) {
  console.log(JSON.stringify(results, null, 2));
} else {
  const line = (name: string, s: Summary): void =>
    console.log(
      `${name.padEnd(34)} p50 ${s.p50.toFixed(2).padStart(7)} ms   p99 ${s.p99.toFixed(2).padStart(7)} ms   max ${s.max.toFixed(2).padStart(7)} ms   ${(s.bytes / 1024).toFixed(0)} KiB${s.cpuP50 === undefined ? "" : `   CPU p50 ${s.cpuP50.toFixed(2)} ms`}`,
    );
  console.log(`/metrics at ${SHARDS} active shards, ${SCRAPES} scrapes per case`);
  line("exposeBytes, nothing moved", results["exposition_idle"] as Summary);
  line("exposeBytes, every shard moved", results["exposition_churn"] as Summary);
  line("prom-client formatting (before)", results["prom_client_churn"] as Summary);
  line("GET /metrics in process (client)", results["http_in_process_churn"] as Summary);
  const real = results["real_node"] as
    { idle: Summary; quick: Summary; loaded: Summary; activeShards: number } | undefined;
  if (real !== undefined) {
    console.log(`real node: ${real.activeShards} active shards`);
    line("GET /metrics, idle node", real.idle);
    line("GET /health/quick, idle node", real.quick);
    line("GET /metrics, under Put c=64", real.loaded);
  }
}
