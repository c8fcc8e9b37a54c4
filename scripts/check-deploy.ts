/**
 * `npm run check:deploy`: every checker of deploy/ this machine has, each command printed with
 * its output and a verdict. A missing tool is reported loudly (MISSING) but does not fail the
 * run; a tool that finds a problem does (exit 1).
 *
 *   promtool check rules / test rules / check config   (Debian: apt-get install prometheus)
 *   promtool check rules on the dashboard queries      (as recording rules)
 *   promtool check metrics on a live node's /metrics    (bin/cairn serve on free ports)
 *   prometheus server on a live 3-node cluster          (npm run cluster on free ports: targets
 *                                                        up, alerts.yaml loaded, no alert
 *                                                        firing, every dashboard query answers)
 *   systemd-analyze verify deploy/systemd/cairn.service (ExecStart pointed at this checkout)
 *   hadolint deploy/Dockerfile                          (if installed)
 *   docker build + run with the HEALTHCHECK, docker stop (if a daemon answers)
 *   docker compose config on deploy/compose.yaml      (the plugin, else docker-compose v1;
 *                                                        also with deploy/compose.tls.yaml)
 *   kubectl kustomize deploy/k8s, then kubeconform     (each if installed; also deploy/k8s-tls)
 *
 * Environment: CAIRN_DEPLOY_BASE_IMAGE overrides the Dockerfile's NODE_IMAGE build argument
 * (e.g. a locally imported stand-in when the registry of the official image is unreachable);
 * CAIRN_DEPLOY_SKIP_DOCKER=1 skips the docker step.
 */
