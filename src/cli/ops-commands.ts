/**
 * `cairn health`, `metrics`, `cluster`, `snapshot`, `transfer-leader` and `node`: what an operator
 * asks of a node.
 */
import type { ClientRequest } from "node:http";
import { status } from "@grpc/grpc-js";
import {
  type CairnClient,
  DeadlineExceededError,
  ServerError,
  UnavailableError,
} from "../client/index.ts";
import { isObject } from "../common/index.ts";
import { isNodeId, parseHostPort, sameAddress } from "../config/index.ts";
import { leaderCounts, type MergedView, replicaHolders, watchMerged } from "./cluster-view.ts";
import {
  checkHostPort,
  type CommandOptions,
  DEFAULT_HTTP_ENDPOINT,
  envVar,
  EXIT,
  expectPositionals,
  GLOBAL_HELP,
  runCommand,
  sourceOf,
  str,
  UsageError,
  writeJson,
} from "./common.ts";
import type { Io } from "./io.ts";

// Not `import … from "node:http"`: its ES facade loads the bundled undici (~80 ms of CPU a run;
// src/ops/http-server.ts).
const { request: httpRequest } = process.getBuiltinModule("node:http");

const HTTP_HELP = `  --http-endpoint HOST:PORT  the node's HTTP address (env CAIRN_HTTP_ENDPOINT, default ${DEFAULT_HTTP_ENDPOINT})`;
const HTTP_OPTIONS = { "http-endpoint": { type: "string" } } as const;

function httpEndpoint(values: Record<string, unknown>, env: NodeJS.ProcessEnv): string {
  const e =
    (typeof values["http-endpoint"] === "string" ? values["http-endpoint"] : undefined) ??
    envVar(env, "CAIRN_HTTP_ENDPOINT") ??
    DEFAULT_HTTP_ENDPOINT;
  checkHostPort(e, sourceOf(values, ["http-endpoint"], "CAIRN_HTTP_ENDPOINT"));
  return e;
}

/**
 * The most of an answer's body read: a node's /metrics is a few MiB at its largest (every shard's
 * series), and an endpoint that is no Cairn node's must not fill this process's memory.
 */
const MAX_HTTP_RESPONSE_BYTES = 64 * 1024 * 1024;

/**
 * GET over HTTP with the command's deadline (for the connection, the answer and its whole body);
 * a failure to connect, a deadline missed or an answer past MAX_HTTP_RESPONSE_BYTES is an
 * `error`. node:http, not fetch: fetch refuses the WHATWG "bad ports" (6000, 6665–6669, 10080, …)
 * without a try, and a node may serve its HTTP on any of them. The host and port are given
 * apart, not as a URL: a WHATWG URL has no IPv6 zone (`[fe80::1%eth0]:8080`), which the endpoint
 * parser takes and the client library connects through.
 */
function httpGet(
  endpoint: string,
  path: string,
  timeoutMs: number,
): Promise<{ status: number; body: string } | { error: string }> {
  return new Promise((resolve) => {
    let settled = false;
    let req: ClientRequest | undefined;
    const finish = (result: { status: number; body: string } | { error: string }): void => {
      if (settled) return;
      settled = true;
      clearTimeout(timer);
      req?.destroy();
      resolve(result);
    };
    const timer = setTimeout(
      () => finish({ error: `no answer within ${timeoutMs} ms (--timeout)` }),
      timeoutMs,
    );
    try {
      const address = parseHostPort(endpoint);
      if (!address.ok) throw new Error(`not ${address.reason}`);
      const { host, port } = address.value;
      // No agent: one connection, closed with the answer (nothing keeps the process running).
      req = httpRequest({ host, port, path, agent: false }, (res) => {
        const chunks: Buffer[] = [];
        let size = 0;
        res.on("data", (chunk: Buffer) => {
          size += chunk.length;
          if (size > MAX_HTTP_RESPONSE_BYTES) {
            finish({ error: `its answer is larger than ${MAX_HTTP_RESPONSE_BYTES} bytes` });
          } else {
            chunks.push(chunk);
          }
        });
        res.on("end", () =>
          finish({ status: res.statusCode ?? 0, body: Buffer.concat(chunks).toString("utf8") }),
        );
        res.on("error", (err) => finish({ error: err.message }));
      });
      req.on("error", (err) => finish({ error: err.message }));
      req.end();
    } catch (err) {
      finish({ error: (err as Error).message });
    }
  });
}

