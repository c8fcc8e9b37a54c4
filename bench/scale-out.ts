/**
 * `npm run bench:scale-out`: the same load against a 3-node and a 5-node cluster, and what each
 * node does of it (issue 53). On a 2-core machine the cluster's throughput cannot grow with its
 * nodes (they share the cores), so this measures what can: each node's share of the requests
 * its shards' leaders answered and of the nodes' CPU, which must fall as 1/n (within 10 %) for
 * the cluster to scale out on machines of its own. The model for 3 → 30 nodes built on these
 * figures is in docs/architecture.md, "Scaling out".
 *
 * For each size: starts the nodes (bench/cluster-nodes.ts; the first seed founds the cluster
 * with all of them), fills `--keyspace` keys (which creates every shard), waits until the
 * shards' leaders stop moving, measures the idle cluster's CPU, then runs grpc-load Puts at a
 * fixed concurrency over `--channels` connections spread evenly over the nodes (routing-blind:
 * a request reaches a node that leads its shard one time in n, and is forwarded otherwise), and
 * reads every node's /metrics before and after.
 */
import { createWriteStream, mkdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import type { Placement } from "../scripts/cluster-layout.ts";
import {
  grpcLoadKvArgs,
  parseConcurrencies,
  parseGrpcLoad,
  parseMetrics,
  sumMetric,
} from "./cluster-lib.ts";
import {
  checkGrpcLoad,
  DEFAULT_GRPC_LOAD,
  describeLeaders,
  freePorts,
  httpGet,
  leaderCounts,
  load,
  machine,
  type Node,
  out,
  runBench,
  runChild,
  sleep,
  startNode,
  stopCurrentChild,
  stopNodes,
  UsageError,
  waitHealthy,
  watchUntil,
} from "./cluster-nodes.ts";
import {
  type NodeShare,
  type ScaleRun,
  scaleOutTable,
  shares,
  trafficPerPut,
} from "./rebalance-lib.ts";

const HELP = `Usage: npm run bench:scale-out -- [options]

Runs the same Put load against a 3-node and a 5-node local cluster and prints each node's
share of the requests served and of the CPU, against 1/n, and what the cluster did for each
Put: Raft frames and messages between the nodes, durable WAL writes, and CPU (the kernel's
share from /proc).

Options:
  --nodes LIST          cluster sizes, in order (default 3,5)
  --concurrency C       Puts in flight (default 64)
  --duration S          measured seconds (default 20)
  --warmup S            unmeasured seconds first (default 3)
  --keyspace N          keys, filled first (default 20000; 16-byte keys, 100-byte values)
  --channels N          grpc-load connections, node i takes those i mod n (default 30: even
                        over 3, 5, 6, 10 or 15 nodes)
  --tolerance F         the largest deviation from 1/n accepted (default 0.10)
  --grpc-load PATH      the generator (default: env CAIRN_GRPC_LOAD, else
                        ../shared/tools/grpc-load/build/grpc-load beside the repository)
  --keep                keep the nodes' data directories and logs
  --json                also print every run as JSON
  -h, --help            show this help

CAIRN_* variables of the environment reach every node (CAIRN_LOG_LEVEL defaults to warn here).
`;

interface Options {
  readonly sizes: number[];
  readonly concurrency: number;
  readonly duration: number;
  readonly warmup: number;
  readonly keyspace: number;
  readonly channels: number;
  readonly tolerance: number;
  readonly grpcLoad: string;
  readonly keep: boolean;
  readonly json: boolean;
}

function parseOptions(argv: readonly string[]): Options | "help" {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      nodes: { type: "string", default: "3,5" },
      concurrency: { type: "string", default: "64" },
      duration: { type: "string", default: "20" },
      warmup: { type: "string", default: "3" },
      keyspace: { type: "string", default: "20000" },
      channels: { type: "string", default: "30" },
      tolerance: { type: "string", default: "0.10" },
      "grpc-load": { type: "string" },
      keep: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) return "help";
  const num = (name: string, text: string, min: number, integer: boolean): number => {
    const n = Number(text);
    if (!Number.isFinite(n) || n < min || (integer && !Number.isInteger(n)))
      throw new UsageError(`--${name} must be ${integer ? "an integer" : "a number"} ≥ ${min}`);
    return n;
  };
  try {
    const sizes = parseConcurrencies(values.nodes);
    if (sizes.some((n) => n < 3 || n > 15))
      throw new UsageError("--nodes: each size must be 3..15 (cluster.bootstrap_expect)");
    return {
      sizes,
      concurrency: num("concurrency", values.concurrency, 1, true),
      duration: num("duration", values.duration, 1, false),
      warmup: num("warmup", values.warmup, 0, false),
      keyspace: num("keyspace", values.keyspace, 1, true),
      channels: num("channels", values.channels, 1, true),
      tolerance: num("tolerance", values.tolerance, 0, false),
      grpcLoad: resolve(values["grpc-load"] ?? process.env["CAIRN_GRPC_LOAD"] ?? DEFAULT_GRPC_LOAD),
      keep: values.keep,
      json: values.json,
    };
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError((err as Error).message.replace("--concurrency", "--nodes"));
  }
}

