/**
 * The local cluster of the cluster benchmarks (`bench:cluster`, `bench:rebalance`,
 * `bench:scale-out`): `cairn serve` processes on 127.0.0.1 with free ports and the settings of
 * scripts/cluster-layout.ts, how they are started, watched and stopped, the generators run as
 * child processes, and the machine's description printed beside every result.
 */
import { type ChildProcess, spawn } from "node:child_process";
import { createSocket } from "node:dgram";
import { accessSync, constants, createWriteStream } from "node:fs";
import { rm } from "node:fs/promises";
import { createServer, type Server } from "node:net";
import { cpus, loadavg, release, totalmem } from "node:os";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { CairnClient, type ClusterView } from "../src/client/index.ts";
import { watchMerged } from "../src/cli/cluster-view.ts";
import { nodeEnvironment, type Placement } from "../scripts/cluster-layout.ts";

export const ROOT = join(import.meta.dirname, "..");
export const CAIRN = join(ROOT, "bin", "cairn");
export const DEFAULT_GRPC_LOAD = join(
  ROOT,
  "..",
  "shared",
  "tools",
  "grpc-load",
  "build",
  "grpc-load",
);
const STOP_DEADLINE_MS = 15_000;

/** A bad flag or a missing tool: the benchmark prints it with a hint and exits 2. */
export class UsageError extends Error {}

export function out(line = ""): void {
  process.stdout.write(`${line}\n`);
}

export function checkGrpcLoad(path: string): void {
  try {
    accessSync(path, constants.X_OK);
  } catch {
    throw new UsageError(
      `grpc-load is not at ${path} (or not executable).\n` +
        "Build it with `bash ../shared/tools/grpc-load/build.sh` (from the repository root), or " +
        "point --grpc-load / CAIRN_GRPC_LOAD at it, or run with --generators cairn-bench.",
    );
  }
}

// ---------------------------------------------------------------------------------- ports

function listen(server: Server, host: string, port: number): Promise<boolean> {
  return new Promise((done) => {
    server.once("error", () => done(false));
    server.listen(port, host, () => done(true));
  });
}

/** Ports free for TCP (and UDP too when `udp`: SWIM shares the RPC port), all distinct. */
export async function freePorts(
  count: number,
  udp: boolean,
  avoid: Set<number>,
): Promise<number[]> {
  const held: Server[] = [];
  const ports: number[] = [];
  try {
    for (let tries = 0; ports.length < count && tries < 100; tries++) {
      const srv = createServer();
      if (!(await listen(srv, "127.0.0.1", 0))) continue;
      held.push(srv);
      const port = (srv.address() as { port: number }).port;
      if (avoid.has(port)) continue;
      if (udp) {
        const ok = await new Promise<boolean>((done) => {
          const sock = createSocket("udp4");
          sock.once("error", () => done(false));
          sock.bind(port, "127.0.0.1", () => sock.close(() => done(true)));
        });
        if (!ok) continue;
      }
      ports.push(port);
      avoid.add(port);
    }
  } finally {
    await Promise.all(held.map((s) => new Promise((r) => s.close(r))));
  }
  if (ports.length < count) throw new Error("could not find free ports on 127.0.0.1");
  return ports;
}

// ---------------------------------------------------------------------------------- nodes

export interface Node {
  readonly index: number;
  readonly id: string;
  readonly rpc: string;
  readonly http: string;
  readonly proc: ChildProcess;
  exit: { code: number | null; signal: NodeJS.Signals | null } | null;
  readonly exited: Promise<void>;
  /** The inspector's WebSocket URL when profiling. */
  inspector: Promise<string> | null;
}

/**
 * Starts node `index` of a `clusterSize`-node layout (its seeds: the layout's first
 * `clusterSize` nodes; a node past them joins the running cluster through them). The process's
 * own `CAIRN_*` variables reach the node too.
 */
