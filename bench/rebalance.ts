/**
 * `npm run bench:rebalance`: a fourth node joins a loaded 3-node cluster holding `--size` of data
 * (1 GiB by default); how long until the replicas are even again, and what foreground Puts get
 * meanwhile (issue 53: at least 80 % of the steady rate with the default
 * `cluster.rebalance.rate_bytes_per_sec`, p99 within 2× the steady one).
 *
 * 1. Starts three `cairn serve` nodes on 127.0.0.1 (bench/cluster-nodes.ts) and waits for the
 *    cluster to form.
 * 2. Fills `--size` bytes of `--value-size` values (keys `big-…`, grpc-load in fill mode): large
 *    values, so that the fill is quick and the data is what a move carries.
 * 3. Steady: Puts of 100-byte values over `--keyspace` other keys (`key-…`) at a fixed
 *    concurrency, routing-blind over the three nodes (grpc-load), in windows of `--window`
 *    seconds, `--steady` seconds in all, after `--warmup` seconds of the same load that do not
 *    count (the fill's flushes and compactions).
 * 4. Starts n4 with the three nodes as its seeds and goes on with the same windows until the
 *    cluster is even: n4 active, every active member within `cluster.rebalance.tolerance`
 *    replicas of the others, no shard moving (a shard's replicas above the factor), held for
 *    6 s (three allocator passes), as node 1's cluster view (Meta.WatchCluster) shows it.
 * 5. Once even, `--after` seconds more of the same windows: the four nodes' rate with nothing
 *    moving, which tells what the moves cost from what a fourth process on the same cores does.
 *
 * Each window reports the Put rate against the steady one, its p50, p99, p999 and slowest Put (a
 * request held up by a move's step would show in the last), the snapshot bytes
 * the nodes sent, every node's CPU, how busy the whole machine's CPU was (Linux: /proc/stat)
 * and where the move stands; the summary gives each phase's node CPU a Put. CAIRN_* variables
 * reach every node (CAIRN_CLUSTER_REBALANCE_RATE_BYTES_PER_SEC, CAIRN_CLUSTER_REBALANCE_MAX_MOVES,
 * ...).
 */
import { createWriteStream, readdirSync, readFileSync, statSync } from "node:fs";
import { mkdtemp } from "node:fs/promises";
import { loadavg, tmpdir } from "node:os";
import { join, resolve } from "node:path";
import { parseArgs } from "node:util";
import { CairnClient, type ClusterView } from "../src/client/index.ts";
import type { Placement } from "../scripts/cluster-layout.ts";
import { grpcLoadKvArgs, parseGrpcLoad, parseMetrics, sumMetric } from "./cluster-lib.ts";
import {
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
  startNode,
  stopCurrentChild,
  stopNodes,
  UsageError,
  waitHealthy,
  watchUntil,
} from "./cluster-nodes.ts";
import {
  busyShare,
  evenness,
  type LoadWindow,
  type MachineTicks,
  machineTicks,
  type PhaseCost,
  parseSize,
  phaseCost,
  rebalanceTable,
  summarize,
  windowServerSide,
} from "./rebalance-lib.ts";

const FIRST_NODES = 3;
const REPLICATION_FACTOR = 3;
/** How long the view must stay even before the rebalance counts as over (allocator passes). */
const EVEN_FOR_MS = 6_000;
const MIB = 1024 * 1024;

const HELP = `Usage: npm run bench:rebalance -- [options]

Starts 3 local cairn serve nodes, fills them, measures steady Puts, then starts a 4th node
and measures Puts in windows until the replicas are even again.

Options:
  --size SIZE           data filled before the 4th node joins (default 1GiB; 256MiB, ...)
  --value-size SIZE     value size of the fill (default 256KiB)
  --concurrency C       foreground Puts in flight (default 64)
  --keyspace N          foreground keys (default 20000; 16-byte keys, 100-byte values)
  --channels N          grpc-load connections over the three nodes (default 6)
  --window S            seconds a window (default 10)
  --warmup S            seconds of load after the fill, not counted (default 15; 0 skips)
  --steady S            steady seconds before the 4th node starts (default 30)
  --max-wait S          give up when not even after this long (default 1800)
  --after S             once even, go on measuring this long: the four nodes' own rate with
                        nothing moving, to tell the moves' cost from the fourth process's
                        (default 30; 0 skips)
  --tolerance N         the nodes' cluster.rebalance.tolerance (default: env
                        CAIRN_CLUSTER_REBALANCE_TOLERANCE, else 2)
  --grpc-load PATH      the generator (default: env CAIRN_GRPC_LOAD, else
                        ../shared/tools/grpc-load/build/grpc-load beside the repository)
  --keep                keep the nodes' data directories and logs
  --json                also print every window as JSON
  -h, --help            show this help

CAIRN_* variables of the environment reach every node (CAIRN_LOG_LEVEL defaults to warn here).
`;

