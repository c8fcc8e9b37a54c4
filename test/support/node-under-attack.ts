/**
 * What the front-end attack suite (test/e2e/front-end-attacks.test.ts) needs around a real
 * `cairn serve` process: one node shared by many tests and started again when an attack has
 * killed it (so each test fails for its own reason, not its predecessor's), its RSS read from
 * /proc, and a well-behaved grpc-js client plus /health/quick probes whose latencies are
 * recorded while an attack runs.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { freePort } from "./cluster-process.ts";
import { type Clients, connect } from "./grpc-client.ts";
import { type ServerProcess, startServer } from "./server-process.ts";

/** The node's resident set in MiB (/proc/<pid>/status VmRSS). */
export function rssMiB(pid: number): number {
  const text = readFileSync(`/proc/${pid}/status`, "utf8");
  const match = /VmRSS:\s*(\d+)\s*kB/.exec(text);
  assert.ok(match !== null, `VmRSS in /proc/${pid}/status`);
  return Number(match[1]) / 1024;
}

export function isRunning(server: ServerProcess): boolean {
  return server.proc.exitCode === null && server.proc.signalCode === null;
}

/** Whether the node answers /health/quick within 2 s. */
async function answersHealth(server: ServerProcess): Promise<boolean> {
  try {
    const r = await fetch(`http://${server.http}/health/quick`, {
      signal: AbortSignal.timeout(2000),
    });
    await r.arrayBuffer();
    return r.ok;
  } catch {
    return false;
  }
}

/** One node, started on first use and again whenever it is found dead. */
export class NodeUnderAttack {
  readonly #env: Readonly<Record<string, string>>;
  readonly #cluster: boolean;
  #dir: string | null = null;
  #server: ServerProcess | null = null;
  #client: Clients | null = null;
  /** How each earlier process ended, for the failure messages of the tests after it. */
  readonly deaths: string[] = [];

  /**
   * `cluster`: a one-node cluster, its own seed (the peers' service is served, as in cluster
   * mode); it needs a fixed port, claimed as the cluster tests claim theirs.
   */
  constructor(env: Readonly<Record<string, string>> = {}, opts: { cluster?: boolean } = {}) {
    this.#env = env;
    this.#cluster = opts.cluster ?? false;
  }

  #ensuring: Promise<ServerProcess> | null = null;

  /** The running node (started, or started again after a death); concurrent callers share one. */
  ensure(): Promise<ServerProcess> {
    this.#ensuring ??= this.#ensure().finally(() => (this.#ensuring = null));
    return this.#ensuring;
  }

  async #ensure(): Promise<ServerProcess> {
    const current = this.#server;
    if (current !== null && isRunning(current) && (await answersHealth(current))) return current;
    if (current !== null) {
      // Dying (an attack killed it, its exit not yet seen) or hung: it is replaced.
      if (isRunning(current)) current.proc.kill("SIGKILL");
      const exit = await current.exited;
      this.deaths.push(
        `exit ${exit.code ?? exit.signal}: ${current.stderr().trim().split("\n").slice(-3).join(" | ")}`,
      );
      this.#client?.close();
      this.#client = null;
    }
    if (this.#dir !== null) await rm(this.#dir, { recursive: true, force: true });
    this.#dir = await mkdtemp(join(tmpdir(), "cairn-attacks-"));
    let args: string[] = [];
    if (this.#cluster) {
      const rpc = `127.0.0.1:${await freePort()}`;
      args = ["--rpc-addr", rpc, "--seed-nodes", rpc];
    }
    this.#server = await startServer({ dataDir: this.#dir, env: this.#env, args });
    return this.#server;
  }

  /** A grpc-js client of the running node (made again after a restart). */
  async client(): Promise<Clients> {
    const server = await this.ensure();
    this.#client ??= connect(server.rpc);
    return this.#client;
  }