export function startNode(
  index: number,
  placement: Placement,
  baseDir: string,
  opts: {
    readonly clusterSize: number;
    readonly profile?: boolean;
  },
): Node {
  const profile = opts.profile ?? false;
  const env: Record<string, string | undefined> = {
    ...process.env,
    CAIRN_LOG_LEVEL: process.env["CAIRN_LOG_LEVEL"] ?? "warn",
    ...nodeEnvironment(placement, index, opts.clusterSize),
  };
  if (profile) env["NODE_OPTIONS"] = `${env["NODE_OPTIONS"] ?? ""} --inspect=127.0.0.1:0`.trim();
  const proc = spawn(CAIRN, ["serve"], {
    cwd: ROOT,
    env,
    stdio: ["ignore", "pipe", "pipe"],
    // Its own process group: a Ctrl-C in the terminal reaches only this script, which stops
    // the nodes itself.
    detached: true,
  });
  const log = createWriteStream(join(baseDir, `n${index}.log`), { flags: "a" });
  proc.stdout?.pipe(log);
  let inspector: Promise<string> | null = null;
  if (proc.stderr !== null) {
    const lines = createInterface({ input: proc.stderr });
    lines.on("line", (l) => log.write(`${l}\n`));
    if (profile) {
      inspector = new Promise((done, reject) => {
        lines.on("line", (l) => {
          const m = /Debugger listening on (ws:\/\/\S+)/.exec(l);
          if (m !== null) done(m[1] as string);
        });
        proc.once("exit", () => reject(new Error(`n${index} exited before its inspector opened`)));
      });
      inspector.catch(() => {});
    }
  }
  const node: Node = {
    index,
    id: placement.nodeId(index),
    rpc: placement.rpcAdvertise(index),
    http: placement.httpAdvertise(index),
    proc,
    exit: null,
    exited: new Promise((done) =>
      proc.once("exit", (code, signal) => {
        node.exit = { code, signal };
        done();
      }),
    ),
    inspector,
  };
  return node;
}

export function running(n: Node): boolean {
  return n.exit === null;
}

