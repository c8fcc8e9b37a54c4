/**
 * `npm run bench:threads [-- --threads 1,2] [--modes io,handoff] [--duration 10] [--grpc-load PATH]`
 *
 * Issue 12, "use every core": how much of a request is gRPC I/O that no storage work removes, and
 * how it scales over threads. A prototype, not the server: each case runs `cairn.v1.KV/Put` whose
 * handler does no storage work, driven by grpc-load (C++, ~20 µs of CPU a call) at c=256 over 8
 * connections, 16-byte keys, 100-byte values:
 *
 * - `io` × N: N worker threads, each a grpc-js server with the KV service, all listening on the
 *   same port with SO_REUSEPORT (the kernel spreads the connections) and taking their
 *   connections through grpc-js's connection injector. Put answers at once. This is the ceiling
 *   of a node whose shard workers each serve gRPC themselves.
 * - `handoff`: one thread serves gRPC and hands every Put to a shard worker thread over a
 *   MessagePort (the requests of one event-loop turn in one message), answering when the worker
 *   replies: the shape "main thread does the I/O, workers own the shards", whose ceiling is the
 *   one I/O thread.
 *
 * Prints ops/s, p50/p99 and the process's CPU per operation (all threads, from
 * `process.cpuUsage`), one Markdown row per case.
 */
import { spawn } from "node:child_process";
import { accessSync, constants } from "node:fs";
import { type Socket, createServer } from "node:net";
import { cpus, loadavg } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import {
  MessageChannel,
  type MessagePort,
  Worker,
  isMainThread,
  parentPort,
  workerData,
} from "node:worker_threads";
import { Server, ServerCredentials, type sendUnaryData, type ServerUnaryCall } from "@grpc/grpc-js";
import { loadCairnProto } from "../src/api/proto.ts";
import { grpcLoadKvArgs } from "./cluster-lib.ts";

const ROOT = join(import.meta.dirname, "..");

interface WorkerSetup {
  readonly role: "io" | "shard";
  readonly port: number;
  /** In handoff mode: the I/O thread's end of the channel to the shard worker, or the shard's. */
  readonly shard?: MessagePort;
}

if (!isMainThread) {
  const setup = workerData as WorkerSetup;
  if (setup.role === "shard") runShard(setup.shard as MessagePort);
  else runIo(setup);
} else {
  await main();
}

/** A shard worker: answers each batch of request ids with the same ids (no storage work). */
function runShard(port: MessagePort): void {
  port.on("message", (batch: Uint32Array) =>
    port.postMessage(batch, [batch.buffer as ArrayBuffer]),
  );
  parentPort?.postMessage("ready");
}

/** An I/O thread: a grpc-js server fed by its own SO_REUSEPORT listener. */
function runIo(setup: WorkerSetup): void {
  const { proto } = loadCairnProto();
  const server = new Server();
  const shard = setup.shard;
  let put: (call: ServerUnaryCall<unknown, unknown>, callback: sendUnaryData<unknown>) => void;
  const reply = { version: { index: 1, term: 1 } };
  if (shard === undefined) {
    put = (_call, callback) => callback(null, reply);
  } else {
    const waiting = new Map<number, sendUnaryData<unknown>>();
    let nextId = 1;
    let batch: number[] = [];
    const flush = (): void => {
      const ids = Uint32Array.from(batch);
      batch = [];
      shard.postMessage(ids, [ids.buffer as ArrayBuffer]);
    };
    shard.on("message", (ids: Uint32Array) => {
      for (const id of ids) {
        const callback = waiting.get(id);
        waiting.delete(id);
        callback?.(null, reply);
      }
    });
    put = (_call, callback) => {
      const id = nextId++;
      waiting.set(id, callback);
      if (batch.length === 0) setImmediate(flush);
      batch.push(id);
    };
  }
  const unimplemented = (_call: unknown, callback: sendUnaryData<unknown>): void =>
    callback({ code: 12, details: "not in this prototype" });
  server.addService(proto.cairn.v1.KV.service, {
    Put: put,
    Get: unimplemented,
    Delete: unimplemented,
    Scan: unimplemented,
  });
  const injector = server.createConnectionInjector(ServerCredentials.createInsecure());
  const listener = createServer((socket: Socket) => injector.injectConnection(socket));
  listener.listen({ host: "127.0.0.1", port: setup.port, reusePort: true }, () =>
    parentPort?.postMessage("ready"),
  );
}

async function startWorker(setup: WorkerSetup, transfer: MessagePort[] = []): Promise<Worker> {
  const worker = new Worker(new URL(import.meta.url), {
    workerData: setup,
    transferList: transfer,
  });
  await new Promise<void>((resolveReady, reject) => {
    worker.once("message", () => resolveReady());
    worker.once("error", reject);
  });
  return worker;
}

