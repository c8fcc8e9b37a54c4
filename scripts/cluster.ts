/**
 * `npm run cluster -- --nodes 3`: a local cluster of `cairn serve` processes on loopback, for
 * trying Cairn and for tests. Node i is `n<i>` with its data in `<base-dir>/n<i>`; its settings
 * come from scripts/cluster-layout.ts, the table deploy/compose.yaml is checked against.
 *
 * It prints each node's endpoints, prefixes every log line of a node with its id (or writes it
 * to `<base-dir>/n<i>.log` with `--logs files`), waits (bounded) until every node's
 * /health/quick answers 200, prints commands to try, and on SIGINT/SIGTERM stops every node with
 * SIGTERM, then SIGKILL after a deadline. Exit code: 0 when every node exited 0, 1 otherwise
 * (including a node that failed to start), 2 for bad usage.
 *
 * The nodes run in their own process groups, so a Ctrl-C in the terminal reaches only this
 * launcher, which sends each node exactly one SIGTERM (a second signal makes a node stop at
 * once, skipping the drain). Each node's pid is in `<base-dir>/n<i>.pid` while it runs, in case
 * the launcher itself is killed.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { createSocket } from "node:dgram";
import {
  createWriteStream,
  existsSync,
  mkdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from "node:fs";
import { createServer } from "node:net";
import { join, relative, resolve } from "node:path";
import { createInterface } from "node:readline";
import { parseArgs } from "node:util";
import { CONFIG_KEYS } from "../src/config/index.ts";
import {
  HTTP_PORT,
  loopback,
  nodeEnvironment,
  type Placement,
  type PortMode,
  RPC_PORT,
} from "./cluster-layout.ts";

const ROOT = join(import.meta.dirname, "..");
const CAIRN = join(ROOT, "bin", "cairn");
/** The nodes' default shutdown.drain_timeout_ms (10 s) plus a margin, then SIGKILL. */
const STOP_DEADLINE_MS = 15_000;
const POLL_MS = 200;

const HELP = `Usage: npm run cluster -- [options]

Starts a local Cairn cluster: N \`cairn serve\` processes on loopback, node i named n<i>.
Ctrl-C (or SIGTERM) stops every node: SIGTERM, then SIGKILL after ${STOP_DEADLINE_MS / 1000} s.

Options:
  --nodes N             number of nodes (default 3)
  --base-dir DIR        data directories and pid/log files (default ./.cluster)
  --fresh               delete the base directory first (all data of the previous cluster)
  --rpc-port P          gRPC+SWIM port (default ${RPC_PORT})
  --http-base-port P    HTTP port (default ${HTTP_PORT})
  --ports MODE          shared: node i on 127.0.0.<i>, the same ports on each;
                        distinct: all on 127.0.0.1, node i on port + i - 1;
                        auto (default): shared if 127.0.0.2 can be bound, else distinct
  --logs WHERE          stdout (default: every line prefixed with the node id) or files
                        (<base-dir>/n<i>.log)
  --wait-ms MS          how long to wait for every /health/quick to answer 200 (default 60000)
  --tls                 TLS between clients and nodes and between the nodes, and sealed gossip:
                        a CA, each node's certificate and a gossip key are made in
                        <base-dir>/certs (cairn cert, once; kept)
  -h, --help            show this help

CAIRN_* variables of the environment reach every node (e.g. CAIRN_LOG_LEVEL=debug); the
node's identity, addresses, data directory and seeds are set by the launcher.
`;

interface Options {
  readonly nodes: number;
  readonly baseDir: string;
  readonly fresh: boolean;
  readonly rpcPort: number;
  readonly httpPort: number;
  readonly ports: PortMode | "auto";
  readonly logs: "stdout" | "files";
  readonly waitMs: number;
  readonly tls: boolean;
}

class UsageError extends Error {}

