/**
 * Forwarding of KV calls over the peer streams (forward.ts with `peerCall`, GrpcTransport.call,
 * peer-calls.ts), as a cluster node forwards: a leader node (a real single-node MultiRaft behind
 * an RpcServer that also serves cairn.v1.Raft) and follower nodes whose store names it. Calls go
 * in through an independent grpc-js client; the answers come back on the leader's own stream.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { credentials, status } from "@grpc/grpc-js";
import {
  type AdminStore,
  type ForwardOptions,
  type KvStore,
  RpcServer,
} from "../../src/api/index.ts";
import type { KVClient } from "../../src/api/generated/cairn/v1/KV.ts";
import type { PutResponse__Output } from "../../src/api/generated/cairn/v1/PutResponse.ts";
import { CallCut } from "../../src/common/index.ts";
import { ClusterViewPublisher } from "../../src/cluster/index.ts";
import { CairnMetrics, silentLogger } from "../../src/ops/index.ts";
import type { MultiRaft } from "../../src/replication/index.ts";
import { createRaftService, GrpcTransport, type PeerCall } from "../../src/replication/index.ts";
import { eventually } from "../replication/peer-support.ts";
import {
  call,
  callServed,
  failure,
  RoutingFollowerStore as FollowerStore,
  key,
  trailer,
  LIMITS,
  openLeaderStore,
  proto,
  TOTAL_SHARDS,
} from "./forward-support.ts";
import { deadlineClock } from "../../src/common/deadline-clock.ts";

interface Node {
  readonly id: string;
  readonly server: RpcServer;
  readonly transport: GrpcTransport;
  readonly metrics: CairnMetrics;
  readonly kv: KVClient;
  /** Peer calls that reached this node's Raft service, before they are served. */
  readonly received: PeerCall[];
}

const addresses = new Map<string, string>();
const nodes: Node[] = [];

/**
 * A node as `cairn serve` wires one in cluster mode: forwards go over its transport, peers'
 * calls are served by its KV handlers unless `serve` says otherwise (false: never answered).
 */
async function startNode(
  id: string,
  store: KvStore & AdminStore,
  options: { serve?: boolean; forward?: Partial<ForwardOptions> } = {},
): Promise<Node> {
  const metrics = new CairnMetrics({ nodeId: id });
  const transport = new GrpcTransport({
    clusterId: "c1",
    nodeId: id,
    peers: (n) => addresses.get(n) ?? null,
    maxBackoffMs: 100,
  });
  const received: PeerCall[] = [];
  let server: RpcServer | null = null;
  const raft = createRaftService(() => undefined, {
    clusterId: "c1",
    nodeId: id,
    calls: {
      serve(from, call) {
        received.push(call);
        if (options.serve === false) return;
        server?.servePeerCall(from, call, (reply) => transport.reply(from, reply));
      },
      replied: (from, reply) => transport.receiveReply(from, reply),
    },
  });
  server = new RpcServer({
    address: "127.0.0.1:0",
    store,
    metrics,
    views: new ClusterViewPublisher(TOTAL_SHARDS),
    logger: silentLogger,
    limits: LIMITS,
    maxMessageBytes: 4 * 1024 * 1024,
    raft,
    forward: {
      nodeId: id,
      addressOf: (n: string) => addresses.get(n) ?? null,
      peerCall: (leader, path, request, o) => transport.call(leader, path, request, o),
      ...options.forward,
    },
  });
  const { port } = await server.start();
  const address = `127.0.0.1:${port}`;
  addresses.set(id, address);
  const kv = new proto.cairn.v1.KV(address, credentials.createInsecure());
  const node = { id, server, transport, metrics, kv, received };
  nodes.push(node);
  return node;
}

let dir: string;
let store: MultiRaft;
let leader: Node;
let follower: Node;
const followerStore = new FollowerStore("n1");

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "cairn-peer-forward-"));
  store = await openLeaderStore(dir);
  leader = await startNode("n1", store);
  follower = await startNode("n2", followerStore);
});

after(async () => {
  for (const n of nodes) {
    n.kv.close();
    await n.server.close(1000);
    await n.transport.close();
  }
  await store.close();
  await rm(dir, { recursive: true, force: true });
});

