import assert from "node:assert/strict";
import { connect, type Socket } from "node:net";
import { after, describe, it } from "node:test";
import { Gauge } from "prom-client";
import { CairnError } from "../../src/common/index.ts";
import {
  AddressInUseError,
  CairnMetrics,
  createLogger,
  type HealthReport,
  type HealthSource,
  KV_DURATION_BUCKETS_MS,
  OpsHttpServer,
  type OpsHttpServerOptions,
} from "../../src/ops/index.ts";
import { OPS_HTTP_MAX_PIPELINED } from "../../src/ops/http-server.ts";
import { CATALOGUE, checkHistogram, familyTypes, samples } from "./prom-text.ts";

const REPORT: HealthReport = {
  status: "healthy",
  node_id: "n1",
  uptime_seconds: 12.5,
  total_shards: 1024,
  active_shards: 1,
  shards: [
    { id: 0, status: "healthy", is_leader: true, raft_term: 2, commit_index: 9, last_applied: 9 },
  ],
  nodes: [{ id: "n1", rpc_addr: "127.0.0.1:7447", http_addr: "127.0.0.1:8080", state: "alive" }],
};

/** A HealthSource the test steers. */
class FakeHealth implements HealthSource {
  quick: boolean | Error = true;
  report: () => Promise<HealthReport> = () => Promise.resolve(REPORT);
  isQuickHealthy(): boolean {
    if (this.quick instanceof Error) throw this.quick;
    return this.quick;
  }
}

interface Harness {
  readonly server: OpsHttpServer;
  readonly health: FakeHealth;
  readonly metrics: CairnMetrics;
  readonly logs: string[];
  readonly base: string;
}

const servers: OpsHttpServer[] = [];
after(async () => {
  await Promise.all(servers.map((s) => s.destroy()));
});

async function startServer(overrides: Partial<OpsHttpServerOptions> = {}): Promise<Harness> {
  const logs: string[] = [];
  const health = new FakeHealth();
  const metrics = new CairnMetrics({ nodeId: "n1" });
  const server = new OpsHttpServer({
    address: "127.0.0.1:0",
    health,
    metrics,
    metricsEnabled: true,
    logger: createLogger({ sink: { write: (l: string) => logs.push(l) } }).child("http"),
    ...overrides,
  });
  servers.push(server);
  const { port } = await server.start();
  return { server, health, metrics, logs, base: `http://127.0.0.1:${port}` };
}

/** Sends `request` on a new connection to `h` and resolves with all it got once closed. */
function exchange(h: Harness, request: string): Promise<string> {
  return new Promise((resolve) => {
    const socket = connect(Number(new URL(h.base).port), "127.0.0.1");
    let got = "";
    socket.on("data", (d: Buffer) => (got += d.toString()));
    socket.on("error", () => undefined);
    socket.on("close", () => resolve(got));
    socket.write(request);
  });
}

function errorLines(logs: readonly string[]): Array<Record<string, unknown>> {
  return logs
    .map((l) => JSON.parse(l) as Record<string, unknown>)
    .filter((o) => o["level"] === "ERROR");
}

function deferred<T>(): { promise: Promise<T>; resolve: (v: T) => void } {
  let resolve!: (v: T) => void;
  const promise = new Promise<T>((r) => (resolve = r));
  return { promise, resolve };
}

describe("GET /health/quick", () => {
  it("answers 200 OK and 503 UNAVAILABLE as plain text", async () => {
    const h = await startServer();
    const ok = await fetch(`${h.base}/health/quick`);
    assert.equal(ok.status, 200);
    assert.match(ok.headers.get("content-type") ?? "", /^text\/plain/);
    assert.equal(await ok.text(), "OK");
    h.health.quick = false;
    const down = await fetch(`${h.base}/health/quick?verbose=1`); // query ignored
    assert.equal(down.status, 503);
    assert.equal(await down.text(), "UNAVAILABLE");
  });

  it("answers 500 Internal error and logs at ERROR when the check throws", async () => {
    const h = await startServer();
    h.health.quick = new Error("shard table broken");
    const res = await fetch(`${h.base}/health/quick`);
    assert.equal(res.status, 500);
    assert.equal(await res.text(), "Internal error: shard table broken");
    const [line] = errorLines(h.logs);
    assert.equal(line?.["target"], "http");
    assert.equal((line?.["fields"] as Record<string, unknown>)["path"], "/health/quick");
  });
});

