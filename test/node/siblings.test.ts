/**
 * The shard workers' hand-off (src/node/siblings.ts) over a real MessageChannel: calls and their
 * answers cross in one message per turn, errors keep what the API maps, and closing fails what
 * still waits.
 */
import assert from "node:assert/strict";
import { EventEmitter } from "node:events";
import { describe, it } from "node:test";
import { MessageChannel, type MessagePort } from "node:worker_threads";
import { Metadata, status } from "@grpc/grpc-js";
import { DEADLINE_ON_CLOCK, deadlineClock } from "../../src/common/index.ts";
import { CairnError } from "../../src/common/errors.ts";
import { NotLeaderError, nodeId } from "../../src/raft/index.ts";
import { MetaState } from "../../src/cluster/index.ts";
import {
  fromWireError,
  MetaShare,
  RoutedStore,
  serveSibling,
  SharedViews,
  shardCellMeta,
  Sibling,
  siblingProposer,
  type SiblingCall,
  type SiblingHandlers,
  type SiblingServer,
  toWireError,
} from "../../src/node/siblings.ts";
import {
  type ClientCall,
  type MultiRaft,
  ReadCancelledError,
  type ScanPage,
} from "../../src/replication/index.ts";
import { withTimeout } from "../support/timeout.ts";
import { adminService } from "../../src/api/admin-service.ts";
import { silentLogger } from "../../src/ops/index.ts";
import { errorCodeOf } from "../../src/node/cluster.ts";

const b = (s: string): Uint8Array => new TextEncoder().encode(s);
const dec = (bytes: Uint8Array): string => new TextDecoder().decode(bytes);

/** A sibling's handlers that serve calls with `serve` and ignore the rest. */
function handlers(serve: SiblingServer): SiblingHandlers {
  return {
    serve,
    onView: () => {},
    onConnection: () => assert.fail("no connection is handed over here"),
    onMeta: () => {},
    onDecommissioned: () => {},
    onAdmission: () => {},
    onStreamAddress: () => {},
  };
}

/** A sibling with the driver's request timeout of a node (10 s), or `requestTimeoutMs`. */
function sibling(port: MessagePort, h: SiblingHandlers, requestTimeoutMs = 10_000): Sibling {
  return new Sibling(port, h, { requestTimeoutMs });
}

