/**
 * `npm run bench:replication`: the replication path alone, three real MultiRaft drivers in one
 * thread, for the per-write cost of the driver, the Raft core, the WAL and the LSM engines with
 * nothing else on the machine's cores (no gRPC, no forwarding, no other processes).
 *
 * Each driver has its own data directory (real WAL, real engines, real fsyncs) and the node's
 * defaults (1,024 shards, tick, memory budgets). The drivers talk through an in-memory transport
 * that encodes each round's messages for a peer into one batch frame and decodes it on the other
 * side (the peer streams' codec, frame-codec.ts), delivered on the next macrotask. Every shard's
 * first leader is the node `shard mod 3` (firstCampaigner), so a benchmark write goes straight to
 * its leader, as a write already forwarded would.
 *
 * A run fills the keyspace (creates every shard), then keeps `--concurrency` writes of random
 * keys in flight for `--duration` seconds, several times (`--runs`), and prints each run's
 * writes/s and CPU µs per write (the whole process: the drivers' thread, V8's helpers and the
 * fsyncs of libuv's pool), and the JavaScript heap allocated per write: on this machine the
 * CPU figures move by ±20 % from run to run, the allocation by ~1 %, so a change that only
 * allocates less shows there first. One thread does the work of three nodes, so the numbers compare
 * builds of the replication path; they are not a cluster's throughput.
 *
 *   npm run bench:replication -- [--shards N] [--keyspace N] [--concurrency C] [--duration S]
 *                                [--runs R] [--cpu-prof FILE] [--heap-prof FILE]
 *
 * --cpu-prof writes V8's CPU profile of the runs (chrome://inspect, or any .cpuprofile reader);
 * --heap-prof V8's sampling allocation profile of the runs, objects already collected included
 * (where a write's garbage comes from).
 */
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { Session } from "node:inspector/promises";
import { writeFile } from "node:fs/promises";
import { cpus, tmpdir } from "node:os";
import { constants, PerformanceObserver } from "node:perf_hooks";
import { join } from "node:path";
import { GCProfiler, getHeapStatistics } from "node:v8";
import { parseArgs } from "node:util";
import { loadConfig } from "../src/config/index.ts";
import { NotLeaderError, nodeId } from "../src/raft/index.ts";
import { MultiRaft, type RaftTransport, type ShardMessage } from "../src/replication/index.ts";
import { decodeBatchMessages, decodeFrame } from "../src/replication/frame-decode.ts";
import { encodeBatchFrame } from "../src/replication/frame-encode.ts";

const { values } = parseArgs({
  options: {
    shards: { type: "string", default: "1024" },
    keyspace: { type: "string", default: "100000" },
    concurrency: { type: "string", default: "256" },
    duration: { type: "string", default: "10" },
    runs: { type: "string", default: "3" },
    "cpu-prof": { type: "string" },
    "heap-prof": { type: "string" },
    help: { type: "boolean", short: "h", default: false },
  },
  strict: true,
});
if (values.help) {
  console.log(
    "usage: npm run bench:replication -- [--shards N] [--keyspace N] [--concurrency C] [--duration S] [--runs R] [--cpu-prof FILE] [--heap-prof FILE]",
  );
  process.exit(0);
}

function positive(name: string, v: string): number {
  const n = Number(v);
  if (!Number.isInteger(n) || n < 1) {
    console.error(
      `bench:replication: --${name} must be a positive integer, got ${JSON.stringify(v)}`,
    );
    process.exit(2);
  }
  return n;
}

const SHARDS = positive("shards", values.shards);
const KEYSPACE = positive("keyspace", values.keyspace);
const CONCURRENCY = positive("concurrency", values.concurrency);
const DURATION_S = positive("duration", values.duration);
const RUNS = positive("runs", values.runs);
const IDS = ["n1", "n2", "n3"] as const;
/** USER_HZ of /proc's times (100 on Linux). */
const CLOCK_TICKS_PER_S = 100;
const VALUE = new Uint8Array(100).fill(0x61);

/**
 * Delivers what a driver sends to a peer as the peer streams would: one batch frame for each
 * send(), encoded now, decoded and handed to the peer's receive() on the next macrotask.
 */
class LoopbackTransport implements RaftTransport {
  readonly #from: string;
  readonly #peers: Map<string, MultiRaft>;
  frames = 0;
  messages = 0;

  constructor(from: string, peers: Map<string, MultiRaft>) {
    this.#from = from;
    this.#peers = peers;
  }

