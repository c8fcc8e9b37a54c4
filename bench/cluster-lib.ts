/**
 * The pure parts of `npm run bench:cluster` (bench/cluster.ts), kept apart so that a unit test
 * can check them without starting a cluster: reading the two generators' output, the counters of
 * each node's /metrics, a CPU profile's self time, and the Markdown table.
 */

import { join } from "node:path";

export type Generator = "grpc-load" | "cairn-bench";
export type Op = "put" | "get";

const PROTO_ROOT = join(import.meta.dirname, "..", "proto");

/**
 * grpc-load's arguments for Puts or linearizable Gets of cairn.v1.KV at `target` (one address
 * or several, comma-separated), with 16-byte keys and 100-byte values; Gets count their hits.
 * Every benchmark that drives Cairn with grpc-load starts its command line with these.
 */
export function grpcLoadKvArgs(op: Op, target: string): string[] {
  return [
    "--proto",
    join(PROTO_ROOT, "cairn", "v1", "kv.proto"),
    "--import-path",
    PROTO_ROOT,
    "--method",
    op === "put" ? "/cairn.v1.KV/Put" : "/cairn.v1.KV/Get",
    "--request",
    op === "put"
      ? '{"key":"{key}","value":"{value}"}'
      : '{"key":"{key}","consistency":"LINEARIZABLE"}',
    "--target",
    target,
    "--key-size",
    "16",
    "--value-size",
    "100",
    ...(op === "get" ? ["--hit-field", "found"] : []),
  ];
}

/** One measured case, whichever generator ran it. */
export interface CaseResult {
  readonly generator: Generator;
  readonly op: Op;
  readonly concurrency: number;
  readonly seconds: number;
  readonly ops: number;
  readonly opsPerSec: number;
  readonly p50: number;
  readonly p90: number;
  readonly p99: number;
  readonly p999: number;
  /** The slowest call of the window (ms): a request stalled for seconds shows here first. */
  readonly max: number;
  readonly errors: number;
  readonly errorsByCode: Readonly<Record<string, number>>;
  /** The generator's own CPU over the measured window, in % of one core. */
  readonly clientCpuPercent: number;
  /** grpc-load with --hit-field: the share of Gets that found their key. */
  readonly hitRatio: number | null;
  /** The first error message grpc-load saw, if any. */
  readonly firstError: string | null;
}

function fail(what: string, why: string, text: string): never {
  const excerpt = text.length > 400 ? `${text.slice(0, 400)}…` : text;
  throw new Error(`${what}: ${why}; output was: ${JSON.stringify(excerpt)}`);
}

function num(o: Record<string, unknown>, key: string, what: string, text: string): number {
  const v = o[key];
  if (typeof v !== "number" || !Number.isFinite(v)) fail(what, `no number "${key}"`, text);
  return v;
}

function obj(o: Record<string, unknown>, key: string, what: string, text: string) {
  const v = o[key];
  if (typeof v !== "object" || v === null || Array.isArray(v))
    fail(what, `no object "${key}"`, text);
  return v as Record<string, unknown>;
}

function counts(o: Record<string, unknown>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const [k, v] of Object.entries(o)) if (typeof v === "number") out[k] = v;
  return out;
}

/**
 * grpc-load prints one JSON object on its last line (its README): ops_per_s, errors,
 * errors_by_code, lat_ms {p50,p90,p99,…}, loadgen_cpu_cores, hit_ratio with --hit-field.
 */