interface Options {
  readonly size: number;
  readonly valueSize: number;
  readonly concurrency: number;
  readonly keyspace: number;
  readonly channels: number;
  readonly windowS: number;
  readonly warmupS: number;
  readonly steadyS: number;
  readonly maxWaitS: number;
  readonly afterS: number;
  readonly tolerance: number;
  readonly grpcLoad: string;
  readonly keep: boolean;
  readonly json: boolean;
}

function parseOptions(argv: readonly string[]): Options | "help" {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      size: { type: "string", default: "1GiB" },
      "value-size": { type: "string", default: "256KiB" },
      concurrency: { type: "string", default: "64" },
      keyspace: { type: "string", default: "20000" },
      channels: { type: "string", default: "6" },
      window: { type: "string", default: "10" },
      warmup: { type: "string", default: "15" },
      steady: { type: "string", default: "30" },
      "max-wait": { type: "string", default: "1800" },
      after: { type: "string", default: "30" },
      tolerance: {
        type: "string",
        default: process.env["CAIRN_CLUSTER_REBALANCE_TOLERANCE"] ?? "2",
      },
      "grpc-load": { type: "string" },
      keep: { type: "boolean", default: false },
      json: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) return "help";
  const int = (name: string, text: string, min: number): number => {
    const n = Number(text);
    if (!Number.isInteger(n) || n < min)
      throw new UsageError(`--${name} must be an integer ≥ ${min}`);
    return n;
  };
  try {
    const valueSize = parseSize("value-size", values["value-size"]);
    if (valueSize > 1024 * 1024 - 1024)
      throw new UsageError("--value-size must leave room under limits.max_value_bytes (1 MiB)");
    const windowS = int("window", values.window, 2);
    return {
      size: parseSize("size", values.size),
      valueSize,
      concurrency: int("concurrency", values.concurrency, 1),
      keyspace: int("keyspace", values.keyspace, 1),
      channels: int("channels", values.channels, 1),
      windowS,
      warmupS: int("warmup", values.warmup, 0),
      steadyS: Math.max(windowS, int("steady", values.steady, 1)),
      maxWaitS: int("max-wait", values["max-wait"], 1),
      afterS: int("after", values.after, 0),
      tolerance: int("tolerance", values.tolerance, 0),
      grpcLoad: resolve(values["grpc-load"] ?? process.env["CAIRN_GRPC_LOAD"] ?? DEFAULT_GRPC_LOAD),
      keep: values.keep,
      json: values.json,
    };
  } catch (err) {
    if (err instanceof UsageError) throw err;
    throw new UsageError((err as Error).message);
  }
}

/** The bytes of every file under `dir`. */
function diskBytes(dir: string): number {
  let total = 0;
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) total += diskBytes(path);
    else if (entry.isFile()) total += statSync(path).size;
  }
  return total;
}

/** Node 1's cluster view, followed in the background; `latest` is the last one received. */
class ViewFollower {
  latest: ClusterView | null = null;
  readonly #controller = new AbortController();
  readonly #client: CairnClient;
  readonly done: Promise<void>;

  constructor(endpoint: string) {
    const client = new CairnClient({ endpoints: [endpoint], routing: false });
    this.#client = client;
    this.done = (async () => {
      // The stream ends when the node stops or the follower closes; it is reopened otherwise.
      for (let tries = 0; tries < 1000 && !this.#controller.signal.aborted; tries++) {
        try {
          for await (const view of client.watchCluster({
            signal: this.#controller.signal,
            endpoint,
          }))
            this.latest = view;
        } catch {
          // Reopened below after a pause.
        }
        await new Promise((r) => setTimeout(r, 500));
      }
    })();
  }