async function freePort(): Promise<number> {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen({ host: "127.0.0.1", port: 0 }, r));
  const port = (probe.address() as { port: number }).port;
  await new Promise<void>((r) => probe.close(() => r()));
  return port;
}

interface LoadResult {
  readonly ops_per_s: number;
  readonly errors: number;
  /** Cores the generator itself used: what the server did not get of the machine. */
  readonly loadgen_cpu_cores: number;
  readonly lat_ms: { readonly p50: number; readonly p99: number };
}

function runLoad(grpcLoad: string, port: number, duration: number): Promise<LoadResult> {
  const args = [
    ...grpcLoadKvArgs("put", `127.0.0.1:${port}`),
    "--channels",
    "8",
    "--concurrency",
    "256",
    "--duration",
    String(duration),
    "--warmup",
    "2",
  ];
  return new Promise((resolveRun, reject) => {
    const child = spawn(grpcLoad, args, { stdio: ["ignore", "pipe", "inherit"] });
    let out = "";
    child.stdout.on("data", (d: Buffer) => (out += d.toString()));
    child.on("error", reject);
    child.on("exit", (code) => {
      if (code !== 0) reject(new Error(`grpc-load exited with ${code}`));
      else resolveRun(JSON.parse(out.trim().split("\n").at(-1) ?? "{}") as LoadResult);
    });
  });
}

async function runCase(
  mode: "io" | "handoff",
  threads: number,
  grpcLoad: string,
  duration: number,
): Promise<string> {
  const port = await freePort();
  const workers: Worker[] = [];
  try {
    if (mode === "io") {
      for (let i = 0; i < threads; i++) workers.push(await startWorker({ role: "io", port }));
    } else {
      const { port1, port2 } = new MessageChannel();
      workers.push(await startWorker({ role: "shard", port, shard: port2 }, [port2]));
      workers.push(await startWorker({ role: "io", port, shard: port1 }, [port1]));
    }
    const cpu0 = process.cpuUsage();
    const t0 = performance.now();
    const result = await runLoad(grpcLoad, port, duration);
    const cpu = process.cpuUsage(cpu0);
    const seconds = (performance.now() - t0) / 1000;
    // The CPU window includes the 2 s warm-up: charge it per operation over the whole window.
    const ops = result.ops_per_s * seconds;
    const cpuPerOp = ((cpu.user + cpu.system) / ops).toFixed(0);
    const name =
      mode === "io"
        ? `io × ${threads} thread${threads > 1 ? "s" : ""}`
        : "handoff (1 I/O + 1 shard)";
    const serverCores = (cpu.user + cpu.system) / 1e6 / seconds;
    return `| ${name} | ${Math.round(result.ops_per_s).toLocaleString("en-US")} | ${result.lat_ms.p50.toFixed(1)} / ${result.lat_ms.p99.toFixed(1)} | ${cpuPerOp} | ${serverCores.toFixed(2)} / ${result.loadgen_cpu_cores.toFixed(2)} | ${result.errors} |`;
  } finally {
    await Promise.all(workers.map((w) => w.terminate()));
  }
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    options: {
      threads: { type: "string", default: "1,2" },
      modes: { type: "string", default: "io,handoff" },
      duration: { type: "string", default: "10" },
      "grpc-load": { type: "string" },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(
      "usage: npm run bench:threads -- [--threads 1,2] [--modes io,handoff] [--duration S] [--grpc-load PATH]",
    );
    return;
  }
  const grpcLoad = resolve(
    values["grpc-load"] ??
      process.env["CAIRN_GRPC_LOAD"] ??
      join(ROOT, "..", "shared", "tools", "grpc-load", "build", "grpc-load"),
  );
  try {
    accessSync(grpcLoad, constants.X_OK);
  } catch {
    console.error(
      `grpc-load is not at ${grpcLoad}: build it (bash ../shared/tools/grpc-load/build.sh) or pass --grpc-load`,
    );
    process.exitCode = 2;
    return;
  }
  const duration = Number(values.duration);
  const modes = values.modes.split(",");
  console.log(
    `${cpus().length} × ${cpus()[0]?.model ?? "unknown"}, load average ${loadavg()[0]?.toFixed(2)}`,
  );
  console.log(
    "| case | Puts/s | p50 / p99 ms | µs CPU / op (all threads) | cores: server / grpc-load | errors |",
  );
  console.log("|---|---|---|---|---|---|");
  if (modes.includes("io")) {
    for (const n of values.threads.split(",").map(Number)) {
      console.log(await runCase("io", n, grpcLoad, duration));
    }
  }
  if (modes.includes("handoff")) console.log(await runCase("handoff", 1, grpcLoad, duration));
}
