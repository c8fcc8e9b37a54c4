/**
 * Runs the simulation of the real multi-raft driver (test/replication/sim/) over many seeds.
 *
 *   npm run sim -- --driver --seeds N [--seed S] [--nodes 1|3] [--chaos-ms T] [--bug NAME] [--trace]
 *
 * --seeds N runs seeds S..S+N-1 (S defaults to 1); --seed S alone replays that one seed.
 * --nodes fixes the cluster size (default: one or three, drawn from each seed).
 * --bug plants a known bug to see it caught: stale-read-after-restart,
 * rotation-checkpoint-includes-batch. --trace prints the replayed seed's events.
 * Ends with `sim --driver: N seeds, V violations`; each failure prints the command that replays it.
 */
import { parseArgs } from "node:util";
import { driverBugsByName, driverReplayCommand } from "../test/replication/sim/replay.ts";
import { runDriverSeed } from "../test/replication/sim/simulator.ts";

const { values } = parseArgs({
  options: {
    seeds: { type: "string" },
    seed: { type: "string" },
    nodes: { type: "string" },
    "chaos-ms": { type: "string" },
    bug: { type: "string" },
    trace: { type: "boolean", default: false },
    help: { type: "boolean", short: "h", default: false },
  },
  strict: true,
});

if (values.help) {
  console.log(
    "usage: npm run sim -- --driver --seeds N [--seed S] [--nodes 1|3] [--chaos-ms T] [--bug stale-read-after-restart|rotation-checkpoint-includes-batch] [--trace]",
  );
  process.exit(0);
}

function int(name: string, v: string | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) {
    console.error(`sim --driver: --${name} must be an integer ≥ ${min}, got ${JSON.stringify(v)}`);
    process.exit(2);
  }
  return n;
}

const first = int("seed", values.seed, 0) ?? 1;
const count = int("seeds", values.seeds, 1) ?? (values.seed === undefined ? 100 : 1);
const chaosMs = int("chaos-ms", values["chaos-ms"], 1);
const nodes = int("nodes", values.nodes, 1);
if (nodes !== undefined && nodes !== 1 && nodes !== 3) {
  console.error("sim --driver: --nodes must be 1 or 3");
  process.exit(2);
}
const bugs = values.bug === undefined ? undefined : driverBugsByName(values.bug);
if (values.bug !== undefined && bugs === undefined) {
  console.error(`sim --driver: unknown --bug ${values.bug}`);
  process.exit(2);
}

let current = first;
// A promise rejected with no handler is a bug of the code under test (a real node would die of
// it): report the seed that caused it.
process.on("unhandledRejection", (err) => {
  console.log(`seed ${current}: unhandled rejection: ${String(err)}`);
  console.log(`  replay: ${driverReplayCommand({ seed: current })}`);
  console.log(`sim --driver: ${current - first + 1} seeds, 1 violations`);
  process.exit(1);
});

const started = performance.now();
let violations = 0;
let operations = 0;
for (let seed = first; seed < first + count; seed++) {
  current = seed;
  const r = await runDriverSeed({
    seed,
    ...(nodes === undefined ? {} : { nodes }),
    ...(chaosMs === undefined ? {} : { chaosMs }),
    ...(bugs === undefined ? {} : { bugs }),
    trace: values.trace,
  });
  operations += r.stats.operations;
  if (values.trace) for (const line of r.trace) console.log(line);
  if (r.violation !== null) {
    violations++;
    console.log(`seed ${seed}: ${r.violation.kind}: ${r.violation.message}`);
    console.log(
      `  replay: ${driverReplayCommand({ seed, nodes: r.nodes, ...(chaosMs === undefined ? {} : { chaosMs }), ...(values.bug === undefined ? {} : { bug: values.bug }) })}`,
    );
  }
  if (count >= 100 && (seed - first + 1) % 100 === 0 && process.stderr.isTTY) {
    process.stderr.write(`\r${seed - first + 1}/${count} seeds, ${violations} violations`);
  }
}
if (count >= 100 && process.stderr.isTTY) process.stderr.write("\n");
const seconds = ((performance.now() - started) / 1000).toFixed(1);
console.log(`(${operations} client operations checked in ${seconds} s)`);
console.log(`sim --driver: ${count} seeds, ${violations} violations`);
process.exit(violations === 0 ? 0 : 1);
