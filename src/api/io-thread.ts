/**
 * A gRPC I/O thread: a worker thread (io-threads.ts starts them) that runs the node's gRPC front
 * end (front-end.ts) and talks to the main thread over its MessagePort.
 */
import { parentPort, workerData } from "node:worker_threads";
import { serveFrontEnd } from "./front-end.ts";
import type { IoThreadSetup } from "./handoff.ts";

if (parentPort === null) throw new Error("io-thread.ts runs only as a worker thread");
serveFrontEnd(workerData as IoThreadSetup, parentPort);
