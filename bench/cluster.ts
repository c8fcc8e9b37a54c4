/**
 * `npm run bench:cluster`: Put and linearizable Get against a local 3-node cluster (issue 10), or
 * one of `--nodes N` founding members (what a node more costs on the same cores).
 *
 * Starts the `cairn serve` processes on 127.0.0.1 (free ports, fresh data directories in a
 * temporary directory, the settings of scripts/cluster-layout.ts), waits until every node answers
 * /health/quick and the cluster has formed, fills the keyspace (which creates every shard through
 * the meta group), waits until the shards' leaders stop moving, then runs every case:
 *
 * - `grpc-load` (the C++ closed-loop generator beside the repository, ~20 µs of CPU a call):
 *   routing-blind, its connections spread over the nodes and calls round-robin over the
 *   connections, so about two requests in three reach a node that does not lead the key's shard
 *   and are forwarded, as with etcd's clients;
 * - `cairn bench` (the project's generator, grpc-js): one routing client (`--channels 1`, which
 *   keeps one connection to each node), so every request goes to its shard's leader.
 *
 * 16-byte keys, 100-byte values, keys uniform over the keyspace; Gets are linearizable. For each
 * case it also reads every node's /metrics before and after: the nodes' CPU, the share of
 * requests that were forwarded, and leader changes. It prints a Markdown table and the machine.
 * The nodes are stopped (SIGTERM, then SIGKILL after 15 s) at the end, on failure and on Ctrl-C.
 *
 * With `--cpu-prof DIR` every node is profiled (V8 sampling profiler over the inspector protocol)
 * during each measured case only; the profiles are written to DIR and summarised (self time).
 */
import { createWriteStream, mkdirSync, writeFileSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import type { Placement } from "../scripts/cluster-layout.ts";
import {
  CAIRN,
  checkGrpcLoad,
  DEFAULT_GRPC_LOAD,
  describeLeaders,
  finishNodes,
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
  type CaseResult,
  type CpuProfile,
  type Generator,
  markdownTable,
  type Op,
  grpcLoadKvArgs,
  parseCairnBench,
  parseConcurrencies,
  parseGrpcLoad,
  parseList,
  parseMetrics,
  type Row,
  selfTimes,
  serverSide,
} from "./cluster-lib.ts";

const HELP = `Usage: npm run bench:cluster -- [options]

Starts 3 (--nodes) local cairn serve nodes and measures Put and linearizable Get at several
concurrencies with grpc-load (C++, routing-blind) and cairn bench (routes to leaders).

Options:
  --duration S          measured seconds per case (default 10)
  --warmup S            unmeasured seconds before each case (default 2)
  --concurrency LIST    calls in flight (default 1,64,256)
  --ops LIST            put,get (default both; get is linearizable)
  --generators LIST     grpc-load,cairn-bench (default both)
  --keyspace N          distinct keys, filled before the cases (default 20000)
  --channels N          grpc-load connections, spread over the nodes (default 6)
  --grpc-load PATH      the generator (default: env CAIRN_GRPC_LOAD, else
                        ../shared/tools/grpc-load/build/grpc-load beside the repository)
  --settle S            most seconds to wait for the shards' leaders to stop moving (default 60)
  --nodes N             founding members, replication factor 3 (default 3)
  --cpu-prof DIR        profile every node during each measured case; write DIR/*.cpuprofile
  --top N               functions listed per profile summary (default 25)
  --keep                keep the nodes' data directories and logs
  --json                also print every result as JSON
  -h, --help            show this help

CAIRN_* variables of the environment reach every node (CAIRN_LOG_LEVEL defaults to warn here).
`;

interface Options {
  readonly duration: number;
  readonly warmup: number;
  readonly concurrency: number[];
  readonly ops: Op[];
  readonly generators: Generator[];
  readonly keyspace: number;
  readonly channels: number;
  readonly grpcLoad: string;
  readonly settleS: number;
  readonly nodes: number;
  readonly cpuProf: string | null;
  readonly top: number;
  readonly keep: boolean;
  readonly json: boolean;
}

function parseOptions(argv: readonly string[]): Options | "help" {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      duration: { type: "string", default: "10" },
      warmup: { type: "string", default: "2" },
      concurrency: { type: "string", default: "1,64,256" },
      ops: { type: "string", default: "put,get" },
      generators: { type: "string", default: "grpc-load,cairn-bench" },
      keyspace: { type: "string", default: "20000" },
      channels: { type: "string", default: "6" },
      "grpc-load": { type: "string" },
      settle: { type: "string", default: "60" },
      nodes: { type: "string", default: "3" },
      "cpu-prof": { type: "string" },
      top: { type: "string", default: "25" },
      keep: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) return "help";
  const number = (name: string, text: string, min: number, integer: boolean): number => {
    const n = Number(text);
    if (!Number.isFinite(n) || n < min || (integer && !Number.isInteger(n)))
      throw new UsageError(`--${name} must be ${integer ? "an integer" : "a number"} ≥ ${min}`);
    return n;
  };
  try {
    return {
      duration: number("duration", values.duration, 0.5, false),
      warmup: number("warmup", values.warmup, 0, false),
      concurrency: parseConcurrencies(values.concurrency),
      ops: parseList("ops", values.ops, ["put", "get"] as const),
      generators: parseList("generators", values.generators, ["grpc-load", "cairn-bench"] as const),
      keyspace: number("keyspace", values.keyspace, 1, true),
      channels: number("channels", values.channels, 1, true),
      grpcLoad: resolve(values["grpc-load"] ?? process.env["CAIRN_GRPC_LOAD"] ?? DEFAULT_GRPC_LOAD),
      settleS: number("settle", values.settle, 0, false),
      nodes: number("nodes", values.nodes, 3, true),
      cpuProf: values["cpu-prof"] === undefined ? null : resolve(values["cpu-prof"]),
      top: number("top", values.top, 1, true),
      keep: values.keep,
      json: values.json,
    };
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError((err as Error).message);
  }
}

