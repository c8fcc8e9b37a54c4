/**
 * The KV service's handlers called directly, over a store double: how each outcome is counted in
 * kv_requests_total (the client's mistakes apart from the server's faults), that unknown enum
 * values are refused, and that INTERNAL answers are logged.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  credentials,
  Metadata,
  Server,
  ServerCredentials,
  type ServiceError,
  status,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { InternalErrorLog } from "../../src/api/errors.ts";
import { DEADLINE_ON_CLOCK, deadlineClock, grpcJsDeadline } from "../../src/common/index.ts";
import { kvService, maxAnswerBytes, scanPageBytes } from "../../src/api/kv-service.ts";
import { loadCairnProto } from "../../src/api/proto.ts";
import type { KvStore } from "../../src/api/store.ts";
import { deadlineRecordingStore } from "../support/deadline-store.ts";
import type { ScanRequest } from "../../src/replication/index.ts";
import { mergeCursors } from "../../src/replication/scan-merge.ts";
import { CairnMetrics, createLogger } from "../../src/ops/index.ts";
import { samples } from "../ops/prom-text.ts";

const LIMITS = { maxKeyBytes: 8, maxValueBytes: 16 };
const b = (s: string): Buffer => Buffer.from(s);

/** A store that holds one key, "k" at version 3/1, and whose reads of "boom" fail. */
function store(): KvStore & { gets: boolean[] } {
  const gets: boolean[] = [];
  const current = { index: 3, term: 1 };
  return {
    gets,
    put: (_key, _value, expected) => {
      if (expected !== undefined && expected.index !== current.index) {
        return Promise.resolve({ type: "precondition-failed", current });
      }
      return Promise.resolve({ type: "written", version: current });
    },
    delete: () => Promise.resolve({ type: "not-found" }),
    get: (key, linearizable) => {
      gets.push(linearizable);
      if (Buffer.from(key).toString() === "boom") return Promise.reject(new Error("disk on fire"));
      return Promise.resolve(null);
    },
    scan: () => Promise.resolve({ items: [], more: false }),
  } as KvStore & { gets: boolean[] };
}

interface Harness {
  call(method: string, request: Record<string, unknown>): Promise<ServiceError | null>;
  counts(): Promise<Map<string, number>>;
  lines: Record<string, unknown>[];
  store: ReturnType<typeof store>;
}

function harness(): Harness {
  const metrics = new CairnMetrics({ nodeId: "n1" });
  const lines: Record<string, unknown>[] = [];
  const log = createLogger({
    level: "info",
    sink: { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) },
  });
  const s = store();
  const impl = kvService(s, metrics, LIMITS, { log }) as Record<
    string,
    (call: unknown, cb: (err: ServiceError | null) => void) => void
  >;
  return {
    lines,
    store: s,
    call: (method, request) =>
      new Promise((resolve) => {
        const fn = impl[method];
        assert.ok(fn !== undefined, method);
        fn({ request, getDeadline: () => Infinity }, (err) => resolve(err));
      }),
    counts: async () => {
      const out = new Map<string, number>();
      for (const x of samples(await metrics.expose())) {
        if (x.name !== "kv_requests_total" || x.value === 0) continue;
        out.set(`${x.labels["operation"]}/${x.labels["status"]}`, x.value);
      }
      return out;
    },
  };
}

const GET = { key: b("k"), consistency: "LINEARIZABLE" };
const SCAN = {
  start: Buffer.alloc(0),
  end: Buffer.alloc(0),
  prefix: Buffer.alloc(0),
  page_token: Buffer.alloc(0),
  limit: 0,
  consistency: "LINEARIZABLE",
  skip_unavailable_shards: false,
};

