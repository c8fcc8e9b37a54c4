/**
 * Loading the configuration: defaults < YAML file (`--config`) < environment (`CAIRN_*`) <
 * command-line flags. Every value is checked against its key's schema in the layer it came from,
 * one a later layer overrides too, so an error names the key and the source that set it:
 *
 *   config error: cluster.total_shards (from cairn.yaml): must be an integer between 1 and 65536, got "abc"
 *
 * Unknown keys in the file are errors. Unknown `CAIRN_*` environment variables are ignored (tests
 * and scripts use their own), and an empty environment variable counts as unset, except
 * `CAIRN_SEED_NODES` where empty means "no seeds" (single-node mode), as the contract says.
 */
import { CairnError, isObject } from "../common/index.ts";
import { FileTooLargeError, readFileBounded } from "../common/bounded-read.ts";
import { GossipKeyFileError, readGossipKeyFile } from "../common/gossip-keys.ts";
import { readTlsFiles, TlsFileError } from "../common/tls-files.ts";
import { readTokensFile, TokensFileError } from "../common/auth-tokens.ts";
import { isLoopbackHost, isUnspecifiedHost, parseHostPort, sameHost } from "./address.ts";
import {
  CONFIG_FLAG_OPTIONS,
  KEYS,
  KEY_BY_NAME,
  type KeySpec,
  type LogLevelName,
} from "./schema.ts";
import { loadYaml } from "../common/yaml.ts";

export interface CairnConfig {
  readonly node_id: string;
  readonly rpc_addr: string;
  readonly http_addr: string;
  /** Never the unspecified address; defaults to rpc_addr. Port 0 stays 0: see docs/operations.md. */
  readonly advertise_rpc_addr: string;
  readonly advertise_http_addr: string;
  readonly data_dir: string;
  readonly cluster: {
    readonly seed_nodes: readonly string[];
    readonly total_shards: number;
    readonly replication_factor: number;
    readonly bootstrap_expect: number;
    readonly dead_after_ms: number;
    readonly disk_full_percent: number;
    readonly max_joining: number;
    readonly gossip_key_file: string | undefined;
    readonly gossip_plaintext: "refuse" | "accept" | "send";
    readonly rebalance: {
      readonly max_moves: number;
      readonly moves_per_minute: number;
      readonly tolerance: number;
      readonly rate_bytes_per_sec: number;
    };
  };
  readonly telemetry: { readonly prometheus: { readonly enabled: boolean } };
  readonly log: { readonly level: LogLevelName };
  readonly limits: {
    readonly max_key_bytes: number;
    readonly max_value_bytes: number;
    readonly max_message_bytes: number;
    readonly max_pending_bytes: number;
  };
  readonly rpc: {
    readonly io_threads: number;
    readonly max_connections: number;
    readonly max_connections_per_ip: number;
    readonly max_client_streams: number;
    readonly max_incoming_request_bytes: number;
    readonly max_concurrent_streams: number;
    readonly max_continuation_frames: number;
    readonly max_resets_per_second: number;
    readonly max_connection_output_bytes: number;
    readonly write_stall_timeout_ms: number;
    readonly handshake_timeout_ms: number;
    readonly idle_timeout_ms: number;
    readonly request_receive_timeout_ms: number;
    readonly goaway_grace_ms: number;
    readonly max_decompressions_per_connection: number;
  };
  readonly tls: {
    readonly cert_file: string | undefined;
    readonly key_file: string | undefined;
    readonly client_ca_file: string | undefined;
    readonly peer_ca_file: string | undefined;
  };
  readonly auth: { readonly tokens_file: string | undefined };
  readonly shard_workers: number;
  readonly raft: {
    readonly tick_ms: number;
    readonly election_ticks: number;
    readonly heartbeat_ticks: number;
    readonly snapshot_rate_bytes_per_sec: number;
    readonly quiesce: boolean;
  };
  readonly storage: {
    readonly memtable_bytes: number;
    readonly block_cache_bytes: number;
    readonly memtable_budget_bytes: number;
    readonly wal_cache_bytes: number;
    readonly min_free_bytes: number;
  };
  readonly shutdown: { readonly drain_timeout_ms: number };
  readonly recovery: { readonly unsafe_accept_lost_wal: boolean };
}