  send(to: string, messages: readonly ShardMessage[], sent?: (delivered: boolean) => void): void {
    const frame = encodeBatchFrame(messages, to);
    this.frames++;
    this.messages += messages.length;
    setImmediate(() => {
      const peer = this.#peers.get(to);
      const decoded = decodeFrame(frame);
      if (peer === undefined || decoded.kind !== "batch") {
        sent?.(false);
        return;
      }
      peer.receive(this.#from, decodeBatchMessages(decoded.body, nodeId(this.#from), nodeId(to)));
      sent?.(true);
    });
  }

  flush(): void {}
}

const config = loadConfig();
const root = await mkdtemp(join(tmpdir(), "cairn-bench-replication-"));
const drivers = new Map<string, MultiRaft>();
const transports: LoopbackTransport[] = [];
const fatals: unknown[] = [];
for (const id of IDS) {
  const transport = new LoopbackTransport(id, drivers);
  transports.push(transport);
  drivers.set(
    id,
    await MultiRaft.open({
      nodeId: id,
      dataDir: join(root, id),
      totalShards: SHARDS,
      tickMs: config.raft.tick_ms,
      electionTicks: config.raft.election_ticks,
      heartbeatTicks: config.raft.heartbeat_ticks,
      quiesce: config.raft.quiesce,
      memtableBytes: config.storage.memtable_bytes,
      blockCacheBytes: config.storage.block_cache_bytes,
      memtableBudgetBytes: config.storage.memtable_budget_bytes,
      wal: { memoryBudgetBytes: config.storage.wal_cache_bytes },
      transport,
      replicasOf: () => IDS,
      firstCampaigner: (shard) => IDS[shard % IDS.length],
      observer: { fatal: (err) => fatals.push(err) },
    }),
  );
}
const driverList = [...drivers.values()];
const any = driverList[0] as MultiRaft;

function keyOf(i: number): Uint8Array {
  return Buffer.from(`key-${String(i).padStart(12, "0")}`);
}
const keys = Array.from({ length: KEYSPACE }, (_, i) => keyOf(i));
/** Each shard's leader as last learned (first guess: its first campaigner). */
const leaders = Array.from({ length: SHARDS }, (_, s) => driverList[s % IDS.length] as MultiRaft);

/**
 * One write through the key's leader, following a refusal's hint, and retried while the group
 * elects its first leader.
 */
async function write(key: Uint8Array): Promise<void> {
  const shard = any.shardOf(key);
  for (let attempt = 0; ; attempt++) {
    try {
      await (leaders[shard] as MultiRaft).put(key, VALUE);
      return;
    } catch (err) {
      if (attempt >= 200) throw err;
      const hint =
        err instanceof NotLeaderError && err.leader !== null ? drivers.get(err.leader) : undefined;
      if (hint !== undefined) leaders[shard] = hint;
      else await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }
}

/** Keeps CONCURRENCY writes in flight over `next()` until it returns null. */
async function drive(next: () => Uint8Array | null): Promise<number> {
  let done = 0;
  const worker = async (): Promise<void> => {
    for (let key = next(); key !== null; key = next()) {
      await write(key);
      done++;
    }
  };
  await Promise.all(Array.from({ length: CONCURRENCY }, worker));
  return done;
}

console.log(`bench:replication — ${new Date().toISOString()}`);
console.log(
  `machine: ${cpus().length} × ${cpus()[0]?.model ?? "?"}, Node.js ${process.version}; ` +
    `3 drivers in one thread, ${SHARDS} shards, keyspace ${KEYSPACE}, c=${CONCURRENCY}, ` +
    `${DURATION_S} s × ${RUNS} runs; data in ${root}`,
);

let filled = 0;
const fillStart = performance.now();
await drive(() => (filled < KEYSPACE ? (keys[filled++] as Uint8Array) : null));
console.log(
  `fill: ${KEYSPACE} keys in ${((performance.now() - fillStart) / 1000).toFixed(1)} s ` +
    `(${Math.round(KEYSPACE / ((performance.now() - fillStart) / 1000))} writes/s, shards created)`,
);

const session = new Session();
session.connect();
if (values["cpu-prof"] !== undefined) {
  await session.post("Profiler.enable");
  await session.post("Profiler.start");
}
if (values["heap-prof"] !== undefined) {
  await session.post("HeapProfiler.enable");
  await session.post("HeapProfiler.startSampling", {
    samplingInterval: 1024,
    includeObjectsCollectedByMajorGC: true,
    includeObjectsCollectedByMinorGC: true,
  });
}

let seed = 0x9e3779b9;
const random = (): number => {
  seed ^= seed << 13;
  seed ^= seed >>> 17;
  seed ^= seed << 5;
  return (seed >>> 0) % KEYSPACE;
};
/** Milliseconds of garbage-collection pauses on the drivers' thread, by kind, since start. */
const gcMs = { minor: 0, major: 0 };
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) {
    const kind = (e as { detail?: { kind?: number } }).detail?.kind;
    if (kind === constants.NODE_PERFORMANCE_GC_MINOR) gcMs.minor += e.duration;
    else gcMs.major += e.duration;
  }
}).observe({ entryTypes: ["gc"] });
const results: { rate: number; cpuUs: number }[] = [];