export const HEALTH_HELP = `Usage: cairn health [--quick] [options]

Asks a node's HTTP server for its health report (GET /health; --quick: GET /health/quick).
Exit 0 when healthy or degraded, 3 when unhealthy or unreachable, 5 when the answer is not a
node's health report (another HTTP status, or a body that is not the report's JSON). The HTTP
server has neither TLS nor tokens: of the global options, only --output and --timeout apply.

Options:
${HTTP_HELP}
  --quick                    only the readiness probe (shard 0 served?)
${GLOBAL_HELP}

Examples:
  cairn health
  cairn health --http-endpoint 10.0.0.5:8080 --output json | jq .status
  cairn health --quick && echo ready
`;

export const HEALTH_OPTIONS = {
  ...HTTP_OPTIONS,
  quick: { type: "boolean" },
} as const satisfies CommandOptions;

export function health(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "health",
    HEALTH_HELP,
    HEALTH_OPTIONS,
    argv,
    io,
    async ({ values, positionals, globals }) => {
      expectPositionals(positionals, []);
      const endpoint = httpEndpoint(values, io.env);
      const quick = values["quick"] === true;
      const res = await httpGet(endpoint, quick ? "/health/quick" : "/health", globals.timeoutMs);
      if ("error" in res) {
        io.stderr.write(`cairn health: unavailable: ${endpoint}: ${res.error}\n`);
        return EXIT.unavailable;
      }
      // A node that cannot tell its health (its report failed or missed the server's 5 s
      // deadline: a wedged node) is unhealthy, as the exit codes promise, not a failed command.
      if (res.status === 500) {
        io.stderr.write(
          `cairn health: unhealthy: ${endpoint} could not report its health (HTTP 500: ${res.body.trim()})\n`,
        );
        return EXIT.unavailable;
      }
      // A node answers 200 or 503 (and 500, above): another status is not its health (a proxy's
      // or another server's page), however its body reads.
      if (res.status !== 200 && res.status !== 503) {
        io.stderr.write(`cairn health: HTTP ${res.status}: ${res.body.slice(0, 200)}\n`);
        return EXIT.failed;
      }
      const ok = res.status === 200;
      if (quick) {
        if (globals.output === "json") writeJson(io, { status: ok ? "ok" : "unavailable" });
        else io.stdout.write(`${res.body.trim()}\n`);
        return ok ? EXIT.ok : EXIT.unavailable;
      }
      let parsed: unknown;
      try {
        parsed = JSON.parse(res.body);
      } catch {
        io.stderr.write(`cairn health: HTTP ${res.status}: not JSON: ${res.body.slice(0, 200)}\n`);
        return EXIT.failed;
      }
      // JSON of another shape (`{}` from another server on the port) was shown as a health and
      // exited 0; a status the HTTP status contradicts is no node's either (503 exactly when
      // unhealthy).
      const problem = healthReportProblem(parsed, res.status);
      if (problem !== undefined) {
        io.stderr.write(
          `cairn health: ${endpoint} answered HTTP ${res.status} with JSON that is not a Cairn node's health report (${problem}): ${res.body.slice(0, 200)}\n`,
        );
        return EXIT.failed;
      }
      const report = parsed as HealthReport;
      if (globals.output === "json") writeJson(io, report);
      else io.stdout.write(formatHealth(report));
      return ok ? EXIT.ok : EXIT.unavailable;
    },
    "http",
  );
}

interface HealthReport {
  status: string;
  node_id: string;
  uptime_seconds: number;
  total_shards: number;
  active_shards: number;
  shards?: {
    id: number;
    status: string;
    is_leader: boolean;
    raft_term: number;
    commit_index: number;
  }[];
  nodes?: {
    id: string;
    rpc_addr: string;
    http_addr: string;
    state: string;
    member_state?: string;
    replicas?: number;
    disk_full?: boolean;
  }[];
  cluster_version?: number;
  puts_refused?: boolean;
}

/**
 * Why `value`, the JSON of a GET /health answered `httpStatus`, is not a node's report (the
 * fields formatHealth reads, with their types), or undefined when it is one. Fields it does not
 * know are left alone: a newer node may add some.
 */
export function healthReportProblem(value: unknown, httpStatus: number): string | undefined {
  const isNumber = (v: unknown): boolean => typeof v === "number" && Number.isFinite(v);
  const isString = (v: unknown): boolean => typeof v === "string";
  if (!isObject(value)) return "not an object";
  const statuses = httpStatus === 503 ? ["unhealthy"] : ["healthy", "degraded"];
  if (typeof value["status"] !== "string" || !statuses.includes(value["status"]))
    return `"status" is not ${statuses.map((s) => `"${s}"`).join(" or ")}`;
  if (!isString(value["node_id"])) return '"node_id" is not a string';
  for (const key of ["uptime_seconds", "total_shards", "active_shards"])
    if (!isNumber(value[key])) return `"${key}" is not a number`;
  const fields = {
    shards: { id: isNumber, status: isString, raft_term: isNumber },
    nodes: { id: isString, state: isString, rpc_addr: isString, http_addr: isString },
  };
  for (const [list, checks] of Object.entries(fields)) {
    const entries = value[list];
    if (entries === undefined) continue;
    if (!Array.isArray(entries)) return `"${list}" is not a list`;
    for (const entry of entries as unknown[]) {
      if (!isObject(entry)) return `an entry of "${list}" is not an object`;
      for (const [key, ok] of Object.entries(checks))
        if (!ok(entry[key])) return `an entry of "${list}" has no valid "${key}"`;
    }
  }
  return undefined;
}

