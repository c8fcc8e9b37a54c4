/**
 * Runs the Raft simulation over many seeds.
 *
 *   npm run sim -- --seeds N [--seed S] [--nodes K] [--chaos-ticks T] [--bug NAME] [--demote] [--trace]
 *
 * --seeds N runs seeds S..S+N-1 (S defaults to 1); --seed S alone replays that one seed.
 * --nodes K sets the founding voters (two spare machines join through membership changes).
 * --bug plants a known bug (commit-prior-term, forget-vote, ack-before-persist,
 * read-without-quorum, count-learners, follower-commit-without-match, sleep-through-messages,
 * votes-with-lost-log) to see it caught. --demote turns half the voter removals the membership
 * chaos draws into demotions to learner (off by default, so that known seeds replay as before).
 * Ends with `sim: N seeds, V violations`; each failure prints the command that replays it.
 *
 *   npm run sim -- --driver --seeds N [--seed S] [--nodes 1|3|4|5] [--chaos-ms T] [--bug NAME] [--trace]
 *
 * runs the simulation of the real multi-raft driver and WAL instead (scripts/sim-driver.ts).
 */
import { parseArgs } from "node:util";
import { runSeed, type SimOptions } from "../test/raft/sim/simulator.ts";
import { bugsByName, replayCommand } from "../test/raft/sim/replay.ts";
import { runDriverSeeds } from "./sim-driver.ts";

const { values } = parseArgs({
  options: {
    seeds: { type: "string" },
    seed: { type: "string" },
    nodes: { type: "string" },
    "chaos-ticks": { type: "string" },
    "chaos-ms": { type: "string" },
    driver: { type: "boolean", default: false },
    bug: { type: "string" },
    demote: { type: "boolean", default: false },
    trace: { type: "boolean", default: false },
    help: { type: "boolean", short: "h", default: false },
  },
  strict: true,
});

if (values.help) {
  console.log(
    [
      "usage: npm run sim -- --seeds N [--seed S] [--nodes 3|5] [--chaos-ticks T] [--bug commit-prior-term|forget-vote|ack-before-persist|read-without-quorum|count-learners|follower-commit-without-match|sleep-through-messages|votes-with-lost-log] [--demote] [--trace]",
      "       npm run sim -- --driver --seeds N [--seed S] [--nodes 1|3|4|5] [--chaos-ms T] [--bug stale-read-after-restart|rotation-checkpoint-includes-batch|follower-read-without-apply|wipe-keeps-replica|lead-founding-term-again|founding-appends-before-sync|stale-meta-leader|vote-when-recreated] [--trace]",
    ].join("\n"),
  );
  process.exit(0);
}

function int(name: string, v: string | undefined, min: number): number | undefined {
  if (v === undefined) return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n < min) {
    console.error(`sim: --${name} must be an integer ≥ ${min}, got ${JSON.stringify(v)}`);
    process.exit(2);
  }
  return n;
}

const first = int("seed", values.seed, 0) ?? 1;
const count = int("seeds", values.seeds, 1) ?? (values.seed === undefined ? 100 : 1);
const nodes = int("nodes", values.nodes, 1);
const chaosTicks = int("chaos-ticks", values["chaos-ticks"], 1);

if (values.driver) {
  const chaosMs = int("chaos-ms", values["chaos-ms"], 1);
  process.exit(
    await runDriverSeeds({
      first,
      count,
      ...(nodes === undefined ? {} : { nodes }),
      ...(chaosMs === undefined ? {} : { chaosMs }),
      ...(values.bug === undefined ? {} : { bug: values.bug }),
      trace: values.trace,
    }),
  );
}

let bugs: SimOptions["bugs"];
if (values.bug !== undefined) {
  bugs = bugsByName(values.bug);
  if (bugs === undefined) {
    console.error(`sim: unknown --bug ${values.bug}`);
    process.exit(2);
  }
}

const started = performance.now();
let violations = 0;
for (let seed = first; seed < first + count; seed++) {
  const opts: SimOptions = {
    seed,
    ...(nodes === undefined ? {} : { nodes }),
    ...(chaosTicks === undefined ? {} : { chaosTicks }),
    ...(bugs === undefined ? {} : { bugs }),
    ...(values.demote ? { demote: true } : {}),
    trace: values.trace,
  };
  const result = runSeed(opts);
  if (result.violation !== null) {
    violations++;
    const v = result.violation;
    if (values.trace) for (const line of result.trace) console.log(`  ${line}`);
    console.log(`FAIL seed=${seed} nodes=${result.nodes}: ${v.kind} at t=${v.at}: ${v.message}`);
    console.log(`  replay: ${replayCommand({ ...opts, nodes: result.nodes })}`);
  }
  if (count >= 1000 && (seed - first + 1) % 1000 === 0) {
    const s = ((performance.now() - started) / 1000).toFixed(1);
    console.log(
      `sim: progress ${seed - first + 1}/${count} seeds, ${violations} violations, ${s}s`,
    );
  }
}
const secs = ((performance.now() - started) / 1000).toFixed(1);
console.log(`sim: wall time ${secs}s`);
console.log(`sim: ${count} seeds, ${violations} violations`);
process.exit(violations === 0 ? 0 : 1);
