/**
 * The `cairn` command line's commands, dispatched by name: `run(argv, io)`. main.ts runs it on the
 * process (its streams, exit code and closed-pipe handling); tests run it on their own streams.
 */
import { readFileSync } from "node:fs";
import { join } from "node:path";
import type { Io } from "./io.ts";
import type * as BackupCommands from "./backup-commands.ts";
import type * as KvCommands from "./kv-commands.ts";
import type * as OpsCommands from "./ops-commands.ts";

// Commands are imported when run: the server's modules would slow every client command.
const kv = (): Promise<typeof KvCommands> => import("./kv-commands.ts");
const ops = (): Promise<typeof OpsCommands> => import("./ops-commands.ts");
const backups = (): Promise<typeof BackupCommands> => import("./backup-commands.ts");

const HELP = `Usage: cairn <command> [options]

Cairn: a distributed, sharded, replicated key-value store.

Commands:
  put KEY VALUE     store a value (from the argument, --file or stdin "-")
  get KEY           print a value
  delete KEY        delete a key
  scan              list keys in order (--prefix P | --from A --to B, --limit N)
  backup FILE       write every key (or a range's) and its value to a checksummed file
  restore FILE      write a backup's keys into the cluster (checked whole first)
  cluster           members and shard leaders (--watch to follow)
  health            a node's health report (HTTP)
  metrics           a node's Prometheus metrics (HTTP)
  snapshot SHARD    snapshot a shard and compact its Raft log
  transfer-leader SHARD NODE
                    move a shard's leadership to one of its replicas
  node decommission|recommission|remove|status NODE
                    move every replica off a member (or cancel that), retire a
                    dead or decommissioned one for good, or show its standing
  bench WORKLOAD    load-test: put, get or mixed (throughput, latency percentiles)
  cert SUBCOMMAND   create TLS certificates: create-ca, create-node ID, create-client NAME;
                    and create-gossip-key (cluster.gossip_key_file)
  serve             run a node
  version           print the version

Every command takes --help. Client commands take --endpoints HOST:PORT,... (env CAIRN_ENDPOINTS,
default 127.0.0.1:7447), --output text|json, --timeout MS, and for a node that serves TLS
--cacert FILE (with mutual TLS also --cert FILE --key FILE), for a node with auth.tokens_file
--token TOKEN (env CAIRN_TOKEN); health and metrics take
--http-endpoint HOST:PORT (env CAIRN_HTTP_ENDPOINT, default 127.0.0.1:8080).

Options:
  -h, --help     show this help
  -v, --version  print the version

Exit codes of client commands: 0 ok, 1 not found, 2 usage, 3 unavailable, 4 compare-and-set
conflict, 5 other server error, 6 write outcome unknown. serve: 0 clean shutdown, 1 failure,
2 bad configuration.

Examples:
  cairn put greeting hello
  cairn get greeting
  cairn scan --prefix user/ --limit 10 --output json
  cairn --help
`;

function version(): string {
  const pkg = JSON.parse(
    readFileSync(join(import.meta.dirname, "..", "..", "package.json"), "utf8"),
  ) as {
    version: string;
  };
  return `cairn ${pkg.version} (node ${process.version})`;
}

/** Options that may come before the command (`cairn --endpoints A put k v`), with a value. */
const LEADING_OPTIONS = new Set([
  "--endpoints",
  "--http-endpoint",
  "--output",
  "-w",
  "--write-out",
  "--timeout",
  "--cacert",
  "--cert",
  "--key",
  "--token",
]);

/** Moves options given before the command to after it, where the command parses them. */
export function hoistLeadingOptions(argv: readonly string[]): string[] {
  const leading: string[] = [];
  let i = 0;
  while (i < argv.length) {
    const a = argv[i] as string;
    const name = a.split("=")[0] as string;
    if (!LEADING_OPTIONS.has(name)) break;
    if (a.includes("=")) {
      leading.push(a);
      i += 1;
    } else {
      leading.push(a, ...(i + 1 < argv.length ? [argv[i + 1] as string] : []));
      i += 2;
    }
  }
  if (leading.length === 0 || i >= argv.length) return [...argv];
  // Before a "--", after which every argument is a positional (a key that begins with "-").
  const rest = argv.slice(i + 1);
  const end = rest.indexOf("--");
  return end === -1
    ? [argv[i] as string, ...rest, ...leading]
    : [argv[i] as string, ...rest.slice(0, end), ...leading, ...rest.slice(end)];
}

/**
 * Runs one command line (`argv` without the program's name) with `io`, the process's or a test's:
 * its exit code. `serve` runs on the process itself.
 */
export async function run(argv: readonly string[], io: Io): Promise<number> {
  const [command, ...rest] = hoistLeadingOptions(argv);
  switch (command) {
    case undefined:
      // A usage error, as any other: the help on standard error (a script's output stays clean).
      io.stderr.write(HELP);
      return 2;
    case "-h":
    case "--help":
    case "help":
      io.stdout.write(HELP);
      return 0;
    case "-v":
    case "--version":
    case "version":
      io.stdout.write(`${version()}\n`);
      return 0;
    case "serve":
      return (await import("./serve.ts")).serve(rest);
    case "put":
      return (await kv()).put(rest, io);
    case "get":
      return (await kv()).get(rest, io);
    case "delete":
    case "del":
      return (await kv()).del(rest, io);
    case "scan":
      return (await kv()).scan(rest, io);
    case "backup":
      return (await backups()).backup(rest, io);
    case "restore":
      return (await backups()).restore(rest, io);
    case "cluster":
      return (await ops()).cluster(rest, io);
    case "health":
      return (await ops()).health(rest, io);
    case "metrics":
      return (await ops()).metrics(rest, io);
    case "snapshot":
      return (await ops()).snapshot(rest, io);
    case "transfer-leader":
      return (await ops()).transferLeader(rest, io);
    case "node":
      return (await ops()).node(rest, io);
    case "bench":
      return (await import("./bench.ts")).bench(rest, io);
    case "cert":
      return (await import("./cert-commands.ts")).cert(rest, io);
    default:
      // Options the client commands take, and nothing after them (hoistLeadingOptions left
      // them where they were): the command is missing, not unknown.
      io.stderr.write(
        LEADING_OPTIONS.has(command.split("=")[0] as string)
          ? `cairn: no command after ${JSON.stringify(command)}\n\n${HELP}`
          : `cairn: unknown command ${JSON.stringify(command)}\n\n${HELP}`,
      );
      return 2;
  }
}