/**
 * `cairn health`'s text: the node, whether it refuses Puts for want of disk, the shards not
 * healthy, and (in a cluster) each member as `cairn cluster` shows it: its standing in the
 * cluster, gossip's view, its replicas.
 */
export function formatHealth(r: HealthReport): string {
  const version = r.cluster_version === undefined ? "" : `  cluster version: ${r.cluster_version}`;
  let out = `status: ${r.status}\nnode: ${r.node_id}  uptime: ${Math.round(r.uptime_seconds)}s  shards: ${r.active_shards} active of ${r.total_shards}${version}\n`;
  // The one reason for `degraded` that no shard shows, and the most pressing: writes fail.
  if (r.puts_refused === true)
    out += "puts refused: this node's disk has less available than storage.min_free_bytes\n";
  // A member that serves no client request by its standing: why it is unhealthy, and, once it
  // left the meta group, that its member list stopped then.
  const standing = r.nodes?.find((n) => n.id === r.node_id)?.member_state;
  if (standing === "decommissioned")
    out +=
      "this node is decommissioned: it serves no client request, and the members below are as it saw them when it left the meta group (ask another member)\n";
  else if (standing === "joining")
    out += "this node is joining: it serves clients once the meta group has it active\n";
  const bad = (r.shards ?? []).filter((s) => s.status !== "healthy");
  if (bad.length > 0) {
    out += `shards not healthy: ${bad.length} of ${r.active_shards}\n`;
    for (const s of bad) out += `  ${s.id}\t${s.status}\tterm ${s.raft_term}\n`;
  }
  if ((r.nodes ?? []).length > 0) {
    out += "nodes:\n";
    for (const n of r.nodes ?? []) {
      const standing = n.member_state === undefined ? "" : `${n.member_state}\t`;
      const replicas = n.replicas === undefined ? "" : `\treplicas ${n.replicas}`;
      const full = n.disk_full === true ? "\tdisk full" : "";
      out += `  ${n.id}\t${standing}${n.state}\trpc ${n.rpc_addr}\thttp ${n.http_addr}${replicas}${full}\n`;
    }
  }
  return out;
}

export const METRICS_HELP = `Usage: cairn metrics [--filter TEXT] [options]

Prints a node's Prometheus metrics (GET /metrics). --output json gives one array of
[{"name", "labels", "value", "line"}] samples ("line": the sample as the node wrote it; a
value of +Inf or NaN is null there). The HTTP server has neither TLS nor tokens: of the global
options, only --output and --timeout apply.

Options:
${HTTP_HELP}
  --filter TEXT              only samples whose name contains TEXT
${GLOBAL_HELP}

Examples:
  cairn metrics --filter kv_requests_total
  cairn metrics --output json | jq '.[] | select(.name=="process_resident_memory_bytes")'
`;

export const METRICS_OPTIONS = {
  ...HTTP_OPTIONS,
  filter: { type: "string" },
} as const satisfies CommandOptions;

export function metrics(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "metrics",
    METRICS_HELP,
    METRICS_OPTIONS,
    argv,
    io,
    async ({ values, positionals, globals }) => {
      expectPositionals(positionals, []);
      const endpoint = httpEndpoint(values, io.env);
      const res = await httpGet(endpoint, "/metrics", globals.timeoutMs);
      if ("error" in res) {
        io.stderr.write(`cairn metrics: unavailable: ${endpoint}: ${res.error}\n`);
        return EXIT.unavailable;
      }
      if (res.status !== 200) {
        io.stderr.write(`cairn metrics: HTTP ${res.status}: ${res.body.trim()}\n`);
        return EXIT.failed;
      }
      const filter = str(values, "filter");
      const samples = parseSamples(res.body).filter(
        (s) => filter === undefined || s.name.includes(filter),
      );
      if (globals.output === "json") writeJson(io, samples);
      else if (filter === undefined) io.stdout.write(res.body);
      else io.stdout.write(samples.map((s) => `${s.line}\n`).join(""));
      return EXIT.ok;
    },
    "http",
  );
}

interface Sample {
  name: string;
  labels: Record<string, string>;
  value: number;
  line: string;
}