export function parseGrpcLoad(stdout: string, op: Op, concurrency: number): CaseResult {
  const what = "grpc-load output";
  const line = stdout
    .trim()
    .split("\n")
    .reverse()
    .find((l) => l.trimStart().startsWith("{"));
  if (line === undefined) fail(what, "no JSON line", stdout);
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(line) as Record<string, unknown>;
  } catch {
    fail(what, "the last JSON line does not parse", stdout);
  }
  if (o["test"] !== "grpc-load") fail(what, `"test" is not "grpc-load"`, stdout);
  const lat = obj(o, "lat_ms", what, stdout);
  const ops = num(o, "ops", what, stdout);
  // lat_ms has only "n" when no call succeeded.
  const ms = (k: string): number => (ops === 0 ? 0 : num(lat, k, what, stdout));
  const hit = o["hit_ratio"];
  const firstError = o["first_error"];
  return {
    generator: "grpc-load",
    op,
    concurrency,
    seconds: num(o, "seconds", what, stdout),
    ops,
    opsPerSec: num(o, "ops_per_s", what, stdout),
    p50: ms("p50"),
    p90: ms("p90"),
    p99: ms("p99"),
    p999: ms("p999"),
    max: ms("max"),
    errors: num(o, "errors", what, stdout),
    errorsByCode: counts(obj(o, "errors_by_code", what, stdout)),
    clientCpuPercent: num(o, "loadgen_cpu_cores", what, stdout) * 100,
    hitRatio: typeof hit === "number" ? hit : null,
    firstError: typeof firstError === "string" ? firstError : null,
  };
}

/** `cairn bench … --output json` prints one (pretty-printed) JSON object (src/cli/bench.ts). */
export function parseCairnBench(stdout: string, op: Op, concurrency: number): CaseResult {
  const what = "cairn bench output";
  let o: Record<string, unknown>;
  try {
    o = JSON.parse(stdout) as Record<string, unknown>;
  } catch {
    fail(what, "not one JSON object", stdout);
  }
  const lat = obj(o, "latency_ms", what, stdout);
  return {
    generator: "cairn-bench",
    op,
    concurrency,
    seconds: num(o, "duration_s", what, stdout),
    ops: num(o, "ops", what, stdout),
    opsPerSec: num(o, "ops_per_sec", what, stdout),
    p50: num(lat, "p50", what, stdout),
    p90: num(lat, "p90", what, stdout),
    p99: num(lat, "p99", what, stdout),
    p999: num(lat, "p999", what, stdout),
    max: num(lat, "max", what, stdout),
    errors: num(o, "error_count", what, stdout),
    errorsByCode: counts(obj(o, "errors", what, stdout)),
    clientCpuPercent: num(o, "client_cpu_percent", what, stdout),
    hitRatio: null,
    firstError: null,
  };
}

/** The samples of a Prometheus text exposition, keyed `name{labels}` as written. */
export function parseMetrics(text: string): Map<string, number> {
  const out = new Map<string, number>();
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    // The value follows the last space outside the labels (an optional timestamp is not used
    // by prom-client's exposition).
    const close = line.lastIndexOf("}");
    const space = line.indexOf(" ", close === -1 ? 0 : close);
    if (space === -1) continue;
    const value = Number(
      line
        .slice(space + 1)
        .trim()
        .split(" ")[0],
    );
    if (!Number.isNaN(value)) out.set(line.slice(0, space), value);
  }
  return out;
}

/** The sum of every sample of `name` whose labels include each of `labels` (exact values). */
export function sumMetric(
  samples: ReadonlyMap<string, number>,
  name: string,
  labels: Readonly<Record<string, string>> = {},
): number {
  let total = 0;
  for (const [key, value] of samples) {
    const brace = key.indexOf("{");
    if ((brace === -1 ? key : key.slice(0, brace)) !== name) continue;
    const labelText = brace === -1 ? "" : key.slice(brace);
    if (Object.entries(labels).every(([k, v]) => labelText.includes(`${k}="${v}"`))) total += value;
  }
  return total;
}

/** What the nodes did during one case, from their /metrics before and after it. */
export interface ServerSide {
  /** CPU of all nodes together, in cores (1.0 = one core busy for the whole case). */
  readonly cpuCores: number;
  /** CPU of each node, in cores. */
  readonly cpuCoresByNode: readonly number[];
  /** Requests that reached a node not leading the key's shard and were forwarded. */
  readonly forwarded: number;
  /** Requests answered by a leader (success or error): each client request once. */
  readonly answered: number;
  readonly leaderChanges: number;
  /** Raft messages the nodes sent each other, and the heartbeats among them. */
  readonly peerMessages: number;
  readonly heartbeats: number;
}

