/**
 * KV benchmark against one node with a grpc-js load generator (closed loop):
 *
 *   npm run bench:kv -- [--endpoint HOST:PORT] [--duration 15] [--concurrency 1,64,256]
 *                       [--ops put,get] [--channels 4] [--keyspace 100000] [--json]
 *
 * Without --endpoint it starts `cairn serve` on a temporary data directory. Keys are 16 bytes,
 * values 100 bytes; Gets are linearizable, over keys written by a fill phase. Prints ops/s and
 * p50/p99 latency per case, and this process's CPU use (a grpc-js client spends 70–120 µs of CPU
 * per call: past ~90% of a core the generator, not the server, is the limit).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { type Client, credentials, loadPackageDefinition, type ServiceError } from "@grpc/grpc-js";
import { loadSync } from "@grpc/proto-loader";

const root = join(import.meta.dirname, "..");
const { values: args } = parseArgs({
  options: {
    endpoint: { type: "string" },
    duration: { type: "string", default: "15" },
    concurrency: { type: "string", default: "1,64,256" },
    ops: { type: "string", default: "put,get" },
    channels: { type: "string", default: "4" },
    keyspace: { type: "string", default: "100000" },
    json: { type: "boolean", default: false },
  },
});

const duration = Number(args.duration) * 1000;
const levels = args.concurrency.split(",").map(Number);
const ops = args.ops.split(",") as ("put" | "get")[];
const keyspace = Number(args.keyspace);
const value = Buffer.alloc(100, 0x61);

type Unary = (
  req: object,
  opts: object,
  cb: (err: ServiceError | null, res: unknown) => void,
) => void;

function clients(endpoint: string, n: number): { put: Unary; get: Unary; close(): void }[] {
  const def = loadSync(["cairn/v1/kv.proto"], {
    keepCase: true,
    longs: Number,
    enums: String,
    defaults: true,
    includeDirs: [join(root, "proto")],
  });
  const v1 = (
    loadPackageDefinition(def) as unknown as {
      cairn: { v1: { KV: new (a: string, c: unknown, o: object) => Client } };
    }
  ).cairn.v1;
  return Array.from({ length: n }, (_, i) => {
    // Distinct channel arguments keep grpc-js from sharing one connection between clients.
    const kv = new v1.KV(endpoint, credentials.createInsecure(), {
      "grpc.channel_id": i,
    }) as unknown as Record<string, Unary> & Client;
    return {
      put: (kv["Put"] as Unary).bind(kv),
      get: (kv["Get"] as Unary).bind(kv),
      close: () => kv.close(),
    };
  });
}

function keyOf(i: number): Buffer {
  return Buffer.from(`key${String(i).padStart(13, "0")}`); // 16 bytes
}

interface Result {
  op: string;
  concurrency: number;
  ops: number;
  opsPerSec: number;
  errors: number;
  p50: number;
  p99: number;
  clientCpu: number;
}

async function runCase(
  op: "put" | "get",
  concurrency: number,
  chans: ReturnType<typeof clients>,
  ms: number,
): Promise<Result> {
  const latencies: number[] = [];
  let errors = 0;
  const cpu0 = process.cpuUsage();
  const start = performance.now();
  const end = start + ms;
  const worker = (w: number): Promise<void> =>
    new Promise((resolve) => {
      const ch = chans[w % chans.length] as ReturnType<typeof clients>[number];
      const next = (): void => {
        const t0 = performance.now();
        if (t0 >= end) return resolve();
        const key = keyOf(Math.floor(Math.random() * keyspace));
        const req = op === "put" ? { key, value } : { key };
        ch[op](req, { deadline: Date.now() + 10_000 }, (err) => {
          if (err === null) latencies.push(performance.now() - t0);
          else errors++;
          next();
        });
      };
      next();
    });
  await Promise.all(Array.from({ length: concurrency }, (_, w) => worker(w)));
  const elapsed = performance.now() - start;
  const cpu = process.cpuUsage(cpu0);
  latencies.sort((a, b) => a - b);
  const pct = (p: number): number =>
    latencies[Math.min(latencies.length - 1, Math.floor(latencies.length * p))] ?? NaN;
  return {
    op,
    concurrency,
    ops: latencies.length,
    opsPerSec: Math.round((latencies.length / elapsed) * 1000),
    errors,
    p50: Number(pct(0.5).toFixed(2)),
    p99: Number(pct(0.99).toFixed(2)),
    clientCpu: Number(((cpu.user + cpu.system) / 1000 / elapsed).toFixed(2)),
  };
}

async function fill(chans: ReturnType<typeof clients>): Promise<void> {
  let next = 0;
  const worker = async (w: number): Promise<void> => {
    const ch = chans[w % chans.length] as ReturnType<typeof clients>[number];
    for (let i = next++; i < keyspace; i = next++) {
      await new Promise<void>((resolve, reject) =>
        ch.put({ key: keyOf(i), value }, {}, (err) => (err === null ? resolve() : reject(err))),
      );
    }
  };
  await Promise.all(Array.from({ length: 128 }, (_, w) => worker(w)));
}

async function startServer(dataDir: string): Promise<{ proc: ChildProcess; rpc: string }> {
  const proc = spawn(
    join(root, "bin", "cairn"),
    [
      "serve",
      "--data-dir",
      dataDir,
      "--rpc-addr",
      "127.0.0.1:0",
      "--http-addr",
      "127.0.0.1:0",
      "--log-level",
      "info",
    ],
    {
      stdio: ["ignore", "pipe", "inherit"],
    },
  );
  const rl = createInterface({ input: proc.stdout as NodeJS.ReadableStream });
  const rpc = await new Promise<string>((resolve, reject) => {
    rl.on("line", (line) => {
      if (line.includes('"node started"'))
        resolve((JSON.parse(line) as { fields: { rpc_addr: string } }).fields.rpc_addr);
    });
    proc.once("exit", (code) => reject(new Error(`server exited with ${code}`)));
  });
  return { proc, rpc };
}

let dataDir: string | null = null;
let server: ChildProcess | null = null;
let endpoint = args.endpoint;
if (endpoint === undefined) {
  dataDir = await mkdtemp(join(tmpdir(), "cairn-bench-"));
  const s = await startServer(dataDir);
  server = s.proc;
  endpoint = s.rpc;
}
const chans = clients(endpoint, Number(args.channels));
const results: Result[] = [];
try {
  if (ops.includes("get")) {
    process.stderr.write(`filling ${keyspace} keys...\n`);
    await fill(chans);
  }
  for (const op of ops) {
    for (const c of levels) {
      await runCase(op, c, chans, Math.min(2000, duration)); // warm-up
      const r = await runCase(op, c, chans, duration);
      results.push(r);
      if (!args.json) {
        const warn =
          r.clientCpu > 0.9 ? "  (load generator above 90% of a core: client-bound)" : "";
        console.log(
          `${op.padEnd(4)} c=${String(c).padEnd(4)} ${String(r.opsPerSec).padStart(7)} ops/s  p50 ${r.p50.toFixed(2)} ms  p99 ${r.p99.toFixed(2)} ms  errors ${r.errors}  client CPU ${(r.clientCpu * 100).toFixed(0)}%${warn}`,
        );
      }
    }
  }
  if (args.json)
    console.log(JSON.stringify({ endpoint, durationSec: duration / 1000, results }, null, 2));
} finally {
  for (const c of chans) c.close();
  server?.kill("SIGTERM");
  if (server !== null) await new Promise((r) => server?.once("exit", r));
  if (dataDir !== null) await rm(dataDir, { recursive: true, force: true });
}
