/**
 * `cairn bench`: a closed-loop load generator over CairnClient, with an optional rate limit.
 * Latency goes into HDR histograms (µs, 3 significant digits); with `--rate` it is measured from
 * each operation's scheduled start, so a slow server is not hidden (no coordinated omission).
 * It reports its own CPU use: past 90% of a core the generator, not the server, is the limit.
 */
import { build, type Histogram } from "hdr-histogram-js";
import { CairnClient, DeadlineExceededError, UnavailableError } from "../client/index.ts";
import type { CairnError } from "../common/errors.ts";
import {
  type CommandOptions,
  EXIT,
  expectPositionals,
  GLOBAL_HELP,
  runCommand,
  str,
  UsageError,
  writeJson,
} from "./common.ts";
import {
  type Distribution,
  keyOf,
  MIN_KEY_SIZE,
  operations,
  seededRandom,
  type WorkloadSpec,
} from "./bench-workload.ts";
import type { Io } from "./io.ts";

/** The most operations in flight, and connections, a run may ask for. */
const MAX_CONCURRENCY = 100_000;
const MAX_CHANNELS = 1024;

export const BENCH_HELP = `Usage: cairn bench WORKLOAD [options]

Load-tests a cluster and reports throughput, errors and latency percentiles.

Workloads:
  put                        only Puts
  get                        only linearizable Gets (after a fill phase)
  mixed --read-ratio R       Gets with probability R, else Puts (YCSB-A R=0.5, B R=0.95, C R=1)

Options:
  --duration S               measured seconds (default 10)
  --warmup S                 seconds run before measuring (default 1)
  --concurrency N            operations in flight (default 64, at most ${MAX_CONCURRENCY})
  --channels N               gRPC connections (default 4, at most ${MAX_CHANNELS})
  --rate OPS                 at most OPS operations/s in total (default 0 = unlimited)
  --keyspace N               number of distinct keys (default 10000)
  --key-size B               key bytes (default 16, at least ${MIN_KEY_SIZE})
  --value-size B             value bytes (default 100)
  --distribution D           uniform (default) or zipfian (YCSB, constant 0.99)
  --read-ratio R             for mixed (default 0.5)
  --serializable             serializable Gets instead of linearizable
  --no-fill                  skip writing the keyspace before get/mixed
  --seed N                   seed of the key and operation choices (default 1)
${GLOBAL_HELP}
  (--timeout is the deadline of each operation here.)

Progress goes to stderr: a live line on a terminal, one line per second otherwise. The result is
a table, or with --output json one object: ops_per_sec, errors by code, latency_ms
{p50,p90,p99,p999,max,mean}, per-operation figures and client_cpu_percent. Throughput and
latency count the measured operations; errors count every operation that failed, in the
warm-up and after the end too.

Exit: 0 when no operation failed; 3 when some failed and every failure was "unavailable" (no
node answered in time); 5 when any other error occurred.

Examples:
  cairn bench put --concurrency 64 --duration 30
  cairn bench get --keyspace 100000 --distribution zipfian
  cairn bench mixed --read-ratio 0.95 --rate 5000 --output json
`;

interface Figures {
  ops: number;
  ops_per_sec: number;
  latency_ms: { p50: number; p90: number; p99: number; p999: number; max: number; mean: number };
}

export const BENCH_OPTIONS = {
  duration: { type: "string" },
  warmup: { type: "string" },
  concurrency: { type: "string" },
  channels: { type: "string" },
  rate: { type: "string" },
  keyspace: { type: "string" },
  "key-size": { type: "string" },
  "value-size": { type: "string" },
  distribution: { type: "string" },
  "read-ratio": { type: "string" },
  serializable: { type: "boolean" },
  "no-fill": { type: "boolean" },
  seed: { type: "string" },
} as const satisfies CommandOptions;

