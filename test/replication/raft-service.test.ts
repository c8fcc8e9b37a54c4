/**
 * The peers' service (raft-service.ts) over real sockets: the unary calls a node does not offer,
 * requests it refuses as malformed, a refusal's status and trailers as the calling node sees
 * them, a scan's share end to end, and endAll(). Who may call is in peer-check.test.ts, the
 * Stream in stream-receiver.test.ts and grpc-transport.test.ts, snapshots in
 * grpc-snapshot.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  Client,
  type ClientWritableStream,
  credentials,
  Metadata,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import { RpcServer } from "../../src/api/index.ts";
import { loadRaftProto } from "../../src/api/proto.ts";
import { PEER_KEY } from "../../src/api/wire.ts";
import { ClusterViewPublisher } from "../../src/cluster/index.ts";
import { CairnError } from "../../src/common/errors.ts";
import { CallCut } from "../../src/common/call-cut.ts";
import { deadlineClock } from "../../src/common/deadline-clock.ts";
import { CairnMetrics, createLogger } from "../../src/ops/index.ts";
import { nodeId, NotLeaderError } from "../../src/raft/index.ts";
import { createRaftService, type ScanRequest } from "../../src/replication/index.ts";
import type { RaftService } from "../../src/replication/raft-service.ts";
import { encodeHandshakeFrame } from "../../src/replication/frame-encode.ts";
import { FollowerStore, LIMITS, TOTAL_SHARDS } from "../api/forward-support.ts";
import {
  collectingServer,
  countingServer,
  eventually,
  heartbeat,
  type LogLine,
  N2,
  rawUnary,
  recordingLogger,
  startRaftFrontEnd,
  startRaftServer,
  transportTo,
} from "./peer-support.ts";
import { withTimeout } from "../support/timeout.ts";

describe("createRaftService", () => {
  it("answers UNIMPLEMENTED for a call the node does not serve", async () => {
    const server = await startRaftServer(() => undefined, { clusterId: "c1", nodeId: "n2" });
    const t = transportTo(server.address);
    const scan: ScanRequest = {
      start: new Uint8Array(0),
      end: null,
      limit: 10,
      maxBytes: 1000,
      linearizable: false,
    };
    try {
      for (const [call, what] of [
        [t.proposeMeta(N2, new Uint8Array([1]), 5_000), /takes no meta proposals/],
        [t.readIndex(N2, 1, 5_000), /serves no read index/],
        [t.confirmTerms(N2, [{ shard: 1, term: 1, replica: "n2" }], 5_000), /confirms no terms/],
        [t.scanShards(N2, [1], scan, 5_000), /serves no scans for peers/],
      ] as const) {
        await assert.rejects(call, (err: ServiceError) => {
          assert.equal(err.code, status.UNIMPLEMENTED);
          assert.match(err.details, what);
          return true;
        });
      }
    } finally {
      await t.close();
      server.stop();
    }
  });

  it("refuses malformed term checks and too many read-index shards (INVALID_ARGUMENT)", async () => {
    const server = await countingServer();
    try {
      const uneven = await rawUnary(server.address, "ConfirmTerms", {
        cluster_id: "c1",
        shard_ids: [1, 2],
        terms: [1],
        replicas: ["n2", "n2"],
      });
      assert.equal(uneven?.code, status.INVALID_ARGUMENT);
      assert.match(uneven?.details ?? "", /2 shards, 1 terms, 2 replicas/);
      const many = await rawUnary(server.address, "ReadIndex", {
        cluster_id: "c1",
        shard_ids: Array.from({ length: 65_537 }, (_, i) => i),
      });
      assert.equal(many?.code, status.INVALID_ARGUMENT);
      assert.match(many?.details ?? "", /65537 shards in one ReadIndex call; at most 65536/);
      assert.equal(server.served, 0);
    } finally {
      server.stop();
    }
  });

  it("refuses a scan's share naming more shards than a cluster has, or one shard twice (INVALID_ARGUMENT), before it scans", async () => {
    // An honest asker names each shard it asks of this node once, and a cluster has at most
    // 65,536. A forged call named any number, each opened, pinned at a snapshot and read as a
    // cursor of its own: 1,000,000 copies of shard 1 (~1 MB on the wire) made as many.
    const scanned: number[] = [];
    const server = await countingServer(startRaftServer, {
      scanShards: (shards) => {
        scanned.push(shards.length);
        return Promise.resolve({ items: [], more: false });
      },
    });
    const scan = { cluster_id: "c1", start: Buffer.alloc(0), limit: 10, max_bytes: 1000 };
    try {
      const many = await rawUnary(server.address, "ScanShards", {
        ...scan,
        shard_ids: Array.from({ length: 65_537 }, (_, i) => i),
      });
      assert.equal(many?.code, status.INVALID_ARGUMENT, "65,537 shards scanned");
      assert.match(many?.details ?? "", /65537 shards in one ScanShards call; at most 65536/);
      const twice = await rawUnary(server.address, "ScanShards", {
        ...scan,
        shard_ids: Array.from({ length: 65_536 }, () => 1),
      });
      assert.equal(twice?.code, status.INVALID_ARGUMENT, "65,536 copies of one shard scanned");
      assert.match(twice?.details ?? "", /shard 1 twice in one ScanShards call/);
      const again = await rawUnary(server.address, "ScanShards", { ...scan, shard_ids: [3, 1, 3] });
      assert.match(again?.details ?? "", /shard 3 twice/);
      assert.deepEqual(scanned, []);
      // Every shard of the largest cluster, each once, is a scan.
      const all = await rawUnary(server.address, "ScanShards", {
        ...scan,
        shard_ids: Array.from({ length: 65_536 }, (_, i) => i),
      });
      assert.equal(all, null);
      assert.deepEqual(scanned, [65_536]);
    } finally {
      server.stop();
    }
  });

  it("refuses a meta proposal past 64 KiB INVALID_ARGUMENT, before its JSON is parsed", async () => {
    // A proposal's command is JSON, parsed for any caller (is it a node's own join?) before
    // the caller is checked, on the main thread: 8 MiB of `{},` parsed to +171 MiB of heap in
    // 0.6 s, and the peers' unary calls take 128 MiB (2.7 GB, 10 s). A peer's largest honest
    // command (a join, a move naming 16 nodes) is well under 1 KiB.
    const proposed: number[] = [];
    const server = await startRaftServer(() => undefined, {
      clusterId: "c1",
      nodeId: "n2",
      proposeMeta: (command) => {
        proposed.push(command.length);
        return Promise.resolve();
      },
    });
    const t = transportTo(server.address);
    /** A command of `bytes` bytes: the format's version, then `[{},{},…]`. */
    const command = (bytes: number): Uint8Array => {
      const json = `[${"{},".repeat(Math.floor((bytes - 5) / 3))}{}]`.padEnd(bytes - 1, " ");
      return Buffer.concat([Buffer.from([1]), Buffer.from(json)]);
    };
    try {
      const err = await t.proposeMeta(N2, command(64 * 1024 + 1), 5_000).then(
        () => assert.fail(`proposed: ${proposed}`),
        (e: unknown) => e as ServiceError,
      );
      assert.equal(err.code, status.INVALID_ARGUMENT, err.details);
      assert.match(err.details, /a meta command of 65537 bytes; at most 65536/);
      assert.deepEqual(proposed, []);
      await t.proposeMeta(N2, command(64 * 1024), 5_000);
      assert.deepEqual(proposed, [64 * 1024]);
    } finally {
      await t.close();
      server.stop();
    }
  });

  it("a refusal reaches the calling node with its status, leader hint and error code", async () => {
    const refusals: unknown[] = [
      new NotLeaderError(nodeId("n3")),
      new NotLeaderError(null),
      new CairnError("CAIRN_ERR_SHUTTING_DOWN", "stopping", { retryable: true }),
      new CairnError("CAIRN_ERR_LOST_STATE", "retired incarnation"),
      new Error("a bug"),
      new CairnError("CAIRN_ERR_INVALID_ARGUMENT", "peers may not propose bootstrap"),
    ];
    const server = await startRaftServer(() => undefined, {
      clusterId: "c1",
      nodeId: "n2",
      proposeMeta: (command) => Promise.reject(refusals[command[0] ?? 0] as Error),
    });
    const t = transportTo(server.address);
    const refusal = async (i: number): Promise<ServiceError> => {
      try {
        await t.proposeMeta(N2, new Uint8Array([i]), 5_000);
      } catch (err) {
        return err as ServiceError;
      }
      return assert.fail("not refused");
    };
    try {
      const expected = [
        [status.UNAVAILABLE, "n3", undefined],
        [status.UNAVAILABLE, undefined, undefined],
        [status.UNAVAILABLE, undefined, "CAIRN_ERR_SHUTTING_DOWN"],
        [status.INTERNAL, undefined, "CAIRN_ERR_LOST_STATE"],
        [status.INTERNAL, undefined, undefined],
        [status.INVALID_ARGUMENT, undefined, "CAIRN_ERR_INVALID_ARGUMENT"],
      ] as const;
      for (const [i, [code, leader, errorCode]] of expected.entries()) {
        const err = await refusal(i);
        assert.equal(err.code, code, `refusal ${i}`);
        assert.equal(err.details, (refusals[i] as Error).message);
        assert.equal(err.metadata.get("cairn-leader")[0], leader, `refusal ${i}'s leader`);
        assert.equal(err.metadata.get("cairn-error-code")[0], errorCode, `refusal ${i}'s code`);
      }
    } finally {
      await t.close();
      server.stop();
    }
  });

  it("carries a scan's share both ways: the range, its open end, the bounds, each version and whether it was cut", async () => {
    const asked: [readonly number[], ScanRequest][] = [];
    /** What was left of each call's deadline as it arrived (the asker's, 5 s). */
    const left: number[] = [];
    // Behind the front end, as a node serves it: its calls' deadlines are on deadlineClock().
    const server = await startRaftFrontEnd(() => undefined, {
      clusterId: "c1",
      nodeId: "n2",
      scanShards: (shards, req, deadline) => {
        asked.push([shards, req]);
        left.push(deadline - deadlineClock());
        return Promise.resolve({
          items: [
            {
              key: Buffer.from("a"),
              value: Buffer.from("1"),
              version: { index: 2 ** 40, term: 3 },
            },
            { key: Buffer.from("b"), value: Buffer.alloc(0), version: { index: 5, term: 1 } },
          ],
          more: asked.length === 1,
        });
      },
    });
    const t = transportTo(server.address);
    try {
      const open: ScanRequest = {
        start: Buffer.from("a"),
        end: null,
        limit: 7,
        maxBytes: 1000,
        linearizable: true,
      };
      const { items, more } = await t.scanShards(N2, [4, 9], open, 5_000);
      assert.equal(more, true, "the page was cut");
      assert.deepEqual(
        items.map((i) => [
          Buffer.from(i.key).toString(),
          Buffer.from(i.value).toString(),
          i.version,
        ]),
        [
          ["a", "1", { index: 2 ** 40, term: 3 }],
          ["b", "", { index: 5, term: 1 }],
        ],
      );
      const closed = {
        start: Buffer.from("a"),
        end: Buffer.alloc(0),
        limit: 3,
        maxBytes: 2 ** 40,
        linearizable: false,
      };
      assert.equal((await t.scanShards(N2, [4], closed, 5_000)).more, false);
      // As an earlier build asks (no max_bytes): cut at the limit only, as its replies were.
      await t.scanShards(N2, [5], { ...closed, maxBytes: 0 }, 5_000);
      assert.deepEqual(
        asked.map(([shards, req]) => [
          shards,
          req.end === null ? null : req.end.length,
          req.limit,
          req.maxBytes,
        ]),
        [
          [[4, 9], null, 7, 1000],
          [[4], 0, 3, 16 * 1024 * 1024],
          [[5], 0, 3, 16 * 1024 * 1024],
        ],
        "an empty end is not an open end; a reply fits the peers' message limit",
      );
      assert.equal(asked[0]?.[1].linearizable, true);
      // Its read barriers stop waiting at the call's deadline (MultiRaft.scanShards).
      for (const ms of left) assert.ok(ms > 0 && ms <= 5_000, `the call's deadline: ${ms} ms left`);
    } finally {
      await t.close();
      server.stop();
    }
  });

  it("a scan's share asked by count only (an earlier build, or a forged call) is bounded in bytes, and refused where the bound cuts it", async () => {
    // 300 values of 100 KiB: 30 MiB, under the peers' message limit, over the reply's bound. An
    // asker without max_bytes got its whole limit whatever its size (any limit a caller sends:
    // the store's whole range held in memory for one call); cut by bytes instead, it would read
    // the short page as the range's end (it reads no `more`).
    const value = Buffer.alloc(100 * 1024, 7);
    const asked: number[] = [];
    const server = await startRaftFrontEnd(() => undefined, {
      clusterId: "c1",
      nodeId: "n2",
      scanShards: (_shards, req) => {
        asked.push(req.maxBytes);
        const fit = Math.min(req.limit, 300, Math.floor(req.maxBytes / value.length));
        return Promise.resolve({
          items: Array.from({ length: fit }, (_, i) => ({
            key: Buffer.from(`k${String(i).padStart(4, "0")}`),
            value,
            version: { index: i + 1, term: 1 },
          })),
          more: fit < 300,
        });
      },
    });
    const t = transportTo(server.address);
    try {
      const req: ScanRequest = {
        start: Buffer.alloc(0),
        end: null,
        limit: 1000,
        maxBytes: 0,
        linearizable: false,
      };
      const err = await t.scanShards(N2, [4], req, 5_000).then(
        () => assert.fail("a page cut by bytes answered to a count-only asker"),
        (e: unknown) => e as ServiceError,
      );
      assert.equal(err.code, status.RESOURCE_EXHAUSTED, err.details);
      assert.match(err.details, /asked by count only .* more than 16 MiB/);
      assert.deepEqual(asked, [16 * 1024 * 1024]);
      // A page its limit ends before the bound is answered as before.
      const { items } = await t.scanShards(N2, [4], { ...req, limit: 30 }, 5_000);
      assert.equal(items.length, 30);
    } finally {
      await t.close();
      server.stop();
    }
  });

  it("a scan's share whose asker cuts the call is cancelled on the peer, whose wait stops then", async () => {
    // The asking scan's client cancelled: the peer's read barriers went on waiting (and holding
    // its share of limits.max_pending_bytes) until the call's deadline, here 5 s.
    let arrived = (): void => {};
    let stopped = (): void => {};
    const reached = new Promise<void>((resolve) => (arrived = resolve));
    const ended = new Promise<void>((resolve) => (stopped = resolve));
    const server = await startRaftFrontEnd(() => undefined, {
      clusterId: "c1",
      nodeId: "n2",
      // Waits as a barrier whose read index never comes, until its asker's call ends.
      scanShards: (_shards, _req, _deadline, call) =>
        new Promise((_, reject) => {
          arrived();
          call.once("cancelled", () => {
            stopped();
            reject(new Error("cancelled"));
          });
        }),
    });
    const t = transportTo(server.address);
    try {
      const req = { start: Buffer.from("a"), end: null, limit: 7, maxBytes: 1000 };
      const cut = new CallCut();
      const share = t.scanShards(N2, [4], { ...req, linearizable: true }, 5_000, cut);
      const failed = assert.rejects(share, { code: status.CANCELLED });
      await withTimeout(reached, 2_000, "the share to reach the peer");
      cut.cut();
      await failed;
      await withTimeout(ended, 2_000, "the peer's wait to stop");
    } finally {
      await t.close();
      server.stop();
    }
  });

  it("endAll() ends the open streams: their senders see the stream lost and back off", async () => {
    const server = await collectingServer();
    const lines: LogLine[] = [];
    const t = transportTo(server.address, {
      logger: recordingLogger(lines),
      initialBackoffMs: 10_000,
    });
    try {
      t.send(N2, [heartbeat()]);
      await eventually("connected", () => t.stats()["n2"]?.state === "connected");
      server.service.endAll();
      await eventually("the stream lost", () => t.stats()["n2"]?.state === "backoff");
      const lost = lines.find((l) => l.message === "raft peer stream lost");
      assert.equal(lost?.level, "warn");
      assert.equal(lost?.fields["code"], "UNAVAILABLE");
      assert.equal(lost?.fields["details"], "the node is shutting down");
      assert.equal(server.got.length, 1);
    } finally {
      await t.close();
      server.stop();
    }
  });
});