describe("shard worker siblings", () => {
  it("errors cross with their code, retryability, message and leader", () => {
    const notLeader = fromWireError(toWireError(new NotLeaderError(nodeId("n2"))));
    assert.ok(notLeader instanceof NotLeaderError, "the API counts it as not_leader");
    assert.equal(notLeader.leader, "n2");
    assert.equal(notLeader.message, "not the leader (leader is n2)");
    const busy = fromWireError(
      toWireError(new CairnError("CAIRN_ERR_BACKPRESSURE", "too much", { retryable: true })),
    );
    assert.ok(busy instanceof CairnError);
    assert.deepEqual(
      [busy.code, busy.message, busy.retryable],
      ["CAIRN_ERR_BACKPRESSURE", "too much", true],
    );
    const plain = fromWireError(toWireError(new TypeError("boom")));
    assert.ok(!(plain instanceof CairnError), "an unexpected error stays internal");
    assert.equal(plain.message, "boom");
  });

  it("a turn's calls cross in one message, and each gets its own answer", async () => {
    const { port1, port2 } = new MessageChannel();
    let messages = 0;
    port2.on("message", () => messages++);
    const served: SiblingCall[] = [];
    const owner = sibling(
      port2,
      handlers((call) => {
        served.push(call);
        return call.op === "snapshot" && call.shard === 3
          ? Promise.reject(new CairnError("CAIRN_ERR_SHARD_NOT_ACTIVE", "shard 3 is not active"))
          : Promise.resolve(call.op === "snapshot" ? call.shard * 10 : null);
      }),
    );
    const asker = sibling(
      port1,
      handlers(() => Promise.reject(new Error("not asked"))),
    );
    try {
      const answers = await Promise.allSettled(
        [1, 2, 3, 4].map((shard) => asker.call({ op: "snapshot", shard })),
      );
      assert.equal(messages, 1, "four calls, one message");
      assert.deepEqual(
        served.map((c) => (c.op === "snapshot" ? c.shard : -1)),
        [1, 2, 3, 4],
      );
      assert.deepEqual(
        answers.map((a) => (a.status === "fulfilled" ? a.value : (a.reason as CairnError).code)),
        [10, 20, "CAIRN_ERR_SHARD_NOT_ACTIVE", 40],
      );
    } finally {
      asker.close();
      owner.close();
    }
  });

  it("a scan merges every worker's page, the shards each left out included", async () => {
    // Two workers, each skipping the lost shards it owns (ScanRequest.skipUnavailable). The
    // other worker's were dropped on the way: its lost shards went missing without a name.
    const item = (k: string) => ({
      key: new TextEncoder().encode(k),
      value: new Uint8Array(0),
      version: { index: 1, term: 1 },
    });
    const driver = (page: ScanPage) =>
      ({ scan: () => Promise.resolve(page) }) as unknown as MultiRaft;
    const { port1, port2 } = new MessageChannel();
    const other = sibling(
      port2,
      handlers(
        serveSibling(
          driver({ items: [item("b")], more: false, skipped: [9, 379] }),
          () => Promise.reject(new Error("no transfer here")),
          null,
        ),
      ),
    );
    const asker = sibling(
      port1,
      handlers(() => Promise.reject(new Error("not asked"))),
    );
    try {
      const store = new RoutedStore(driver({ items: [item("a")], more: false, skipped: [26] }), [
        null,
        asker,
      ]);
      const page = await store.scan({
        start: new Uint8Array(0),
        end: null,
        limit: 10,
        maxBytes: Infinity,
        linearizable: false,
        skipUnavailable: true,
      });
      assert.deepEqual(
        page.items.map((i) => new TextDecoder().decode(i.key)),
        ["a", "b"],
      );
      assert.deepEqual(page.skipped, [9, 26, 379]);
    } finally {
      asker.close();
      other.close();
    }
  });

  it("a sibling whose end closes (its thread ended) fails the calls waiting on it", async () => {
    const { port1, port2 } = new MessageChannel();
    port2.on("message", () => {}); // never answers
    const asker = sibling(
      port1,
      handlers(() => Promise.resolve(null)),
    );
    const waiting = asker.call({ op: "snapshot", shard: 1 });
    port2.close();
    await assert.rejects(waiting, { code: "CAIRN_ERR_SHUTTING_DOWN", retryable: true });
  });

  it("a write the owner received before its end closed fails with its outcome unknown, not retryably", async () => {
    const { port1, port2 } = new MessageChannel();
    let received!: () => void;
    const atOwner = new Promise<void>((resolve) => (received = resolve));
    // The owner takes the writes into its log and ends (its thread failed) before it answers.
    const owner = sibling(
      port2,
      handlers(() => {
        received();
        return new Promise(() => {});
      }),
    );
    const asker = sibling(
      port1,
      handlers(() => Promise.resolve(null)),
    );
    const put = asker.call({ op: "put", key: b("k"), value: b("v"), expected: undefined });
    const del = asker.call({ op: "delete", key: b("j"), expected: undefined });
    await atOwner;
    owner.close();
    // Either may have been applied: CAIRN_ERR_SHUTTING_DOWN would tell the client it was not,
    // and it would retry it (applied twice, or a compare-and-set that succeeded failing).
    for (const write of [put, del]) {
      await assert.rejects(write, (err: CairnError) => {
        assert.notEqual(err.code, "CAIRN_ERR_SHUTTING_DOWN");
        assert.equal(err.retryable, false);
        assert.match(err.message, /outcome is unknown/);
        return true;
      });
    }
    // A write that never left this worker was not applied: retried safely.
    await assert.rejects(
      asker.call({ op: "put", key: b("k"), value: b("v"), expected: undefined }),
      { code: "CAIRN_ERR_SHUTTING_DOWN", retryable: true },
    );
  });

  it("a call the owner never answers (its thread stuck) fails by its deadline, a write's outcome unknown, and leaves nothing waiting", async () => {
    const { port1, port2 } = new MessageChannel();
    // The owner's thread is alive (its end stays open) but never answers.
    let received = 0;
    port2.on("message", () => received++);
    const requestTimeoutMs = 100;
    const asker = sibling(
      port1,
      handlers(() => Promise.resolve(null)),
      requestTimeoutMs,
    );
    try {
      const started = performance.now();
      const put = asker.call({ op: "put", key: b("k"), value: b("v"), expected: undefined });
      const get = asker.call({ op: "get", key: b("k"), linearizable: true });
      const ended = Promise.allSettled([put, get]).then(() => performance.now() - started);
      const waited = await withTimeout(ended, 10_000, "the calls to a stuck owner to end");
      assert.equal(received, 1, "both calls reached the owner, in one message");
      // The owner's driver answers by its request timeout; a second more is the sibling's.
      assert.ok(waited >= requestTimeoutMs + 1_000 - 5, `ended after ${waited} ms`);
      assert.ok(waited < requestTimeoutMs + 1_000 + 2_000, `ended after ${waited} ms`);
      // The owner may have the write in its log: "not applied" would have it retried.
      await assert.rejects(put, (err: CairnError) => {
        assert.equal(err.code, "CAIRN_ERR_TIMEOUT");
        assert.equal(err.retryable, false);
        assert.match(err.message, /outcome is unknown/);
        return true;
      });
      await assert.rejects(get, { code: "CAIRN_ERR_TIMEOUT", retryable: true });
      assert.equal(asker.pending, 0, "no call left in the table");
    } finally {
      asker.close();
      port2.close();
    }
  });

  it("a call the owner never answers fails at its client's deadline, not the driver's bound, and leaves nothing waiting", async () => {
    // A client with a 300 ms deadline had its call wait 11 s here (the driver's request timeout
    // and a second) after it gave up, holding its place in the table and its share of the budget.
    const { port1, port2 } = new MessageChannel();
    const posted: SiblingCall[][] = [];
    port2.on("message", (m: { calls: SiblingCall[] }) => posted.push(m.calls));
    const asker = sibling(
      port1,
      handlers(() => Promise.resolve(null)),
    );
    try {
      const started = performance.now();
      const deadline = deadlineClock() + 300;
      const put = asker.call({
        op: "put",
        key: b("k"),
        value: b("v"),
        expected: undefined,
        deadline,
      });
      const get = asker.call({ op: "get", key: b("k"), linearizable: true, deadline });
      const ended = Promise.allSettled([put, get]).then(() => performance.now() - started);
      const waited = await withTimeout(ended, 5_000, "the calls past their deadline to end");
      assert.ok(waited >= 300 - 5 && waited < 300 + 500, `ended after ${waited} ms`);
      // Posted to the owner, which may have the write in its log.
      await assert.rejects(put, (err: CairnError) => {
        assert.equal(err.code, "CAIRN_ERR_TIMEOUT");
        assert.equal(err.retryable, false);
        assert.match(err.message, /before the call's deadline .* outcome is unknown/);
        return true;
      });
      await assert.rejects(get, { code: "CAIRN_ERR_TIMEOUT", retryable: true });
      assert.equal(asker.pending, 0, "no call left in the table");
      // A call already past its deadline is never posted: it fails at once, retryably.
      const late = asker.call({
        op: "put",
        key: b("late"),
        value: b("v"),
        expected: undefined,
        deadline: deadlineClock(),
      });
      await assert.rejects(late, { code: "CAIRN_ERR_TIMEOUT", retryable: true });
      assert.equal(asker.pending, 0);
      const next = asker.call({
        op: "get",
        key: b("next"),
        linearizable: false,
        deadline: deadlineClock() + 50,
      });
      await assert.rejects(next, { code: "CAIRN_ERR_TIMEOUT" });
      assert.deepEqual(
        posted.map((calls) =>
          calls.map((c) => (c.op === "put" || c.op === "get" ? dec(c.key) : c.op)),
        ),
        [["k", "k"], ["next"]],
        "the late write never left",
      );
    } finally {
      asker.close();
      port2.close();
    }
  });

  it("a KV call the store hands to the owner carries its deadline there and fails at it", async () => {
    const { port1, port2 } = new MessageChannel();
    const posted: SiblingCall[] = [];
    port2.on("message", (m: { calls: SiblingCall[] }) => posted.push(...m.calls));
    const asker = sibling(
      port1,
      handlers(() => Promise.resolve(null)),
    );
    // Every key's shard is 1, worker 1's: the owner never answers.
    const local = {
      shardOf: () => 1,
      scan: () => Promise.resolve({ items: [], more: false }),
    } as unknown as MultiRaft;
    const store = new RoutedStore(local, [null, asker]);
    try {
      const started = performance.now();
      const deadline = deadlineClock() + 300;
      const calls = [
        store.put(b("k"), b("v"), undefined, deadline),
        store.delete(b("k"), undefined, deadline),
        store.get(b("k"), true, deadline),
        store.scan(
          { start: b(""), end: null, limit: 10, maxBytes: Infinity, linearizable: true },
          deadline,
        ),
      ];
      const ended = Promise.allSettled(calls).then(() => performance.now() - started);
      const waited = await withTimeout(ended, 5_000, "the calls past their deadline to end");
      assert.ok(waited >= 300 - 5 && waited < 300 + 500, `ended after ${waited} ms`);
      for (const call of calls) await assert.rejects(call, { code: "CAIRN_ERR_TIMEOUT" });
      assert.equal(asker.pending, 0, "no call left in the table");
      assert.deepEqual(
        posted.map((c) => [c.op, "deadline" in c ? c.deadline : null]),
        [
          ["put", deadline],
          ["delete", deadline],
          ["get", deadline],
          ["scan", deadline],
        ],
      );
    } finally {
      asker.close();
      port2.close();
    }
  });

  it("a write's, a read's and a scan's deadline reach the driver, in the owner and in the worker that owns its shard", async () => {
    // There the driver never proposes a write past it (shard.ts), its client gone.
    const seen: [string, number | undefined][] = [];
    const written = { type: "written", version: { index: 1, term: 1 } };
    const driver = {
      shardOf: () => 0,
      put: (_k: Uint8Array, _v: Uint8Array, _e: unknown, deadline?: number) => {
        seen.push(["put", deadline]);
        return Promise.resolve(written);
      },
      delete: (_k: Uint8Array, _e: unknown, deadline?: number) => {
        seen.push(["delete", deadline]);
        return Promise.resolve(written);
      },
      get: (_k: Uint8Array, _l: boolean, deadline?: number) => {
        seen.push(["get", deadline]);
        return Promise.resolve(null);
      },
      scan: (_r: unknown, deadline?: number) => {
        seen.push(["scan", deadline]);
        return Promise.resolve({ items: [], more: false });
      },
    } as unknown as MultiRaft;
    const serve = serveSibling(driver, () => Promise.reject(new Error("not asked")), null);
    await serve({ op: "put", key: b("k"), value: b("v"), expected: undefined, deadline: 7 }, null);
    await serve({ op: "delete", key: b("k"), expected: undefined, deadline: 8 }, null);
    // A read's too: it stops waiting for its read index there (multi-raft-reads.ts).
    await serve({ op: "get", key: b("k"), linearizable: true, deadline: 11 }, null);
    // And a scan's: its shards' read barriers stop waiting at it.
    const req = { start: b(""), end: null, limit: 1, maxBytes: 1024, linearizable: true };
    await serve({ op: "scan", req, deadline: 13 }, null);
    const store = new RoutedStore(driver, [null]);
    await store.put(b("k"), b("v"), undefined, 9);
    await store.delete(b("k"), undefined, 10);
    await store.get(b("k"), true, 12);
    await store.scan(req, 14);
    assert.deepEqual(seen, [
      ["put", 7],
      ["delete", 8],
      ["get", 11],
      ["scan", 13],
      ["put", 9],
      ["delete", 10],
      ["get", 12],
      ["scan", 14],
    ]);
  });

  it("an Admin call handed to the owner carries its client's deadline there and fails at it", async () => {
    // SnapshotShard and TransferLeader on another worker's shard waited 11 s here (the driver's
    // request timeout and a second) after a client with a 300 ms deadline gave up, as a KV call
    // did before: what the owner does is the same either way (a call posted runs there).
    const { port1, port2 } = new MessageChannel();
    const posted: SiblingCall[] = [];
    port2.on("message", (m: { calls: SiblingCall[] }) => posted.push(...m.calls));
    const asker = sibling(
      port1,
      handlers(() => Promise.resolve(null)),
    );
    // Shard 1 is worker 1's: the owner never answers.
    const local = {} as unknown as MultiRaft;
    const store = new RoutedStore(local, [null, asker]);
    const admin = adminService(store, silentLogger, (id, to, deadline) =>
      store.transfer(id, to, () => Promise.reject(new Error("not here")), deadline),
    );
    try {
      const started = performance.now();
      const deadline = deadlineClock() + 300;
      const answer = (method: string, request: object): Promise<unknown> =>
        new Promise((resolve) =>
          (admin[method] as (call: unknown, callback: (err: unknown) => void) => void)(
            { request, getDeadline: () => deadline, [DEADLINE_ON_CLOCK]: true },
            resolve,
          ),
        );
      const errors = await withTimeout(
        Promise.all([
          answer("SnapshotShard", { shard_id: 1 }),
          answer("TransferLeader", { shard_id: 1, node_id: "n2" }),
        ]),
        5_000,
        "the Admin calls past their deadline to end",
      );
      const waited = performance.now() - started;
      assert.ok(waited >= 300 - 5 && waited < 300 + 500, `ended after ${waited} ms`);
      for (const err of errors) {
        const { code, details } = err as { code: number; details: string };
        assert.equal(code, status.DEADLINE_EXCEEDED, details);
        assert.match(details, /before the call's deadline/);
      }
      assert.equal(asker.pending, 0, "no call left in the table");
      assert.deepEqual(
        posted.map((c) => [c.op, "deadline" in c ? c.deadline : null]),
        [
          ["snapshot", deadline],
          ["transfer", deadline],
        ],
      );
    } finally {
      asker.close();
      port2.close();
    }
  });

  it("a read handed to the owner stops waiting there once its client cancels, and leaves nothing in either table", async () => {
    // A Get or Scan whose client cancelled (no deadline sent) stopped waiting in the worker that
    // served the call, but the owner's driver went on waiting for the read index the driver's
    // whole 10 s, holding its share of limits.max_pending_bytes.
    const { port1, port2 } = new MessageChannel();
    /** The owner's driver: a read waits until its call is cancelled (as readBarrier does). */
    const arrived: string[] = [];
    const stopped: string[] = [];
    let arrival = (): void => {};
    let stop = (): void => {};
    const wait = (op: string, call: ClientCall | undefined): Promise<never> =>
      new Promise((_, reject) => {
        arrived.push(op);
        arrival();
        call?.once("cancelled", () => {
          stopped.push(op);
          stop();
          reject(new ReadCancelledError());
        });
      });
    const driver = {
      shardOf: () => 1,
      get: (_k: Uint8Array, _l: boolean, _d?: number, call?: ClientCall) => wait("get", call),
      scan: (_r: unknown, _d?: number, call?: ClientCall) => wait("scan", call),
    } as unknown as MultiRaft;
    const owner = sibling(port2, handlers(serveSibling(driver, () => Promise.reject(), null)));
    const asker = sibling(
      port1,
      handlers(() => Promise.reject(new Error("not asked"))),
    );
    // Every key's shard is 1, worker 1's; the asker's own page of a scan is empty.
    const local = {
      shardOf: () => 1,
      scan: () => Promise.resolve({ items: [], more: false }),
    } as unknown as MultiRaft;
    const store = new RoutedStore(local, [null, asker]);
    const clientCall = (): EventEmitter & { cancelled: boolean } =>
      Object.assign(new EventEmitter(), { cancelled: false });
    const req = { start: b(""), end: null, limit: 10, maxBytes: Infinity, linearizable: true };
    try {
      for (const [op, read] of [
        ["get", (call: ClientCall) => store.get(b("k"), true, undefined, call)],
        ["scan", (call: ClientCall) => store.scan(req, undefined, call)],
      ] as const) {
        const call = clientCall();
        const reached = new Promise<void>((resolve) => (arrival = resolve));
        const ended = new Promise<void>((resolve) => (stop = resolve));
        const p = read(call);
        await withTimeout(reached, 2_000, `the ${op} to reach the owner's driver`);
        call.cancelled = true;
        call.emit("cancelled");
        const failed = assert.rejects(p, { code: "CAIRN_ERR_TIMEOUT", retryable: true });
        await withTimeout(ended, 2_000, `the owner's ${op} to stop waiting`);
        await failed;
        assert.equal(asker.pending, 0, `${op}: nothing waits in the asker`);
        assert.equal(owner.serving, 0, `${op}: nothing kept in the owner`);
        assert.equal(call.listenerCount("cancelled"), 0, `${op}: no listener left on the call`);
      }
      // A call cancelled before it left this worker is withdrawn: the owner never sees it.
      const call = clientCall();
      const withdrawn = store.get(b("gone"), true, undefined, call);
      call.cancelled = true;
      call.emit("cancelled");
      await assert.rejects(withdrawn, { code: "CAIRN_ERR_TIMEOUT" });
      const reached = new Promise<void>((resolve) => (arrival = resolve));
      const ended = new Promise<void>((resolve) => (stop = resolve));
      const after = clientCall();
      const next = store.get(b("next"), true, undefined, after);
      await withTimeout(reached, 2_000, "the next get to reach the owner's driver");
      assert.deepEqual(arrived, ["get", "scan", "get"], "the withdrawn get never left");
      after.cancelled = true;
      after.emit("cancelled");
      const failed = assert.rejects(next, { code: "CAIRN_ERR_TIMEOUT" });
      await withTimeout(ended, 2_000, "the owner's next get to stop waiting");
      await failed;
      assert.deepEqual(stopped, ["get", "scan", "get"]);
      assert.equal(owner.serving, 0, "nothing kept in the owner");
      // One already cancelled is not handed over at all.
      await assert.rejects(store.get(b("k"), true, undefined, after), {
        code: "CAIRN_ERR_TIMEOUT",
      });
      assert.equal(asker.pending, 0);
    } finally {
      asker.close();
      owner.close();
    }
  });

  it("a scan whose page fails on one worker cancels the pages still running on the others", async () => {
    // A Scan reads every worker's page; when one failed (a shard unavailable, a deadline), the
    // scan failed at once but the other workers' pages went on waiting for their read indexes,
    // each holding its share of the owner's request budget for its client long gone. With no
    // client call to cancel (a caller that gave none) nothing could ever stop them.
    const { port1, port2 } = new MessageChannel();
    let arrival = (): void => {};
    let stop = (): void => {};
    const owned = {
      scan: (_r: unknown, _d?: number, call?: ClientCall): Promise<never> =>
        new Promise((_, reject) => {
          arrival();
          call?.once("cancelled", () => {
            stop();
            reject(new ReadCancelledError());
          });
        }),
    } as unknown as MultiRaft;
    const owner = sibling(port2, handlers(serveSibling(owned, () => Promise.reject(), null)));
    const asker = sibling(
      port1,
      handlers(() => Promise.reject(new Error("not asked"))),
    );
    // This worker's own page fails once the owner's page is running.
    let fail = (): void => {};
    const local = {
      scan: (): Promise<never> =>
        new Promise((_, reject) => {
          fail = () =>
            reject(new CairnError("CAIRN_ERR_SHARD_NOT_ACTIVE", "shard 2 is not active"));
        }),
    } as unknown as MultiRaft;
    const store = new RoutedStore(local, [null, asker]);
    const req = { start: b(""), end: null, limit: 10, maxBytes: Infinity, linearizable: true };
    try {
      for (const client of [undefined, Object.assign(new EventEmitter(), { cancelled: false })]) {
        const what = client === undefined ? "with no client call" : "with a client call";
        const reached = new Promise<void>((resolve) => (arrival = resolve));
        const ended = new Promise<void>((resolve) => (stop = resolve));
        const p = store.scan(req, undefined, client);
        await withTimeout(reached, 2_000, `the owner's page to start (${what})`);
        fail();
        // The scan fails with the page's own error, not the others' cancellation.
        await assert.rejects(p, { code: "CAIRN_ERR_SHARD_NOT_ACTIVE" });
        await withTimeout(ended, 2_000, `the owner's page to be cancelled (${what})`);
        assert.equal(asker.pending, 0, `${what}: nothing waits in the asker`);
        assert.equal(owner.serving, 0, `${what}: nothing kept in the owner`);
      }
    } finally {
      asker.close();
      owner.close();
    }
  });

  it("a scan's meta sync through worker 0 stops waiting there at its deadline or once its client cancels", async () => {
    // A linearizable Scan on a worker without shard 0 first syncs the meta state through
    // worker 0; that call carried neither the client's call nor its deadline, so worker 0's
    // ReadIndex wait held its budget for the driver's 10 s after the client had gone.
    const { port1, port2 } = new MessageChannel();
    const seen: { deadline: number; call: ClientCall | null }[] = [];
    let arrival = (): void => {};
    let stop = (): void => {};
    const driver = {
      syncMeta: (deadline: number, call: ClientCall | null): Promise<void> =>
        new Promise((_, reject) => {
          seen.push({ deadline, call });
          arrival();
          call?.once("cancelled", () => {
            stop();
            reject(new ReadCancelledError());
          });
        }),
    } as unknown as MultiRaft;
    const meta = { proposer: {}, version: () => 1 } as unknown as Parameters<
      typeof serveSibling
    >[2];
    const worker0 = sibling(port2, handlers(serveSibling(driver, () => Promise.reject(), meta)));
    const to0 = sibling(
      port1,
      handlers(() => Promise.reject(new Error("not asked"))),
    );
    const share1 = new MetaShare([to0, null]);
    try {
      const call = Object.assign(new EventEmitter(), { cancelled: false });
      const reached = new Promise<void>((resolve) => (arrival = resolve));
      const ended = new Promise<void>((resolve) => (stop = resolve));
      const deadline = deadlineClock() + 60_000;
      const p = share1.sync(deadline, call);
      await withTimeout(reached, 2_000, "the sync to reach worker 0's driver");
      assert.equal(seen[0]?.deadline, deadline, "the scan's deadline crossed");
      assert.notEqual(seen[0]?.call ?? null, null, "the client's call crossed");
      call.cancelled = true;
      call.emit("cancelled");
      const failed = assert.rejects(p, { code: "CAIRN_ERR_TIMEOUT", retryable: true });
      await withTimeout(ended, 2_000, "worker 0's sync to stop waiting");
      await failed;
      assert.equal(to0.pending, 0, "nothing waits in the asking worker");
      assert.equal(worker0.serving, 0, "nothing kept in worker 0");
      assert.equal(call.listenerCount("cancelled"), 0, "no listener left on the call");
    } finally {
      to0.close();
      worker0.close();
    }
  });

  it("a worker's cell passes a scan's deadline and client's call on to its meta sync through worker 0", async () => {
    // The driver of a worker without shard 0 syncs through its ShardCell's meta.sync (node.ts);
    // shard-worker.ts's dropped both, so worker 0's wait held its budget for the driver's 10 s
    // after the scan's client had gone.
    const { port1, port2 } = new MessageChannel();
    const seen: { deadline: number; call: ClientCall | null }[] = [];
    let arrival = (): void => {};
    const driver = {
      syncMeta: (deadline: number, call: ClientCall | null): Promise<void> =>
        new Promise((_, reject) => {
          seen.push({ deadline, call });
          arrival();
          call?.once("cancelled", () => reject(new ReadCancelledError()));
        }),
    } as unknown as MultiRaft;
    const meta = { proposer: {}, version: () => 1 } as unknown as Parameters<
      typeof serveSibling
    >[2];
    const worker0 = sibling(port2, handlers(serveSibling(driver, () => Promise.reject(), meta)));
    const to0 = sibling(
      port1,
      handlers(() => Promise.reject(new Error("not asked"))),
    );
    const cell = shardCellMeta(new MetaShare([to0, null]), [to0, null], "inc-1");
    try {
      const call = Object.assign(new EventEmitter(), { cancelled: false });
      const reached = new Promise<void>((resolve) => (arrival = resolve));
      const deadline = deadlineClock() + 60_000;
      const p = cell.sync(deadline, call);
      await withTimeout(reached, 2_000, "the sync to reach worker 0's driver");
      assert.equal(seen[0]?.deadline, deadline, "the scan's deadline crossed");
      assert.notEqual(seen[0]?.call ?? null, null, "the client's call crossed");
      call.cancelled = true;
      call.emit("cancelled");
      await assert.rejects(p, { code: "CAIRN_ERR_TIMEOUT", retryable: true });
    } finally {
      to0.close();
      worker0.close();
    }
  });

  it("closing fails the calls still waiting, retryably", async () => {
    const { port1, port2 } = new MessageChannel();
    // The owner never answers.
    port2.on("message", () => {});
    const asker = sibling(
      port1,
      handlers(() => Promise.resolve(null)),
    );
    const waiting = asker.call({ op: "snapshot", shard: 1 });
    asker.close();
    port2.close();
    await assert.rejects(waiting, { code: "CAIRN_ERR_SHUTTING_DOWN", retryable: true });
    await assert.rejects(asker.call({ op: "snapshot", shard: 2 }), {
      code: "CAIRN_ERR_SHUTTING_DOWN",
    });
  });

  it("shares worker 0's meta state once a turn, newest only, and a sync waits for the state it named", async () => {
    const { port1, port2 } = new MessageChannel();
    const boot = MetaState.empty().apply({
      op: "bootstrap",
      clusterId: "c1",
      totalShards: 16,
      replicationFactor: 1,
      members: [{ id: "n1", rpcAddr: "127.0.0.1:1", httpAddr: "127.0.0.1:2" }],
    }).state;
    const withShard = (state: MetaState, shard: number): MetaState =>
      state.apply({ op: "create-shard", shard, replicas: ["n1"] }).state;
    // Worker 0 holds the meta group. Its answer to a sync names the version of a state it
    // shares only later (here, 20 ms after): the answer overtakes the state, and the sync must
    // wait for it.
    let latest = boot;
    let shares = 0;
    let share0: MetaShare | null = null;
    const to1 = sibling(port1, {
      ...handlers(async (call) => {
        assert.equal(call.op, "sync-meta");
        setTimeout(() => {
          latest = withShard(latest, 9);
          share0?.share(latest);
        }, 20);
        return (share0?.version ?? 0) + 1;
      }),
    });
    const to0 = sibling(port2, {
      ...handlers(() => Promise.reject(new Error("worker 1 serves nothing here"))),
      onMeta: (meta) => {
        shares++;
        share1.received(meta);
      },
    });
    share0 = new MetaShare([null, to1]);
    const share1 = new MetaShare([to0, null]);
    const seen: number[][] = [];
    share1.follow((state) => seen.push([...state.shards.keys()].sort((a, b) => a - b)));
    try {
      // Three applies in one turn: one message, the newest state.
      latest = withShard(boot, 3);
      share0.share(boot);
      share0.share(latest);
      latest = withShard(latest, 5);
      share0.share(latest);
      await share1.sync();
      assert.deepEqual(seen.at(-1), [0, 3, 5, 9], "the sync waited for the state with shard 9");
      assert.ok(shares <= 2, `${shares} messages for four applies`);
      assert.equal(share1.version, share0.version);
      // A state older than the one held (a message overtaken) changes nothing.
      const before = seen.length;
      share1.received({ version: 1, records: boot.records() });
      assert.equal(seen.length, before);
    } finally {
      to0.close();
      to1.close();
    }
  });

  it("the wait for the state a sync named ends at the scan's deadline, or once its client cancels, not 10 s later", async () => {
    // Worker 0 answers the sync with the version of a state it never shares (its event loop
    // stuck right after, or the state lost with its thread). The asking worker waited for it a
    // fixed 10 s whatever the scan's deadline, and on after its client had cancelled.
    const { port1, port2 } = new MessageChannel();
    const to1 = sibling(
      port1,
      handlers(async (call) => {
        assert.equal(call.op, "sync-meta");
        return 7;
      }),
    );
    const to0 = sibling(
      port2,
      handlers(() => Promise.reject(new Error("worker 1 serves nothing here"))),
    );
    const share1 = new MetaShare([to0, null]);
    try {
      const shortDeadline = share1.sync(deadlineClock() + 50);
      await withTimeout(
        assert.rejects(shortDeadline, { code: "CAIRN_ERR_TIMEOUT", retryable: true }),
        2_000,
        "the sync's wait to end at the scan's 50 ms deadline",
      );
      // The client cancels once worker 0's answer is in (this listener runs after the
      // sibling's, and the sync's wait starts in the microtasks before setImmediate).
      const call = Object.assign(new EventEmitter(), { cancelled: false });
      const cancelAfterAnswer = (): void => {
        setImmediate(() => {
          call.cancelled = true;
          call.emit("cancelled");
        });
      };
      port2.once("message", cancelAfterAnswer);
      const cancelled = share1.sync(deadlineClock() + 60_000, call);
      await withTimeout(
        assert.rejects(cancelled, { code: "CAIRN_ERR_TIMEOUT", retryable: true }),
        2_000,
        "the sync's wait to end once its client cancelled",
      );
      assert.equal(call.listenerCount("cancelled"), 0, "no listener left on the call");
      // A state of that version arriving later finds no waiter left to wake.
      share1.received({ version: 7, records: MetaState.empty().records() });
      assert.equal(share1.version, 7);
    } finally {
      to0.close();
      to1.close();
    }
  });

  it("every worker's cluster view says whether the node is the first seed, as worker 0 (which runs membership) sets it", async () => {
    // A first seed probes the others' views before it founds (ClusterState.bootstrapLoop) and
    // holds back when another is a first seed too; the probe's connection lands on any worker,
    // and only worker 0's view said so: half of the probes missed it, and both could found.
    const { port1, port2 } = new MessageChannel();
    const views0 = new SharedViews(16);
    const views1 = new SharedViews(16);
    const to1 = sibling(port1, {
      ...handlers(() => Promise.reject(new Error("not asked"))),
      onView: (shards, members, firstSeed) => views0.applyShared(shards, members, firstSeed),
    });
    const to0 = sibling(port2, {
      ...handlers(() => Promise.reject(new Error("not asked"))),
      onView: (shards, members, firstSeed) => views1.applyShared(shards, members, firstSeed),
    });
    views0.attach([to1]);
    views1.attach([to0]);
    try {
      const shown = new Promise<void>((resolve) =>
        views1.subscribe((view) => {
          if (view.nodes.length > 0) resolve();
        }),
      );
      views0.setFirstSeed(true);
      // The members list follows the flag on the same port: once it is in, so is the flag.
      views0.setMembers([
        { id: "n1", rpc_addr: "127.0.0.1:1", http_addr: "127.0.0.1:2", state: "alive" },
      ]);
      await withTimeout(shown, 2_000, "worker 1's view to show worker 0's members");
      assert.equal(
        views1.current().first_seed,
        true,
        "worker 1's view says the node is the first seed",
      );
    } finally {
      to0.close();
      to1.close();
    }
  });

  it("the calls in a stuck owner's hands are bounded: past its share of the pending budget, new ones are refused until it answers", async () => {
    // A call that fails here at its deadline is still in the owner's queue, to be run when its
    // event loop moves again; the clients, told TIMEOUT, send more, which queued there too,
    // without bound, for as long as it stayed stuck.
    const { port1, port2 } = new MessageChannel();
    let unstick = (): void => {};
    const stuck = new Promise<void>((resolve) => (unstick = resolve));
    const owner = sibling(
      port2,
      handlers(async () => {
        await stuck;
        return null;
      }),
    );
    const asker = new Sibling(
      port1,
      handlers(() => Promise.reject(new Error("not asked"))),
      {
        requestTimeoutMs: 10_000,
        maxPendingBytes: 4096,
      },
    );
    const put = (deadline?: number): Promise<unknown> =>
      asker.call({
        op: "put",
        key: b("k"),
        value: new Uint8Array(3000),
        expected: undefined,
        deadline,
      });
    try {
      await assert.rejects(put(deadlineClock() + 20), { code: "CAIRN_ERR_TIMEOUT" });
      assert.equal(asker.pending, 0, "the client was answered");
      await assert.rejects(put(deadlineClock() + 20), {
        code: "CAIRN_ERR_BACKPRESSURE",
        retryable: true,
      });
      // The owner runs again and answers what it holds: its hands are free for the next.
      const answered = new Promise<void>((resolve) => port1.once("message", () => resolve()));
      unstick();
      await withTimeout(answered, 2_000, "the owner's late answer");
      assert.equal(await put(), null);
    } finally {
      asker.close();
      owner.close();
    }
  });

  it("a meta proposal through worker 0 keeps the meta group's refusal: its code crosses, as a peer's trailers carried it", async () => {
    // A worker without shard 0 proposes through worker 0, whose proposal went to the meta leader
    // on another node: refused there, it failed with the peer call's error, whose code is in
    // its trailers; crossing to the asking worker it lost it, and the asker took a refusal
    // (CAIRN_ERR_INVALID_ARGUMENT: a shard's creation placed on a member no longer active,
    // which ClusterState places again from the next state) for a failure (the client's Put
    // failed).
    const { port1, port2 } = new MessageChannel();
    const trailers = new Metadata();
    trailers.set("cairn-error-code", "CAIRN_ERR_INVALID_ARGUMENT");
    const refusal = Object.assign(
      new Error("3 INVALID_ARGUMENT: shard 7's replicas must be active members"),
      {
        code: status.INVALID_ARGUMENT,
        details: "shard 7's replicas must be active members",
        metadata: trailers,
      },
    );
    const meta = {
      proposer: { propose: () => Promise.reject(refusal) },
      version: () => 1,
    } as unknown as Parameters<typeof serveSibling>[2];
    const worker0 = sibling(
      port2,
      handlers(serveSibling({} as MultiRaft, () => Promise.reject(), meta)),
    );
    const to0 = sibling(
      port1,
      handlers(() => Promise.reject(new Error("not asked"))),
    );
    try {
      const err = await siblingProposer(to0)
        .propose({ op: "create-shard", shard: 7, replicas: ["n1"] }, 1_000)
        .then(
          () => assert.fail("refused"),
          (e: unknown) => e,
        );
      assert.equal(errorCodeOf(err), "CAIRN_ERR_INVALID_ARGUMENT", "the refusal's code crossed");
      assert.match((err as Error).message, /replicas must be active members/);
    } finally {
      to0.close();
      worker0.close();
    }
  });
});
