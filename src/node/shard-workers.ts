/**
 * A single node spread over shard workers (`shard_workers` > 1; docs/architecture.md, "Using
 * every core", shape A). Each worker thread (shard-worker.ts) owns the shards whose id mod N is
 * its index, with its own WAL, Raft groups and LSM engines, and serves `rpc_addr` on a port the
 * workers share (SO_REUSEPORT: the kernel spreads connections over them); a call on another
 * worker's shard is handed to that worker (siblings.ts). The main thread keeps what is the
 * node's: the operators' HTTP server, with `/health` and `/metrics` gathered from the workers,
 * and the start and the stop.
 *
 * Start: the data directory's layout is checked (worker-layout.ts), `rpc_addr` is checked free
 * (rpc-port.ts), the HTTP server starts (503 until serving), every worker recovers its shards,
 * then worker 0 binds `rpc_addr` and the others the port it got. Stop: every worker drains its
 * gRPC server, then every worker closes its shards (a call handed between workers while
 * draining still finds its shard open; a worker that has not within 30 s is terminated), then
 * HTTP.
 */
import { type MessagePort, MessageChannel, Worker } from "node:worker_threads";
import { AggregatorRegistry, type MetricObjectWithValues, type MetricValue } from "prom-client";
import { type CairnConfig, formatHostPort, parseHostPort } from "../config/index.ts";
import type {
  HealthReport,
  HealthSource,
  Logger,
  OpsHttpServer,
  ShardHealth,
} from "../ops/index.ts";
import { type NodeAddresses, startOpsHttp } from "./node.ts";
import { fromWireError } from "./siblings.ts";
import { walDirOf } from "./worker-layout.ts";
import { planNodeDescriptors } from "./open-files.ts";
import { claimDataDir, type DataDirLock } from "./data-dir-lock.ts";
import { loadIncarnation } from "./incarnation.ts";
import { checkRpcAddr } from "./rpc-port.ts";
import { CairnError, dupFd } from "../common/index.ts";
import { newInternalKey } from "../api/index.ts";
import type { MainToWorker, Question, ShardWorkerSetup, WorkerToMain } from "./worker-protocol.ts";

/** One worker thread as the main thread sees it (`script`: shard-worker.ts; tests run others). */
export class WorkerHandle {
  readonly index: number;
  readonly #worker: Worker;
  readonly #asked = new Map<number, { resolve(v: unknown): void; reject(e: unknown): void }>();
  #nextId = 1;
  /** Waiters for the next message of each type. */
  readonly #awaited = new Map<
    string,
    { resolve(m: WorkerToMain): void; reject(e: unknown): void }
  >();
  #exited: Error | null = null;

