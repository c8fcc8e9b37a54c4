/**
 * The issue-4 KV benchmark: Put and linearizable Get against one node at several concurrencies,
 * driven by `cairn bench` (the project's load generator, grpc-js):
 *
 *   npm run bench:kv -- [--endpoint HOST:PORT] [--duration 15] [--concurrency 1,64,256]
 *                       [--ops put,get] [--keyspace 100000] [--json]
 *
 * Without --endpoint it starts `cairn serve` on a temporary data directory. Keys are 16 bytes,
 * values 100 bytes; `cairn bench get` fills the keyspace first. Prints ops/s, p50/p99 and the
 * generator's own CPU per case (past ~90% of a core the generator, not the server, is the limit).
 */
import { type ChildProcess, execFile } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { promisify } from "node:util";
import { parseArgs } from "node:util";
import { startCairn } from "./serve.ts";

const root = join(import.meta.dirname, "..");
const cairn = join(root, "bin", "cairn");
const { values: args } = parseArgs({
  options: {
    endpoint: { type: "string" },
    duration: { type: "string", default: "15" },
    concurrency: { type: "string", default: "1,64,256" },
    ops: { type: "string", default: "put,get" },
    keyspace: { type: "string", default: "100000" },
    json: { type: "boolean", default: false },
  },
});

interface BenchResult {
  ops_per_sec: number;
  error_count: number;
  latency_ms: { p50: number; p99: number };
  client_cpu_percent: number;
}

let dataDir: string | null = null;
let server: ChildProcess | null = null;
let endpoint = args.endpoint;
if (endpoint === undefined) {
  dataDir = await mkdtemp(join(tmpdir(), "cairn-bench-"));
  const s = await startCairn(dataDir);
  server = s.proc;
  endpoint = s.rpc;
}
const results: (BenchResult & { op: string; concurrency: number })[] = [];
try {
  for (const op of args.ops.split(",")) {
    for (const c of args.concurrency.split(",").map(Number)) {
      const { stdout } = await promisify(execFile)(
        cairn,
        [
          "bench",
          op,
          "--endpoints",
          endpoint,
          "--concurrency",
          String(c),
          "--duration",
          args.duration,
          "--warmup",
          "2",
          "--keyspace",
          args.keyspace,
          "--output",
          "json",
        ],
        { maxBuffer: 1 << 20 },
      );
      const r = { op, concurrency: c, ...(JSON.parse(stdout) as BenchResult) };
      results.push(r);
      if (!args.json) {
        const warn =
          r.client_cpu_percent > 90 ? "  (load generator above 90% of a core: client-bound)" : "";
        console.log(
          `${op.padEnd(4)} c=${String(c).padEnd(4)} ${String(Math.round(r.ops_per_sec)).padStart(7)} ops/s  p50 ${r.latency_ms.p50.toFixed(2)} ms  p99 ${r.latency_ms.p99.toFixed(2)} ms  errors ${r.error_count}  client CPU ${Math.round(r.client_cpu_percent)}%${warn}`,
        );
      }
    }
  }
  if (args.json)
    console.log(JSON.stringify({ endpoint, durationSec: Number(args.duration), results }, null, 2));
} finally {
  server?.kill("SIGTERM");
  if (server !== null) await new Promise((r) => server?.once("exit", r));
  if (dataDir !== null) await rm(dataDir, { recursive: true, force: true });
}