/** Flag values as node:util parseArgs returns them for CONFIG_FLAG_OPTIONS (`{"node-id": "n1"}`). */
export type ConfigFlags = Readonly<Record<string, string | undefined>>;

export interface LoadConfigOptions {
  readonly flags?: ConfigFlags;
  /** Usually `process.env`. */
  readonly env?: Readonly<Record<string, string | undefined>>;
  /** A YAML file to read, as `--config` would; `flags.config` and then `CAIRN_CONFIG` are used when absent. */
  readonly configPath?: string;
}

export interface ConfigIssue {
  /** Dotted key (`cluster.total_shards`), or the flag for an unknown flag. */
  readonly key: string;
  /** `cairn.yaml`, `env CAIRN_RPC_ADDR`, `flag --rpc-addr`, or `default`. */
  readonly source: string;
  /** The whole line, starting with `config error: `. */
  readonly message: string;
}

/** Bad configuration: the CLI prints `message` and exits with code 2. */
export class ConfigError extends CairnError {
  readonly issues: readonly ConfigIssue[];

  constructor(issues: readonly ConfigIssue[], options: { cause?: unknown } = {}) {
    super("CAIRN_ERR_CONFIG", issues.map((i) => i.message).join("\n"), options);
    this.name = "ConfigError";
    this.issues = issues;
  }
}

interface Setting {
  readonly value: unknown;
  /** Where the value came from, for people: a file's path, `env CAIRN_…`, `flag --…`, `default`. */
  readonly source: string;
  /**
   * Where the value came from, for the checks: a file's path may be any text, `default` too
   * (`--config default`), and its keys were then each refused as set twice in the file.
   */
  readonly origin: "default" | "file" | "env" | "flag";
}

const SECTIONS: ReadonlySet<string> = new Set(
  KEYS.flatMap((k) => {
    const parts = k.key.split(".");
    return parts.slice(0, -1).map((_, i) => parts.slice(0, i + 1).join("."));
  }),
);

function show(value: unknown): string {
  if (value === undefined) return "nothing";
  // JSON has no Infinity or NaN (YAML's .inf, .nan): it would show them as null.
  if (typeof value === "number" && !Number.isFinite(value)) return String(value);
  let s: string;
  try {
    s = JSON.stringify(value) ?? String(value);
  } catch {
    s = String(value);
  }
  return s.length > 120 ? `${s.slice(0, 117)}...` : s;
}

function issue(key: string, source: string, text: string): ConfigIssue {
  return { key, source, message: `config error: ${key} (from ${source}): ${text}` };
}