describe("forwarding over the peer streams", () => {
  it("puts, gets and deletes through a follower: the leader's answers, on the streams", async () => {
    const before = leader.received.length;
    const put = await call<PutResponse__Output>((md, o, cb) =>
      follower.kv.Put({ key: key("a"), value: key("1") }, md, o, cb),
    );
    assert.ok(put.version !== null && put.version.index > 0);
    const got = await call<{ value: Buffer; version: unknown }>((md, o, cb) =>
      follower.kv.Get({ key: key("a") }, md, o, cb),
    );
    assert.equal(got.value.toString(), "1");
    assert.deepEqual(got.version, put.version);
    const del = await call<{ deleted: boolean }>((md, o, cb) =>
      follower.kv.Delete({ key: key("a") }, md, o, cb),
    );
    assert.equal(del.deleted, true);
    // All three went over the follower's stream to the leader, none reached its own store.
    assert.deepEqual(
      leader.received.slice(before).map((c) => c.method),
      ["/cairn.v1.KV/Put", "/cairn.v1.KV/Get", "/cairn.v1.KV/Delete"],
    );
    assert.equal(followerStore.calls, 1, "the Get asked the store first; the writes went at once");
    const stats = follower.transport.stats()["n1"];
    assert.ok(stats !== undefined && stats.framesSent >= 4, "handshake and three calls");
  });

  it("a forwarded call names the leader that served it; one served here names this node", async () => {
    await call((md, o, cb) => follower.kv.Put({ key: key("sb"), value: key("1") }, md, o, cb));
    const before = leader.received.length;
    const forwarded = await callServed<{ value: Buffer }>((md, o, cb) =>
      follower.kv.Get({ key: key("sb") }, md, o, cb),
    );
    assert.equal(forwarded.res.value.toString(), "1");
    assert.equal(forwarded.servedBy, "n1");
    assert.equal(leader.received.length, before + 1, "it went on the stream to the leader");
    const local = await callServed((md, o, cb) =>
      follower.kv.Get({ key: key("sb"), consistency: "SERIALIZABLE" }, md, o, cb),
    );
    assert.equal(local.servedBy, "n2");
  });

  it("relays the leader's refusal with its status, details and trailing metadata", async () => {
    await call((md, o, cb) => follower.kv.Put({ key: key("v"), value: key("1") }, md, o, cb));
    const err = await failure(
      call((md, o, cb) =>
        follower.kv.Put(
          { key: key("v"), value: key("2"), expected_version: { term: 999, index: 999 } },
          md,
          o,
          cb,
        ),
      ),
    );
    assert.equal(err.code, status.FAILED_PRECONDITION);
    assert.equal(trailer(err, "cairn-error-code"), "CAIRN_ERR_VERSION_MISMATCH");
    const got = await call<{ value: Buffer }>((md, o, cb) =>
      leader.kv.Get({ key: key("v") }, md, o, cb),
    );
    assert.equal(got.value.toString(), "1", "nothing written");
  });

  it("many calls in flight at once each get their own answer", async () => {
    const puts = Array.from({ length: 64 }, (_, i) =>
      call<PutResponse__Output>((md, o, cb) =>
        follower.kv.Put({ key: key(`k${i}`), value: key(`v${i}`) }, md, o, cb),
      ),
    );
    await Promise.all(puts);
    for (let i = 0; i < 64; i += 9) {
      const got = await call<{ value: Buffer }>((md, o, cb) =>
        leader.kv.Get({ key: key(`k${i}`) }, md, o, cb),
      );
      assert.equal(got.value.toString(), `v${i}`);
    }
  });

  it("marks the call forwarded: a node that refuses it names the leader instead of forwarding; the sender follows the names", async () => {
    // n4 names n3 as leader, n3 names n2, n2 names n1 (the leader): each refuses the call
    // itself (it is marked), and n4 follows the names down to n1, which serves it.
    const n3 = await startNode("n3", new FollowerStore("n2"));
    const n4 = await startNode("n4", new FollowerStore("n3"));
    await call((md, o, cb) => n4.kv.Put({ key: key("b"), value: key("1") }, md, o, cb));
    assert.equal(n3.received.length, 1, "n3 answered itself");
    assert.equal(follower.received.length, 1, "n2 answered itself");
    const atLeader = await call<{ found: boolean; value: Buffer }>((md, o, cb) =>
      leader.kv.Get({ key: key("b") }, md, o, cb),
    );
    assert.equal(atLeader.value.toString(), "1");
  });

  it("answers NOT_LEADER with the hint when the leader's node cannot be reached (nothing sent)", async () => {
    addresses.set("ghost", "127.0.0.1:1");
    const lost = await startNode("n5", new FollowerStore("ghost"));
    const err = await failure(
      call((md, o, cb) => lost.kv.Put({ key: key("g"), value: key("1") }, md, o, cb)),
    );
    assert.equal(err.code, status.UNAVAILABLE);
    assert.equal(trailer(err, "cairn-error-code"), "CAIRN_ERR_NOT_LEADER");
    assert.equal(trailer(err, "cairn-leader"), "ghost");
  });

  it("a leader that never answers: the caller's deadline, then outcome unknown when its stream ends", async () => {
    const mute = await startNode("mute", new FollowerStore("mute"), { serve: false });
    const via = await startNode("n6", new FollowerStore("mute"));
    const t0 = Date.now();
    const late = await failure(
      call((md, o, cb) => via.kv.Put({ key: key("d"), value: key("1") }, md, o, cb), {
        deadline: Date.now() + 300,
      }),
    );
    assert.equal(late.code, status.DEADLINE_EXCEEDED);
    assert.ok(Date.now() - t0 < 2000);
    const call0 = mute.received[0];
    assert.ok(call0 !== undefined && call0.timeoutMs > 0 && call0.timeoutMs <= 300);
    // Another call, then the mute node ends every stream: the call had left, so its outcome is
    // unknown (UNAVAILABLE, not NOT_LEADER, which would tell the client to retry it).
    const pending = failure(
      call((md, o, cb) => via.kv.Put({ key: key("e"), value: key("1") }, md, o, cb), {
        deadline: Date.now() + 30_000,
      }),
    );
    await eventually("the call reached the mute node", () => mute.received.length === 2);
    const cut = Date.now();
    await mute.server.close(0);
    const err = await pending;
    assert.ok(Date.now() - cut < 5000, "failed when the stream ended, not at the deadline");
    assert.equal(err.code, status.UNAVAILABLE);
    assert.notEqual(trailer(err, "cairn-error-code"), "CAIRN_ERR_NOT_LEADER");
    assert.equal(trailer(err, "cairn-leader"), "mute");
  });

  it("serves only the KV methods forward.ts sends", async () => {
    const r = await follower.transport.call(
      "n1",
      "/cairn.v1.Admin/SnapshotShard",
      new Uint8Array(0),
      {
        deadline: deadlineClock() + 5000,
      },
    );
    assert.equal(r.code, status.UNIMPLEMENTED);
    assert.equal(r.sent, true);
    assert.match(r.details, /not a method peers may forward/);
  });

  it("refuses a forwarded call whose request is no message of its method INVALID_ARGUMENT, with its code", async () => {
    // A length that runs past the end: a peer's bytes (a bug, or another build's) no KV request.
    const r = await follower.transport.call(
      "n1",
      "/cairn.v1.KV/Put",
      new Uint8Array([0x0a, 0xff, 0xff]),
      { deadline: deadlineClock() + 5000 },
    );
    assert.equal(r.code, status.INVALID_ARGUMENT, r.details);
    assert.match(r.details, /the request is not a valid \/cairn.v1.KV\/Put message/);
    assert.deepEqual(
      r.trailers.filter(([k]) => k === "cairn-error-code"),
      [["cairn-error-code", "CAIRN_ERR_INVALID_ARGUMENT"]],
    );
  });

  it("a call cancelled by its caller fails CANCELLED at once; the leader's late answer is dropped", async () => {
    const mute = await startNode("mute2", new FollowerStore("mute2"), { serve: false });
    const cut = new CallCut();
    const pending = follower.transport.call("mute2", "/cairn.v1.KV/Put", new Uint8Array(0), {
      deadline: deadlineClock() + 30_000,
      cut,
    });
    await eventually("the call reached mute2", () => mute.received.length === 1);
    cut.cut();
    const r = await pending;
    assert.equal(r.code, status.CANCELLED);
    assert.equal(r.sent, true);
    const id = mute.received[0]?.id ?? 0;
    mute.transport.reply("n2", {
      id,
      code: 0,
      details: "",
      response: new Uint8Array(0),
      trailers: [],
    });
    // Nothing waits for it any more: dropped, and the streams carry on.
    await new Promise((r2) => setTimeout(r2, 50));
    const put = await call<PutResponse__Output>((md, o, cb) =>
      follower.kv.Put({ key: key("after"), value: key("1") }, md, o, cb),
    );
    assert.ok(put.version !== null);
  });
});