function parseOptions(argv: readonly string[]): Options | "help" {
  const { values } = parseArgs({
    args: [...argv],
    options: {
      nodes: { type: "string", default: "3" },
      "base-dir": { type: "string", default: ".cluster" },
      fresh: { type: "boolean", default: false },
      "rpc-port": { type: "string", default: String(RPC_PORT) },
      "http-base-port": { type: "string", default: String(HTTP_PORT) },
      ports: { type: "string", default: "auto" },
      logs: { type: "string", default: "stdout" },
      "wait-ms": { type: "string", default: "60000" },
      tls: { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
    strict: true,
    allowPositionals: false,
  });
  if (values.help) return "help";
  const int = (name: string, v: string, min: number, max: number): number => {
    const n = Number(v);
    if (!Number.isInteger(n) || n < min || n > max) {
      throw new UsageError(`--${name} must be an integer between ${min} and ${max}, got ${v}`);
    }
    return n;
  };
  const nodes = int("nodes", values.nodes, 1, 64);
  const ports = values.ports;
  if (ports !== "auto" && ports !== "shared" && ports !== "distinct") {
    throw new UsageError(`--ports must be auto, shared or distinct, got ${ports}`);
  }
  const logs = values.logs;
  if (logs !== "stdout" && logs !== "files") {
    throw new UsageError(`--logs must be stdout or files, got ${logs}`);
  }
  const rpcPort = int("rpc-port", values["rpc-port"], 1, 65535 - nodes);
  const httpPort = int("http-base-port", values["http-base-port"], 1, 65535 - nodes);
  if (Math.abs(rpcPort - httpPort) < nodes) {
    throw new UsageError("--rpc-port and --http-base-port must be at least --nodes apart");
  }
  return {
    nodes,
    baseDir: resolve(values["base-dir"]),
    fresh: values.fresh,
    rpcPort,
    httpPort,
    ports,
    logs,
    waitMs: int("wait-ms", values["wait-ms"], 1, 3_600_000),
    tls: values.tls,
  };
}

/** Whether TCP and UDP can bind `host` (an ephemeral port): 127.0.0.2 is not up everywhere. */
async function canBind(host: string): Promise<boolean> {
  const tcp = await new Promise<boolean>((done) => {
    const srv = createServer();
    srv.once("error", () => done(false));
    srv.listen(0, host, () => srv.close(() => done(true)));
  });
  if (!tcp) return false;
  return new Promise<boolean>((done) => {
    const sock = createSocket("udp4");
    sock.once("error", () => done(false));
    sock.bind(0, host, () => sock.close(() => done(true)));
  });
}

async function choosePorts(opts: Options): Promise<PortMode> {
  if (opts.ports !== "auto") return opts.ports;
  for (let i = 2; i <= opts.nodes; i++) {
    if (!(await canBind(`127.0.0.${i}`))) {
      out(`127.0.0.${i} cannot be bound here: every node on 127.0.0.1 (--ports distinct)`);
      return "distinct";
    }
  }
  return "shared";
}

/** Runs `cairn cert ARGS`; throws with its error output when it fails. */
function certCommand(args: readonly string[]): void {
  const r = spawnSync(CAIRN, ["cert", ...args], { cwd: ROOT, encoding: "utf8" });
  if (r.status !== 0) throw new Error(`cairn cert ${args.join(" ")}: ${r.stderr || r.stdout}`);
}

/**
 * A TLS cluster's certificates in `<base-dir>/certs`: a CA (once), and for node n<i> n<i>.crt
 * and n<i>.key (once), naming its id and its rpc host; a gossip key (once); each node's tls.*
 * and cluster.gossip_key_file settings.
 */
function tlsSettings(
  opts: Options,
  ids: readonly string[],
  hostOf: (k: number) => string,
): { env: (k: number) => Record<string, string>; ca: string } {
  const dir = join(opts.baseDir, "certs");
  const ca = join(dir, "ca.crt");
  if (!existsSync(ca)) certCommand(["create-ca", "--certs-dir", dir]);
  const gossipKey = join(dir, "gossip.key");
  if (!existsSync(gossipKey)) certCommand(["create-gossip-key", "--certs-dir", dir]);
  ids.forEach((id, k) => {
    if (existsSync(join(dir, `${id}.crt`))) return;
    const hosts = [...new Set([hostOf(k + 1), "localhost"])].flatMap((h) => ["--host", h]);
    certCommand(["create-node", id, ...hosts, "--certs-dir", dir, "--overwrite"]);
    renameSync(join(dir, "node.crt"), join(dir, `${id}.crt`));
    renameSync(join(dir, "node.key"), join(dir, `${id}.key`));
  });
  return {
    ca,
    env: (k) => ({
      CAIRN_TLS_CERT_FILE: join(dir, `${ids[k - 1]}.crt`),
      CAIRN_TLS_KEY_FILE: join(dir, `${ids[k - 1]}.key`),
      CAIRN_TLS_PEER_CA_FILE: ca,
      CAIRN_CLUSTER_GOSSIP_KEY_FILE: gossipKey,
    }),
  };
}

function out(line: string): void {
  process.stdout.write(`${line}\n`);
}

interface Node {
  readonly id: string;
  readonly env: Record<string, string>;
  readonly pidFile: string;
  proc: ChildProcess | null;
  exit: { code: number | null; signal: NodeJS.Signals | null } | null;
  exited: Promise<void>;
}

function refuseIfRunning(baseDir: string, ids: readonly string[]): void {
  for (const id of ids) {
    const file = join(baseDir, `${id}.pid`);
    if (!existsSync(file)) continue;
    const pid = Number(readFileSync(file, "utf8"));
    let alive = false;
    try {
      process.kill(pid, 0);
      alive = true;
    } catch {
      // No such process: a launcher that was killed left the file behind.
    }
    if (alive) {
      throw new UsageError(
        `${id} of a cluster in ${baseDir} still runs (pid ${pid}, ${file}); stop it first, or delete the file if that pid is not a cairn node`,
      );
    }
  }
}

function startNode(node: Node, opts: Options, width: number): void {
  const proc = spawn(CAIRN, ["serve"], {
    cwd: ROOT,
    env: { ...process.env, ...node.env },
    stdio: ["ignore", "pipe", "pipe"],
    // Its own process group: a terminal's Ctrl-C must not reach the node besides our SIGTERM.
    detached: true,
  });
  node.proc = proc;
  node.exited = new Promise((done) =>
    proc.once("exit", (code, signal) => {
      node.exit = { code, signal };
      rmSync(node.pidFile, { force: true });
      done();
    }),
  );
  if (proc.pid !== undefined) writeFileSync(node.pidFile, `${proc.pid}\n`);
  const prefix = `${node.id.padEnd(width)} | `;
  const toStdout = (stream: NodeJS.ReadableStream): void => {
    createInterface({ input: stream }).on("line", (l) => process.stdout.write(prefix + l + "\n"));
  };
  if (opts.logs === "files") {
    const file = createWriteStream(join(opts.baseDir, `${node.id}.log`), { flags: "a" });
    proc.stdout?.pipe(file);
  } else if (proc.stdout !== null) {
    toStdout(proc.stdout);
  }
  // stderr carries start-up failures (a bad setting, an address in use): always shown.
  if (proc.stderr !== null) toStdout(proc.stderr);
}

function isRunning(node: Node): boolean {
  return node.proc !== null && node.exit === null;
}

async function quickStatus(http: string): Promise<number> {
  try {
    const res = await fetch(`http://${http}/health/quick`, { signal: AbortSignal.timeout(1000) });
    await res.body?.cancel();
    return res.status;
  } catch {
    return 0;
  }
}

/** Polls every node's /health/quick until all answer 200, a node exits, or the deadline. */
async function waitHealthy(nodes: readonly Node[], waitMs: number): Promise<string | null> {
  const deadline = performance.now() + waitMs;
  const status = new Map<string, number>();
  while (true) {
    const gone = nodes.find((n) => !isRunning(n));
    if (gone !== undefined) {
      return `${gone.id} exited (${gone.exit?.code ?? gone.exit?.signal}) before the cluster was ready`;
    }
    await Promise.all(
      nodes.map(async (n) => status.set(n.id, await quickStatus(n.env["CAIRN_HTTP_ADDR"] ?? ""))),
    );
    if (nodes.every((n) => status.get(n.id) === 200)) return null;
    if (performance.now() >= deadline) {
      const waiting = nodes
        .filter((n) => status.get(n.id) !== 200)
        .map((n) => `${n.id} (${status.get(n.id) || "no answer"})`);
      return `not every node answered 200 on /health/quick within ${waitMs} ms: ${waiting.join(", ")}`;
    }
    await new Promise((r) => setTimeout(r, POLL_MS));
  }
}

/** SIGTERM to every running node; SIGKILL to those still running at the deadline. */
async function stopAll(nodes: readonly Node[], killNow: Promise<void>): Promise<void> {
  for (const n of nodes) if (isRunning(n)) n.proc?.kill("SIGTERM");
  const all = Promise.all(nodes.map((n) => n.exited));
  let timer: NodeJS.Timeout | undefined;
  const deadline = new Promise<void>((r) => (timer = setTimeout(r, STOP_DEADLINE_MS)));
  await Promise.race([all, deadline, killNow]);
  clearTimeout(timer);
  const stuck = nodes.filter(isRunning);
  if (stuck.length > 0) {
    out(`SIGKILL to ${stuck.map((n) => n.id).join(", ")} (still running)`);
    for (const n of stuck) n.proc?.kill("SIGKILL");
  }
  await all;
}

function printEndpoints(nodes: readonly Node[], opts: Options): void {
  // Relative to the working directory when inside it (.cluster/n1), else as is: an absolute
  // --base-dir outside it read ../../tmp/….
  const rel = (p: string): string => {
    const r = relative(process.cwd(), p) || ".";
    return r.startsWith("..") ? resolve(p) : r;
  };
  for (const n of nodes) {
    const log = opts.logs === "files" ? `  log ${rel(join(opts.baseDir, `${n.id}.log`))}` : "";
    out(
      `${n.id}  rpc ${n.env["CAIRN_RPC_ADDR"]}  http http://${n.env["CAIRN_HTTP_ADDR"]}  data ${rel(n.env["CAIRN_DATA_DIR"] ?? "")}${log}`,
    );
  }
}

/** The host of a host:port address. */
function hostOfAddress(address: string): string {
  return address.slice(0, address.lastIndexOf(":")).replace(/^\[(.*)\]$/, "$1");
}

/** A word for sh: as is when it is plainly safe, else single-quoted. */
function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replaceAll("'", `'\\''`)}'`;
}

