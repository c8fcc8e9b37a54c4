/**
 * Starts the real `cairn serve` process (bin/cairn) for end-to-end tests, on a claimed RPC port
 * (ports.ts) and an HTTP port the OS picks,
 * and waits for its "node started" log line — no sleeps. Every stdout line is kept (JSON logs).
 */
import { type ChildProcess, spawn } from "node:child_process";
import { join } from "node:path";
import { createInterface } from "node:readline";
import { freePort } from "./ports.ts";

export const ROOT = join(import.meta.dirname, "..", "..");
export const CAIRN = join(ROOT, "bin", "cairn");

export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

export interface ServerProcess {
  readonly proc: ChildProcess;
  readonly rpc: string;
  readonly http: string;
  /** Every stdout line so far. */
  readonly lines: string[];
  readonly stderr: () => string;
  readonly exited: Promise<Exit>;
  /** Sends `signal` and waits for the exit. */
  stop(signal?: NodeJS.Signals): Promise<Exit>;
}

export interface StartOptions {
  readonly dataDir: string;
  readonly args?: readonly string[];
  readonly env?: Readonly<Record<string, string>>;
  readonly timeoutMs?: number;
  /** Resolve once the HTTP server listens instead of once the node has started. */
  readonly untilHttp?: boolean;
  /** Start it with this open-file limit (soft and hard: `ulimit -n`), lower than the test's. */
  readonly openFileLimit?: number;
  /** Start it in the network namespace of this process (netns.ts). */
  readonly netnsPid?: number;
}

/**
 * The environment without any CAIRN_* variable of the developer's shell. A first seed founds a
 * cluster on itself alone at once (CAIRN_TESTING_FOUNDING_LISTEN_MS 0, not after listening
 * 35 s: src/node/cluster.ts), unless `extra` says otherwise.
 */
export function cleanEnv(extra: Readonly<Record<string, string>> = {}): NodeJS.ProcessEnv {
  const env: NodeJS.ProcessEnv = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith("CAIRN_")) env[k] = v;
  return { ...env, CAIRN_TESTING_FOUNDING_LISTEN_MS: "0", ...extra };
}

/**
 * Runs `cairn args`, with `openFileLimit` as its `ulimit -n` and in the network namespace of the
 * process `netnsPid` (netns.ts) when given.
 */
export function spawnCairn(
  args: readonly string[],
  env: NodeJS.ProcessEnv = cleanEnv(),
  openFileLimit?: number,
  netnsPid?: number,
): ChildProcess {
  const stdio: ["ignore", "pipe", "pipe"] = ["ignore", "pipe", "pipe"];
  // The shell lowers the limit and becomes the server (exec): the child's pid is the server's.
  const argv =
    openFileLimit === undefined
      ? [CAIRN, ...args]
      : [
          "/bin/sh",
          "-c",
          `ulimit -n ${Math.trunc(openFileLimit)} && exec "$0" "$@"`,
          CAIRN,
          ...args,
        ];
  // nsenter becomes the command (it execs it), so the pid stays the server's too.
  const [cmd, ...rest] = (
    netnsPid === undefined ? argv : ["nsenter", `--net=/proc/${netnsPid}/ns/net`, "--", ...argv]
  ) as [string, ...string[]];
  return spawn(cmd, rest, { cwd: ROOT, env, stdio });
}

/**
 * Runs `cairn args` (a clean environment; in the network namespace of the process `netnsPid`
 * when given) to its end: its exit code, stdout and stderr.
 */
export function runCairn(
  args: readonly string[],
  netnsPid?: number,
): Promise<{ code: number | null; out: string; err: string }> {
  const proc = spawnCairn(args, cleanEnv(), undefined, netnsPid);
  let out = "";
  let err = "";
  proc.stdout?.on("data", (d: Buffer) => (out += d.toString()));
  proc.stderr?.on("data", (d: Buffer) => (err += d.toString()));
  return new Promise((resolve) => proc.once("exit", (code) => resolve({ code, out, err })));
}

