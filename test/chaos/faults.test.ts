/**
 * The chaos schedule's plan of membership changes (faults.ts, planChanges): every kind of
 * change a scenario names happens in each run, in an order the cluster allows at each step.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { seededRng } from "../../src/common/index.ts";
import { type FaultKind, planChanges, SCENARIOS } from "./faults.ts";

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