describe("GET /health", () => {
  it("answers the JSON report: 200 healthy and degraded, 503 unhealthy", async () => {
    const h = await startServer();
    const res = await fetch(`${h.base}/health`);
    assert.equal(res.status, 200);
    assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
    assert.deepEqual(await res.json(), REPORT);
    for (const [status, code] of [
      ["degraded", 200],
      ["unhealthy", 503],
    ] as const) {
      h.health.report = () => Promise.resolve({ ...REPORT, status });
      const r = await fetch(`${h.base}/health`);
      assert.equal(r.status, code, status);
      assert.equal(((await r.json()) as HealthReport).status, status);
    }
  });

  it("answers 500 with a JSON error and logs at ERROR when the report fails", async () => {
    const h = await startServer();
    h.health.report = () => Promise.reject(new Error("shard 7: engine closed"));
    const res = await fetch(`${h.base}/health`);
    assert.equal(res.status, 500);
    assert.match(res.headers.get("content-type") ?? "", /^application\/json/);
    assert.deepEqual(await res.json(), { error: "Internal error: shard 7: engine closed" });
    assert.equal(errorLines(h.logs).length, 1);
  });

  it("logs a few lines of a failure that every request meets, not one per request", async () => {
    // Each request wrote its own ERROR line, stack and all: a client looping on /health while
    // the report failed wrote as many lines as it sent requests.
    const h = await startServer();
    h.health.report = () => Promise.reject(new Error("shard 7: engine closed"));
    for (let i = 0; i < 40; i++) {
      const res = await fetch(`${h.base}/health`);
      assert.equal(res.status, 500);
      await res.arrayBuffer();
    }
    const lines = errorLines(h.logs);
    assert.ok(lines.length >= 1 && lines.length <= 10, `${lines.length} ERROR lines`);
  });

  it("accounts for every failure in the log: those left out are counted once their window ends", async () => {
    // Contract §7 rule 1: every handler failure is logged at error level. The lines left out of
    // a window were said only on the next line written: a burst of 40 failures, then none,
    // left 30 of them in no log line at all.
    const h = await startServer({ failureLogWindowMs: 1_000 });
    h.health.report = () => Promise.reject(new Error("shard 7: engine closed"));
    for (let i = 0; i < 40; i++) {
      const res = await fetch(`${h.base}/health`);
      assert.equal(res.status, 500);
      await res.arrayBuffer();
    }
    const accounted = (): number =>
      errorLines(h.logs).reduce((n, l) => {
        const fields = l["fields"] as Record<string, unknown>;
        return n + (typeof fields["not_logged"] === "number" ? fields["not_logged"] : 1);
      }, 0);
    const deadline = performance.now() + 5_000;
    while (accounted() < 40 && performance.now() < deadline) {
      await new Promise((r) => setTimeout(r, 20));
    }
    assert.equal(accounted(), 40, "failures logged, or counted as not logged");
    // Still bounded: 10 lines a window and its count, not one a failure.
    assert.ok(errorLines(h.logs).length < 40, `${errorLines(h.logs).length} ERROR lines`);
    // Left out at a close, before their window ended: counted by the close.
    const g = await startServer();
    g.health.report = () => Promise.reject(new Error("shard 7: engine closed"));
    for (let i = 0; i < 15; i++) await (await fetch(`${g.base}/health`)).arrayBuffer();
    await g.server.close();
    const closed = errorLines(g.logs).reduce((n, l) => {
      const fields = l["fields"] as Record<string, unknown>;
      return n + (typeof fields["not_logged"] === "number" ? fields["not_logged"] : 1);
    }, 0);
    assert.equal(closed, 15);
  });

  it("answers 500 when the report cannot be serialised", async () => {
    const h = await startServer();
    h.health.report = () => Promise.resolve({ ...REPORT, uptime_seconds: 1n as unknown as number });
    const res = await fetch(`${h.base}/health`);
    assert.equal(res.status, 500);
    const body = (await res.json()) as { error: string };
    assert.match(body.error, /^Internal error: .*BigInt/);
    assert.equal(errorLines(h.logs).length, 1);
  });

  it("answers 500 when the report takes longer than its deadline", async () => {
    const h = await startServer({ reportTimeoutMs: 20 });
    h.health.report = () => new Promise<HealthReport>(() => {});
    const res = await fetch(`${h.base}/health`);
    assert.equal(res.status, 500);
    assert.deepEqual(await res.json(), {
      error: "Internal error: health report timed out after 20 ms",
    });
  });
});

