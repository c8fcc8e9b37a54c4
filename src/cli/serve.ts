/**
 * `cairn serve`: runs a node until SIGTERM, SIGINT or SIGHUP. Exit codes: 0 after a clean
 * shutdown, 1 when the node cannot start or fails while running, 2 for a bad configuration.
 */
import { parseArgs } from "node:util";
import {
  CONFIG_FLAG_OPTIONS,
  CONFIG_KEYS,
  ConfigError,
  type ConfigKeySpec,
  formatBytes,
  loadConfig,
} from "../config/index.ts";
import { CairnNode, ShardWorkersNode } from "../node/index.ts";
import { createLogger, isLogLevel } from "../ops/index.ts";
import { CairnError } from "../common/errors.ts";
import { nativeAddonMissing } from "../common/index.ts";

/** The placeholder of a flag's value in the help, from its key. */
function placeholder(spec: ConfigKeySpec): string {
  switch (spec.kind) {
    case "int":
      return "N";
    case "bool":
      return "true|false";
    case "list":
      return "LIST";
    case "bytes":
      return "SIZE";
    case "string":
      if (spec.key.endsWith("_addr")) return "HOST:PORT";
      if (spec.key === "data_dir") return "PATH";
      if (spec.key === "node_id") return "ID";
      if (spec.key === "log.level") return "LEVEL";
      return "VALUE";
  }
}

/** `text` wrapped to lines of at most `width` characters, each after `indent`. */
function wrap(text: string, indent: string, width: number): string[] {
  const lines: string[] = [];
  let line = "";
  for (const word of text.split(/\s+/)) {
    if (line !== "" && indent.length + line.length + 1 + word.length > width) {
      lines.push(line);
      line = word;
    } else {
      line = line === "" ? word : `${line} ${word}`;
    }
  }
  if (line !== "") lines.push(line);
  return lines;
}

const COLUMN = 29;

/** One option of the help: the flag, then its text wrapped in the description column. */
function option(flag: string, text: string): string {
  const pad = " ".repeat(COLUMN);
  const head = `  ${flag}`;
  const [first = "", ...rest] = wrap(text, pad, 100);
  const lines = head.length < COLUMN - 1 ? [head.padEnd(COLUMN) + first] : [head, pad + first];
  for (const l of rest) lines.push(pad + l);
  return lines.join("\n");
}

/**
 * Every flag of the configuration schema (src/config/schema.ts), described by the schema itself
 * with its environment variable and default: the help cannot drift from the keys
 * (test/config/docs-drift.test.ts).
 */
function flagOptions(): string {
  return CONFIG_KEYS.filter((k) => k.flag !== undefined)
    .map((k) => {
      const shown =
        k.default === undefined
          ? ""
          : Array.isArray(k.default)
            ? k.default.length === 0
              ? ", default empty"
              : `, default ${k.default.join(",")}`
            : `, default ${k.kind === "bytes" ? formatBytes(k.default as number) : String(k.default)}`;
      return option(`--${k.flag} ${placeholder(k)}`, `${k.doc} (env ${k.env}${shown})`);
    })
    .join("\n");
}

export const SERVE_HELP = `Usage: cairn serve [options]

Runs a Cairn node. With no seed nodes it is a single-node cluster whose shards are one-voter
Raft groups. Configuration: defaults < YAML file (--config) < CAIRN_* environment < flags.

Options:
${option("--config PATH", "YAML configuration file, at most 1 MiB, read once (a pipe too: /dev/stdin) (env CAIRN_CONFIG); see cairn.example.yaml")}
${flagOptions()}
${option("-h, --help", "show this help")}

Endpoints: gRPC cairn.v1 KV/Meta/Admin, grpc.health.v1 and reflection on the RPC address;
GET /health/quick, /health and /metrics on the HTTP address. Every key, flags or not:
docs/operations.md.

Exit codes: 0 clean shutdown (SIGTERM, SIGINT or SIGHUP: each drains the node), 1 start-up or
runtime failure (e.g. an address already in use), 2 bad configuration or usage.

Examples:
  cairn serve
  cairn serve --config cairn.yaml
  CAIRN_DATA_DIR=/var/lib/cairn cairn serve --node-id n1 --rpc-addr 0.0.0.0:7447 \\
      --advertise-rpc-addr 10.0.0.5:7447
`;