/** The samples of Prometheus text format 0.0.4 (comments skipped). */
export function parseSamples(text: string): Sample[] {
  const out: Sample[] = [];
  for (const line of text.split("\n")) {
    if (line === "" || line.startsWith("#")) continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (m === null) continue;
    const labels: Record<string, string> = {};
    for (const l of (m[3] ?? "").matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g))
      labels[l[1] as string] = (l[2] as string).replace(/\\(.)/g, (_, c: string) =>
        c === "n" ? "\n" : c,
      );
    out.push({ name: m[1] as string, labels, value: Number(m[4]), line });
  }
  return out;
}

export const CLUSTER_HELP = `Usage: cairn cluster [--watch] [options]

Prints the cluster view (Meta.WatchCluster): members (with the replicas the cluster places on
each and the shards each leads) and every active shard with its leader, term and replicas.
A node knows the leaders of the shards it holds a replica of; with more nodes than the
replication factor, the leaders it does not know are asked of the other members (those that
do not answer within a second leave a shard's leader "(none)"). The first line names the
cluster and its version (JSON: "cluster_version"; each member's "build" is the highest version
its build runs: docs/operations.md, "Upgrading"; STATE adds ",build-N" to a member whose build
runs another version than the cluster's, and ",disk-full" to one whose disk is nearly full).
The epoch printed is the first node's view's (JSON: "epoch" and "node"; the other members'
in "merged_from"), which their leaders do not move. --watch keeps following the view, the
other members' beside it, and prints it again after each change (one JSON object per line
with --output json) until interrupted; it ends when the node it follows does. The endpoints
are tried in turn until one streams a view: a node that is down, or decommissioned (its view no
longer follows the cluster), is skipped.

Options:
  --watch                follow the view
${GLOBAL_HELP}

Examples:
  cairn cluster
  cairn cluster --watch --output json | jq -c '.shards | length'
`;

export const CLUSTER_OPTIONS = { watch: { type: "boolean" } } as const satisfies CommandOptions;

export function cluster(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "cluster",
    CLUSTER_HELP,
    CLUSTER_OPTIONS,
    argv,
    io,
    async ({ values, positionals, globals, client }) => {
      expectPositionals(positionals, []);
      const watch = values["watch"] === true;
      const controller = new AbortController();
      const stop = (): void => controller.abort();
      process.once("SIGINT", stop);
      process.once("SIGTERM", stop);
      // The first view must arrive within the deadline; a watch then waits as long as it runs.
      const timer = setTimeout(stop, globals.timeoutMs);
      let seen = 0;
      try {
        // Each endpoint in turn until one streams a view: a node down, or one whose view stopped
        // following the cluster (decommissioned), is skipped.
        const c = client({ routing: false });
        for (let tried = 0; ; tried++) {
          const endpoint = globals.endpoints[tried] as string;
          try {
            // The leaders this node does not know come from the other members' views.
            const views = watchMerged(
              (at, signal) => c.watchCluster({ signal, endpoint: at }),
              endpoint,
              controller.signal,
            );
            for await (const view of views) {
              seen++;
              clearTimeout(timer);
              if (globals.output === "json") writeJson(io, jsonView(view));
              else io.stdout.write(formatView(view, watch && seen > 1));
              if (!watch) break;
            }
            break;
          } catch (err) {
            if (seen > 0 || tried + 1 >= globals.endpoints.length || controller.signal.aborted)
              throw err;
          }
        }
      } finally {
        clearTimeout(timer);
        process.removeListener("SIGINT", stop);
        process.removeListener("SIGTERM", stop);
      }
      if (seen === 0) {
        io.stderr.write(
          `cairn cluster: unavailable: no cluster view within ${globals.timeoutMs} ms\n`,
        );
        return EXIT.unavailable;
      }
      return EXIT.ok;
    },
  );
}

function jsonView(v: MergedView): unknown {
  const leaders = leaderCounts(v);
  return {
    epoch: v.epoch,
    node: v.node,
    merged_from: v.others.map((o) => ({ node: o.node, epoch: o.epoch })),
    total_shards: v.totalShards,
    cluster_id: v.clusterId,
    cluster_version: v.clusterVersion,
    nodes: v.nodes.map((n) => ({
      id: n.id,
      rpc_addr: n.rpcAddr,
      http_addr: n.httpAddr,
      state: n.state,
      member_state: n.memberState,
      replicas: n.replicas,
      disk_full: n.diskFull,
      build: n.build,
      leaders: leaders.get(n.id) ?? 0,
    })),
    shards: v.shards.map((s) => ({
      id: s.id,
      leader: s.leader,
      replicas: s.replicas,
      term: s.term,
    })),
  };
}

