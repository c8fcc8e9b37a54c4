import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { SoonestTimer } from "../../src/common/soonest-timer.ts";

describe("SoonestTimer", () => {
  it("runs once at the soonest time asked, however the requests are ordered", (t) => {
    t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
    const runs: number[] = [];
    const timer = new SoonestTimer(() => runs.push(Date.now()));
    timer.request(200);
    timer.request(50); // sooner: moves the pending call earlier
    timer.request(120); // later than the pending call: changes nothing
    t.mock.timers.tick(49);
    assert.deepEqual(runs, []);
    t.mock.timers.tick(1);
    assert.deepEqual(runs, [50]);
    t.mock.timers.tick(500);
    assert.deepEqual(runs, [50], "the later requests were folded into the call that ran");
  });

  it("takes a new request once the pending call has run, and cancel drops a pending one", (t) => {
    t.mock.timers.enable({ apis: ["setTimeout", "Date"] });
    let runs = 0;
    const timer = new SoonestTimer(() => runs++);
    timer.request(10);
    t.mock.timers.tick(10);
    timer.request(10);
    t.mock.timers.tick(10);
    assert.equal(runs, 2);
    timer.request(10);
    timer.cancel();
    t.mock.timers.tick(100);
    assert.equal(runs, 2);
  });
});
