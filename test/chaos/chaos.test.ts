/**
 * The chaos smoke (issue 11): two short runs of the chaos harness on real processes, with fixed
 * seeds: one of mixed faults; one of the scripted "grow-shrink" membership changes (3 → 5 nodes
 * by joins, back to 3 by decommissions, a member lost for good and replaced by a new identity;
 * test/chaos/faults.ts SCRIPTS) under the workload, on a secured cluster (TLS between the peers,
 * through the FaultNet's proxies, mutual TLS for the clients, sealed gossip through its relays;
 * each joining node admitted by its own certificate: the same script in cleartext, seed 12, is
 * left to `npm run chaos`, for the suite's time; test/e2e/cluster-elastic.test.ts grows and
 * shrinks a cleartext cluster). The run of the "rotate" scenario on a secured cluster that was
 * the smoke's third (seed 14: the gossip key and every node's certificate rotated under load,
 * each node checked to use the new ones) is left to
 * `npm run chaos -- --runs 1 --seed 14 --scenario rotate --duration 25 --tls`, for the suite's
 * time (~40 s of one test lane): in `npm test`, test/e2e/authz.test.ts rotates a node's
 * certificate under load, test/e2e/reloaded-files.test.ts reloads each file a node reads (the
 * gossip key too), test/membership/seal.test.ts checks rotation by a second key. Each run
 * must pass every check
 * (linearizability, serializable reads, acknowledged writes read back through every member,
 * placement: every shard on exactly three distinct active members and one group, health, views,
 * no crash). `npm run chaos` runs the long ones.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import type { NetStats } from "./net.ts";
import { SCRIPTS } from "./faults.ts";
import { runChaos } from "./run.ts";

/** Seed, scenario, duration (a scripted scenario runs until its script ends) and TLS. */
const RUNS = [
  { seed: 11, scenario: "mixed", durationMs: 20_000, tls: false },
  { seed: 13, scenario: "grow-shrink", durationMs: 10_000, tls: true },
] as const;

describe("chaos smoke: faults and membership changes on a cluster of real processes", () => {
  let out: string;
  before(async () => {
    out = await mkdtemp(join(tmpdir(), "cairn-chaos-smoke-"));
  });
  after(async () => {
    await rm(out, { recursive: true, force: true });
  });

  for (const { seed, scenario, durationMs, tls } of RUNS) {
    it(
      `${scenario}${tls ? " over TLS with sealed gossip" : ""} seed ${seed}: linearizable, nothing acknowledged lost, healthy after the heal`,
      { timeout: 240_000 },
      async () => {
        const report = await runChaos({
          seed,
          scenario,
          durationMs,
          outDir: out,
          tls,
          // A scripted run's faults are its script; a drawn run's at least two.
          minFaults: 2,
          log: () => undefined,
        });
        console.log(report.summary);
        assert.equal(
          report.verdict,
          "pass",
          `${report.summary}\n${report.findings.map((f) => `[${f.check}] ${f.message}`).join("\n")}`,
        );
        assert.ok(report.faults.length >= 2, `only ${report.faults.length} faults injected`);
        if (scenario === "grow-shrink") {
          // The whole script ran: 3 → 5 → 3 with a replacement, every change finished.
          assert.deepEqual(
            report.changes.map((c) => `${c.kind}:${c.done}`),
            SCRIPTS[scenario]?.map((k) => `${k}:true`),
          );
        }
        // A node that reached a peer around its proxy would escape the network's faults.
        const net = report.net as NetStats;
        assert.ok(net.connections > 0, "no peer connection went through the proxies");
        assert.equal(net.unproxied, 0, "peer connections bypassed the proxies");
        // On a secured cluster the harness's clients speak only TLS: nodes serving in cleartext
        // would answer none of them.
        assert.ok(
          report.operations.checked > 500,
          `only ${report.operations.checked} operations checked`,
        );
      },
    );
  }
});
