/**
 * Runs the deterministic SWIM simulation over many seeds and prints detection, convergence and
 * false-positive figures. A failing seed prints the exact command that replays it.
 *
 *   npm run sim:swim -- [--seeds N] [--first-seed S] [--seed S] [--members 3,10,100]
 *                       [--scenario crash,soak,...] [--minutes M] [--loss 0.1] [--trace]
 *                       [--trace-messages] [--help]
 *
 * A number that is not one (`--minutes x`, `--seeds ""`) is a usage error, exit 2.
 *
 * Without --scenario it runs crash and partition (1% loss), soak (10% loss, a member paused
 * 1.5 s each minute) and mixed (5% loss, pauses, crashes and partitions) for every member count.
 * Each seed runs every scenario at every member count; the last line counts seeds and violations.
 */
import { parseArgs } from "node:util";
import { type Scenario, SCENARIOS, runSimulation } from "../src/membership/sim/index.ts";

/**
 * A usage error, exit 2. Number() alone took anything: `--minutes x` ran the simulation for NaN
 * minutes, which never ended, and `--seeds x` ran no seed and reported 0 violations, exit 0.
 */
function usage(message: string): never {
  console.error(`sim:swim: ${message} (--help for usage)`);
  process.exit(2);
}

const options = {
  seeds: { type: "string", default: "10" },
  seed: { type: "string" },
  "first-seed": { type: "string", default: "1" },
  members: { type: "string", default: "3,10,100" },
  scenario: { type: "string" },
  minutes: { type: "string", default: "10" },
  loss: { type: "string" },
  trace: { type: "boolean", default: false },
  "trace-messages": { type: "boolean", default: false },
  help: { type: "boolean", short: "h", default: false },
} as const;

/** The flags; one it does not know, or a value missing, is a usage error too. */
function flags(): ReturnType<typeof parseArgs<{ options: typeof options; strict: true }>> {
  try {
    return parseArgs({ options, strict: true });
  } catch (err) {
    return usage((err as Error).message);
  }
}

const { values } = flags();

if (values.help) {
  console.log(
    "usage: npm run sim:swim -- [--seeds N] [--first-seed S] [--seed S] [--members 3,10,100] " +
      `[--scenario ${SCENARIOS.join(",")}] [--minutes M] [--loss 0..1] [--trace] [--trace-messages]`,
  );
  process.exit(0);
}

/** A whole number of decimal digits, at least `min`. */
function int(name: string, text: string, min: number): number {
  const n = /^[0-9]{1,15}$/.test(text) ? Number(text) : NaN;
  if (!Number.isSafeInteger(n) || n < min) {
    usage(`--${name} must be an integer ≥ ${min}, got ${JSON.stringify(text)}`);
  }
  return n;
}

const memberCounts = values.members.split(",").map((m) => int("members", m, 1));
const scenarios = (values.scenario ?? "crash,partition,soak,mixed").split(",") as Scenario[];
for (const s of scenarios) {
  if (!SCENARIOS.includes(s)) usage(`unknown scenario ${s} (${SCENARIOS.join(", ")})`);
}
const minutes = int("minutes", values.minutes, 1);
const lossFlag = values.loss === undefined ? undefined : Number(values.loss);
if (lossFlag !== undefined && !(values.loss?.trim() !== "" && lossFlag >= 0 && lossFlag <= 1)) {
  usage(`--loss must be a number from 0 to 1, got ${JSON.stringify(values.loss)}`);
}
const firstSeed = int("first-seed", values["first-seed"], 0);
const seeds =
  values.seed === undefined
    ? Array.from({ length: int("seeds", values.seeds, 1) }, (_, i) => firstSeed + i)
    : [int("seed", values.seed, 0)];

const lossFor = (s: Scenario): number =>
  lossFlag !== undefined ? lossFlag : s === "soak" ? 0.1 : s === "mixed" ? 0.05 : 0.01;

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