interface Runner {
  readonly opts: Options;
  readonly nodes: readonly Node[];
  readonly log: NodeJS.WritableStream;
}

function grpcLoadArgs(r: Runner, op: Op, c: number, extra: readonly string[]): string[] {
  return [
    ...grpcLoadKvArgs(op, r.nodes.map((n) => n.rpc).join(",")),
    "--channels",
    String(r.opts.channels),
    "--keyspace",
    String(r.opts.keyspace),
    "--concurrency",
    String(c),
    ...extra,
  ];
}

function cairnBenchArgs(r: Runner, op: Op, c: number, extra: readonly string[]): string[] {
  return [
    "bench",
    op,
    "--endpoints",
    r.nodes.map((n) => n.rpc).join(","),
    "--channels",
    "1",
    "--keyspace",
    String(r.opts.keyspace),
    "--key-size",
    "16",
    "--value-size",
    "100",
    "--concurrency",
    String(c),
    "--output",
    "json",
    ...extra,
  ];
}

const childTimeout = (o: Options): number => ((o.duration + o.warmup) * 3 + 60) * 1000;

async function runCase(r: Runner, gen: Generator, op: Op, c: number): Promise<CaseResult> {
  const timing = ["--duration", String(r.opts.duration), "--warmup", String(r.opts.warmup)];
  if (gen === "grpc-load") {
    const stdout = await runChild(
      r.opts.grpcLoad,
      grpcLoadArgs(r, op, c, timing),
      childTimeout(r.opts),
      r.log,
    );
    return parseGrpcLoad(stdout, op, c);
  }
  const extra = op === "get" ? [...timing, "--no-fill"] : timing;
  const stdout = await runChild(
    CAIRN,
    cairnBenchArgs(r, op, c, extra),
    childTimeout(r.opts),
    r.log,
  );
  return parseCairnBench(stdout, op, c);
}