describe("GET /health behind a report that hangs", () => {
  it("answers a request queued behind it within the deadline too, 500, not dropped", async () => {
    // The second waited for the hung render, its gap and its own render (about 2.2 times the
    // deadline), and the connection's idle timeout (deadline + 5 s by default: 10 s here)
    // closed it unanswered (an audit, 2026-12-05).
    const h = await startServer({ reportTimeoutMs: 1_000, idleTimeoutMs: 2_000 });
    h.health.report = () => new Promise<HealthReport>(() => {});
    const first = fetch(`${h.base}/health`);
    await new Promise((resolve) => setTimeout(resolve, 100));
    const started = performance.now();
    const second = await fetch(`${h.base}/health`);
    const took = performance.now() - started;
    assert.equal(second.status, 500);
    assert.match(await second.text(), /timed out after 1000 ms/);
    assert.ok(took < 1_900, `answered after ${Math.round(took)} ms`);
    assert.equal((await first).status, 500);
  });
});

describe("GET /metrics", () => {
  it("exports the shared registry with the exact content type and all 13 families", async () => {
    const h = await startServer();
    h.metrics.recordKv("put", "success", 3); // as an RPC handler would
    h.metrics.recordKv("get", "success", 1, "not_found");
    const res = await fetch(`${h.base}/metrics`);
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "text/plain; version=0.0.4");
    const text = await res.text();
    const types = familyTypes(text);
    for (const [name, type] of CATALOGUE) assert.equal(types.get(name), type, name);
    const all = samples(text);
    const puts = all.find(
      (s) =>
        s.name === "kv_requests_total" &&
        s.labels["operation"] === "put" &&
        s.labels["status"] === "success",
    );
    assert.equal(puts?.value, 1);
    checkHistogram(text, "kv_request_duration_ms", KV_DURATION_BUCKETS_MS);
  });

  it("answers 404 when the export is disabled", async () => {
    const h = await startServer({ metricsEnabled: false });
    const res = await fetch(`${h.base}/metrics`);
    assert.equal(res.status, 404);
    assert.equal(await res.text(), "metrics export disabled");
  });

  it("answers 500 plain text and logs at ERROR when a collector fails", async () => {
    const h = await startServer();
    new Gauge({
      name: "cairn_test_broken",
      help: "a collector that fails",
      registers: [h.metrics.registry],
      collect() {
        throw new Error("collector broke");
      },
    });
    const res = await fetch(`${h.base}/metrics`);
    assert.equal(res.status, 500);
    assert.equal(await res.text(), "Internal error: collector broke");
    assert.equal(errorLines(h.logs).length, 1);
  });
});

/** Holds this thread for `ms` (a costly render or check). */
function busy(ms: number): void {
  const until = performance.now() + ms;
  while (performance.now() < until);
}