/**
 * How long a start may take unless the caller says: 30 s, or `TEST_START_TIMEOUT_MS` from the
 * test's environment (a machine shared with heavy work: at a load average of 20–35 on two
 * cores, starts took over 30 s).
 */
const DEFAULT_START_TIMEOUT_MS = Number(process.env["TEST_START_TIMEOUT_MS"] ?? "") || 30_000;

/**
 * Starts `cairn serve` on `opts.dataDir`: its RPC port picked by freePort (free for TCP and for
 * SWIM's UDP socket of the same number, below the ephemeral range, claimed across the test
 * files run at once), unless `opts.args` names `--rpc-addr`; HTTP on port 0.
 */
export async function startServer(opts: StartOptions): Promise<ServerProcess> {
  const rpcAddr =
    opts.args?.includes("--rpc-addr") === true ? "127.0.0.1:0" : `127.0.0.1:${await freePort()}`;
  return startOn(opts, rpcAddr);
}

function startOn(opts: StartOptions, rpcAddr: string): Promise<ServerProcess> {
  const args = [
    "serve",
    "--data-dir",
    opts.dataDir,
    "--rpc-addr",
    rpcAddr,
    "--http-addr",
    "127.0.0.1:0",
    "--node-id",
    "n1",
    ...(opts.args ?? []),
  ];
  const proc = spawnCairn(args, cleanEnv(opts.env), opts.openFileLimit, opts.netnsPid);
  const lines: string[] = [];
  let stderr = "";
  proc.stderr?.on("data", (d: Buffer) => {
    stderr += d.toString();
  });
  const exited = new Promise<Exit>((resolve) =>
    proc.once("exit", (code, signal) => resolve({ code, signal })),
  );
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(
        new Error(
          `server did not start within ${opts.timeoutMs ?? DEFAULT_START_TIMEOUT_MS} ms; stderr: ${stderr}`,
        ),
      );
    }, opts.timeoutMs ?? DEFAULT_START_TIMEOUT_MS);
    let http = "";
    const rl = createInterface({ input: proc.stdout as NodeJS.ReadableStream });
    rl.on("line", (line) => {
      lines.push(line);
      let rec: { message?: string; fields?: Record<string, unknown> };
      try {
        rec = JSON.parse(line) as typeof rec;
      } catch {
        return;
      }
      if (rec.message === "http server listening") {
        http = String(rec.fields?.["http_addr"]);
        if (opts.untilHttp === true) done(String(rec.fields?.["http_addr"]), "");
      }
      if (rec.message === "node started")
        done(String(rec.fields?.["http_addr"]), String(rec.fields?.["rpc_addr"]));
    });
    let settled = false;
    const done = (httpAddr: string, rpcAddr: string): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      resolve({
        proc,
        rpc: rpcAddr,
        http: httpAddr || http,
        lines,
        stderr: () => stderr,
        exited,
        stop: (signal: NodeJS.Signals = "SIGTERM") => {
          if (proc.exitCode === null && proc.signalCode === null) proc.kill(signal);
          return exited;
        },
      });
    };
    void exited.then((e) => {
      if (settled) return;
      clearTimeout(timer);
      reject(new Error(`server exited (${e.code ?? e.signal}) before starting; stderr: ${stderr}`));
    });
  });
}

/**
 * One series of a node's GET /metrics (a name, or a name with its labels as exported:
 * `kv_requests_total{operation="put",status="error"}`); NaN when it is not exported.
 */
export async function metricValue(server: ServerProcess, series: string): Promise<number> {
  const text = await (await fetch(`http://${server.http}/metrics`)).text();
  const line = text.split("\n").find((l) => l.startsWith(`${series} `));
  return line === undefined ? Number.NaN : Number(line.slice(series.length + 1));
}
