/**
 * Where a CairnClient's attempts go when the node it would route to, or a configured endpoint,
 * cannot serve: against an in-process fake node (KV answers the test scripts, WatchCluster views
 * the test publishes) and TCP listeners that accept and never answer, on loopback. A dead node
 * costs a call one attempt (one connect budget at most), not one per round; a hint naming it is
 * not followed again; a connection to a node that left the view is closed.
 */
import assert from "node:assert/strict";
import {
  connect,
  createServer as createNetServer,
  type Server as NetServer,
  type Socket,
} from "node:net";
import { after, before, describe, it } from "node:test";
import {
  Metadata,
  Server,
  ServerCredentials,
  type ServerWritableStream,
  type ServiceError,
  status,
  type UntypedServiceImplementation,
} from "@grpc/grpc-js";
import { loadCairnProto } from "../../src/api/index.ts";
import { ERROR_CODE_KEY, LEADER_HINT_KEY } from "../../src/api/wire.ts";
import { CairnClient } from "../../src/client/index.ts";
import { shardForKey } from "../../src/cluster/index.ts";
import { withTimeout } from "../support/timeout.ts";

const TOTAL_SHARDS = 16;

/** A Put's scripted answers by key: a leader hint (NOT_LEADER naming that node) or "ok". */
const scripts = new Map<string, (string | "ok")[]>();
const puts = new Map<string, number>();
let server: Server;
/** The fake node's address. */
let node = "";
const watchers = new Set<ServerWritableStream<unknown, unknown>>();
let current: object = view([]);

interface Member {
  id: string;
  addr: string;
  state?: string;
}

/** A WatchCluster message listing `members` (active), and `leaders` by shard. */
function view(members: Member[], leaders: ReadonlyMap<number, string> = new Map()): object {
  return {
    epoch: 1,
    total_shards: TOTAL_SHARDS,
    cluster_id: "c",
    cluster_version: 1,
    nodes: members.map((m) => ({
      id: m.id,
      rpc_addr: m.addr,
      http_addr: "",
      state: m.state ?? "alive",
      member_state: "active",
      replicas: 1,
      build: 1,
    })),
    shards: [...leaders].map(([id, leader]) => ({ id, leader, replicas: [leader], term: 1 })),
  };
}

function publish(v: object): void {
  current = v;
  for (const w of watchers) w.write(v);
}

function shardOf(key: string): number {
  return shardForKey(new TextEncoder().encode(key), TOTAL_SHARDS);
}

/** A TCP listener that accepts and never answers (a hung node, a black hole), counting sockets. */
async function silentNode(): Promise<{
  server: NetServer;
  addr: string;
  accepted: Socket[];
}> {
  const accepted: Socket[] = [];
  const s = createNetServer((socket) => {
    accepted.push(socket);
    socket.on("data", () => undefined);
  });
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return { server: s, addr: `127.0.0.1:${(s.address() as { port: number }).port}`, accepted };
}

/** A TCP proxy to `target`, keeping the sockets it accepted. */
async function proxyTo(target: string): Promise<{
  server: NetServer;
  addr: string;
  accepted: Socket[];
}> {
  const port = Number(target.split(":").at(-1));
  const accepted: Socket[] = [];
  const s = createNetServer((socket) => {
    accepted.push(socket);
    const upstream = connect(port, "127.0.0.1");
    socket.pipe(upstream).pipe(socket);
    socket.on("error", () => undefined);
    upstream.on("error", () => undefined);
    socket.on("close", () => upstream.destroy());
    upstream.on("close", () => socket.destroy());
  });
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  return { server: s, addr: `127.0.0.1:${(s.address() as { port: number }).port}`, accepted };
}

/** An address where nothing listens: connections are refused. */
async function refusedAddress(): Promise<string> {
  const s = createNetServer();
  await new Promise<void>((r) => s.listen(0, "127.0.0.1", r));
  const addr = `127.0.0.1:${(s.address() as { port: number }).port}`;
  await new Promise((r) => s.close(r));
  return addr;
}

/** Waits (bounded) until `client` routes with the view last published. */
async function following(client: CairnClient, members: number): Promise<void> {
  for (let i = 0; i < 300 && client.view?.nodes.length !== members; i++)
    await new Promise((r) => setTimeout(r, 10));
  assert.equal(client.view?.nodes.length, members, "the client follows the fake node's view");
}

