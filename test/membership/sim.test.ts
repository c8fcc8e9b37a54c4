/**
 * The SWIM properties of issue 5, checked in deterministic simulation (1 s probe period).
 * Bigger runs (more seeds, the full hour for 100 members) are `npm run sim:swim`.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  runSimulation,
  type Scenario,
  type SimOptions,
  type SimResult,
} from "../../src/membership/sim/index.ts";

function replay(o: SimOptions): string {
  return (
    `npm run sim:swim -- --seed ${o.seed} --members ${o.members} --scenario ${o.scenario} ` +
    `--minutes ${o.minutes} --loss ${o.loss} --trace`
  );
}

function runSeeds(
  scenario: Scenario,
  members: number,
  seeds: number,
  minutes: number,
  loss: number,
): SimResult[] {
  const results: SimResult[] = [];
  for (let seed = 1; seed <= seeds; seed++) {
    const options = { seed, members, scenario, minutes, loss };
    const r = runSimulation(options);
    assert.deepEqual(r.violations, [], `replay with: ${replay(options)}`);
    assert.ok(r.bootstrapMs !== null, "the cluster formed");
    results.push(r);
  }
  return results;
}

function p99(xs: number[]): number {
  const sorted = [...xs].sort((a, b) => a - b);
  return sorted[Math.ceil(0.99 * sorted.length) - 1] ?? Number.NaN;
}

describe("SWIM simulation", () => {
  it("3 members: every crash is declared dead by all others within 8 s at p99", () => {
    const results = runSeeds("crash", 3, 8, 15, 0.01);
    const detections = results.flatMap((r) => r.detectionsMs);
    assert.ok(detections.length >= 200, `${detections.length} crashes observed`);
    assert.ok(p99(detections) <= 8_000, `p99 detection ${p99(detections)} ms`);
    assert.ok(
      results.every((r) => r.rejoinMs.length > 0),
      "restarted members came back",
    );
  });

  it("10 members: crashes detected, restarts rejoin", () => {
    const results = runSeeds("crash", 10, 3, 10, 0.01);
    const detections = results.flatMap((r) => r.detectionsMs);
    assert.ok(detections.length >= 30);
    assert.ok(p99(detections) <= 15_000, `p99 detection ${p99(detections)} ms`);
  });

  it("10 members, one simulated hour, 10% loss, a member paused 1.5 s every minute: no false positive", () => {
    const results = runSeeds("soak", 10, 3, 60, 0.1);
    for (const r of results) {
      assert.equal(r.falsePositives, 0);
      assert.ok(r.pauses >= 59, `${r.pauses} pauses`);
    }
  });

  it("3 members, one simulated hour, 10% loss with pauses: no false positive", () => {
    runSeeds("soak", 3, 3, 60, 0.1);
  });

  it("partitions of 3 and 10 members reconverge within 10 s of healing", () => {
    for (const members of [3, 10]) {
      const heals = runSeeds("partition", members, 3, 10, 0.01).flatMap((r) => r.healConvergenceMs);
      assert.ok(heals.length >= 10, `${heals.length} heals`);
      assert.ok(Math.max(...heals) <= 10_000);
    }
  });

  it("mixed faults (loss, delay, pauses, crashes, partitions) keep every invariant", () => {
    runSeeds("mixed", 10, 3, 10, 0.05);
  });

  it("100 members: crash detection, partition heal, bootstrap", () => {
    const crash = runSeeds("crash", 100, 1, 2, 0.01);
    assert.ok(crash.flatMap((r) => r.detectionsMs).length >= 3);
    const partition = runSeeds("partition", 100, 1, 2, 0.01);
    assert.ok(partition.flatMap((r) => r.healConvergenceMs).length >= 1);
  });

  it("replays a seed exactly", () => {
    const options = { seed: 42, members: 10, scenario: "mixed" as const, minutes: 3, loss: 0.05 };
    assert.deepEqual(runSimulation(options), runSimulation(options));
  });

  it("the checks can fail: a hair-trigger suspicion timeout under heavy loss is caught", () => {
    const r = runSimulation({
      seed: 1,
      members: 10,
      scenario: "soak",
      minutes: 5,
      loss: 0.4,
      config: { suspicionMult: 1, suspicionMaxMult: 1 },
    });
    assert.ok(r.falsePositives > 0);
    assert.match(r.violations[0] ?? "", /false positive: n\d+ declared n\d+ dead/);
  });
});

describe("npm run sim:swim", () => {
  const script = join(import.meta.dirname, "..", "..", "scripts", "sim-swim.ts");
  const run = (args: string[]): { status: number | null; stdout: string; stderr: string } => {
    const r = spawnSync(process.execPath, [script, ...args], { encoding: "utf8", timeout: 60_000 });
    return { status: r.status, stdout: r.stdout, stderr: r.stderr };
  };

  it("refuses a number that is none, exit 2, rather than running no seed or never ending", () => {
    // `--minutes x` ran for NaN simulated minutes, for ever; `--seeds x` ran no seed and said
    // "0 violations", exit 0; `--loss x` simulated without loss; `--help` threw.
    const cases: [string[], RegExp][] = [
      [["--minutes", "x"], /--minutes must be an integer/],
      [["--seeds", "x"], /--seeds must be an integer/],
      [["--seeds", ""], /--seeds must be an integer/],
      [["--members", "3,x"], /--members must be an integer/],
      [["--seed=-1"], /--seed must be an integer/],
      [["--loss", "x"], /--loss must be a number from 0 to 1/],
      [["--loss", "2"], /--loss must be a number from 0 to 1/],
      [["--scenario", "crush"], /unknown scenario crush/],
    ];
    const failed: string[] = [];
    for (const [args, message] of cases) {
      const r = run([...args, "--members", "3", "--minutes", "1", ...args]);
      if (r.status !== 2 || !message.test(r.stderr)) {
        failed.push(
          `${args.join(" ")}: exit ${r.status}, ${JSON.stringify(r.stderr.slice(0, 200))}`,
        );
      }
    }
    assert.deepEqual(failed, []);
    const help = run(["--help"]);
    assert.equal(help.status, 0);
    assert.match(help.stdout, /^usage: npm run sim:swim -- /);
  });
});