/** Loads, validates and freezes the configuration; throws ConfigError listing every problem. */
export function loadConfig(options: LoadConfigOptions = {}): CairnConfig {
  const env = options.env ?? {};
  const flags = options.flags ?? {};
  const issues: ConfigIssue[] = [];
  const settings = new Map<string, Setting>();

  for (const spec of KEYS) {
    if (spec.default !== undefined)
      settings.set(spec.key, { value: spec.default, source: "default", origin: "default" });
  }

  const fromEnv = nonEmpty(env["CAIRN_CONFIG"]);
  const path = flags["config"] ?? options.configPath ?? fromEnv;
  if (path === "") {
    issues.push({
      key: "config",
      source: "--config",
      message: "config error: --config is empty: give the path of a configuration file",
    });
  } else if (path !== undefined) {
    // Where the path came from, when not a flag: a stale variable is easy to miss.
    const named =
      flags["config"] === undefined && options.configPath === undefined
        ? " (from CAIRN_CONFIG)"
        : "";
    readFile(path, named, settings, issues);
  }

  // The values a later source replaced: checked too (design.md §2: bad values are refused at
  // start), or a file's bad value was taken without a word while a variable hid it.
  const overridden: { key: string; setting: Setting; by: string }[] = [];
  const override = (key: string, setting: Setting): void => {
    const before = settings.get(key);
    if (before !== undefined && before.origin !== "default") {
      overridden.push({ key, setting: before, by: setting.source });
    }
    settings.set(key, setting);
  };

  for (const spec of KEYS) {
    const raw = env[spec.env];
    if (raw === undefined || (raw === "" && spec.kind !== "list")) continue;
    override(spec.key, { value: coerce(spec, raw), source: `env ${spec.env}`, origin: "env" });
  }

  for (const [name, raw] of Object.entries(flags)) {
    if (name === "config" || raw === undefined) continue;
    const spec = KEYS.find((k) => k.flag === name);
    if (spec === undefined) {
      issues.push({
        key: `--${name}`,
        source: `flag --${name}`,
        message: `config error: unknown flag --${name}; known: ${Object.keys(CONFIG_FLAG_OPTIONS)
          .map((f) => `--${f}`)
          .join(" ")}`,
      });
      continue;
    }
    override(spec.key, { value: coerce(spec, raw), source: `flag --${name}`, origin: "flag" });
  }

  const values = new Map<string, unknown>();
  const winners = [...settings].map(([key, setting]) => ({ key, setting, by: null }));
  for (const { key, setting, by } of [...winners, ...overridden]) {
    const spec = KEY_BY_NAME.get(key);
    if (spec === undefined) continue;
    const parsed = spec.schema.safeParse(setting.value);
    if (parsed.success) {
      if (by === null) values.set(key, parsed.data);
    } else {
      const custom = parsed.error.issues.find(
        (i) => i.code === "custom" && i.params?.["useExpect"] !== true,
      );
      // A size that does not parse: say how one is written (binary units only).
      const unparsed = parsed.error.issues.some(
        (i) => i.code === "custom" && i.params?.["unparsed"] === true,
      );
      const text =
        custom?.message ??
        (unparsed
          ? `${spec.expect}, written as a whole number of bytes, or with B, KiB, MiB or GiB (binary units: not MB or GB)`
          : spec.expect);
      const source = by === null ? setting.source : `${setting.source}, overridden by ${by}`;
      issues.push(issue(key, source, `${text}, got ${show(setting.value)}`));
    }
  }

  checkAcrossKeys(values, settings, issues);
  if (issues.length > 0) throw new ConfigError(issues);
  return deepFreeze(nest(values)) as unknown as CairnConfig;
}

function nonEmpty(s: string | undefined): string | undefined {
  return s === undefined || s === "" ? undefined : s;
}

/** The largest configuration file read: every key with its comment is 12 KB. */
export const MAX_CONFIG_FILE_BYTES = 1024 * 1024;

