/**
 * What every client command of `cairn` shares: global flags, endpoints, output mode, exit codes,
 * and the one mapping of client errors to exit codes.
 */
import { status } from "@grpc/grpc-js";
import { once } from "node:events";
import { readFileSync } from "node:fs";
import { parseArgs, type ParseArgsConfig } from "node:util";
import type { Io } from "./io.ts";
import {
  CairnClient,
  type TlsOptions,
  IndeterminateWriteError,
  InvalidRequestError,
  ServerError,
  UnavailableError,
  DeadlineExceededError,
  VersionConflictError,
} from "../client/index.ts";
import { isLoopbackTarget } from "../client/client.ts";
import { parseHostPort } from "../config/address.ts";
import { EXIT } from "./exit-codes.ts";

export { EXIT };

export const DEFAULT_ENDPOINT = "127.0.0.1:7447";
export const DEFAULT_HTTP_ENDPOINT = "127.0.0.1:8080";

export const GLOBAL_HELP = `Global options:
  --endpoints LIST       comma-separated gRPC HOST:PORT (env CAIRN_ENDPOINTS, default ${DEFAULT_ENDPOINT})
  --output FORMAT        text (default) or json; alias -w/--write-out (env CAIRN_OUTPUT)
  --timeout MS           deadline of the command, retries included (default 5000; scan,
                         backup, restore: of each page read or key written; node
                         decommission --wait: of each call, the wait itself unbounded;
                         cluster --watch: of the first view)
  --cacert FILE          TLS: the CA certificate (PEM) that signed the nodes' (env CAIRN_CACERT);
                         without it, cleartext
  --cert FILE, --key FILE
                         mutual TLS: this client's certificate and key (PEM; env CAIRN_CERT,
                         CAIRN_KEY), for a node with tls.client_ca_file
  --token TOKEN          a bearer token of the node's auth.tokens_file, sent as
                         authorization: Bearer on every call, over TLS or else to loopback
                         endpoints only (env CAIRN_TOKEN; prefer the variable: a flag shows
                         in the process list)
  -h, --help             show this help

Exit codes: 0 ok, 1 not found, 2 usage, 3 unavailable, 4 compare-and-set conflict,
5 other server error, 6 write outcome unknown (timed out after being sent).`;

/** The flags of a command, as node:util's parseArgs takes them. */
export type CommandOptions = NonNullable<ParseArgsConfig["options"]>;

export const GLOBAL_OPTIONS = {
  endpoints: { type: "string" },
  output: { type: "string", short: "w" },
  "write-out": { type: "string" },
  timeout: { type: "string" },
  cacert: { type: "string" },
  cert: { type: "string" },
  key: { type: "string" },
  token: { type: "string" },
  help: { type: "boolean", short: "h" },
} as const satisfies CommandOptions;

export class UsageError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "UsageError";
  }
}

/** Input that is not what the command needs (a file that is not a backup): exit 2, no usage hint. */
export class InputError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "InputError";
  }
}

export type OutputMode = "text" | "json";

export interface Globals {
  readonly endpoints: string[];
  readonly output: OutputMode;
  readonly timeoutMs: number;
  /** TLS to the nodes (--cacert, --cert, --key); absent: cleartext. */
  readonly tls?: TlsOptions;
  /** --token / CAIRN_TOKEN: a bearer token for every call. */
  readonly token?: string;
}

type Values = Record<string, string | boolean | (string | boolean)[] | undefined>;

/** Parses `argv` with the global options plus `options`; throws UsageError on bad input. */
export function parse(
  argv: readonly string[],
  options: NonNullable<ParseArgsConfig["options"]>,
): { values: Values; positionals: string[] } {
  try {
    const { values, positionals } = parseArgs({
      args: [...argv],
      options: { ...GLOBAL_OPTIONS, ...options },
      strict: true,
      allowPositionals: true,
      allowNegative: false,
    });
    return { values: values as Values, positionals };
  } catch (err) {
    throw new UsageError((err as Error).message);
  }
}