/** Writes every key once: grpc-load's keys (key-00000000042) and/or cairn bench's (k0000000042xxxxx). */
async function fill(r: Runner): Promise<void> {
  if (r.opts.generators.includes("grpc-load")) {
    for (let pass = 1; pass <= 3; pass++) {
      const t0 = performance.now();
      const stdout = await runChild(
        r.opts.grpcLoad,
        grpcLoadArgs(r, "put", 256, ["--mode", "fill", "--duration", "900"]),
        1_000_000,
        r.log,
      );
      const f = parseGrpcLoad(stdout, "put", 256);
      out(
        `fill (grpc-load keys, pass ${pass}): ${f.ops} written, ${f.errors} errors${f.firstError === null ? "" : ` (first: ${f.firstError})`}, ${((performance.now() - t0) / 1000).toFixed(1)} s, ${Math.round(f.opsPerSec)} Puts/s`,
      );
      // A key whose Put failed (shard creation, a leadership transfer) is written again.
      if (f.errors === 0) break;
    }
  }
  if (r.opts.generators.includes("cairn-bench")) {
    const t0 = performance.now();
    // `cairn bench get` fills its keyspace first, at this concurrency; the reads are discarded.
    await runChild(
      CAIRN,
      cairnBenchArgs(r, "get", 256, ["--duration", "0.5", "--warmup", "0"]),
      1_000_000,
      r.log,
    );
    out(
      `fill (cairn bench keys): ${r.opts.keyspace} keys, ${((performance.now() - t0) / 1000).toFixed(1)} s`,
    );
  }
}

// ---------------------------------------------------------------------------------- profiles

/** A minimal Chrome DevTools Protocol session over the node's inspector WebSocket. */
class Inspector {
  readonly #ws: WebSocket;
  readonly #pending = new Map<number, { done: (v: unknown) => void; fail: (e: Error) => void }>();
  #id = 0;