before(async () => {
  const { proto } = loadCairnProto();
  server = new Server();
  const kv: UntypedServiceImplementation = {
    Put: (
      call: { request: { key?: Buffer } },
      cb: (e: Partial<ServiceError> | null, r?: unknown) => void,
    ) => {
      const key = String(call.request.key ?? "");
      puts.set(key, (puts.get(key) ?? 0) + 1);
      const hint = scripts.get(key)?.shift() ?? "ok";
      if (hint === "ok") return cb(null, { version: { index: 7, term: 2 } });
      const metadata = new Metadata();
      metadata.set(ERROR_CODE_KEY, "CAIRN_ERR_NOT_LEADER");
      metadata.set(LEADER_HINT_KEY, hint);
      cb({ code: status.UNAVAILABLE, details: "not the leader", metadata });
    },
  };
  const meta: UntypedServiceImplementation = {
    WatchCluster: (call: ServerWritableStream<unknown, unknown>) => {
      watchers.add(call);
      call.on("cancelled", () => watchers.delete(call));
      call.write(current);
    },
  };
  server.addService(proto.cairn.v1.KV.service, kv);
  server.addService(proto.cairn.v1.Meta.service, meta);
  const port = await new Promise<number>((resolve, reject) =>
    server.bindAsync("127.0.0.1:0", ServerCredentials.createInsecure(), (err, p) =>
      err === null ? resolve(p) : reject(err),
    ),
  );
  node = `127.0.0.1:${port}`;
});

after(() => server.forceShutdown());

describe("a client's fallbacks past a node that cannot serve", () => {
  it("an endpoint that accepts and never answers costs a call one connect budget, not one per round", async () => {
    // The fake node refuses the put four times (not the leader, no hint), and the call went
    // round its endpoints: the silent one took 500 ms every other attempt, 2 s in all.
    const silent = await silentNode();
    scripts.set("rounds", ["", "", "", ""]);
    const c = new CairnClient({
      endpoints: [silent.addr, node],
      routing: false,
      connectTimeoutMs: 500,
      timeoutMs: 1800,
      initialBackoffMs: 1,
    });
    try {
      assert.deepEqual(await c.put("rounds", "v"), { index: 7, term: 2 });
      assert.equal(puts.get("rounds"), 5);
    } finally {
      c.close();
      silent.server.close();
    }
  });

  it("a channel in reconnect backoff is passed over while another endpoint is not", async () => {
    // One attempt a call: the call whose turn fell on the refused endpoint failed, every other one.
    const refused = await refusedAddress();
    const c = new CairnClient({
      endpoints: [refused, node],
      routing: false,
      maxAttempts: 1,
      timeoutMs: 2000,
    });
    try {
      // The first call finds the endpoint refusing: its channel is in backoff from then on.
      await assert.rejects(c.put("backoff-0", "v"));
      for (let i = 1; i <= 6; i++) await c.put(`backoff-${i}`, "v");
    } finally {
      c.close();
    }
  });

  it("falls back to the members the view shows serving, and does not follow a hint to a node that failed to connect again", async () => {
    // The node answers "not the leader, s is" four times; s accepts and never answers. The call
    // went to s after each hint, 500 ms each time.
    const silent = await silentNode();
    const key = "hinted";
    scripts.set(key, ["s", "s", "s", "s"]);
    publish(
      view([
        { id: "a", addr: node },
        { id: "s", addr: silent.addr },
      ]),
    );
    const c = new CairnClient({
      endpoints: [node],
      connectTimeoutMs: 500,
      timeoutMs: 1800,
      initialBackoffMs: 1,
    });
    try {
      await following(c, 2);
      assert.deepEqual(await c.put(key, "v"), { index: 7, term: 2 });
      assert.equal(puts.get(key), 5);
    } finally {
      c.close();
      silent.server.close();
    }
  });

  it("does not follow a hint, or route, to a node the view shows dead", async () => {
    const silent = await silentNode();
    const key = "dead-leader";
    scripts.set(key, ["d", "d"]);
    const members = [
      { id: "a", addr: node },
      { id: "d", addr: silent.addr, state: "dead" },
    ];
    publish(view(members, new Map([[shardOf("dead-routed"), "d"]])));
    const c = new CairnClient({ endpoints: [node], timeoutMs: 3000, initialBackoffMs: 1 });
    try {
      await following(c, 2);
      await c.put(key, "v");
      await c.put("dead-routed", "v");
      assert.equal(puts.get(key), 3);
      assert.equal(silent.accepted.length, 0, "nothing was sent to the dead node");
    } finally {
      c.close();
      silent.server.close();
    }
  });

  it("closes its connection to a node that left the view", async () => {
    // A client following a cluster whose nodes come and go kept a channel to every address it
    // ever routed to. Node b is the fake node again, behind a proxy that shows its connections.
    const b = await proxyTo(node);
    const key = "left-node";
    const members = [
      { id: "a", addr: node },
      { id: "b", addr: b.addr },
    ];
    publish(view(members, new Map([[shardOf(key), "b"]])));
    const c = new CairnClient({ endpoints: [node], timeoutMs: 3000 });
    try {
      await following(c, 2);
      await c.put(key, "v");
      assert.equal(b.accepted.length, 1, "the put was routed to b");
      const socket = b.accepted[0] as Socket;
      const closed = new Promise<void>((r) => socket.once("close", () => r()));
      publish(view([{ id: "a", addr: node }]));
      await following(c, 1);
      await withTimeout(closed, 5000, "the connection to the node that left to close");
    } finally {
      c.close();
      b.server.close();
    }
  });
});