export function str(values: Values, name: string): string | undefined {
  const v = values[name];
  return typeof v === "string" ? v : undefined;
}

/** The longest --timeout: what a Node.js timer can wait. */
const MAX_TIMEOUT_MS = 0x7fffffff;

/** Environment variable `name`, unset when empty (as the server's CAIRN_* variables are). */
export function envVar(env: NodeJS.ProcessEnv, name: string): string | undefined {
  const v = env[name];
  return v === "" ? undefined : v;
}

/**
 * Where a setting's value came from, as its error names it: `--flag` when given, else the
 * environment variable. A bad CAIRN_ENDPOINTS set in a profile was reported as "--endpoints",
 * a flag the command line did not have.
 */
export function sourceOf(
  values: Readonly<Record<string, unknown>>,
  flags: readonly string[],
  name: string,
): string {
  const given = flags.find((f) => typeof values[f] === "string");
  return given === undefined ? name : `--${given}`;
}

/**
 * What a command reaches: the nodes' gRPC service (`--endpoints`, TLS, a token), or a node's
 * HTTP server (`health`, `metrics`: `--http-endpoint`), which has neither TLS nor tokens.
 */
export type Reach = "grpc" | "http";

/**
 * The global flags (and their CAIRN_* variables) a command reaching `reach` uses, read and
 * checked. An HTTP command reads only --output and --timeout: the gRPC commands' settings in a
 * profile (a token beside off-host endpoints, a CA file not there) failed it, a usage error
 * about a connection it never makes; its `endpoints` are then empty.
 */
export function globals(values: Values, env: NodeJS.ProcessEnv, reach: Reach = "grpc"): Globals {
  const endpoints = reach === "grpc" ? endpointsOf(values, env) : [];
  const output =
    str(values, "output") ?? str(values, "write-out") ?? envVar(env, "CAIRN_OUTPUT") ?? "text";
  if (output !== "text" && output !== "json")
    throw new UsageError(
      `${sourceOf(values, ["output", "write-out"], "CAIRN_OUTPUT")} must be text or json, not ${JSON.stringify(output)}`,
    );
  const timeout = str(values, "timeout") ?? "5000";
  const timeoutMs = wholeNumber(timeout);
  // At most what a timer can wait (2^31-1 ms, 24.8 days): past it Node.js fires at once, and
  // health, metrics and cluster failed as they started (grpc-js threw on larger ones).
  if (timeoutMs === null || timeoutMs <= 0 || timeoutMs > MAX_TIMEOUT_MS)
    throw new UsageError(
      `--timeout must be a whole number of milliseconds from 1 to ${MAX_TIMEOUT_MS} (24.8 days), not ${JSON.stringify(timeout)}`,
    );
  if (reach === "http") return { endpoints, output, timeoutMs };
  const tls = tlsOf(values, env);
  const token = str(values, "token") ?? envVar(env, "CAIRN_TOKEN");
  if (token !== undefined && !/^[\x21-\x7e]+$/.test(token))
    throw new UsageError("--token (or CAIRN_TOKEN) must be visible ASCII characters, no spaces");
  // The nodes take a token in cleartext only on loopback; it is not sent anywhere else unsealed.
  const offHost = endpoints.find((e) => !isLoopbackTarget(e));
  if (token !== undefined && tls === undefined && offHost !== undefined)
    throw new UsageError(
      `--token (or CAIRN_TOKEN) would cross the network in cleartext to ${offHost}: give --cacert (TLS), or use loopback endpoints`,
    );
  return {
    endpoints,
    output,
    timeoutMs,
    ...(tls === undefined ? {} : { tls }),
    ...(token === undefined ? {} : { token }),
  };
}