let nodes: Node[] = [];
let interrupted = false;

/** One cluster size, from start to stop. */
async function runSize(opts: Options, size: number, baseDir: string): Promise<ScaleRun> {
  const dir = join(baseDir, `${size}-nodes`);
  const avoid = new Set<number>();
  const rpcPorts = await freePorts(size, true, avoid);
  const httpPorts = await freePorts(size, false, avoid);
  const at = (ports: number[], i: number): string => `127.0.0.1:${ports[i - 1]}`;
  const placement: Placement = {
    nodeId: (i) => `n${i}`,
    rpcBind: (i) => at(rpcPorts, i),
    httpBind: (i) => at(httpPorts, i),
    rpcAdvertise: (i) => at(rpcPorts, i),
    httpAdvertise: (i) => at(httpPorts, i),
    dataDir: (i) => join(dir, `n${i}`),
  };
  const log = createWriteStream(join(baseDir, `generators-${size}.log`), { flags: "a" });
  try {
    nodes = [];
    mkdirSync(dir, { recursive: true });
    for (let i = 1; i <= size; i++) nodes.push(startNode(i, placement, dir, { clusterSize: size }));
    await waitHealthy(nodes, 90_000);
    const formed = await watchUntil(
      nodes,
      90_000,
      (v) => v.clusterId !== "" && v.nodes.filter((n) => n.state === "alive").length === size,
    );
    if (formed === null || formed.clusterId === "")
      throw new Error(`the ${size}-node cluster did not form within 90 s`);
    const targets = nodes.map((n) => n.rpc).join(",");
    const args = (extra: readonly string[]): string[] => [
      ...grpcLoadKvArgs("put", targets),
      "--channels",
      String(opts.channels),
      "--keyspace",
      String(opts.keyspace),
      ...extra,
    ];
    for (let pass = 1; pass <= 3; pass++) {
      const f = parseGrpcLoad(
        await runChild(
          opts.grpcLoad,
          args(["--concurrency", "256", "--mode", "fill", "--duration", "900"]),
          1_000_000,
          log,
        ),
        "put",
        256,
      );
      out(`${size} nodes: fill pass ${pass}, ${f.ops} written, ${f.errors} errors`);
      if (f.errors === 0) break;
    }
    let lastKey = "";
    let stableSince = performance.now();
    const settled = await watchUntil(nodes, 90_000, (v, now) => {
      const key = v.shards.map((s) => s.leader).join(",");
      if (key !== lastKey) {
        lastKey = key;
        stableSince = now;
      }
      return leaderCounts(v).leaderless === 0 && now - stableSince >= 3000;
    });
    if (settled !== null) out(`${size} nodes: ${describeLeaders(settled)}`);
    const scrape = (): Promise<Map<string, number>[]> =>
      Promise.all(
        nodes.map(async (n) => parseMetrics((await httpGet(`http://${n.http}/metrics`)).body)),
      );
    const cpu = (m: readonly Map<string, number>[]): number[] =>
      m.map((x) => sumMetric(x, "process_cpu_seconds_total"));

    const idleBefore = cpu(await scrape());
    await sleep(opts.duration * 1000);
    const idleAfter = cpu(await scrape());
    const idleCpuSeconds = idleAfter.reduce((a, x, i) => a + x - (idleBefore[i] ?? 0), 0);
    if (interrupted) throw new Error("interrupted");

    const loadAvg = loadavg()[0] ?? 0;
    // The warm-up is a run of its own, before the measured run's first reading.
    if (opts.warmup > 0)
      await runChild(
        opts.grpcLoad,
        args([
          "--concurrency",
          String(opts.concurrency),
          "--duration",
          String(opts.warmup),
          "--warmup",
          "0",
        ]),
        120_000,
        log,
      );
    const start = await scrape();
    const systemStart = nodes.map(systemCpuSeconds);
    const r = parseGrpcLoad(
      await runChild(
        opts.grpcLoad,
        args([
          "--concurrency",
          String(opts.concurrency),
          "--duration",
          String(opts.duration),
          "--warmup",
          "0",
        ]),
        opts.duration * 3000 + 60_000,
        log,
      ),
      "put",
      opts.concurrency,
    );
    const end = await scrape();
    const systemEnd = nodes.map(systemCpuSeconds);
    const perNode: NodeShare[] = nodes.map((n, i) => {
      const d = (name: string, labels: Record<string, string> = {}): number =>
        sumMetric(end[i] ?? new Map(), name, labels) -
        sumMetric(start[i] ?? new Map(), name, labels);
      return {
        id: n.id,
        served:
          d("kv_requests_total", { operation: "put", status: "success" }) +
          d("kv_requests_total", { operation: "put", status: "error" }),
        forwarded: d("kv_requests_total", { operation: "put", status: "not_leader" }),
        cpuSeconds: d("process_cpu_seconds_total"),
        cpuSystemSeconds: (systemEnd[i] ?? 0) - (systemStart[i] ?? 0),
        framesSent: d("cairn_raft_frames_sent_total"),
        messagesSent: d("cairn_raft_messages_sent_total"),
        walWrites: d("cairn_wal_write_duration_seconds_count"),
      };
    });
    const run: ScaleRun = {
      nodes: size,
      seconds: r.seconds,
      opsPerSec: r.opsPerSec,
      p99: r.p99,
      perNode,
      idleCpuSeconds,
      loadAvg,
    };
    const sh = shares(run);
    out(
      `${size} nodes: ${Math.round(r.opsPerSec)} Puts/s, p99 ${r.p99.toFixed(1)} ms, errors ${r.errors}; served ${sh.served.map((x) => `${(100 * x).toFixed(1)}%`).join(" ")}; CPU ${sh.cpu.map((x) => `${(100 * x).toFixed(1)}%`).join(" ")}; idle CPU ${(idleCpuSeconds / opts.duration).toFixed(3)} cores; load ${loadAvg.toFixed(1)}`,
    );
    return run;
  } finally {
    stopCurrentChild();
    await stopNodes(nodes);
    log.end();
  }
}