export function bench(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "bench",
    BENCH_HELP,
    BENCH_OPTIONS,
    argv,
    io,
    async ({ values, positionals, globals }) => {
      expectPositionals(positionals, ["WORKLOAD"]);
      const workload = positionals[0] as string;
      if (workload !== "put" && workload !== "get" && workload !== "mixed")
        throw new UsageError(`WORKLOAD must be put, get or mixed, not ${JSON.stringify(workload)}`);
      const num = (
        name: string,
        def: number,
        min: number,
        integer = true,
        max = Infinity,
      ): number => {
        const text = str(values, name);
        if (text === undefined) return def;
        // Decimal digits (and a fraction where one is taken), as the other commands' numbers
        // (common.ts, wholeNumber): Number(text) alone read "" and " " as 0, so `--rate "$RATE"`
        // with RATE unset ran without a limit, and it took hexadecimal and exponents.
        const written = integer ? /^[0-9]+$/ : /^(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)$/;
        const n = written.test(text) ? Number(text) : NaN;
        if (!Number.isFinite(n) || n < min || n > max || (integer && !Number.isSafeInteger(n)))
          throw new UsageError(
            `--${name} must be ${integer ? "an integer" : "a number"} ${max === Infinity ? `≥ ${min}` : `from ${min} to ${max}`}, not ${JSON.stringify(text)}`,
          );
        return n;
      };
      const durationS = num("duration", 10, 0.1, false);
      const warmupS = num("warmup", 1, 0, false);
      // Bounded: each operation in flight and each connection holds memory, and a typo's
      // hundred million of them ran the process out of it.
      const concurrency = num("concurrency", 64, 1, true, MAX_CONCURRENCY);
      const channels = num("channels", 4, 1, true, MAX_CHANNELS);
      const rate = num("rate", 0, 0, false);
      const keyspace = num("keyspace", 10_000, 1);
      const keySize = num("key-size", 16, MIN_KEY_SIZE);
      const valueSize = num("value-size", 100, 0);
      const seed = num("seed", 1, 0);
      const readRatioFlag = str(values, "read-ratio");
      if (readRatioFlag !== undefined && workload !== "mixed")
        throw new UsageError("--read-ratio applies to the mixed workload only");
      const readRatio =
        workload === "put" ? 0 : workload === "get" ? 1 : num("read-ratio", 0.5, 0, false);
      if (readRatio > 1) throw new UsageError("--read-ratio must be between 0 and 1");
      const distribution = str(values, "distribution") ?? "uniform";
      if (distribution !== "uniform" && distribution !== "zipfian")
        throw new UsageError(`--distribution must be uniform or zipfian, not ${distribution}`);
      const spec: WorkloadSpec = {
        readRatio,
        keyspace,
        keySize,
        distribution: distribution as Distribution,
      };
      const consistency = values["serializable"] === true ? "serializable" : "linearizable";

      const clients = Array.from(
        { length: channels },
        () =>
          new CairnClient({
            endpoints: globals.endpoints,
            timeoutMs: globals.timeoutMs,
            ...(globals.tls === undefined ? {} : { tls: globals.tls }),
            ...(globals.token === undefined ? {} : { token: globals.token }),
            // Every connection routes by the cluster view (each follows it on its own watch):
            // a client that routed only on one of them sent the others' requests round-robin.
            routing: true,
            channelOptions: { "grpc.use_local_subchannel_pool": 1 },
          }),
      );
      try {
        const value = new Uint8Array(valueSize).fill(0x61);
        const progress = new Progress(io);
        if (readRatio > 0 && values["no-fill"] !== true) {
          let next = 0;
          const t0 = performance.now();
          progress.phase("fill", () => `${next}/${keyspace} keys`);
          await Promise.all(
            Array.from({ length: Math.min(concurrency, keyspace) }, async (_, w) => {
              const client = clients[w % channels] as CairnClient;
              while (next < keyspace) await client.put(keyOf(next++, keySize), value);
            }),
          );
          progress.done(
            `fill: ${keyspace} keys in ${((performance.now() - t0) / 1000).toFixed(1)} s`,
          );
        }

        const histograms = { put: newHistogram(), get: newHistogram() };
        const counts = { put: 0, get: 0 };
        const errors = new Map<string, number>();
        /** Every failure so far says no node answered (exit 3), none is another error (exit 5). */
        let onlyUnavailable = true;
        const random = seededRandom(seed);
        const nextOp = operations(spec, random);
        const start = performance.now();
        const measureFrom = start + warmupS * 1000;
        const end = measureFrom + durationS * 1000;
        let issued = 0;
        let measuredOps = 0;
        // This process's CPU use is counted from the end of the warm-up.
        let cpuAtMeasure: NodeJS.CpuUsage | null = warmupS === 0 ? process.cpuUsage() : null;
        const cpuTimer = setTimeout(() => (cpuAtMeasure = process.cpuUsage()), warmupS * 1000);
        progress.phase("run", () => {
          const now = performance.now();
          if (now < measureFrom) return `warm-up ${((measureFrom - now) / 1000).toFixed(0)} s left`;
          const s = (now - measureFrom) / 1000;
          return `${progress.bar(s / durationS)}${s.toFixed(0)}/${durationS} s  ${Math.round(measuredOps / Math.max(s, 0.001))} ops/s  errors ${sum(errors)}`;
        });
        await Promise.all(
          Array.from({ length: concurrency }, async (_, w) => {
            const client = clients[w % channels] as CairnClient;
            for (;;) {
              // With --rate, operation n is due at start + n/rate; its latency counts from then.
              const n = issued++;
              let scheduled = performance.now();
              if (rate > 0) {
                scheduled = start + (n * 1000) / rate;
                const wait = scheduled - performance.now();
                if (wait > 0) await new Promise((r) => setTimeout(r, wait));
              }
              if (scheduled >= end || performance.now() >= end) return;
              const op = nextOp();
              const key = keyOf(op.item, keySize);
              let failed: string | null = null;
              try {
                if (op.kind === "put") await client.put(key, value);
                else await client.get(key, { consistency });
              } catch (err) {
                failed = (err as CairnError).code ?? (err as Error).name;
                if (!(err instanceof UnavailableError || err instanceof DeadlineExceededError)) {
                  onlyUnavailable = false;
                }
              }
              const done = performance.now();
              // Every failure is reported, in the warm-up or after the end too: a run whose
              // operations all time out past its end did fail.
              if (failed !== null) errors.set(failed, (errors.get(failed) ?? 0) + 1);
              if (scheduled < measureFrom) continue;
              if (done > end) return;
              measuredOps++;
              if (failed !== null) continue;
              counts[op.kind]++;
              histograms[op.kind].recordValue(Math.max(1, Math.round((done - scheduled) * 1000)));
            }
          }),
        );
        clearTimeout(cpuTimer);
        const cpu = process.cpuUsage(cpuAtMeasure ?? undefined);
        const measuredS = Math.max(0.001, (Math.min(performance.now(), end) - measureFrom) / 1000);
        progress.done("");

        const all = newHistogram();
        all.add(histograms.put);
        all.add(histograms.get);
        const cpuPercent = ((cpu.user + cpu.system) / 1000 / (measuredS * 1000)) * 100;
        const warnings: string[] = [];
        if (cpuPercent > 90)
          warnings.push(
            `the load generator used ${cpuPercent.toFixed(0)}% of a core: it may be the bottleneck; run several cairn bench processes or machines`,
          );
        const ok = counts.put + counts.get;
        const result = {
          workload,
          read_ratio: readRatio,
          distribution,
          consistency,
          keyspace,
          key_size: keySize,
          value_size: valueSize,
          concurrency,
          channels,
          rate_limit: rate,
          duration_s: Number(measuredS.toFixed(3)),
          ...figures(all, ok, measuredS),
          errors: Object.fromEntries(errors),
          error_count: sum(errors),
          by_operation: {
            ...(counts.put > 0 ? { put: figures(histograms.put, counts.put, measuredS) } : {}),
            ...(counts.get > 0 ? { get: figures(histograms.get, counts.get, measuredS) } : {}),
          },
          client_cpu_percent: Number(cpuPercent.toFixed(1)),
          warnings,
        };
        for (const w of warnings) io.stderr.write(`cairn bench: warning: ${w}\n`);
        if (globals.output === "json") writeJson(io, result);
        else io.stdout.write(table(result));
        if (result.error_count === 0) return EXIT.ok;
        io.stderr.write(
          `cairn bench: ${result.error_count} operations failed (${Object.entries(result.errors)
            .map(([c, n]) => `${c} ${n}`)
            .join(", ")}); ${ok} succeeded\n`,
        );
        return onlyUnavailable ? EXIT.unavailable : EXIT.failed;
      } finally {
        for (const c of clients) c.close();
      }
    },
  );
}