/** --endpoints (or CAIRN_ENDPOINTS, or the default), each checked. */
function endpointsOf(values: Values, env: NodeJS.ProcessEnv): string[] {
  const list = str(values, "endpoints") ?? envVar(env, "CAIRN_ENDPOINTS") ?? DEFAULT_ENDPOINT;
  const endpointsFrom = sourceOf(values, ["endpoints"], "CAIRN_ENDPOINTS");
  const endpoints = list
    .split(",")
    .map((e) => e.trim())
    .filter((e) => e !== "");
  if (endpoints.length === 0) throw new UsageError(`${endpointsFrom} is empty`);
  for (const e of endpoints) checkHostPort(e, endpointsFrom);
  return endpoints;
}

/** --cacert, --cert and --key (or CAIRN_CACERT, CAIRN_CERT, CAIRN_KEY), read. */
function tlsOf(values: Values, env: NodeJS.ProcessEnv): TlsOptions | undefined {
  const file = (flag: string, name: string): Buffer | undefined => {
    const path = str(values, flag) ?? envVar(env, name);
    if (path === undefined) return undefined;
    try {
      return readFileSync(path);
    } catch (err) {
      const code = (err as NodeJS.ErrnoException).code ?? String(err);
      throw new UsageError(`${sourceOf(values, [flag], name)} ${path} cannot be read: ${code}`);
    }
  };
  const ca = file("cacert", "CAIRN_CACERT");
  const cert = file("cert", "CAIRN_CERT");
  const key = file("key", "CAIRN_KEY");
  if ((cert === undefined) !== (key === undefined))
    throw new UsageError("--cert and --key go together (mutual TLS)");
  if (ca === undefined && cert === undefined) return undefined;
  // grpc-js names the server by the endpoint's host, an IP address too, and Node warns about
  // that once (DEP0123): noise on a command's stderr, where the certificate's IP SAN is checked.
  quietIpServername();
  return {
    ...(ca === undefined ? {} : { ca }),
    ...(cert === undefined ? {} : { cert }),
    ...(key === undefined ? {} : { key }),
  };
}

function quietIpServername(): void {
  const printers = process.listeners("warning");
  process.removeAllListeners("warning");
  process.on("warning", (w: Error & { code?: string }) => {
    if (w.code === "DEP0123") return;
    for (const p of printers) p(w);
  });
}

/** A node's address to connect to, as the configuration's addresses are read (no port 0). */
export function checkHostPort(e: string, flag: string): void {
  const r = parseHostPort(e, { allowPortZero: false });
  if (!r.ok) throw new UsageError(`${flag}: ${JSON.stringify(e)} is not ${r.reason}`);
}

export function clientFor(g: Globals, routing = true): CairnClient {
  return new CairnClient({
    endpoints: g.endpoints,
    timeoutMs: g.timeoutMs,
    routing,
    ...(g.tls === undefined ? {} : { tls: g.tls }),
    ...(g.token === undefined ? {} : { token: g.token }),
  });
}

/**
 * The integer flag `--name`: `fallback` when absent, else a whole number from `min` up to `max`
 * (when given), or a UsageError naming the flag and its bounds.
 */
export function intFlag(
  values: Values,
  name: string,
  fallback: number,
  min: number,
  max?: number,
): number {
  const text = str(values, name);
  if (text === undefined) return fallback;
  const n = wholeNumber(text);
  if (n === null || n < min || (max !== undefined && n > max))
    throw new UsageError(
      `--${name} must be an integer ${max === undefined ? `≥ ${min}` : `from ${min} to ${max}`}, not ${JSON.stringify(text)}`,
    );
  return n;
}

/**
 * A flag's text as a whole number written in decimal digits, or null. Not Number(text) alone,
 * which reads "" and " " as 0 (`--limit "$N"` with N unset listed every key, as no limit) and
 * takes hexadecimal, exponents and surrounding spaces.
 */
function wholeNumber(text: string): number | null {
  if (!/^[0-9]+$/.test(text)) return null;
  const n = Number(text);
  return Number.isSafeInteger(n) ? n : null;
}

/** The flags of a command that reads a range of keys (scan, backup). */
export const RANGE_OPTIONS = {
  prefix: { type: "string" },
  from: { type: "string" },
  to: { type: "string" },
} as const satisfies NonNullable<ParseArgsConfig["options"]>;