  private constructor(ws: WebSocket) {
    this.#ws = ws;
    ws.addEventListener("message", (ev) => {
      const msg = JSON.parse(String(ev.data)) as {
        id?: number;
        result?: unknown;
        error?: { message: string };
      };
      if (msg.id === undefined) return;
      const p = this.#pending.get(msg.id);
      this.#pending.delete(msg.id);
      if (msg.error !== undefined) p?.fail(new Error(msg.error.message));
      else p?.done(msg.result);
    });
    ws.addEventListener("close", () => {
      for (const p of this.#pending.values()) p.fail(new Error("inspector closed"));
      this.#pending.clear();
    });
  }

  static open(url: string): Promise<Inspector> {
    return new Promise((done, fail) => {
      const ws = new WebSocket(url);
      ws.addEventListener("open", () => done(new Inspector(ws)), { once: true });
      ws.addEventListener("error", () => fail(new Error(`cannot open the inspector at ${url}`)), {
        once: true,
      });
    });
  }

  send<T>(method: string, params: Record<string, unknown> = {}): Promise<T> {
    const id = ++this.#id;
    return new Promise<T>((done, fail) => {
      this.#pending.set(id, { done: done as (v: unknown) => void, fail });
      this.#ws.send(JSON.stringify({ id, method, params }));
    });
  }

  close(): void {
    this.#ws.close();
  }
}

function printProfileSummary(
  label: string,
  profiles: readonly CpuProfile[],
  top: number,
  seconds: number,
): void {
  const fns = selfTimes(profiles);
  const areas = selfTimes(profiles, true);
  const pct = (x: number): string => `${(x * 100).toFixed(1)}%`;
  out(
    `\nprofile ${label}: ${(fns.busyMs / 1000).toFixed(1)} s of CPU on the main threads of ${profiles.length} nodes over ~${seconds.toFixed(0)} s (idle ${(fns.idleMs / 1000).toFixed(1)} s)`,
  );
  out("\n| area | self time | share |\n|---|---|---|");
  for (const a of areas.rows.slice(0, 15))
    out(`| ${a.name} | ${a.ms.toFixed(0)} ms | ${pct(a.share)} |`);
  out("\n| function | self time | share |\n|---|---|---|");
  for (const f of fns.rows.slice(0, top))
    out(`| \`${f.name}\` | ${f.ms.toFixed(0)} ms | ${pct(f.share)} |`);
}

// ---------------------------------------------------------------------------------- main

async function main(argv: readonly string[]): Promise<number> {
  const opts = parseOptions(argv);
  if (opts === "help") {
    process.stdout.write(HELP);
    return 0;
  }
  if (opts.generators.includes("grpc-load")) checkGrpcLoad(opts.grpcLoad);
  if (opts.cpuProf !== null) mkdirSync(opts.cpuProf, { recursive: true });

  const baseDir = await mkdtemp(join(tmpdir(), "cairn-bench-cluster-"));
  const avoid = new Set<number>();
  const rpcPorts = await freePorts(opts.nodes, true, avoid);
  const httpPorts = await freePorts(opts.nodes, false, avoid);
  const at = (ports: number[], i: number): string => `127.0.0.1:${ports[i - 1]}`;
  const placement: Placement = {
    nodeId: (i) => `n${i}`,
    rpcBind: (i) => at(rpcPorts, i),
    httpBind: (i) => at(httpPorts, i),
    rpcAdvertise: (i) => at(rpcPorts, i),
    httpAdvertise: (i) => at(httpPorts, i),
    dataDir: (i) => join(baseDir, `n${i}`),
  };
  const log = createWriteStream(join(baseDir, "generators.log"), { flags: "a" });

  out(`bench:cluster — ${new Date().toISOString()}`);
  out(`machine: ${machine()}`);
  out(`load average at start: ${load()}`);
  out(
    `cases: ${opts.ops.join(",")} × c=${opts.concurrency.join(",")} × ${opts.generators.join(",")}; ` +
      `${opts.duration} s measured after ${opts.warmup} s warm-up; keyspace ${opts.keyspace}, 16-byte keys, 100-byte values`,
  );
  out(
    `nodes: ${Array.from({ length: opts.nodes }, (_, k) => `n${k + 1} ${placement.rpcAdvertise(k + 1)}`).join(", ")}; data and logs in ${baseDir}`,
  );

  const nodes: Node[] = [];
  let interrupted = false;
  const onSignal = (signal: string): void => {
    if (interrupted) return;
    interrupted = true;
    out(`\n${signal}: stopping the generator and the nodes`);
    stopCurrentChild();
    stopping = stopNodes(nodes);
  };
  let stopping: Promise<void> | null = null;
  process.on("SIGINT", () => onSignal("SIGINT"));
  process.on("SIGTERM", () => onSignal("SIGTERM"));

  const rows: Row[] = [];
  let failed = false;
  try {
    for (let i = 1; i <= opts.nodes; i++)
      nodes.push(
        startNode(i, placement, baseDir, {
          clusterSize: opts.nodes,
          profile: opts.cpuProf !== null,
        }),
      );
    const t0 = performance.now();
    await waitHealthy(nodes, 60_000);
    const formed = await watchUntil(
      nodes,
      60_000,
      (v) => v.clusterId !== "" && v.nodes.filter((n) => n.state === "alive").length === opts.nodes,
    );
    if (formed === null || formed.clusterId === "")
      throw new Error("the cluster did not form within 60 s (no cluster id in node 1's view)");
    out(
      `cluster ${formed.clusterId} formed: ${opts.nodes} nodes alive (${((performance.now() - t0) / 1000).toFixed(1)} s)`,
    );

    const runner: Runner = { opts, nodes, log };
    await fill(runner);

    // Shards start with their leader wherever the election went; leadership then moves to each
    // shard's first-ranked replica. Wait until no leader has moved for 3 s.
    const t1 = performance.now();
    let lastKey = "";
    let stableSince = performance.now();
    const settled = await watchUntil(nodes, opts.settleS * 1000, (v, now) => {
      const key = v.shards.map((s) => s.leader).join(",");
      if (key !== lastKey) {
        lastKey = key;
        stableSince = now;
      }
      return leaderCounts(v).leaderless === 0 && now - stableSince >= 3000;
    });
    if (settled !== null)
      out(
        `leaders after ${((performance.now() - t1) / 1000).toFixed(1)} s: ${describeLeaders(settled)}`,
      );

    const scrape = (): Promise<Map<string, number>[]> =>
      Promise.all(
        nodes.map(async (n) => parseMetrics((await httpGet(`http://${n.http}/metrics`)).body)),
      );
    // The cost of an idle cluster (ticks, heartbeats, gossip), to read the cases' CPU against.
    {
      const before = await scrape();
      const t = performance.now();
      await sleep(5000);
      const after = await scrape();
      if (interrupted) throw new Error("interrupted");
      const idle = serverSide(before, after, (performance.now() - t) / 1000);
      out(
        `idle cluster: nodes' CPU ${idle.cpuCoresByNode.map((x) => x.toFixed(3)).join(" + ")} cores over 5 s`,
      );
    }

    const inspectors: Inspector[] = [];
    if (opts.cpuProf !== null) {
      for (const n of nodes) {
        const url = await (n.inspector ?? Promise.reject(new Error("no inspector")));
        const ins = await Inspector.open(url);
        await ins.send("Profiler.enable");
        inspectors.push(ins);
      }
    }

    out("");
    for (const op of opts.ops) {
      for (const c of opts.concurrency) {
        for (const gen of opts.generators) {
          if (interrupted) throw new Error("interrupted");
          const loadAvg = loadavg()[0] ?? 0;
          const before = await scrape();
          const started = performance.now();
          for (const ins of inspectors) await ins.send("Profiler.start");
          const result = await runCase(runner, gen, op, c);
          const profiles = await Promise.all(
            inspectors.map(
              async (ins) => (await ins.send<{ profile: CpuProfile }>("Profiler.stop")).profile,
            ),
          );
          const wallS = (performance.now() - started) / 1000;
          const after = await scrape();
          const server =
            before.some((m) => m.size === 0) || after.some((m) => m.size === 0)
              ? null
              : serverSide(before, after, wallS);
          const row: Row = { ...result, server, loadAvg };
          rows.push(row);
          const fwd =
            server === null || server.answered === 0
              ? ""
              : `  forwarded ${Math.round((100 * server.forwarded) / server.answered)}%  peer messages ${(server.peerMessages / server.answered).toFixed(1)}/op (heartbeats ${(server.heartbeats / server.answered).toFixed(1)})  nodes' CPU ${server.cpuCoresByNode.map((x) => x.toFixed(2)).join("+")} cores  leader changes ${server.leaderChanges}`;
          const hit = result.hitRatio === null ? "" : `  hit ratio ${result.hitRatio}`;
          out(
            `${gen.padEnd(11)} ${op} c=${String(c).padEnd(4)} ${String(Math.round(result.opsPerSec)).padStart(6)} ops/s  p50 ${result.p50.toFixed(2)} ms  p99 ${result.p99.toFixed(2)} ms  errors ${result.errors}${result.errors > 0 ? ` ${JSON.stringify(result.errorsByCode)}` : ""}  client CPU ${Math.round(result.clientCpuPercent)}%${fwd}${hit}  load ${loadAvg.toFixed(1)}`,
          );
          if (opts.cpuProf !== null) {
            const label = `${gen}-${op}-c${c}`;
            profiles.forEach((p, i) =>
              writeFileSync(
                join(opts.cpuProf as string, `${label}-n${i + 1}.cpuprofile`),
                JSON.stringify(p),
              ),
            );
            printProfileSummary(label, profiles, opts.top, wallS);
            out("");
          }
        }
      }
    }
    for (const ins of inspectors) ins.close();

    out(`\nbench:cluster — ${new Date().toISOString()}; load average at the end: ${load()}`);
    out(`machine: ${machine()}\n`);
    out(markdownTable(rows));
    if (opts.json) out(JSON.stringify({ machine: machine(), rows }, null, 2));
    return 0;
  } catch (err) {
    failed = true;
    if (!interrupted) out(`bench:cluster failed: ${(err as Error).message}`);
    return interrupted ? 130 : 1;
  } finally {
    await finishNodes({
      nodes,
      stopping,
      log,
      baseDir,
      keep: opts.keep,
      failed,
      interrupted,
    });
  }
}

runBench("bench:cluster", main);