function formatView(v: MergedView, separator: boolean): string {
  let out = separator ? "---\n" : "";
  const cluster =
    v.clusterId === "" ? "" : `cluster ${v.clusterId} (version ${v.clusterVersion}), `;
  // The epoch is the answering node's; leaders told by the other members' views do not move it.
  const from = v.node === "" ? [] : [`${v.node}'s view`];
  const others = v.others.length;
  if (others === 1) from.push("leaders also from 1 other member's view");
  else if (others > 1) from.push(`leaders also from ${others} other members' views`);
  const about = from.length === 0 ? "" : ` (${from.join(", ")})`;
  const leaders = leaderCounts(v);
  const unknown = v.shards.filter((s) => s.leader === "").length;
  const noLeader = unknown === 0 ? "" : `, ${unknown} with no leader known`;
  out += `${cluster}epoch ${v.epoch}${about}, ${v.totalShards} shards (${v.shards.length} active${noLeader})\n\nMEMBER\tSTATE\tGOSSIP\tREPLICAS\tLEADERS\tRPC\tHTTP\n`;
  for (const n of v.nodes) {
    // A member whose build runs another version than the cluster's (a rolling upgrade under
    // way, or a rollback) says so beside its state, as a full disk does.
    const build =
      n.memberState === "" || n.build === 0 || n.build === v.clusterVersion
        ? ""
        : `,build-${n.build}`;
    const state =
      n.memberState === "" ? "-" : `${n.memberState}${n.diskFull ? ",disk-full" : ""}${build}`;
    const replicas = n.memberState === "" ? "-" : String(n.replicas);
    const led = leaders.get(n.id) ?? 0;
    out += `${n.id}\t${state}\t${n.state}\t${replicas}\t${led}\t${n.rpcAddr}\t${n.httpAddr}\n`;
  }
  out += "\nSHARD\tLEADER\tTERM\tREPLICAS\n";
  for (const s of [...v.shards].sort((a, b) => a.id - b.id))
    out += `${s.id}\t${s.leader === "" ? "(none)" : s.leader}\t${s.term}\t${s.replicas.join(",")}\n`;
  return out;
}

export const SNAPSHOT_HELP = `Usage: cairn snapshot SHARD [options]

Takes a snapshot of SHARD on the node (the first of --endpoints) and compacts its Raft log.
Prints the snapshot's index, term and size.

${GLOBAL_HELP}

Examples:
  cairn snapshot 0
  cairn snapshot 17 --endpoints 10.0.0.5:7447 --output json
`;

export const TRANSFER_LEADER_HELP = `Usage: cairn transfer-leader SHARD NODE [options]

Moves SHARD's leadership to NODE, one of its replicas, through the node at the first of
--endpoints. In a cluster NODE becomes the shard's preferred leader (recorded in the cluster's
metadata), so leader spreading keeps it there, also after restarts; the node asked must hold a
replica of SHARD (another refuses, naming those that do). Prints the new leader.

${GLOBAL_HELP}

Examples:
  cairn transfer-leader 17 n2
  cairn transfer-leader 0 n3 --endpoints 10.0.0.5:7447 --output json
`;

/** transfer-leader and snapshot take the global flags only. */
export const TRANSFER_LEADER_OPTIONS = {} as const satisfies CommandOptions;
export const SNAPSHOT_OPTIONS = {} as const satisfies CommandOptions;

export function transferLeader(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "transfer-leader",
    TRANSFER_LEADER_HELP,
    TRANSFER_LEADER_OPTIONS,
    argv,
    io,
    async ({ positionals, globals, client }) => {
      expectPositionals(positionals, ["SHARD", "NODE"]);
      const shard = shardNumber(positionals[0] as string);
      const node = nodeArgument(positionals[1] as string);
      const leader = await client({ routing: false }).transferLeader(shard, node, {
        endpoint: globals.endpoints[0] as string,
      });
      if (globals.output === "json") writeJson(io, { shard_id: shard, leader });
      else io.stdout.write(`shard ${shard}: led by ${leader}\n`);
      return EXIT.ok;
    },
  );
}

/**
 * A NODE argument: a node id as `node_id` takes it. Another (an empty one: a script's unset
 * variable) is a usage error before anything is sent; it was sent, and a node down made it
 * "unavailable".
 */
function nodeArgument(text: string): string {
  if (!isNodeId(text))
    throw new UsageError(
      `NODE ${JSON.stringify(text)} is not a node id: 1 to 128 letters, digits, '.', '_' or '-', starting with a letter or digit`,
    );
  return text;
}

