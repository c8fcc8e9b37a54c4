/**
 * `npm run check:deploy`: every checker of deploy/ this machine has, each command printed with
 * its output and a verdict. A missing tool is reported loudly (MISSING) but does not fail the
 * run; a tool that finds a problem does (exit 1).
 *
 *   promtool check rules / test rules / check config   (Debian: apt-get install prometheus)
 *   promtool check rules on the dashboard queries      (as recording rules)
 *   promtool check metrics on a live node's /metrics    (bin/cairn serve on free ports)
 *   systemd-analyze verify deploy/systemd/cairn.service (ExecStart pointed at this checkout)
 *   hadolint deploy/Dockerfile                          (if installed)
 *   docker build + run with the HEALTHCHECK, docker stop (if a daemon answers)
 *   docker compose config on deploy/compose.yaml      (the plugin, else docker-compose v1)
 *   kubectl kustomize deploy/k8s, then kubeconform     (each if installed)
 *
 * Environment: CAIRN_DEPLOY_BASE_IMAGE overrides the Dockerfile's NODE_IMAGE build argument
 * (e.g. a locally imported stand-in when the registry of the official image is unreachable);
 * CAIRN_DEPLOY_SKIP_DOCKER=1 skips the docker step.
 */
import { spawnSync } from "node:child_process";
import { copyFileSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { ROOT, startServer } from "../test/support/server-process.ts";

const DEPLOY = join(ROOT, "deploy");
type Verdict = "PASS" | "FAIL" | "MISSING" | "SKIPPED";
const results: { name: string; verdict: Verdict; note: string }[] = [];

function record(name: string, verdict: Verdict, note = ""): void {
  results.push({ name, verdict, note });
  const mark = verdict === "PASS" ? "ok" : verdict === "FAIL" ? "FAILED" : `*** ${verdict} ***`;
  process.stdout.write(`   -> ${mark}${note === "" ? "" : `: ${note}`}\n\n`);
}

interface Ran {
  readonly status: number | null;
  readonly out: string;
  readonly missing: boolean;
}

function sh(
  cmd: string,
  args: readonly string[],
  opts: { cwd?: string; input?: string; env?: NodeJS.ProcessEnv; quiet?: boolean } = {},
): Ran {
  process.stdout.write(
    `$ ${opts.cwd !== undefined && opts.cwd !== ROOT ? `(cd ${opts.cwd}) ` : ""}${[cmd, ...args].join(" ")}\n`,
  );
  const r = spawnSync(cmd, [...args], {
    cwd: opts.cwd ?? ROOT,
    input: opts.input,
    env: opts.env ?? process.env,
    encoding: "utf8",
    maxBuffer: 64 * 1024 * 1024,
  });
  const missing = (r.error as NodeJS.ErrnoException | undefined)?.code === "ENOENT";
  const out = `${r.stdout ?? ""}${r.stderr ?? ""}`.trimEnd();
  if (missing) process.stdout.write(`   ${cmd}: not installed\n`);
  else if (out !== "" && opts.quiet !== true) {
    process.stdout.write(`${out.replace(/^/gm, "   | ")}\n`);
  }
  if (!missing) process.stdout.write(`   (exit ${r.status ?? r.signal})\n`);
  return { status: r.status, out, missing };
}

function simple(name: string, cmd: string, args: readonly string[], cwd?: string): Ran {
  const r = sh(cmd, args, cwd === undefined ? {} : { cwd });
  if (r.missing) record(name, "MISSING", `${cmd} not installed`);
  else record(name, r.status === 0 ? "PASS" : "FAIL");
  return r;
}

/**
 * The names the operations contract fixes and promtool's linter dislikes (units abbreviated as
 * `_ms`; a gauge ending `_count`). Any other finding fails.
 */
const CONTRACT_LINT = [
  "kv_request_duration_ms metric names should not contain abbreviated units",
  "lsm_compaction_duration_ms metric names should not contain abbreviated units",
  "swim_gossip_latency_ms metric names should not contain abbreviated units",
  'lsm_sstable_count non-histogram and non-summary metrics should not have "_count" suffix',
];

async function promtoolMetrics(): Promise<void> {
  const name = "promtool check metrics (live node)";
  if (spawnSync("promtool", ["--version"]).error !== undefined) {
    record(name, "MISSING", "promtool not installed (apt-get install prometheus)");
    return;
  }
  const dataDir = mkdtempSync(join(tmpdir(), "cairn-check-deploy-"));
  process.stdout.write(`$ bin/cairn serve --data-dir ${dataDir} (127.0.0.1, free ports)\n`);
  const server = await startServer({ dataDir });
  try {
    const res = await fetch(`http://${server.http}/metrics`);
    const body = await res.text();
    process.stdout.write(
      `   GET http://${server.http}/metrics -> ${res.status} ${res.headers.get("content-type")}, ${body.split("\n").length} lines\n`,
    );
    const r = sh("promtool", ["check", "metrics"], { input: body });
    const findings = r.out.split("\n").filter((l) => l.trim() !== "");
    const unexpected = findings.filter((l) => !CONTRACT_LINT.includes(l.trim()));
    if (r.status === 0) record(name, "PASS");
    else if (r.status === 3 && unexpected.length === 0) {
      record(
        name,
        "PASS",
        `exit 3 = lint only, and only the ${findings.length} names fixed by the operations contract ` +
          `(§4.4) — accepted; no parse error`,
      );
    } else record(name, "FAIL", unexpected.join("; "));
  } finally {
    const exit = await server.stop("SIGTERM");
    process.stdout.write(`   node stopped: exit ${exit.code ?? exit.signal}\n\n`);
    rmSync(dataDir, { recursive: true, force: true });
  }
}

function systemdVerify(): void {
  const name = "systemd-analyze verify cairn.service";
  const dir = mkdtempSync(join(tmpdir(), "cairn-unit-"));
  try {
    // verify insists that ExecStart's binary exists: point it at this checkout's bin/cairn
    // (the only change) in a temporary copy that keeps the unit's name.
    const unit = readFileSync(join(DEPLOY, "systemd/cairn.service"), "utf8");
    const patched = unit.replace(
      "ExecStart=/opt/cairn/bin/cairn ",
      `ExecStart=${join(ROOT, "bin/cairn")} `,
    );
    if (patched === unit) {
      record(name, "FAIL", "ExecStart=/opt/cairn/bin/cairn not found in the unit");
      return;
    }
    writeFileSync(join(dir, "cairn.service"), patched);
    const r = sh("systemd-analyze", ["verify", join(dir, "cairn.service")]);
    // verify exits 0 on unknown keys or unparsable values (it only warns): any output fails.
    if (r.missing)
      record(name, "MISSING", "systemd-analyze not installed (apt-get install systemd)");
    else if (r.status === 0 && r.out === "") record(name, "PASS", "no warnings");
    else record(name, "FAIL", "warnings or errors above");
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
}

function dockerfileLint(): void {
  simple("hadolint deploy/Dockerfile", "hadolint", [join(DEPLOY, "Dockerfile")]);
}

function docker(): void {
  const name = "docker build + run (HEALTHCHECK, SIGTERM)";
  if (process.env["CAIRN_DEPLOY_SKIP_DOCKER"] === "1") {
    record(name, "SKIPPED", "CAIRN_DEPLOY_SKIP_DOCKER=1");
    return;
  }
  const info = sh("docker", ["info", "--format", "{{.ServerVersion}}"]);
  if (info.missing || info.status !== 0) {
    record(name, "MISSING", info.missing ? "docker not installed" : "no Docker daemon answers");
    return;
  }
  // Without the buildx plugin a new client cannot use BuildKit; the classic builder is enough.
  const buildx = spawnSync("docker", ["buildx", "version"]).status === 0;
  const env = { ...process.env, DOCKER_BUILDKIT: buildx ? "1" : "0" };
  const tag = `cairn:check-deploy-${process.pid}`;
  const base = process.env["CAIRN_DEPLOY_BASE_IMAGE"];
  const build = sh(
    "docker",
    [
      "build",
      "--network",
      "host",
      "-f",
      join(DEPLOY, "Dockerfile"),
      ...(base === undefined ? [] : ["--build-arg", `NODE_IMAGE=${base}`]),
      "-t",
      tag,
      ROOT,
    ],
    { env, quiet: true },
  );
  if (build.status !== 0) {
    process.stdout.write(
      `${build.out.split("\n").slice(-15).join("\n").replace(/^/gm, "   | ")}\n`,
    );
    const unreachable = /registry|no such host|pull access denied|dial tcp/i.test(build.out);
    record(
      name,
      "FAIL",
      unreachable
        ? "the base image cannot be pulled here; set CAIRN_DEPLOY_BASE_IMAGE to a local Node 24 image (deploy/README.md)"
        : "docker build failed",
    );
    return;
  }
  const container = `cairn-check-deploy-${process.pid}`;
  try {
    // --network none: the container's own loopback only, so the default ports cannot clash.
    const run = sh("docker", [
      "run",
      "-d",
      "--name",
      container,
      "--network",
      "none",
      "-e",
      "CAIRN_NODE_ID=check-1",
      "-e",
      "CAIRN_ADVERTISE_RPC_ADDR=check-1:7447",
      "-e",
      "CAIRN_ADVERTISE_HTTP_ADDR=check-1:8080",
      tag,
    ]);
    if (run.status !== 0) {
      record(name, "FAIL", "docker run failed");
      return;
    }
    let health = "starting";
    const deadline = Date.now() + 90_000;
    process.stdout.write(`   waiting for the HEALTHCHECK (interval 10 s, at most 90 s)\n`);
    while (health === "starting" && Date.now() < deadline) {
      spawnSync("sleep", ["2"]);
      const r = spawnSync("docker", ["inspect", "-f", "{{.State.Health.Status}}", container], {
        encoding: "utf8",
      });
      health = r.stdout.trim();
    }
    process.stdout.write(`   health: ${health}\n`);
    const stop = sh("docker", ["stop", "-t", "30", container]);
    const exit = spawnSync("docker", ["inspect", "-f", "{{.State.ExitCode}}", container], {
      encoding: "utf8",
    }).stdout.trim();
    const logs = spawnSync("docker", ["logs", "--tail", "2", container], { encoding: "utf8" });
    process.stdout.write(`${`${logs.stdout}${logs.stderr}`.trimEnd().replace(/^/gm, "   | ")}\n`);
    process.stdout.write(`   exit code after docker stop (SIGTERM): ${exit}\n`);
    if (health === "healthy" && stop.status === 0 && exit === "0") {
      record(
        name,
        "PASS",
        `healthy, exit 0 on SIGTERM${base === undefined ? "" : ` (base image ${base})`}`,
      );
    } else record(name, "FAIL", `health ${health}, exit ${exit}`);
  } finally {
    spawnSync("docker", ["rm", "-f", "-v", container]);
    spawnSync("docker", ["rmi", tag]);
  }
}

function composeConfig(): void {
  const name = "docker compose config deploy/compose.yaml";
  // Validating the file needs no daemon. The compose plugin if present, else compose v1
  // (Debian 12: apt-get install docker-compose).
  const plugin = spawnSync("docker", ["compose", "version"]).status === 0;
  const file = join(DEPLOY, "compose.yaml");
  const r = plugin
    ? sh("docker", ["compose", "-f", file, "config", "--quiet"])
    : sh("docker-compose", ["-f", file, "config", "--quiet"]);
  if (r.missing) record(name, "MISSING", "neither docker compose nor docker-compose installed");
  else record(name, r.status === 0 ? "PASS" : "FAIL", plugin ? "compose plugin" : "docker-compose");
}

function kubernetes(): void {
  const name = "kubectl kustomize deploy/k8s";
  const r = sh("kubectl", ["kustomize", join(DEPLOY, "k8s")], { quiet: true });
  if (r.missing) {
    record(name, "MISSING", "kubectl not installed");
    record("kubeconform deploy/k8s", "MISSING", "needs the kustomize output");
    return;
  }
  record(name, r.status === 0 ? "PASS" : "FAIL", r.status === 0 ? "renders" : "");
  if (r.status !== 0) return;
  // Schema validation of the rendered objects (kubeconform fetches its schemas, so it needs
  // network access to them or -schema-location pointing at a local copy).
  const v = sh("kubeconform", ["-strict", "-summary", "-"], { input: r.out });
  if (v.missing) record("kubeconform deploy/k8s", "MISSING", "kubeconform not installed");
  else record("kubeconform deploy/k8s", v.status === 0 ? "PASS" : "FAIL");
}

const promDir = join(DEPLOY, "prometheus");
simple("promtool check rules", "promtool", ["check", "rules", "alerts.yaml"], promDir);
simple("promtool test rules", "promtool", ["test", "rules", "alerts.test.yaml"], promDir);
// check config reads rule_files relative to the config: run it in a copy with both files.
{
  const dir = mkdtempSync(join(tmpdir(), "cairn-prom-"));
  copyFileSync(join(promDir, "prometheus.yaml"), join(dir, "prometheus.yaml"));
  copyFileSync(join(promDir, "alerts.yaml"), join(dir, "alerts.yaml"));
  simple("promtool check config", "promtool", ["check", "config", "prometheus.yaml"], dir);
  rmSync(dir, { recursive: true, force: true });
}
// The dashboard's queries parse as PromQL: each one (Grafana variables substituted) as a
// recording rule, which promtool check rules parses.
{
  const dir = mkdtempSync(join(tmpdir(), "cairn-dash-"));
  const dash = JSON.parse(readFileSync(join(DEPLOY, "grafana/cairn.json"), "utf8")) as {
    panels: { targets?: { expr: string }[] }[];
  };
  const exprs = dash.panels.flatMap((p) => (p.targets ?? []).map((t) => t.expr));
  const rules = exprs.map(
    (e, i) =>
      `      - record: cairn:dashboard_query_${i}\n        expr: ${JSON.stringify(
        e
          .replaceAll("$__rate_interval", "1m")
          .replaceAll("$job", ".+")
          .replaceAll("$instance", ".+"),
      )}`,
  );
  writeFileSync(
    join(dir, "dashboard-queries.yaml"),
    `groups:\n  - name: dashboard\n    rules:\n${rules.join("\n")}\n`,
  );
  process.stdout.write(
    `   (${exprs.length} queries of deploy/grafana/cairn.json as recording rules)\n`,
  );
  simple(
    "promtool: dashboard queries parse",
    "promtool",
    ["check", "rules", "dashboard-queries.yaml"],
    dir,
  );
  rmSync(dir, { recursive: true, force: true });
}
await promtoolMetrics();
systemdVerify();
dockerfileLint();
docker();
composeConfig();
kubernetes();

process.stdout.write("check:deploy summary\n");
for (const r of results) {
  process.stdout.write(
    `  ${r.verdict.padEnd(7)} ${r.name}${r.note === "" ? "" : ` — ${r.note}`}\n`,
  );
}
const missing = results.filter((r) => r.verdict === "MISSING");
if (missing.length > 0) {
  process.stdout.write(
    `\n*** ${missing.length} check(s) NOT RUN, tool missing: ${missing.map((r) => r.name).join(", ")} ***\n`,
  );
}
const failed = results.filter((r) => r.verdict === "FAIL");
process.exitCode = failed.length > 0 ? 1 : 0;