/**
 * `loops` clients each calling `ask` (a request and the checks of its answer) one after another
 * for `ms`: how many requests were answered.
 */
async function flood(loops: number, ms: number, ask: () => Promise<void>): Promise<number> {
  const end = performance.now() + ms;
  let requests = 0;
  const loop = async (): Promise<void> => {
    while (performance.now() < end) {
      await ask();
      requests++;
    }
  };
  await Promise.all(Array.from({ length: loops }, loop));
  return requests;
}

describe("a flood of /health or /metrics", () => {
  it("is answered by few shared renders, each begun after the requests it answers arrived", async () => {
    const h = await startServer();
    // A report costs 5 ms of this thread (1,024 shards cost a node about 3.5).
    let renders = 0;
    h.health.report = () => {
      busy(5);
      return Promise.resolve({ ...REPORT, uptime_seconds: ++renders });
    };
    const floodMs = 1_000;
    const requests = await flood(16, floodMs, async () => {
      const before = renders;
      const res = await fetch(`${h.base}/health`);
      const report = (await res.json()) as HealthReport;
      assert.equal(res.status, 200);
      // Rendered after this request was sent: not an answer it could have had before.
      assert.ok(report.uptime_seconds > before, `${report.uptime_seconds} <= ${before}`);
    });
    // Rendered once a request, the flood took the whole thread (~200 renders a second); now
    // at most a tenth of its time: 5 ms in every 50, and fewer still on a loaded machine.
    assert.ok(renders <= (floodMs / 50) * 1.25 + 2, `${renders} renders in ${floodMs} ms`);
    assert.ok(requests >= 2 * renders, `${requests} requests, ${renders} renders`);
  });

  it("of /health/quick shares its checks too (with shard workers each asks every worker)", async () => {
    const h = await startServer();
    let checks = 0;
    h.health.isQuickHealthy = () => {
      busy(2);
      checks++;
      return true;
    };
    const floodMs = 500;
    const requests = await flood(16, floodMs, async () => {
      assert.equal(await (await fetch(`${h.base}/health/quick`)).text(), "OK");
    });
    // Checked once a request, the flood took the whole thread (~500 checks a second).
    assert.ok(checks <= (floodMs / 20) * 1.25 + 2, `${checks} checks in ${floodMs} ms`);
    assert.ok(requests >= 2 * checks, `${requests} requests, ${checks} checks`);
    // A change is seen by the next request.
    h.health.isQuickHealthy = () => false;
    assert.equal((await fetch(`${h.base}/health/quick`)).status, 503);
  });

  it("of /metrics shares renders too, and a scrape after it sees what changed before it", async () => {
    const h = await startServer();
    const requests = await flood(8, 300, async () => {
      assert.equal((await fetch(`${h.base}/metrics`)).status, 200);
    });
    assert.ok(requests > 0);
    h.metrics.recordKv("put", "success", 3);
    const puts = samples(await (await fetch(`${h.base}/metrics`)).text()).find(
      (s) =>
        s.name === "kv_requests_total" &&
        s.labels["operation"] === "put" &&
        s.labels["status"] === "success",
    );
    assert.equal(puts?.value, 1);
  });
});