function readFile(
  path: string,
  named: string,
  settings: Map<string, Setting>,
  issues: ConfigIssue[],
): void {
  let bytes: Buffer;
  try {
    // Any file, a pipe too (`--config /dev/stdin`, a shell's `<(…)`): read once, before anything
    // runs, its open may wait for its writer. The files read again when they change must be
    // regular files (readRegularFileBounded).
    bytes = readFileBounded(path, MAX_CONFIG_FILE_BYTES);
  } catch (err) {
    if (err instanceof FileTooLargeError) {
      issues.push({
        key: "config",
        source: path,
        message: `config error: the configuration file ${path}${named} ${err.reason}`,
      });
      return;
    }
    const code = (err as NodeJS.ErrnoException).code ?? String(err);
    issues.push({
      key: "config",
      source: path,
      message: `config error: cannot read the configuration file ${path}${named}: ${code}`,
    });
    return;
  }
  let text: string;
  try {
    // YAML is UTF-8 here: decoded leniently, a Latin-1 `café` became `caf\uFFFD`, a path (a
    // data_dir) the node would then create, empty, beside the one meant.
    text = new TextDecoder("utf-8", { fatal: true }).decode(bytes);
  } catch {
    issues.push({
      key: "config",
      source: path,
      message: `config error: ${path} is not UTF-8 text (save it as UTF-8)`,
    });
    return;
  }
  const { LineCounter, parseDocument } = loadYaml();
  const lineCounter = new LineCounter();
  const doc = parseDocument(text, { uniqueKeys: true, prettyErrors: false, lineCounter });
  const firstError = doc.errors[0];
  if (firstError !== undefined) {
    const where = lineCounter.linePos(firstError.pos[0]);
    const at = ` at line ${where.line}, column ${where.col}`;
    issues.push({
      key: "config",
      source: path,
      message: `config error: ${path} is not valid YAML${at}: ${firstError.message.split("\n")[0] ?? ""}`,
    });
    return;
  }
  let root: unknown;
  try {
    // The yaml library refuses a document whose aliases would expand past its bound (a
    // "billion laughs"), throwing: a configuration error like any other, not a crash.
    root = doc.toJS();
  } catch (err) {
    issues.push({
      key: "config",
      source: path,
      message: `config error: ${path} cannot be read as a configuration: ${err instanceof Error ? err.message : String(err)}`,
    });
    return;
  }
  if (root === null || root === undefined) return; // an empty file sets nothing
  walk(root, "", path, settings, issues);
}

function walk(
  node: unknown,
  prefix: string,
  path: string,
  settings: Map<string, Setting>,
  issues: ConfigIssue[],
): void {
  const where = prefix === "" ? "the top level" : prefix;
  if (!isObject(node)) {
    issues.push(
      issue(
        prefix === "" ? "(root)" : prefix,
        path,
        `must be a mapping of keys, got ${show(node)}`,
      ),
    );
    return;
  }
  for (const [name, value] of Object.entries(node)) {
    const key = prefix === "" ? name : `${prefix}.${name}`;
    if (KEY_BY_NAME.has(key)) {
      // A dotted name (`cluster.total_shards:` beside `cluster: {total_shards: …}`) is another
      // YAML key, which the parser's duplicate check does not see: the last would win silently.
      if (settings.get(key)?.origin === "file") {
        issues.push(
          issue(key, path, "is set twice in the file (nested and as a dotted key); keep one"),
        );
        continue;
      }
      settings.set(key, { value, source: path, origin: "file" });
    } else if (SECTIONS.has(key)) {
      if (value !== null) walk(value, key, path, settings, issues);
    } else {
      issues.push(
        issue(key, path, `unknown key; ${where} accepts ${childrenOf(prefix).join(", ")}`),
      );
    }
  }
}

function childrenOf(prefix: string): string[] {
  const names = new Set<string>();
  for (const k of [...KEYS.map((s) => s.key), ...SECTIONS]) {
    if (prefix !== "" && !k.startsWith(`${prefix}.`)) continue;
    const rest = prefix === "" ? k : k.slice(prefix.length + 1);
    if (!rest.includes(".")) names.add(rest);
  }
  return [...names];
}

function coerce(spec: KeySpec, raw: string): unknown {
  switch (spec.kind) {
    case "string":
    case "bytes":
      return raw;
    case "int":
      return /^\s*-?[0-9]+\s*$/.test(raw) ? Number(raw) : raw;
    case "bool": {
      const t = raw.trim().toLowerCase();
      if (t === "true" || t === "1" || t === "yes") return true;
      if (t === "false" || t === "0" || t === "no") return false;
      return raw;
    }
    case "list":
      return raw
        .split(",")
        .map((s) => s.trim())
        .filter((s) => s !== "");
  }
}

