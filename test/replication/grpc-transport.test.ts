/**
 * GrpcTransport and the cairn.v1.Raft service over real sockets (127.0.0.1, port 0): delivery in
 * order, the handshake's refusals, drops while a peer is down and the reconnection after, the
 * per-peer budget, and close().
 */
import assert from "node:assert/strict";
import { connect, createServer, type Socket } from "node:net";
import { describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import {
  logIndex,
  type Message,
  nodeId,
  type NodeId,
  NotLeaderError,
  term,
} from "../../src/raft/index.ts";
import { GrpcTransport, type ShardMessage } from "../../src/replication/index.ts";
import {
  collectingServer,
  eventually,
  freePort,
  type LogLine,
  N1,
  N2,
  RAFT_SERVERS,
  type RaftServer,
  recordingLogger,
  transportTo,
} from "./peer-support.ts";
import { deadlineClock } from "../../src/common/deadline-clock.ts";

function heartbeat(seq: number, to: NodeId = N2): ShardMessage {
  const message: Message = {
    type: "heartbeat",
    from: N1,
    to,
    term: term(1),
    commit: logIndex(seq),
    readSeq: seq,
    quiesce: false,
    noReply: false,
  };
  return { shard: seq % 4, message };
}

function append(shard: number, bytes: number, to: NodeId = N2): ShardMessage {
  return {
    shard,
    message: {
      type: "append",
      from: N1,
      to,
      term: term(1),
      prevIndex: logIndex(0),
      prevTerm: term(0),
      entries: [{ term: term(1), index: logIndex(1), type: "normal", data: new Uint8Array(bytes) }],
      commit: logIndex(0),
      noReply: false,
    },
  };
}

interface Relay {
  readonly address: string;
  /** The connections open through it now. */
  readonly open: number;
  close(): void;
}

/** A TCP relay to `target` (host:port) on 127.0.0.1: the sockets a peer sees of n1's. */
async function relay(target: string): Promise<Relay> {
  const [host, port] = target.split(":");
  const sockets = new Set<Socket>();
  const server = createServer((downstream) => {
    const upstream = connect(Number(port), host);
    sockets.add(downstream);
    const end = (): void => {
      sockets.delete(downstream);
      downstream.destroy();
      upstream.destroy();
    };
    for (const s of [downstream, upstream]) {
      s.on("error", end);
      s.on("close", end);
    }
    downstream.pipe(upstream);
    upstream.pipe(downstream);
  });
  await new Promise<void>((resolve) => server.listen(0, "127.0.0.1", resolve));
  const address = server.address();
  assert.ok(address !== null && typeof address === "object");
  return {
    address: `127.0.0.1:${address.port}`,
    get open() {
      return sockets.size;
    },
    close() {
      for (const s of sockets) s.destroy();
      server.close();
    },
  };
}

for (const [receiver, startRaftServer] of RAFT_SERVERS) {
  describe(`GrpcTransport (receiver: ${receiver})`, () => {
    it("delivers each send as one frame, in order, with the sender's node id", async () => {
      const got: [string, ShardMessage[]][] = [];
      const server = await startRaftServer((from, messages) => got.push([from, messages]), {
        clusterId: "c1",
        nodeId: "n2",
      });
      const lines: LogLine[] = [];
      const t = new GrpcTransport({
        clusterId: "c1",
        nodeId: "n1",
        peers: (id) => (id === "n2" ? server.address : null),
        logger: recordingLogger(lines),
      });
      try {
        for (let i = 1; i <= 50; i++) t.send(N2, [heartbeat(i), heartbeat(i + 1000)]);
        await eventually("50 frames delivered", () => got.length === 50);
        got.forEach(([from, messages], i) => {
          assert.equal(from, "n1");
          assert.deepEqual(messages, [heartbeat(i + 1), heartbeat(i + 1001)]);
        });
        // The acceptance (response headers) may reach the sender after the frames reach the peer.
        await eventually("the stream accepted", () => t.stats()["n2"]?.state === "connected");
        const stats = t.stats()["n2"];
        assert.equal(stats?.framesSent, 51, "the handshake and 50 frames");
        assert.equal(stats?.framesDropped, 0);
        assert.equal(stats?.streamsOpened, 1);
        assert.ok(lines.some((l) => l.level === "info" && l.message === "raft peer connected"));
      } finally {
        await t.close();
        server.stop();
      }
    });

    for (const [what, clusterId, to] of [
      ["a wrong cluster id", "other-cluster", "n2"],
      ["a stream addressed to another node", "c1", "n3"],
    ] as const) {
      it(`refuses ${what} with FAILED_PRECONDITION, logged by the sender`, async () => {
        let delivered = 0;
        const serverLines: LogLine[] = [];
        const server = await startRaftServer(() => delivered++, {
          clusterId: "c1",
          nodeId: "n2",
          logger: recordingLogger(serverLines),
        });
        const lines: LogLine[] = [];
        const unreachable: string[] = [];
        const t = new GrpcTransport({
          clusterId,
          nodeId: "n1",
          // The sender believes n3 lives at n2's address.
          peers: () => server.address,
          logger: recordingLogger(lines),
          onUnreachable: (peer) => unreachable.push(peer),
          // A backoff the test's steps cannot outlast on a loaded machine: at the default (25 to
          // 50 ms after a refusal) the second send below could come after it and be queued.
          initialBackoffMs: 60_000,
          maxBackoffMs: 60_000,
        });
        const dest = nodeId(to);
        try {
          t.send(dest, [heartbeat(1, dest)]);
          await eventually("the refusal", () =>
            lines.some((l) => l.message === "raft peer refused the stream"),
          );
          const refusal = lines.find((l) => l.message === "raft peer refused the stream");
          assert.equal(refusal?.level, "warn");
          assert.equal(refusal?.fields["code"], "FAILED_PRECONDITION");
          assert.match(String(refusal?.fields["details"]), /mismatch/);
          assert.ok(serverLines.some((l) => l.message === "raft stream refused"));
          await eventually("the peer reported unreachable", () => unreachable.includes(to));
          // While backing off, frames are dropped, not queued.
          t.send(dest, [heartbeat(2, dest)]);
          const stats = t.stats()[to];
          assert.ok((stats?.framesDropped ?? 0) >= 1);
          assert.equal(stats?.state, "backoff");
          assert.equal(delivered, 0);
          assert.ok(!lines.some((l) => l.message === "raft peer connected"));
        } finally {
          await t.close();
          server.stop();
        }
      });
    }

    it("accepts an end that does not know its cluster id yet; the id is read as it is now", async () => {
      const got: ShardMessage[][] = [];
      let serverId = "";
      const server = await startRaftServer((_from, messages) => got.push(messages), {
        clusterId: () => serverId,
        nodeId: "n2",
      });
      // A node before the meta group's bootstrap reached it talks to one that knows the id, and
      // the other way round; once both know it, they must agree.
      const fresh = new GrpcTransport({ clusterId: "", nodeId: "n1", peers: () => server.address });
      try {
        serverId = "c1";
        fresh.send(N2, [heartbeat(1)]);
        await eventually("delivered from a node without an id", () => got.length === 1);
      } finally {
        await fresh.close();
      }
      const other = new GrpcTransport({
        clusterId: () => "c2",
        nodeId: "n1",
        peers: () => server.address,
      });
      try {
        other.send(N2, [heartbeat(2)]);
        await eventually("refused", () => other.stats()["n2"]?.state === "backoff");
        assert.equal(got.length, 1);
      } finally {
        await other.close();
        server.stop();
      }
    });

    it("drops frames while the peer is down, reports it unreachable, and reconnects after", async () => {
      const port = await freePort();
      const unreachable: string[] = [];
      const got: ShardMessage[][] = [];
      const t = new GrpcTransport({
        clusterId: "c1",
        nodeId: "n1",
        peers: () => `127.0.0.1:${port}`,
        onUnreachable: (peer) => unreachable.push(peer),
        // Long enough that the frame sent right after the failure meets the backoff even on a
        // loaded machine (at 10 ms the server's start could outlast it: nothing was dropped).
        initialBackoffMs: 500,
        maxBackoffMs: 1_000,
      });
      let server: RaftServer | null = null;
      try {
        t.send(N2, [heartbeat(1)]);
        await eventually("the peer reported unreachable", () => unreachable.length > 0);
        assert.equal(t.stats()["n2"]?.streamFailures, 1);
        // While the transport backs off, a frame is dropped, not queued.
        t.send(N2, [heartbeat(2)]);
        assert.equal(t.stats()["n2"]?.framesDropped, 1);
        server = await startRaftServer(
          (_from, messages) => got.push(messages),
          { clusterId: "c1", nodeId: "n2" },
          `127.0.0.1:${port}`,
        );
        // Raft keeps sending (heartbeats); one of them gets through once the stream reopens.
        let n = 3;
        await eventually("a frame delivered after the peer came up", () => {
          t.send(N2, [heartbeat(n++)]);
          return got.length > 0;
        });
        // The frames can arrive before the handshake's answer (response headers) is back.
        await eventually("the stream accepted", () => t.stats()["n2"]?.state === "connected");

        // The peer goes away again: its stream fails, and the next frames are dropped.
        const before = unreachable.length;
        server.stop();
        server = null;
        await eventually("the lost stream reported", () => unreachable.length > before);
        t.send(N2, [heartbeat(n++)]);
        assert.notEqual(t.stats()["n2"]?.state, "connected");
      } finally {
        await t.close();
        server?.stop();
      }
    });

    it("tells the sender of a frame whether it left the node or was dropped", async () => {
      const server = await startRaftServer(() => undefined, { clusterId: "c1", nodeId: "n2" });
      const t = new GrpcTransport({
        clusterId: "c1",
        nodeId: "n1",
        peers: (peer) => (peer === "n2" ? server.address : null),
        initialBackoffMs: 10,
        maxBackoffMs: 50,
      });
      try {
        const outcomes: [string, boolean][] = [];
        t.send(N2, [heartbeat(1)], (delivered) => outcomes.push(["n2", delivered]));
        t.send(nodeId("n3"), [heartbeat(2, nodeId("n3"))], (delivered) =>
          outcomes.push(["n3", delivered]),
        );
        assert.deepEqual(outcomes, [], "never answered from inside send()");
        await eventually("both outcomes", () => outcomes.length === 2);
        assert.deepEqual(
          new Map(outcomes),
          new Map([
            ["n2", true],
            ["n3", false],
          ]),
        );
      } finally {
        await t.close();
        server.stop();
      }
    });

    it("bounds the bytes in flight per peer: frames past the budget are dropped and counted", async () => {
      const server = await collectingServer(startRaftServer);
      const unreachable: string[] = [];
      const t = transportTo(server.address, {
        maxInFlightBytesPerPeer: 250_000,
        onUnreachable: (peer) => unreachable.push(peer),
      });
      try {
        // Synchronous sends: no write can complete in between, so all of them count as in flight.
        // A frame larger than the whole budget still goes when nothing else is in flight.
        t.send(N2, [append(0, 100)]);
        await eventually("the first frame delivered", () => server.got.length === 1);
        await eventually("nothing in flight", () => t.stats()["n2"]?.inFlightBytes === 0);
        t.send(N2, [append(1, 400_000)]);
        for (let i = 0; i < 5; i++) t.send(N2, [append(2, 100_000)]);
        const stats = t.stats()["n2"];
        assert.equal(stats?.framesDropped, 5, "nothing fits beside the 400 kB frame");
        assert.ok((stats?.bytesDropped ?? 0) > 500_000);
        await eventually("the admitted frames delivered", () => server.got.length === 2);
        await eventually("in-flight bytes released", () => t.stats()["n2"]?.inFlightBytes === 0);
        for (let i = 0; i < 5; i++) t.send(N2, [append(3, 100_000)]);
        assert.equal(t.stats()["n2"]?.framesDropped, 5 + 3, "two fit in 250 kB, three do not");
        await eventually("the budget's frames delivered", () => server.got.length === 4);
        await eventually("drops reported as unreachable", () => unreachable.includes("n2"));
      } finally {
        await t.close();
        server.stop();
      }
    });

    it("sends a round past the frame's size limit in several frames, in order, and hears it delivered", async () => {
      // Sent whole, such a round was dropped whatever its size: a node back after ~600 MB of
      // writes over 192 shards saw its leaders build rounds of 300–460 MB for it and drop them,
      // round after round, until their groups' probes fell in different rounds.
      const server = await collectingServer(startRaftServer);
      const t = transportTo(server.address, { maxFrameBytes: 300_000 });
      try {
        const round = [...Array.from({ length: 6 }, (_, i) => append(i, 100_000)), heartbeat(7)];
        const delivered = new Promise<boolean>((resolve) => t.send(N2, round, resolve));
        assert.equal(await delivered, true, "the round was handed over whole");
        await eventually("every message received", () => server.got.flat().length === 7);
        assert.deepEqual(server.got.flat(), round, "in the round's order");
        assert.ok(server.got.length >= 3, `${server.got.length} frames: 2 appends at most each`);
        assert.equal(t.stats()["n2"]?.framesDropped, 0);
      } finally {
        await t.close();
        server.stop();
      }
    });

    it("sends a round past the frame's item limit in several frames, each within it", async () => {
      // Two appends of 2^19 small entries each and a heartbeat: 2^20 + 3 items, which a peer
      // refuses in one frame (MAX_FRAME_ITEMS); each append alone is within it.
      const server = await collectingServer(startRaftServer);
      const t = transportTo(server.address);
      try {
        const big = (shard: number): ShardMessage => {
          const m = append(shard, 0).message as Extract<Message, { type: "append" }>;
          const entries = Array.from({ length: 2 ** 19 }, (_, i) => ({
            term: term(1),
            index: logIndex(i + 1),
            type: "normal" as const,
            data: new Uint8Array(1),
          }));
          return { shard, message: { ...m, entries } };
        };
        const delivered = new Promise<boolean>((resolve) =>
          t.send(N2, [big(1), big(2), heartbeat(3)], resolve),
        );
        assert.equal(await delivered, true);
        await eventually("every message received", () => server.got.flat().length === 3);
        assert.equal(server.got.length, 2, "one append a frame, the heartbeat beside the second");
        assert.deepEqual(
          server.got.flat().map((m) => m.shard),
          [1, 2, 3],
        );
        assert.equal(t.stats()["n2"]?.streamsOpened, 1, "the stream was never refused");
      } finally {
        await t.close();
        server.stop();
      }
    });

    it("drops a round whose frame would decode to more items than a peer takes, and reports the peer: the stream stays up", async () => {
      // The receiver refuses such a frame and ends the stream (MAX_FRAME_ITEMS): sent, one
      // oversized round would cost every group's messages until the stream was open again.
      const server = await collectingServer(startRaftServer);
      const unreachable: string[] = [];
      const lines: LogLine[] = [];
      const t = transportTo(server.address, {
        logger: recordingLogger(lines),
        onUnreachable: (peer) => unreachable.push(peer),
      });
      try {
        const entry = { term: term(1), index: logIndex(1), type: "normal" as const };
        const many = append(1, 0).message as Extract<Message, { type: "append" }>;
        const entries = Array.from({ length: 2 ** 20 }, () => ({
          ...entry,
          data: new Uint8Array(0),
        }));
        t.send(N2, [{ shard: 1, message: { ...many, entries } }]);
        t.send(N2, [heartbeat(1)]);
        await eventually("the next frame delivered", () => server.got.length === 1);
        assert.deepEqual(server.got[0], [heartbeat(1)]);
        assert.equal(t.stats()["n2"]?.framesDropped, 1);
        assert.equal(t.stats()["n2"]?.streamsOpened, 1, "the stream was never refused");
        assert.ok(lines.some((l) => l.message === "raft frame over the item limit dropped"));
        await eventually("the drop reported as unreachable", () => unreachable.includes("n2"));
      } finally {
        await t.close();
        server.stop();
      }
    });

    it("bounds the bytes in flight over every peer together", async () => {
      const servers = await Promise.all(
        ["n2", "n3"].map((id) => startRaftServer(() => undefined, { clusterId: "c1", nodeId: id })),
      );
      const t = new GrpcTransport({
        clusterId: "c1",
        nodeId: "n1",
        peers: (id) => servers[id === "n2" ? 0 : 1]?.address ?? null,
        maxInFlightBytesPerPeer: 1_000_000,
        maxInFlightBytes: 300_000,
      });
      const N3 = nodeId("n3");
      try {
        // Open both streams first (a frame each, then nothing in flight).
        t.send(N2, [append(0, 10)]);
        t.send(N3, [append(0, 10, N3)]);
        await eventually("both streams idle", () =>
          ["n2", "n3"].every(
            (p) => (t.stats()[p]?.framesSent ?? 0) >= 1 && t.stats()[p]?.inFlightBytes === 0,
          ),
        );
        // Synchronous sends: each peer's budget (1 MB) would take them, the node's (300 kB) not.
        for (let i = 0; i < 3; i++) t.send(N2, [append(1, 100_000)]);
        for (let i = 0; i < 3; i++) t.send(N3, [append(1, 100_000, N3)]);
        const dropped =
          (t.stats()["n2"]?.framesDropped ?? 0) + (t.stats()["n3"]?.framesDropped ?? 0);
        assert.ok(dropped >= 2, `${dropped} frames dropped past the node-wide budget`);
        assert.ok(
          (t.stats()["n3"]?.framesSent ?? 0) >= 2,
          "a peer with nothing in flight still gets a frame",
        );
      } finally {
        await t.close();
        for (const s of servers) s.stop();
      }
    });

    it("batches followers' read-index requests per leader node, never answering a read with an earlier call", async () => {
      // The leader's side, scripted: each call is held until the test releases it, then its
      // shards are answered 100 × (call number) + shard, and shard 13 "not the leader (n3)".
      const calls: number[][] = [];
      const vouchers: string[] = [];
      const release = new Map<number, () => void>();
      let answering = 0;
      const server = await startRaftServer(
        () => undefined,
        {
          clusterId: "c1",
          nodeId: "n2",
          readIndex: (shard, voucher) => {
            if (voucher !== undefined) vouchers.push(`${shard}:${voucher.replica}@${voucher.term}`);
            return shard === 13
              ? Promise.reject(new NotLeaderError(nodeId("n3")))
              : Promise.resolve(100 * answering + shard);
          },
        },
        "127.0.0.1:0",
        (impl) => ({
          ...impl,
          ReadIndex(call, callback) {
            calls.push([...call.request.shard_ids]);
            const n = calls.length;
            release.set(n, () => {
              answering = n;
              impl.ReadIndex(call, callback);
            });
          },
        }),
      );
      const t = transportTo(server.address);
      try {
        const first = t.readIndex(N2, 5, 5_000);
        await eventually("the first call is in flight", () => calls.length === 1);
        // Asked while the first call is in flight: they wait for the second call, all in one.
        // Shard 5's reads were asked at terms 3 and 4: the call vouches with the higher.
        const later = [
          t.readIndex(N2, 5, 5_000, 3),
          t.readIndex(N2, 7, 5_000),
          t.readIndex(N2, 5, 5_000, 4),
        ];
        const refused = t.readIndex(N2, 13, 5_000);
        release.get(1)?.();
        assert.equal(await first, 105);
        await eventually("the second call is in flight", () => calls.length === 2);
        // Had a read gone in a call of its own, the second call would not hold them all.
        assert.deepEqual(calls[1], [5, 7, 13], "one entry per shard");
        release.get(2)?.();
        assert.deepEqual(await Promise.all(later), [205, 207, 205]);
        assert.deepEqual(vouchers, ["5:n1@4"], "the sender's replica, once per shard");
        await assert.rejects(refused, (err: unknown) => {
          assert.ok(err instanceof NotLeaderError);
          assert.equal(err.leader, "n3");
          return true;
        });
      } finally {
        await t.close();
        server.stop();
      }
    });

    it("ConfirmTerms carries a leader's term checks and answers each, in order", async () => {
      const asked: unknown[] = [];
      const server = await startRaftServer(() => undefined, {
        clusterId: "c1",
        nodeId: "n2",
        confirmTerms: (checks) => {
          asked.push(checks);
          return checks.map((c) => c.replica === "n2" && c.term >= 7);
        },
      });
      const t = transportTo(server.address);
      const other = transportTo(server.address, { clusterId: "c2" });
      try {
        const checks = [
          { shard: 3, term: 7, replica: "n2" },
          { shard: 900, term: 2 ** 40, replica: "n2" },
          { shard: 3, term: 6, replica: "n2" },
          { shard: 4, term: 9, replica: "n2@x" },
        ];
        assert.deepEqual(await t.confirmTerms(N2, checks, 5_000), [true, true, false, false]);
        assert.deepEqual(asked, [checks], "every field arrives as sent");
        assert.deepEqual(await t.confirmTerms(N2, [], 5_000), []);
        await assert.rejects(other.confirmTerms(N2, checks, 5_000), /cluster id mismatch/);
        assert.equal(asked.length, 2, "a call from another cluster is not answered");
      } finally {
        await t.close();
        await other.close();
        server.stop();
      }
    });

    it("answers a restarted peer's forwarded call at once, though its stream back was backing off", async () => {
      // n1 forwards calls to n2; n2 answers each on its own stream back to n1. n1 restarts:
      // n2's stream to it fails, and one more frame meets the dead port, so n2 backs off. The
      // restarted n1 forwards a call at once. Its stream reaching n2 proves it is up again: n2
      // must answer now, not drop the answer while its backoff runs (the caller then waits for
      // its deadline: a Put through a restarted node ended DEADLINE_EXCEEDED after 10 s in CI).
      const port = await freePort();
      const n2Port = await freePort();
      const n2 = new GrpcTransport({
        clusterId: "c1",
        nodeId: "n2",
        peers: () => `127.0.0.1:${port}`,
        // Far longer than the test: only the peer's stream can end the backoff.
        initialBackoffMs: 60_000,
        maxBackoffMs: 60_000,
      });
      const n2Server = await startRaftServer(
        () => undefined,
        {
          clusterId: "c1",
          nodeId: "n2",
          calls: {
            serve: (from, call) =>
              n2.reply(from, {
                id: call.id,
                code: 0,
                details: "",
                response: Buffer.from(`answer to ${Buffer.from(call.request).toString()}`),
                trailers: [],
              }),
            replied: () => undefined,
          },
          connected: (from) => n2.heardFrom(from),
        },
        `127.0.0.1:${n2Port}`,
      );
      /** Node n1, its server on `port` and its transport to n2. */
      const startN1 = async (): Promise<{ t: GrpcTransport; server: RaftServer }> => {
        const t = new GrpcTransport({
          clusterId: "c1",
          nodeId: "n1",
          peers: () => n2Server.address,
        });
        const server = await startRaftServer(
          () => undefined,
          {
            clusterId: "c1",
            nodeId: "n1",
            calls: {
              serve: () => undefined,
              replied: (from, reply) => t.receiveReply(from, reply),
            },
          },
          `127.0.0.1:${port}`,
        );
        return { t, server };
      };
      const call = (t: GrpcTransport, what: string): ReturnType<GrpcTransport["call"]> =>
        t.call("n2", "/cairn.v1.KV/Put", Buffer.from(what), { deadline: deadlineClock() + 5_000 });
      let n1 = await startN1();
      try {
        const first = await call(n1.t, "first");
        assert.equal(first.code, 0);
        assert.deepEqual(first.message, Buffer.from("answer to first"));
        // n1 goes away: n2's stream to it fails, and a frame sent to the dead port fails too.
        await n1.t.close();
        n1.server.stop();
        await eventually("n2's stream to n1 lost", () => n2.stats()["n1"]?.state !== "connected");
        n2.send(N1, [heartbeat(1, N1)]);
        await eventually("n2 backs off from n1", () => n2.stats()["n1"]?.state === "backoff");
        n1 = await startN1();
        const started = performance.now();
        const second = await call(n1.t, "second");
        assert.equal(second.code, 0, `answered, not ${second.details}`);
        assert.deepEqual(second.message, Buffer.from("answer to second"));
        assert.ok(performance.now() - started < 4_000, "answered before the call's deadline");
      } finally {
        await n1.t.close();
        n1.server.stop();
        await n2.close();
        n2Server.stop();
      }
    });

    it("forgets a peer that left the cluster for good: its link goes, its socket closes, what waited on it fails; a new member under its id gets a new link", async () => {
      const server = await collectingServer(startRaftServer);
      const through = await relay(server.address);
      const lines: LogLine[] = [];
      const unreachable: string[] = [];
      const t = transportTo(through.address, {
        logger: recordingLogger(lines),
        onUnreachable: (peer) => unreachable.push(peer),
      });
      try {
        t.send(N2, [heartbeat(1)]);
        await eventually("connected", () => t.stats()["n2"]?.state === "connected");
        await eventually("delivered", () => server.got.length === 1);
        assert.equal(through.open, 1);
        // A forwarded call the peer does not answer (it serves none) waits on the stream.
        const waiting = t.call("n2", "/cairn.v1.KV/Get", Buffer.from("k"), {
          deadline: deadlineClock() + 60_000,
        });

        t.forgetPeer("n2");
        assert.deepEqual(Object.keys(t.stats()), [], "no link is kept");
        const failed = await waiting;
        assert.equal(failed.code, status.UNAVAILABLE);
        await eventually("its socket closed", () => through.open === 0);
        await eventually("reported unreachable", () => unreachable.includes("n2"));
        assert.ok(
          lines.some((l) => l.message === "raft peer left the cluster; its connections closed"),
        );
        assert.ok(
          !lines.some((l) => l.level === "warn"),
          `no warning: ${JSON.stringify(lines.filter((l) => l.level === "warn"))}`,
        );

        // A new member under the id: a new link, counted from the start, on a new connection.
        t.send(N2, [heartbeat(2)]);
        const fresh = t.stats()["n2"];
        assert.equal(fresh?.streamsOpened, 1);
        assert.equal(fresh.framesSent, 2, "the handshake and the frame");
        assert.equal(fresh.streamFailures, 0);
        await eventually("delivered again", () => server.got.length === 2);
        await eventually("connected again", () => t.stats()["n2"]?.state === "connected");
        assert.equal(through.open, 1);
      } finally {
        await t.close();
        through.close();
        server.stop();
      }
    });

    it("forgets a link made again to a departed peer once unused for departedIdleMs; not one used since, nor a member's", async () => {
      const server = await collectingServer(startRaftServer);
      const through = await relay(server.address);
      const gone = new Set(["n2", "n4"]);
      let time = 1_000;
      const t = transportTo(through.address, {
        // n3 and n4 have no address: their links hold no channel, and the relay sees n2's only.
        peers: (id) => (id === "n2" ? through.address : null),
        departed: (id) => gone.has(id),
        departedIdleMs: 20,
        now: () => time,
      });
      const n3 = nodeId("n3");
      const n4 = nodeId("n4");
      try {
        // A straggler to n2, which left (after forgetPeer): a link is made again, and connects.
        t.send(N2, [heartbeat(1)]);
        await eventually("delivered", () => server.got.length === 1);
        assert.equal(through.open, 1);
        t.send(n3, [heartbeat(2, n3)]);
        time += 21;
        // n4 left too, but its link was used just now.
        t.send(n4, [heartbeat(3, n4)]);
        await eventually("n2's link forgotten", () => t.stats()["n2"] === undefined);
        assert.deepEqual(Object.keys(t.stats()).sort(), ["n3", "n4"], "in the same pass");
        await eventually("n2's socket closed", () => through.open === 0);
      } finally {
        await t.close();
        through.close();
        server.stop();
      }
    });

    it("close() ends the streams cleanly and drops what is sent after", async () => {
      const server = await collectingServer(startRaftServer);
      const t = transportTo(server.address);
      try {
        t.send(N2, [heartbeat(1)]);
        t.send(N2, [heartbeat(2)]);
        await t.close();
        // Half-close: what was written before close() still arrives.
        assert.equal(server.got.length, 2);
        t.send(N2, [heartbeat(3)]);
        assert.equal(server.got.length, 2);
      } finally {
        server.stop();
      }
    });
  });
}
