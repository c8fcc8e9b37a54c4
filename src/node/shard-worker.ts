/**
 * A shard worker: a worker thread (shard-workers.ts starts them) that runs one CairnNode share
 * (ShardCell) over the shards it owns and serves rpc_addr with the others, and answers the main
 * thread's questions (health, metrics) and its start and stop steps over its parentPort.
 */
import { closeSync } from "node:fs";
import { parentPort, workerData } from "node:worker_threads";
import { createLogger, fdSink, isLogLevel } from "../ops/index.ts";
import { CairnNode, REQUEST_TIMEOUT_MS } from "./node.ts";
import {
  RoutedStore,
  serveSibling,
  SharedViews,
  MetaShare,
  shardCellMeta,
  Sibling,
  type SiblingServer,
  toWireError,
} from "./siblings.ts";
import { WaitingConnections, waitingConnectionsOf } from "./waiting-connections.ts";
import type { MainToWorker, Question, ShardWorkerSetup, WorkerToMain } from "./worker-protocol.ts";

const port = parentPort;
if (port === null) throw new Error("shard-worker.ts runs only as a worker thread");
const setup = workerData as ShardWorkerSetup;
const { config, index, count } = setup;
const post = (m: WorkerToMain): void => port.postMessage(m);

// Lines go straight to the process's stdout: a worker's process.stdout is relayed through the
// main thread, and a line still in that relay is lost if the process exits.
const log = createLogger({
  level: isLogLevel(config.log.level) ? config.log.level : "info",
  fields: { node_id: config.node_id, shard_worker: index },
  sink: fdSink(1),
});

// The workers start serving one after another once all have recovered: a call a sibling hands
// over before this worker serves waits for it.
let serve: SiblingServer | null = null;
let setServe: (server: SiblingServer) => void = () => {};
const served = new Promise<SiblingServer>((resolve) => (setServe = resolve));
const views = new SharedViews(config.cluster.total_shards);
// Connections the others accepted for this worker, until its gRPC server serves them: a few,
// each for its handshake's time at most, all closed if it never serves (waiting-connections.ts).
const handedOver = new WaitingConnections({
  max: waitingConnectionsOf(count),
  maxWaitMs: config.rpc.handshake_timeout_ms,
});
const streamAddresses: string[] = [];
const siblings = setup.ports.map((p, i) =>
  p === null
    ? null
    : new Sibling(
        p,
        {
          // With its client's call as it crossed (a read stops once it is cancelled).
          serve: (call, client) =>
            serve !== null ? serve(call, client) : served.then((server) => server(call, client)),
          onView: (shards, members, firstSeed) => views.applyShared(shards, members, firstSeed),
          onConnection: (fd, rest) => handedOver.add(fd, rest),
          onMeta: (meta) => metaShare.received(meta),
          onDecommissioned: () => metaShare.receivedDecommissioned(),
          onAdmission: (admission) => metaShare.receivedAdmission(admission),
          onStreamAddress: (address) => (streamAddresses[i] = address),
        },
        {
          requestTimeoutMs: REQUEST_TIMEOUT_MS,
          // What the owner's driver admits at once: its share of the node's budget (node.ts).
          maxPendingBytes: Math.floor(config.limits.max_pending_bytes / count),
        },
      ),
);
views.attach(siblings.filter((s) => s !== null));
// Cluster mode: the meta group's state, which worker 0 holds.
const metaShare = new MetaShare(siblings);

let bind: (addresses: { rpc: string; http: string }) => void = () => {};
const bindAddress = new Promise<{ rpc: string; http: string }>((resolve) => (bind = resolve));
let close: () => void = () => {};
const closing = new Promise<void>((resolve) => (close = resolve));
let node: CairnNode | null = null;

port.on("message", (m: MainToWorker) => {
  switch (m.type) {
    case "bind":
      bind({ rpc: m.rpc, http: m.http });
      return;
    case "ask":
      void answer(m.id, m.what);
      return;
    case "stop":
      void stop();
      return;
    case "close":
      close();
      return;
  }
});

async function answer(id: number, what: Question): Promise<void> {
  try {
    if (node === null) throw new Error(`shard worker ${index} has not started`);
    const value =
      what === "quick"
        ? await node.isQuickHealthy()
        : what === "report"
          ? await node.report()
          : await node.metrics.registry.getMetricsAsJSON();
    post({ type: "answer", id, value });
  } catch (err) {
    post({ type: "answer", id, error: toWireError(err) });
  }
}

async function stop(): Promise<void> {
  try {
    await node?.stop();
  } catch (err) {
    log.error("the shard worker's stop failed", { error: toWireError(err).message });
  } finally {
    for (const s of siblings) s?.close();
    handedOver.close();
    post({ type: "stopped" });
  }
}

try {
  node = await CairnNode.start(
    config,
    log,
    (err) => post({ type: "fatal", error: toWireError(err) }),
    {
      index,
      count,
      walDir: setup.walDir,
      connections: setup.connections,
      tableFiles: setup.tableFiles,
      internalKey: setup.internalKey,
      views,
      membership: index === 0,
      route: (local, here, proposer) => {
        const store = new RoutedStore(local, siblings);
        serve = serveSibling(
          local,
          here,
          proposer === null ? null : { proposer, version: () => metaShare.version },
        );
        setServe(serve);
        return {
          store,
          transferLeader: (id, to, deadline) => store.transfer(id, to, here, deadline),
        };
      },
      tunnels: {
        index,
        count,
        handOff: (to, fd, rest) => {
          const sibling = siblings[to];
          if (sibling === null || sibling === undefined) closeSync(fd);
          else sibling.handConnection(fd, rest);
        },
        streamAddress: (i) => streamAddresses[i] ?? "127.0.0.1:0",
        peerService: "/cairn.v1.Raft/",
      },
      watchLeaders: (listener) => views.onShared(listener),
      serving: (server) => {
        handedOver.serve((fd, rest) => server.adopt(fd, rest));
        for (const s of siblings) s?.shareStreamAddress(server.internalAddress);
      },
      meta: shardCellMeta(metaShare, siblings, setup.incarnation),
      addresses: () => {
        post({ type: "opened" });
        return bindAddress;
      },
      drained: () => {
        post({ type: "drained" });
        return closing;
      },
    },
  );
  post({ type: "started", rpc: node.addresses.rpc });
} catch (err) {
  for (const s of siblings) s?.close();
  // This worker will never serve them: their descriptors are the process's, not the thread's,
  // and outlived it (the main thread ends it after a failed start).
  handedOver.close();
  post({ type: "failed", error: toWireError(err) });
}
