/**
 * Runs the deterministic SWIM simulation over many seeds and prints detection, convergence and
 * false-positive figures. A failing seed prints the exact command that replays it.
 *
 *   npm run sim:swim -- [--seeds N] [--seed S] [--members 3,10,100] [--scenario crash,soak,...]
 *                       [--minutes M] [--loss 0.1] [--trace] [--trace-messages]
 *
 * Without --scenario it runs crash and partition (1% loss), soak (10% loss, a member paused
 * 1.5 s each minute) and mixed (5% loss, pauses, crashes and partitions) for every member count.
 * Each seed runs every scenario at every member count; the last line counts seeds and violations.
 */
import { parseArgs } from "node:util";
import { type Scenario, SCENARIOS, runSimulation } from "../src/membership/sim/index.ts";

const { values } = parseArgs({
  options: {
    seeds: { type: "string", default: "10" },
    seed: { type: "string" },
    "first-seed": { type: "string", default: "1" },
    members: { type: "string", default: "3,10,100" },
    scenario: { type: "string" },
    minutes: { type: "string", default: "10" },
    loss: { type: "string" },
    trace: { type: "boolean", default: false },
    "trace-messages": { type: "boolean", default: false },
  },
});

const memberCounts = values.members.split(",").map(Number);
const scenarios = (values.scenario ?? "crash,partition,soak,mixed").split(",") as Scenario[];
for (const s of scenarios) {
  if (!SCENARIOS.includes(s)) throw new Error(`unknown scenario ${s} (${SCENARIOS.join(", ")})`);
}
const minutes = Number(values.minutes);
const seeds =
  values.seed === undefined
    ? Array.from({ length: Number(values.seeds) }, (_, i) => Number(values["first-seed"]) + i)
    : [Number(values.seed)];

const lossFor = (s: Scenario): number =>
  values.loss !== undefined
    ? Number(values.loss)
    : s === "soak"
      ? 0.1
      : s === "mixed"
        ? 0.05
        : 0.01;

function percentile(xs: number[], p: number): string {
  if (xs.length === 0) return "-";
  const sorted = [...xs].sort((a, b) => a - b);
  const i = Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1);
  return `${((sorted[Math.max(0, i)] ?? 0) / 1000).toFixed(2)}s`;
}

let runs = 0;
let violations = 0;
const started = process.hrtime.bigint();
for (const scenario of scenarios) {
  for (const members of memberCounts) {
    const detections: number[] = [];
    const heals: number[] = [];
    const rejoins: number[] = [];
    const bootstraps: number[] = [];
    let falsePositives = 0;
    let datagrams = 0;
    let simulatedMs = 0;
    let pauses = 0;
    let maxBytes = 0;
    for (const seed of seeds) {
      const loss = lossFor(scenario);
      const result = runSimulation({
        seed,
        members,
        scenario,
        minutes,
        loss,
        ...(values.trace ? { trace: (line: string) => console.log(line) } : {}),
        traceMessages: values["trace-messages"],
      });
      runs += 1;
      detections.push(...result.detectionsMs);
      heals.push(...result.healConvergenceMs);
      rejoins.push(...result.rejoinMs);
      if (result.bootstrapMs !== null) bootstraps.push(result.bootstrapMs);
      falsePositives += result.falsePositives;
      datagrams += result.datagrams;
      simulatedMs += result.simulatedMs;
      pauses += result.pauses;
      maxBytes = Math.max(maxBytes, result.maxDatagramBytes);
      if (result.violations.length > 0) {
        violations += result.violations.length;
        console.log(`FAIL seed ${seed}: ${scenario}, ${members} members, loss ${loss}`);
        for (const v of result.violations.slice(0, 10)) console.log(`  ${v}`);
        console.log(
          `  replay: npm run sim:swim -- --seed ${seed} --members ${members} --scenario ${scenario} --minutes ${minutes} --loss ${loss} --trace`,
        );
      }
    }
    const perMemberSecond = datagrams / (simulatedMs / 1000) / members;
    console.log(
      `${scenario.padEnd(9)} n=${String(members).padStart(3)} loss=${lossFor(scenario)} ` +
        `seeds=${seeds.length} sim=${(simulatedMs / 60_000).toFixed(0)}min | ` +
        `detect p50 ${percentile(detections, 50)} p99 ${percentile(detections, 99)} (${detections.length}) | ` +
        `heal p50 ${percentile(heals, 50)} p99 ${percentile(heals, 99)} (${heals.length}) | ` +
        `rejoin p99 ${percentile(rejoins, 99)} | bootstrap p99 ${percentile(bootstraps, 99)} | ` +
        `false positives ${falsePositives} (pauses ${pauses}) | ${perMemberSecond.toFixed(1)} datagrams/member/s, max ${maxBytes} B`,
    );
  }
}
const seconds = Number(process.hrtime.bigint() - started) / 1e9;
console.log(
  `(${runs} runs: ${seeds.length} seeds × ${scenarios.length} scenarios × ${memberCounts.length} ` +
    `cluster sizes, ${seconds.toFixed(1)} s wall clock)`,
);
console.log(`sim:swim: ${seeds.length} seeds, ${violations} violations`);
process.exitCode = violations === 0 ? 0 : 1;
