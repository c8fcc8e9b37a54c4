/**
 * The operators' HTTP server on `http_addr` (contract §4, design.md §2), on node:http alone:
 *
 * | request             | answers                                                                 |
 * | ------------------- | ----------------------------------------------------------------------- |
 * | GET /health/quick   | 200 `OK` or 503 `UNAVAILABLE`, text/plain; calls only isQuickHealthy()   |
 * | GET /health         | JSON report; 200 healthy/degraded, 503 unhealthy; 500 `{"error":"Internal error: …"}` |
 * | GET /metrics        | 200 `Content-Type: text/plain; version=0.0.4`; 404 `metrics export disabled`; 500 `Internal error: …` |
 * | other path          | 404 `not found`                                                         |
 * | other method        | 405 with `Allow: GET, HEAD`                                             |
 *
 * HEAD is answered like GET without a body (HTTP semantics; probes sometimes use it). Query
 * strings are ignored. Every handler failure is answered 500 and logged at ERROR: at most 10
 * lines per 10 s for each route, and those left out are counted on one line when the window
 * ends (or the server closes), so that none goes unsaid. Each of the
 * three answers is rendered for every request that arrived before the render began, and at most
 * a tenth of the time (shared-render.ts): a flood of them waits, it does not take the node's CPU.
 * A connection holds OPS_HTTP_MAX_PIPELINED requests in flight at most.
 *
 * Lifecycle: `start()` binds (AddressInUseError naming `http_addr` when taken); `close()` stops
 * accepting, lets in-flight requests finish and closes keep-alive connections, and destroys what
 * is still open at the deadline; `destroy()` aborts everything at once.
 *
 * Caveats: no TLS and no authentication — the contract wants the port firewalled to monitoring
 * hosts (§5). Cluster-management endpoints are a future addition (§1.7).
 */
import type { IncomingMessage, Server, ServerResponse } from "node:http";
import type { Socket } from "node:net";
import { formatHostPort, type HostPort, parseHostPort } from "../config/index.ts";
import { bindErrorFor } from "./errors.ts";
import { healthHttpStatus, type HealthReport, type HealthSource } from "./health.ts";
import { type Logger, LogWindow } from "./log.ts";
import { type CairnMetrics, METRICS_CONTENT_TYPE } from "./metrics.ts";
import { SharedRender } from "./shared-render.ts";

// Not `import … from "node:http"`: the module's ES facade reads every export, and its WebSocket
// and event getters load the bundled undici (~80 ms of CPU at each start of a process).
const { createServer } = process.getBuiltinModule("node:http");

export interface OpsHttpServerOptions {
  /** `http_addr`: `host:port`; port 0 picks a free port (see `address` after start). */
  readonly address: string;
  readonly health: HealthSource;
  /**
   * The node's metrics (with shard workers, every worker's, aggregated). `exposeBytes`, when
   * given, is served instead of `expose` (CairnMetrics: a large exposition is cheaper as bytes).
   */
  readonly metrics: Pick<CairnMetrics, "expose"> & Partial<Pick<CairnMetrics, "exposeBytes">>;
  /** `telemetry.prometheus.enabled`. */
  readonly metricsEnabled: boolean;
  readonly logger: Logger;
  /** Longest wait for HealthSource.report(); past it GET /health answers 500. Default 5000. */
  readonly reportTimeoutMs?: number;
  /** The window of failureLogs (10 lines at most per route in it). Default 10_000. */
  readonly failureLogWindowMs?: number;
  /** The setting named in bind errors. Default "http_addr". */
  readonly setting?: string;
  /**
   * A connection that sends and receives nothing this long is closed. Default OPS_HTTP_IDLE_MS,
   * or reportTimeoutMs + 5 s when longer, so that a report being built is never cut.
   */
  readonly idleTimeoutMs?: number;
}

/**
 * Connections the operators' server holds at once. Probes and scrapers need a few; a flood of
 * idle connections must not take the descriptors the storage needs (src/node/open-files.ts).
 * Past it a new connection takes the place of the one that has waited longest without a request
 * in flight (accepted, or its last request begun, longest ago): a flood of connections that send
 * nothing, or trickle their headers, no longer keeps a probe out until they time out. Only when
 * every one has a request in flight is the new one closed as it is accepted.
 */