  get port(): number {
    assert.ok(this.#server !== null, "the node has started");
    return Number(this.#server.rpc.split(":").at(-1));
  }

  get pid(): number {
    const pid = this.#server?.proc.pid;
    assert.ok(pid !== undefined, "the node has a pid");
    return pid;
  }

  /**
   * The node that ran the test is still running and answers a Get (on a new connection): fails
   * with how it ended when it did not survive.
   */
  async assertAlive(): Promise<void> {
    const server = this.#server;
    assert.ok(server !== null, "the node was started");
    const c = connect(server.rpc);
    try {
      const answered = await c
        .call(c.kv, "Get", { key: Buffer.from("probe") }, PROBE_DEADLINE_MS)
        .then(() => null)
        .catch((err: unknown) => String(err));
      if (answered !== null) {
        // It may be exiting: its exit says more than the refused connection.
        await Promise.race([server.exited, new Promise((r) => setTimeout(r, 2000).unref())]);
      }
      if (!isRunning(server)) {
        const exit = await server.exited;
        assert.fail(
          `the node exited (${exit.code ?? exit.signal}): ${server.stderr().trim().split("\n").slice(-4).join(" | ")}`,
        );
      }
      // A status the node chose (a cluster node not yet founded answers UNAVAILABLE) is an
      // answer; a connection that cannot be made is not.
      assert.ok(
        answered === null ||
          !/No connection established|ECONNREFUSED|Deadline exceeded/.test(answered),
        `the node answers a Get on a new connection: ${answered}`,
      );
    } finally {
      c.close();
    }
  }

  async stop(): Promise<void> {
    this.#client?.close();
    this.#client = null;
    const server = this.#server;
    this.#server = null;
    if (server !== null && isRunning(server)) {
      server.proc.kill("SIGKILL");
      await server.exited;
    }
    if (this.#dir !== null) await rm(this.#dir, { recursive: true, force: true });
    this.#dir = null;
  }
}

/** What the probes saw while an attack ran. */
export interface ProbeReport {
  /** Latencies (ms) of the grpc-js calls and the /health/quick requests, sorted. */
  readonly grpc: number[];
  readonly health: number[];
  /** Failures (a probe that errored or timed out), described. */
  readonly failures: string[];
  /** The largest RSS seen (MiB), and the one before the attack. */
  readonly peakRss: number;
  readonly baseRss: number;
}

export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return Infinity;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}

/** Each probe's own deadline: a probe slower than this is a failure, not a sample. */
const PROBE_DEADLINE_MS = 10_000;
const RSS_SAMPLE_MS = 50;

/**
 * Probes a node while `attack` runs: a grpc-js client doing Get after Get (one at a time), a
 * /health/quick loop, and RSS samples. `rssCeilingMiB`: past this growth the attack is told to
 * stop (`abort` is aborted), so a node that grows without bound is caught early, not swapped out.
 */
export async function probeDuring<T>(
  node: NodeUnderAttack,
  rssCeilingMiB: number,
  attack: (abort: AbortSignal) => Promise<T>,
): Promise<{ result: T; report: ProbeReport }> {
  const server = await node.ensure();
  const c = await node.client();
  // A warm client: its connection is up before the clock starts.
  await c.call(c.kv, "Put", { key: Buffer.from("probe"), value: Buffer.from("p") });
  await c.call(c.kv, "Get", { key: Buffer.from("probe") });
  const pid = node.pid;
  const baseRss = rssMiB(pid);
  let peakRss = baseRss;
  const abort = new AbortController();
  const grpc: number[] = [];
  const health: number[] = [];
  const failures: string[] = [];
  let running = true;
  const sampler = setInterval(() => {
    if (!isRunning(server)) {
      abort.abort(new Error("the node exited"));
      return;
    }
    try {
      peakRss = Math.max(peakRss, rssMiB(pid));
    } catch {
      return; // exiting
    }
    if (peakRss - baseRss > rssCeilingMiB) abort.abort(new Error("RSS ceiling"));
  }, RSS_SAMPLE_MS);
  const grpcLoop = (async () => {
    while (running) {
      const t = performance.now();
      try {
        await c.call(c.kv, "Get", { key: Buffer.from("probe") }, PROBE_DEADLINE_MS);
        grpc.push(performance.now() - t);
      } catch (err) {
        failures.push(`grpc Get: ${String(err)}`);
        if (!isRunning(server)) return;
      }
    }
  })();
  const healthLoop = (async () => {
    while (running) {
      const t = performance.now();
      try {
        // Once again on a failure to reuse the keep-alive socket (the HTTP server may close an
        // idle one as the request goes out): that is the client's race, not the node's delay.
        const r = await healthQuick(server).catch((err: unknown) =>
          err instanceof TypeError && err.message === "fetch failed"
            ? healthQuick(server)
            : Promise.reject(err),
        );
        await r.arrayBuffer();
        health.push(performance.now() - t);
      } catch (err) {
        failures.push(`/health/quick: ${String(err)}`);
        if (!isRunning(server)) return;
      }
    }
  })();
  let result: T;
  try {
    result = await attack(abort.signal);
  } finally {
    running = false;
    clearInterval(sampler);
    await Promise.all([grpcLoop, healthLoop]);
  }
  return {
    result,
    report: {
      grpc: grpc.sort((a, b) => a - b),
      health: health.sort((a, b) => a - b),
      failures,
      peakRss,
      baseRss,
    },
  };
}

function healthQuick(server: ServerProcess): Promise<Response> {
  return fetch(`http://${server.http}/health/quick`, {
    signal: AbortSignal.timeout(PROBE_DEADLINE_MS),
  });
}

/** Bounds a test states and asserts on every attack. */
export interface Bounds {
  /** p99 of the probes' latencies (ms). */
  readonly p99Ms: number;
  /** RSS growth over the attack (MiB). */
  readonly rssGrowthMiB: number;
}

/** The node is alive, its probes were fast and all answered, its RSS grew little. */
export async function assertUnharmed(
  node: NodeUnderAttack,
  report: ProbeReport,
  bounds: Bounds,
): Promise<void> {
  await node.assertAlive();
  assert.deepEqual(report.failures.slice(0, 5), [], "every probe answered");
  assert.ok(report.grpc.length > 0 && report.health.length > 0, "the probes ran");
  const p99g = percentile(report.grpc, 99);
  const p99h = percentile(report.health, 99);
  assert.ok(
    p99g <= bounds.p99Ms && p99h <= bounds.p99Ms,
    `probe p99 within ${bounds.p99Ms} ms: grpc ${p99g.toFixed(1)} ms (n=${report.grpc.length}), /health/quick ${p99h.toFixed(1)} ms (n=${report.health.length})`,
  );
  const grew = report.peakRss - report.baseRss;
  assert.ok(
    grew <= bounds.rssGrowthMiB,
    `RSS grew by ${grew.toFixed(0)} MiB (bound ${bounds.rssGrowthMiB} MiB)`,
  );
}