/** A SHARD argument: a shard number. */
function shardNumber(text: string): number {
  const shard = Number(text);
  if (!/^\d+$/.test(text) || !Number.isSafeInteger(shard) || shard > 0xffffffff)
    throw new UsageError(`SHARD must be a shard number, not ${JSON.stringify(text)}`);
  return shard;
}

export function snapshot(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "snapshot",
    SNAPSHOT_HELP,
    SNAPSHOT_OPTIONS,
    argv,
    io,
    async ({ positionals, globals, client }) => {
      expectPositionals(positionals, ["SHARD"]);
      const shard = shardNumber(positionals[0] as string);
      const res = await client({ routing: false }).snapshotShard(shard, {
        endpoint: globals.endpoints[0] as string,
      });
      if (globals.output === "json")
        writeJson(io, {
          shard_id: res.shardId,
          index: res.index,
          term: res.term,
          size_bytes: res.sizeBytes,
        });
      else
        io.stdout.write(
          `shard ${res.shardId}: snapshot at index ${res.index}, term ${res.term}, ${res.sizeBytes} bytes\n`,
        );
      return EXIT.ok;
    },
  );
}

export const NODE_HELP = `Usage: cairn node decommission NODE [--wait] [options]
       cairn node recommission NODE [options]
       cairn node remove NODE [options]
       cairn node status NODE [options]

Changes a member's standing in the cluster (cluster mode), through the first of --endpoints
that answers (the next when one is down, or has left the cluster):

  decommission NODE   moves every replica and leadership off NODE; the cluster marks it
                      decommissioned once none is left (then stop it and remove it). Refused
                      when fewer active members than the replication factor, or fewer with
                      room on their disk, would be left.
                      --wait follows it until then, printing the replicas left, their
                      pace and when the last should leave at it (and, after a minute
                      with none leaving, what a move needs); it ends with
                      exit code 5 if NODE stops decommissioning otherwise (recommissioned).
                      NODE down meanwhile stays decommissioning: its replicas move off
                      it without it.
  recommission NODE   cancels NODE's decommission under way: it is active again, and the
                      cluster evens replicas back onto it (those already moved off it are
                      not brought back at once). Refused once it is decommissioned: it has
                      left the cluster's metadata group, and comes back only as a new
                      member (an empty data directory).
  remove NODE         retires a dead or decommissioned member for good: its data directory
                      never serves again (a new machine joins with a new id, or with the
                      old id and an empty data directory, as a new member). A removed node
                      still running (decommissioned, or back from a pause) stops by itself
                      within seconds; one cut off from the others' gossip does not: stop it.
  status NODE         NODE's state and the replicas placed on it; changes nothing.

Options:
  --wait                 decommission: wait until NODE holds no replica (asked through NODE
                         itself, it follows through another member the view names), for as
                         long as that takes: --timeout bounds each call it makes; the node
                         it asks may not answer for 2 minutes (a restart) before it gives up
${GLOBAL_HELP}

Examples:
  cairn node decommission n2 --wait
  cairn node recommission n2
  cairn node remove n3 --output json
`;

/** How often \`node decommission --wait\` asks how many replicas are left. */
const DECOMMISSION_POLL_MS = 1_000;
/** How long \`--wait\` sees no replica leave before it says what a move needs. */
export const DECOMMISSION_STALL_MS = 60_000;
/** How long \`--wait\` goes on asking a node that does not answer (a restart) before it gives up. */
const DECOMMISSION_UNREACHABLE_MS = 120_000;

/** A member's standing, as Admin.DecommissionNode answers it. */
export interface Standing {
  readonly nodeId: string;
  readonly state: string;
  readonly replicas: number;
}

/** How fast replicas leave a member under \`--wait\`, and when the last would at that rate. */
export interface Pace {
  readonly perMinute: number;
  readonly etaMs: number;
}

/** How long \`--wait\` watches replicas leave before it gives a pace (a first move's is noise). */
export const PACE_AFTER_MS = 10_000;

/**
 * \`node decommission --wait\`: asks for the standing every \`everyMs\` while the member is
 * decommissioning, printing each change, with the pace since the wait began once PACE_AFTER_MS
 * passed and a replica left (a decommission of hundreds of replicas takes many minutes: the
 * operator sees when it should end); once \`stallMs\` pass with no replica leaving, says so
 * once (again after the next replica leaves and another stall). A poll that the node did not
 * answer (UnavailableError, DeadlineExceededError: restarting, say, during a decommission of
 * hours) is said once and asked again, for \`unreachableMs\` at most; its error is thrown then,
 * and at once any other. Resolves to the last standing: decommissioned, or whatever else ended
 * the decommission (recommissioned: active; dead; removed).
 */
