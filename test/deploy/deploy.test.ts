/**
 * The deployment files of deploy/ against the real node, with no external tool (promtool,
 * systemd-analyze, hadolint and docker run in `npm run check:deploy`):
 *
 * - the Dockerfile's exact entry command (ENTRYPOINT + CMD, with the ENV it sets) run on the
 *   host: it refuses to start without advertise addresses (exit 2), serves /health/quick, its
 *   HEALTHCHECK command passes while it runs and fails once it is gone, SIGTERM exits 0;
 * - every metric the Grafana dashboard and the alert rules query is exported by that live node's
 *   /metrics (or is Prometheus's own `up`);
 * - the systemd unit, its example config (loaded by the real config loader), the scrape config
 *   and the alert unit tests agree with the code's ports, paths and endpoints.
 */
import assert from "node:assert/strict";
import { type ChildProcess, spawn } from "node:child_process";
import { mkdtempSync, readFileSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { parse as parseYaml } from "yaml";
import { loadConfig, sameAddress } from "../../src/config/index.ts";
import { cleanEnv, ROOT } from "../support/server-process.ts";
import { freePort } from "../support/cluster-process.ts";

const DEPLOY = join(ROOT, "deploy");
const read = (rel: string): string => readFileSync(join(DEPLOY, rel), "utf8");

/** Metrics Prometheus writes itself for every target; allowed in queries besides the node's. */
const PROMETHEUS_SERIES = new Set(["up"]);

/** The 13 catalogue families (docs/operations.md): the dashboard shows every one. */
const CATALOGUE = [
  "kv_requests_total",
  "kv_request_duration_ms",
  "lsm_compaction_duration_ms",
  "lsm_memtable_size_bytes",
  "lsm_sstable_count",
  "raft_leader_changes_total",
  "raft_commit_index",
  "raft_term",
  "swim_cluster_size",
  "swim_failed_members_total",
  "swim_gossip_latency_ms",
  "process_cpu_seconds_total",
  "process_resident_memory_bytes",
];

// ---------------------------------------------------------------------------------------------
// Dockerfile parsing (just what the image uses: ARG, ENV, EXPOSE, VOLUME, USER, HEALTHCHECK,
// ENTRYPOINT, CMD; continuation lines joined, comments dropped).

interface Dockerfile {
  readonly instructions: readonly { readonly op: string; readonly args: string }[];
}

function parseDockerfile(text: string): Dockerfile {
  const instructions: { op: string; args: string }[] = [];
  let pending = "";
  for (const raw of text.split("\n")) {
    const line = raw.trim();
    if (pending === "" && (line === "" || line.startsWith("#"))) continue;
    if (pending !== "" && line.startsWith("#")) continue;
    pending += (pending === "" ? "" : " ") + line.replace(/\\$/, "").trim();
    if (line.endsWith("\\")) continue;
    const m = /^([A-Z]+)\s+(.*)$/.exec(pending);
    assert.ok(m?.[1] !== undefined && m[2] !== undefined, `unparsed Dockerfile line: ${pending}`);
    instructions.push({ op: m[1], args: m[2] });
    pending = "";
  }
  return { instructions };
}

function lastArgs(df: Dockerfile, op: string): string {
  const found = df.instructions.filter((i) => i.op === op).at(-1);
  assert.ok(found, `Dockerfile has no ${op}`);
  return found.args;
}

/** ENV of the final stage (after its FROM), `KEY=value` pairs. */
function finalStageEnv(df: Dockerfile): Record<string, string> {
  const lastFrom = df.instructions.map((i) => i.op).lastIndexOf("FROM");
  const env: Record<string, string> = {};
  for (const i of df.instructions.slice(lastFrom)) {
    if (i.op !== "ENV") continue;
    for (const pair of i.args.split(/\s+/)) {
      const eq = pair.indexOf("=");
      assert.ok(eq > 0, `ENV in KEY=value form: ${pair}`);
      env[pair.slice(0, eq)] = pair.slice(eq + 1);
    }
  }
  return env;
}

function execForm(args: string): string[] {
  const parsed = JSON.parse(args) as unknown;
  assert.ok(
    Array.isArray(parsed) && parsed.every((a) => typeof a === "string"),
    `exec form: ${args}`,
  );
  return parsed as string[];
}

// ---------------------------------------------------------------------------------------------
// PromQL: the metric names an expression selects. Strings, label matchers, range/subquery
// brackets, grouping label lists and Grafana variables are removed; what is left that looks like
// an identifier and is not a function call, keyword or number is a metric name.

const PROMQL_KEYWORDS = new Set([
  "by",
  "without",
  "on",
  "ignoring",
  "group_left",
  "group_right",
  "bool",
  "and",
  "or",
  "unless",
  "offset",
  "inf",
  "nan",
]);

export function metricNames(expr: string): Set<string> {
  const stripped = expr
    .replace(/"(?:[^"\\]|\\.)*"/g, '""')
    .replace(/\{[^}]*\}/g, " ")
    .replace(/\[[^\]]*\]/g, " ")
    .replace(/\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)/g, " ")
    .replace(/\$\{?\w+\}?/g, " ");
  const names = new Set<string>();
  for (const m of stripped.matchAll(/[A-Za-z_:][A-Za-z0-9_:]*(?=\s*(\()?)/g)) {
    const name = m[0];
    if (m[1] !== undefined) continue; // a function call
    if (PROMQL_KEYWORDS.has(name.toLowerCase())) continue;
    if (/^[0-9]/.test(name)) continue;
    names.add(name);
  }
  return names;
}