function newHistogram(): Histogram {
  return build({
    lowestDiscernibleValue: 1,
    highestTrackableValue: 3_600_000_000,
    numberOfSignificantValueDigits: 3,
  });
}

function sum(m: Map<string, number>): number {
  let n = 0;
  for (const v of m.values()) n += v;
  return n;
}

function figures(h: Histogram, ops: number, seconds: number): Figures {
  // HDR percentiles are bucket upper bounds; no percentile may exceed the exact max.
  const ms = (us: number): number => Number((Math.min(us, h.maxValue) / 1000).toFixed(3));
  return {
    ops,
    ops_per_sec: Math.round(ops / seconds),
    latency_ms: {
      p50: ms(h.getValueAtPercentile(50)),
      p90: ms(h.getValueAtPercentile(90)),
      p99: ms(h.getValueAtPercentile(99)),
      p999: ms(h.getValueAtPercentile(99.9)),
      max: ms(h.maxValue),
      mean: ms(h.mean),
    },
  };
}

function table(
  r: Figures & {
    workload: string;
    concurrency: number;
    channels: number;
    duration_s: number;
    errors: Record<string, number>;
    by_operation: Record<string, Figures>;
    client_cpu_percent: number;
  },
): string {
  const row = (name: string, f: Figures): string =>
    [
      name,
      f.ops,
      f.ops_per_sec,
      f.latency_ms.p50,
      f.latency_ms.p90,
      f.latency_ms.p99,
      f.latency_ms.p999,
      f.latency_ms.max,
    ]
      .map((c, i) => (i === 0 ? String(c).padEnd(6) : String(c).padStart(10)))
      .join(" ");
  let out = `workload ${r.workload}, concurrency ${r.concurrency}, ${r.channels} channels, ${r.duration_s} s measured\n\n`;
  out += `${["op".padEnd(6), ...["ops", "ops/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"].map((h) => h.padStart(10))].join(" ")}\n`;
  for (const [name, f] of Object.entries(r.by_operation)) out += `${row(name, f)}\n`;
  if (Object.keys(r.by_operation).length > 1) out += `${row("all", r)}\n`;
  const errs = Object.entries(r.errors);
  out += `\nerrors: ${errs.length === 0 ? "none" : errs.map(([c, n]) => `${c} ${n}`).join(", ")}\n`;
  out += `client CPU: ${r.client_cpu_percent}% of a core\n`;
  return out;
}

/** Progress on stderr: a live line on a terminal, a plain line per second otherwise. */
class Progress {
  readonly #io: Io;
  readonly #tty: boolean;
  #timer: NodeJS.Timeout | null = null;

  constructor(io: Io) {
    this.#io = io;
    this.#tty = (io.stderr as NodeJS.WritableStream & { isTTY?: boolean }).isTTY === true;
  }

  phase(name: string, status: () => string): void {
    this.done("");
    this.#timer = setInterval(
      () => {
        const line = `${name}: ${status()}`;
        this.#io.stderr.write(this.#tty ? `\r\x1b[K${line}` : `${line}\n`);
      },
      this.#tty ? 250 : 1000,
    );
    this.#timer.unref();
  }

  /** A bar of 20 cells for `fraction` on a terminal; nothing in plain lines. */
  bar(fraction: number): string {
    if (!this.#tty) return "";
    const full = Math.max(0, Math.min(20, Math.round(fraction * 20)));
    return `[${"#".repeat(full)}${".".repeat(20 - full)}] `;
  }

  done(message: string): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
    if (this.#tty) this.#io.stderr.write("\r\x1b[K");
    if (message !== "") this.#io.stderr.write(`${message}\n`);
  }
}