export function serverSide(
  before: readonly ReadonlyMap<string, number>[],
  after: readonly ReadonlyMap<string, number>[],
  seconds: number,
): ServerSide {
  const delta = (i: number, name: string, labels: Record<string, string> = {}): number => {
    const a = after[i];
    const b = before[i];
    if (a === undefined || b === undefined) return 0;
    return sumMetric(a, name, labels) - sumMetric(b, name, labels);
  };
  const byNode = after.map((_, i) => delta(i, "process_cpu_seconds_total") / seconds);
  let forwarded = 0;
  let answered = 0;
  let leaderChanges = 0;
  let peerMessages = 0;
  let heartbeats = 0;
  for (let i = 0; i < after.length; i++) {
    peerMessages += delta(i, "cairn_raft_messages_sent_total");
    heartbeats += delta(i, "cairn_raft_heartbeats_sent_total");
    forwarded += delta(i, "kv_requests_total", { status: "not_leader" });
    answered +=
      delta(i, "kv_requests_total", { status: "success" }) +
      delta(i, "kv_requests_total", { status: "error" });
    leaderChanges += delta(i, "raft_leader_changes_total");
  }
  return {
    cpuCores: byNode.reduce((a, b) => a + b, 0),
    cpuCoresByNode: byNode,
    forwarded,
    answered,
    leaderChanges,
    peerMessages,
    heartbeats,
  };
}

/** The subset of a V8 .cpuprofile (Chrome DevTools Protocol `Profiler.Profile`) used here. */
export interface CpuProfile {
  readonly nodes: readonly {
    readonly id: number;
    readonly callFrame: {
      readonly functionName: string;
      readonly url: string;
      readonly lineNumber: number;
    };
  }[];
  readonly samples?: readonly number[];
  readonly timeDeltas?: readonly number[];
}

export interface SelfTime {
  readonly name: string;
  readonly ms: number;
  /** Share of the profile's busy time (everything but `(idle)`), 0..1. */
  readonly share: number;
}

/** Where a function lives: `src/raft`, `@grpc/grpc-js`, `node:internal/…`, `(gc)`. */
export function areaOf(functionName: string, url: string): string {
  if (functionName === "(garbage collector)") return "(gc)";
  if (functionName === "(program)") return "(program: V8/native)";
  if (functionName === "(idle)") return "(idle)";
  if (functionName === "(root)") return "(root)";
  const nm = url.lastIndexOf("/node_modules/");
  if (nm !== -1) {
    const parts = url.slice(nm + "/node_modules/".length).split("/");
    return parts[0]?.startsWith("@") === true ? `${parts[0]}/${parts[1] ?? ""}` : (parts[0] ?? url);
  }
  const src = url.lastIndexOf("/src/");
  if (src !== -1) {
    const parts = url.slice(src + 1).split("/");
    return parts.slice(0, 2).join("/");
  }
  if (url.startsWith("node:")) return "node: (Node.js internals)";
  if (url === "") return "(native)";
  return url;
}