function checkAcrossKeys(
  values: Map<string, unknown>,
  settings: ReadonlyMap<string, Setting>,
  issues: ConfigIssue[],
): void {
  const sourceOf = (key: string): string => settings.get(key)?.source ?? "default";
  for (const [bind, advertise] of [
    ["rpc_addr", "advertise_rpc_addr"],
    ["http_addr", "advertise_http_addr"],
  ] as const) {
    const bound = values.get(bind);
    if (typeof bound !== "string" || settings.has(advertise)) continue;
    const parsed = parseHostPort(bound, { allowPortZero: true });
    if (parsed.ok && isUnspecifiedHost(parsed.value.host)) {
      issues.push({
        key: advertise,
        source: sourceOf(bind),
        message:
          `config error: ${advertise}: must be set when ${bind} (from ${sourceOf(bind)}) binds ` +
          `the unspecified address ${bound}; set it (or ${KEY_BY_NAME.get(advertise)?.env}) to ` +
          `the address other nodes and clients reach this node at`,
      });
    } else {
      values.set(advertise, bound);
    }
  }

  const rpc = values.get("rpc_addr");
  const http = values.get("http_addr");
  if (typeof rpc === "string" && typeof http === "string") {
    const a = parseHostPort(rpc, { allowPortZero: true });
    const b = parseHostPort(http, { allowPortZero: true });
    if (a.ok && b.ok && a.value.port !== 0 && a.value.port === b.value.port) {
      const clash =
        sameHost(a.value.host, b.value.host) ||
        isUnspecifiedHost(a.value.host) ||
        isUnspecifiedHost(b.value.host);
      if (clash) {
        issues.push(
          issue(
            "http_addr",
            sourceOf("http_addr"),
            `must not use the same port as rpc_addr (${rpc}, from ${sourceOf("rpc_addr")}), got ${show(http)}`,
          ),
        );
      }
    }
  }

  const election = values.get("raft.election_ticks");
  const heartbeat = values.get("raft.heartbeat_ticks");
  if (typeof election === "number" && typeof heartbeat === "number" && heartbeat >= election) {
    issues.push(
      issue(
        "raft.heartbeat_ticks",
        sourceOf("raft.heartbeat_ticks"),
        `must be less than raft.election_ticks (${election}, from ${sourceOf("raft.election_ticks")}), got ${heartbeat}`,
      ),
    );
  }

  const seeds = values.get("cluster.seed_nodes");
  if (
    values.get("recovery.unsafe_accept_lost_wal") === true &&
    Array.isArray(seeds) &&
    seeds.length > 0
  ) {
    issues.push(
      issue(
        "recovery.unsafe_accept_lost_wal",
        sourceOf("recovery.unsafe_accept_lost_wal"),
        `applies to a single node only (cluster.seed_nodes is set, from ${sourceOf("cluster.seed_nodes")}): a cluster member that lost its WAL must not vote as if it had not; empty its data_dir and start it again, to rejoin and be refilled by its peers, got true`,
      ),
    );
  }

  const workers = values.get("shard_workers");
  const ioThreads = values.get("rpc.io_threads");
  if (typeof workers === "number" && workers > 1) {
    const total = values.get("cluster.total_shards");
    if (typeof total === "number" && workers > total) {
      issues.push(
        issue(
          "shard_workers",
          sourceOf("shard_workers"),
          `must be at most cluster.total_shards (${total}, from ${sourceOf("cluster.total_shards")}): each worker owns at least one shard, got ${workers}`,
        ),
      );
    }
    if (typeof ioThreads === "number" && ioThreads > 0) {
      issues.push(
        issue(
          "shard_workers",
          sourceOf("shard_workers"),
          `must be 1 when rpc.io_threads (${ioThreads}, from ${sourceOf("rpc.io_threads")}) is above 0: each shard worker serves rpc_addr itself, got ${workers}`,
        ),
      );
    }
  }

  checkTls(values, sourceOf, issues);
  checkAuth(values, sourceOf, issues);
  checkGossipKeys(values, settings, issues);

  const maxKey = values.get("limits.max_key_bytes");
  const maxValue = values.get("limits.max_value_bytes");
  const maxMessage = values.get("limits.max_message_bytes");
  if (
    typeof maxKey === "number" &&
    typeof maxValue === "number" &&
    typeof maxMessage === "number" &&
    maxMessage < maxKey + maxValue + ENVELOPE_BYTES
  ) {
    issues.push(
      issue(
        "limits.max_message_bytes",
        sourceOf("limits.max_message_bytes"),
        `must be at least limits.max_key_bytes + limits.max_value_bytes + ${ENVELOPE_BYTES} ` +
          `(${maxKey + maxValue + ENVELOPE_BYTES}) so the largest Put fits, got ${maxMessage}`,
      ),
    );
  }
  // The byte bounds a whole message must fit in.
  for (const [key, what] of [
    ["rpc.max_connection_output_bytes", "answer"],
    ["rpc.max_incoming_request_bytes", "request"],
  ] as const) {
    const bound = values.get(key);
    if (
      typeof maxMessage === "number" &&
      typeof bound === "number" &&
      bound < maxMessage + OUTPUT_ROOM_BYTES
    ) {
      issues.push(
        issue(
          key,
          sourceOf(key),
          `must be at least limits.max_message_bytes + ${OUTPUT_ROOM_BYTES} ` +
            `(${maxMessage + OUTPUT_ROOM_BYTES}) so the largest ${what} fits, got ${bound}`,
        ),
      );
    }
  }
}