  async close(): Promise<void> {
    this.#controller.abort();
    await this.done;
    this.#client.close();
  }
}

async function main(argv: readonly string[]): Promise<number> {
  const opts = parseOptions(argv);
  if (opts === "help") {
    out(HELP);
    return 0;
  }
  checkGrpcLoad(opts.grpcLoad);
  const baseDir = await mkdtemp(join(tmpdir(), "cairn-bench-rebalance-"));
  const avoid = new Set<number>();
  const all = FIRST_NODES + 1;
  const rpcPorts = await freePorts(all, true, avoid);
  const httpPorts = await freePorts(all, false, avoid);
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
  const fillKeys = Math.ceil(opts.size / opts.valueSize);

  out(`bench:rebalance — ${new Date().toISOString()}`);
  out(`machine: ${machine()}`);
  out(`load average at start: ${load()}`);
  const rebalanceEnv = Object.entries(process.env)
    .filter(
      ([k]) =>
        k.startsWith("CAIRN_CLUSTER_REBALANCE_") || k === "CAIRN_RAFT_SNAPSHOT_RATE_BYTES_PER_SEC",
    )
    .map(([k, v]) => `${k}=${v}`);
  out(
    `fill ${fillKeys} keys × ${opts.valueSize} bytes (${(opts.size / MIB).toFixed(0)} MiB); foreground Puts c=${opts.concurrency} over ${opts.keyspace} keys, ` +
      `windows of ${opts.windowS} s, ${opts.steadyS} s steady; tolerance ${opts.tolerance}; ` +
      `node settings: ${rebalanceEnv.length === 0 ? "defaults" : rebalanceEnv.join(" ")}`,
  );
  out(`data and logs in ${baseDir}`);

  const nodes: Node[] = [];
  let interrupted = false;
  let stopping: Promise<void> | null = null;
  const onSignal = (signal: string): void => {
    if (interrupted) return;
    interrupted = true;
    out(`\n${signal}: stopping the generator and the nodes`);
    stopCurrentChild();
    stopping = stopNodes(nodes);
  };
  process.on("SIGINT", () => onSignal("SIGINT"));
  process.on("SIGTERM", () => onSignal("SIGTERM"));

  let follower: ViewFollower | null = null;
  let failed = false;
  try {
    for (let i = 1; i <= FIRST_NODES; i++)
      nodes.push(startNode(i, placement, baseDir, { clusterSize: FIRST_NODES }));
    const t0 = performance.now();
    await waitHealthy(nodes, 60_000);
    const formed = await watchUntil(
      nodes,
      60_000,
      (v) =>
        v.clusterId !== "" && v.nodes.filter((n) => n.state === "alive").length === FIRST_NODES,
    );
    if (formed === null || formed.clusterId === "")
      throw new Error("the cluster did not form within 60 s");
    out(`cluster ${formed.clusterId} formed (${((performance.now() - t0) / 1000).toFixed(1)} s)`);

    const targets = nodes.map((n) => n.rpc).join(",");
    // The fill: large values, every key once; keys whose Put failed are written again.
    for (let pass = 1; pass <= 3; pass++) {
      const t = performance.now();
      const f = parseGrpcLoad(
        await runChild(
          opts.grpcLoad,
          [
            ...grpcLoadKvArgs("put", targets),
            "--value-size",
            String(opts.valueSize),
            "--key-prefix",
            "big-",
            "--keyspace",
            String(fillKeys),
            "--channels",
            String(opts.channels),
            "--concurrency",
            "16",
            "--deadline-ms",
            "30000",
            "--mode",
            "fill",
            "--duration",
            "3600",
          ],
          4_000_000,
          log,
        ),
        "put",
        16,
      );
      const s = (performance.now() - t) / 1000;
      out(
        `fill pass ${pass}: ${f.ops} written, ${f.errors} errors${f.firstError === null ? "" : ` (first: ${f.firstError})`}, ${s.toFixed(1)} s, ${((f.ops * opts.valueSize) / MIB / s).toFixed(1)} MiB/s; load ${load()}`,
      );
      if (f.errors === 0) break;
    }

    const putArgs = (seconds: number, warmup: number): string[] => [
      ...grpcLoadKvArgs("put", targets),
      "--channels",
      String(opts.channels),
      "--keyspace",
      String(opts.keyspace),
      "--concurrency",
      String(opts.concurrency),
      "--duration",
      String(seconds),
      "--warmup",
      String(warmup),
    ];
    // A first unmeasured load creates the foreground keys' shards (the fill created most).
    await runChild(opts.grpcLoad, putArgs(5, 0), 120_000, log);
    let lastKey = "";
    let stableSince = performance.now();
    const settled = await watchUntil(nodes, 60_000, (v, now) => {
      const key = v.shards.map((s) => s.leader).join(",");
      if (key !== lastKey) {
        lastKey = key;
        stableSince = now;
      }
      return leaderCounts(v).leaderless === 0 && now - stableSince >= 3000;
    });
    if (settled !== null) out(`before the join: ${describeLeaders(settled)}`);

    follower = new ViewFollower(nodes[0]?.rpc ?? "");
    const scrape = (): Promise<Map<string, number>[]> =>
      Promise.all(
        nodes.map(async (n) => parseMetrics((await httpGet(`http://${n.http}/metrics`)).body)),
      );
    let joinedAt: number | null = null;
    const members = Array.from({ length: all }, (_, k) => placement.nodeId(k + 1));
    /** One window; `startS` is its start, in seconds from the join (negative: before it). */
    const window = async (
      phase: "steady" | "rebalance" | "after",
      steadyStartS: number | null,
    ): Promise<LoadWindow> => {
      const loadAvg = loadavg()[0] ?? 0;
      const ticksBefore = readMachineTicks();
      const before = await scrape();
      const started = performance.now();
      const r = parseGrpcLoad(
        await runChild(opts.grpcLoad, putArgs(opts.windowS, 0), opts.windowS * 3000 + 60_000, log),
        "put",
        opts.concurrency,
      );
      const seconds = (performance.now() - started) / 1000;
      const after = await scrape();
      const machineBusy = busyShare(ticksBefore, readMachineTicks());
      const server = windowServerSide(before, after, seconds);
      const view = follower?.latest ?? null;
      const ev = view === null ? null : evenness(view, members, opts.tolerance, REPLICATION_FACTOR);
      const w: LoadWindow = {
        startS: steadyStartS ?? (started - (joinedAt ?? started)) / 1000,
        seconds: r.seconds,
        opsPerSec: r.opsPerSec,
        p50: r.p50,
        p99: r.p99,
        p999: r.p999,
        max: r.max,
        errors: r.errors,
        snapshotBytes: server.snapshotBytes,
        cpuCores: server.cpuCores,
        newNodeReplicas: ev?.replicas.get(placement.nodeId(all)) ?? 0,
        moving: ev?.moving ?? 0,
        loadAvg,
        machineBusy,
      };
      out(
        `${phase.padEnd(9)} ${w.startS.toFixed(0).padStart(5)} s  ${Math.round(w.opsPerSec)} Puts/s  p50 ${w.p50.toFixed(2)} ms  p99 ${w.p99.toFixed(2)} ms  p999 ${w.p999.toFixed(0)} ms  max ${w.max.toFixed(0)} ms  errors ${w.errors}${w.errors > 0 ? ` ${JSON.stringify(r.errorsByCode)} (first: ${r.firstError ?? "?"})` : ""}  snapshots ${(w.snapshotBytes / MIB / w.seconds).toFixed(1)} MiB/s  CPU ${w.cpuCores.map((c) => c.toFixed(2)).join("+")}${machineBusy === null ? "" : `  machine ${(100 * machineBusy).toFixed(0)} % busy`}  n4 replicas ${w.newNodeReplicas}  moving ${w.moving}  load ${loadAvg.toFixed(1)}`,
      );
      return w;
    };

    // The fill leaves flushes and compactions behind: the load runs a while before the steady
    // windows count (without it, the first steady window measured them and lowered the rate
    // every later window was compared with).
    if (opts.warmupS > 0) {
      const r = parseGrpcLoad(
        await runChild(opts.grpcLoad, putArgs(opts.warmupS, 0), opts.warmupS * 3000 + 60_000, log),
        "put",
        opts.concurrency,
      );
      out(`warm-up   ${opts.warmupS} s, not counted: ${Math.round(r.opsPerSec)} Puts/s`);
    }
    const steady: LoadWindow[] = [];
    const steadyWindows = Math.max(1, Math.round(opts.steadyS / opts.windowS));
    for (let i = 0; i < steadyWindows; i++) {
      if (interrupted) throw new Error("interrupted");
      steady.push(await window("steady", -opts.windowS * (steadyWindows - i)));
    }

    // The fourth node joins through the three seeds.
    const before = await scrape();
    joinedAt = performance.now();
    nodes.push(startNode(all, placement, baseDir, { clusterSize: FIRST_NODES }));
    out(`n${all} started (${placement.rpcAdvertise(all)}), seeds ${targets}; load ${load()}`);
    let evenSince: number | null = null;
    let evenAt: number | null = null;
    let activeAt: number | null = null;
    const ticker = setInterval(() => {
      const view = follower?.latest ?? null;
      if (view === null || joinedAt === null) return;
      const now = performance.now();
      if (
        activeAt === null &&
        view.nodes.some((n) => n.id === `n${all}` && n.memberState === "active")
      )
        activeAt = now;
      const ev = evenness(view, members, opts.tolerance, REPLICATION_FACTOR);
      if (!ev.even) evenSince = null;
      else if (evenSince === null) evenSince = now;
      else if (evenAt === null && now - evenSince >= EVEN_FOR_MS) evenAt = evenSince;
    }, 250);
    const rebalance: LoadWindow[] = [];
    try {
      while (evenAt === null) {
        if (interrupted) throw new Error("interrupted");
        if (performance.now() - joinedAt > opts.maxWaitS * 1000) break;
        const gone = nodes.find((n) => n.exit !== null);
        if (gone !== undefined)
          throw new Error(`${gone.id} exited (${gone.exit?.code ?? gone.exit?.signal})`);
        rebalance.push(await window("rebalance", null));
      }
    } finally {
      clearInterval(ticker);
    }
    const after = await scrape();
    // The four nodes with nothing moving: what the cluster does without the moves.
    const settledWindows: LoadWindow[] = [];
    const afterWindows = evenAt === null ? 0 : Math.round(opts.afterS / opts.windowS);
    if (afterWindows > 0) out(`leaders before the after windows: ${await leadersHeld(nodes)}`);
    for (let i = 0; i < afterWindows && !interrupted; i++)
      settledWindows.push(await window("after", null));
    if (afterWindows > 0) out(`leaders after them: ${await leadersHeld(nodes)}`);
    const joined = joinedAt;
    const seconds = (at: number | null): string =>
      at === null ? "never" : `${((at - joined) / 1000).toFixed(1)} s`;
    const sentTotal = (i: number, name: string): number =>
      sumMetric(after[i] ?? new Map(), name) - sumMetric(before[i] ?? new Map(), name);
    const n4 = all - 1;
    const snapshotBytes = [0, 1, 2, 3].reduce(
      (a, i) => a + sentTotal(i, "cairn_raft_snapshot_sent_bytes_total"),
      0,
    );
    const received = sumMetric(after[n4] ?? new Map(), "cairn_raft_snapshots_received_total");
    const view = follower.latest;
    const ev = view === null ? null : evenness(view, members, opts.tolerance, REPLICATION_FACTOR);
    const s = summarize(steady, rebalance);
    const a = summarize(settledWindows, rebalance);

    out(`\nbench:rebalance — ${new Date().toISOString()}; load average at the end: ${load()}`);
    out(`machine: ${machine()}\n`);
    out(rebalanceTable(steady, rebalance, settledWindows));
    out(
      `- n${all} active after ${seconds(activeAt)}; even after ${seconds(evenAt)}` +
        `${evenAt === null ? ` (gave up after ${opts.maxWaitS} s)` : ""}; replicas at the end: ` +
        `${ev === null ? "?" : [...ev.replicas].map(([id, n]) => `${id} ${n}`).join(", ")}, ${ev?.moving ?? "?"} moving`,
    );
    out(
      `- foreground Puts during the rebalance: ${Math.round(s.rebalanceOpsPerSec)}/s against ${Math.round(s.steadyOpsPerSec)}/s steady = **${(100 * s.rateRatio).toFixed(0)} %** (worst window ${(100 * s.worstWindowRatio).toFixed(0)} %; goal ≥ 80 %)`,
    );
    out(
      `- p99: steady ${s.steadyP99.toFixed(1)} ms (median of the windows); during the rebalance median ${s.medianP99.toFixed(1)} ms, worst window ${s.worstP99.toFixed(1)} ms = **${s.p99Ratio.toFixed(2)}×** steady (goal ≤ 2×)`,
    );
    const slowest = (ws: readonly LoadWindow[]): string =>
      `${Math.round(Math.max(0, ...ws.map((w) => w.max)))} ms`;
    out(
      `- the slowest Put: steady ${slowest(steady)}, during the rebalance ${slowest(rebalance)}${settledWindows.length > 0 ? `, after it ${slowest(settledWindows)}` : ""} (a request stuck behind a move would show here)`,
    );
    const cost = (name: string, c: PhaseCost): string =>
      `${name} ${Math.round(c.nodeMicrosPerPut)} µs (${c.nodeCores.toFixed(2)} cores${c.machineBusy === null ? "" : `, the machine ${(100 * c.machineBusy).toFixed(0)} % busy`})`;
    out(
      `- the nodes' CPU a foreground Put (moves included): ${[
        cost("steady", phaseCost(steady)),
        cost("rebalance", phaseCost(rebalance)),
        ...(settledWindows.length > 0 ? [cost("after", phaseCost(settledWindows))] : []),
      ].join("; ")}`,
    );
    if (settledWindows.length > 0)
      out(
        `- after the rebalance (${all} nodes, nothing moving): ${Math.round(a.steadyOpsPerSec)} Puts/s = ${(100 * (s.steadyOpsPerSec === 0 ? 0 : a.steadyOpsPerSec / s.steadyOpsPerSec)).toFixed(0)} % of the ${FIRST_NODES}-node steady rate, p99 ${a.steadyP99.toFixed(1)} ms; the rebalance against it: Puts **${(100 * a.rateRatio).toFixed(0)} %**, worst p99 **${a.p99Ratio.toFixed(2)}×**`,
      );
    out(
      `- snapshot data sent from the join to the end: ${(snapshotBytes / MIB).toFixed(0)} MiB; n${all} received ${received} snapshots for ${ev?.replicas.get(`n${all}`) ?? "?"} replicas (the others were refilled from the log); its data directory: ${(diskBytes(placement.dataDir(all)) / MIB).toFixed(0)} MiB`,
    );
    if (opts.json)
      out(
        JSON.stringify(
          { machine: machine(), steady, rebalance, after: settledWindows, summary: s },
          null,
          2,
        ),
      );
    return 0;
  } catch (err) {
    failed = true;
    if (!interrupted) out(`bench:rebalance failed: ${(err as Error).message}`);
    return interrupted ? 130 : 1;
  } finally {
    await follower?.close();
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

runBench("bench:rebalance", main);

/** /proc/stat's CPU ticks now, or null off Linux. */
function readMachineTicks(): MachineTicks | null {
  try {
    return machineTicks(readFileSync("/proc/stat", "utf8"));
  } catch {
    return null;
  }
}

/**
 * The shards each node leads, from its own /health (`is_leader`): a node's cluster view shows a
 * shard moved off it with the leader it last knew, so the views cannot be counted after moves.
 */
async function leadersHeld(nodes: readonly Node[]): Promise<string> {
  const counts = await Promise.all(
    nodes.map(async (n) => {
      const { body } = await httpGet(`http://${n.http}/health`);
      try {
        const health = JSON.parse(body) as { shards?: { is_leader?: boolean }[] };
        return `${n.id} ${(health.shards ?? []).filter((s) => s.is_leader === true).length}`;
      } catch {
        return `${n.id} ?`;
      }
    }),
  );
  return counts.join(", ");
}
