/**
 * The client's retry rules against an in-process fake KV service whose answers the test scripts:
 * writes are retried only when the failure proves they were not applied; a write that times out is
 * indeterminate and sent exactly once.
 */
import assert from "node:assert/strict";
import { constants as h2, createServer as createH2Server } from "node:http2";
import { createServer as createNetServer } from "node:net";
import { after, before, describe, it } from "node:test";
import {
  Metadata,
  Server,
  ServerCredentials,
  type ServiceError,
  status,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { loadCairnProto } from "../../src/api/index.ts";
import {
  CairnClient,
  ClientClosedError,
  DeadlineExceededError,
  IndeterminateWriteError,
  InvalidRequestError,
  ServerError,
  UnavailableError,
  VersionConflictError,
} from "../../src/client/index.ts";
import { stepWallClock } from "../support/wall-clock.ts";

type Answer =
  | "ok"
  | "hang"
  | {
      code: status;
      cairn?: string;
      details?: string;
      current?: string;
      /** The trailer cairn-left-cluster: "true" (a node decommissioned or removed). */
      left?: boolean;
      delayMs?: number;
      /** Run as the call arrives. */
      onArrival?: () => void;
    };

// Scripted answers and call counts per request key: each test uses its own key, so a late call of
// an earlier test (its deadline passed, the server still runs it) cannot take another test's answer.
const scripts = new Map<string, Answer[]>();
const calls = new Map<string, number>();
/** WatchCluster calls the fake node has had. */
let watches = 0;
let server: Server;
let address = "";

function answer(
  call: { request: { key?: Buffer } },
  callback: (err: Partial<ServiceError> | null, res?: unknown) => void,
  ok: unknown,
): void {
  const key = String(call.request.key ?? "");
  calls.set(key, (calls.get(key) ?? 0) + 1);
  const a = scripts.get(key)?.shift() ?? "ok";
  if (a === "hang") return;
  if (a === "ok") return callback(null, ok);
  a.onArrival?.();
  const metadata = new Metadata();
  if (a.cairn !== undefined) metadata.set("cairn-error-code", a.cairn);
  if (a.current !== undefined) metadata.set("cairn-current-version", a.current);
  if (a.left === true) metadata.set("cairn-left-cluster", "true");
  const fail = (): void => callback({ code: a.code, details: a.details ?? "scripted", metadata });
  if (a.delayMs === undefined) fail();
  else setTimeout(fail, a.delayMs);
}

before(async () => {
  const { proto } = loadCairnProto();
  server = new Server();
  const impl: UntypedServiceImplementation = {
    Put: (
      call: { request: { key?: Buffer } },
      cb: (e: Partial<ServiceError> | null, r?: unknown) => void,
    ) => answer(call, cb, { version: { index: 7, term: 2 } }),
    Get: (
      call: { request: { key?: Buffer } },
      cb: (e: Partial<ServiceError> | null, r?: unknown) => void,
    ) => answer(call, cb, { found: true, value: Buffer.from("v"), version: { index: 7, term: 2 } }),
    Delete: (
      call: { request: { key?: Buffer } },
      cb: (e: Partial<ServiceError> | null, r?: unknown) => void,
    ) => answer(call, cb, { deleted: true, version: { index: 8, term: 2 } }),
    Scan: (
      call: { request: { key?: Buffer; prefix?: Buffer } },
      cb: (e: Partial<ServiceError> | null, r?: unknown) => void,
    ) => {
      // A server whose pages do not move on: the same page and token, whatever token it is
      // sent ("loop/"), or a token after no item ("empty/").
      const prefix = String(call.request.prefix ?? "");
      const token = (key: string): Buffer => Buffer.concat([Buffer.from([1]), Buffer.from(key)]);
      const v = { index: 1, term: 1 };
      if (prefix === "loop/")
        return cb(null, {
          items: [{ key: Buffer.from("loop/a"), value: Buffer.from("v"), version: v }],
          next_page_token: token("loop/a"),
        });
      if (prefix === "empty/") return cb(null, { items: [], next_page_token: token("empty/") });
      // A server that ignores the page's limit: ten items, whatever it was asked for.
      if (prefix === "many/")
        return cb(null, {
          items: Array.from({ length: 10 }, (_, i) => ({
            key: Buffer.from(`many/${i}`),
            value: Buffer.from("v"),
            version: v,
          })),
          next_page_token: Buffer.alloc(0),
        });
      answer(call, cb, { items: [], next_page_token: Buffer.alloc(0) });
    },
  };
  server.addService(proto.cairn.v1.KV.service, impl);
  // A node that stops: it ends its watches (OK status) after one view.
  server.addService(proto.cairn.v1.Meta.service, {
    WatchCluster: (call: { write(v: unknown): boolean; end(): void }) => {
      watches++;
      call.write({ epoch: 1, total_shards: 16, cluster_id: "c1", nodes: [], shards: [] });
      call.end();
    },
  });
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) =>
      err === null ? resolve(p) : reject(err),
    ),
  );
  address = `127.0.0.1:${port}`;
});