/**
 * A call of the peers' service made with a raw grpc-js client as node n1 would make it, each
 * message `message` as it is (no encoding): resolves with the call's error, null when it
 * succeeded. A client-streaming call (`stream`) sends it as its one message, then half-closes.
 */
function rawPeerCall(
  address: string,
  method: "ReadIndex" | "ConfirmTerms" | "InstallSnapshot" | "Stream",
  message: Buffer | readonly Buffer[],
  peer = "n1",
): Promise<ServiceError | null> {
  const path = loadRaftProto().cairn.v1.Raft.service[method].path;
  const client = new Client(address, credentials.createInsecure());
  const metadata = new Metadata();
  metadata.set(PEER_KEY, peer);
  const bytes = (b: Buffer): Buffer => b;
  return new Promise<ServiceError | null>((resolve) => {
    const done = (err: ServiceError | null): void => {
      client.close();
      resolve(err);
    };
    if (method === "ReadIndex" || method === "ConfirmTerms") {
      client.makeUnaryRequest(path, bytes, bytes, message as Buffer, metadata, done);
      return;
    }
    const call = client.makeClientStreamRequest(path, bytes, bytes, metadata, {}, done);
    for (const m of Buffer.isBuffer(message) ? [message] : message) call.write(m);
    call.end();
  });
}