function shortUrl(url: string): string {
  const nm = url.lastIndexOf("/node_modules/");
  if (nm !== -1) return url.slice(nm + "/node_modules/".length);
  const src = url.lastIndexOf("/src/");
  if (src !== -1) return url.slice(src + 1);
  return url.replace(/^file:\/\//, "");
}

/**
 * Self time of every function (and, with `byArea`, of every area) of one or more profiles,
 * largest first. A sample's time is the delta to the next sample (the last one gets the mean).
 */
export function selfTimes(
  profiles: readonly CpuProfile[],
  byArea = false,
): { readonly busyMs: number; readonly idleMs: number; readonly rows: SelfTime[] } {
  const totals = new Map<string, number>();
  let busy = 0;
  let idle = 0;
  for (const p of profiles) {
    const frames = new Map(p.nodes.map((n) => [n.id, n.callFrame]));
    const samples = p.samples ?? [];
    const deltas = p.timeDeltas ?? [];
    const mean =
      deltas.length > 1 ? deltas.slice(1).reduce((a, b) => a + b, 0) / (deltas.length - 1) : 0;
    for (let i = 0; i < samples.length; i++) {
      const f = frames.get(samples[i] as number);
      if (f === undefined) continue;
      const us = i + 1 < deltas.length ? (deltas[i + 1] as number) : mean;
      if (f.functionName === "(idle)") {
        idle += us;
        continue;
      }
      busy += us;
      const key = byArea
        ? areaOf(f.functionName, f.url)
        : f.url === ""
          ? f.functionName
          : `${f.functionName || "(anonymous)"} ${shortUrl(f.url)}:${f.lineNumber + 1}`;
      totals.set(key, (totals.get(key) ?? 0) + us);
    }
  }
  const rows = [...totals]
    .map(([name, us]) => ({ name, ms: us / 1000, share: busy === 0 ? 0 : us / busy }))
    .sort((a, b) => b.ms - a.ms);
  return { busyMs: busy / 1000, idleMs: idle / 1000, rows };
}

/** One row of the final table: a case and what the servers did during it. */
export interface Row extends CaseResult {
  readonly server: ServerSide | null;
  /** The 1-minute load average when the case started. */
  readonly loadAvg: number;
}

const fmt = (n: number, digits = 0): string =>
  n.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });

export function markdownTable(rows: readonly Row[]): string {
  const lines = [
    "| generator | op | c | ops/s | p50 ms | p99 ms | errors | forwarded | peer messages / op (heartbeats) | nodes' CPU (cores) | nodes' CPU µs/op | client CPU | load avg |",
    "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
  ];
  for (const r of rows) {
    const s = r.server;
    const forwarded =
      s === null || s.answered === 0 ? "–" : `${fmt((100 * s.forwarded) / s.answered)}%`;
    const peers =
      s === null || s.answered === 0
        ? "–"
        : `${fmt(s.peerMessages / s.answered, 1)} (${fmt(s.heartbeats / s.answered, 1)})`;
    const cpu = s === null ? "–" : fmt(s.cpuCores, 2);
    const perOp = s === null || r.ops === 0 ? "–" : fmt((s.cpuCores * 1e6) / r.opsPerSec);
    const op = r.op === "get" ? "get (linearizable)" : "put";
    lines.push(
      `| ${r.generator} | ${op} | ${r.concurrency} | ${fmt(r.opsPerSec)} | ${fmt(r.p50, 2)} | ${fmt(r.p99, 2)} | ${fmt(r.errors)} | ${forwarded} | ${peers} | ${cpu} | ${perOp} | ${fmt(r.clientCpuPercent)}% | ${fmt(r.loadAvg, 1)} |`,
    );
  }
  return `${lines.join("\n")}\n`;
}

/** Parses a comma-separated list, each item one of `allowed`. */
export function parseList<T extends string>(
  flag: string,
  text: string,
  allowed: readonly T[],
): T[] {
  const items = text.split(",").map((s) => s.trim());
  for (const i of items) {
    if (!(allowed as readonly string[]).includes(i))
      throw new Error(`--${flag}: ${JSON.stringify(i)} is not one of ${allowed.join(", ")}`);
  }
  return items as T[];
}

export function parseConcurrencies(text: string): number[] {
  return text.split(",").map((s) => {
    const n = Number(s.trim());
    if (!Number.isInteger(n) || n < 1 || n > 10_000)
      throw new Error(`--concurrency: ${JSON.stringify(s)} is not an integer in 1..10000`);
    return n;
  });
}
