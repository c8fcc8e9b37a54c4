/**
 * Real `cairn serve` processes forming a cluster on loopback, for end-to-end tests: fixed RPC
 * ports (the seeds must be known before the nodes start), HTTP on port 0, every node given the
 * same seed list, n1 first.
 */
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { type ChannelCredentials, type ClientReadableStream, credentials } from "@grpc/grpc-js";
import { type Clients, connect, grpcError, type Reply } from "./grpc-client.ts";
import { type ServerProcess, startServer } from "./server-process.ts";
import type { ClusterCerts } from "./tls-certs.ts";
import { freePort } from "./ports.ts";

export { claimFile, claimPort, freePort } from "./ports.ts";

/** Polls `check` (bounded) until it returns true; the nodes act on their own timers meanwhile. */
export async function eventually(
  what: string,
  check: () => Promise<boolean>,
  timeoutMs = 30_000,
): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  let last: unknown = null;
  while (performance.now() < deadline) {
    try {
      if (await check()) return;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  assert.fail(
    `not within ${timeoutMs} ms: ${what}${last === null ? "" : ` (last error: ${String(last)})`}`,
  );
}

export interface ClusterNode {
  readonly id: string;
  readonly rpc: string;
  readonly dataDir: string;
  server: ServerProcess | null;
  client: Clients | null;
  /** The log lines of this node's processes stopped so far, oldest first (saveLogs). */
  readonly pastLines: string[];
}

export class LocalCluster {
  readonly nodes: ClusterNode[];
  readonly #env: Readonly<Record<string, string>>;
  /** Each node's own environment over the cluster's (a TLS cluster's certificate files). */
  nodeEnv: (id: string) => Readonly<Record<string, string>> = () => ({});
  /** The credentials of the nodes' test clients (`client`); cleartext when unset. */
  credentials: ChannelCredentials | undefined = undefined;
  /**
   * The name the nodes' certificates carry for their test clients (TLS SNI and the check of the
   * certificate), when `credentials` are TLS: grpc-js would otherwise send the address's IP as
   * the server name, which Node warns about (DEP0123).
   */
  tlsName: string | undefined = undefined;

  private constructor(nodes: ClusterNode[], env: Readonly<Record<string, string>>) {
    this.nodes = nodes;
    this.#env = env;
  }

  /**
   * Picks ports for `size` nodes n1..nN under `dir`; starts none of them. The environment's
   * CLUSTER_SHARD_WORKERS=N runs every node with N shard workers (any cluster test, by hand).
   */
  static async create(
    dir: string,
    size = 3,
    env: Readonly<Record<string, string>> = {},
  ): Promise<LocalCluster> {
    const workers = process.env.CLUSTER_SHARD_WORKERS;
    if (workers !== undefined && env["CAIRN_SHARD_WORKERS"] === undefined) {
      env = { ...env, CAIRN_SHARD_WORKERS: workers };
    }
    const nodes: ClusterNode[] = [];
    for (let i = 1; i <= size; i++) {
      const port = await freePort();
      nodes.push({
        id: `n${i}`,
        rpc: `127.0.0.1:${port}`,
        dataDir: join(dir, `n${i}`),
        server: null,
        pastLines: [],
        client: null,
      });
    }
    return new LocalCluster(nodes, env);
  }

  /**
   * Runs the nodes with TLS between them, mutual TLS for clients and sealed gossip (`certs`), and
   * connects the test clients as admin alice; a node without a certificate in `certs` runs in
   * cleartext.
   */
  useTls(certs: ClusterCerts): void {
    this.nodeEnv = (id) => {
      const c = certs.nodes.get(id);
      return c === undefined
        ? {}
        : {
            CAIRN_TLS_CERT_FILE: c.cert,
            CAIRN_TLS_KEY_FILE: c.key,
            CAIRN_TLS_PEER_CA_FILE: certs.peerCa,
            CAIRN_TLS_CLIENT_CA_FILE: certs.clientCa,
            CAIRN_CLUSTER_GOSSIP_KEY_FILE: certs.gossipKey,
          };
    };
    this.credentials = credentials.createSsl(
      readFileSync(certs.peerCa),
      readFileSync(certs.alice.key),
      readFileSync(certs.alice.cert),
    );
    this.tlsName = "localhost";
  }

  get seeds(): string {
    return this.nodes.map((n) => n.rpc).join(",");
  }

  node(id: string): ClusterNode {
    const n = this.nodes.find((x) => x.id === id);
    assert.ok(n !== undefined, `no node ${id}`);
    return n;
  }

  /** Starts node `id`, with `env` over the cluster's environment. */
  async start(id: string, env: Readonly<Record<string, string>> = {}): Promise<ClusterNode> {
    const n = this.node(id);
    n.server = await startServer({
      dataDir: n.dataDir,
      args: ["--node-id", n.id, "--rpc-addr", n.rpc, "--seed-nodes", this.seeds],
      env: { ...this.#env, ...this.nodeEnv(n.id), ...env },
    });
    n.client = connect(
      n.rpc,
      this.tlsName === undefined ? {} : { "grpc.ssl_target_name_override": this.tlsName },
      ...(this.credentials === undefined ? [] : [this.credentials]),
    );
    return n;
  }

  /**
   * Starts every node. When one fails to start, the others are waited for and killed before the
   * first failure is thrown: a node still starting when a test's cleanup runs would outlive it
   * (and keep the test process from exiting).
   */
  async startAll(): Promise<void> {
    const results = await Promise.allSettled(this.nodes.map((n) => this.start(n.id)));
    const failed = results.find((r) => r.status === "rejected");
    if (failed !== undefined) {
      await this.killAll();
      throw failed.reason;
    }
  }

  /** Waits until every running node answers /health/quick with 200 (the metadata is there). */
  async ready(timeoutMs = 30_000): Promise<void> {
    for (const n of this.running()) {
      await eventually(
        `${n.id} /health/quick is 200`,
        async () => {
          const proc = n.server?.proc;
          if (proc !== undefined && (proc.exitCode !== null || proc.signalCode !== null)) {
            assert.fail(
              `${n.id} exited (${proc.exitCode ?? proc.signalCode}): ${n.server?.lines.slice(-3).join("\n")} ${n.server?.stderr().slice(-2000)}`,
            );
          }
          return (await fetch(`http://${n.server?.http}/health/quick`)).status === 200;
        },
        timeoutMs,
      );
    }
  }

  running(): ClusterNode[] {
    return this.nodes.filter((n) => n.server !== null);
  }

  /**
   * Each node's logs, for a failed test (its processes stopped so far, then the running one):
   * written whole to `dir` (one file a node), and each node's last `tail` lines at WARN or above
   * returned, for the failure's message (a CI log keeps no data directory).
   */
  saveLogs(dir: string, tail = 15): string {
    mkdirSync(dir, { recursive: true });
    const out: string[] = [`node logs in ${dir}`];
    for (const n of this.nodes) {
      const lines = [...n.pastLines, ...(n.server?.lines ?? [])];
      writeFileSync(join(dir, `${n.id}.log`), lines.join("\n") + "\n");
      const loud = lines.filter((l) => /"level":"(WARN|ERROR|FATAL)"/.test(l)).slice(-tail);
      out.push(`--- ${n.id}: ${lines.length} lines, the last ${loud.length} at WARN or above:`);
      out.push(...loud);
    }
    return out.join("\n");
  }

  /** Whether every running node's /health says `healthy` (for `eventually`). */
  async allHealthy(): Promise<boolean> {
    for (const n of this.running()) {
      if ((await healthReport(n.server?.http)).status !== "healthy") return false;
    }
    return true;
  }

  async stop(id: string, signal: NodeJS.Signals = "SIGTERM"): Promise<void> {
    const n = this.node(id);
    n.client?.close();
    n.client = null;
    const server = n.server;
    n.server = null;
    if (server !== null) {
      const exit = await server.stop(signal);
      // One push a line: spread into push, a long log (a debug level, a long test) would pass
      // more arguments than a call takes (RangeError).
      for (const line of server.lines) n.pastLines.push(line);
      n.pastLines.push(`--- ${id} stopped (${signal})`);
      if (signal === "SIGTERM") {
        assert.equal(exit.code, 0, `${id} exited cleanly; stderr: ${server.stderr()}`);
      }
    }
  }

  async stopAll(): Promise<void> {
    await Promise.all(this.running().map((n) => this.stop(n.id)));
  }

  /** Kills every node still running (for `finally` blocks after a failure). */
  async killAll(): Promise<void> {
    await Promise.all(this.running().map((n) => this.stop(n.id, "SIGKILL")));
  }
}

/**
 * Runs `body` on a LocalCluster of `size` node slots (none started, `env` for every node) in a
 * new directory named after `name`, then kills every node. A failure keeps the data directories
 * and the nodes' logs, and names their last WARN lines in its message (saveLogs: for a failure
 * seen in CI only); a success removes the directory.
 */
export async function withLocalCluster(
  name: string,
  size: number,
  env: Readonly<Record<string, string>>,
  body: (cluster: LocalCluster) => Promise<void>,
): Promise<void> {
  const dir = await mkdtemp(join(tmpdir(), `cairn-e2e-${name}-`));
  const cluster = await LocalCluster.create(dir, size, env);
  let failed = false;
  try {
    await body(cluster);
  } catch (err) {
    failed = true;
    throw new Error(`${String(err)}\n${cluster.saveLogs(join(dir, "logs"))}`, { cause: err });
  } finally {
    await cluster.killAll();
    if (!failed) await rm(dir, { recursive: true, force: true });
  }
}

/** A node's GET /health report (the fields the tests read). */
export interface HealthReport {
  status: string;
  shards: { id: number; status: string }[];
  cluster_version?: number;
  puts_refused?: boolean;
}

/** GET /health of the node whose HTTP address is `http`. */
export async function healthReport(http: string | undefined): Promise<HealthReport> {
  const res = await fetch(`http://${http}/health`);
  return (await res.json()) as HealthReport;
}

/** A node's cluster view as Meta.WatchCluster sends it (the fields the tests read). */
export interface ViewMessage {
  cluster_id: string;
  incarnation: string;
  nodes: { id: string; state: string; disk_full?: boolean }[];
  shards: { id: number; leader: string; replicas: string[] }[];
}

/** The node's current cluster view: the first message of Meta.WatchCluster. */
export function clusterView(c: Clients): Promise<ViewMessage> {
  return new Promise((resolve, reject) => {
    const call = (
      c.meta as unknown as { WatchCluster(req: object): ClientReadableStream<ViewMessage> }
    ).WatchCluster({});
    call.once("data", (v: ViewMessage) => {
      call.cancel();
      resolve(v);
    });
    call.once("error", (err: { code?: number }) => {
      if (err.code !== 1) reject(err);
    });
  });
}

/** A KV call retried (bounded) while the cluster answers UNAVAILABLE: an election, a new shard. */
export async function retryingKv(c: Clients, method: string, request: Reply): Promise<Reply> {
  const deadline = performance.now() + 20_000;
  for (;;) {
    try {
      return await c.call(c.kv, method, request);
    } catch (err) {
      if (grpcError(err).code !== 14 || performance.now() > deadline) throw err;
      await new Promise((r) => setTimeout(r, 50));
    }
  }
}

/**
 * The writes a test had acknowledged, and `put`, which writes a key through `c` (retryingKv) and
 * records it in `acknowledged` once the cluster acknowledged it.
 */
export function acknowledgedPuts(): {
  readonly acknowledged: Map<string, string>;
  put(c: Clients, key: string, value: string): Promise<void>;
} {
  const acknowledged = new Map<string, string>();
  return {
    acknowledged,
    async put(c, key, value) {
      await retryingKv(c, "Put", { key: Buffer.from(key), value: Buffer.from(value) });
      acknowledged.set(key, value);
    },
  };
}

/** Gets a read-back keeps in flight on one node. */
const READ_BACK_CONCURRENCY = 16;

/**
 * Reads every key of `want` back through `c`, READ_BACK_CONCURRENCY Gets in flight: linearizable
 * Gets retried while the cluster answers UNAVAILABLE (retryingKv), or, with `serializable`, one
 * serializable Get each (the node's own copy, not retried). A null value wants the key absent.
 * Resolves with the first difference found, described, or null when every key reads back.
 */
export async function readBackDifference(
  c: Clients,
  want: ReadonlyMap<string, string | null>,
  serializable = false,
): Promise<string | null> {
  const entries = [...want];
  let next = 0;
  let difference: string | null = null;
  const reader = async (): Promise<void> => {
    while (difference === null) {
      const entry = entries[next++];
      if (entry === undefined) return;
      const [key, value] = entry;
      const got = serializable
        ? await c.call(c.kv, "Get", { key: Buffer.from(key), consistency: "SERIALIZABLE" })
        : await retryingKv(c, "Get", { key: Buffer.from(key) });
      const read = got["found"] === true ? (got["value"] as Buffer).toString() : null;
      if (read !== value) difference ??= `${key}: read ${read}, want ${value}`;
    }
  };
  await Promise.all(Array.from({ length: READ_BACK_CONCURRENCY }, reader));
  return difference;
}

/**
 * Waits (up to 60 s) until every running node of `cluster` holds every acknowledged write in
 * its own copy: a serializable Get on each node returns the wanted value of each key (null:
 * absent). `when` names the moment in the failure's message.
 */
export async function everyReplicaHolds(
  cluster: LocalCluster,
  acknowledged: ReadonlyMap<string, string | null>,
  when?: string,
): Promise<void> {
  for (const n of cluster.running()) {
    const c = n.client;
    assert.ok(c !== null, `${n.id} has no client`);
    await eventually(
      `${when === undefined ? "" : `${when}: `}${n.id} holds every acknowledged write`,
      async () => (await readBackDifference(c, acknowledged, true)) === null,
      60_000,
    );
  }
}