export async function followDecommission(
  first: Standing,
  o: {
    readonly poll: () => Promise<Standing>;
    readonly print: (s: Standing, pace?: Pace) => void;
    readonly stalled: (s: Standing, ms: number) => void;
    /** The first poll of a run that the node did not answer. */
    readonly unreachable: (err: Error) => void;
    readonly everyMs: number;
    readonly stallMs: number;
    readonly unreachableMs: number;
    readonly sleep: (ms: number) => Promise<void>;
    readonly now: () => number;
  },
): Promise<Standing> {
  let standing = first;
  let since = o.now();
  const began = since;
  let warned = false;
  /** When the polls stopped being answered, or null while they are. */
  let unanswered: number | null = null;
  while (standing.state === "decommissioning") {
    await o.sleep(o.everyMs);
    let next: Standing;
    try {
      next = await o.poll();
    } catch (err) {
      const waitable = err instanceof UnavailableError || err instanceof DeadlineExceededError;
      if (!waitable) throw err;
      if (unanswered === null) {
        unanswered = o.now();
        o.unreachable(err);
      } else if (o.now() - unanswered >= o.unreachableMs) throw err;
      continue;
    }
    unanswered = null;
    if (next.replicas !== standing.replicas || next.state !== standing.state) {
      const pace = next.state === "decommissioning" ? paceOf(first, next, o.now() - began) : null;
      if (pace === null) o.print(next);
      else o.print(next, pace);
      since = o.now();
      warned = false;
    } else if (!warned && o.now() - since >= o.stallMs) {
      o.stalled(next, o.now() - since);
      warned = true;
    }
    standing = next;
  }
  return standing;
}

/**
 * The pace of replicas leaving, from \`first\` to \`now\` over \`elapsedMs\`: null before
 * PACE_AFTER_MS, or with none gone (a recommission put some back, say).
 */
export function paceOf(first: Standing, now: Standing, elapsedMs: number): Pace | null {
  const gone = first.replicas - now.replicas;
  if (elapsedMs < PACE_AFTER_MS || gone <= 0) return null;
  return { perMinute: (gone * 60_000) / elapsedMs, etaMs: (now.replicas * elapsedMs) / gone };
}

/** A duration as an operator reads an estimate: "about 40 s", "about 12 min", "about 2 h 5 min". */
export function roughly(ms: number): string {
  const s = Math.max(1, Math.round(ms / 1000));
  if (s < 90) return `about ${s} s`;
  const min = Math.round(s / 60);
  if (min < 120) return `about ${min} min`;
  return `about ${Math.floor(min / 60)} h ${min % 60} min`;
}

/** \`cairn node\`'s actions, and the client call each makes. */
const NODE_ACTIONS = {
  decommission: (c: CairnClient, id: string, endpoint: string) =>
    c.decommissionNode(id, { endpoint }),
  recommission: (c: CairnClient, id: string, endpoint: string) =>
    c.recommissionNode(id, { endpoint }),
  remove: (c: CairnClient, id: string, endpoint: string) => c.removeNode(id, { endpoint }),
  status: (c: CairnClient, id: string, endpoint: string) => c.getNode(id, { endpoint }),
} as const;

/**
 * The address to follow member \`id\`'s decommission through: \`endpoint\`, unless its view
 * says that is \`id\` itself; then another member's that holds replicas and gossip has alive
 * (replicaHolders), or \`endpoint\` still when the view names none or does not come within
 * \`timeoutMs\`.
 */
async function anotherMember(
  c: CairnClient,
  id: string,
  endpoint: string,
  timeoutMs: number,
): Promise<string> {
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), timeoutMs);
  try {
    for await (const view of c.watchCluster({ signal: controller.signal, endpoint })) {
      const self = view.nodes.find((n) => n.id === id);
      if (self === undefined || !sameAddress(self.rpcAddr, endpoint)) return endpoint;
      return replicaHolders(view, id)[0]?.rpcAddr ?? endpoint;
    }
  } catch {
    // No view: the endpoint it is.
  } finally {
    clearTimeout(timer);
    controller.abort();
  }
  return endpoint;
}

/**
 * A member's standing for \`--wait\`, changing nothing (Admin.GetNode). A node of an earlier
 * build does not have GetNode (UNIMPLEMENTED): DecommissionNode answers the standing there, and
 * proposes nothing while the member is decommissioning.
 */
async function standingNow(c: CairnClient, id: string, endpoint: string): Promise<Standing> {
  try {
    return await c.getNode(id, { endpoint });
  } catch (err) {
    if (err instanceof ServerError && err.grpcCode === status.UNIMPLEMENTED)
      return c.decommissionNode(id, { endpoint });
    throw err;
  }
}

export const NODE_OPTIONS = { wait: { type: "boolean" } } as const satisfies CommandOptions;