  constructor(
    index: number,
    setup: ShardWorkerSetup,
    transfer: MessagePort[],
    onFatal: (err: Error) => void,
    script: URL = new URL("./shard-worker.ts", import.meta.url),
  ) {
    this.index = index;
    this.#worker = new Worker(script, {
      workerData: setup,
      transferList: transfer,
    });
    this.#worker.on("message", (m: WorkerToMain) => {
      if (m.type === "answer") {
        const waiting = this.#asked.get(m.id);
        this.#asked.delete(m.id);
        if (m.error === undefined) waiting?.resolve(m.value);
        else waiting?.reject(fromWireError(m.error));
        return;
      }
      if (m.type === "fatal") {
        onFatal(fromWireError(m.error));
        return;
      }
      const waiter = this.#awaited.get(m.type === "failed" ? "started" : m.type);
      if (waiter === undefined) return;
      this.#awaited.delete(m.type === "failed" ? "started" : m.type);
      if (m.type === "failed") waiter.reject(fromWireError(m.error));
      else waiter.resolve(m);
    });
    const died = (err: Error): void => {
      if (this.#exited !== null) return;
      this.#end(err);
      onFatal(err);
    };
    this.#worker.on("error", (err) => died(err));
    this.#worker.on("exit", (code) =>
      died(new Error(`shard worker ${index} exited (code ${code})`)),
    );
  }

  /** The next message of `type` (a "failed" rejects the wait for "started"). */
  next(type: "opened" | "started" | "drained" | "stopped"): Promise<WorkerToMain> {
    if (this.#exited !== null) return Promise.reject(this.#exited);
    return new Promise((resolve, reject) => this.#awaited.set(type, { resolve, reject }));
  }

  send(m: MainToWorker): void {
    if (this.#exited === null) this.#worker.postMessage(m);
  }

  /**
   * The worker's answer to `what`, or a rejection once ASK_TIMEOUT_MS[what] has passed: a worker
   * whose event loop is stuck never answers, and a question waiting on it for ever would hang
   * every later /health/quick (they share one check) and stay in the table.
   */
  ask(what: Question): Promise<unknown> {
    if (this.#exited !== null) return Promise.reject(this.#exited);
    const id = this.#nextId++;
    const ms = ASK_TIMEOUT_MS[what];
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.#asked.delete(id);
        reject(new Error(`shard worker ${this.index} did not answer (${what}) within ${ms} ms`));
      }, ms);
      timer.unref();
      this.#asked.set(id, {
        resolve: (v) => {
          clearTimeout(timer);
          resolve(v);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      });
      this.send({ type: "ask", id, what });
    });
  }

  /** Ends the thread; its exit is not a failure any more. */
  async terminate(): Promise<void> {
    // What still waits on the thread (a /metrics or /health request's question) fails now: the
    // thread will never answer it, and its exit no longer fails it (died does nothing then).
    if (this.#exited === null) this.#end(new Error(`shard worker ${this.index} was stopped`));
    await this.#worker.terminate();
  }

  /** Nothing more comes from the thread: what waits on it fails with `err`. */
  #end(err: Error): void {
    this.#exited = err;
    for (const w of [...this.#awaited.values(), ...this.#asked.values()]) w.reject(err);
    this.#awaited.clear();
    this.#asked.clear();
  }
}

export class ShardWorkersNode implements HealthSource {
  readonly config: CairnConfig;
  readonly #log: Logger;
  readonly #started = performance.now();
  readonly #workers: WorkerHandle[] = [];
  #http: OpsHttpServer | null = null;
  #addresses: NodeAddresses = { rpc: "", http: "" };
  #serving = false;
  #stopping: Promise<void> | null = null;
  /** The data directory's lock, held for the whole process (the workers are its threads). */
  #lock: DataDirLock | null = null;

  private constructor(config: CairnConfig, log: Logger) {
    this.config = config;
    this.#log = log;
  }

  /**
   * Starts the HTTP server and the workers, each recovering its shards, then their gRPC
   * servers. Rejects (after stopping what started) when a worker cannot start; `onFatal` hears
   * of a worker's failure after start.
   */
  static async start(
    config: CairnConfig,
    log: Logger,
    onFatal: (err: unknown) => void = () => {},
  ): Promise<ShardWorkersNode> {
    const node = new ShardWorkersNode(config, log);
    try {
      node.#lock = await claimDataDir(config, log);
      // Before the workers open their WALs, which would bind the directory to this start's
      // settings: a start that fails on rpc_addr writes none (rpc-port.ts).
      await checkRpcAddr(config.rpc_addr);
      await node.#startHttp();
      await node.#startWorkers((err) => {
        if (node.#stopping !== null) return;
        log.error("a shard worker failed; the node stops serving", { error: err.message });
        onFatal(err);
      });
    } catch (err) {
      node.#stopping = Promise.resolve();
      await Promise.all(node.#workers.map((w) => w.terminate()));
      await node.#http?.close(0);
      node.#lock?.release();
      throw err;
    }
    node.#serving = true;
    log.info("node started", {
      node_id: config.node_id,
      rpc_addr: node.#addresses.rpc,
      http_addr: node.#addresses.http,
      data_dir: config.data_dir,
      total_shards: config.cluster.total_shards,
      mode: config.cluster.seed_nodes.length === 0 ? "single-node" : "cluster",
      shard_workers: config.shard_workers,
    });
    return node;
  }

  get addresses(): NodeAddresses {
    return this.#addresses;
  }

  async #startHttp(): Promise<void> {
    const metrics = { expose: () => this.#expose() };
    const { server, address } = await startOpsHttp(this.config, this, metrics, this.#log);
    this.#http = server;
    this.#addresses = { ...this.#addresses, http: address };
  }

  async #startWorkers(onFatal: (err: Error) => void): Promise<void> {
    const c = this.config;
    const n = c.shard_workers;
    // Read once here: every worker's replicas are the same node's.
    const cluster = c.cluster.seed_nodes.length > 0;
    const incarnation = cluster ? (await loadIncarnation(c.data_dir)).id : "";
    if (cluster && dupFd === undefined) {
      // A peer's connection is handed to the worker it names by its descriptor (worker-tunnel.ts).
      throw new CairnError(
        "CAIRN_ERR_CONFIG",
        "shard_workers above 1 in a cluster needs Cairn's native addon (built by npm install with a C compiler, or by npm run build:native: scripts/build-native.mjs), which is not loaded",
      );
    }
    const ports: (MessagePort | null)[][] = Array.from({ length: n }, () =>
      Array.from({ length: n }, () => null),
    );
    for (let i = 0; i < n; i++) {
      for (let j = i + 1; j < n; j++) {
        const { port1, port2 } = new MessageChannel();
        (ports[i] as (MessagePort | null)[])[j] = port1;
        (ports[j] as (MessagePort | null)[])[i] = port2;
      }
    }
    // The open-file limit's split (open-files.ts): one count of rpc_addr's connections for every
    // worker's front end, and the tables' descriptors shared out.
    const { slots, plan } = planNodeDescriptors(c, this.#log);
    const connections = slots.shared;
    const internalKey = newInternalKey();
    for (let i = 0; i < n; i++) {
      const own = ports[i] as (MessagePort | null)[];
      const setup: ShardWorkerSetup = {
        config: c,
        index: i,
        count: n,
        walDir: walDirOf(c.data_dir, n, i),
        ports: own,
        incarnation,
        connections,
        tableFiles: plan.tableFiles,
        internalKey,
      };
      this.#workers.push(
        new WorkerHandle(
          i,
          setup,
          own.filter((p) => p !== null),
          onFatal,
        ),
      );
    }
    // Every worker recovers its shards at once; a failure (its start's error) ends the start.
    const started = this.#workers.map((w) => w.next("started"));
    for (const s of started) s.catch(() => undefined);
    await Promise.race([
      Promise.all(this.#workers.map((w) => w.next("opened"))),
      Promise.all(started),
    ]);
    // Worker 0 binds rpc_addr (port 0 picks one), the others share the port it got.
    const [first, ...rest] = this.#workers as [WorkerHandle, ...WorkerHandle[]];
    const http = this.#addresses.http;
    first.send({ type: "bind", rpc: c.rpc_addr, http });
    const bound = (await started[0]) as { rpc: string };
    const configured = parseHostPort(c.rpc_addr, { allowPortZero: true, allowUnspecified: true });
    const boundAt = parseHostPort(bound.rpc, { allowUnspecified: true });
    if (!configured.ok || !boundAt.ok) throw new Error(`rpc_addr ${c.rpc_addr} is not host:port`);
    const shared = formatHostPort({ host: configured.value.host, port: boundAt.value.port });
    for (const w of rest) w.send({ type: "bind", rpc: shared, http });
    await Promise.all(started);
    this.#addresses = { ...this.#addresses, rpc: bound.rpc };
  }

  // ── health and metrics, gathered from the workers ───────────────────────────────────────────

  async isQuickHealthy(): Promise<boolean> {
    if (!this.#serving || this.#stopping !== null) return false;
    // A worker that cannot answer (it died: the node is stopping; or it is stuck) is not healthy.
    const answers = await Promise.allSettled(this.#workers.map((w) => w.ask("quick")));
    return answers.every((a) => a.status === "fulfilled" && a.value === true);
  }

  async report(): Promise<HealthReport> {
    const reports = (await Promise.all(
      this.#workers.map((w) => w.ask("report")),
    )) as HealthReport[];
    const shards: ShardHealth[] = reports.flatMap((r) => r.shards).sort((a, b) => a.id - b.id);
    const unhealthy =
      !this.#serving || this.#stopping !== null || reports.some((r) => r.status === "unhealthy");
    return {
      status: unhealthy
        ? "unhealthy"
        : reports.every((r) => r.status === "healthy")
          ? "healthy"
          : "degraded",
      node_id: this.config.node_id,
      uptime_seconds: Math.floor((performance.now() - this.#started) / 1000),
      total_shards: this.config.cluster.total_shards,
      active_shards: shards.length,
      shards,
      // Worker 0 runs membership; every worker's view has its members.
      nodes: reports[0]?.nodes ?? [],
      ...(reports[0]?.cluster_version === undefined
        ? {}
        : { cluster_version: reports[0].cluster_version }),
      ...(reports.some((r) => r.puts_refused === true) ? { puts_refused: true as const } : {}),
    };
  }

  /** Every worker's metrics, summed series by series (the process-wide ones: the largest). */
  async #expose(): Promise<string> {
    const lists = (await Promise.all(
      this.#workers.map((w) => w.ask("metrics")),
    )) as MetricObjectWithValues<MetricValue<string>>[][];
    return AggregatorRegistry.aggregate(lists).metrics();
  }

  // ── shutdown ────────────────────────────────────────────────────────────────────────────────

  /** Drains every worker's gRPC server within the configured deadline, then closes their shards. */
  stop(): Promise<void> {
    this.#stopping ??= this.#closeAll();
    return this.#stopping;
  }

  async #closeAll(): Promise<void> {
    const started = performance.now();
    const drainMs = this.config.shutdown.drain_timeout_ms;
    // The HTTP server stops once the workers have drained and before they close, as a node
    // without workers stops it before its shards: a report or scrape in flight asks the
    // workers, and one still running as they ended was answered 500, logged at ERROR.
    await stopWorkers(this.#workers, drainMs, this.#log, STOP_GRACE_MS, () =>
      this.#http?.close(Math.max(0, drainMs - (performance.now() - started))),
    );
    this.#lock?.release();
    this.#log.info("node stopped", { node_id: this.config.node_id });
  }
}

/**
 * Stops the workers' threads: every worker drains its gRPC server (within `drainMs` and
 * CLOSE_GRACE_MS), then `drainedHook` runs (the node stops its HTTP server: it asks the
 * workers), then every worker closes its shards, within `stopGraceMs`; a worker that has
 * not stopped by then (its event loop stuck, or a close that never ends) is terminated, and
 * logged: a stop must end, and its shards are left as a crash leaves them (what it acknowledged
 * is in its WAL, replayed at the next start). Resolves once every thread has ended.
 */
export async function stopWorkers(
  workers: readonly WorkerHandle[],
  drainMs: number,
  log: Logger,
  stopGraceMs = STOP_GRACE_MS,
  drainedHook: () => Promise<void> | undefined = () => undefined,
): Promise<void> {
  // A worker that died (the usual reason for a stop after a failure) neither drains nor stops:
  // the others still do, and every thread is ended.
  const drained = workers.map((w) => w.next("drained").catch(() => undefined));
  const stopping = new Set(workers);
  const stopped = workers.map((w) =>
    w.next("stopped").then(
      () => void stopping.delete(w),
      () => void stopping.delete(w),
    ),
  );
  for (const w of workers) w.send({ type: "stop" });
  // A worker whose drain failed must not hold the others' shards open for ever.
  await within(Promise.all(drained), drainMs + CLOSE_GRACE_MS);
  await drainedHook();
  for (const w of workers) w.send({ type: "close" });
  await within(Promise.all(stopped), stopGraceMs);
  for (const w of stopping) {
    log.error("a shard worker did not stop in time; its thread is terminated", {
      shard_worker: w.index,
      waited_ms: stopGraceMs,
    });
  }
  await Promise.all(workers.map((w) => w.terminate()));
}

/** Resolves once `p` has, or `ms` have passed. */
async function within(p: Promise<unknown>, ms: number): Promise<void> {
  let timer: NodeJS.Timeout | undefined;
  await Promise.race([
    p,
    new Promise<void>((resolve) => (timer = setTimeout(resolve, ms))),
  ]).finally(() => clearTimeout(timer));
}

/**
 * How long the main thread waits for a worker's answer: the quick check within a second, before
 * the probes time out (2–3 s in deploy/k8s), so that a stuck worker makes it 503; the report
 * within /health's own 5 s, and the metrics as long.
 */
const ASK_TIMEOUT_MS: Readonly<Record<Question, number>> = {
  quick: 1_000,
  report: 5_000,
  metrics: 5_000,
};

/** How long past the drain deadline the workers' shards stay open for a worker still draining. */
const CLOSE_GRACE_MS = 5_000;

/**
 * How long a worker may take to close its shards once told to: its engines wait for the flushes
 * and compactions running (seconds each), its WAL for its last sync. Past it the thread is
 * terminated (stopWorkers).
 */
const STOP_GRACE_MS = 30_000;
