/**
 * `cairn serve`: runs a node until SIGTERM or SIGINT. Exit codes: 0 after a clean shutdown,
 * 1 when the node cannot start or fails while running, 2 for a bad configuration.
 */
import { parseArgs } from "node:util";
import { CONFIG_FLAG_OPTIONS, ConfigError, loadConfig } from "../config/index.ts";
import { CairnNode, ShardWorkersNode } from "../node/index.ts";
import { createLogger, isLogLevel } from "../ops/index.ts";
import { CairnError } from "../common/errors.ts";
import { nativeAddonMissing } from "../common/index.ts";

export const SERVE_HELP = `Usage: cairn serve [options]

Runs a Cairn node. With no seed nodes it is a single-node cluster whose shards are one-voter
Raft groups. Configuration: defaults < YAML file (--config) < CAIRN_* environment < flags.

Options:
  --config PATH              YAML configuration file (env CAIRN_CONFIG); see cairn.example.yaml
  --node-id ID               this node's id (env CAIRN_NODE_ID, default node-1)
  --rpc-addr HOST:PORT       gRPC address for clients and peers (env CAIRN_RPC_ADDR, default 127.0.0.1:7447)
  --http-addr HOST:PORT      operators' HTTP address (env CAIRN_HTTP_ADDR, default 127.0.0.1:8080)
  --data-dir PATH            data directory (env CAIRN_DATA_DIR, default ./data)
  --seed-nodes LIST          comma-separated HOST:PORT seeds; empty = single node (env CAIRN_SEED_NODES)
  --advertise-rpc-addr A     address other nodes and clients use (default: --rpc-addr)
  --advertise-http-addr A    address reported for the HTTP server (default: --http-addr)
  --log-level LEVEL          trace, debug, info, warn or error (env CAIRN_LOG_LEVEL, default info)
  --shard-workers N          threads that each own and serve a slice of the shards; single node
                             only, fixed for the data directory (env CAIRN_SHARD_WORKERS, default 1)
  -h, --help                 show this help

Endpoints: gRPC cairn.v1 KV/Meta/Admin, grpc.health.v1 and reflection on the RPC address;
GET /health/quick, /health and /metrics on the HTTP address. Every key: docs/operations.md.

Exit codes: 0 clean shutdown (SIGTERM/SIGINT), 1 start-up or runtime failure (e.g. an address
already in use), 2 bad configuration or usage.

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
  const signalled = new Promise<string>((resolve) => {
    const onSignal = (signal: string): void => {
      // A second signal while draining stops at once.
      process.once("SIGINT", () => process.exit(1));
      process.once("SIGTERM", () => process.exit(1));
      resolve(signal);
    };
    process.once("SIGTERM", () => onSignal("SIGTERM"));
    process.once("SIGINT", () => onSignal("SIGINT"));
  });
  const outcome = await Promise.race([
    signalled.then((s) => ({ signal: s })),
    failed.then((e) => ({ error: e })),
  ]);
  if ("signal" in outcome)
    log.info("shutting down", {
      signal: outcome.signal,
      drain_timeout_ms: config.shutdown.drain_timeout_ms,
    });
  try {
    await node.stop();
  } catch (err) {
    log.error("shutdown failed", { error: (err as Error).message });
    return 1;
  }
  return "signal" in outcome ? 0 : 1;
}
