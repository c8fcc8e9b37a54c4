/**
 * The front end the limit tests (h2-limits.test.ts) attack: io-threads.ts, in this thread or in
 * an I/O thread, serving a small test service. The tests speak to it with test/support/h2-raw.ts.
 */
import type { ServiceDefinition } from "@grpc/grpc-js";
import type { SharedConnectionSlots } from "../../src/api/connection-slots.ts";
import {
  type FrontEndEvent,
  type FrontEndLimits,
  IoThreads,
  MethodTable,
} from "../../src/api/io-threads.ts";

export const UNARY = "/test.Limits/Unary";
export const PEER_UNARY = "/cairn.v1.Raft/ProposeMeta";
/** A server-streaming method: the front end proxies it to the main thread's server. */
export const STREAMING = "/test.Limits/Watch";

const bytes = (b: Buffer): Buffer => b;

function unaryDef(path: string, responseStream = false): ServiceDefinition[string] {
  return {
    path,
    requestStream: false,
    responseStream,
    requestSerialize: bytes,
    requestDeserialize: bytes,
    responseSerialize: bytes,
    responseDeserialize: bytes,
  } as unknown as ServiceDefinition[string];
}

/** What the test service saw: each call's request and metadata. */
export interface Seen {
  calls: { path: string; request: Buffer; metadata: Record<string, unknown> }[];
}

export interface TestFrontEnd {
  readonly port: number;
  readonly seen: Seen;
  readonly events: FrontEndEvent[];
  /** Resolve a held call (see `hold`): the answer is the request echoed. */
  readonly held: (() => void)[];
  /** Resolves once at least `count` calls wait in `held` (the test's timeout bounds the wait). */
  whenHeld(count: number): Promise<void>;
  close(): Promise<void>;
}

export interface FrontEndOptions {
  readonly ioThreads?: number;
  readonly serverOptions?: Record<string, number>;
  /** Calls are answered only when the test releases them (`held`). */
  readonly hold?: boolean;
  readonly limits?: Partial<FrontEndLimits>;
  /** The node's connection bounds (connection-slots.ts); absent, none. */
  readonly connections?: SharedConnectionSlots;
}

/** A front end on 127.0.0.1:0 serving UNARY (echo) and PEER_UNARY (echo). */
export async function startFrontEnd(options: FrontEndOptions = {}): Promise<TestFrontEnd> {
  const seen: Seen = { calls: [] };
  const held: (() => void)[] = [];
  const events: FrontEndEvent[] = [];
  const heldWaiters: { count: number; resolve: () => void }[] = [];
  const whenHeld = (count: number): Promise<void> => {
    if (held.length >= count) return Promise.resolve();
    return new Promise((resolve) => heldWaiters.push({ count, resolve }));
  };
  const table = new MethodTable();
  const handler = (
    call: { request: Buffer; metadata: { getMap(): Record<string, unknown> }; getPath(): string },
    callback: (err: unknown, value?: unknown) => void,
  ): void => {
    seen.calls.push({
      path: call.getPath(),
      request: call.request,
      metadata: call.metadata.getMap(),
    });
    if (options.hold === true) {
      held.push(() => callback(null, call.request));
      for (const w of heldWaiters.splice(0)) {
        if (held.length >= w.count) w.resolve();
        else heldWaiters.push(w);
      }
    } else {
      callback(null, call.request);
    }
  };
  table.add({ Unary: unaryDef(UNARY) }, { Unary: handler as never });
  table.add({ ProposeMeta: unaryDef(PEER_UNARY) }, { ProposeMeta: handler as never });
  table.add({ Watch: unaryDef(STREAMING, true) }, { Watch: (() => undefined) as never });
  const threads = new IoThreads({
    count: options.ioThreads ?? 0,
    host: "127.0.0.1",
    port: 0,
    mainAddress: "127.0.0.1:1",
    internalKey: "test",
    table,
    serverOptions: options.serverOptions ?? {},
    onFailure: (err) => {
      throw err;
    },
    onEvent: (event) => events.push(event),
    ...(options.limits === undefined ? {} : { limits: options.limits }),
    ...(options.connections === undefined ? {} : { connections: options.connections }),
  });
  const port = await threads.start();
  return { port, seen, events, held, whenHeld, close: () => threads.close(1000) };
}
