/**
 * The connections other shard workers hand to one that does not serve yet
 * (src/node/waiting-connections.ts). A peer's CONNECT names the worker and carries no secret, and
 * the worker that accepted it gives its connection slot back as it hands the descriptor on: the
 * list is fed by whoever reaches rpc_addr, so it must be bounded, and it must not hold the
 * descriptors of a worker that never serves.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { WaitingConnections } from "../../src/node/waiting-connections.ts";
import { withTimeout } from "../support/timeout.ts";

/** Descriptor numbers stand in for sockets: nothing here reads them, the list only holds them. */
function recorder(): { closed: number[]; adopted: number[] } {
  return { closed: [], adopted: [] };
}

describe("connections waiting for a shard worker to serve", () => {
  it("a flood of connections handed over before the worker serves keeps at most the bound, the rest closed at once", () => {
    const r = recorder();
    const waiting = new WaitingConnections({
      max: 8,
      maxWaitMs: 60_000,
      close: (fd) => r.closed.push(fd),
    });
    for (let fd = 100; fd < 1100; fd++) waiting.add(fd, null);
    assert.equal(waiting.size, 8, "the list stays within its bound");
    assert.equal(r.closed.length, 992, "every connection past the bound is closed as it comes");
    assert.deepEqual(r.closed.slice(0, 3), [108, 109, 110]);
    waiting.serve((fd) => r.adopted.push(fd));
    assert.deepEqual(r.adopted, [100, 101, 102, 103, 104, 105, 106, 107], "served in order");
    assert.equal(waiting.size, 0);
    // Once it serves, a connection goes to the server, however many came before.
    waiting.add(2000, null);
    assert.deepEqual(r.adopted.at(-1), 2000);
  });

  it("a worker that never serves does not hold the connections past their wait, nor after it closes", async () => {
    const r = recorder();
    let allClosed = (): void => {};
    const closedInTime = new Promise<void>((resolve) => (allClosed = resolve));
    const waiting = new WaitingConnections({
      max: 8,
      maxWaitMs: 50,
      close: (fd) => {
        r.closed.push(fd);
        if (r.closed.length === 3) allClosed();
      },
    });
    try {
      waiting.add(1, null);
      waiting.add(2, Buffer.from("PRI"));
      waiting.add(3, null);
      await withTimeout(closedInTime, 2_000, "the waiting connections to be closed");
      assert.deepEqual(r.closed, [1, 2, 3]);
      assert.equal(waiting.size, 0);
      // A worker whose start failed closes what waits, and every connection handed over after.
      waiting.add(4, null);
      waiting.close();
      waiting.add(5, null);
      assert.deepEqual(r.closed, [1, 2, 3, 4, 5]);
      assert.equal(waiting.size, 0);
      waiting.serve((fd) => r.adopted.push(fd));
      assert.deepEqual(r.adopted, [], "nothing served after the close");
    } finally {
      waiting.close();
    }
  });
});
