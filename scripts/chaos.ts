/**
 * Fault injection on real processes with a linearizability checker (test/chaos/).
 *
 *   npm run chaos -- --runs N [--seed S] [--scenario NAME] [--duration SECONDS] [--bug NAME]
 *                    [--nodes 3|5] [--shard-workers N] [--tls] [--out DIR]
 *
 * Runs seeds S..S+N-1 (S defaults to 1), one three-node (or five-node) cluster each; every run writes
 * DIR/run-<seed>-<scenario>/report.json (and, when it fails, the history and the nodes' logs)
 * and prints a one-line summary; the end prints the totals (operations checked, faults by kind,
 * availability p50/p99 per fault kind). Exit code 1 when a run failed.
 *
 * Scenarios: mixed (default), membership, kill, kill-all, crash, pause, partition, network,
 * udp-loss, delay, wipe, disk, disk-guard, rotate (--tls only), none. The totals of a run with
 * membership changes (join, decommission, remove) also give how long each took: join → active,
 * decommission → decommissioned, killed → dead → re-replicated (p50 and max). --bug plants a
 * known bug in the nodes (follower-read-without-apply, ack-before-wal-sync,
 * snapshot-install-not-durable; repeatable) to see it caught. --shard-workers runs every node
 * with N shard workers (docs/architecture.md, "Using every core"). --tls runs the nodes secured:
 * TLS between the peers and for the harness's clients, and sealed gossip (test/chaos/cluster.ts);
 * its runs also draw rotate-keys, the gossip key and the certificates rotated under load.
 */
import { mkdir, writeFile } from "node:fs/promises";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { SCENARIOS, scenarioKinds } from "../test/chaos/faults.ts";
import { type RunReport, runChaos } from "../test/chaos/run.ts";

const { values } = parseArgs({
  options: {
    runs: { type: "string", default: "1" },
    seed: { type: "string", default: "1" },
    scenario: { type: "string", default: "mixed" },
    duration: { type: "string", default: "60" },
    nodes: { type: "string", default: "3" },
    "shard-workers": { type: "string", default: "1" },
    tls: { type: "boolean", default: false },
    bug: { type: "string", multiple: true, default: [] },
    out: { type: "string", default: ".chaos" },
    "stop-on-failure": { type: "boolean", default: false },
    help: { type: "boolean", short: "h", default: false },
  },
  strict: true,
});

if (values.help) {
  console.log(
    [
      "usage: npm run chaos -- --runs N [--seed S] [--scenario NAME] [--duration SECONDS] [--bug NAME] [--nodes 3|5] [--shard-workers N] [--tls] [--out DIR] [--stop-on-failure]",
      "--tls: TLS between the peers and for the clients, and sealed gossip (scenario rotate needs it)",
      `scenarios: ${Object.keys(SCENARIOS).join(", ")}`,
      "bugs: follower-read-without-apply, ack-before-wal-sync, snapshot-install-not-durable",
    ].join("\n"),
  );
  process.exit(0);
}

const runs = Number(values.runs);
const first = Number(values.seed);
const durationMs = Number(values.duration) * 1000;
const nodes = Number(values.nodes);
if (nodes !== 3 && nodes !== 5) {
  console.error("--nodes takes 3 or 5 (every shard has three replicas)");
  process.exit(2);
}
const shardWorkers = Number(values["shard-workers"]);
if (!Number.isInteger(shardWorkers) || shardWorkers < 1 || shardWorkers > 16) {
  console.error("--shard-workers takes an integer from 1 to 16 (the runs use 16 shards)");
  process.exit(2);
}
if (!Number.isInteger(runs) || runs < 1 || !Number.isInteger(first) || !(durationMs > 0)) {
  console.error("--runs and --seed take integers, --duration a positive number of seconds");
  process.exit(2);
}
if (SCENARIOS[values.scenario] === undefined) {
  console.error(`unknown scenario ${values.scenario}; known: ${Object.keys(SCENARIOS).join(", ")}`);
  process.exit(2);
}
if (scenarioKinds(values.scenario, values.tls) === null) {
  console.error(
    `scenario ${values.scenario} rotates keys and certificates: it runs only with --tls`,
  );
  process.exit(2);
}

function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return 0;
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] as number;
}

/** A long finding (a checker report) as its first line and its last operations. */
function brief(message: string, tail = 24): string {
  const lines = message.split("\n");
  if (lines.length <= tail + 2) return message;
  return [
    lines[0],
    `  … ${lines.length - 1 - tail} earlier operations (report.json has them all)`,
    ...lines.slice(-tail),
  ].join("\n");
}

