/**
 * The chaos schedule's plan of membership changes (faults.ts, planChanges): every kind of
 * change a scenario names happens in each run, in an order the cluster allows at each step;
 * the disk guard's breach check; the torn WAL tail a torn-write fault writes.
 */
import assert from "node:assert/strict";
import { mkdir, mkdtemp, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { seededRng } from "../../src/common/index.ts";
import {
  type DiskSample,
  type FaultKind,
  guardBreach,
  planChanges,
  SCENARIOS,
  scenarioKinds,
  tearWalTail,
} from "./faults.ts";

describe("chaos faults: the plan of membership changes", () => {
  const kinds = SCENARIOS["membership"] as readonly FaultKind[];

  for (const founding of [3, 5]) {
    it(`has join, decommission and remove, each allowed where it stands (${founding} founding members)`, () => {
      const orders = new Set<string>();
      for (let seed = 1; seed <= 200; seed++) {
        const plan = planChanges(kinds, founding, seededRng(seed));
        orders.add(plan.join(","));
        for (const k of ["join", "decommission", "remove"] as const) assert.ok(plan.includes(k));
        let members = founding;
        for (const k of plan) {
          if (k === "join")
            assert.ok(members < founding + 2, `${plan.join(",")}: a join at ${members}`);
          else assert.ok(members > 3, `${plan.join(",")}: a ${k} at ${members} members`);
          members += k === "join" ? 1 : -1;
        }
      }
      // Seeded orders: more than one.
      assert.ok(orders.size > 1, [...orders].join(" | "));
    });
  }

  it("is empty for a scenario without changes", () => {
    assert.deepEqual(planChanges(SCENARIOS["kill"] as readonly FaultKind[], 3, seededRng(1)), []);
  });
});

describe("chaos faults: what a run draws from", () => {
  it("leaves the TLS-only faults out of a cleartext run, so that its seeds draw what they drew before", () => {
    // mixed's kinds in cleartext, as they were before rotate-keys (a seed's schedule depends on
    // the list: the smoke's seed 11 draws a pause and a wipe from it).
    assert.deepEqual(scenarioKinds("mixed", false), [
      "kill-leader",
      "kill-random",
      "kill-flap",
      "kill-all",
      "pause",
      "partition",
      "partition-reset",
      "asymmetric",
      "udp-loss",
      "delay",
      "wipe",
      "torn-write",
      "join",
      "decommission",
      "remove",
    ]);
    assert.ok(scenarioKinds("mixed", true)?.includes("rotate-keys"));
    // bit-rot is its own scenario's: newer than the recorded mixed seeds.
    assert.ok(!scenarioKinds("mixed", true)?.includes("bit-rot"));
    assert.ok(scenarioKinds("bit-rot", false)?.includes("bit-rot"));
    assert.deepEqual(scenarioKinds("membership", false), SCENARIOS["membership"]);
  });

  it("refuses a TLS-only scenario in cleartext, and an unknown one", () => {
    assert.equal(scenarioKinds("rotate", false), null);
    assert.ok(scenarioKinds("rotate", true)?.includes("rotate-keys"));
    assert.equal(scenarioKinds("nope", true), null);
    assert.deepEqual(scenarioKinds("none", false), []);
  });
});

describe("chaos faults: the disk guard's judge", () => {
  const sample = (over: Partial<DiskSample>): DiskSample => ({
    via: "n1",
    full: true,
    replicas: 10,
    placed: 48,
    roomy: 3,
    ...over,
  });

  it("finds a member marked full gaining replicas while others have room", () => {
    assert.match(
      guardBreach("n4", sample({}), sample({ replicas: 11 })) ?? "",
      /n4, marked nearly full in n1's view, went from 10 to 11 replicas/,
    );
    // A new shard does not excuse it while three members have room for it.
    assert.notEqual(guardBreach("n4", sample({}), sample({ replicas: 11, placed: 51 })), null);
    // Nor does a shard under its factor given one more (one more placement, not three).
    const short = sample({ roomy: 2 });
    assert.notEqual(guardBreach("n4", short, sample({ replicas: 11, placed: 49, roomy: 2 })), null);
  });

  it("lets a new shard land on it when too few members have room", () => {
    const before = sample({ roomy: 2 });
    assert.equal(guardBreach("n4", before, sample({ replicas: 11, placed: 51, roomy: 2 })), null);
    // More placements than new shards: a move.
    assert.notEqual(
      guardBreach("n4", before, sample({ replicas: 12, placed: 51, roomy: 2 })),
      null,
    );
  });

  it("judges only two samples of one view, both marked", () => {
    assert.equal(guardBreach("n4", sample({}), sample({ replicas: 11, via: "n2" })), null);
    assert.equal(guardBreach("n4", sample({ full: false }), sample({ replicas: 11 })), null);
    assert.equal(guardBreach("n4", sample({}), sample({ replicas: 11, full: false })), null);
    assert.equal(guardBreach("n4", sample({}), sample({ replicas: 9 })), null);
  });
});

describe("chaos faults: a torn WAL tail", () => {
  it("tears one worker's WAL, never a WAL's created marker beside it", async () => {
    const dir = await mkdtemp(join(tmpdir(), "cairn-tear-"));
    try {
      for (const i of [0, 1]) {
        await mkdir(join(dir, `wal-worker-${i}`));
        await writeFile(join(dir, `wal-worker-${i}`, "00000001.wal"), "");
        await writeFile(join(dir, `wal-worker-${i}.created`), "");
      }
      const torn = new Set<string>();
      for (let seed = 1; seed <= 16; seed++) {
        const detail = await tearWalTail(dir, seededRng(seed));
        const name = /^(wal-worker-\d+)\/00000001\.wal /.exec(detail)?.[1];
        assert.ok(name !== undefined, detail);
        torn.add(name);
      }
      assert.deepEqual([...torn].sort(), ["wal-worker-0", "wal-worker-1"]);
      for (const i of [0, 1]) {
        assert.ok((await readFile(join(dir, `wal-worker-${i}`, "00000001.wal"))).length > 0);
      }
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });
});