/** The environment variables that set a configuration key (CAIRN_CLUSTER_DEAD_AFTER_MS, ...). */
const CONFIG_VARIABLES: ReadonlySet<string> = new Set(CONFIG_KEYS.map((k) => k.env));

/**
 * The command that starts `node` again by hand, exactly as the launcher started it: the same
 * id, addresses and data directory (it rejoins the cluster and catches up from the leaders),
 * and the configuration the launcher's environment gave every node (a shortened
 * `CAIRN_CLUSTER_DEAD_AFTER_MS`, say), which another terminal may not have. Only variables that
 * set a configuration key: not the CLI's `CAIRN_TOKEN`, a secret printed on the terminal.
 */
function restartCommand(node: Node): string {
  const inherited = Object.entries(process.env).filter(
    (e): e is [string, string] =>
      CONFIG_VARIABLES.has(e[0]) && e[1] !== undefined && !Object.hasOwn(node.env, e[0]),
  );
  const env = [...Object.entries(node.env), ...inherited].map(([k, v]) => `${k}=${shellWord(v)}`);
  const cairn = relative(process.cwd(), CAIRN) || CAIRN;
  return `env ${env.join(" ")} ${shellWord(cairn)} serve`;
}

function printTryThis(nodes: readonly Node[], p: Placement, ca: string | null): void {
  const endpoints = nodes.map((n) => n.env["CAIRN_ADVERTISE_RPC_ADDR"]).join(",");
  const cli = relative(process.cwd(), CAIRN) || CAIRN;
  // With TLS the CLI checks the nodes' certificates against the cluster's CA.
  const cairn = ca === null ? cli : `${cli} --cacert ${shellWord(relative(process.cwd(), ca))}`;
  out("try:");
  out(`  ${cairn} --endpoints ${endpoints} put greeting hello`);
  out(`  ${cairn} --endpoints ${endpoints} get greeting`);
  out(`  ${cairn} --endpoints ${p.rpcAdvertise(1)} cluster`);
  out(`  ${cairn} --http-endpoint ${p.httpAdvertise(nodes.length)} health`);
  out(`  curl -s http://${p.httpAdvertise(1)}/health`);
  out(`Ctrl-C stops every node (SIGTERM, then SIGKILL after ${STOP_DEADLINE_MS / 1000} s).`);
  out(
    "A node that dies is not restarted: the launcher prints the command that restarts it (same id, addresses, data and CAIRN_* settings), to run in another terminal.",
  );
}

