/**
 * Snapshots over cairn.v1.Raft InstallSnapshot, real sockets (127.0.0.1, port 0): a snapshot of
 * several chunks arrives intact and is handed over like a frame's messages; damaged, cut or
 * misaddressed streams are refused and reach nothing; `sent` hears each outcome once; the rate
 * limiter paces the chunks (on a virtual clock); one snapshot at a time per peer. The
 * receiver's checks alone, without gRPC, are at the end (SnapshotAssembler).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { Client, credentials, InterceptingCall, type Interceptor, status } from "@grpc/grpc-js";
import type { RaftHandlers } from "../../src/api/generated/cairn/v1/Raft.ts";
import type {
  SnapshotChunk,
  SnapshotChunk__Output,
} from "../../src/api/generated/cairn/v1/SnapshotChunk.ts";
import {
  logIndex,
  type Message,
  nodeId,
  type NodeId,
  type SnapshotStream,
  term,
} from "../../src/raft/index.ts";
import {
  GrpcTransport,
  type GrpcTransportOptions,
  type PaceClock,
  type RaftServiceOptions,
  type ShardMessage,
  SnapshotAssembler,
  type SnapshotMetrics,
  SnapshotRefusal,
} from "../../src/replication/index.ts";
import { ownHandshake } from "../../src/replication/handshake.ts";
import { MAX_SNAPSHOT_CHUNK_BYTES, sendSnapshot } from "../../src/replication/snapshot-transfer.ts";
import { crc32c, encodeSnapshotFrames } from "../../src/storage/index.ts";
import {
  eventually,
  type LogLine,
  recordingLogger,
  snapshotImage,
  snapshotMessage,
  startRaftServer,
} from "./peer-support.ts";

const N1 = nodeId("n1");
const N2 = nodeId("n2");
const N3 = nodeId("n3");
const KIB = 1024;
const CHUNK = 64 * KIB;
const INSTALL = "/cairn.v1.Raft/InstallSnapshot";

/** Bytes that differ from one position to the next, so a misplaced chunk shows. */
function pattern(length: number, seed = 0): Uint8Array {
  const out = new Uint8Array(length);
  for (let i = 0; i < length; i++) out[i] = (i * 31 + (i >>> 8) + seed) & 0xff;
  return out;
}

function snapshot(bytes: number, shard = 3, seed = 0, to: NodeId = N2): ShardMessage {
  return {
    shard,
    message: snapshotMessage(500 + seed, snapshotImage(bytes, 500 + seed, seed), to),
  };
}

function heartbeat(): ShardMessage {
  const message: Message = {
    type: "heartbeat",
    from: N1,
    to: N2,
    term: term(2),
    commit: logIndex(7),
    readSeq: 0,
    quiesce: false,
    noReply: false,
  };
  return { shard: 1, message };
}

/** Counts what SnapshotMetrics hears. */
function countingMetrics(): SnapshotMetrics & { counts: Record<string, number> } {
  const counts: Record<string, number> = {
    sent: 0,
    bytesSent: 0,
    received: 0,
    failedSend: 0,
    failedReceive: 0,
  };
  const bump = (k: string, n = 1): void => {
    counts[k] = (counts[k] ?? 0) + n;
  };
  return {
    counts,
    sent: () => bump("sent"),
    bytesSent: (bytes) => bump("bytesSent", bytes),
    received: () => bump("received"),
    failed: (direction) => bump(direction === "send" ? "failedSend" : "failedReceive"),
  };
}

/** An interceptor that rewrites (or holds back, with null) the chunks of snapshot calls. */
function onChunks(edit: (chunk: SnapshotChunk, n: number) => SnapshotChunk | null): Interceptor {
  return (options, nextCall) => {
    if (options.method_definition.path !== INSTALL) return new InterceptingCall(nextCall(options));
    let n = 0;
    return new InterceptingCall(nextCall(options), {
      sendMessage(message: SnapshotChunk, next) {
        const edited = edit(message, n++);
        if (edited !== null) next(edited);
      },
    });
  };
}

interface Rig {
  readonly transport: GrpcTransport;
  /** The receiving server's address. */
  readonly address: string;
  /** What reached the receiver's handler, per call. */
  readonly got: ShardMessage[][];
  readonly serverLines: LogLine[];
  readonly lines: LogLine[];
  readonly senderMetrics: ReturnType<typeof countingMetrics>;
  readonly receiverMetrics: ReturnType<typeof countingMetrics>;
  close(): Promise<void>;
}

async function rig(
  transport: Partial<GrpcTransportOptions> = {},
  service: Partial<RaftServiceOptions> = {},
  wrap?: (implementation: RaftHandlers) => RaftHandlers,
): Promise<Rig> {
  const got: ShardMessage[][] = [];
  const serverLines: LogLine[] = [];
  const receiverMetrics = countingMetrics();
  const server = await startRaftServer(
    (from, messages) => {
      assert.equal(from, "n1");
      got.push(messages);
    },
    {
      clusterId: "c1",
      nodeId: "n2",
      logger: recordingLogger(serverLines),
      metrics: receiverMetrics,
      ...service,
    },
    "127.0.0.1:0",
    wrap,
  );
  const lines: LogLine[] = [];
  const senderMetrics = countingMetrics();
  const t = new GrpcTransport({
    clusterId: "c1",
    nodeId: "n1",
    // n3 lives at the same server, which refuses what is addressed to it.
    peers: () => server.address,
    logger: recordingLogger(lines),
    snapshotChunkBytes: CHUNK,
    metrics: senderMetrics,
    ...transport,
  });
  return {
    transport: t,
    address: server.address,
    got,
    serverLines,
    lines,
    senderMetrics,
    receiverMetrics,
    async close() {
      await t.close();
      server.stop();
    },
  };
}