describe("KV service", () => {
  it("counts the client's mistakes as invalid or conflict, never as the server's error", async () => {
    const h = harness();
    // A CAS conflict, an over-long key, a reversed scan (issue 51, item 10).
    const cas = await h.call("Put", {
      key: b("k"),
      value: b("v"),
      expected_version: { index: 9, term: 1 },
    });
    assert.equal(cas?.code, status.FAILED_PRECONDITION);
    assert.equal((await h.call("Put", { key: b("much-too-long"), value: b("v") }))?.code, 3);
    assert.equal((await h.call("Scan", { ...SCAN, start: b("b"), end: b("a") }))?.code, 3);
    assert.equal((await h.call("Get", GET))?.code, undefined);
    assert.deepEqual(
      await h.counts(),
      new Map([
        ["put/conflict", 1],
        ["put/invalid", 1],
        ["scan/invalid", 1],
        ["get/success", 1],
      ]),
    );
    // A fault of the server is an error.
    assert.equal((await h.call("Get", { ...GET, key: b("boom") }))?.code, status.INTERNAL);
    assert.equal((await h.counts()).get("get/error"), 1);
  });

  it("hands the store each call's deadline, on the deadline clock", async () => {
    // Without it, what waits on a call's behalf (a call handed to another shard worker, a write
    // queued before its proposal) went on long after its client gave up.
    const { store: s, seen } = deadlineRecordingStore();
    const impl = kvService(s, new CairnMetrics({ nodeId: "n1" }), LIMITS) as Record<
      string,
      (call: unknown, cb: (err: ServiceError | null) => void) => void
    >;
    const call = (method: string, request: unknown, deadline: Date | number) =>
      new Promise<ServiceError | null>((resolve) =>
        impl[method]?.(
          // A number is a front end's call's (HandedCall), on the deadline clock already.
          typeof deadline === "number"
            ? { request, getDeadline: () => deadline, [DEADLINE_ON_CLOCK]: true }
            : { request, getDeadline: () => deadline },
          resolve,
        ),
      );
    const at = deadlineClock() + 1_234;
    assert.equal(await call("Put", { key: b("k"), value: b("v") }, at), null);
    assert.equal(await call("Delete", { key: b("k") }, at), null);
    assert.equal(await call("Get", GET, at), null);
    assert.equal(await call("Scan", SCAN, at), null);
    assert.deepEqual(seen, [
      ["put", at],
      ["delete", at],
      ["get", at],
      ["scan", at],
    ]);
    // A grpc-js call's deadline is on the wall clock (a Date here); none is Infinity.
    seen.length = 0;
    await call("Get", GET, new Date(grpcJsDeadline(5_000)));
    await call("Get", GET, Infinity);
    const [fromDate, none] = seen.map(([, d]) => d);
    const left = (fromDate ?? 0) - deadlineClock();
    assert.ok(left > 4_000 && left <= 5_000, `${left} ms left`);
    assert.equal(none, Infinity);
  });

  it("hands the store the deadline of a call grpc-js's own Server serves, on the deadline clock", async () => {
    // grpc-js's Server gives getDeadline() as a number on the wall clock (ms since the epoch),
    // which was read as one on the deadline clock: the store saw a deadline decades away, and
    // waited on the call's behalf long after its client gave up.
    const { store: s, seen } = deadlineRecordingStore();
    const { proto } = loadCairnProto();
    const server = new Server();
    server.addService(
      proto.cairn.v1.KV.service,
      kvService(s, new CairnMetrics({ nodeId: "n1" }), LIMITS) as UntypedServiceImplementation,
    );
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) =>
        err === null ? resolve(p) : reject(err),
      ),
    );
    const client = new proto.cairn.v1.KV(`127.0.0.1:${port}`, credentials.createInsecure());
    try {
      const sent = deadlineClock();
      const err = await new Promise<ServiceError | null>((resolve) =>
        client.Get(
          { key: b("k"), consistency: "LINEARIZABLE" },
          new Metadata(),
          { deadline: grpcJsDeadline(5_000) },
          (e) => resolve(e),
        ),
      );
      const answered = deadlineClock();
      assert.equal(err, null);
      assert.equal(seen.length, 1);
      const deadline = seen[0]?.[1] ?? Number.NaN;
      // Between when the call was sent plus its timeout (less grpc-timeout's rounding) and
      // when it was answered plus its timeout.
      assert.ok(
        deadline >= sent + 5_000 - 1_000 && deadline <= answered + 5_000,
        `the store saw a deadline ${deadline - answered} ms after the answer`,
      );
    } finally {
      client.close();
      server.forceShutdown();
    }
  });

  it("hands the store a read's call, whose cancellation stops the read's wait", async () => {
    // Without it, a read whose client sent no deadline and cancelled (or whose connection
    // closed) waited in the driver for 10 s, holding its share of limits.max_pending_bytes.
    const handed: [string, unknown][] = [];
    const s: KvStore = {
      put: () => Promise.reject(new Error("not asked")),
      delete: () => Promise.reject(new Error("not asked")),
      get: (_key, _linearizable, _deadline, call) => {
        handed.push(["get", call]);
        return Promise.resolve(null);
      },
      scan: (_req, _deadline, call) => {
        handed.push(["scan", call]);
        return Promise.resolve({ items: [], more: false });
      },
    };
    const impl = kvService(s, new CairnMetrics({ nodeId: "n1" }), LIMITS) as Record<
      string,
      (call: unknown, cb: (err: ServiceError | null) => void) => void
    >;
    const get = { request: GET, getDeadline: () => Infinity, cancelled: false };
    const scan = { request: SCAN, getDeadline: () => Infinity, cancelled: false };
    await new Promise((resolve) => impl.Get?.(get, resolve));
    await new Promise((resolve) => impl.Scan?.(scan, resolve));
    assert.deepEqual(handed, [
      ["get", get],
      ["scan", scan],
    ]);
    assert.equal(handed[0]?.[1], get, "the served call itself: nothing made for it");
  });
  it("refuses an enum value the schema does not define (consistency 7, 0xffffffff)", async () => {
    const h = harness();
    // proto-loader (enums: String) hands an undefined value over as its number.
    for (const consistency of [7, -1, 0xffffffff]) {
      const get = await h.call("Get", { ...GET, consistency });
      assert.equal(get?.code, status.INVALID_ARGUMENT, `Get consistency ${consistency}`);
      assert.match(
        get?.details ?? "",
        /consistency is -?\d+; it must be one of LINEARIZABLE, SERIALIZABLE/,
      );
      const scan = await h.call("Scan", { ...SCAN, consistency });
      assert.equal(scan?.code, status.INVALID_ARGUMENT, `Scan consistency ${consistency}`);
    }
    assert.deepEqual(h.store.gets, [], "nothing was read");
    assert.equal((await h.call("Get", { ...GET, consistency: "SERIALIZABLE" }))?.code, undefined);
    assert.deepEqual(h.store.gets, [false]);
  });

  it("skips unavailable shards in a serializable scan only, and names them in the page", async () => {
    const asked: ScanRequest[] = [];
    const s: KvStore = {
      ...store(),
      scan: (req) => {
        asked.push(req);
        return Promise.resolve({ items: [], more: false, skipped: [4, 9] });
      },
    };
    const impl = kvService(s, new CairnMetrics({ nodeId: "n1" }), LIMITS, {}) as Record<
      string,
      (call: unknown, cb: (err: ServiceError | null, res?: Record<string, unknown>) => void) => void
    >;
    const scan = (request: Record<string, unknown>) =>
      new Promise<{ err: ServiceError | null; res?: Record<string, unknown> }>((resolve) =>
        impl["Scan"]?.({ request, getDeadline: () => Infinity }, (err, res) =>
          resolve({ err, ...(res ? { res } : {}) }),
        ),
      );
    const refused = await scan({ ...SCAN, skip_unavailable_shards: true });
    assert.equal(refused.err?.code, status.INVALID_ARGUMENT);
    assert.match(
      refused.err?.details ?? "",
      /skip_unavailable_shards needs consistency SERIALIZABLE/,
    );
    assert.equal(asked.length, 0, "nothing was read");
    const page = await scan({
      ...SCAN,
      consistency: "SERIALIZABLE",
      skip_unavailable_shards: true,
    });
    assert.equal(page.err, null);
    assert.equal(asked[0]?.skipUnavailable, true);
    assert.deepEqual(page.res?.["skipped_shards"], [4, 9]);
    await scan({ ...SCAN, consistency: "SERIALIZABLE" });
    assert.equal(asked[1]?.skipUnavailable, undefined, "not asked: not skipped");
  });

  it("cuts a page that names skipped shards so that it fits its message, the list included", async () => {
    // The page's items were cut to the message less a key and 1 KiB, and the shards it left
    // out came on top: thousands of them (a cluster of 65,536 shards that lost most nodes)
    // took a full page past the node's send limit, refused ("Sent message larger than max",
    // not retried), and no backup --skip-unavailable of values of tens of KiB could go on.
    const value = Buffer.alloc(60_000, 7);
    const keys = Array.from({ length: 200 }, (_, i) => b(`k${String(i).padStart(5, "0")}`));
    const skipped = Array.from({ length: 30_000 }, (_, i) => 16_384 + i);
    const s: KvStore = {
      ...store(),
      scan: (req) => {
        const after = keys.filter((k) => Buffer.compare(k, req.start) >= 0);
        const items = after.map((key) => ({ key, value, version: { index: 1, term: 1 } }));
        const page = mergeCursors([items[Symbol.iterator]()], req.limit, req.maxBytes);
        return Promise.resolve({ ...page, skipped });
      },
    };
    const message = 4 * 1024 * 1024;
    const { proto } = loadCairnProto();
    const server = new Server({ "grpc.max_send_message_length": maxAnswerBytes(message, LIMITS) });
    server.addService(
      proto.cairn.v1.KV.service,
      kvService(s, new CairnMetrics({ nodeId: "n1" }), LIMITS, {
        scanPageBytes: scanPageBytes(message, LIMITS),
      }) as UntypedServiceImplementation,
    );
    const port = await new Promise<number>((resolve, reject) =>
      server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) =>
        err === null ? resolve(p) : reject(err),
      ),
    );
    const client = new proto.cairn.v1.KV(`127.0.0.1:${port}`, credentials.createInsecure(), {
      "grpc.max_receive_message_length": 64 * 1024 * 1024,
    });
    const scan = (page_token: Buffer) =>
      new Promise<{ items: { key: Buffer }[]; next_page_token: Buffer; skipped_shards: number[] }>(
        (resolve, reject) =>
          client.Scan(
            { ...SCAN, consistency: "SERIALIZABLE", skip_unavailable_shards: true, page_token },
            (err: ServiceError | null, res: unknown) =>
              err === null
                ? resolve(
                    res as {
                      items: { key: Buffer }[];
                      next_page_token: Buffer;
                      skipped_shards: number[];
                    },
                  )
                : reject(err),
          ),
      );
    try {
      const seen: string[] = [];
      let token: Buffer = Buffer.alloc(0);
      for (let page = 0; page < 10; page++) {
        const res = await scan(token);
        assert.deepEqual(res.skipped_shards, skipped);
        seen.push(...res.items.map((i) => i.key.toString()));
        token = res.next_page_token;
        if (token.length === 0) break;
      }
      assert.deepEqual(
        seen,
        keys.map((k) => k.toString()),
        "every key once, in order",
      );
    } finally {
      client.close();
      server.forceShutdown();
    }
  });

  it("refuses a page token longer than any key before reading a shard", async () => {
    // A token names the page's last key, and its next page starts just past it; it was held to
    // no length. A Scan of one 4 MiB token (version byte 1, then "zzz…") had that start copied
    // and decoded for each of a node's 1,024 shards: 6.6 s of its main thread for one call of
    // a client with role read (Raft heartbeats and every other call stalled meanwhile), and as
    // much again per call; a node whose limits.max_message_bytes is raised took tokens larger
    // still. A real token's key is at most 65,535 bytes (limits.max_key_bytes at its largest).
    const asked: ScanRequest[] = [];
    const s: KvStore = {
      ...store(),
      scan: (req) => {
        asked.push(req);
        return Promise.resolve({ items: [], more: false });
      },
    };
    const impl = kvService(s, new CairnMetrics({ nodeId: "n1" }), LIMITS, {}) as Record<
      string,
      (call: unknown, cb: (err: ServiceError | null) => void) => void
    >;
    const scan = (page_token: Buffer) =>
      new Promise<ServiceError | null>((resolve) =>
        impl["Scan"]?.({ request: { ...SCAN, page_token }, getDeadline: () => Infinity }, (err) =>
          resolve(err),
        ),
      );
    const token = (keyBytes: number): Buffer => {
      const t = Buffer.alloc(1 + keyBytes, 0x7a);
      t[0] = 1;
      return t;
    };
    const refused = await scan(token(65_536));
    assert.equal(refused?.code, status.INVALID_ARGUMENT);
    assert.match(refused?.details ?? "", /page_token/);
    assert.equal(asked.length, 0, "no shard was read");
    // A key longer than this node's limits.max_key_bytes (8 here) may have been written under a
    // larger one: a page ending at it goes on.
    assert.equal(await scan(token(65_535)), null);
    assert.equal(asked.length, 1);
  });

  it("fails a scan whose page holds no item but more (never an empty token: the end)", async () => {
    // The store's merge cuts a page before its first item when a shard's page (a peer's
    // ScanShards answer) holds none but says more: answered with an empty token, the client
    // took it for the end of the range, and a backup ended there without a word.
    const s: KvStore = { ...store(), scan: () => Promise.resolve({ items: [], more: true }) };
    const impl = kvService(s, new CairnMetrics({ nodeId: "n1" }), LIMITS, {}) as Record<
      string,
      (call: unknown, cb: (err: ServiceError | null, res?: Record<string, unknown>) => void) => void
    >;
    const page = await new Promise<{ err: ServiceError | null }>((resolve) =>
      impl["Scan"]?.({ request: SCAN, getDeadline: () => Infinity }, (err) => resolve({ err })),
    );
    assert.equal(page.err?.code, status.INTERNAL);
    assert.match(page.err?.details ?? "", /no item, yet more/);
  });

  it("logs each INTERNAL answer at ERROR with its code, and nothing for a client's mistake", async () => {
    const h = harness();
    await h.call("Put", { key: b("much-too-long"), value: b("v") });
    assert.equal(h.lines.length, 0);
    const err = await h.call("Get", { ...GET, key: b("boom") });
    assert.equal(err?.code, status.INTERNAL);
    assert.equal(h.lines.length, 1);
    const line = h.lines[0] as { level: string; fields: Record<string, unknown> };
    assert.equal(line.level, "ERROR");
    assert.equal(line.fields["code"], "CAIRN_ERR_INTERNAL");
    assert.equal(line.fields["method"], "get");
    assert.match(JSON.stringify(line.fields["err"]), /disk on fire/);
  });

  it("rate-limits those lines and says how many it left out", () => {
    const lines: Record<string, unknown>[] = [];
    const log = createLogger({
      sink: { write: (line: string) => lines.push(JSON.parse(line) as Record<string, unknown>) },
    });
    let now = 0;
    const internal = new InternalErrorLog(log, { perWindow: 2, windowMs: 1000, now: () => now });
    const answer = { code: status.INTERNAL };
    for (let i = 0; i < 5; i++) internal.maybeLog("put", new Error(`e${i}`), answer);
    internal.maybeLog("put", new Error("not internal"), { code: status.UNAVAILABLE });
    assert.equal(lines.length, 2);
    now = 1000;
    internal.maybeLog("put", new Error("later"), answer);
    assert.equal(lines.length, 3);
    assert.equal((lines[2] as { fields: Record<string, unknown> }).fields["not_logged_before"], 3);
  });
});