describe("routing", () => {
  it("answers 404 for unknown paths, 405 with Allow for other methods, HEAD like GET", async () => {
    const h = await startServer();
    assert.equal((await fetch(`${h.base}/nope`)).status, 404);
    assert.equal((await fetch(`${h.base}/health/`)).status, 404);
    const post = await fetch(`${h.base}/health`, { method: "POST", body: "x" });
    assert.equal(post.status, 405);
    assert.equal(post.headers.get("allow"), "GET, HEAD");
    const head = await fetch(`${h.base}/health/quick`, { method: "HEAD" });
    assert.equal(head.status, 200);
    assert.equal(await head.text(), "");
  });

  it("answers a malformed request 400 with Cache-Control: no-store, as every answer", async () => {
    // The parser's refusal lacked it (an audit, 2026-12-05).
    const h = await startServer();
    // A header line without a colon.
    const answer = await exchange(h, "GET /health HTTP/1.1\r\nHost x\r\n\r\n");
    assert.match(answer, /^HTTP\/1\.1 400 Bad Request\r\n/);
    assert.match(answer, /\r\nCache-Control: no-store\r\n/);
  });

  it("serves a request target in the absolute form (RFC 9112 §3.2.2) as its path", async () => {
    // It answered 404 (an audit, 2026-12-05).
    const h = await startServer();
    const answer = await exchange(
      h,
      `GET ${h.base}/health/quick?x=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n`,
    );
    assert.match(answer, /^HTTP\/1\.1 200 OK\r\n/);
    assert.match(answer, /\r\n\r\nOK$/);
  });

  it("logs each request at debug level, without the query string", async () => {
    const logs: string[] = [];
    let logged!: (line: string) => void;
    const requestLine = new Promise<string>((r) => (logged = r));
    const h = await startServer({
      logger: createLogger({
        level: "debug",
        sink: {
          write: (l: string) => {
            logs.push(l);
            if (l.includes('"message":"http request"')) logged(l);
          },
        },
      }),
    });
    await (await fetch(`${h.base}/health/quick?token=secret`)).text();
    const line = JSON.parse(await requestLine) as { fields: Record<string, unknown> };
    assert.deepEqual(
      { ...line.fields, ms: 0 },
      { method: "GET", path: "/health/quick", status: 200, ms: 0 },
    );
    assert.equal(typeof line.fields["ms"], "number");
    assert.ok(!logs.join("").includes("secret"));
  });

  it("writes only JSON log lines", async () => {
    const h = await startServer();
    h.health.quick = new Error("x");
    await (await fetch(`${h.base}/health/quick`)).text();
    assert.ok(h.logs.length >= 2);
    for (const line of h.logs) {
      const o = JSON.parse(line) as Record<string, unknown>;
      assert.deepEqual(Object.keys(o), ["timestamp", "level", "target", "message", "fields"]);
    }
  });
});