async function main(argv: readonly string[]): Promise<number> {
  const opts = parseOptions(argv);
  if (opts === "help") {
    out(HELP);
    return 0;
  }
  checkGrpcLoad(opts.grpcLoad);
  const baseDir = await mkdtemp(join(tmpdir(), "cairn-bench-scale-out-"));
  out(`bench:scale-out — ${new Date().toISOString()}`);
  out(`machine: ${machine()}`);
  out(`load average at start: ${load()}`);
  out(
    `Put c=${opts.concurrency}, ${opts.duration} s after ${opts.warmup} s of warm-up, ${opts.channels} connections over the nodes; keyspace ${opts.keyspace}, 16-byte keys, 100-byte values; data and logs in ${baseDir}`,
  );
  const onSignal = (signal: string): void => {
    if (interrupted) return;
    interrupted = true;
    out(`\n${signal}: stopping the generator and the nodes`);
    stopCurrentChild();
    void stopNodes(nodes);
  };
  process.on("SIGINT", () => onSignal("SIGINT"));
  process.on("SIGTERM", () => onSignal("SIGTERM"));
  const runs: ScaleRun[] = [];
  let failed = false;
  try {
    for (const size of opts.sizes) {
      if (interrupted) throw new Error("interrupted");
      runs.push(await runSize(opts, size, baseDir));
    }
    out(`\nbench:scale-out — ${new Date().toISOString()}; load average at the end: ${load()}`);
    out(`machine: ${machine()}\n`);
    out(scaleOutTable(runs));
    let ok = true;
    for (const run of runs) {
      const { worstDeviation } = shares(run);
      const within = worstDeviation <= opts.tolerance;
      ok &&= within;
      out(
        `- ${run.nodes} nodes: the largest share is ${(100 * worstDeviation).toFixed(1)} % off 1/${run.nodes} (${within ? "within" : "NOT within"} ${(100 * opts.tolerance).toFixed(0)} %); ` +
          `the nodes' CPU ${(run.perNode.reduce((a, n) => a + n.cpuSeconds, 0) / run.seconds).toFixed(2)} cores under load, ${(run.idleCpuSeconds / opts.duration).toFixed(3)} idle`,
      );
      const t = trafficPerPut(run);
      out(
        `  a Put, all nodes together: ${t.frames.toFixed(2)} Raft frames, ${t.messages.toFixed(2)} Raft messages, ${t.walWrites.toFixed(3)} durable WAL writes, ${t.cpuMicros.toFixed(0)} µs of CPU (${t.systemCpuMicros.toFixed(0)} in the kernel)`,
      );
    }
    const first = runs[0];
    for (const run of runs.slice(1)) {
      if (first === undefined) break;
      const served = (r: ScaleRun): number =>
        r.perNode.reduce((a, n) => a + n.served, 0) / r.seconds / r.nodes;
      const cpu = (r: ScaleRun): number =>
        r.perNode.reduce((a, n) => a + n.cpuSeconds, 0) / r.seconds / r.nodes;
      out(
        `- ${first.nodes} → ${run.nodes} nodes: requests a node serves a second ×${(served(run) / served(first)).toFixed(2)}, its CPU ×${(cpu(run) / cpu(first)).toFixed(2)} (the same load over ${run.nodes}/${first.nodes} the nodes would give ×${(first.nodes / run.nodes).toFixed(2)}; the cluster's Put rate ×${(run.opsPerSec / first.opsPerSec).toFixed(2)})`,
      );
    }
    if (opts.json) out(JSON.stringify({ machine: machine(), runs }, null, 2));
    return ok ? 0 : 3;
  } catch (err) {
    failed = true;
    if (!interrupted) out(`bench:scale-out failed: ${(err as Error).message}`);
    return interrupted ? 130 : 1;
  } finally {
    if (opts.keep || failed) out(`data directories and logs kept in ${baseDir}`);
    else await rm(baseDir, { recursive: true, force: true });
  }
}

runBench("bench:scale-out", main);

/**
 * The kernel's CPU seconds of node `n`'s process so far (its threads' system time, from
 * /proc/<pid>/stat), 0 where there is no /proc. Cairn's fixed metric catalogue has only the sum.
 */
function systemCpuSeconds(n: Node): number {
  try {
    const stat = readFileSync(`/proc/${n.proc.pid}/stat`, "utf8");
    // The fields after the command's closing parenthesis; stime is field 15 of the whole line.
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return Number(fields[12]) / CLOCK_TICKS_PER_SECOND;
  } catch {
    return 0;
  }
}

/** USER_HZ: what /proc counts CPU time in on every Linux the benchmark runs on. */
const CLOCK_TICKS_PER_SECOND = 100;
