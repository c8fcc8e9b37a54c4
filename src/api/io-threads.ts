/**
 * The main thread's side of the gRPC I/O threads (io-thread.ts): starts them on `rpc_addr`,
 * runs the unary calls they hand over through the same handlers the main thread's own gRPC
 * server registers, and sends the answers back in batches (handoff.ts).
 *
 * A handed-over call is a HandedCall: the parts of grpc-js's ServerUnaryCall the handlers use
 * (request, metadata, deadline, peer, cancellation). Its answer is encoded here with the
 * method's own serializer, so the I/O thread relays bytes and never decodes a message.
 *
 * A call whose cancel arrives in the same batch (the client reset it before it was handed over)
 * is never run. A request's bytes raise no exception here: its metadata was checked by the front
 * end (and toMetadata drops what grpc-js would refuse), and a handler's throw becomes UNKNOWN.
 * What a front end reports (FrontEndEvent) goes to `onEvent`.
 */
import { EventEmitter } from "node:events";
import { createServer } from "node:net";
import { Worker } from "node:worker_threads";
import { DEADLINE_ON_CLOCK, IntMap } from "../common/index.ts";
import type { TlsFiles } from "../common/tls-files.ts";
import type { TlsIdentity } from "../common/peer-tls.ts";
import { type FrontEnd, serveFrontEnd, type WorkerTunnels } from "./front-end.ts";
import {
  type MethodDefinition,
  type Metadata,
  type ServerErrorResponse,
  type ServiceDefinition,
  status,
  type UntypedHandleCall,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import {
  type AuthSetup,
  BatchBuilder,
  CALL_FIELDS,
  type CallBatch,
  type FrontEndEvent,
  type FrontEndLimits,
  type IoThreadSetup,
  type MethodInfo,
  type MetadataPairs,
  metadataPairs,
  type RawStreamCall,
  type RawStreamHandler,
  type RawStreamSink,
  type ReplyBatch,
  toMetadata,
} from "./handoff.ts";
import type { SharedConnectionSlots } from "./connection-slots.ts";
import { MALFORMED_REQUEST_CODE, malformedRequest } from "./strict-wire.ts";
import { ERROR_CODE_KEY } from "./wire.ts";

export type { FrontEndEvent, FrontEndLimits } from "./handoff.ts";

type AnyMethod = MethodDefinition<unknown, unknown>;
type UnaryHandler = (
  call: HandedCall,
  callback: (err: unknown, value?: unknown, trailer?: Metadata) => void,
) => void;

/** The node's gRPC methods: what io-thread.ts registers, and the handlers of the unary ones. */
export class MethodTable {
  readonly methods: MethodInfo[] = [];
  readonly #unary: ({ def: AnyMethod; handler: UnaryHandler } | null)[] = [];
  readonly #raw = new Map<number, RawStreamHandler>();
  readonly #byPath = new Map<string, { def: AnyMethod; handler: UnaryHandler }>();

  /** Records a service as grpc-js's Server.addService takes it. */
  add(definition: ServiceDefinition, implementation: UntypedServiceImplementation): void {
    for (const [name, def] of Object.entries(definition) as [string, AnyMethod][]) {
      const handler: UntypedHandleCall | undefined =
        implementation[name] ?? implementation[def.originalName ?? ""];
      if (handler === undefined) continue;
      this.methods.push({
        path: def.path,
        requestStream: def.requestStream,
        responseStream: def.responseStream,
      });
      const unary =
        !def.requestStream && !def.responseStream
          ? { def, handler: handler as unknown as UnaryHandler }
          : null;
      this.#unary.push(unary);
      if (unary !== null) this.#byPath.set(def.path, unary);
    }
  }

  unary(index: number): { def: AnyMethod; handler: UnaryHandler } | null {
    return this.#unary[index] ?? null;
  }

  /** The unary method at `path` (e.g. "/cairn.v1.KV/Put") and its handler, or null. */
  unaryByPath(path: string): { def: AnyMethod; handler: UnaryHandler } | null {
    return this.#byPath.get(path) ?? null;
  }

  /**
   * Serves the client-streaming method at `path` (added before) with `handler` when the front
   * end runs in this thread; I/O threads still proxy it to the grpc-js server.
   */
  addRawStream(path: string, handler: RawStreamHandler): void {
    const index = this.methods.findIndex((m) => m.path === path);
    if (index < 0 || !this.methods[index]?.requestStream || this.methods[index]?.responseStream) {
      throw new Error(`${path} is not a client-streaming method of this server`);
    }
    this.#raw.set(index, handler);
  }

  rawStream(index: number): RawStreamHandler | null {
    return this.#raw.get(index) ?? null;
  }
}

/** A unary call handed over by an I/O thread, as the handlers see a ServerUnaryCall. */
export class HandedCall extends EventEmitter {
  readonly request: unknown;
  readonly metadata: Metadata;
  cancelled = false;
  /** getDeadline() is on deadlineClock(), not grpc-js's wall clock (callDeadline). */
  readonly [DEADLINE_ON_CLOCK] = true as const;
  /**
   * What the verified certificate of the call's connection says (src/common/peer-tls.ts): the
   * node's CAs that signed it and its names; null without one (or without TLS).
   */
  readonly identity: TlsIdentity | null;
  readonly #deadline: number;
  readonly #peer: string;
  readonly #path: string;

  constructor(
    request: unknown,
    metadata: Metadata,
    deadline: number,
    peer: string,
    path: string,
    identity: TlsIdentity | null = null,
  ) {
    super();
    this.request = request;
    this.metadata = metadata;
    this.#deadline = deadline;
    this.#peer = peer;
    this.#path = path;
    this.identity = identity;
  }

  /** On deadlineClock() (DEADLINE_ON_CLOCK); Infinity for none. */
  getDeadline(): number {
    return this.#deadline;
  }

  getPeer(): string {
    return this.#peer;
  }

  getPath(): string {
    return this.#path;
  }

  getHost(): string {
    return "";
  }

  sendMetadata(): void {
    // Initial metadata of a unary call: grpc-js sends it with the answer; nothing to do here.
  }
}

export interface IoThreadsOptions {
  /**
   * Worker threads to run the front end in; 0 runs one front end in this thread
   * (`rpc.io_threads: 0`): no hand-off between threads, so a lone request is answered sooner.
   */
  readonly count: number;
  readonly host: string;
  readonly port: number;
  readonly mainAddress: string;
  readonly internalKey: string;
  readonly table: MethodTable;
  readonly serverOptions: Readonly<Record<string, number>>;
  /**
   * The port is already bound by this node's own listeners (a shard worker after the first):
   * join their SO_REUSEPORT group. Otherwise a nonzero port is first checked to be free.
   */
  readonly joinsPort?: boolean;
  /** An I/O thread died: the node can no longer serve its connections. */
  readonly onFailure: (err: Error) => void;
  /** A shard worker's front end (count 0 only): connections and streams aimed at other workers. */
  readonly tunnels?: WorkerTunnels;
  /** The front ends' limits (absent fields: their defaults). */
  readonly limits?: Partial<FrontEndLimits>;
  /** TLS on the port: every front end (each thread) terminates it itself (tls-front.ts). */
  readonly tls?: TlsFiles;
  /** Who may call what: every front end checks its own calls (call-auth.ts); absent, all open. */
  readonly auth?: AuthSetup;
  /** A front end reports a connection (its own failure, or a client past a limit). */
  readonly onEvent?: (event: FrontEndEvent) => void;
  /** The node's count of open connections (`rpc.max_connections`); absent, not bounded. */
  readonly connections?: SharedConnectionSlots;
  /** The module an I/O thread runs: io-thread.ts (tests give their own). */
  readonly threadScript?: URL;
}

/** What IoThread and IoThreads use of a Worker; InProcessFrontEnd offers the same. */
interface FrontEndHandle {
  on(event: "message", listener: (message: { kind: string }) => void): unknown;
  on(event: "error", listener: (err: Error) => void): unknown;
  on(event: "exit", listener: (code: number) => void): unknown;
  off(event: "message", listener: (message: { kind: string }) => void): unknown;
  once(event: "error", listener: (err: Error) => void): unknown;
  once(event: "exit", listener: (code: number) => void): unknown;
  postMessage(message: unknown, transfer?: readonly ArrayBuffer[]): void;
  terminate(): Promise<number>;
}

/**
 * The front end run in this thread: unary calls and their answers go directly between it and
 * its IoThread (DirectCalls, FrontEnd); the few messages (listening, shutdown, closed) are
 * delivered synchronously. It never fails alone: an exception in it is the node's own.
 */
class InProcessFrontEnd extends EventEmitter implements FrontEndHandle {
  readonly #front = new EventEmitter();
  readonly frontEnd: FrontEnd;
  /** The calls' side, set once both exist. */
  thread: IoThread | null = null;

  constructor(setup: IoThreadSetup, tunnels: WorkerTunnels | undefined) {
    super();
    this.frontEnd = serveFrontEnd(
      setup,
      {
        postMessage: (message) => this.emit("message", message),
        on: (event, listener) => this.#front.on(event, listener),
      },
      {
        call: (id, method, deadline, message, meta, peer, identity) =>
          this.thread?.serveCall(id, method, deadline, message, meta, peer, identity),
        cancel: (id) => this.thread?.cancelCall(id),
        stream: (method, call) => this.thread?.openStream(method, call) ?? null,
      },
      tunnels,
    );
  }

  postMessage(message: unknown): void {
    this.#front.emit("message", message);
  }

  terminate(): Promise<number> {
    return Promise.resolve(0);
  }
}

class IoThread {
  readonly worker: FrontEndHandle;
  /** The thread ended (crashed, or was terminated): its "exit" has been emitted already. */
  exited = false;
  readonly #table: MethodTable;
  /** IntMap, not Map: a Map's churn promotes what its entries reach (src/common/int-map.ts). */
  readonly #inFlight = new IntMap<HandedCall>();
  #details: (string | null)[] = [];
  #trailers: (MetadataPairs | null)[] = [];
  readonly #replies = new BatchBuilder(() => this.#flush());
  /** The front end in this thread, answered directly; null for a worker thread. */
  readonly #direct: FrontEnd | null;

  constructor(worker: FrontEndHandle, table: MethodTable, direct: FrontEnd | null) {
    this.worker = worker;
    this.#table = table;
    this.#direct = direct;
    worker.on("message", (msg: CallBatch | { kind: string }) => {
      if (msg.kind === "calls") this.#onCalls(msg as CallBatch);
    });
  }

  #onCalls(batch: CallBatch): void {
    // A call cancelled in the same batch (reset before it was handed over) never runs.
    const cancelled = batch.cancels.length === 0 ? null : new Set(batch.cancels);
    if (cancelled !== null) for (const id of cancelled) this.cancelCall(id);
    const { head, body } = batch;
    let at = 0;
    for (let i = 0, c = 0; i < head.length; i += CALL_FIELDS, c++) {
      const length = head[i + 3] as number;
      const id = head[i] as number;
      if (cancelled === null || !cancelled.has(id)) {
        this.serveCall(
          id,
          head[i + 1] as number,
          head[i + 2] as number,
          Buffer.from(body.buffer, body.byteOffset + at, length),
          batch.meta[c] ?? null,
          batch.peers[c] ?? "",
          batch.identities[c] ?? null,
        );
      }
      at += length;
    }
  }

  /** Runs unary call `id` of method `index` (the front end's numbering, MethodTable's). */
  serveCall(
    id: number,
    index: number,
    deadline: number,
    bytes: Buffer,
    meta: MetadataPairs | null,
    peer: string,
    identity: TlsIdentity | null,
  ): void {
    const method = this.#table.unary(index);
    if (method === null) {
      this.#reply(id, status.UNIMPLEMENTED, EMPTY, "not a unary method", null);
      return;
    }
    this.#serve(id, method, bytes, meta, deadline, peer, identity);
  }

  /** A client-streaming call of method `index` served here, or null when it has no raw handler. */
  openStream(index: number, call: RawStreamCall): RawStreamSink | null {
    return this.#table.rawStream(index)?.(call) ?? null;
  }

  /** The client cancelled call `id`: its handler is told, its answer no longer wanted. */
  cancelCall(id: number): void {
    const call = this.#inFlight.get(id);
    if (call === undefined) return;
    this.#inFlight.delete(id);
    call.cancelled = true;
    call.emit("cancelled");
  }

  #serve(
    id: number,
    { def, handler }: { def: AnyMethod; handler: UnaryHandler },
    bytes: Buffer,
    meta: MetadataPairs | null,
    deadline: number,
    peer: string,
    identity: TlsIdentity | null,
  ): void {
    let request: unknown;
    try {
      request = def.requestDeserialize(bytes);
    } catch (err) {
      // The client's bytes are no message of the method's type: its mistake, not the server's
      // (INTERNAL, as grpc-js answers, would say a bug here: docs/errors.md).
      this.#reply(
        id,
        status.INVALID_ARGUMENT,
        EMPTY,
        malformedRequest(def.path, err),
        MALFORMED_TRAILERS,
      );
      return;
    }
    const call = new HandedCall(request, toMetadata(meta), deadline, peer, def.path, identity);
    this.#inFlight.set(id, call);
    let answered = false;
    const callback = (err: unknown, value?: unknown, trailer?: Metadata): void => {
      if (answered) return;
      answered = true;
      if (!this.#inFlight.delete(id)) return; // cancelled: nobody waits for the answer
      if (err !== null && err !== undefined) {
        const e = err as ServerErrorResponse;
        const code = typeof e.code === "number" ? e.code : status.UNKNOWN;
        this.#reply(id, code, EMPTY, e.details ?? e.message, metadataOrNull(e.metadata));
        return;
      }
      let out: Buffer;
      try {
        out = def.responseSerialize(value);
      } catch (serializeErr) {
        this.#reply(
          id,
          status.INTERNAL,
          EMPTY,
          `error serializing response: ${String(serializeErr)}`,
          null,
        );
        return;
      }
      this.#reply(id, status.OK, out, null, metadataOrNull(trailer));
    };
    try {
      handler(call, callback);
    } catch (err) {
      callback({ code: status.UNKNOWN, details: err instanceof Error ? err.message : String(err) });
    }
  }

  /** Answers call `id`: directly to a front end in this thread, else in the next reply batch. */
  readonly #reply: FrontEnd["answer"] = (id, code, bytes, details, trailer) => {
    if (this.#direct !== null) {
      this.#direct.answer(id, code, bytes, details, trailer);
      return;
    }
    this.#details.push(details);
    this.#trailers.push(trailer);
    this.#replies.add([id, code], bytes);
  };

  #flush(): void {
    const { head, body } = this.#replies.take();
    const batch: ReplyBatch = {
      kind: "replies",
      head,
      body,
      details: this.#details,
      trailers: this.#trailers,
    };
    this.#details = [];
    this.#trailers = [];
    this.worker.postMessage(batch, [head.buffer, body.buffer]);
  }

  /** Cancels what is still in flight (the thread is gone). */
  abandon(): void {
    for (const call of this.#inFlight.values()) {
      call.cancelled = true;
      call.emit("cancelled");
    }
    this.#inFlight.clear();
  }
}