/** A protobuf varint. */
function varint(v: number): number[] {
  const out: number[] = [];
  for (; v > 127; v = Math.floor(v / 128)) out.push((v % 128) | 128);
  out.push(v);
  return out;
}

/** A Stream's batch frame (RaftFrame.batch) holding `items`, each a RaftBatch item's bytes. */
function batchFrame(items: readonly Uint8Array[]): Buffer {
  // messages = 1
  const body = Buffer.concat(items.flatMap((i) => [Buffer.from([0x0a, ...varint(i.length)]), i]));
  return Buffer.concat([Buffer.from([0x12, ...varint(body.length)]), body]); // batch = 2
}

/** A batch item for shard 1 (shard_id = 1) holding `message`'s bytes (message = 2). */
function item(message: Uint8Array): Uint8Array {
  return Buffer.concat([Buffer.from([0x08, 1, 0x12, ...varint(message.length)]), message]);
}

/** Node n2's RpcServer on 127.0.0.1 (port 0) serving the peers' service `raft`. */
function peerServer(
  raft: RaftService,
  logger = createLogger({ level: "error", sink: { write: () => undefined } }),
): RpcServer {
  return new RpcServer({
    address: "127.0.0.1:0",
    nodeId: "n2",
    store: new FollowerStore("n2"),
    metrics: new CairnMetrics({ nodeId: "n2" }),
    views: new ClusterViewPublisher(TOTAL_SHARDS),
    logger,
    limits: LIMITS,
    maxMessageBytes: 4 * 1024 * 1024,
    raft,
  });
}

