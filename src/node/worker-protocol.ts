/** The messages between the main thread and its shard workers (shard-workers.ts, shard-worker.ts). */
import type { MessagePort } from "node:worker_threads";
import type { CairnConfig } from "../config/index.ts";
import type { WireError } from "./siblings.ts";
import type { SharedConnectionSlots } from "../api/index.ts";

/** What the main thread hands a shard worker at its start. */
export interface ShardWorkerSetup {
  readonly config: CairnConfig;
  readonly index: number;
  readonly count: number;
  readonly walDir: string;
  /** The port shared with each other worker, by its index (null at this worker's own). */
  readonly ports: readonly (MessagePort | null)[];
  /** Cluster mode: the data directory's incarnation (src/node/incarnation.ts), read once. */
  readonly incarnation: string;
  /** The node's count of rpc_addr's connections (`rpc.max_connections`), shared by the workers. */
  readonly connections: SharedConnectionSlots;
  /** The storage's open tables, node-wide (open-files.ts); each worker keeps its share. */
  readonly tableFiles: number;
  /** The process's internal key (src/api/wire.ts INTERNAL_KEY): the workers proxy to each other. */
  readonly internalKey: string;
}

export type Question = "quick" | "report" | "metrics";

export type MainToWorker =
  /** Serve gRPC on `rpc`; `http` is the main thread's HTTP server (what membership advertises). */
  | { readonly type: "bind"; readonly rpc: string; readonly http: string }
  | { readonly type: "ask"; readonly id: number; readonly what: Question }
  | { readonly type: "stop" }
  | { readonly type: "close" };

export type WorkerToMain =
  | { readonly type: "opened" }
  | { readonly type: "started"; readonly rpc: string }
  | { readonly type: "failed"; readonly error: WireError }
  | { readonly type: "fatal"; readonly error: WireError }
  | {
      readonly type: "answer";
      readonly id: number;
      readonly value?: unknown;
      readonly error?: WireError;
    }
  | { readonly type: "drained" }
  | { readonly type: "stopped" };