const EMPTY = new Uint8Array(0);

/** The trailers of a request whose message does not parse. */
const MALFORMED_TRAILERS: MetadataPairs = [[ERROR_CODE_KEY, MALFORMED_REQUEST_CODE]];

function metadataOrNull(md: Metadata | undefined | null): MetadataPairs | null {
  return md === undefined || md === null ? null : metadataPairs(md);
}

/** Why an I/O thread could not listen: the errno code (EADDRINUSE, EACCES) and message. */
/**
 * Rejects with IoThreadListenError unless `host:port` is free. The front ends listen with
 * SO_REUSEPORT, which would let them join another process's listeners on the port (another node
 * of the same user, started on the same rpc_addr by mistake) and share its connections; a
 * listener without it cannot bind a port that anyone listens on.
 */
async function checkFree(host: string, port: number): Promise<void> {
  const probe = createServer();
  await new Promise<void>((resolve, reject) => {
    probe.once("error", (err: NodeJS.ErrnoException) =>
      reject(new IoThreadListenError(err.code ?? null, err.message)),
    );
    probe.listen({ host, port, exclusive: true }, () => resolve());
  });
  await new Promise<void>((resolve) => probe.close(() => resolve()));
}

export class IoThreadListenError extends Error {
  readonly code: string | undefined;