export async function serve(argv: readonly string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: [...argv],
      options: { ...CONFIG_FLAG_OPTIONS, help: { type: "boolean", short: "h" } },
      strict: true,
      allowPositionals: false,
    });
  } catch (err) {
    process.stderr.write(
      `cairn serve: ${(err as Error).message}\nRun 'cairn serve --help' for usage.\n`,
    );
    return 2;
  }
  const { help, ...flags } = parsed.values;
  if (help === true) {
    process.stdout.write(SERVE_HELP);
    return 0;
  }
  let config;
  try {
    config = loadConfig({ flags: flags as Record<string, string | undefined>, env: process.env });
  } catch (err) {
    if (err instanceof ConfigError) {
      process.stderr.write(`${err.message}\n`);
      return 2;
    }
    throw err;
  }
  const log = createLogger({
    level: isLogLevel(config.log.level) ? config.log.level : "info",
    fields: { node_id: config.node_id },
  });
  if (nativeAddonMissing !== null) {
    // The install's warning scrolls away; the node's log is where an operator looks.
    log.warn("running without the native addon: slower JavaScript paths for reads and checksums", {
      reason: nativeAddonMissing,
      fix: "install a C compiler (cc) and run npm run build:native, then restart",
    });
  }
  let fatal: (err: unknown) => void = () => {};
  const failed = new Promise<unknown>((resolve) => {
    fatal = resolve;
  });
  // Listen before starting: "node started" is logged before start() returns, and a SIGTERM sent
  // on that line must drain the node, not kill it with the default action. SIGHUP (the terminal
  // closed, an SSH session dropped) drains it too: its default action killed the node at once,
  // without a drain or a log line. Nothing is re-read on SIGHUP (the TLS, tokens and gossip key
  // files are reloaded when they change).
  const signalled = new Promise<string>((resolve) => {
    let first = true;
    const onSignal = (signal: string): void => {
      if (!first) return;
      first = false;
      // A second SIGINT or SIGTERM while draining stops at once; a second SIGHUP does not (a
      // hangup sends one to the process, and the shell it ran under sends another).
      process.once("SIGINT", () => process.exit(1));
      process.once("SIGTERM", () => process.exit(1));
      resolve(signal);
    };
    process.once("SIGTERM", () => onSignal("SIGTERM"));
    process.once("SIGINT", () => onSignal("SIGINT"));
    process.on("SIGHUP", () => onSignal("SIGHUP"));
  });
  let node: CairnNode | ShardWorkersNode;
  try {
    node =
      config.shard_workers > 1
        ? await ShardWorkersNode.start(config, log, (err) => fatal(err))
        : await CairnNode.start(config, log, (err) => fatal(err));
  } catch (err) {
    const code = err instanceof CairnError ? err.code : "CAIRN_ERR_INTERNAL";
    log.error("node failed to start", { error: (err as Error).message, code });
    process.stderr.write(`cairn serve: ${(err as Error).message}\n`);
    return 1;
  }
  const outcome = await Promise.race([
    signalled.then((s) => ({ signal: s })),
    failed.then((e) => ({ error: e })),
  ]);
  if ("signal" in outcome)
    log.info("shutting down", {
      signal: outcome.signal,
      drain_timeout_ms: config.shutdown.drain_timeout_ms,
    });
  if ("error" in outcome) {
    // Logged already; said on stderr too, as a refusal at start is: an operator who sends the
    // JSON log to a file sees why the node stopped (a duplicate or removed node id, a lost
    // state, a storage failure) where it ran.
    const err = outcome.error;
    process.stderr.write(`cairn serve: ${err instanceof Error ? err.message : String(err)}\n`);
  }
  try {
    await node.stop();
  } catch (err) {
    log.error("shutdown failed", { error: (err as Error).message });
    return 1;
  }
  return "signal" in outcome ? 0 : 1;
}
