/**
 * The chaos smoke (issue 11): two short runs of the chaos harness on real processes, with mixed
 * faults and fixed seeds; each must pass every check (linearizability, serializable reads,
 * acknowledged writes, replicas, health, views, no crash). `npm run chaos` runs the long ones.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { NetStats } from "./net.ts";
import { runChaos } from "./run.ts";

const SEEDS = [11, 12];
const DURATION_MS = 28_000;

describe("chaos smoke: mixed faults on a three-node cluster (real processes)", () => {
  let out: string;
  before(async () => {
    out = await mkdtemp(join(tmpdir(), "cairn-chaos-smoke-"));
  });
  after(async () => {
    await rm(out, { recursive: true, force: true });
  });

  for (const seed of SEEDS) {
    it(
      `seed ${seed}: linearizable, nothing acknowledged lost, healthy after the heal`,
      { timeout: 240_000 },
      async () => {
        const report = await runChaos({
          seed,
          scenario: "mixed",
          durationMs: DURATION_MS,
          outDir: out,
          log: () => undefined,
        });
        console.log(report.summary);
        assert.equal(
          report.verdict,
          "pass",
          `${report.summary}\n${report.findings.map((f) => `[${f.check}] ${f.message}`).join("\n")}`,
        );
        assert.ok(report.faults.length >= 2, `only ${report.faults.length} faults injected`);
        // A node that reached a peer around its proxy would escape the network's faults.
        const net = report.net as NetStats;
        assert.ok(net.connections > 0, "no peer connection went through the proxies");
        assert.equal(net.unproxied, 0, "peer connections bypassed the proxies");
        assert.ok(
          report.operations.checked > 500,
          `only ${report.operations.checked} operations checked`,
        );
      },
    );
  }
});
