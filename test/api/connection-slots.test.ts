import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Worker } from "node:worker_threads";
import { addressKey, ConnectionSlots } from "../../src/api/connection-slots.ts";

const A = "10.0.0.1";
const B = "10.0.0.2";

describe("ConnectionSlots", () => {
  it("takes up to the node's limit, refuses past it and counts the refusals", () => {
    const slots = new ConnectionSlots(3, 0);
    assert.deepEqual([slots.take(A), slots.take(B), slots.take(A)], [null, null, null]);
    assert.equal(slots.take(B), "node");
    assert.equal(slots.take(A), "node");
    assert.equal(slots.open, 3);
    assert.deepEqual(slots.refused, { node: 2, address: 0 });
    slots.release(A);
    assert.equal(slots.take(B), null);
    assert.equal(slots.open, 3);
  });

  it("bounds one address's connections, whatever the node has room for", () => {
    const slots = new ConnectionSlots(100, 2);
    assert.deepEqual([slots.take(A), slots.take(A), slots.take(A)], [null, null, "address"]);
    // Another address is not held back by A.
    assert.deepEqual([slots.take(B), slots.take(B)], [null, null]);
    assert.equal(slots.open, 4);
    assert.equal(slots.openFrom(A), 2);
    assert.deepEqual(slots.refused, { node: 0, address: 1 });
    slots.release(A);
    assert.equal(slots.take(A), null);
    // The node's bound is checked first, and a refusal for it takes nothing of the address's.
    const tight = new ConnectionSlots(1, 5);
    assert.equal(tight.take(A), null);
    assert.equal(tight.take(A), "node");
    assert.equal(tight.openFrom(A), 1);
  });

  it("keeps the last quarter of the bound (at most 256) for the members' addresses once set", () => {
    const M = "10.0.0.9";
    const slots = new ConnectionSlots(8, 0);
    assert.equal(slots.memberReserve, 2);
    assert.equal(new ConnectionSlots(10_000, 0).memberReserve, 256);
    // No members (a single node): no reserve.
    for (let i = 0; i < 8; i++) assert.equal(slots.take(A), null);
    assert.equal(slots.take(M), "node");
    for (let i = 0; i < 8; i++) slots.release(A);
    // Members known: clients get 6, a member's address the last 2 too, then nobody.
    slots.setMembers([M, "::1"]);
    for (let i = 0; i < 6; i++) assert.equal(slots.take(B), null);
    assert.equal(slots.take(B), "node");
    // A member's address in another spelling (IPv4-mapped) is the member.
    assert.equal(slots.take(`::ffff:${M}`), null);
    assert.equal(slots.take("::1"), null);
    assert.equal(slots.take(M), "node");
    assert.equal(slots.open, 8);
    assert.deepEqual(slots.refused, { node: 3, address: 0 });
    // Another view (thread) sees the table; a new table replaces it.
    const view = ConnectionSlots.of(slots.shared);
    assert.ok(view.isMember(M) && view.isMember("::1") && !view.isMember(B));
    slots.setMembers([B]);
    assert.ok(view.isMember(B) && !view.isMember(M));
    slots.setMembers([]);
    assert.ok(!view.isMember(B));
  });

  it("adopts a handed-on connection even when full", () => {
    const slots = new ConnectionSlots(1, 1);
    assert.equal(slots.take(A), null);
    slots.adopt(A);
    assert.equal(slots.open, 2);
    assert.equal(slots.openFrom(A), 2);
    assert.deepEqual(slots.refused, { node: 0, address: 0 });
    slots.release(A);
    slots.release(A);
    assert.equal(slots.take(A), null);
  });

  it("bounds the clients' streams apart from the connections, across views", () => {
    const slots = new ConnectionSlots(100, 0, 2);
    const view = ConnectionSlots.of(slots.shared);
    assert.equal(view.streams, 2);
    assert.deepEqual(
      [slots.takeStream(), view.takeStream(), slots.takeStream()],
      [true, true, false],
    );
    assert.equal(view.openStreams, 2);
    assert.equal(slots.refusedStreams, 1);
    // Connections are not held back by the streams.
    assert.equal(slots.take(A), null);
    view.releaseStream();
    assert.equal(slots.takeStream(), true);
    assert.equal(slots.openStreams, 2);
  });

  it("bounds the bytes of requests still arriving, and gives back what is released", () => {
    const slots = new ConnectionSlots(100, 0, 10, 1000);
    assert.equal(slots.takeIncoming(600), null);
    assert.equal(slots.takeIncoming(400), null);
    assert.equal(slots.takeIncoming(1), "node");
    assert.equal(slots.incoming, 1000);
    assert.equal(slots.refusedIncoming, 1);
    slots.releaseIncoming(600);
    assert.equal(ConnectionSlots.of(slots.shared).takeIncoming(600), null);
    assert.equal(slots.incoming, 1000);
  });

  it("one address holds its share of the incoming bytes at most; another address is not held back", () => {
    const slots = new ConnectionSlots(100, 0, 10, 1000, 300);
    const a = slots.incomingSource(A);
    const b = slots.incomingSource(B);
    assert.equal(slots.takeIncoming(200, a), null);
    assert.equal(slots.takeIncoming(100, a), null);
    assert.equal(slots.takeIncoming(1, a), "address");
    assert.equal(slots.incoming, 300, "a refusal counts nothing");
    assert.equal(slots.incomingFrom(A), 300);
    assert.equal(slots.refusedIncoming, 1);
    // Another thread's view shares the per-address counts.
    const view = ConnectionSlots.of(slots.shared);
    assert.equal(view.takeIncoming(300, view.incomingSource(B)), null);
    assert.equal(slots.incomingFrom(B), 300);
    slots.releaseIncoming(200, a);
    assert.equal(slots.takeIncoming(200, a), null);
    slots.releaseIncoming(300, b);
    assert.equal(slots.incomingFrom(B), 0);
    assert.equal(slots.incoming, 300);
  });

  it("keeps the last quarter of the incoming bytes for the members' addresses, once they are known", () => {
    const slots = new ConnectionSlots(100, 0, 10, 1000, 250);
    assert.equal(slots.incomingMemberReserve, 0, "a single node keeps none");
    slots.setMembers(["10.0.0.9"]);
    assert.equal(slots.incomingMemberReserve, 250);
    const clients = ["10.1.0.1", "10.1.0.2", "10.1.0.3", "10.1.0.4"].map((x) =>
      slots.incomingSource(x),
    );
    for (const c of clients.slice(0, 3)) assert.equal(slots.takeIncoming(250, c), null);
    // 750 held by clients: the rest is the members'.
    assert.equal(slots.takeIncoming(1, clients[3]), "node");
    const member = slots.incomingSource("10.0.0.9");
    assert.equal(member.member, true);
    // A member is held to the node's bound only, not to an address's share.
    assert.equal(slots.takeIncoming(250, member), null);
    assert.equal(slots.takeIncoming(1, member), "node");
    slots.releaseIncoming(250, member);
    assert.equal(slots.incoming, 750);
    // A share larger than a quarter (one whole request) leaves a client room for it.
    const tight = new ConnectionSlots(100, 0, 10, 1000, 900);
    tight.setMembers(["10.0.0.9"]);
    assert.equal(tight.incomingMemberReserve, 100);
  });

  it("refuses limits that are not integers in range", () => {
    assert.throws(() => new ConnectionSlots(0, 0), RangeError);
    assert.throws(() => new ConnectionSlots(2.5, 0), RangeError);
    assert.throws(() => new ConnectionSlots(2, -1), RangeError);
    assert.throws(() => new ConnectionSlots(2, 0, 0), RangeError);
    assert.throws(() => new ConnectionSlots(2, 0, 1, 0), RangeError);
  });

  it("is one count across threads: a worker's takes fill this thread's slots", async () => {
    const slots = new ConnectionSlots(100, 0);
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
    for (let i = 0; i < 1000; i++) if (slots.take(A) === null) here++;
    const there = await new Promise<number>((resolve) => worker.once("message", resolve));
    await worker.terminate();
    assert.equal(here + there, 100);
    assert.equal(slots.open, 100);
    assert.deepEqual(slots.refused, { node: 1900, address: 0 });
  });

  it("a view made from `shared` sees the same counts and bounds", () => {
    const slots = new ConnectionSlots(10, 2);
    const copy = ConnectionSlots.of(slots.shared);
    assert.equal(copy.perAddress, 2);
    assert.equal(copy.take(A), null);
    assert.equal(slots.take(A), null);
    assert.equal(copy.take(A), "address");
    assert.deepEqual(slots.refused, { node: 0, address: 1 });
  });
});

describe("addressKey", () => {
  it("keeps an IPv4 address, written plainly or IPv4-mapped", () => {
    assert.equal(addressKey("192.0.2.7"), "192.0.2.7");
    assert.equal(addressKey("::ffff:192.0.2.7"), "192.0.2.7");
    assert.equal(addressKey("::FFFF:192.0.2.7"), "192.0.2.7");
  });

  it("takes an IPv6 address by its /64, however it is written", () => {
    const key = "2001:db8:0:1";
    assert.equal(addressKey("2001:db8:0:1::1"), key);
    assert.equal(addressKey("2001:db8:0:1:ffff:eeee:dddd:cccc"), key);
    assert.equal(addressKey("2001:0db8:0000:0001:0:0:0:2"), key);
    assert.equal(addressKey("2001:db8::1:0:0:0:5"), key);
    assert.equal(addressKey("fe80::1%eth0"), "fe80:0:0:0");
    assert.equal(addressKey("::1"), "0:0:0:0");
    assert.notEqual(addressKey("2001:db8:0:2::1"), key);
  });

  it("is empty for an unknown address", () => {
    assert.equal(addressKey(undefined), "");
    assert.equal(addressKey(""), "");
  });
});