export const OPS_HTTP_MAX_CONNECTIONS = 128;

/**
 * Requests one connection may have in flight at once (HTTP/1.1 pipelining). Node's parser hands
 * over every request a connection has sent, answered or not: without a bound, 3.4 MB of
 * pipelined `GET /health` behind a slow report held 100,000 requests and 465 MB of heap. A
 * connection that sends one more is closed (probes and Prometheus never pipeline).
 */
export const OPS_HTTP_MAX_PIPELINED = 16;

/**
 * A connection silent this long (no byte either way) is closed: without, 128 connections that
 * never sent a byte held every slot for good, and the liveness probe was refused (Node's header
 * and request timeouts start at a request's first byte).
 */
export const OPS_HTTP_IDLE_MS = 10_000;

/** A refused request's 400 is flushed this long at most before its connection is destroyed. */
const REFUSAL_FLUSH_MS = 1_000;

const PLAIN = "text/plain; charset=utf-8";
const JSON_TYPE = "application/json";
const ALLOW = "GET, HEAD";

type Route = "/health/quick" | "/health" | "/metrics";
const ROUTES: ReadonlySet<string> = new Set<Route>(["/health/quick", "/health", "/metrics"]);

export class OpsHttpServer {
  readonly #options: OpsHttpServerOptions;
  readonly #log: Logger;
  readonly #server: Server;
  /** The open connections, least recently used first (accepted, or a request begun). */
  readonly #sockets = new Set<Socket>();
  /** The connections with a request in flight, and how many (OPS_HTTP_MAX_PIPELINED at most). */
  readonly #busy = new Map<Socket, number>();
  /** Connections closed to make room for a newer one (#admit). */
  #evicted = 0;
  #inFlight = 0;
  #closing = false;
  #started = false;
  #bound: HostPort | undefined;
  #closed: Promise<void> | undefined;
  readonly #quickRender: SharedRender<boolean>;
  readonly #healthRender: SharedRender<{ status: number; body: string }>;
  readonly #metricsRender: SharedRender<string | Buffer>;
  /**
   * The budget of "http handler failed" lines, per route (and one for any other path): a client
   * looping on an endpoint that fails must not write one ERROR line, stack and all, per request.
   */
  readonly #failureLogs = new Map<string, LogWindow>();
  /**
   * Per route, the failures left out of its window, to be counted on one line when the window
   * ends: said only on the next line written, a burst of failures and then none left most of
   * them in no line at all (contract §7 rule 1: every handler failure is logged).
   */
  readonly #leftOut = new Map<string, { timer: NodeJS.Timeout; path: string; err: unknown }>();