  constructor(code: string | null, message: string) {
    super(message);
    this.name = "IoThreadListenError";
    this.code = code ?? undefined;
  }
}

export class IoThreads {
  readonly #options: IoThreadsOptions;
  readonly #threads: IoThread[] = [];
  /** The front end, when it runs in this thread (no I/O threads). */
  #inProcess: FrontEnd | null = null;
  #stopping = false;

  constructor(options: IoThreadsOptions) {
    this.#options = options;
  }

  /**
   * Starts the threads one by one on the same address (the first one picks the port when it is
   * 0); resolves with the port, or rejects with IoThreadListenError after stopping those started.
   */
  async start(): Promise<number> {
    let port = this.#options.port;
    try {
      if (port !== 0 && this.#options.joinsPort !== true) await checkFree(this.#options.host, port);
      const count = Math.max(1, this.#options.count);
      for (let i = 0; i < count; i++) port = await this.#startOne(port);
    } catch (err) {
      this.destroy();
      throw err;
    }
    return port;
  }

  async #startOne(port: number): Promise<number> {
    const o = this.#options;
    const setup: IoThreadSetup = {
      host: o.host,
      port,
      mainAddress: o.mainAddress,
      internalKey: o.internalKey,
      methods: o.table.methods,
      serverOptions: o.serverOptions,
      ...(o.limits === undefined ? {} : { limits: o.limits }),
      ...(o.tls === undefined ? {} : { tls: o.tls }),
      ...(o.auth === undefined ? {} : { auth: o.auth }),
      ...(o.connections === undefined ? {} : { connections: o.connections }),
    };
    const inProcess = o.count === 0 ? new InProcessFrontEnd(setup, o.tunnels) : null;
    const worker: FrontEndHandle =
      inProcess ??
      new Worker(o.threadScript ?? new URL("./io-thread.ts", import.meta.url), {
        workerData: setup,
      });
    const thread = new IoThread(worker, o.table, inProcess?.frontEnd ?? null);
    this.#inProcess = inProcess?.frontEnd ?? null;
    if (inProcess !== null) inProcess.thread = thread;
    this.#threads.push(thread);
    worker.on("message", (msg: { kind: string; event?: FrontEndEvent }) => {
      if (msg.kind === "event" && msg.event !== undefined) o.onEvent?.(msg.event);
    });
    // Its end is heard from the start: a thread that ends at once after it listens has its
    // "listening" and its "exit" emitted together (Worker drains the port at its exit), before
    // a listener added once "listening" was awaited exists, and the node never learnt of it.
    let listened = false;
    const listening = new Promise<number>((resolve, reject) => {
      const onMessage = (msg: {
        kind: string;
        port?: number;
        code?: string | null;
        message?: string;
      }): void => {
        if (msg.kind === "listening") {
          worker.off("message", onMessage);
          listened = true;
          resolve(msg.port as number);
        } else if (msg.kind === "listen-error") {
          worker.off("message", onMessage);
          reject(new IoThreadListenError(msg.code ?? null, msg.message ?? "listen failed"));
        }
      };
      worker.on("message", onMessage);
      worker.once("error", reject);
      worker.once("exit", (code) =>
        reject(new Error(`gRPC I/O thread exited with code ${code} before it listened`)),
      );
    });
    worker.on("error", (err) => {
      thread.abandon();
      if (listened && !this.#stopping) o.onFailure(err);
    });
    worker.on("exit", (code) => {
      thread.exited = true;
      thread.abandon();
      if (listened && !this.#stopping) {
        o.onFailure(new Error(`gRPC I/O thread exited with code ${code}`));
      }
    });
    return await listening;
  }

  /**
   * Stops listening and lets the calls in flight finish within `deadlineMs` (the main thread
   * keeps answering what is handed over meanwhile), then ends the threads.
   */
  async close(deadlineMs: number): Promise<void> {
    this.#stopping = true;
    await Promise.all(
      this.#threads.map(async (t) => {
        // A thread that ended (its failure is what stops the node) answers nothing, and its
        // "exit" came before: waiting for either would hold the stop for ever.
        if (t.exited) return;
        const closed = new Promise<void>((resolve) => {
          t.worker.on("message", (msg: { kind: string }) => {
            if (msg.kind === "closed") resolve();
          });
          t.worker.once("exit", () => resolve());
        });
        t.worker.postMessage({ kind: "shutdown", deadlineMs });
        await closed;
        await t.worker.terminate();
      }),
    );
  }

  destroy(): void {
    this.#stopping = true;
    for (const t of this.#threads) void t.worker.terminate();
  }

  /**
   * Writes the answers the front end framed this turn now (see FrontEnd.flushNow); nothing to do
   * when it runs in I/O threads, which write on their own turns.
   */
  flushNow(): void {
    this.#inProcess?.flushNow();
  }

  /** Serves a connection another shard worker handed over (front-end.ts `adopt`). */
  adopt(fd: number, rest: Buffer | null): void {
    if (this.#inProcess === null)
      throw new Error("only a front end in this thread adopts connections");
    this.#inProcess.adopt(fd, rest);
  }
}