async function main(argv: readonly string[]): Promise<number> {
  const opts = parseOptions(argv);
  if (opts === "help") {
    process.stdout.write(HELP);
    return 0;
  }
  const ids = Array.from({ length: opts.nodes }, (_, k) => `n${k + 1}`);
  refuseIfRunning(opts.baseDir, ids);
  if (opts.fresh) rmSync(opts.baseDir, { recursive: true, force: true });
  mkdirSync(opts.baseDir, { recursive: true });
  const mode = await choosePorts(opts);
  const placement = loopback({
    mode,
    rpcPort: opts.rpcPort,
    httpPort: opts.httpPort,
    baseDir: opts.baseDir,
  });
  const tls = opts.tls
    ? tlsSettings(opts, ids, (k) => hostOfAddress(placement.rpcAdvertise(k)))
    : null;
  const nodes: Node[] = ids.map((id, k) => ({
    id,
    env: { ...nodeEnvironment(placement, k + 1, opts.nodes), ...(tls?.env(k + 1) ?? {}) },
    pidFile: join(opts.baseDir, `${id}.pid`),
    proc: null,
    exit: null,
    exited: Promise.resolve(),
  }));

  // The first signal stops the nodes gracefully; a second one kills them at once.
  let signalled = false;
  let killNow = (): void => {};
  const killed = new Promise<void>((r) => (killNow = r));
  let onStop = (): void => {};
  const stopRequested = new Promise<void>((r) => (onStop = r));
  const onSignal = (signal: string): void => {
    if (signalled) {
      out(`${signal} again: SIGKILL to every node`);
      killNow();
      return;
    }
    signalled = true;
    out(`${signal}: stopping ${opts.nodes} node(s)`);
    onStop();
  };
  process.on("SIGINT", () => onSignal("SIGINT"));
  process.on("SIGTERM", () => onSignal("SIGTERM"));

  out(
    `starting ${opts.nodes} node(s), ${mode === "shared" ? "one loopback address each" : "distinct ports on 127.0.0.1"}, seeds ${nodes[0]?.env["CAIRN_SEED_NODES"]}${tls === null ? "" : `, TLS (CA ${relative(process.cwd(), tls.ca)})`}`,
  );
  printEndpoints(nodes, opts);
  const width = Math.max(...ids.map((id) => id.length));
  for (const n of nodes) startNode(n, opts, width);

  const started = performance.now();
  const failure = await Promise.race([
    waitHealthy(nodes, opts.waitMs),
    stopRequested.then(() => "stopped before the cluster was ready"),
  ]);
  if (failure === null) {
    out(
      `cluster ready: ${opts.nodes} node(s) answer 200 on /health/quick (${((performance.now() - started) / 1000).toFixed(1)} s)`,
    );
    printTryThis(nodes, placement, tls?.ca ?? null);
    for (const n of nodes) {
      void n.exited.then(() => {
        if (signalled) return;
        out(`${n.id} exited (${n.exit?.code ?? n.exit?.signal}) on its own`);
        // Run by hand, it rejoins with its data; Ctrl-C here does not stop it (its terminal does).
        out(`  restart it (its data is kept; stop it from its own terminal): ${restartCommand(n)}`);
      });
    }
    // Every node gone on its own leaves nothing to wait for (the launcher used to end there, at
    // once, with exit code 0 and no word): it says so and ends as a stop would.
    await Promise.race([stopRequested, Promise.all(nodes.map((n) => n.exited))]);
    if (!signalled) {
      const code = nodes.every((n) => n.exit?.code === 0) ? 0 : 1;
      out(`every node has exited: the launcher stops (exit code ${code})`);
    }
  } else {
    out(`cluster start failed: ${failure}`);
  }
  await stopAll(nodes, killed);
  for (const n of nodes) {
    out(
      `${n.id} exited with ${n.exit?.code !== null ? `code ${n.exit?.code}` : `signal ${n.exit.signal}`}`,
    );
  }
  const clean = failure === null && nodes.every((n) => n.exit?.code === 0);
  return clean ? 0 : 1;
}

main(process.argv.slice(2)).then(
  (code) => {
    process.exit(code);
  },
  (err: unknown) => {
    if (
      err instanceof UsageError ||
      (err as { code?: string }).code?.startsWith("ERR_PARSE_ARGS")
    ) {
      process.stderr.write(`cluster: ${(err as Error).message}\nRun with --help for usage.\n`);
      process.exit(2);
    }
    process.stderr.write(
      `cluster: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`,
    );
    process.exit(1);
  },
);