/**
 * The tls.* keys: the certificate and its key both or neither, the CA files only with them, a
 * peer CA in a cluster with TLS (its members' connections to each other are TLS too: a cluster
 * that mixes TLS and cleartext members cannot talk), and the files themselves usable
 * (readTlsFiles: readable, PEM, the key the certificate's, the certificate within its validity).
 */
function checkTls(
  values: Map<string, unknown>,
  sourceOf: (key: string) => string,
  issues: ConfigIssue[],
): void {
  const str = (key: string): string | undefined => {
    const v = values.get(key);
    return typeof v === "string" ? v : undefined;
  };
  const cert = str("tls.cert_file");
  const key = str("tls.key_file");
  const clientCa = str("tls.client_ca_file");
  const peerCa = str("tls.peer_ca_file");
  if ((cert === undefined) !== (key === undefined)) {
    const [set, missing] =
      cert === undefined ? ["tls.key_file", "tls.cert_file"] : ["tls.cert_file", "tls.key_file"];
    issues.push(
      issue(
        missing,
        "default",
        `must be set with ${set} (from ${sourceOf(set)}): the certificate and its key go together`,
      ),
    );
    return;
  }
  if (cert === undefined || key === undefined) {
    if (clientCa !== undefined) {
      issues.push(
        issue(
          "tls.client_ca_file",
          sourceOf("tls.client_ca_file"),
          `needs tls.cert_file and tls.key_file: client certificates are asked for only over TLS, got ${show(clientCa)}`,
        ),
      );
    }
    if (peerCa !== undefined) {
      issues.push(
        issue(
          "tls.peer_ca_file",
          sourceOf("tls.peer_ca_file"),
          `needs tls.cert_file and tls.key_file: peers present and check node certificates only over TLS, got ${show(peerCa)}`,
        ),
      );
    }
    return;
  }
  const seeds = values.get("cluster.seed_nodes");
  if (Array.isArray(seeds) && seeds.length > 0 && peerCa === undefined) {
    issues.push(
      issue(
        "tls.peer_ca_file",
        "default",
        `must be set in a cluster with TLS (tls.cert_file from ${sourceOf("tls.cert_file")}, cluster.seed_nodes from ${sourceOf("cluster.seed_nodes")}): the CA that signed the members' node certificates, which they present to each other`,
      ),
    );
    return;
  }
  try {
    readTlsFiles({ certFile: cert, keyFile: key, clientCaFile: clientCa, peerCaFile: peerCa });
  } catch (err) {
    if (!(err instanceof TlsFileError)) throw err;
    issues.push(issue(err.key, sourceOf(err.key), `${err.file}: ${err.reason}`));
  }
}