/** The range RANGE_OPTIONS give: a prefix, or start and end (either may be absent). */
export function rangeOf(
  values: Values,
): { readonly prefix: string } | { readonly start?: string; readonly end?: string } {
  const prefix = str(values, "prefix");
  const from = str(values, "from");
  const to = str(values, "to");
  if (prefix !== undefined && (from !== undefined || to !== undefined))
    throw new UsageError("--prefix cannot be combined with --from/--to");
  if (prefix !== undefined) return { prefix };
  return {
    ...(from === undefined ? {} : { start: from }),
    ...(to === undefined ? {} : { end: to }),
  };
}

/** "INDEX/TERM" → version. */
export function parseVersionFlag(
  text: string | undefined,
): { index: number; term: number } | undefined {
  if (text === undefined) return undefined;
  const m = /^(\d+)\/(\d+)$/.exec(text);
  if (m === null)
    throw new UsageError(`--expected-version must be INDEX/TERM, not ${JSON.stringify(text)}`);
  return { index: Number(m[1]), term: Number(m[2]) };
}

export function b64(bytes: Uint8Array): string {
  return Buffer.from(bytes).toString("base64");
}

/**
 * Shards a scan left out, for a human (scan, backup, restore): "shard 7" or "3 shards (5, 17,
 * 900)"; the first 20 ids of a longer list, and how many more.
 */
export function describeSkipped(ids: readonly number[]): string {
  if (ids.length === 1) return `shard ${ids[0]}`;
  const shown = ids.slice(0, 20).join(", ");
  return `${ids.length} shards (${shown}${ids.length > 20 ? `, and ${ids.length - 20} more` : ""})`;
}

/** Bytes for a human: the UTF-8 text when it is printable, else a JSON-quoted escape. */
export function printable(bytes: Uint8Array): string {
  let text: string;
  try {
    // ignoreBOM: a leading U+FEFF is part of the key or value, not to be dropped.
    text = new TextDecoder("utf-8", { fatal: true, ignoreBOM: true }).decode(bytes);
  } catch {
    return `base64:${b64(bytes)}`;
  }
  // eslint-disable-next-line no-control-regex
  return /[\u0000-\u001f\u007f]/.test(text) ? JSON.stringify(text) : text;
}

/** Writes `text` to stdout, and waits for it to drain when its buffer is full (a long output). */
export async function writeOut(io: Io, text: string): Promise<void> {
  if (text === "" || io.stdout.write(text)) return;
  await once(io.stdout, "drain");
}

export function writeJson(io: Io, value: unknown): void {
  io.stdout.write(`${JSON.stringify(value)}\n`);
}

/**
 * gRPC refuses a message over its size limit while receiving it (the server: "Received message
 * larger than max"), or before sending it (the client: "Sent message larger than max"): no
 * handler ran, so nothing was written, whatever the client library could prove.
 */
function isRefusedAsTooLarge(cause: unknown): boolean {
  const e = cause as { code?: unknown; details?: unknown } | null | undefined;
  return (
    e?.code === status.RESOURCE_EXHAUSTED &&
    typeof e.details === "string" &&
    /message larger than max/.test(e.details)
  );
}

function causeDetails(cause: unknown): string {
  return String((cause as { details?: unknown }).details);
}

/**
 * What an outcome unknown (exit 6) means for each command, and how to find it out. The admin
 * commands name no key: they were told to read one (a transfer-leader that timed out, its
 * preference perhaps recorded).
 */
const UNKNOWN_OUTCOME: Readonly<Record<string, string>> = {
  put: "the write may or may not have been applied; read the key to find out",
  delete: "the write may or may not have been applied; read the key to find out",
  "transfer-leader":
    "the transfer may or may not have been made; cairn cluster shows the shard's leader",
  node: "the change may or may not have been made; cairn node status NODE shows the member's standing",
  snapshot: "the snapshot may or may not have been taken; taking it again is harmless",
};