export function node(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "node",
    NODE_HELP,
    NODE_OPTIONS,
    argv,
    io,
    async ({ values, positionals, globals, client }) => {
      expectPositionals(positionals, ["ACTION", "NODE"]);
      const action = positionals[0] as string;
      if (!Object.hasOwn(NODE_ACTIONS, action))
        throw new UsageError(
          `ACTION must be ${Object.keys(NODE_ACTIONS).join(", ")}, not ${JSON.stringify(action)}`,
        );
      const id = nodeArgument(positionals[1] as string);
      const wait = values["wait"] === true;
      if (action !== "decommission" && wait) throw new UsageError("--wait goes with decommission");
      const c = client({ routing: false });
      const endpoint = globals.endpoints[0] as string;
      const print = (s: Standing, pace?: Pace): void => {
        if (globals.output === "json")
          writeJson(io, {
            node_id: s.nodeId,
            state: s.state,
            replicas: s.replicas,
            ...(pace === undefined
              ? {}
              : {
                  replicas_per_minute: Math.round(pace.perMinute * 10) / 10,
                  eta_seconds: Math.round(pace.etaMs / 1000),
                }),
          });
        else io.stdout.write(standingLine(action, s, pace));
      };
      let standing = await NODE_ACTIONS[action as keyof typeof NODE_ACTIONS](c, id, endpoint);
      print(standing);
      if (!wait) return EXIT.ok;
      // Asked through the member leaving, the wait failed midway: its answers are synced with
      // the meta group through its own replica of shard 0, which was removed, then added back
      // as a learner, its syncs failing in between (a voter of shard 0 that leaves is now
      // demoted in one change instead: src/node/replicas.ts, step 4), and which is removed for
      // good once the member is decommissioned. It asks another member, when the view names
      // one.
      const through = await anotherMember(c, id, endpoint, globals.timeoutMs);
      standing = await followDecommission(standing, {
        poll: () => standingNow(c, id, through),
        print,
        stalled: (s, ms) =>
          io.stderr.write(
            `cairn node: no replica has left ${s.nodeId} in ${Math.round(ms / 1000)} s (${s.replicas} left): a move needs an active member that has room on its disk and does not hold the shard yet (cairn cluster: STATE), and cluster.rebalance.max_moves above 0; still waiting\n`,
          ),
        everyMs: DECOMMISSION_POLL_MS,
        unreachable: (err) =>
          io.stderr.write(unreachableLine(through, err, DECOMMISSION_UNREACHABLE_MS)),
        stallMs: DECOMMISSION_STALL_MS,
        unreachableMs: DECOMMISSION_UNREACHABLE_MS,
        sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
        now: () => performance.now(),
      });
      if (standing.state === "decommissioned" || standing.state === "removed") return EXIT.ok;
      io.stderr.write(`cairn node: ${decommissionEnded(standing)}\n`);
      return EXIT.failed;
    },
  );
}

/**
 * What \`--wait\` says when the node it asks stops answering: the decommission does not depend
 * on it, and how long it asks again before giving up (exit code 3).
 */
export function unreachableLine(through: string, err: Error, giveUpMs: number): string {
  return `cairn node: ${through} does not answer (${err.message}); the decommission goes on in the cluster without it: asking again for ${Math.round(giveUpMs / 1000)} s at most (Ctrl-C stops waiting, not the decommission)\n`;
}

/**
 * \`cairn node ACTION\`'s line for a standing. What decommission and remove print is what is left
 * to move off a member leaving; a member that is not (recommissioned under a \`--wait\`, or dead)
 * just holds its replicas.
 */
export function standingLine(action: string, s: Standing, pace?: Pace): string {
  const leaving = ["decommissioning", "decommissioned", "removed"].includes(s.state);
  const left = (action === "decommission" || action === "remove") && leaving ? " left" : "";
  const rate =
    pace === undefined
      ? ""
      : ` (${pace.perMinute.toFixed(1)} a minute: ${roughly(pace.etaMs)} to go at this pace)`;
  return `${s.nodeId}: ${s.state}, ${s.replicas} replica(s)${left}${rate}\n`;
}

/** What \`--wait\` says when the member stopped decommissioning otherwise than by finishing. */
function decommissionEnded(s: Standing): string {
  const node = s.nodeId;
  switch (s.state) {
    case "active":
      return `${node} is active again: its decommission was cancelled (cairn node recommission), or it was marked dead and came back; decommission it again if it is still to leave`;
    case "dead":
      return `${node} is dead (unreachable for cluster.dead_after_ms) before its decommission ended: its replicas are re-created on the other members; once it holds none, retire it with cairn node remove ${node} (should it come back first, it is active again)`;
    default:
      return `${node} is ${s.state}: its decommission ended unfinished`;
  }
}