/**
 * `auth.tokens_file`: the file reads well (readTokensFile: YAML, each entry a name, a role and
 * one hashed or plain token), and a token can cross the network only encrypted: without
 * tls.cert_file, rpc_addr must be a loopback address (127.0.0.0/8, ::1, localhost).
 */
function checkAuth(
  values: Map<string, unknown>,
  sourceOf: (key: string) => string,
  issues: ConfigIssue[],
): void {
  const file = values.get("auth.tokens_file");
  if (typeof file !== "string") return;
  const rpc = values.get("rpc_addr");
  if (values.get("tls.cert_file") === undefined && typeof rpc === "string") {
    const parsed = parseHostPort(rpc, { allowPortZero: true, allowUnspecified: true });
    if (parsed.ok && !isLoopbackHost(parsed.value.host)) {
      issues.push(
        issue(
          "auth.tokens_file",
          sourceOf("auth.tokens_file"),
          `bearer tokens would cross the network in cleartext: set tls.cert_file and tls.key_file, or bind rpc_addr (${rpc}, from ${sourceOf("rpc_addr")}) to a loopback address, got ${show(file)}`,
        ),
      );
      return;
    }
  }
  try {
    readTokensFile(file);
  } catch (err) {
    if (!(err instanceof TokensFileError)) throw err;
    issues.push(issue("auth.tokens_file", sourceOf("auth.tokens_file"), `${file}: ${err.reason}`));
  }
}

/**
 * `cluster.gossip_key_file` reads well (readGossipKeyFile: one base64 key of 32 bytes a line, at
 * most MAX_GOSSIP_KEYS), and `cluster.gossip_plaintext` is set only with it.
 */
function checkGossipKeys(
  values: Map<string, unknown>,
  settings: ReadonlyMap<string, Setting>,
  issues: ConfigIssue[],
): void {
  const sourceOf = (key: string): string => settings.get(key)?.source ?? "default";
  const file = values.get("cluster.gossip_key_file");
  if (typeof file !== "string") {
    const plaintext = settings.get("cluster.gossip_plaintext");
    if (plaintext !== undefined && plaintext.origin !== "default") {
      issues.push(
        issue(
          "cluster.gossip_plaintext",
          plaintext.source,
          `needs cluster.gossip_key_file: without gossip keys every datagram is cleartext, got ${show(values.get("cluster.gossip_plaintext"))}`,
        ),
      );
    }
    return;
  }
  try {
    readGossipKeyFile(file);
  } catch (err) {
    if (!(err instanceof GossipKeyFileError)) throw err;
    issues.push(
      issue(
        "cluster.gossip_key_file",
        sourceOf("cluster.gossip_key_file"),
        `${file}: ${err.reason}`,
      ),
    );
  }
}

/** Room beside the largest answer in a connection's output (its headers, trailers, frames). */
const OUTPUT_ROOM_BYTES = 64 * 1024;

/** Room for the request envelope around the largest key and value. */
const ENVELOPE_BYTES = 1024;

function nest(values: ReadonlyMap<string, unknown>): Record<string, unknown> {
  const root: Record<string, unknown> = {};
  for (const spec of KEYS) {
    const parts = spec.key.split(".");
    let node = root;
    for (const part of parts.slice(0, -1)) {
      const next = (node[part] ??= {}) as Record<string, unknown>;
      node = next;
    }
    const leaf = parts[parts.length - 1];
    if (leaf !== undefined) node[leaf] = values.get(spec.key);
  }
  return root;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === "object" && value !== null) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}