/** Series names of a text exposition: counters/gauges by name, histograms by their 3 series. */
function exportedSeries(exposition: string): { series: Set<string>; families: Set<string> } {
  const series = new Set<string>();
  const families = new Set<string>();
  for (const line of exposition.split("\n")) {
    const m = /^# TYPE (\S+) (\S+)$/.exec(line);
    if (m?.[1] === undefined) continue;
    families.add(m[1]);
    if (m[2] === "histogram") {
      for (const suffix of ["_bucket", "_sum", "_count"]) series.add(m[1] + suffix);
    } else if (m[2] === "summary") {
      for (const suffix of ["", "_sum", "_count"]) series.add(m[1] + suffix);
    } else {
      series.add(m[1]);
    }
  }
  return { series, families };
}

// ---------------------------------------------------------------------------------------------

function run(
  argv: readonly string[],
  env: NodeJS.ProcessEnv,
): { proc: ChildProcess; exited: Promise<number | null>; stderr: () => string } {
  const [cmd, ...args] = argv;
  assert.ok(cmd !== undefined);
  const proc = spawn(cmd, args, { cwd: ROOT, env, stdio: ["ignore", "ignore", "pipe"] });
  let stderr = "";
  proc.stderr?.on("data", (d: Buffer) => (stderr += d.toString()));
  const exited = new Promise<number | null>((resolve) =>
    proc.once("exit", (code, signal) => resolve(code ?? (signal === null ? null : -1))),
  );
  return { proc, exited, stderr: () => stderr };
}

