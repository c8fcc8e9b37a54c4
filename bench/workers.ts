/**
 * `npm run bench:workers`: one node with 1, 2, … shard workers (`shard_workers`), side by side.
 *
 *   npm run bench:workers -- [--workers 1,2] [--runs 2] [--duration 8] [--keyspace 100000]
 *                            [--grpc-load PATH] [--json]
 *
 * For each run and each number of workers, in alternation (this machine's speed drifts between
 * runs), it starts `cairn serve --shard-workers N` on a fresh data directory and drives it with
 * grpc-load (the C++ closed-loop generator beside the repository, ~20 µs of CPU a call, 4
 * connections, which SO_REUSEPORT spreads over the workers): a fill of the keyspace at c=256
 * (it creates the shards), Put at c=256 and c=1, linearizable Get at c=256. 16-byte keys,
 * 100-byte values. Per case: ops/s, p50/p99, the server's CPU per operation, and the busiest
 * threads of the server (% of one core over the case: the main thread or each shard worker, then
 * V8's and the storage's helpers), which shows whether one thread is the limit or the machine.
 */
import { execFile } from "node:child_process";
import { accessSync, constants, readdirSync, readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs, promisify } from "node:util";
import { grpcLoadKvArgs, type Op, parseGrpcLoad } from "./cluster-lib.ts";
import { startCairn } from "./serve.ts";

const ROOT = join(import.meta.dirname, "..");
const DEFAULT_GRPC_LOAD = join(ROOT, "..", "shared", "tools", "grpc-load", "build", "grpc-load");
const CLOCK_TICKS = 100;

const { values: args } = parseArgs({
  options: {
    workers: { type: "string", default: "1,2" },
    runs: { type: "string", default: "2" },
    duration: { type: "string", default: "8" },
    keyspace: { type: "string", default: "100000" },
    "grpc-load": { type: "string", default: DEFAULT_GRPC_LOAD },
    json: { type: "boolean", default: false },
  },
});
const workerCounts = args.workers.split(",").map(Number);
if (workerCounts.some((n) => !Number.isInteger(n) || n < 1 || n > 64)) {
  throw new Error(`--workers takes numbers 1..64, got ${args.workers}`);
}
const grpcLoad = args["grpc-load"];
try {
  accessSync(grpcLoad, constants.X_OK);
} catch {
  throw new Error(`grpc-load not found at ${grpcLoad}: build it (bash build.sh beside it)`);
}

interface Case {
  readonly name: string;
  readonly op: Op;
  readonly concurrency: number;
  readonly fill: boolean;
}
const CASES: readonly Case[] = [
  { name: "fill c=256", op: "put", concurrency: 256, fill: true },
  { name: "Put c=256", op: "put", concurrency: 256, fill: false },
  { name: "Put c=1", op: "put", concurrency: 1, fill: false },
  { name: "Get c=256", op: "get", concurrency: 256, fill: false },
];

interface Row {
  readonly run: number;
  readonly workers: number;
  readonly case: string;
  readonly opsPerSec: number;
  readonly p50: number;
  readonly p99: number;
  readonly serverUsPerOp: number;
  /** The busiest threads' CPU, % of one core, highest first. */
  readonly threads: readonly { readonly name: string; readonly percent: number }[];
}

/** CPU ticks so far of each thread of `pid`, by thread id, with its name. */
function threadTicks(pid: number): Map<string, { name: string; ticks: number }> {
  const out = new Map<string, { name: string; ticks: number }>();
  const dir = `/proc/${pid}/task`;
  for (const tid of readdirSync(dir)) {
    try {
      const name = readFileSync(join(dir, tid, "comm"), "utf8").trim();
      // Fields after the ")" that closes the name: utime and stime are the 12th and 13th.
      const stat = readFileSync(join(dir, tid, "stat"), "utf8");
      const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
      out.set(tid, { name, ticks: Number(fields[11]) + Number(fields[12]) });
    } catch {
      // The thread ended meanwhile.
    }
  }
  return out;
}

async function runCase(rpc: string, pid: number, c: Case): Promise<Omit<Row, "run" | "workers">> {
  const argv = [
    ...grpcLoadKvArgs(c.op, rpc),
    "--channels",
    "4",
    "--keyspace",
    args.keyspace,
    "--concurrency",
    String(c.concurrency),
    "--pids",
    String(pid),
    ...(c.fill ? ["--mode", "fill", "--duration", "120"] : ["--duration", args.duration]),
  ];
  const before = threadTicks(pid);
  const started = performance.now();
  const { stdout } = await promisify(execFile)(grpcLoad, argv, { maxBuffer: 1 << 20 });
  const seconds = (performance.now() - started) / 1000;
  const after = threadTicks(pid);
  const result = parseGrpcLoad(stdout, c.op, c.concurrency);
  if (result.errors > 0) throw new Error(`${c.name}: ${result.errors} errors: ${stdout}`);
  const threads = [...after]
    .map(([tid, t]) => ({
      name: t.name,
      percent: Math.round(
        ((t.ticks - (before.get(tid)?.ticks ?? 0)) / CLOCK_TICKS / seconds) * 100,
      ),
    }))
    .sort((a, b) => b.percent - a.percent)
    .slice(0, 4);
  const cores = Object.values(
    (JSON.parse(stdout.trim().split("\n").at(-1) ?? "{}") as { server_cpu_cores?: object })
      .server_cpu_cores ?? {},
  ).reduce((a: number, b) => a + Number(b), 0);
  return {
    case: c.name,
    opsPerSec: Math.round(result.opsPerSec),
    p50: result.p50,
    p99: result.p99,
    serverUsPerOp: Math.round((cores * 1e6) / result.opsPerSec),
    threads,
  };
}

const rows: Row[] = [];
for (let run = 1; run <= Number(args.runs); run++) {
  for (const workers of workerCounts) {
    const dir = await mkdtemp(join(tmpdir(), "cairn-bench-workers-"));
    const server = await startCairn(dir, ["--shard-workers", String(workers)]);
    try {
      for (const c of CASES) {
        const pid = server.proc.pid ?? 0;
        const row = { run, workers, ...(await runCase(server.rpc, pid, c)) };
        rows.push(row);
        if (!args.json) {
          process.stderr.write(
            `run ${run}, ${workers} worker(s), ${row.case}: ${row.opsPerSec} ops/s, ${row.serverUsPerOp} µs/op\n`,
          );
        }
      }
    } finally {
      const exited = new Promise((resolve) => server.proc.once("exit", resolve));
      server.proc.kill("SIGTERM");
      await exited;
      await rm(dir, { recursive: true, force: true });
    }
  }
}

if (args.json) {
  process.stdout.write(`${JSON.stringify({ cpus: cpus().length, rows })}\n`);
} else {
  const lines = [
    `${cpus().length} CPUs (${cpus()[0]?.model ?? "?"}), grpc-load on the same machine`,
    "",
    "| run | shard_workers | case | ops/s | p50 ms | p99 ms | server µs/op | busiest threads (% of a core) |",
    "|---|---|---|---|---|---|---|---|",
    ...rows.map(
      (r) =>
        `| ${r.run} | ${r.workers} | ${r.case} | ${r.opsPerSec} | ${r.p50} | ${r.p99} | ${r.serverUsPerOp} | ${r.threads
          .map((t) => `${t.name} ${t.percent}`)
          .join(", ")} |`,
    ),
  ];
  process.stdout.write(`${lines.join("\n")}\n`);
}