  constructor(options: OpsHttpServerOptions) {
    this.#options = options;
    this.#log = options.logger;
    // With shard workers the quick check asks every worker: shared and spaced as well, but a
    // probe (Kubernetes' time out in 1–3 s) waits 100 ms at most for the gap after a slow check.
    this.#quickRender = new SharedRender(async () => this.#options.health.isQuickHealthy(), {
      maxGapMs: 100,
    });
    this.#healthRender = new SharedRender(async () => {
      const report = await this.#reportWithTimeout();
      return { status: healthHttpStatus(report.status), body: JSON.stringify(report) };
    });
    this.#metricsRender = new SharedRender<string | Buffer>(() => {
      const metrics = this.#options.metrics;
      return metrics.exposeBytes !== undefined ? metrics.exposeBytes() : metrics.expose();
    });
    this.#server = createServer(
      {
        requestTimeout: 30_000,
        headersTimeout: 10_000,
        keepAliveTimeout: 5_000,
        // Node checks the two timeouts above this often (30 s by default): a slow-header
        // client held its slot three times as long as headersTimeout says.
        connectionsCheckingInterval: 1_000,
      },
      (req, res) => this.#handle(req, res),
    );
    const idleMs =
      options.idleTimeoutMs ??
      Math.max(OPS_HTTP_IDLE_MS, (options.reportTimeoutMs ?? 5_000) + 5_000);
    // Node sets a connection's timeout to the server's as each request after the first begins
    // (turning off the keep-alive timeout): without this, 0, and a keep-alive client that did
    // not read its second answer held its connection, busy, for good.
    this.#server.timeout = idleMs;
    this.#server.on("connection", (socket: Socket) => {
      if (!this.#admit()) {
        socket.destroy();
        return;
      }
      this.#sockets.add(socket);
      socket.once("close", () => {
        this.#sockets.delete(socket);
        this.#busy.delete(socket);
      });
      socket.setTimeout(idleMs, () => socket.destroy());
    });
    this.#server.on("clientError", (err: NodeJS.ErrnoException, socket: Socket) => {
      // Malformed requests, timeouts and resets: answer 400 when the socket still takes it,
      // never throw; then the connection goes (ended only, a timed-out one stayed open).
      if (err.code !== "ECONNRESET" && socket.writable) {
        socket.end(
          "HTTP/1.1 400 Bad Request\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
          () => socket.destroy(),
        );
        setTimeout(() => socket.destroy(), REFUSAL_FLUSH_MS).unref();
      } else {
        socket.destroy();
      }
    });
  }

  /** The bound address (the real port when configured with port 0); undefined before start. */
  get address(): HostPort | undefined {
    return this.#bound;
  }

  /** Binds and listens; rejects with AddressInUseError / BindError naming the address and setting. */
  async start(): Promise<HostPort> {
    if (this.#started) throw new Error("OpsHttpServer.start: already started");
    this.#started = true;
    const setting = this.#options.setting ?? "http_addr";
    const parsed = parseHostPort(this.#options.address, { allowPortZero: true });
    if (!parsed.ok) {
      throw bindErrorFor(new Error(`must be ${parsed.reason}`), this.#options.address, setting);
    }
    const { host, port } = parsed.value;
    await new Promise<void>((resolve, reject) => {
      const onError = (err: unknown): void => {
        this.#server.off("listening", onListening);
        reject(bindErrorFor(err, this.#options.address, setting));
      };
      const onListening = (): void => {
        this.#server.off("error", onError);
        resolve();
      };
      this.#server.once("error", onError);
      this.#server.once("listening", onListening);
      this.#server.listen({ host, port });
    });
    this.#server.on("error", (err) => this.#log.error("http server error", { err }));
    const info = this.#server.address();
    this.#bound =
      info !== null && typeof info === "object" ? { host, port: info.port } : parsed.value;
    this.#log.info("http server listening", { http_addr: formatHostPort(this.#bound) });
    return this.#bound;
  }

  /**
   * Graceful stop: no new connections, in-flight requests finish (their connections then close),
   * idle keep-alive connections close now; whatever is still open after `deadlineMs` is destroyed.
   */
  close(deadlineMs = 5_000): Promise<void> {
    if (this.#closed !== undefined) return this.#closed;
    this.#closing = true;
    for (const route of [...this.#leftOut.keys()]) this.#logLeftOut(route);
    this.#closed = new Promise<void>((resolve) => {
      if (!this.#server.listening) {
        this.#destroySockets();
        resolve();
        return;
      }
      const timer = setTimeout(() => {
        this.#log.warn("http server close deadline reached; dropping connections", {
          in_flight: this.#inFlight,
        });
        this.#destroySockets();
      }, deadlineMs);
      timer.unref();
      this.#server.close(() => {
        clearTimeout(timer);
        resolve();
      });
      this.#server.closeIdleConnections();
    });
    return this.#closed;
  }

  /** Immediate stop: every connection is destroyed, in-flight requests included. */
  destroy(): Promise<void> {
    const closed = this.close(0);
    this.#destroySockets();
    return closed;
  }

  /**
   * Whether a new connection may be held: there is room, or room was made by closing the open
   * connection without a request in flight that was used least recently (OPS_HTTP_MAX_CONNECTIONS).
   */
  #admit(): boolean {
    if (this.#sockets.size < OPS_HTTP_MAX_CONNECTIONS) return true;
    for (const socket of this.#sockets) {
      if (this.#busy.has(socket)) continue;
      this.#sockets.delete(socket);
      socket.destroy();
      this.#evicted++;
      return true;
    }
    return false;
  }

  /** Requests being answered now (for tests). */
  get inFlight(): number {
    return this.#inFlight;
  }

  /** Connections closed so far to make room for newer ones (for tests). */
  get evicted(): number {
    return this.#evicted;
  }

  #destroySockets(): void {
    this.#server.closeAllConnections();
    for (const socket of this.#sockets) socket.destroy();
  }

  #handle(req: IncomingMessage, res: ServerResponse): void {
    const socket = req.socket;
    // One request too many pipelined (or one parsed from what arrived with it): the connection
    // goes, and its requests in flight with it.
    if (socket.destroyed || (this.#busy.get(socket) ?? 0) >= OPS_HTTP_MAX_PIPELINED) {
      socket.destroy();
      return;
    }
    const started = performance.now();
    const path = requestPath(req.url ?? "/");
    this.#inFlight++;
    // Busy, and now the most recently used: the last a newer connection would replace.
    if (this.#sockets.delete(socket)) this.#sockets.add(socket);
    this.#busy.set(socket, (this.#busy.get(socket) ?? 0) + 1);
    res.once("close", () => {
      this.#inFlight--;
      const left = (this.#busy.get(socket) ?? 1) - 1;
      if (left > 0) this.#busy.set(socket, left);
      else this.#busy.delete(socket);
      if (this.#closing) this.#server.closeIdleConnections();
      if (this.#log.isLevelEnabled("debug")) {
        this.#log.debug("http request", {
          method: req.method,
          path,
          status: res.statusCode,
          ms: Math.round((performance.now() - started) * 1000) / 1000,
        });
      }
    });
    // Bodies are never read: drain whatever a client sends so the connection stays usable.
    req.resume();
    // Whatever escapes a handler, synchronously or not, is still a logged 500, never a crash.
    try {
      this.#route(req.method ?? "", path, res).catch((err: unknown) =>
        this.#fail(res, path, err, path === "/health" ? "json" : "plain"),
      );
    } catch (err) {
      this.#fail(res, path, err, path === "/health" ? "json" : "plain");
    }
  }

  async #route(method: string, path: string, res: ServerResponse): Promise<void> {
    res.setHeader("Cache-Control", "no-store");
    if (!ROUTES.has(path)) {
      this.#send(res, 404, PLAIN, "not found");
      return;
    }
    if (method !== "GET" && method !== "HEAD") {
      res.setHeader("Allow", ALLOW);
      this.#send(res, 405, PLAIN, "method not allowed");
      return;
    }
    switch (path as Route) {
      case "/health/quick":
        await this.#quick(res);
        return;
      case "/health":
        await this.#health(res);
        return;
      case "/metrics":
        await this.#metrics(res);
        return;
    }
  }

  async #quick(res: ServerResponse): Promise<void> {
    let healthy: boolean;
    try {
      healthy = await this.#quickRender.get();
    } catch (err) {
      this.#fail(res, "/health/quick", err, "plain");
      return;
    }
    if (healthy) this.#send(res, 200, PLAIN, "OK");
    else this.#send(res, 503, PLAIN, "UNAVAILABLE");
  }

  async #health(res: ServerResponse): Promise<void> {
    let body: string;
    let status: number;
    try {
      // Within reportTimeoutMs of this request's arrival, however long it waits for a render
      // shared with others: one queued behind a stuck report waited for it, the gap, then its
      // own (up to 11 s), and the connection's idle timeout cut it first, unanswered.
      ({ status, body } = await this.#withinReportTimeout(this.#healthRender.get()));
    } catch (err) {
      this.#fail(res, "/health", err, "json");
      return;
    }
    this.#send(res, status, JSON_TYPE, body);
  }

  #reportWithTimeout(): Promise<HealthReport> {
    return this.#withinReportTimeout(this.#options.health.report());
  }

  /** `work`'s answer, or a rejection once reportTimeoutMs has passed. */
  async #withinReportTimeout<T>(work: Promise<T>): Promise<T> {
    const ms = this.#options.reportTimeoutMs ?? 5_000;
    let timer: NodeJS.Timeout | undefined;
    const timeout = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`health report timed out after ${ms} ms`)), ms);
      timer.unref(); // a hung report must not keep a stopping process alive
    });
    try {
      return await Promise.race([work, timeout]);
    } finally {
      clearTimeout(timer);
    }
  }

  async #metrics(res: ServerResponse): Promise<void> {
    if (!this.#options.metricsEnabled) {
      this.#send(res, 404, PLAIN, "metrics export disabled");
      return;
    }
    let body: string | Buffer;
    try {
      body = await this.#metricsRender.get();
    } catch (err) {
      this.#fail(res, "/metrics", err, "plain");
      return;
    }
    this.#send(res, 200, METRICS_CONTENT_TYPE, body);
  }

  #fail(res: ServerResponse, path: string, err: unknown, shape: "plain" | "json"): void {
    const message = `Internal error: ${describeCause(err)}`;
    // Keyed by route, never by the client's path: the map stays at four windows.
    const route = ROUTES.has(path) ? path : "";
    let window = this.#failureLogs.get(route);
    if (window === undefined) {
      window = new LogWindow(10, this.#options.failureLogWindowMs ?? 10_000);
      this.#failureLogs.set(route, window);
    }
    const skipped = window.admit();
    if (skipped !== null) {
      const fields: Record<string, unknown> = { path, err };
      if (skipped > 0) fields["not_logged_before"] = skipped;
      this.#log.error("http handler failed", fields);
    } else {
      const pending = this.#leftOut.get(route);
      if (pending !== undefined) {
        pending.path = path;
        pending.err = err;
      } else {
        const timer = setTimeout(() => this.#logLeftOut(route), window.msLeft());
        timer.unref(); // a count still to write must not keep a stopping process alive
        this.#leftOut.set(route, { timer, path, err });
      }
    }
    try {
      if (shape === "json") this.#send(res, 500, JSON_TYPE, JSON.stringify({ error: message }));
      else this.#send(res, 500, PLAIN, message);
    } catch {
      res.destroy(); // the response cannot be written any more: drop the connection
    }
  }

  /** Writes the count of `route`'s failures left out of its window, with the last one's error. */
  #logLeftOut(route: string): void {
    const pending = this.#leftOut.get(route);
    if (pending === undefined) return;
    this.#leftOut.delete(route);
    clearTimeout(pending.timer);
    const count = this.#failureLogs.get(route)?.takeLeftOut() ?? 0;
    if (count === 0) return; // said already, on a line written since
    this.#log.error("http handler failures not logged one by one", {
      path: pending.path,
      not_logged: count,
      err: pending.err,
    });
  }

  #send(res: ServerResponse, status: number, contentType: string, body: string | Buffer): void {
    if (res.headersSent || res.destroyed) return;
    // While closing, every answer ends its connection so keep-alive clients let go.
    if (this.#closing) res.setHeader("Connection", "close");
    res.writeHead(status, {
      "Content-Type": contentType,
      "Content-Length": Buffer.byteLength(body),
    });
    res.end(body);
  }
}

/** One line: the error's message (or its string form), newlines flattened. */
function describeCause(err: unknown): string {
  const text = err instanceof Error ? err.message : String(err);
  return text.replace(/\s*\n\s*/g, " ") || "unknown error";
}

/**
 * The path of a request target without its query: the origin form (`/health`), or the absolute
 * form (`http://host:8080/health`), which RFC 9112 §3.2.2 says a server must accept too.
 */
function requestPath(target: string): string {
  let path = target;
  if (!path.startsWith("/")) {
    const match = /^[a-zA-Z][a-zA-Z0-9+.-]*:\/\/[^/?#]*/.exec(path);
    if (match !== null) path = path.slice(match[0].length) || "/";
  }
  return path.split("?", 1)[0] ?? "/";
}
