/**
 * RequestBudget: the node-wide bound on the bytes of waiting requests (driver invariant 5).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { CairnError } from "../../src/common/errors.ts";
import { RequestBudget } from "../../src/replication/request-budget.ts";

const refused = (err: CairnError): boolean => {
  assert.equal(err.code, "CAIRN_ERR_BACKPRESSURE");
  assert.equal(err.retryable, true);
  return true;
};

describe("RequestBudget", () => {
  it("admits requests up to the limit, then refuses them as retryable back-pressure", () => {
    const budget = new RequestBudget(1_000);
    budget.reserve(600);
    budget.reserve(400);
    assert.equal(budget.pendingBytes, 1_000);
    assert.throws(() => budget.reserve(1), refused);
    assert.equal(budget.pendingBytes, 1_000, "a refused request takes nothing");
  });

  it("admits a request again once others gave their bytes back", () => {
    const budget = new RequestBudget(1_000);
    budget.reserve(800);
    assert.throws(() => budget.reserve(300), refused);
    budget.unreserve(800);
    budget.reserve(300);
    assert.equal(budget.pendingBytes, 300);
  });

  it("always admits one request when nothing waits, however large", () => {
    const budget = new RequestBudget(1_000);
    budget.reserve(5_000);
    assert.equal(budget.pendingBytes, 5_000);
    assert.throws(() => budget.reserve(1), refused);
    budget.unreserve(5_000);
    assert.equal(budget.pendingBytes, 0);
  });
});
