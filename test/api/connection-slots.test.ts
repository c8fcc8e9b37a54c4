import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Worker } from "node:worker_threads";
import { ConnectionSlots } from "../../src/api/connection-slots.ts";

describe("ConnectionSlots", () => {
  it("takes up to its limit, refuses past it and counts the refusals", () => {
    const slots = new ConnectionSlots(3);
    assert.deepEqual([slots.take(), slots.take(), slots.take()], [true, true, true]);
    assert.equal(slots.take(), false);
    assert.equal(slots.take(), false);
    assert.equal(slots.open, 3);
    assert.equal(slots.refused, 2);
    slots.release();
    assert.equal(slots.take(), true);
    assert.equal(slots.open, 3);
  });

  it("adopts a handed-on connection even when full", () => {
    const slots = new ConnectionSlots(1);
    assert.equal(slots.take(), true);
    slots.adopt();
    assert.equal(slots.open, 2);
    assert.equal(slots.refused, 0);
    slots.release();
    slots.release();
    assert.equal(slots.take(), true);
  });

  it("refuses a limit that is not a positive integer", () => {
    assert.throws(() => new ConnectionSlots(0), RangeError);
    assert.throws(() => new ConnectionSlots(2.5), RangeError);
  });

  it("is one count across threads: a worker's takes fill this thread's slots", async () => {
    const slots = new ConnectionSlots(100);
    // The worker takes 1000 times through its own view of the shared count.
    const source = `
      const { workerData, parentPort } = require("node:worker_threads");
      const cells = new Int32Array(workerData.buffer);
      let taken = 0;
      for (let i = 0; i < 1000; i++) {
        if (Atomics.add(cells, 0, 1) < workerData.limit) taken++;
        else { Atomics.sub(cells, 0, 1); Atomics.add(cells, 1, 1); }
      }
      parentPort.postMessage(taken);`;
    const worker = new Worker(source, { eval: true, workerData: slots.shared });
    let here = 0;
    for (let i = 0; i < 1000; i++) if (slots.take()) here++;
    const there = await new Promise<number>((resolve) => worker.once("message", resolve));
    await worker.terminate();
    assert.equal(here + there, 100);
    assert.equal(slots.open, 100);
    assert.equal(slots.refused, 1900);
  });

  it("a copy made from `shared` views the same count", () => {
    const slots = new ConnectionSlots(2);
    const copy = new ConnectionSlots(slots.shared.limit, slots.shared);
    assert.equal(copy.take(), true);
    assert.equal(slots.take(), true);
    assert.equal(copy.take(), false);
    assert.equal(slots.refused, 1);
  });
});