/** The image's command on this host: `node` is this Node.js, /app/ is the repository. */
function onHost(argv: readonly string[]): string[] {
  return argv.map((a, i) =>
    i === 0 && a === "node" ? process.execPath : a.replace(/^\/app\//, `${ROOT}/`),
  );
}

describe("deploy/", () => {
  const dockerfile = parseDockerfile(read("Dockerfile"));
  const imageEnv = finalStageEnv(dockerfile);
  const entry = [
    ...execForm(lastArgs(dockerfile, "ENTRYPOINT")),
    ...execForm(lastArgs(dockerfile, "CMD")),
  ];
  const healthcheck = (() => {
    const m = /^(?:--\S+\s+)*CMD\s+(\[.*\])$/.exec(lastArgs(dockerfile, "HEALTHCHECK"));
    assert.ok(m?.[1] !== undefined, "HEALTHCHECK CMD in exec form");
    return execForm(m[1]);
  })();

  let dataDir = "";
  let node: ReturnType<typeof run> | undefined;
  let hostEnv: NodeJS.ProcessEnv = {};
  let httpPort = 0;
  let exposition = "";

  before(async () => {
    dataDir = mkdtempSync(join(tmpdir(), "cairn-deploy-"));
    const rpcPort = await freePort("0.0.0.0");
    httpPort = await freePort("0.0.0.0");
    // The image's ENV, with the host's free ports and a temporary data directory.
    hostEnv = cleanEnv({
      ...imageEnv,
      CAIRN_DATA_DIR: dataDir,
      CAIRN_RPC_ADDR: `0.0.0.0:${rpcPort}`,
      CAIRN_HTTP_ADDR: `0.0.0.0:${httpPort}`,
    });
  });

  after(async () => {
    if (node !== undefined && node.proc.exitCode === null && node.proc.signalCode === null) {
      node.proc.kill("SIGKILL");
      await node.exited;
    }
    rmSync(dataDir, { recursive: true, force: true });
  });

  describe("Dockerfile", () => {
    it("builds on the Node.js that package.json pins, runs as non-root, keeps data on a volume", () => {
      const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
        devDependencies: Record<string, string>;
      };
      const arg = lastArgs(dockerfile, "ARG");
      const m = /^NODE_IMAGE=node:(\d+\.\d+\.\d+)-bookworm-slim$/.exec(arg);
      assert.ok(m, `ARG NODE_IMAGE=node:<version>-bookworm-slim, got ${arg}`);
      assert.equal(m[1], pkg.devDependencies["node"], "base image tag = the pinned node version");
      const froms = dockerfile.instructions.filter((i) => i.op === "FROM").map((i) => i.args);
      assert.ok(froms.length >= 2, "multi-stage");
      assert.ok(froms.every((f) => f.startsWith("${NODE_IMAGE}")));
      assert.match(lastArgs(dockerfile, "RUN"), /useradd/);
      assert.ok(
        dockerfile.instructions.some((i) => i.op === "RUN" && /npm ci --omit=dev/.test(i.args)),
      );
      const user = lastArgs(dockerfile, "USER");
      assert.ok(!/^(0|root)(:|$)/.test(user), `non-root USER, got ${user}`);
      assert.deepEqual(JSON.parse(lastArgs(dockerfile, "VOLUME")), ["/var/lib/cairn"]);
      assert.equal(imageEnv["CAIRN_DATA_DIR"], "/var/lib/cairn");
      assert.deepEqual(lastArgs(dockerfile, "EXPOSE").split(/\s+/).sort(), [
        "7447/tcp",
        "7447/udp",
        "8080/tcp",
      ]);
      assert.equal(imageEnv["CAIRN_RPC_ADDR"], "0.0.0.0:7447");
      assert.equal(imageEnv["CAIRN_HTTP_ADDR"], "0.0.0.0:8080");
      // Exec form with node as PID 1: no shell in between to swallow SIGTERM.
      assert.equal(entry[0], "node");
      // V8's pretenuring off, as bin/cairn runs a node (NODE_OPTIONS cannot carry that flag).
      assert.deepEqual(entry.slice(1), [
        "--no-allocation-site-pretenuring",
        "/app/src/cli/main.ts",
        "serve",
      ]);
      assert.ok(
        readFileSync(join(ROOT, "bin", "cairn"), "utf8").includes(
          '"$node" $semi --no-allocation-site-pretenuring ',
        ),
        "bin/cairn runs node with the same flag",
      );
      assert.equal(lastArgs(dockerfile, "STOPSIGNAL"), "SIGTERM");
      assert.equal(healthcheck[0], "node");
      assert.ok(healthcheck.join(" ").includes("/health/quick"));
    });

    it("its entry command refuses to bind 0.0.0.0 without advertise addresses (exit 2)", async () => {
      const p = run(onHost(entry), hostEnv);
      assert.equal(await p.exited, 2);
      assert.match(p.stderr(), /advertise_rpc_addr: must be set/);
      assert.match(p.stderr(), /advertise_http_addr: must be set/);
    });

    it("its entry command serves /health/quick, passes HEALTHCHECK, and exits 0 on SIGTERM", async () => {
      const env = {
        ...hostEnv,
        CAIRN_ADVERTISE_RPC_ADDR: `127.0.0.1:${hostEnv["CAIRN_RPC_ADDR"]?.split(":")[1]}`,
        CAIRN_ADVERTISE_HTTP_ADDR: `127.0.0.1:${httpPort}`,
      };
      const probe = async (): Promise<number | null> => run(onHost(healthcheck), env).exited;
      // Nothing listens yet: the health check fails.
      assert.equal(await probe(), 1);
      node = run(onHost(entry), env);
      let status = 0;
      for (let i = 0; i < 150 && status !== 200; i++) {
        if (node.proc.exitCode !== null) break;
        status = await fetch(`http://127.0.0.1:${httpPort}/health/quick`).then(
          (r) => r.status,
          () => 0,
        );
        if (status !== 200) await new Promise((r) => setTimeout(r, 100));
      }
      assert.equal(status, 200, `no 200 from /health/quick; stderr: ${node.stderr()}`);
      assert.equal(await probe(), 0, "HEALTHCHECK passes while the node serves");
      const res = await fetch(`http://127.0.0.1:${httpPort}/metrics`);
      assert.equal(res.status, 200);
      exposition = await res.text();
      node.proc.kill("SIGTERM");
      assert.equal(await node.exited, 0, `exit code after SIGTERM; stderr: ${node.stderr()}`);
      assert.equal(await probe(), 1, "HEALTHCHECK fails once the node is gone");
    });
  });

  describe("metrics used by the dashboard and the alerts", () => {
    const exported = (): ReturnType<typeof exportedSeries> => {
      assert.ok(exposition !== "", "the live node's /metrics was fetched");
      return exportedSeries(exposition);
    };

    it("the live node exports the 13 catalogue families", () => {
      const { families } = exported();
      for (const f of CATALOGUE) assert.ok(families.has(f), `missing family ${f}`);
    });

    it("metricNames() finds names and skips functions, labels, keywords and variables", () => {
      assert.deepEqual(
        [
          ...metricNames(
            'histogram_quantile(0.99, sum by (operation, le) (rate(kv_request_duration_ms_bucket{job=~"$job", status="success"}[$__rate_interval]))) > 100 and on (instance) up == 1',
          ),
        ].sort(),
        ["kv_request_duration_ms_bucket", "up"],
      );
    });

    it("the Grafana dashboard is valid and queries only exported metrics, covering the catalogue", () => {
      const dash = JSON.parse(read("grafana/cairn.json")) as {
        schemaVersion: number;
        uid: string;
        title: string;
        panels: {
          id: number;
          type: string;
          title: string;
          targets?: { expr: string }[];
        }[];
        templating: { list: { name: string; query: unknown }[] };
      };
      assert.ok(dash.schemaVersion >= 36, `schemaVersion ${dash.schemaVersion}`);
      assert.equal(dash.uid, "cairn-overview");
      const ids = dash.panels.map((p) => p.id);
      assert.equal(new Set(ids).size, ids.length, "panel ids are unique");
      const { series } = exported();
      const used = new Set<string>();
      const queries: string[] = [];
      for (const p of dash.panels) {
        if (p.type === "row") continue;
        assert.ok(p.targets !== undefined && p.targets.length > 0, `panel ${p.title} has queries`);
        for (const t of p.targets) queries.push(t.expr);
      }
      for (const v of dash.templating.list) {
        const q = v.query as { query?: string } | string;
        if (typeof q === "object" && q.query !== undefined) {
          queries.push(q.query.replace(/^label_values\((.*),\s*\w+\)$/, "$1"));
        }
      }
      for (const expr of queries) {
        for (const name of metricNames(expr)) {
          assert.ok(
            series.has(name) || PROMETHEUS_SERIES.has(name),
            `dashboard query uses ${name}, which the node does not export: ${expr}`,
          );
          used.add(name.replace(/_(bucket|sum|count)$/, ""));
          used.add(name);
        }
      }
      for (const f of CATALOGUE) assert.ok(used.has(f), `the dashboard shows no ${f}`);
    });

    it("the alert rules parse, are documented, and query only exported metrics", () => {
      const rules = parseYaml(read("prometheus/alerts.yaml")) as {
        groups: {
          name: string;
          rules: {
            alert: string;
            expr: string;
            for?: string;
            labels: Record<string, string>;
            annotations: Record<string, string>;
          }[];
        }[];
      };
      const { series } = exported();
      const names: string[] = [];
      for (const g of rules.groups) {
        for (const r of g.rules) {
          names.push(r.alert);
          assert.match(r.alert, /^Cairn[A-Za-z0-9]+$/);
          assert.ok(["page", "ticket"].includes(r.labels["severity"] ?? ""), r.alert);
          assert.ok(r.annotations["summary"] && r.annotations["description"], r.alert);
          for (const name of metricNames(r.expr)) {
            assert.ok(
              series.has(name) || PROMETHEUS_SERIES.has(name),
              `alert ${r.alert} uses ${name}, which the node does not export`,
            );
          }
        }
      }
      // The contract's alerts: node down, no leader, compaction/L0 stalls, SWIM churn,
      // error ratio, p99 latency.
      for (const a of [
        "CairnNodeDown",
        "CairnShardNoLeader",
        "CairnL0CompactionStall",
        "CairnCompactionErrors",
        "CairnSwimMembersFailing",
        "CairnHighErrorRatio",
        "CairnHighP99Latency",
      ]) {
        assert.ok(names.includes(a), `missing alert ${a}`);
      }
      // promtool unit tests exist for every alert (they run in npm run check:deploy).
      const tests = parseYaml(read("prometheus/alerts.test.yaml")) as {
        rule_files: string[];
        tests: { alert_rule_test: { alertname: string; exp_alerts: unknown[] }[] }[];
      };
      assert.deepEqual(tests.rule_files, ["alerts.yaml"]);
      const firing = new Set<string>();
      for (const t of tests.tests) {
        for (const a of t.alert_rule_test) if (a.exp_alerts.length > 0) firing.add(a.alertname);
      }
      assert.deepEqual([...firing].sort(), [...names].sort(), "a firing test for every alert");
      // deploy/README.md, "Prometheus and Grafana", counts the rules and names each one.
      const readme = read("README.md");
      const count = /`alerts\.yaml` \((\d+) rules/.exec(readme);
      assert.equal(Number(count?.[1]), names.length, "deploy/README.md: `alerts.yaml` (N rules");
      for (const a of names) assert.ok(readme.includes(`\`${a}\``), `deploy/README.md names ${a}`);
    });

    it("the scrape config scrapes 3 nodes' HTTP port every 15 s and loads the rules", () => {
      const prom = parseYaml(read("prometheus/prometheus.yaml")) as {
        global: { scrape_interval: string };
        rule_files: string[];
        scrape_configs: {
          job_name: string;
          metrics_path: string;
          static_configs: { targets: string[] }[];
        }[];
      };
      assert.equal(prom.global.scrape_interval, "15s");
      assert.deepEqual(prom.rule_files, ["alerts.yaml"]);
      const job = prom.scrape_configs.find((j) => j.job_name === "cairn");
      assert.ok(job);
      assert.equal(job.metrics_path, "/metrics");
      const targets = job.static_configs.flatMap((s) => s.targets);
      assert.equal(targets.length, 3);
      for (const t of targets) assert.match(t, /:8080$/);
    });
  });

  describe("systemd", () => {
    const unit = read("systemd/cairn.service");
    const directive = (name: string): string[] =>
      [...unit.matchAll(new RegExp(`^${name}=(.*)$`, "gm"))].map((m) => m[1] ?? "");

    it("the unit has the limits, restart policy, user and hardening operators expect", () => {
      assert.deepEqual(directive("LimitNOFILE"), ["65536"]);
      assert.deepEqual(directive("Restart"), ["on-failure"]);
      assert.deepEqual(directive("RestartPreventExitStatus"), ["2"]);
      assert.deepEqual(directive("User"), ["cairn"]);
      assert.deepEqual(directive("ProtectSystem"), ["strict"]);
      assert.deepEqual(directive("ReadWritePaths"), ["/var/lib/cairn"]);
      assert.deepEqual(directive("NoNewPrivileges"), ["yes"]);
      assert.deepEqual(directive("ExecStart"), [
        "/opt/cairn/bin/cairn serve --config /etc/cairn/cairn.yaml",
      ]);
      assert.match(read("systemd/cairn.sysusers"), /^u cairn - .* \/var\/lib\/cairn /m);
    });

    it("its example config loads with the real loader and fits the unit", () => {
      const config = loadConfig({ flags: { config: join(DEPLOY, "systemd/cairn.yaml") }, env: {} });
      assert.equal(config.data_dir, "/var/lib/cairn");
      assert.equal(config.rpc_addr, "0.0.0.0:7447");
      assert.equal(config.http_addr, "0.0.0.0:8080");
      assert.match(config.advertise_rpc_addr, /:7447$/);
      // Every member is given the same seeds in the same order, and only the node that
      // seed_nodes[0] names founds the cluster: a list of "the other members" names no node's
      // own address first, and the cluster is never founded. The example is that first node.
      const seeds = config.cluster.seed_nodes;
      assert.equal(seeds.length, config.cluster.bootstrap_expect, "the whole 3-node cluster");
      assert.ok(
        seeds[0] !== undefined && sameAddress(seeds[0], config.advertise_rpc_addr),
        `seed_nodes[0] is this node (the first seed), got ${seeds.join(",")}`,
      );
      const stop = /^(\d+)s$/.exec(directive("TimeoutStopSec")[0] ?? "");
      assert.ok(stop?.[1] !== undefined, "TimeoutStopSec=<n>s");
      assert.ok(
        Number(stop[1]) * 1000 >= config.shutdown.drain_timeout_ms + 10_000,
        "TimeoutStopSec leaves 10 s beyond the drain timeout",
      );
    });
  });
});