export async function stopNodes(nodes: readonly Node[]): Promise<void> {
  for (const n of nodes) if (running(n)) n.proc.kill("SIGTERM");
  let timer: NodeJS.Timeout | undefined;
  const all = Promise.all(nodes.map((n) => n.exited));
  await Promise.race([all, new Promise((r) => (timer = setTimeout(r, STOP_DEADLINE_MS)))]);
  clearTimeout(timer);
  const stuck = nodes.filter(running);
  if (stuck.length > 0) {
    out(
      `SIGKILL to ${stuck.map((n) => n.id).join(", ")} (still running after ${STOP_DEADLINE_MS / 1000} s)`,
    );
    for (const n of stuck) n.proc.kill("SIGKILL");
  }
  await all;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export async function httpGet(url: string): Promise<{ status: number; body: string }> {
  try {
    const res = await fetch(url, { signal: AbortSignal.timeout(5000) });
    return { status: res.status, body: await res.text() };
  } catch {
    return { status: 0, body: "" };
  }
}

export async function waitHealthy(nodes: readonly Node[], deadlineMs: number): Promise<void> {
  const deadline = performance.now() + deadlineMs;
  for (;;) {
    const gone = nodes.find((n) => !running(n));
    if (gone !== undefined)
      throw new Error(`${gone.id} exited (${gone.exit?.code ?? gone.exit?.signal}) while starting`);
    const codes = await Promise.all(
      nodes.map(async (n) => (await httpGet(`http://${n.http}/health/quick`)).status),
    );
    if (codes.every((c) => c === 200)) return;
    if (performance.now() > deadline)
      throw new Error(`not every node answered 200 on /health/quick: ${codes.join(", ")}`);
    await sleep(200);
  }
}

/**
 * Follows the cluster view from node 1, with the leaders it does not know from the other nodes'
 * views (`cairn cluster --watch`'s watchMerged: a node knows the leaders of the shards it holds a
 * replica of only), until `done(view)` holds, or the deadline passes. Returns the last view (null
 * if none came); throws if node 1's watch fails.
 */
export async function watchUntil(
  nodes: readonly Node[],
  deadlineMs: number,
  done: (view: ClusterView, at: number) => boolean,
): Promise<ClusterView | null> {
  const client = new CairnClient({ endpoints: nodes.map((n) => n.rpc), routing: false });
  const controller = new AbortController();
  const views = watchMerged(
    (endpoint, signal) => client.watchCluster({ signal, endpoint }),
    nodes[0]?.rpc ?? "",
    controller.signal,
  );
  let last: ClusterView | null = null;
  const timer = setTimeout(() => controller.abort(), deadlineMs);
  // A change-driven stream: re-check on a timer too, for conditions that hold after quiet time.
  let resolveTick: () => void = () => {};
  const ticker = setInterval(() => resolveTick(), 250);
  try {
    let pending = views.next();
    for (;;) {
      const tick = new Promise<"tick">((r) => (resolveTick = () => r("tick")));
      const next = await Promise.race([pending, tick]);
      if (next !== "tick") {
        if (next.done === true) break;
        last = next.value;
        pending = views.next();
      }
      if (last !== null && done(last, performance.now())) return last;
      if (controller.signal.aborted) break;
    }
  } finally {
    clearTimeout(timer);
    clearInterval(ticker);
    controller.abort();
    await views.return(undefined);
    client.close();
  }
  return last;
}

export function leaderCounts(view: ClusterView): {
  counts: Map<string, number>;
  leaderless: number;
} {
  const counts = new Map<string, number>();
  let leaderless = 0;
  for (const s of view.shards) {
    if (s.leader === "") leaderless++;
    else counts.set(s.leader, (counts.get(s.leader) ?? 0) + 1);
  }
  return { counts, leaderless };
}

export function describeLeaders(view: ClusterView): string {
  const { counts, leaderless } = leaderCounts(view);
  const per = [...counts].sort().map(([id, n]) => `${id} ${n}`);
  return `${view.shards.length} shards, leaders ${per.join(", ")}${leaderless > 0 ? `, ${leaderless} without a leader` : ""}`;
}

// ---------------------------------------------------------------------------------- generators

let currentChild: ChildProcess | null = null;

/** Stops the generator running now, if any (on Ctrl-C, on failure). */
export function stopCurrentChild(): void {
  currentChild?.kill("SIGTERM");
}

/** Runs a generator to completion; its stdout is returned, stderr goes to the log. */
export function runChild(
  cmd: string,
  args: readonly string[],
  timeoutMs: number,
  log: NodeJS.WritableStream,
): Promise<string> {
  return new Promise((done, reject) => {
    const child = spawn(cmd, args, { cwd: ROOT, stdio: ["ignore", "pipe", "pipe"] });
    currentChild = child;
    let stdout = "";
    let stderrTail = "";
    child.stdout?.on("data", (d: Buffer) => (stdout += d.toString()));
    child.stderr?.on("data", (d: Buffer) => {
      log.write(d);
      stderrTail = (stderrTail + d.toString()).slice(-2000);
    });
    const timer = setTimeout(() => child.kill("SIGKILL"), timeoutMs);
    child.once("error", (err) => {
      clearTimeout(timer);
      reject(err);
    });
    child.once("exit", (code, signal) => {
      clearTimeout(timer);
      currentChild = null;
      if (code === 0) done(stdout);
      else
        reject(
          new Error(
            `${cmd.split("/").pop()} ${args.slice(0, 2).join(" ")} exited with ${code ?? signal}: ${stderrTail.trim()}`,
          ),
        );
    });
  });
}

export function machine(): string {
  const cs = cpus();
  const model = cs[0]?.model.trim() ?? "unknown CPU";
  const gib = (totalmem() / 2 ** 30).toFixed(0);
  return `${cs.length} × ${model}, ${gib} GiB RAM, ${process.platform} ${release()}, Node.js ${process.version}`;
}

export const load = (): string =>
  loadavg()
    .map((x) => x.toFixed(2))
    .join(", ");

/**
 * A benchmark's end, whatever happened: its nodes stopped, those that did not exit 0 named, the
 * log closed, and its directory removed unless asked to keep it or something needs looking at.
 */
export async function finishNodes(o: {
  readonly nodes: readonly Node[];
  readonly stopping: Promise<void> | null;
  readonly log: { end(): void };
  readonly baseDir: string;
  readonly keep: boolean;
  readonly failed: boolean;
  readonly interrupted: boolean;
}): Promise<void> {
  stopCurrentChild();
  await (o.stopping ?? stopNodes(o.nodes));
  const unclean = o.nodes.filter((n) => n.exit?.code !== 0);
  if (unclean.length > 0)
    out(
      `nodes that did not exit 0: ${unclean.map((n) => `${n.id} (${n.exit?.code ?? n.exit?.signal})`).join(", ")}`,
    );
  o.log.end();
  if (o.keep || (o.failed && !o.interrupted) || unclean.length > 0)
    out(`data directories and logs kept in ${o.baseDir}`);
  else await rm(o.baseDir, { recursive: true, force: true });
}

/**
 * Runs a benchmark's `main` and exits with its code: 2 with the usage hint for a bad argument,
 * 1 with the stack for anything else thrown.
 */
export function runBench(name: string, main: (argv: string[]) => Promise<number>): void {
  main(process.argv.slice(2)).then(
    (code) => process.exit(code),
    (err: unknown) => {
      if (
        err instanceof UsageError ||
        (err as { code?: string }).code?.startsWith("ERR_PARSE_ARGS")
      ) {
        process.stderr.write(`${name}: ${(err as Error).message}\nRun with --help for usage.\n`);
        process.exit(2);
      }
      process.stderr.write(
        `${name}: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
      );
      process.exit(1);
    },
  );
}