const reports: RunReport[] = [];
const started = performance.now();
for (let seed = first; seed < first + runs; seed++) {
  const report = await runChaos({
    seed,
    scenario: values.scenario,
    durationMs,
    outDir: values.out,
    bugs: values.bug,
    size: nodes,
    shardWorkers,
    tls: values.tls,
  });
  reports.push(report);
  if (report.verdict !== "pass") {
    for (const f of report.findings.slice(0, 5)) console.log(`  [${f.check}] ${brief(f.message)}`);
    console.log(
      `  report: ${join(report.dir, "report.json")}; replay: npm run chaos -- --runs 1 --seed ${seed} --scenario ${values.scenario} --duration ${values.duration}${nodes === 3 ? "" : ` --nodes ${nodes}`}${shardWorkers === 1 ? "" : ` --shard-workers ${shardWorkers}`}${values.tls ? " --tls" : ""}${values.bug.map((b) => ` --bug ${b}`).join("")}`,
    );
    if (values["stop-on-failure"]) break;
  }
}

const kinds = new Map<string, number[]>();
for (const r of reports) {
  for (const f of r.faults) {
    const list = kinds.get(f.kind) ?? [];
    list.push(f.unavailableMs);
    kinds.set(f.kind, list);
  }
}
/** Seconds from one phase of the changes of `kind` to another (start: the change's start). */
function phaseSpan(kind: string, from: string | null, to: string): string {
  const spans = reports
    .flatMap((r) => r.changes)
    .filter((c) => c.kind === kind && c.phases[to] !== undefined)
    .map((c) => (c.phases[to] as number) - (from === null ? 0 : (c.phases[from] ?? 0)))
    .sort((a, b) => a - b);
  if (spans.length === 0) return `${from ?? "start"} → ${to} never reached`;
  return `${from ?? "start"} → ${to} p50 ${(percentile(spans, 50) / 1000).toFixed(1)} s, max ${((spans.at(-1) ?? 0) / 1000).toFixed(1)} s`;
}
const changeLines = (["join", "decommission", "remove"] as const).flatMap((kind) => {
  const all = reports.flatMap((r) => r.changes).filter((c) => c.kind === kind);
  if (all.length === 0) return [];
  const done = all.filter((c) => c.done).length;
  const spans =
    kind === "join"
      ? [phaseSpan(kind, null, "active"), phaseSpan(kind, "active", "replicas")]
      : kind === "decommission"
        ? [phaseSpan(kind, null, "decommissioned"), phaseSpan(kind, null, "removed")]
        : [phaseSpan(kind, "killed", "dead"), phaseSpan(kind, "dead", "re-replicated")];
  return [`  ${kind}: ${all.length} (${done} finished); ${spans.join("; ")}`];
});
const failed = reports.filter((r) => r.verdict === "fail");
const unknown = reports.filter((r) => r.verdict === "unknown");
const lines = [
  `chaos: ${reports.length} runs (${values.scenario}, ${nodes} nodes${shardWorkers === 1 ? "" : ` of ${shardWorkers} shard workers`}${values.tls ? ", TLS and sealed gossip" : ""}, ${values.duration} s each${values.bug.length > 0 ? `, bugs ${values.bug.join(",")}` : ""}) in ${Math.round((performance.now() - started) / 1000)} s: ${reports.length - failed.length - unknown.length} pass, ${failed.length} fail, ${unknown.length} unknown`,
  `  operations: ${reports.reduce((a, r) => a + r.operations.total, 0)} issued, ${reports.reduce((a, r) => a + r.operations.checked, 0)} checked for linearizability; violations: ${reports.filter((r) => r.linearizability.status === "violation").length}; acknowledged writes lost: ${reports.reduce((a, r) => a + r.findings.filter((f) => f.check === "acknowledged-writes").length, 0)}`,
  `  faults: ${[...kinds].map(([k, l]) => `${k}×${l.length}`).join(" ") || "none"}`,
  ...[...kinds].map(([k, l]) => {
    const s = [...l].sort((a, b) => a - b);
    return `  ${k}: longest window without a successful write p50 ${(percentile(s, 50) / 1000).toFixed(1)} s, p99 ${(percentile(s, 99) / 1000).toFixed(1)} s, max ${((s.at(-1) ?? 0) / 1000).toFixed(1)} s`;
  }),
  ...(changeLines.length === 0 ? [] : ["  membership changes:", ...changeLines]),
];
for (const l of lines) console.log(l);
await mkdir(values.out, { recursive: true });
await writeFile(
  join(values.out, `summary-${first}-${values.scenario}${values.tls ? "-tls" : ""}.json`),
  JSON.stringify(
    {
      runs: reports.length,
      scenario: values.scenario,
      durationS: Number(values.duration),
      nodes,
      shardWorkers,
      tls: values.tls,
      bugs: values.bug,
      summaries: reports.map((r) => r.summary),
      lines,
    },
    null,
    2,
  ) + "\n",
);
process.exit(failed.length > 0 ? 1 : 0);