/** The snapshots among what reached the handler. */
function snapshotsIn(got: readonly ShardMessage[][]): ShardMessage[] {
  return got.flat().filter((m) => m.message.type === "snapshot");
}

describe("GrpcTransport: snapshots over InstallSnapshot", () => {
  it("streams a snapshot of several chunks intact, beside the round's frame, and reports it once", async () => {
    const r = await rig();
    try {
      const size = 5 * CHUNK + 123;
      const snap = snapshot(size);
      const outcomes: boolean[] = [];
      r.transport.send(N2, [heartbeat(), snap], (delivered) => outcomes.push(delivered));
      assert.deepEqual(outcomes, [], "never answered from inside send()");
      await eventually("the outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [true]);
      // The receiver handed the snapshot over before it acknowledged it.
      assert.deepEqual(snapshotsIn(r.got), [snap]);
      assert.deepEqual(
        r.got.flat().filter((m) => m.message.type === "heartbeat"),
        [heartbeat()],
        "the rest of the round went in a frame",
      );
      const stats = r.transport.stats()["n2"];
      assert.equal(stats?.snapshotsSent, 1);
      assert.equal(stats?.snapshotsFailed, 0);
      assert.equal(stats?.snapshotBytesSent, size);
      assert.equal(stats?.snapshotInFlight, false);
      assert.equal(r.senderMetrics.counts["sent"], 1);
      assert.equal(r.senderMetrics.counts["bytesSent"], size);
      assert.equal(r.receiverMetrics.counts["received"], 1);
      assert.ok(r.lines.some((l) => l.message === "raft snapshot sent"));
      assert.ok(r.serverLines.some((l) => l.message === "raft snapshot received"));
    } finally {
      await r.close();
    }
    assert.equal(r.senderMetrics.counts["failedSend"], 0);
    assert.equal(r.receiverMetrics.counts["failedReceive"], 0);
  });

  it("sends an empty shard's image; refuses a snapshot with no data (header and trailer only), no image", async () => {
    const r = await rig();
    try {
      const outcomes: boolean[] = [];
      const frames = Buffer.concat([...encodeSnapshotFrames(500, [])]);
      const empty = new Uint8Array(frames.buffer, frames.byteOffset, frames.length);
      const shard: ShardMessage = { shard: 3, message: snapshotMessage(500, empty) };
      r.transport.send(N2, [shard], (delivered) => outcomes.push(delivered));
      await eventually("the outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [true]);
      assert.deepEqual(snapshotsIn(r.got), [shard]);
      const none: ShardMessage = { shard: 3, message: snapshotMessage(500, new Uint8Array(0)) };
      r.transport.send(N2, [none], (delivered) => outcomes.push(delivered));
      await eventually("the second outcome", () => outcomes.length === 2);
      assert.deepEqual(outcomes, [true, false]);
      assert.equal(snapshotsIn(r.got).length, 1);
    } finally {
      await r.close();
    }
  });

  const refusals: {
    what: string;
    code: status;
    transport?: Partial<GrpcTransportOptions>;
    service?: Partial<RaftServiceOptions>;
  }[] = [
    {
      what: "a corrupted chunk",
      code: status.DATA_LOSS,
      transport: {
        interceptors: [
          onChunks((chunk, n) => {
            if (n !== 2 || chunk.data === undefined || typeof chunk.data === "string") return chunk;
            const damaged = Buffer.from(chunk.data);
            damaged[1000] = (damaged[1000] ?? 0) ^ 0x10;
            return { data: damaged };
          }),
        ],
      },
    },
    {
      what: "a wrong checksum",
      code: status.DATA_LOSS,
      transport: {
        interceptors: [
          onChunks((chunk) =>
            chunk.trailer
              ? { trailer: { crc32c: ((chunk.trailer.crc32c ?? 0) ^ 1) >>> 0 } }
              : chunk,
          ),
        ],
      },
    },
    {
      what: "a chunk missing from the stream",
      code: status.INVALID_ARGUMENT,
      transport: {
        interceptors: [onChunks((chunk, n) => (n === 3 ? { data: Buffer.alloc(0) } : chunk))],
      },
    },
    {
      what: "a stream ended before its trailer",
      code: status.INVALID_ARGUMENT,
      transport: {
        interceptors: [onChunks((chunk) => (chunk.trailer ? { data: Buffer.alloc(0) } : chunk))],
      },
    },
    {
      what: "a wrong cluster id",
      code: status.FAILED_PRECONDITION,
      transport: { clusterId: "other-cluster" },
    },
    {
      what: "a snapshot over the receiver's size limit",
      code: status.RESOURCE_EXHAUSTED,
      service: { maxSnapshotBytes: 4 * CHUNK },
    },
    {
      what: "a sender that goes quiet mid-stream",
      code: status.DEADLINE_EXCEEDED,
      // The third chunk never leaves; the receiver gives up first.
      transport: { interceptors: [onChunks((chunk, n) => (n === 2 ? null : chunk))] },
      service: { snapshotProgressWindowMs: 100 },
    },
  ];
  for (const { what, code, transport, service } of refusals) {
    it(`refuses ${what} (${status[code]}): nothing reaches Raft, and sent hears false`, async () => {
      const r = await rig(transport, service);
      try {
        const outcomes: boolean[] = [];
        r.transport.send(N2, [snapshot(5 * CHUNK + 123)], (delivered) => outcomes.push(delivered));
        await eventually("the outcome", () => outcomes.length === 1);
        assert.deepEqual(outcomes, [false]);
        assert.deepEqual(r.got, [], "the receiver's handler saw nothing");
        const refusal = r.serverLines.find((l) => l.message === "raft snapshot refused");
        assert.equal(refusal?.fields["code"], status[code], String(refusal?.fields["details"]));
        const failure = r.lines.find((l) => l.message === "raft snapshot not sent");
        assert.equal(failure?.level, "warn");
        assert.equal(failure?.fields["code"], status[code]);
        assert.equal(r.transport.stats()["n2"]?.snapshotsFailed, 1);
        assert.equal(r.transport.stats()["n2"]?.snapshotsSent, 0);
        assert.equal(r.senderMetrics.counts["failedSend"], 1);
        await eventually(
          "the receiver counted it",
          () => r.receiverMetrics.counts["failedReceive"] === 1,
        );
        assert.equal(r.receiverMetrics.counts["received"], 0);
      } finally {
        await r.close();
      }
    });
  }

  it("refuses data that is no snapshot image (INVALID_ARGUMENT): nothing reaches Raft, whose install would fail the node", async () => {
    // The checksum covers what the sender sent, not whether it parses: bytes that are no
    // engine image (a bug, another version's format) used to reach the driver, whose
    // importSnapshot then failed the whole node instead of the transfer.
    const r = await rig();
    try {
      const outcomes: boolean[] = [];
      const garbage: ShardMessage = { shard: 3, message: snapshotMessage(500, pattern(CHUNK)) };
      r.transport.send(N2, [garbage], (delivered) => outcomes.push(delivered));
      await eventually("the outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [false]);
      assert.deepEqual(r.got, [], "the receiver's handler saw nothing");
      const refusal = r.serverLines.find((l) => l.message === "raft snapshot refused");
      assert.equal(refusal?.fields["code"], status[status.INVALID_ARGUMENT]);
      assert.match(String(refusal?.fields["details"]), /snapshot stream/);
    } finally {
      await r.close();
    }
  });

  it("refuses a snapshot addressed to another node", async () => {
    const r = await rig();
    try {
      const outcomes: boolean[] = [];
      r.transport.send(N3, [snapshot(CHUNK, 3, 0, N3)], (delivered) => outcomes.push(delivered));
      await eventually("the outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [false]);
      assert.deepEqual(r.got, []);
      assert.match(
        String(r.serverLines.find((l) => l.message === "raft snapshot refused")?.fields["details"]),
        /node id mismatch/,
      );
    } finally {
      await r.close();
    }
  });

  it("writes a chunk only once gRPC took the one before (back-pressure), else stalls and fails", async () => {
    const seen: number[] = [];
    // gRPC never takes the second data chunk (its write is never called back).
    const hold = onChunks((chunk, n) => {
      seen.push(n);
      return n === 2 ? null : chunk;
    });
    const r = await rig({ interceptors: [hold], snapshotStallTimeoutMs: 200 });
    try {
      const outcomes: boolean[] = [];
      r.transport.send(N2, [snapshot(6 * CHUNK)], (delivered) => outcomes.push(delivered));
      await eventually("the outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [false]);
      assert.deepEqual(seen, [0, 1, 2], "the header and two chunks; nothing after the held one");
      assert.equal(r.transport.stats()["n2"]?.snapshotBytesSent, CHUNK);
      const failure = r.lines.find((l) => l.message === "raft snapshot not sent");
      assert.match(
        String(failure?.fields["details"]),
        /a chunk of the snapshot waited over 200 ms/,
      );
    } finally {
      await r.close();
    }
  });

  it("fails a transfer whose receiver never answers, after the stall timeout", async () => {
    const silent = (impl: RaftHandlers): RaftHandlers => ({
      ...impl,
      // Reads everything and never answers.
      InstallSnapshot: (call) => call.on("data", () => undefined),
    });
    const r = await rig({ snapshotStallTimeoutMs: 200 }, {}, silent);
    try {
      const outcomes: boolean[] = [];
      r.transport.send(N2, [snapshot(2 * CHUNK)], (delivered) => outcomes.push(delivered));
      await eventually("the outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [false]);
      const failure = r.lines.find((l) => l.message === "raft snapshot not sent");
      assert.match(
        String(failure?.fields["details"]),
        /the answer of the snapshot waited over 200 ms/,
      );
    } finally {
      await r.close();
    }
  });

  it("receives a bounded number of snapshots at once; the next is refused RESOURCE_EXHAUSTED", async () => {
    // A sender holds to one at a time per peer, but a peer that does not could open any number,
    // each holding a call, a file and its disk space. Two senders as n1 here, the first held
    // after its first chunk (its pacing clock never wakes until released).
    let release: () => void = () => undefined;
    const held = new Promise<void>((resolve) => (release = resolve));
    const clock: PaceClock = { now: () => 0, sleep: () => held };
    let chunks = 0;
    const r = await rig(
      { snapshotClock: clock, snapshotRateBytesPerSec: CHUNK },
      { maxSnapshotReceives: 1 },
      (impl) => ({
        ...impl,
        InstallSnapshot: (call, callback) => {
          call.on("data", () => chunks++);
          impl.InstallSnapshot(call, callback);
        },
      }),
    );
    const other = new GrpcTransport({
      clusterId: "c1",
      nodeId: "n1",
      peers: () => r.address,
      snapshotChunkBytes: CHUNK,
    });
    try {
      const outcomes: boolean[] = [];
      r.transport.send(N2, [snapshot(4 * CHUNK)], (delivered) => outcomes.push(delivered));
      await eventually("the first snapshot's header received", () => chunks > 0);
      const second: boolean[] = [];
      other.send(N2, [snapshot(2 * CHUNK, 4)], (delivered) => second.push(delivered));
      await eventually("the second's outcome", () => second.length === 1);
      assert.deepEqual(second, [false]);
      const refusal = r.serverLines.find((l) => l.message === "raft snapshot refused");
      assert.equal(refusal?.fields["code"], "RESOURCE_EXHAUSTED");
      assert.match(String(refusal?.fields["details"]), /1 snapshots are being received already/);
      release();
      await eventually("the first's outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [true], "the first went through");
      // Its slot is free again: the next is received.
      other.send(N2, [snapshot(2 * CHUNK, 5)], (delivered) => second.push(delivered));
      await eventually("the third's outcome", () => second.length === 2);
      assert.deepEqual(second, [false, true]);
    } finally {
      release();
      await other.close();
      await r.close();
    }
  });

  it("cuts a call that trickles under the receiver's floor, which held a receive slot for good, and frees its slot", async () => {
    // A caller that passes for a member (no peer TLS: the documented trust model) sent a small
    // chunk within every idle timeout on each of 32 calls, and so kept every peer's snapshot
    // out. A valid image's bytes, 100 at a time every 10 ms (10 KB/s), under a floor of 8 KiB
    // in each 100 ms (80 KiB/s), on the only slot.
    const r = await rig(
      {},
      { maxSnapshotReceives: 1, snapshotProgressWindowMs: 100, snapshotMinProgressBytes: 8 * KIB },
    );
    const client = new Client(r.address, credentials.createInsecure());
    try {
      const trickle = sendSnapshot(
        client,
        ownHandshake("c1", N1, N1, N2),
        3,
        snapshotMessage(500, snapshotImage(64 * KIB, 500)),
        {
          chunkBytes: 100,
          limiter: { take: () => new Promise((resolve) => setTimeout(resolve, 10)) },
          stallTimeoutMs: 5_000,
          onBytes: () => undefined,
          signal: new AbortController().signal,
        },
      );
      // Unbounded, it would end (received) after ~6.5 s.
      const outcome = await Promise.race([
        trickle.then(
          () => "received",
          (err: { code?: number }) => status[err.code ?? status.UNKNOWN],
        ),
        new Promise((resolve) => setTimeout(() => resolve("still open after 1.5 s"), 1_500)),
      ]);
      assert.equal(outcome, "DEADLINE_EXCEEDED");
      const refusal = r.serverLines.find((l) => l.message === "raft snapshot refused");
      assert.match(String(refusal?.fields["details"]), /under the 8192 this node requires/);
      // The slot is free: a sender at the pace is received.
      const outcomes: boolean[] = [];
      r.transport.send(N2, [snapshot(4 * CHUNK)], (delivered) => outcomes.push(delivered));
      await eventually("the outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [true]);
    } finally {
      client.close();
      await r.close();
    }
  });

  it("keeps each transfer above the receivers' floor when its rate is shared by many peers: it streams few enough at once", async () => {
    // The node-wide rate was shared by every transfer: with ~60 peers at 1 MiB/s, each got a
    // chunk a minute, the receivers cut them all (then at their idle timeout), and Raft sent
    // them again, for good. Scaled down: 8 peers, 4 KiB chunks at 160 KiB/s in all (a chunk
    // every 25 ms), each receiver wanting 4 KiB in each 100 ms; eight at once got a chunk each
    // every 200 ms.
    const pace = { snapshotProgressWindowMs: 100, snapshotMinProgressBytes: 4 * KIB };
    const servers = await Promise.all(
      [2, 3, 4, 5, 6, 7, 8, 9].map(async (n) => {
        const got: ShardMessage[] = [];
        const lines: LogLine[] = [];
        const server = await startRaftServer((_from, messages) => got.push(...messages), {
          clusterId: "c1",
          nodeId: `n${n}`,
          logger: recordingLogger(lines),
          ...pace,
        });
        return { id: nodeId(`n${n}`), server, got, lines };
      }),
    );
    const addresses = new Map(servers.map((s) => [s.id as string, s.server.address]));
    const t = new GrpcTransport({
      clusterId: "c1",
      nodeId: "n1",
      peers: (node) => addresses.get(node) ?? null,
      snapshotChunkBytes: 4 * KIB,
      snapshotRateBytesPerSec: 160 * KIB,
      snapshotLearnerRateBytesPerSec: 1 << 30,
      ...pace,
    });
    try {
      const outcomes: boolean[] = [];
      for (const s of servers) {
        t.send(s.id, [snapshot(12 * KIB, 3, 0, s.id)], (delivered) => outcomes.push(delivered));
      }
      await eventually("every outcome", () => outcomes.length === servers.length);
      const refusals = servers.flatMap((s) =>
        s.lines
          .filter((l) => l.message === "raft snapshot refused")
          .map((l) => l.fields["details"]),
      );
      assert.deepEqual(refusals, [], "no receiver cut its transfer");
      assert.deepEqual(outcomes, Array<boolean>(servers.length).fill(true));
      assert.deepEqual(
        servers.map((s) => s.got.length),
        Array<number>(servers.length).fill(1),
      );
    } finally {
      await t.close();
      for (const s of servers) s.server.stop();
    }
  });

  it("holds back a shard's next snapshot to a peer that refused its last as too large, instead of sending it again at once", async () => {
    // A streamed snapshot announces no length: a receiver finds it too large (its limit, or
    // its disk's reserve) only once part of it arrived, and the group's next snapshot, built
    // at its next heartbeat, sent that part again, for good.
    let calls = 0;
    let chunks = 0;
    const watch = (impl: RaftHandlers): RaftHandlers => ({
      ...impl,
      InstallSnapshot: (call, callback) => {
        calls++;
        call.on("data", () => chunks++);
        impl.InstallSnapshot(call, callback);
      },
    });
    const r = await rig({ snapshotTooLargeHoldMs: 300 }, { maxSnapshotBytes: 4 * CHUNK }, watch);
    try {
      const outcomes: string[] = [];
      r.transport.send(N2, [snapshot(5 * CHUNK + 123)], (d) => outcomes.push(`first ${d}`));
      await eventually("the first outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, ["first false"]);
      assert.equal(calls, 1);
      const sent = chunks;
      // The group's next snapshot of the shard (a later index) waits out the hold, unsent.
      const started = performance.now();
      let heldFor = 0;
      r.transport.send(N2, [snapshot(5 * CHUNK + 123, 3, 1)], (d) => {
        heldFor = performance.now() - started;
        outcomes.push(`second ${d}`);
      });
      // Another shard's snapshot to the peer is not held back.
      r.transport.send(N2, [snapshot(CHUNK, 4, 2)], (d) => outcomes.push(`other ${d}`));
      await eventually("the outcomes", () => outcomes.length === 3);
      assert.deepEqual(outcomes, ["first false", "other true", "second false"]);
      assert.equal(calls, 2, "the held snapshot opened no call");
      assert.ok(heldFor >= 250, `reported lost after the hold, not at once: ${heldFor} ms`);
      const held = r.lines.find(
        (l) => l.message === "raft snapshot not sent" && l.fields["index"] === 501,
      );
      assert.match(
        String(held?.fields["details"]),
        /refused the last snapshot of shard 3 as too large/,
      );
      // Past the hold, the shard's snapshot is sent again.
      r.transport.send(N2, [snapshot(5 * CHUNK + 123, 3, 3)], (d) => outcomes.push(`third ${d}`));
      await eventually("the third outcome", () => outcomes.length === 4);
      assert.equal(calls, 3);
      assert.ok(chunks > sent + 2, "it was streamed");
    } finally {
      await r.close();
    }
  });

  it("paces the chunks at the node's rate (virtual clock: no real waiting)", async () => {
    let now = 0;
    const sleeps: number[] = [];
    const clock: PaceClock = {
      now: () => now,
      sleep: (ms) => {
        sleeps.push(ms);
        now += ms;
        return Promise.resolve();
      },
    };
    // 128 KiB/s, 64 KiB chunks (the burst): one chunk is due every 500 ms.
    const r = await rig({ snapshotClock: clock, snapshotRateBytesPerSec: 2 * CHUNK });
    try {
      const outcomes: boolean[] = [];
      r.transport.send(N2, [snapshot(8 * CHUNK)], (delivered) => outcomes.push(delivered));
      await eventually("the outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [true]);
      // The first chunk goes at once, each of the seven others half a second after the last.
      assert.deepEqual(sleeps, [500, 500, 500, 500, 500, 500, 500]);
      assert.equal(now, 3500);
      // A second snapshot right after (the virtual clock stands at the last chunk's due time)
      // waits for its turn: the limiter is the transport's, across transfers.
      r.transport.send(N2, [snapshot(CHUNK, 4)], (delivered) => outcomes.push(delivered));
      await eventually("the second outcome", () => outcomes.length === 2);
      assert.deepEqual(sleeps.slice(7), [500]);
    } finally {
      await r.close();
    }
  });

  it("paces a learner's snapshot at the rebalance rate too, a voter's at the node's alone", async () => {
    let now = 0;
    const sleeps: number[] = [];
    const clock: PaceClock = {
      now: () => now,
      sleep: (ms) => {
        sleeps.push(ms);
        now += ms;
        return Promise.resolve();
      },
    };
    // Node-wide 256 KiB/s (a chunk due every 250 ms), learners 128 KiB/s (every 500 ms).
    const r = await rig({
      snapshotClock: clock,
      snapshotRateBytesPerSec: 4 * CHUNK,
      snapshotLearnerRateBytesPerSec: 2 * CHUNK,
    });
    try {
      const outcomes: boolean[] = [];
      // n2 is a learner in the configuration the snapshot carries: a move's new replica.
      const base = snapshot(8 * CHUNK);
      assert.equal(base.message.type, "snapshot");
      if (base.message.type !== "snapshot") return;
      const snap = base.message.snapshot;
      const toLearner: ShardMessage = {
        shard: base.shard,
        message: {
          ...base.message,
          snapshot: { ...snap, meta: { ...snap.meta, conf: { voters: [N1], learners: [N2] } } },
        },
      };
      r.transport.send(N2, [toLearner], (delivered) => outcomes.push(delivered));
      await eventually("the learner's outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [true]);
      // The narrower limiter sets the pace; the node-wide one, taken after it, never waits.
      assert.deepEqual(sleeps, [500, 500, 500, 500, 500, 500, 500]);
      assert.equal(now, 3500);
      // A voter that fell behind (n2 a voter here) catches up at the node's rate: the learners'
      // limiter is not in its way, and the node-wide one counted the learner's bytes as sent.
      r.transport.send(N2, [snapshot(8 * CHUNK, 3, 1)], (delivered) => outcomes.push(delivered));
      await eventually("the voter's outcome", () => outcomes.length === 2);
      assert.deepEqual(outcomes, [true, true]);
      assert.deepEqual(sleeps.slice(7), [250, 250, 250, 250, 250, 250, 250, 250]);
      assert.deepEqual(
        snapshotsIn(r.got).map((m) => m.message.type === "snapshot" && m.message.to),
        [N2, N2],
      );
    } finally {
      await r.close();
    }
  });

  it("keeps one snapshot in flight per peer; the others wait their turn, in order", async () => {
    let active = 0;
    let most = 0;
    const watch = (impl: RaftHandlers): RaftHandlers => ({
      ...impl,
      InstallSnapshot: (call, callback) => {
        active++;
        most = Math.max(most, active);
        impl.InstallSnapshot(call, (...answer: Parameters<typeof callback>) => {
          active--;
          callback(...answer);
        });
      },
    });
    const r = await rig({}, {}, watch);
    try {
      const outcomes: string[] = [];
      const a = snapshot(4 * CHUNK, 1, 1);
      const b = snapshot(4 * CHUNK, 2, 2);
      const c = snapshot(4 * CHUNK, 3, 3);
      r.transport.send(N2, [a, b], (delivered) => outcomes.push(`ab ${delivered}`));
      r.transport.send(N2, [c], (delivered) => outcomes.push(`c ${delivered}`));
      const stats = r.transport.stats()["n2"];
      assert.equal(stats?.snapshotInFlight, true);
      assert.equal(stats?.snapshotsQueued, 2);
      await eventually("both outcomes", () => outcomes.length === 2);
      assert.deepEqual(outcomes, ["ab true", "c true"]);
      assert.equal(most, 1, "never two InstallSnapshot calls from n1 at once");
      assert.deepEqual(snapshotsIn(r.got), [a, b, c]);
      assert.equal(r.transport.stats()["n2"]?.snapshotsQueued, 0);
    } finally {
      await r.close();
    }
  });

  it("close() cuts the transfer in flight and reports it and those waiting lost, once each", async () => {
    let calls = 0;
    const silent = (impl: RaftHandlers): RaftHandlers => ({
      ...impl,
      InstallSnapshot: (call) => {
        calls++;
        call.on("data", () => undefined);
      },
    });
    const r = await rig({}, {}, silent);
    const outcomes: string[] = [];
    try {
      r.transport.send(N2, [snapshot(CHUNK, 1, 1)], (d) => outcomes.push(`first ${d}`));
      r.transport.send(N2, [snapshot(CHUNK, 2, 2)], (d) => outcomes.push(`second ${d}`));
      await eventually("the first call reached the receiver", () => calls === 1);
    } finally {
      await r.close();
    }
    await eventually("both outcomes", () => outcomes.length === 2);
    assert.deepEqual(outcomes.sort(), ["first false", "second false"]);
    assert.equal(calls, 1);
    r.transport.send(N2, [snapshot(CHUNK)], (d) => outcomes.push(`after ${d}`));
    await eventually("the outcome after close", () => outcomes.length === 3);
    assert.equal(outcomes[2], "after false");
  });

  it("forgets a peer that left the cluster for good: its transfer cut, those waiting reported lost and released; a new member under its id gets a new lane", async () => {
    let calls = 0;
    // The first call is never answered: only the peer's departure ends it.
    const firstSilent = (impl: RaftHandlers): RaftHandlers => ({
      ...impl,
      InstallSnapshot: (call, callback) => {
        if (++calls === 1) call.on("data", () => undefined);
        else impl.InstallSnapshot(call, callback);
      },
    });
    const r = await rig({}, {}, firstSilent);
    const released: string[] = [];
    /** A snapshot streamed from `image`, whose release is recorded under `name`. */
    const streamed = (name: string, shard: number): ShardMessage => {
      const m = snapshot(CHUNK, shard, shard);
      assert.equal(m.message.type, "snapshot");
      const image = m.message.snapshot.data;
      const stream: SnapshotStream = {
        async *chunks() {
          await Promise.resolve();
          yield image;
        },
        release: () => void released.push(name),
      };
      return {
        shard,
        message: {
          ...m.message,
          snapshot: { ...m.message.snapshot, data: new Uint8Array(0), stream },
        },
      };
    };
    try {
      const outcomes: string[] = [];
      r.transport.send(N2, [streamed("a", 1)], (d) => outcomes.push(`a ${d}`));
      r.transport.send(N2, [streamed("b", 2)], (d) => outcomes.push(`b ${d}`));
      await eventually("the first call reached the receiver", () => calls === 1);
      assert.equal(r.transport.stats()["n2"]?.snapshotsQueued, 1);

      r.transport.forgetPeer("n2");
      assert.deepEqual(Object.keys(r.transport.stats()), []);
      // Cut at once, not at the stall timeout (30 s).
      await eventually("both outcomes", () => outcomes.length === 2, 5_000);
      assert.deepEqual(outcomes.sort(), ["a false", "b false"]);
      await eventually("both released", () => released.length >= 2);
      assert.deepEqual([...new Set(released)].sort(), ["a", "b"]);
      assert.ok(!r.lines.some((l) => l.level === "warn"), "no warning for a peer that left");

      // A new member under the id: a new lane and link, which deliver.
      r.transport.send(N2, [streamed("c", 3)], (d) => outcomes.push(`c ${d}`));
      await eventually("the new member's outcome", () => outcomes.length === 3);
      assert.equal(outcomes[2], "c true");
      assert.equal(calls, 2, "b was never sent");
      assert.equal(r.transport.stats()["n2"]?.snapshotsSent, 1);
    } finally {
      await r.close();
    }
  });
});

// ── the receiver's checks, without gRPC ─────────────────────────────────────────────────────

function header(
  total: number,
  over: Partial<{ cluster: string; to: string }> = {},
): SnapshotChunk__Output {
  return {
    chunk: "header",
    header: {
      handshake: {
        cluster_id: over.cluster ?? "c1",
        from_node_id: "n1",
        to_node_id: over.to ?? "n2",
        from_replica_id: "",
      },
      shard_id: 3,
      message: {
        type: "RAFT_MESSAGE_TYPE_SNAPSHOT",
        term: 2,
        prev_index: 0,
        prev_term: 0,
        entries: [],
        commit: 0,
        index: 0,
        reject: false,
        hint_index: 0,
        hint_term: 0,
        commit_term: 0,
        last_index: 0,
        last_term: 0,
        transfer: false,
        read_seq: 0,
        quiesce: false,
        no_reply: false,
        lost: false,
        snapshot: {
          meta: { index: 500, term: 2, voters: ["n1", "n2"], learners: [] },
          data: Buffer.alloc(0),
        },
      },
      total_bytes: total,
      to_replica_id: "",
    },
  };
}

const data = (bytes: Uint8Array): SnapshotChunk__Output => ({
  chunk: "data",
  data: Buffer.from(bytes),
});
const trailer = (crc: number): SnapshotChunk__Output => ({
  chunk: "trailer",
  trailer: { crc32c: crc, total_bytes: 0 },
});

function assembler(maxBytes = 1 << 20): SnapshotAssembler {
  return new SnapshotAssembler({ peers: { clusterId: "c1", self: N2 }, maxBytes });
}

function refusedWith(code: status, pattern: RegExp): (err: unknown) => boolean {
  return (err) => {
    assert.ok(err instanceof SnapshotRefusal);
    assert.equal(status[err.code], status[code]);
    assert.match(err.message, pattern);
    return true;
  };
}

describe("SnapshotAssembler", () => {
  const bytes = snapshotImage(1000, 500);

  it("assembles chunks cut anywhere into the snapshot message", async () => {
    const a = assembler();
    a.push(header(1000));
    a.push(data(bytes.subarray(0, 1)));
    a.push(data(bytes.subarray(1, 1)));
    a.push(data(bytes.subarray(1, 999)));
    a.push(data(bytes.subarray(999)));
    a.push(trailer(crc32c(bytes)));
    assert.equal(a.from, N1);
    await a.close();
    assert.deepEqual(a.finish(), snapshot(1000));
  });

  it("wants a header first, with an identity a Stream would accept", () => {
    assert.throws(
      () => assembler().push(data(bytes)),
      refusedWith(status.FAILED_PRECONDITION, /header/),
    );
    assert.throws(
      () => assembler().push(header(10, { cluster: "c2" })),
      refusedWith(status.FAILED_PRECONDITION, /cluster id mismatch/),
    );
    assert.throws(
      () => assembler().push(header(10, { to: "n3" })),
      refusedWith(status.FAILED_PRECONDITION, /node id mismatch/),
    );
    // An end that does not know its cluster id yet is accepted, as on a Stream.
    assert.doesNotThrow(() => assembler().push(header(10, { cluster: "" })));
  });

  it("refuses a header whose message is not a snapshot without data", () => {
    const notSnapshot = header(10);
    assert.ok(notSnapshot.header?.message);
    notSnapshot.header.message.type = "RAFT_MESSAGE_TYPE_HEARTBEAT";
    assert.throws(
      () => assembler().push(notSnapshot),
      refusedWith(status.INVALID_ARGUMENT, /snapshot/),
    );
    const withData = header(10);
    assert.ok(withData.header?.message?.snapshot);
    withData.header.message.snapshot.data = Buffer.from([1]);
    assert.throws(
      () => assembler().push(withData),
      refusedWith(status.INVALID_ARGUMENT, /without its data/),
    );
  });

  it("refuses more than the limit before taking memory for it", () => {
    assert.throws(
      () => assembler(999).push(header(1000)),
      refusedWith(status.RESOURCE_EXHAUSTED, /limit of 999/),
    );
  });

  it("refuses data beyond the announced length, a short stream and a bad checksum", () => {
    const over = assembler();
    over.push(header(10));
    assert.throws(
      () => over.push(data(bytes.subarray(0, 11))),
      refusedWith(status.INVALID_ARGUMENT, /more data/),
    );

    const short = assembler();
    short.push(header(1000));
    short.push(data(bytes.subarray(0, 500)));
    assert.throws(
      () => short.push(trailer(crc32c(bytes))),
      refusedWith(status.INVALID_ARGUMENT, /500 of the 1000/),
    );

    const ended = assembler();
    ended.push(header(1000));
    ended.push(data(bytes));
    assert.throws(() => ended.finish(), refusedWith(status.INVALID_ARGUMENT, /before its trailer/));

    const damaged = assembler();
    damaged.push(header(1000));
    damaged.push(data(bytes));
    assert.throws(
      () => damaged.push(trailer(crc32c(bytes) ^ 1)),
      refusedWith(status.DATA_LOSS, /checksum/),
    );
    assert.throws(() => damaged.finish(), SnapshotRefusal);
  });

  it("refuses, once stored, data that is no snapshot image, or an image at another index than the header's", async () => {
    const garbage = pattern(1000);
    const notImage = assembler();
    notImage.push(header(1000));
    notImage.push(data(garbage));
    notImage.push(trailer(crc32c(garbage)));
    await assert.rejects(notImage.close(), refusedWith(status.INVALID_ARGUMENT, /snapshot stream/));
    assert.throws(() => notImage.finish(), SnapshotRefusal);

    // The header says 500; the image is the engine's state at 499.
    const other = snapshotImage(1000, 499);
    const elsewhere = assembler();
    elsewhere.push(header(1000));
    elsewhere.push(data(other));
    elsewhere.push(trailer(crc32c(other)));
    await assert.rejects(elsewhere.close(), refusedWith(status.INVALID_ARGUMENT, /499.*500/));
    assert.throws(() => elsewhere.finish(), SnapshotRefusal);
  });

  it("refuses the next chunk once the image is found damaged: a frame declaring more than a frame holds", async () => {
    // A peer past the handshake sends an image whose second frame claims 1 GiB, then streams
    // its bytes: the image check buffered them (up to 4 GiB a frame, 32 receives at once), and
    // only the trailer refused the stream. The decoder refuses the frame at its header now,
    // and the next chunk is refused, before it is stored.
    const claim = Buffer.alloc(8);
    claim.writeUInt32LE(1 << 30, 0);
    const start = Buffer.concat([...encodeSnapshotFrames(500, [])].slice(0, 1).concat(claim));
    const a = assembler(1 << 30);
    a.push(header(0));
    a.push(data(start));
    await new Promise((resolve) => setImmediate(resolve)); // the check decodes what came
    assert.throws(
      () => a.push(data(new Uint8Array(1024))),
      refusedWith(status.INVALID_ARGUMENT, /not a snapshot image: .*frame 1 declares a body/),
    );
    a.discard();
  });

  it("refuses a data chunk larger than a sender sends", () => {
    const a = assembler(64 << 20);
    a.push(header(0));
    assert.throws(
      () => a.push(data(new Uint8Array(MAX_SNAPSHOT_CHUNK_BYTES + 1))),
      refusedWith(status.INVALID_ARGUMENT, /data chunk of \d+ bytes, over the/),
    );
    a.discard();
  });

  it("refuses anything after the trailer", () => {
    const a = assembler();
    a.push(header(1000));
    a.push(data(bytes));
    a.push(trailer(crc32c(bytes)));
    assert.throws(
      () => a.push(data(new Uint8Array(0))),
      refusedWith(status.INVALID_ARGUMENT, /after the trailer/),
    );
  });
});

describe("GrpcTransport: a peer that moves", () => {
  it("sends its next snapshot and frames to its new address", async () => {
    const got: [string, ShardMessage[]][] = [];
    const handler = (from: string, messages: ShardMessage[]): void => {
      got.push([from, messages]);
    };
    const first = await startRaftServer(handler, { clusterId: "c1", nodeId: "n2" });
    let address = first.address;
    const t = new GrpcTransport({
      clusterId: "c1",
      nodeId: "n1",
      peers: () => address,
      snapshotChunkBytes: CHUNK,
      initialBackoffMs: 1,
      maxBackoffMs: 5,
    });
    const second = await startRaftServer((from, messages) => handler(`moved:${from}`, messages), {
      clusterId: "c1",
      nodeId: "n2",
    });
    try {
      const outcomes: boolean[] = [];
      t.send(N2, [snapshot(3 * CHUNK, 3, 1)], (ok) => outcomes.push(ok));
      await eventually("the first snapshot acknowledged", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [true]);
      // n2 restarts elsewhere: its old address answers no more.
      first.stop();
      address = second.address;
      await eventually("a frame reaches the new address", () => {
        t.send(N2, [heartbeat()]);
        return got.some(([from]) => from === "moved:n1");
      });
      t.send(N2, [snapshot(2 * CHUNK, 5, 3)], (ok) => outcomes.push(ok));
      await eventually("the second snapshot's outcome", () => outcomes.length === 2);
      assert.deepEqual(outcomes, [true, true], "the snapshot went to where n2 is now");
      assert.ok(
        got.some(([from, ms]) => from === "moved:n1" && ms.some((m) => m.shard === 5)),
        "received at the new address",
      );
    } finally {
      await t.close();
      first.stop();
      second.stop();
    }
  });
});
