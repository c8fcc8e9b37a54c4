/**
 * The seed loop of the driver simulation (test/replication/sim/), behind `npm run sim -- --driver`
 * (scripts/sim.ts parses the flags). --nodes fixes the cluster size (default: one, three, or four
 * or five nodes whose membership changes under the chaos (test/replication/sim/moves.ts), drawn
 * from each seed); --bug plants stale-read-after-restart,
 * rotation-checkpoint-includes-batch, follower-read-without-apply or wipe-keeps-replica (3 nodes),
 * or stale-meta-leader or vote-when-recreated (4 or 5 nodes). Ends with `sim --driver: N seeds, V violations`; each
 * failure prints the command that replays it.
 */
import { driverBugsByName, driverReplayCommand } from "../test/replication/sim/replay.ts";
import { runDriverSeed } from "../test/replication/sim/simulator.ts";

export interface DriverSeedsOptions {
  readonly first: number;
  readonly count: number;
  readonly nodes?: number;
  readonly chaosMs?: number;
  readonly bug?: string;
  readonly trace: boolean;
}

/** Runs the seeds; returns the process exit code (0: no violation, 1: some, 2: bad usage). */
export async function runDriverSeeds(o: DriverSeedsOptions): Promise<number> {
  if (o.nodes !== undefined && ![1, 3, 4, 5].includes(o.nodes)) {
    console.error("sim --driver: --nodes must be 1, 3, 4 or 5");
    return 2;
  }
  const bugs = o.bug === undefined ? undefined : driverBugsByName(o.bug);
  if (o.bug !== undefined && bugs === undefined) {
    console.error(`sim --driver: unknown --bug ${o.bug}`);
    return 2;
  }
  const replay = (seed: number, nodes?: number): string =>
    driverReplayCommand({
      seed,
      ...(nodes === undefined ? {} : { nodes }),
      ...(o.chaosMs === undefined ? {} : { chaosMs: o.chaosMs }),
      ...(o.bug === undefined ? {} : { bug: o.bug }),
    });
  let current = o.first;
  // A promise rejected with no handler is a bug of the code under test (a real node would die
  // of it): report the seed that caused it.
  process.on("unhandledRejection", (err) => {
    console.log(`seed ${current}: unhandled rejection: ${String(err)}`);
    console.log(`  replay: ${replay(current)}`);
    console.log(`sim --driver: ${current - o.first + 1} seeds, 1 violations`);
    process.exit(1);
  });

  const started = performance.now();
  let violations = 0;
  let operations = 0;
  for (let seed = o.first; seed < o.first + o.count; seed++) {
    current = seed;
    const r = await runDriverSeed({
      seed,
      ...(o.nodes === undefined ? {} : { nodes: o.nodes }),
      ...(o.chaosMs === undefined ? {} : { chaosMs: o.chaosMs }),
      ...(bugs === undefined ? {} : { bugs }),
      trace: o.trace,
    });
    operations += r.stats.operations;
    if (o.trace) for (const line of r.trace) console.log(line);
    if (r.violation !== null) {
      violations++;
      console.log(`seed ${seed}: ${r.violation.kind}: ${r.violation.message}`);
      console.log(`  replay: ${replay(seed, r.nodes)}`);
    }
    if (o.count >= 1000 && (seed - o.first + 1) % 1000 === 0) {
      const s = ((performance.now() - started) / 1000).toFixed(1);
      console.log(
        `sim --driver: progress ${seed - o.first + 1}/${o.count} seeds, ${violations} violations, ${s}s`,
      );
    }
  }
  const seconds = ((performance.now() - started) / 1000).toFixed(1);
  console.log(`(${operations} client operations checked in ${seconds} s)`);
  console.log(`sim --driver: ${o.count} seeds, ${violations} violations`);
  return violations === 0 ? 0 : 1;
}