/** The exit code for an error of a client command, after telling the user on stderr. */
export function reportError(io: Io, command: string, err: unknown): number {
  const say = (m: string): void => {
    io.stderr.write(`cairn ${command}: ${m}\n`);
  };
  if (err instanceof UsageError) {
    say(`${err.message}\nRun 'cairn ${command} --help' for usage.`);
    return EXIT.usage;
  }
  if (err instanceof InputError) {
    say(err.message);
    return EXIT.usage;
  }
  if (err instanceof VersionConflictError) {
    const cur = err.current === null ? "absent" : `${err.current.index}/${err.current.term}`;
    say(`compare-and-set conflict: current version ${cur}`);
    return EXIT.conflict;
  }
  if (err instanceof UnavailableError || err instanceof DeadlineExceededError) {
    say(`unavailable: ${err.message}`);
    return EXIT.unavailable;
  }
  if (err instanceof IndeterminateWriteError && isRefusedAsTooLarge(err.cause)) {
    say(
      `invalid request: ${causeDetails(err.cause)}: the request is larger than the server accepts (limits.max_value_bytes, limits.max_key_bytes); it was refused before anything was written`,
    );
    return EXIT.usage;
  }
  if (err instanceof IndeterminateWriteError) {
    say(`${err.message} — ${UNKNOWN_OUTCOME[command] ?? UNKNOWN_OUTCOME["put"]}`);
    return EXIT.indeterminate;
  }
  if (err instanceof InvalidRequestError) {
    say(`invalid request: ${err.message}`);
    return EXIT.usage;
  }
  if (
    err instanceof ServerError &&
    (err.code === "CAIRN_ERR_PRECONDITION" || err.code === "CAIRN_ERR_INVALID_RAFT_REQUEST")
  ) {
    // A request the cluster's state does not allow now (a decommission that would leave fewer
    // active members than the replication factor, a member call on a single node), or a Raft
    // request that can never succeed as asked (a transfer to a replica the group no longer has
    // as a voter): refused, as an invalid one is, with what to do. Not a server fault (5),
    // which a script retries.
    say(`refused: ${err.message}`);
    return EXIT.usage;
  }
  if (err instanceof ServerError && err.code === "CAIRN_ERR_SHARD_NOT_ACTIVE") {
    say(`not found: ${err.message}`);
    return EXIT.notFound;
  }
  say(err instanceof Error ? err.message : String(err));
  return EXIT.failed;
}

export interface CommandContext {
  readonly values: Values;
  readonly positionals: string[];
  readonly globals: Globals;
  readonly io: Io;
  /**
   * A client on the command's endpoints, closed when the command ends. `routing: false` for
   * commands that do not address keys (no WatchCluster stream of its own).
   */
  client(options?: { routing?: boolean }): CairnClient;
}

/**
 * Runs one client command: parses flags, answers --help, gives the body a lazily made client,
 * maps any error to an exit code and always closes the client.
 */
export async function runCommand(
  name: string,
  help: string,
  options: NonNullable<ParseArgsConfig["options"]>,
  argv: readonly string[],
  io: Io,
  body: (ctx: CommandContext) => Promise<number>,
  reach: Reach = "grpc",
): Promise<number> {
  let client: CairnClient | undefined;
  try {
    const { values, positionals } = parse(argv, options);
    if (values["help"] === true) {
      io.stdout.write(help);
      return EXIT.ok;
    }
    const g = globals(values, io.env, reach);
    return await body({
      values,
      positionals,
      globals: g,
      io,
      client: (options) => (client ??= clientFor(g, options?.routing ?? true)),
    });
  } catch (err) {
    return reportError(io, name, err);
  } finally {
    client?.close();
  }
}

export function expectPositionals(
  positionals: readonly string[],
  names: readonly string[],
  optional = 0,
): void {
  const min = names.length - optional;
  if (positionals.length < min)
    throw new UsageError(`missing ${names.slice(positionals.length).join(" ")}`);
  if (positionals.length > names.length)
    throw new UsageError(`unexpected argument ${JSON.stringify(positionals[names.length])}`);
}