describe("the peers' service as a node serves it (RpcServer)", () => {
  it("refuses a unary peer call holding more than 2^18 values of repeated fields INVALID_ARGUMENT, before it is decoded", async () => {
    // protobufjs decodes a packed uint64 of one byte to ~86 bytes of heap, one at a time on the
    // main thread, before the handler checks who called or how many: anyone who reaches the
    // port (no cluster id needed) sent a ConfirmTerms of 8 MiB of terms for +726 MiB and 3 s,
    // and the peers' unary calls take 128 MiB. An honest call holds at most 3 values a shard
    // (ConfirmTerms: shard, term, replica; 65,536 shards at most).
    const decoded: number[] = [];
    const raft = createRaftService(() => undefined, { clusterId: "c1", nodeId: "n2" });
    const confirm = raft.implementation.ConfirmTerms;
    const server = peerServer({
      ...raft,
      implementation: {
        ...raft.implementation,
        ConfirmTerms: (call, callback) => {
          decoded.push(call.request.terms.length);
          confirm.call(raft.implementation, call, callback);
        },
      },
    });
    const address = `127.0.0.1:${(await server.start()).port}`;
    /** A ConfirmTermsRequest whose terms (field 3, packed) are `n` ones. */
    const terms = (n: number): Buffer =>
      Buffer.concat([Buffer.from([0x1a, ...varint(n)]), Buffer.alloc(n, 1)]);
    try {
      const many = await rawPeerCall(address, "ConfirmTerms", terms(2 ** 18 + 1));
      assert.equal(many?.code, status.INVALID_ARGUMENT, `decoded: ${decoded}`);
      assert.match(many.details, /more than 262144 values of repeated fields/);
      assert.equal(many.metadata.get("cairn-error-code")[0], "CAIRN_ERR_INVALID_ARGUMENT");
      assert.deepEqual(decoded, []);
      // As many as the largest cluster's honest call holds are decoded (and refused by the
      // handler: no cluster id, no shards).
      await rawPeerCall(address, "ConfirmTerms", terms(2 ** 18));
      assert.deepEqual(decoded, [2 ** 18]);
    } finally {
      await server.close(1000);
    }
  });

  it("keeps one accepted Stream per sender, and at most 64 from senders the meta state does not record: the older ones end", async () => {
    // Once its handshake is taken a Stream counts against none of the clients' bounds (it is a
    // peer's), and a node takes the handshake of a node its meta state does not record when it
    // names the cluster's id (which Meta.WatchCluster gives anyone). One connection held 1,000
    // such streams, each under a made-up node id, and every connection as many.
    const server = peerServer(
      createRaftService(() => undefined, {
        clusterId: "c1",
        nodeId: "n2",
        membership: (node) => (node === "n1" ? "member" : "unknown"),
      }),
    );
    const address = `127.0.0.1:${(await server.start()).port}`;
    const client = new Client(address, credentials.createInsecure());
    const path = loadRaftProto().cairn.v1.Raft.service.Stream.path;
    const bytes = (b: Buffer): Buffer => b;
    const ended = new Map<string, number>();
    const calls: ClientWritableStream<Buffer>[] = [];
    /** Opens a Stream as node `from` and resolves once its handshake is taken. */
    const open = (from: string, key: string): Promise<void> => {
      const metadata = new Metadata();
      metadata.set(PEER_KEY, from);
      const call = client.makeClientStreamRequest(path, bytes, bytes, metadata, {}, (err) =>
        ended.set(key, err?.code ?? status.OK),
      );
      calls.push(call);
      const accepted = new Promise<void>((resolve) => call.once("metadata", () => resolve()));
      call.write(
        encodeHandshakeFrame({
          cluster_id: "c1",
          from_node_id: from,
          to_node_id: "n2",
          from_replica_id: "",
        }),
      );
      return withTimeout(accepted, 10_000, `${key} accepted`);
    };
    try {
      for (let i = 0; i < 3; i++) await open("n1", `n1#${i}`);
      for (let i = 0; i < 200; i++) await open(`stranger-${i}`, `stranger-${i}`);
      await eventually("the older streams ended", () => ended.size >= 2 + 200 - 64);
      assert.deepEqual(
        [...ended.keys()].filter((k) => k.startsWith("n1")),
        ["n1#0", "n1#1"],
        "a member's older streams ended, its latest open",
      );
      const strangers = [...ended.keys()].filter((k) => k.startsWith("stranger"));
      assert.equal(strangers.length, 200 - 64, `${strangers.length} ended`);
      assert.deepEqual(
        strangers,
        Array.from({ length: 136 }, (_, i) => `stranger-${i}`),
      );
    } finally {
      for (const c of calls) c.cancel();
      client.close();
      await server.close(1000);
    }
  });

  it("refuses a batch that decodes to more than 2^20 messages and entries INVALID_ARGUMENT, before any reaches the groups", async () => {
    // Decoded objects cost far more than their bytes: an empty entry is two bytes on the wire
    // (its tag and a zero length) and ~170 bytes of heap (an Entry and its data's view), a
    // heartbeat six bytes and ~140. A caller posing as a member (handshake.ts takes one that
    // names the cluster's id, which Meta.WatchCluster gives anyone) sent one frame of 8 MiB of
    // empty entries: 4 million of them, +700 MiB of heap and 1.6 s of the main thread; a 64 MiB
    // one (the peers' limit is 128 MiB) was past V8's heap limit, and the node died.
    const got: number[] = [];
    const server = peerServer(
      createRaftService(
        (_from, messages) => {
          let n = messages.length;
          for (const m of messages) if (m.message.type === "append") n += m.message.entries.length;
          got.push(n);
        },
        { clusterId: "c1", nodeId: "n2" },
      ),
    );
    const address = `127.0.0.1:${(await server.start()).port}`;
    const hs = encodeHandshakeFrame({
      cluster_id: "c1",
      from_node_id: "n1",
      to_node_id: "n2",
      from_replica_id: "",
    });
    const many = 2 ** 20;
    try {
      // One append (type = 1) and 2^20 empty entries (entries = 5): 2 MiB.
      const append = new Uint8Array(2 + 2 * many);
      append.set([0x08, 1]);
      for (let i = 0; i < many; i++) append[2 + 2 * i] = 0x2a;
      const entries = await rawPeerCall(address, "Stream", [hs, batchFrame([item(append)])]);
      assert.equal(entries?.code, status.INVALID_ARGUMENT, `2^20 + 1 items decoded: ${got}`);
      assert.match(
        entries.details,
        /more than 1048576 messages, entries, members or trailers in one frame/,
      );
      // 2^20 + 1 heartbeats (type = 7): 10 MiB.
      const heartbeat = item(Uint8Array.from([0x08, 7]));
      const beats = await rawPeerCall(address, "Stream", [
        hs,
        batchFrame(Array.from({ length: many + 1 }, () => heartbeat)),
      ]);
      assert.equal(beats?.code, status.INVALID_ARGUMENT, `2^20 + 1 heartbeats decoded: ${got}`);
      assert.deepEqual(got, []);
      // 2^20 in all is a batch.
      const fits = await rawPeerCall(address, "Stream", [
        hs,
        batchFrame([item(append.subarray(0, 2 * many))]),
      ]);
      assert.equal(fits, null);
      assert.deepEqual(got, [many]);
    } finally {
      await server.close(1000);
    }
  });

  it("refuses a peer's request whose bytes are no message of its type INVALID_ARGUMENT, CAIRN_ERR_INVALID_ARGUMENT, whichever call brings it, and logs no ERROR for it", async () => {
    const lines: { level: string; message: string }[] = [];
    const logger = createLogger({
      level: "debug",
      sink: { write: (line: string) => lines.push(JSON.parse(line) as (typeof lines)[number]) },
    });
    const server = peerServer(
      createRaftService(() => undefined, {
        clusterId: "c1",
        nodeId: "n2",
        readIndex: () => Promise.resolve(1),
        logger: logger.child("peers"),
      }),
      logger,
    );
    const address = `127.0.0.1:${(await server.start()).port}`;
    try {
      // A length-delimited field 1 whose length runs past the end: no message of any type.
      const garbage = Buffer.from([0x0a, 0xff, 0xff]);
      for (const method of ["ReadIndex", "InstallSnapshot", "Stream"] as const) {
        for (let i = 0; i < 3; i++) {
          const err = await rawPeerCall(address, method, garbage);
          assert.equal(err?.code, status.INVALID_ARGUMENT, `${method}: ${err?.details}`);
          assert.equal(
            err.metadata.get("cairn-error-code")[0],
            "CAIRN_ERR_INVALID_ARGUMENT",
            `${method}'s code`,
          );
        }
      }
      const errors = lines.filter((l) => l.level === "ERROR");
      assert.deepEqual(errors, [], "no ERROR line for a peer's malformed request");
    } finally {
      await server.close(1000);
    }
  });

  it("bounds the refusals' WARN lines, 10 of each message and code every 10 s, the next saying how many were left out; every refusal counted", async () => {
    const lines: LogLine[] = [];
    const refused: string[] = [];
    let failedReceives = 0;
    let time = 0;
    const server = peerServer(
      createRaftService(() => undefined, {
        clusterId: "c1",
        nodeId: "n2",
        readIndex: () => Promise.resolve(1),
        membership: (node) => (node === "n9" ? "removed" : "member"),
        refused: (kind) => refused.push(kind),
        metrics: {
          sent: () => undefined,
          bytesSent: () => undefined,
          received: () => undefined,
          failed: (direction) => {
            if (direction === "receive") failedReceives++;
          },
        },
        logger: recordingLogger(lines),
        refusalLog: { now: () => time },
      }),
      createLogger({ sink: { write: () => undefined } }),
    );
    const address = `127.0.0.1:${(await server.start()).port}`;
    // Node n9, removed for good, calling each way it can: every call is refused.
    const identity = {
      cluster_id: "c1",
      from_node_id: "n9",
      to_node_id: "n2",
      from_replica_id: "",
    };
    const raft = loadRaftProto().cairn.v1.Raft.service;
    const calls = [
      [
        "ReadIndex",
        "raft call refused",
        Buffer.from(raft.ReadIndex.requestSerialize({ cluster_id: "c1", shard_ids: [1] })),
      ],
      ["Stream", "raft stream refused", encodeHandshakeFrame(identity)],
      [
        "InstallSnapshot",
        "raft snapshot refused",
        Buffer.from(
          raft.InstallSnapshot.requestSerialize({
            header: { handshake: identity, shard_id: 1, total_bytes: 1 },
          }),
        ),
      ],
    ] as const;
    const logged = (message: string, code: string): LogLine[] =>
      lines.filter((l) => l.message === message && l.fields["code"] === code);
    try {
      const FLOOD = 25;
      for (let i = 0; i < FLOOD; i++) {
        for (const [method, , bytes] of calls) {
          const err = await rawPeerCall(address, method, bytes, "n9");
          assert.equal(err?.code, status.PERMISSION_DENIED, `${method}: ${err?.details}`);
        }
      }
      assert.equal(refused.length, 3 * FLOOD, "every refusal counted");
      assert.ok(refused.every((kind) => kind === "not_member"));
      assert.equal(failedReceives, FLOOD);
      for (const [method, message] of calls) {
        const written = logged(message, "PERMISSION_DENIED");
        assert.equal(written.length, 10, `${method}: ${written.length} lines`);
        assert.ok(written.every((l) => l.level === "warn" && !("not_logged_before" in l.fields)));
      }
      // Another code of the same message has a window of its own: a malformed frame.
      const garbage = Buffer.from([0x0a, 0xff, 0xff]);
      assert.equal((await rawPeerCall(address, "Stream", garbage))?.code, status.INVALID_ARGUMENT);
      assert.equal(logged("raft stream refused", "INVALID_ARGUMENT").length, 1);

      // A window later, the next line of each says how many were left out.
      time += 10_000;
      for (const [method, message, bytes] of calls) {
        await rawPeerCall(address, method, bytes, "n9");
        const written = logged(message, "PERMISSION_DENIED");
        assert.equal(written.length, 11, method);
        assert.equal(written[10]?.fields["not_logged_before"], FLOOD - 10, method);
      }
    } finally {
      await server.close(1000);
    }
  });
});