/** The process's memory now: V8's heap, the ArrayBuffers' bytes outside it, and the RSS. */
function memory(): string {
  const m = process.memoryUsage();
  const mib = (n: number): number => Math.round(n / 2 ** 20);
  return `heap ${mib(m.heapUsed)} MiB, array buffers ${mib(m.arrayBuffers)} MiB, RSS ${mib(m.rss)} MiB`;
}

/** CPU time of this (the main) thread, ms: utime + stime of /proc/self/task/<pid>/stat. */
function mainThreadCpuMs(): number {
  const stat = readFileSync(`/proc/self/task/${process.pid}/stat`, "utf8");
  const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
  return ((Number(fields[11]) + Number(fields[12])) * 1000) / CLOCK_TICKS_PER_S;
}
/**
 * Bytes the JavaScript heap allocated while `work` ran: what the heap grew by between
 * collections, summed (V8's GC profiler reports the heap's use before and after each one).
 */
async function allocatedBy<T>(work: () => Promise<T>): Promise<{ result: T; bytes: number }> {
  const profiler = new GCProfiler();
  profiler.start();
  const used0 = getHeapStatistics().used_heap_size;
  const result = await work();
  const used1 = getHeapStatistics().used_heap_size;
  let bytes = 0;
  let since = used0;
  for (const gc of profiler.stop()?.statistics ?? []) {
    bytes += Math.max(0, gc.beforeGC.heapStatistics.usedHeapSize - since);
    since = gc.afterGC.heapStatistics.usedHeapSize;
  }
  bytes += Math.max(0, used1 - since);
  return { result, bytes };
}

for (let run = 1; run <= RUNS; run++) {
  const frames0 = transports.reduce((a, t) => a + t.frames, 0);
  const messages0 = transports.reduce((a, t) => a + t.messages, 0);
  const gc0 = { ...gcMs };
  const main0 = mainThreadCpuMs();
  const cpu0 = process.cpuUsage();
  const t0 = performance.now();
  const end = t0 + DURATION_S * 1000;
  const { result: writes, bytes: allocated } = await allocatedBy(() =>
    drive(() => (performance.now() < end ? (keys[random()] as Uint8Array) : null)),
  );
  const seconds = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const cpuUs = (cpu.user + cpu.system) / writes;
  const mainUs = ((mainThreadCpuMs() - main0) * 1000) / writes;
  const frames = transports.reduce((a, t) => a + t.frames, 0) - frames0;
  const messages = transports.reduce((a, t) => a + t.messages, 0) - messages0;
  results.push({ rate: writes / seconds, cpuUs });
  console.log(
    `run ${run}: ${Math.round(writes / seconds)} writes/s, CPU ${cpuUs.toFixed(1)} µs a write ` +
      `(user ${(cpu.user / writes).toFixed(1)}, system ${(cpu.system / writes).toFixed(1)}; ` +
      `the drivers' thread ${mainUs.toFixed(1)}), ` +
      `${(messages / writes).toFixed(2)} messages and ${(frames / writes).toFixed(3)} frames a write; ` +
      `${(allocated / writes / 1024).toFixed(1)} KiB allocated and GC pauses ${(((gcMs.minor - gc0.minor) * 1000) / writes).toFixed(1)} µs minor + ` +
      `${(((gcMs.major - gc0.major) * 1000) / writes).toFixed(1)} µs major a write, ` +
      `${memory()}`,
  );
}

if (values["cpu-prof"] !== undefined) {
  const { profile } = await session.post("Profiler.stop");
  await writeFile(values["cpu-prof"], JSON.stringify(profile));
  console.log(`CPU profile of the runs: ${values["cpu-prof"]}`);
}
if (values["heap-prof"] !== undefined) {
  const { profile } = await session.post("HeapProfiler.stopSampling");
  await writeFile(values["heap-prof"], JSON.stringify(profile));
  console.log(`allocation profile of the runs: ${values["heap-prof"]}`);
}
session.disconnect();

const sorted = [...results].sort((a, b) => a.cpuUs - b.cpuUs);
const median = sorted[Math.floor(sorted.length / 2)] as { rate: number; cpuUs: number };
console.log(
  `median: ${Math.round(median.rate)} writes/s, ${median.cpuUs.toFixed(1)} µs of CPU a write`,
);
for (const d of driverList) await d.close();
await rm(root, { recursive: true, force: true });
if (fatals.length > 0) {
  console.error("bench:replication: a driver failed:", fatals[0]);
  process.exit(1);
}