describe("lifecycle", () => {
  it("refuses an address in use, naming it and the setting", async () => {
    const h = await startServer();
    const port = h.server.address?.port ?? 0;
    const second = new OpsHttpServer({
      address: `127.0.0.1:${port}`,
      health: h.health,
      metrics: h.metrics,
      metricsEnabled: true,
      logger: createLogger({ sink: { write: () => true } }),
    });
    await assert.rejects(second.start(), (err: unknown) => {
      assert.ok(err instanceof AddressInUseError);
      assert.ok(err instanceof CairnError);
      assert.equal(err.code, "CAIRN_ERR_ADDRESS_IN_USE");
      assert.equal(err.setting, "http_addr");
      assert.match(
        err.message,
        new RegExp(`127\\.0\\.0\\.1:${port} is already in use \\(http_addr\\)`),
      );
      return true;
    });
    await second.destroy();
  });

  it("binds a bracketed IPv6 address and reports the real port", async (t) => {
    const h = await startServer({ address: "[::1]:0" }).catch((err: unknown) => err);
    if (h instanceof CairnError && h.code === "CAIRN_ERR_BIND") {
      t.skip("no IPv6 loopback on this machine");
      return;
    }
    const { server } = h as Harness;
    const bound = server.address;
    assert.equal(bound?.host, "::1");
    assert.ok((bound?.port ?? 0) > 0);
    const res = await fetch(`http://[::1]:${bound?.port}/health/quick`);
    assert.equal(await res.text(), "OK");
  });

  it("refuses a malformed address before binding", async () => {
    const h = startServer({ address: "::1:0" });
    await assert.rejects(h, (err: unknown) => {
      assert.ok(err instanceof CairnError);
      assert.equal(err.code, "CAIRN_ERR_BIND");
      assert.match(err.message, /cannot listen on ::1:0 \(http_addr\): must be an address/);
      return true;
    });
  });

  it("closes connections that send nothing: the probe is served again", async () => {
    // Before: 128 connections that never sent a byte held every slot for good, and /health/quick
    // was refused while they stayed.
    const h = await startServer({ idleTimeoutMs: 300 });
    const port = Number(new URL(h.base).port);
    const idle = await Promise.all(
      Array.from(
        { length: 128 },
        () =>
          new Promise<Socket>((resolve, reject) => {
            const s = connect(port, "127.0.0.1", () => resolve(s));
            s.once("error", reject);
          }),
      ),
    );
    const closed = idle.map(
      (s) => new Promise<void>((resolve) => s.once("close", () => resolve())),
    );
    try {
      await Promise.all(closed);
      const res = await fetch(`${h.base}/health/quick`);
      assert.equal(res.status, 200);
      assert.equal(await res.text(), "OK");
    } finally {
      for (const s of idle) s.destroy();
    }
  });

  it("closes a keep-alive connection silent past the idle timeout on its second request too", async () => {
    // Node turns a connection's timeout off as each request after the first begins: a check
    // that took longer than the idle timeout on a keep-alive connection's second request (or a
    // second answer its client never read) held the connection for good.
    const h = await startServer({
      idleTimeoutMs: 300,
      health: {
        isQuickHealthy: () => new Promise<boolean>(() => {}),
        report: () => Promise.resolve(REPORT),
      },
    });
    const port = Number(new URL(h.base).port);
    const s = connect(port, "127.0.0.1");
    s.on("error", () => undefined);
    const closed = new Promise<string>((resolve) => s.once("close", () => resolve("closed")));
    let got = "";
    s.on("data", (d: Buffer) => {
      got += d.toString("latin1");
      if (got.endsWith("}")) s.write("GET /health/quick HTTP/1.1\r\nHost: x\r\n\r\n");
    });
    s.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
    let timer: NodeJS.Timeout | undefined;
    const outcome = await Promise.race([
      closed,
      new Promise<string>((resolve) => (timer = setTimeout(() => resolve("still open"), 3_000))),
    ]);
    clearTimeout(timer);
    s.destroy();
    assert.match(got, /^HTTP\/1\.1 200 /);
    assert.equal(outcome, "closed");
  });

  it("a flood of connections that send nothing does not keep the probe out: the oldest idle one makes room", async () => {
    // Before: past 128 connections a new one was closed as it was accepted, so the probe was
    // refused until the flood's connections timed out (10 s).
    const h = await startServer();
    const port = Number(new URL(h.base).port);
    const idle: Socket[] = [];
    const closedAt: number[] = [];
    for (let i = 0; i < 128; i++) {
      // One at a time: the server accepts them in this order.
      const s = await new Promise<Socket>((resolve, reject) => {
        const c = connect(port, "127.0.0.1", () => resolve(c));
        c.once("error", reject);
      });
      s.once("close", () => closedAt.push(i));
      idle.push(s);
    }
    try {
      const res = await fetch(`${h.base}/health/quick`);
      assert.equal(res.status, 200);
      assert.equal(await res.text(), "OK");
      await new Promise<void>((resolve) => {
        const first = idle[0] as Socket;
        if (first.closed) resolve();
        else first.once("close", () => resolve());
      });
      assert.deepEqual(closedAt, [0], "only the oldest idle connection was closed");
      assert.equal(h.server.evicted, 1);
    } finally {
      for (const s of idle) s.destroy();
    }
  });

  it("with every connection's request in flight, a new connection is closed as it is accepted", async () => {
    const h = await startServer();
    const port = Number(new URL(h.base).port);
    const pending = deferred<HealthReport>();
    // The requests share the report (the first one's, then the next): it is asked once or twice.
    h.health.report = () => pending.promise;
    const busy = Array.from({ length: 128 }, () => {
      const s = connect(port, "127.0.0.1");
      s.on("error", () => undefined);
      s.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n");
      const answer = new Promise<string>((resolve) => {
        let text = "";
        s.on("data", (d: Buffer) => {
          text += d.toString("latin1");
          if (text.includes("\r\n\r\n")) resolve(text);
        });
      });
      return { s, answer };
    });
    try {
      for (let i = 0; i < 10_000 && h.server.inFlight < 128; i++) {
        await new Promise((r) => setTimeout(r, 1));
      }
      assert.equal(h.server.inFlight, 128);
      await assert.rejects(fetch(`${h.base}/health/quick`));
      assert.equal(h.server.evicted, 0);
      pending.resolve(REPORT);
      for (const { answer } of busy) assert.match(await answer, /^HTTP\/1\.1 200 /);
    } finally {
      for (const { s } of busy) s.destroy();
    }
  });

  it("a connection pipelining requests holds a few in flight, not every one it sends", async () => {
    // Node's parser hands every pipelined request over at once: 3.4 MB of `GET /health` on one
    // connection, behind a slow report, held 100,000 requests in flight and 465 MB of heap.
    const h = await startServer({ idleTimeoutMs: 2_000 });
    h.health.report = () => new Promise<HealthReport>(() => {});
    const port = Number(new URL(h.base).port);
    const s = connect(port, "127.0.0.1");
    s.on("error", () => undefined);
    const closed = new Promise<void>((resolve) => s.once("close", () => resolve()));
    s.write("GET /health HTTP/1.1\r\nHost: x\r\n\r\n".repeat(1_000));
    let most = 0;
    let done = false;
    void closed.then(() => (done = true));
    while (!done) {
      most = Math.max(most, h.server.inFlight);
      await new Promise((r) => setTimeout(r, 1));
    }
    assert.ok(
      most <= OPS_HTTP_MAX_PIPELINED,
      `${most} requests of one connection in flight at once`,
    );
    assert.equal(h.server.inFlight, 0);
  });

  it("close() lets an in-flight request finish, refuses new connections", async () => {
    const h = await startServer();
    const port = h.server.address?.port ?? 0;
    await (await fetch(`${h.base}/health/quick`)).text(); // leaves an idle keep-alive connection
    const pending = deferred<HealthReport>();
    let entered!: () => void;
    const inHandler = new Promise<void>((r) => (entered = r));
    h.health.report = () => {
      entered();
      return pending.promise;
    };
    const inFlight = fetch(`${h.base}/health`);
    await inHandler;
    const closed = h.server.close(10_000);
    await assert.rejects(
      new Promise<void>((resolve, reject) => {
        const s = connect(port, "127.0.0.1", () => {
          s.destroy();
          resolve();
        });
        s.on("error", reject);
      }),
      /ECONNREFUSED/,
    );
    pending.resolve(REPORT);
    const res = await inFlight;
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("connection"), "close");
    assert.deepEqual(await res.json(), REPORT);
    await closed;
  });

  it("close() drops requests still running at the deadline", async () => {
    const h = await startServer({ reportTimeoutMs: 60_000 });
    let entered!: () => void;
    const inHandler = new Promise<void>((r) => (entered = r));
    h.health.report = () => {
      entered();
      return new Promise<HealthReport>(() => {});
    };
    const inFlight = fetch(`${h.base}/health`);
    await inHandler;
    await h.server.close(30);
    await assert.rejects(inFlight);
  });

  it("destroy() aborts in-flight requests at once", async () => {
    const h = await startServer({ reportTimeoutMs: 60_000 });
    let entered!: () => void;
    const inHandler = new Promise<void>((r) => (entered = r));
    h.health.report = () => {
      entered();
      return new Promise<HealthReport>(() => {});
    };
    const inFlight = fetch(`${h.base}/health`);
    await inHandler;
    await h.server.destroy();
    await assert.rejects(inFlight);
  });
});