after(() => server.forceShutdown());

function client(timeoutMs = 2000): CairnClient {
  return new CairnClient({ endpoints: [address], timeoutMs, routing: false, initialBackoffMs: 1 });
}

describe("client retries", () => {
  it("retries a put refused before apply (not leader, proposal lost, backpressure, shard not created, request too slow, node not ready)", async () => {
    scripts.set("k1", [
      { code: status.UNAVAILABLE, cairn: "CAIRN_ERR_NOT_LEADER" },
      { code: status.UNAVAILABLE, cairn: "CAIRN_ERR_PROPOSAL_LOST" },
      { code: status.RESOURCE_EXHAUSTED, cairn: "CAIRN_ERR_BACKPRESSURE" },
      { code: status.UNAVAILABLE, cairn: "CAIRN_ERR_SHARD_CREATION" },
      { code: status.RESOURCE_EXHAUSTED, cairn: "CAIRN_ERR_REQUEST_TOO_SLOW" },
      // A node that has not learnt its cluster's metadata could not create the key's shard.
      { code: status.UNAVAILABLE, cairn: "CAIRN_ERR_NOT_READY" },
    ]);
    const c = client();
    assert.deepEqual(await c.put("k1", "v"), { index: 7, term: 2 });
    assert.equal(calls.get("k1"), 7);
    c.close();
  });

  it("a wall clock stepped forward an hour during an attempt: the retry goes on within the call's time", async () => {
    // The call's time runs on the monotonic clock; each attempt's gRPC deadline is what is left
    // of it on the wall clock as it is then. Measured on the wall clock, the step used it up.
    let undo = (): void => undefined;
    scripts.set("k1s", [
      {
        code: status.UNAVAILABLE,
        cairn: "CAIRN_ERR_NOT_LEADER",
        delayMs: 100,
        onArrival: () => (undo = stepWallClock(3_600_000)),
      },
    ]);
    const c = client();
    try {
      assert.deepEqual(await c.put("k1s", "v"), { index: 7, term: 2 });
      assert.equal(calls.get("k1s"), 2);
    } finally {
      undo();
      c.close();
    }
  });

  it("never retries a put whose failure does not prove it unapplied: indeterminate", async () => {
    scripts.set("k2", [{ code: status.UNAVAILABLE, details: "Connection dropped" }]);
    const c = client();
    await assert.rejects(c.put("k2", "v"), IndeterminateWriteError);
    assert.equal(calls.get("k2"), 1);
    c.close();
  });

  it("neither retries nor calls indeterminate a put refused for the leader's disk", async () => {
    scripts.set("k2d", [
      {
        code: status.RESOURCE_EXHAUSTED,
        cairn: "CAIRN_ERR_DISK_FULL",
        details: "the disk of data_dir /d has 1.0 MiB available, under storage.min_free_bytes",
      },
    ]);
    const c = client();
    await assert.rejects(c.put("k2d", "v"), (err: unknown) => {
      assert.ok(err instanceof ServerError, String(err));
      assert.equal(err.code, "CAIRN_ERR_DISK_FULL");
      assert.equal(err.grpcCode, status.RESOURCE_EXHAUSTED);
      assert.match(err.message, /under storage\.min_free_bytes/);
      return true;
    });
    assert.equal(calls.get("k2d"), 1);
    c.close();
  });

  it("reports a put that timed out as indeterminate, sent once", async () => {
    scripts.set("k3", ["hang"]);
    const c = client(300);
    await assert.rejects(c.put("k3", "v"), IndeterminateWriteError);
    assert.equal(calls.get("k3"), 1);
    c.close();
  });

  it("a put whose deadline passed before it had a connection (a node that accepts and never answers) was not sent: not indeterminate", async () => {
    // A TCP listener that never speaks HTTP/2 (a hung process, a stuck TLS handshake): grpc-js
    // holds the call waiting for a connection, then fails it DEADLINE_EXCEEDED "…,Waiting for
    // LB pick". Nothing was sent, and the put was called indeterminate (the CLI's exit 6, "may
    // or may not have been applied").
    const silent = createNetServer((socket) => socket.on("data", () => undefined));
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const port = (silent.address() as { port: number }).port;
    const c = new CairnClient({ endpoints: [`127.0.0.1:${port}`], timeoutMs: 300, routing: false });
    try {
      const err = await c.put("never-sent", "v").then(
        () => null,
        (e: unknown) => e,
      );
      assert.ok(err instanceof DeadlineExceededError, String(err));
      assert.match(err.message, /Waiting for LB pick/);
    } finally {
      c.close();
      silent.close();
    }
  });

  it("an endpoint that accepts and never answers costs an attempt its connect budget, not the call its deadline: the next endpoint serves the call", async () => {
    // A node that accepts TCP connections and never speaks (a hung process, a TLS handshake
    // that never ends), first of the endpoints: the call waited there for a connection until
    // its whole deadline passed (a read DeadlineExceededError, a put too), while the next
    // endpoint would have answered at once.
    const silent = createNetServer((socket) => socket.on("data", () => undefined));
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const first = `127.0.0.1:${(silent.address() as { port: number }).port}`;
    const fresh = (): CairnClient =>
      new CairnClient({
        endpoints: [first, address],
        timeoutMs: 4000,
        connectTimeoutMs: 200,
        routing: false,
        initialBackoffMs: 1,
      });
    const reader = fresh();
    const writer = fresh();
    try {
      const t0 = performance.now();
      assert.equal(await reader.getString("silent-first-get"), "v");
      // Nothing reached the silent node, so the put is retried: it was never sent.
      assert.deepEqual(await writer.put("silent-first-put", "v"), { index: 7, term: 2 });
      assert.equal(calls.get("silent-first-put"), 1, "applied once");
      assert.ok(performance.now() - t0 < 3000, "neither call waited out its deadline");
    } finally {
      reader.close();
      writer.close();
      silent.close();
    }
  });

  it("a node that has left its cluster for good is not asked again: the next endpoint serves the call, and with none the call ends at once", async () => {
    const refusal = {
      code: status.UNAVAILABLE,
      cairn: "CAIRN_ERR_NOT_MEMBER",
      details:
        "node n2 was decommissioned from cluster c1: it serves no requests; send them to another node",
      left: true,
    };
    // The only endpoint: it refused for good, and the call ends with its reason after one
    // attempt (it was asked until the deadline, 5 s for the CLI, refused the same each time).
    scripts.set("left-only", [refusal, refusal, refusal]);
    const alone = client(4000);
    const t0 = performance.now();
    await assert.rejects(alone.put("left-only", "v"), (err: unknown) => {
      assert.ok(err instanceof UnavailableError, String(err));
      assert.match(err.message, /n2 was decommissioned from cluster c1: .*another node$/);
      return true;
    });
    assert.ok(performance.now() - t0 < 2000, "not asked until the deadline");
    assert.equal(calls.get("left-only"), 1, "sent once");
    alone.close();
    // A joining node's refusal (no trailer) is retried: it serves once it has caught up.
    scripts.set("joining", [{ code: status.UNAVAILABLE, cairn: "CAIRN_ERR_NOT_MEMBER" }]);
    const retried = client();
    assert.deepEqual(await retried.put("joining", "v"), { index: 7, term: 2 });
    assert.equal(calls.get("joining"), 2);
    retried.close();
    // First of two endpoints: the call goes on to the other, and never back to it.
    const { proto } = loadCairnProto();
    const gone = new Server();
    let goneCalls = 0;
    const refuse = (_call: unknown, cb: (e: Partial<ServiceError>) => void): void => {
      goneCalls++;
      const metadata = new Metadata();
      metadata.set("cairn-error-code", "CAIRN_ERR_NOT_MEMBER");
      metadata.set("cairn-left-cluster", "true");
      cb({ code: status.UNAVAILABLE, details: refusal.details, metadata });
    };
    gone.addService(proto.cairn.v1.KV.service, { Put: refuse, Get: refuse });
    const port = await new Promise<number>((resolve, reject) =>
      gone.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) =>
        err === null ? resolve(p) : reject(err),
      ),
    );
    const two = new CairnClient({
      endpoints: [`127.0.0.1:${port}`, address],
      timeoutMs: 4000,
      routing: false,
      initialBackoffMs: 1,
    });
    try {
      assert.deepEqual(await two.put("left-then-other", "v"), { index: 7, term: 2 });
      assert.equal(await two.getString("left-then-other-get"), "v");
      assert.ok(goneCalls <= 2, `${goneCalls} calls to the node that left`);
    } finally {
      two.close();
      gone.forceShutdown();
    }
  });

  it("retries a read on any UNAVAILABLE", async () => {
    scripts.set("k4", [
      { code: status.UNAVAILABLE, details: "Connection dropped" },
      { code: status.UNAVAILABLE, cairn: "CAIRN_ERR_NOT_LEADER" },
    ]);
    const c = client();
    assert.equal(await c.getString("k4"), "v");
    assert.equal(calls.get("k4"), 3);
    c.close();
  });

  it("retries a read on CANCELLED (docs/client.md: a cancel the server or a proxy made); a write so cut is indeterminate", async () => {
    // The read failed at once, UnavailableError, whose code says the client retried until the
    // call's deadline: it made no second attempt.
    scripts.set("k4c", [{ code: status.CANCELLED, details: "Call cancelled" }]);
    scripts.set("k4cw", [{ code: status.CANCELLED, details: "Call cancelled" }]);
    const c = client();
    try {
      assert.equal(await c.getString("k4c"), "v");
      assert.equal(calls.get("k4c"), 2);
      await assert.rejects(c.put("k4cw", "v"), IndeterminateWriteError);
      assert.equal(calls.get("k4cw"), 1);
    } finally {
      c.close();
    }
  });

  it("a read refused RESOURCE_EXHAUSTED with no Cairn code (a message past a size limit) fails at once; BACKPRESSURE and REQUEST_TOO_SLOW are retried", async () => {
    // Retrying cannot make a message fit: such a read was sent again and again until its
    // deadline, then reported UnavailableError ("retry later").
    const c = new CairnClient({
      endpoints: [address],
      timeoutMs: 2000,
      routing: false,
      initialBackoffMs: 1,
      // grpc-js's own refusal: the answer (about 11 bytes) is larger than the client takes.
      channelOptions: { "grpc.max_receive_message_length": 4 },
    });
    const client2 = client();
    try {
      const t0 = performance.now();
      await assert.rejects(c.get("re-too-large"), (err: unknown) => {
        assert.ok(err instanceof ServerError, String(err));
        assert.equal(err.grpcCode, status.RESOURCE_EXHAUSTED);
        assert.match(err.message, /larger than max/);
        return true;
      });
      assert.equal(calls.get("re-too-large"), 1, "not retried");
      // A server's (a node's answer past limits.max_message_bytes): the same.
      scripts.set("re-server", [
        { code: status.RESOURCE_EXHAUSTED, details: "Sent message larger than max (9 vs. 8)" },
      ]);
      await assert.rejects(client2.get("re-server"), ServerError);
      assert.equal(calls.get("re-server"), 1, "not retried");
      // A write so refused may have been applied first (an answer too large): indeterminate.
      scripts.set("re-write", [
        { code: status.RESOURCE_EXHAUSTED, details: "Sent message larger than max (9 vs. 8)" },
      ]);
      await assert.rejects(client2.put("re-write", "v"), IndeterminateWriteError);
      assert.equal(calls.get("re-write"), 1, "not retried");
      assert.ok(performance.now() - t0 < 1500, "failed at once, not at the deadline");
      scripts.set("re-retried", [
        { code: status.RESOURCE_EXHAUSTED, cairn: "CAIRN_ERR_BACKPRESSURE" },
        { code: status.RESOURCE_EXHAUSTED, cairn: "CAIRN_ERR_REQUEST_TOO_SLOW" },
      ]);
      assert.equal(await client2.getString("re-retried"), "v");
      assert.equal(calls.get("re-retried"), 3);
    } finally {
      c.close();
      client2.close();
    }
  });

  it("gives up within the deadline: unavailable (or deadline exceeded), never a hang", async () => {
    scripts.set(
      "k5",
      Array.from({ length: 100_000 }, () => ({
        code: status.UNAVAILABLE,
        cairn: "CAIRN_ERR_NOT_LEADER",
      })),
    );
    // The connection first (as for k7 below): on a loaded machine its set-up took most of a
    // 200 ms deadline, and the client starts no attempt it cannot finish, so CI saw one call.
    const c = client(500);
    await c.get("k5-warm-up", { timeoutMs: 10_000 });
    const t0 = Date.now();
    const err = await c.get("k5").then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(err instanceof UnavailableError || err instanceof DeadlineExceededError, String(err));
    assert.ok(Date.now() - t0 < 3000);
    assert.ok((calls.get("k5") ?? 0) > 1, "retried");
    c.close();
  });

  it("does not start an attempt that cannot finish in time: a refused write stays not applied", async () => {
    // Each attempt is refused (provably not applied) after 30 ms. An attempt begun with less
    // time left than that could only time out, turning "not applied" into "outcome unknown"
    // (forward.test.ts saw it under load: a retry begun 1 ms before the deadline).
    scripts.set(
      "k7",
      Array.from({ length: 100 }, () => ({
        code: status.UNAVAILABLE,
        cairn: "CAIRN_ERR_NOT_LEADER",
        delayMs: 30,
      })),
    );
    // A deadline of many attempts: the client starts no attempt with less than twice the last
    // one's time left, and on a loaded machine (two test files at a time) an attempt refused
    // after 30 ms can take 100 ms or more, so 150 ms saw only one attempt.
    const c = client(1000);
    // The connection first: its set-up on a loaded machine could take a good part of the
    // deadline, leaving no room for a second attempt, which this test needs to see.
    await c.get("k7-warm-up", { timeoutMs: 10_000 });
    const err = await c.put("k7", "v").then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(err instanceof UnavailableError, String(err));
    assert.ok((calls.get("k7") ?? 0) >= 2, "retried");
    c.close();
  });

  it("maps a CAS mismatch to VersionConflictError with the current version", async () => {
    scripts.set("k6", [
      {
        code: status.FAILED_PRECONDITION,
        cairn: "CAIRN_ERR_VERSION_MISMATCH",
        current: "12/3",
      },
    ]);
    const c = client();
    const err = await c.delete("k6", { expectedVersion: { index: 1, term: 1 } }).then(
      () => null,
      (e: unknown) => e,
    );
    assert.ok(err instanceof VersionConflictError);
    assert.deepEqual(err.current, { index: 12, term: 3 });
    assert.equal(calls.get("k6"), 1);
    c.close();
  });

  it("a CAS mismatch whose cairn-current-version trailer is malformed is a server fault, not an absent key", async () => {
    // Read as "absent" (current null), a malformed trailer told a compare-and-set loop to create
    // the key with expectedVersion 0/0; only a missing trailer means the key does not exist.
    const c = client();
    try {
      const huge = "18446744073709551617"; // 2^64 + 1
      const malformed = ["abc", "1/", "-1/2", `${huge}/1`, "1/9007199254740993", "1/2/3", ""];
      for (const [i, current] of malformed.entries()) {
        const key = `k6-malformed-${i}`;
        scripts.set(key, [
          { code: status.FAILED_PRECONDITION, cairn: "CAIRN_ERR_VERSION_MISMATCH", current },
        ]);
        const err = await c.put(key, "v", { expectedVersion: { index: 1, term: 1 } }).then(
          () => null,
          (e: unknown) => e,
        );
        assert.ok(
          !(err instanceof VersionConflictError),
          `${JSON.stringify(current)}: ${String(err)}`,
        );
        assert.ok(err instanceof ServerError, `${JSON.stringify(current)}: ${String(err)}`);
        assert.equal(err.code, "CAIRN_ERR_INTERNAL");
        assert.match(err.message, /cairn-current-version/);
        assert.equal(calls.get(key), 1);
      }
      // No trailer: the key is absent.
      scripts.set("k6-absent", [
        { code: status.FAILED_PRECONDITION, cairn: "CAIRN_ERR_VERSION_MISMATCH" },
      ]);
      const err = await c.put("k6-absent", "v", { expectedVersion: { index: 1, term: 1 } }).then(
        () => null,
        (e: unknown) => e,
      );
      assert.ok(err instanceof VersionConflictError);
      assert.equal(err.current, null);
    } finally {
      c.close();
    }
  });

  it("a server whose scan pages do not move on fails the scan instead of paging forever", async () => {
    // scanPages (cairn scan, cairn backup) asked for the next page as long as a token came
    // back: a page that repeats the last one, or a token after no item, looped for good (each
    // page a call with its own deadline).
    const c = client();
    try {
      for (const prefix of ["loop/", "empty/"]) {
        let pages = 0;
        const err = await (async () => {
          for await (const page of c.scanPages({ prefix })) {
            pages++;
            if (pages > 50) return `${page.items.length} items on page ${pages}`;
          }
          return undefined;
        })().then(
          (r) => r,
          (e: unknown) => e,
        );
        assert.ok(err instanceof ServerError, `${prefix}: ${String(err)} after ${pages} pages`);
        assert.equal(err.code, "CAIRN_ERR_INTERNAL");
        assert.match(err.message, /scan page/);
        // scan() too, within its one deadline: not a DeadlineExceededError once time runs out.
        await assert.rejects(c.scan({ prefix }), ServerError);
      }
    } finally {
      c.close();
    }
  });

  it("a scan's limit holds against a server whose page holds more items than it was asked for", async () => {
    // The client passed on every item of the page: scan({limit: 3}) returned 10, and so did
    // `cairn scan --limit 3`.
    const c = client();
    try {
      const all = await c.scan({ prefix: "many/" }, { limit: 3 });
      assert.deepEqual(
        all.items.map((it) => Buffer.from(it.key).toString()),
        ["many/0", "many/1", "many/2"],
      );
      assert.equal(all.more, true, "keys beyond the limit were left out");
      const pages = [];
      for await (const p of c.scanPages({ prefix: "many/" }, { limit: 4 })) pages.push(p);
      assert.equal(pages.flatMap((p) => p.items).length, 4);
      assert.equal(pages.at(-1)?.more, true);
    } finally {
      c.close();
    }
  });

  it("an abort ends the attempt in flight at once: a read rejects with the reason, a write is indeterminate", async () => {
    // The signal was looked at only between attempts: an abort waited for the attempt in flight
    // to end (its answer, or its deadline), here 3 s later with that answer's error.
    const c = client(10_000);
    try {
      const read = new AbortController();
      scripts.set("ab1", [
        {
          code: status.INTERNAL,
          delayMs: 3000,
          onArrival: () => read.abort(new Error("read aborted")),
        },
      ]);
      const t0 = performance.now();
      await assert.rejects(c.get("ab1", { signal: read.signal }), /read aborted/);
      const write = new AbortController();
      scripts.set("ab2", [
        {
          code: status.INTERNAL,
          delayMs: 3000,
          onArrival: () => write.abort(new Error("write aborted")),
        },
      ]);
      await assert.rejects(c.put("ab2", "v", { signal: write.signal }), (err: unknown) => {
        assert.ok(err instanceof IndeterminateWriteError, String(err));
        assert.match(err.message, /aborted/);
        return true;
      });
      assert.ok(performance.now() - t0 < 2500, "both ended before their answers came");
      assert.equal(calls.get("ab1"), 1);
      assert.equal(calls.get("ab2"), 1);
    } finally {
      c.close();
    }
  });

  it("close() under a write still waiting for its connection: ClientClosedError, not indeterminate (nothing was sent)", async () => {
    // A node that accepts and never speaks, and less time left than the connect budget: the
    // put is handed to grpc-js at once and waits there for a connection. close() fails it
    // "Channel closed before call started", which was taken for a write cut after it was sent.
    const silent = createNetServer((socket) => socket.on("data", () => undefined));
    await new Promise<void>((r) => silent.listen(0, "127.0.0.1", r));
    const port = (silent.address() as { port: number }).port;
    const c = new CairnClient({
      endpoints: [`127.0.0.1:${port}`],
      timeoutMs: 5000,
      connectTimeoutMs: 10_000,
      routing: false,
    });
    try {
      const put = c.put("closed-before-sent", "v").then(
        () => null,
        (e: unknown) => e,
      );
      c.close();
      const err = await put;
      assert.ok(err instanceof ClientClosedError, String(err));
    } finally {
      silent.close();
    }
  });

  it("close() ends a call waiting out its backoff at once: ClientClosedError, no timer left behind", async () => {
    // The wait between attempts was a timer that close() did not end: the call stopped only
    // once it had run (maxBackoffMs, here 20 s), and kept the process alive until then.
    scripts.set("closed-in-backoff", [{ code: status.UNAVAILABLE, cairn: "CAIRN_ERR_NOT_LEADER" }]);
    let backingOff: () => void = () => undefined;
    const inBackoff = new Promise<void>((r) => (backingOff = r));
    const c = new CairnClient({
      endpoints: [address],
      timeoutMs: 60_000,
      routing: false,
      initialBackoffMs: 20_000,
      maxBackoffMs: 20_000,
      // Drawn as the backoff begins: the call is about to wait ~20 s.
      random: () => {
        backingOff();
        return 0.99;
      },
    });
    const get = c.get("closed-in-backoff").then(
      () => null,
      (e: unknown) => e,
    );
    await inBackoff;
    const t0 = performance.now();
    c.close();
    const err = await get;
    assert.ok(err instanceof ClientClosedError, String(err));
    assert.ok(performance.now() - t0 < 5000, "ended by close(), not by its backoff");
    assert.equal(calls.get("closed-in-backoff"), 1);
  });

  it("refuses a deadline that is no time (NaN, negative, infinite) instead of retrying without one", async () => {
    // A NaN deadline made every check of the time left false: a call retried without end (here
    // until maxAttempts, 12 s against a refused port; unbounded by default), its gRPC deadline
    // NaN too. A NaN connect budget held an attempt on a silent node the same way.
    const c = new CairnClient({ endpoints: ["127.0.0.1:1"], routing: false, maxAttempts: 3 });
    try {
      for (const timeoutMs of [Number.NaN, -5, Number.POSITIVE_INFINITY]) {
        await assert.rejects(c.get("no-time", { timeoutMs }), InvalidRequestError, `${timeoutMs}`);
        await assert.rejects(c.put("no-time", "v", { timeoutMs }), InvalidRequestError);
        await assert.rejects(c.scan({}, { timeoutMs }), InvalidRequestError);
      }
    } finally {
      c.close();
    }
    for (const bad of [
      { timeoutMs: Number.NaN },
      { timeoutMs: 0 },
      { connectTimeoutMs: Number.NaN },
      { connectTimeoutMs: -1 },
      { maxAttempts: 0 },
      { maxAttempts: 1.5 },
      { initialBackoffMs: Number.NaN },
      { maxBackoffMs: -1 },
    ])
      assert.throws(
        () => new CairnClient({ endpoints: [address], routing: false, ...bad }),
        TypeError,
        JSON.stringify(bad),
      );
  });

  it("a cluster watch the node ends (it is stopping) fails as a broken one does: its caller learns to reconnect", async () => {
    // The node's end of the stream ended the caller's loop as its own break would have: a
    // caller following the cluster for good (docs/client.md: it reconnects on UnavailableError)
    // stopped following, with no error, and `cairn cluster --watch` exited 0.
    const c = client();
    try {
      const seen: number[] = [];
      await assert.rejects(
        (async () => {
          for await (const v of c.watchCluster()) seen.push(v.epoch);
        })(),
        (err: unknown) => {
          assert.ok(err instanceof UnavailableError, String(err));
          assert.match(err.message, /ended the cluster watch/);
          return true;
        },
      );
      assert.deepEqual(seen, [1]);
    } finally {
      c.close();
    }
  });

  it("a routing watch that a node ends after each view backs off: it is not asked again every few milliseconds", async () => {
    // The routing watch started over from the shortest backoff (10 ms here) whenever the watch
    // had brought a view, however soon it ended: ~100 WatchCluster calls a second, for good, against
    // a node that ends every watch after its first view.
    const c = new CairnClient({
      endpoints: [address],
      initialBackoffMs: 20,
      maxBackoffMs: 1000,
      random: () => 0.5,
    });
    try {
      const before = watches;
      // A window to count the watches in: backing off (10, 20, 40, … 500 ms), about seven.
      await new Promise((r) => setTimeout(r, 1500));
      const asked = watches - before;
      assert.ok(asked >= 2 && asked <= 15, `${asked} watches in 1.5 s`);
    } finally {
      c.close();
    }
  });

  it("a view claiming more shards than a cluster can have is not routed by", async () => {
    // With 2^32 - 1 shards in its view, the client learnt a leader (the answer's trailer) for a
    // shard of nearly each key it called, and kept them all: a table the node fed without bound.
    const { proto } = loadCairnProto();
    const node = new Server();
    const watch: { send: ((view: object) => void) | null } = { send: null };
    node.addService(proto.cairn.v1.Meta.service, {
      WatchCluster: (call: { write(v: unknown): boolean }) => {
        watch.send = (view) => call.write(view);
      },
    });
    const port = await new Promise<number>((resolve, reject) =>
      node.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) =>
        err === null ? resolve(p) : reject(err),
      ),
    );
    const c = new CairnClient({ endpoints: [`127.0.0.1:${port}`], timeoutMs: 2000 });
    const view = (epoch: number, shards: number): object => ({
      epoch,
      total_shards: shards,
      cluster_id: "c1",
      nodes: [],
      shards: [],
    });
    const until = async (what: string, ok: () => boolean, ms: number): Promise<boolean> => {
      for (const end = performance.now() + ms; performance.now() < end;) {
        if (ok()) return true;
        await new Promise((r) => setTimeout(r, 10));
      }
      // An empty `what`: the wait is the test's window, and its end an answer (false).
      if (what !== "") assert.fail(`not within ${ms} ms: ${what}`);
      return false;
    };
    try {
      await until("the client watches", () => watch.send !== null, 5000);
      watch.send?.(view(1, 2 ** 32 - 1));
      // Taken, the view would be the client's within milliseconds.
      assert.equal(await until("", () => c.view !== null, 500), false, "the view was taken");
      watch.send?.(view(2, 16));
      await until("the next view taken", () => c.view?.epoch === 2, 5000);
      assert.equal(c.view?.totalShards, 16);
    } finally {
      c.close();
      node.forceShutdown();
    }
  });

  it("a write whose stream is reset after it was sent (RST_STREAM INTERNAL_ERROR) is indeterminate, not a server error", async () => {
    // grpc-js reports such a reset as INTERNAL with no cairn-error-code (a Cairn server sets one
    // on every answer it makes): the request had arrived, and may have been applied. It was a
    // ServerError (cairn put: exit 5, "another server error"), read as "not written".
    let arrived = 0;
    const raw = createH2Server();
    raw.on("stream", (stream) => {
      stream.on("error", () => undefined);
      stream.on("data", () => undefined);
      stream.on("end", () => {
        arrived++;
        stream.close(h2.NGHTTP2_INTERNAL_ERROR);
      });
    });
    await new Promise<void>((r) => raw.listen(0, "127.0.0.1", r));
    const c = new CairnClient({
      endpoints: [`127.0.0.1:${(raw.address() as { port: number }).port}`],
      routing: false,
      timeoutMs: 2000,
    });
    try {
      await assert.rejects(c.put("rst", "v"), (err: unknown) => {
        assert.ok(err instanceof IndeterminateWriteError, String(err));
        return true;
      });
      assert.equal(arrived, 1, "sent once");
      // A read so reset is not a write: a plain server error still.
      await assert.rejects(c.get("rst"), ServerError);
    } finally {
      c.close();
      raw.close();
    }
  });
});