import { type ChildProcess, spawn, spawnSync } from "node:child_process";
import { createSocket } from "node:dgram";
import { copyFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { createServer } from "node:net";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { setTimeout as sleep } from "node:timers/promises";
import { parse as parseYaml, stringify as stringifyYaml } from "yaml";
import { CAIRN, cleanEnv, ROOT, startServer } from "../test/support/server-process.ts";

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

/** Whether `port` on 127.0.0.1 can be bound (TCP, and UDP when `udp`). */
async function bindable(port: number, udp: boolean): Promise<boolean> {
  const tcp = await new Promise<boolean>((done) => {
    const srv = createServer();
    srv.once("error", () => done(false));
    srv.listen(port, "127.0.0.1", () => srv.close(() => done(true)));
  });
  if (!tcp || !udp) return tcp;
  return new Promise<boolean>((done) => {
    const sock = createSocket("udp4");
    sock.once("error", () => done(false));
    sock.bind(port, "127.0.0.1", () => sock.close(() => done(true)));
  });
}

/** `count` consecutive free ports (TCP, and UDP when `udp`), none of them in `avoid`. */
async function freePorts(count: number, udp: boolean, avoid: readonly number[]): Promise<number> {
  for (let attempt = 0; attempt < 50; attempt++) {
    const base = 20_000 + Math.floor(Math.random() * 30_000);
    const ports = Array.from({ length: count }, (_, i) => base + i);
    if (ports.some((p) => avoid.includes(p))) continue;
    let ok = true;
    for (const p of ports) if (!(await bindable(p, udp))) ok = false;
    if (ok) return base;
  }
  throw new Error(`no ${count} consecutive free ports found`);
}

/** Runs a command to its end without blocking the event loop; stdout+stderr together. */
function run(cmd: string, args: readonly string[]): Promise<{ code: number | null; out: string }> {
  return new Promise((resolve) => {
    const p = spawn(cmd, [...args], {
      cwd: ROOT,
      env: cleanEnv(),
      stdio: ["ignore", "pipe", "pipe"],
    });
    let out = "";
    p.stdout.on("data", (d: Buffer) => (out += d.toString()));
    p.stderr.on("data", (d: Buffer) => (out += d.toString()));
    p.once("exit", (code) => resolve({ code, out: out.trimEnd() }));
  });
}

interface PromVector {
  readonly metric: Record<string, string>;
  readonly value: [number, string];
}

/**
 * A real Prometheus server (Debian's `prometheus` package has it beside promtool) scraping a
 * real 3-node cluster (`npm run cluster`, free ports on 127.0.0.1) with deploy/prometheus's
 * configuration: the only changes are the targets (the local nodes' HTTP addresses) and a 2 s
 * scrape and evaluation interval so that the step takes seconds. Checks through its HTTP API
 * that every target is up, that every rule of alerts.yaml is loaded and evaluates with health
 * ok, that no alert fires on a healthy cluster just started, and that every query of the
 * Grafana dashboard (variables substituted) answers with data after some traffic.
 */
async function prometheusLive(): Promise<void> {
  const name = "prometheus server: 3-node cluster scraped, alerts loaded, dashboard queries";
  const version = spawnSync("prometheus", ["--version"], { encoding: "utf8" });
  if (version.error !== undefined) {
    record(name, "MISSING", "prometheus not installed (apt-get install prometheus)");
    return;
  }
  process.stdout.write(`   ${`${version.stdout}${version.stderr}`.split("\n")[0]}\n`);
  const started = performance.now();
  const dir = mkdtempSync(join(tmpdir(), "cairn-prom-live-"));
  const procs: ChildProcess[] = [];
  const problems: string[] = [];
  let launcher: ChildProcess | null = null;
  let launcherOut = "";
  try {
    const rpcBase = await freePorts(3, true, []);
    const httpBase = await freePorts(3, false, [rpcBase, rpcBase + 1, rpcBase + 2]);
    const promPort = await freePorts(
      1,
      false,
      [0, 1, 2].flatMap((i) => [rpcBase + i, httpBase + i]),
    );
    const http = [0, 1, 2].map((i) => `127.0.0.1:${httpBase + i}`);
    const rpc = [0, 1, 2].map((i) => `127.0.0.1:${rpcBase + i}`);
    const clusterArgs = [
      join(ROOT, "scripts/cluster.ts"),
      "--nodes",
      "3",
      "--base-dir",
      join(dir, "cluster"),
      "--ports",
      "distinct",
      "--rpc-port",
      String(rpcBase),
      "--http-base-port",
      String(httpBase),
      "--logs",
      "files",
    ];
    process.stdout.write(`$ node ${clusterArgs.join(" ")}\n`);
    const l = spawn(process.execPath, clusterArgs, {
      cwd: ROOT,
      env: cleanEnv(),
      stdio: ["ignore", "pipe", "pipe"],
    });
    launcher = l;
    const ready = new Promise<boolean>((resolve) => {
      l.stdout.on("data", (d: Buffer) => {
        launcherOut += d.toString();
        if (launcherOut.includes("cluster ready:")) resolve(true);
      });
      l.stderr.on("data", (d: Buffer) => (launcherOut += d.toString()));
      l.once("exit", () => resolve(false));
    });
    if (!(await Promise.race([ready, sleep(60_000).then(() => false)]))) {
      process.stdout.write(`${launcherOut.trimEnd().replace(/^/gm, "   | ")}\n`);
      record(name, "FAIL", "the cluster did not become ready within 60 s");
      return;
    }
    const readyLine = launcherOut.split("\n").find((x) => x.startsWith("cluster ready:"));
    process.stdout.write(`   | ${readyLine}\n`);

    // The shipped configuration, targets rewritten, intervals shortened.
    const cfg = parseYaml(readFileSync(join(promDir, "prometheus.yaml"), "utf8")) as {
      global: Record<string, string>;
      scrape_configs: { job_name: string; static_configs: { targets: string[] }[] }[];
    };
    cfg.global["scrape_interval"] = "2s";
    cfg.global["scrape_timeout"] = "2s";
    cfg.global["evaluation_interval"] = "2s";
    const job = cfg.scrape_configs[0];
    if (cfg.scrape_configs.length !== 1 || job?.static_configs.length !== 1) {
      record(name, "FAIL", "prometheus.yaml no longer has one job with one static_configs entry");
      return;
    }
    job.static_configs = [{ targets: http }];
    writeFileSync(join(dir, "prometheus.yaml"), stringifyYaml(cfg));
    copyFileSync(join(promDir, "alerts.yaml"), join(dir, "alerts.yaml"));
    const promArgs = [
      `--config.file=${join(dir, "prometheus.yaml")}`,
      `--storage.tsdb.path=${join(dir, "tsdb")}`,
      `--web.listen-address=127.0.0.1:${promPort}`,
      "--log.level=warn",
    ];
    process.stdout.write(
      `$ prometheus ${promArgs.join(" ")}   (prometheus.yaml with targets ${http.join(", ")}, scrape and evaluation every 2 s)\n`,
    );
    let promOut = "";
    const prom = spawn("prometheus", promArgs, { cwd: dir, stdio: ["ignore", "pipe", "pipe"] });
    procs.push(prom);
    prom.stdout.on("data", (d: Buffer) => (promOut += d.toString()));
    prom.stderr.on("data", (d: Buffer) => (promOut += d.toString()));
    const api = async <T>(path: string, query?: string): Promise<T> => {
      const url = new URL(`http://127.0.0.1:${promPort}/api/v1/${path}`);
      if (query !== undefined) url.searchParams.set("query", query);
      const res = await fetch(url, { signal: AbortSignal.timeout(5_000) });
      const body = (await res.json()) as { status: string; data: T; error?: string };
      if (body.status !== "success") throw new Error(`${path}: ${body.error ?? res.status}`);
      return body.data;
    };

    // Some traffic for the request panels: Puts and Gets through the three nodes.
    const bench = [
      "bench",
      "mixed",
      "--read-ratio",
      "0.5",
      "--endpoints",
      rpc.join(","),
      "--duration",
      "4",
      "--warmup",
      "0",
      "--concurrency",
      "4",
      "--rate",
      "100",
      "--keyspace",
      "200",
    ];
    process.stdout.write(`$ bin/cairn ${bench.join(" ")}\n`);
    const b = await run(CAIRN, bench);
    const table = b.out.split("\n").filter((x) => /^(op |put |get |errors:)/.test(x));
    process.stdout.write(`${table.join("\n").replace(/^/gm, "   | ")}\n   (exit ${b.code})\n`);
    if (b.code !== 0) problems.push(`cairn bench exit ${b.code}`);

    // Targets up and rules evaluated (each rule's lastEvaluation set), at most 20 s.
    interface Target {
      readonly labels: Record<string, string>;
      readonly health: string;
      readonly lastError: string;
    }
    interface Rule {
      readonly name: string;
      readonly health: string;
      readonly state?: string;
      readonly lastError?: string;
      readonly lastEvaluation: string;
    }
    const expectedRules = (
      parseYaml(readFileSync(join(promDir, "alerts.yaml"), "utf8")) as {
        groups: { rules: unknown[] }[];
      }
    ).groups.reduce((n, g) => n + g.rules.length, 0);
    let targets: Target[] = [];
    let rules: Rule[] = [];
    const deadline = performance.now() + 20_000;
    for (;;) {
      try {
        targets = (await api<{ activeTargets: Target[] }>("targets")).activeTargets;
        rules = (await api<{ groups: { rules: Rule[] }[] }>("rules")).groups.flatMap(
          (g) => g.rules,
        );
      } catch {
        // not listening yet
      }
      const evaluated = rules.filter((r) => !r.lastEvaluation.startsWith("0001-"));
      const up = targets.filter((t) => t.health === "up");
      if ((up.length === 3 && evaluated.length === expectedRules) || performance.now() > deadline)
        break;
      await sleep(500);
    }
    // One more scrape after the traffic, so every rate() window holds it.
    await sleep(2_500);
    for (const t of targets) {
      process.stdout.write(
        `   target ${t.labels["instance"]} job=${t.labels["job"]}: ${t.health}${t.lastError === "" ? "" : ` (${t.lastError})`}\n`,
      );
    }
    if (targets.length !== 3 || targets.some((t) => t.health !== "up"))
      problems.push(`targets up: ${targets.filter((t) => t.health === "up").length} of 3`);
    const bad = rules.filter((r) => r.health !== "ok");
    process.stdout.write(
      `   rules: ${rules.length} loaded (alerts.yaml has ${expectedRules}), health ok: ${rules.length - bad.length}\n`,
    );
    for (const r of bad)
      process.stdout.write(`   rule ${r.name}: ${r.health} ${r.lastError ?? ""}\n`);
    if (rules.length !== expectedRules || bad.length > 0)
      problems.push(`rules: ${rules.length} loaded, ${bad.length} not ok`);
    const alerts = (
      await api<{ alerts: { labels: Record<string, string>; state: string }[] }>("alerts")
    ).alerts;
    const firing = alerts.filter((a) => a.state === "firing");
    process.stdout.write(
      `   alerts: ${firing.length} firing, ${alerts.length - firing.length} pending${alerts.length === 0 ? "" : `: ${[...new Set(alerts.map((a) => `${a.labels["alertname"]} (${a.state})`))].join(", ")}`}\n`,
    );
    if (firing.length > 0) problems.push(`${firing.length} alert(s) firing on a healthy cluster`);

    // The dashboard's queries, variables as Grafana would fill them with "All" selected.
    const dash = JSON.parse(readFileSync(join(DEPLOY, "grafana/cairn.json"), "utf8")) as {
      panels: { title: string; targets?: { expr: string; legendFormat?: string }[] }[];
    };
    let answered = 0;
    let quiet = 0;
    let total = 0;
    for (const panel of dash.panels) {
      for (const t of panel.targets ?? []) {
        total++;
        const expr = t.expr
          .replaceAll("$__rate_interval", "20s")
          .replaceAll("$job", "cairn")
          .replaceAll("$instance", ".+");
        let result: PromVector[] = [];
        try {
          result = (await api<{ result: PromVector[] }>("query", expr)).result;
        } catch (err) {
          problems.push(`${panel.title}: ${(err as Error).message}`);
          continue;
        }
        const numbers = result.map((r) => Number(r.value[1])).filter((v) => Number.isFinite(v));
        // Two kinds of query answer nothing while nothing happens: a filter such as
        // `changes(...) > 0` (no series), and a quantile of a histogram with no observation in
        // the window (series, all NaN: no compaction ran in these seconds).
        const noEvents =
          (result.length === 0 && /\)\s*>\s*0\s*\)?$/.test(t.expr.trim())) ||
          (result.length > 0 && t.expr.startsWith("histogram_quantile("));
        const verdict = numbers.length > 0 ? "ok" : noEvents ? "ok (no events)" : "NO DATA";
        if (verdict === "NO DATA") problems.push(`no data: ${panel.title} (${expr})`);
        else answered++;
        if (verdict === "ok (no events)") quiet++;
        process.stdout.write(
          `   ${verdict.padEnd(14)} ${panel.title}${t.legendFormat === undefined ? "" : ` [${t.legendFormat}]`}: ${result.length} series, e.g. ${result[0] === undefined ? "-" : `${JSON.stringify(result[0].metric)} = ${result[0].value[1]}`}\n`,
        );
      }
    }
    // The latency histograms carry the traffic: p50 of put and get are numbers.
    const p50 = await api<{ result: PromVector[] }>(
      "query",
      'histogram_quantile(0.5, sum by (operation, le) (rate(kv_request_duration_ms_bucket{job="cairn", status="success"}[20s])))',
    );
    for (const op of ["put", "get"]) {
      const v = Number(p50.result.find((r) => r.metric["operation"] === op)?.value[1]);
      process.stdout.write(
        `   p50 ${op} latency: ${Number.isFinite(v) ? `${v.toFixed(1)} ms` : "none"}\n`,
      );
      if (!Number.isFinite(v)) problems.push(`no ${op} latency`);
    }
    if (promOut.trim() !== "")
      process.stdout.write(`${promOut.trimEnd().replace(/^/gm, "   | ")}\n`);
    const secs = ((performance.now() - started) / 1000).toFixed(0);
    if (problems.length === 0) {
      record(
        name,
        "PASS",
        `3 targets up, ${rules.length} rules ok, none firing, ${answered}/${total} dashboard queries answer (${quiet} with no events to show) (${secs} s)`,
      );
    } else record(name, "FAIL", problems.join("; "));
  } catch (err) {
    record(name, "FAIL", (err as Error).message);
  } finally {
    for (const p of procs) p.kill("SIGTERM");
    if (launcher !== null && launcher.exitCode === null) {
      const l = launcher;
      const exited = new Promise<number | null>((resolve) => l.once("exit", (c) => resolve(c)));
      l.kill("SIGTERM");
      const code = await exited;
      process.stdout.write(`   cluster stopped: launcher exit ${code}\n`);
    }
    await Promise.all(
      procs.map((p) =>
        p.exitCode === null ? new Promise((resolve) => p.once("exit", resolve)) : null,
      ),
    );
    rmSync(dir, { recursive: true, force: true });
    process.stdout.write("\n");
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
  // The classic builder ignores deploy/Dockerfile.dockerignore (BuildKit reads it) and would
  // send the whole checkout, node_modules included: give it a context of exactly what that file
  // lets through.
  let context = ROOT;
  if (!buildx) {
    context = mkdtempSync(join(tmpdir(), "cairn-build-"));
    for (const f of ["package.json", "package-lock.json", "proto", "src"]) {
      cpSync(join(ROOT, f), join(context, f), { recursive: true });
    }
    process.stdout.write(
      `   (classic builder: context ${context} = package*.json, proto/, src/)\n`,
    );
  }
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
      context,
    ],
    { env, quiet: true },
  );
  if (context !== ROOT) rmSync(context, { recursive: true, force: true });
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

/** `docker compose config` on deploy/compose.yaml, then with the TLS override over it. */
function composeConfig(): void {
  // Validating the files needs no daemon. The compose plugin if present, else compose v1
  // (Debian 12: apt-get install docker-compose).
  const plugin = spawnSync("docker", ["compose", "version"]).status === 0;
  for (const files of [["compose.yaml"], ["compose.yaml", "compose.tls.yaml"]]) {
    const name = `docker compose config ${files.map((f) => `deploy/${f}`).join(" + ")}`;
    const args = [...files.flatMap((f) => ["-f", join(DEPLOY, f)]), "config", "--quiet"];
    const r = plugin ? sh("docker", ["compose", ...args]) : sh("docker-compose", args);
    if (r.missing) record(name, "MISSING", "neither docker compose nor docker-compose installed");
    else
      record(name, r.status === 0 ? "PASS" : "FAIL", plugin ? "compose plugin" : "docker-compose");
  }
}

/** `kubectl kustomize` and kubeconform on deploy/k8s and its TLS overlay, deploy/k8s-tls. */
function kubernetes(): void {
  for (const dir of ["k8s", "k8s-tls"]) {
    const name = `kubectl kustomize deploy/${dir}`;
    const r = sh("kubectl", ["kustomize", join(DEPLOY, dir)], { quiet: true });
    if (r.missing) {
      record(name, "MISSING", "kubectl not installed");
      record(`kubeconform deploy/${dir}`, "MISSING", "needs the kustomize output");
      continue;
    }
    record(name, r.status === 0 ? "PASS" : "FAIL", r.status === 0 ? "renders" : "");
    if (r.status !== 0) continue;
    // Schema validation of the rendered objects (kubeconform fetches its schemas, so it needs
    // network access to them or -schema-location pointing at a local copy).
    const v = sh("kubeconform", ["-strict", "-summary", "-"], { input: r.out });
    if (v.missing) record(`kubeconform deploy/${dir}`, "MISSING", "kubeconform not installed");
    else record(`kubeconform deploy/${dir}`, v.status === 0 ? "PASS" : "FAIL");
  }
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
await prometheusLive();
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
