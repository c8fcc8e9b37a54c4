/**
 * The sending end of snapshots (snapshot-sender.ts) over real sockets: one outcome for the
 * snapshots of one round, each counted; a peer whose address is not known; the chunk size it
 * refuses. Transfers through the whole transport (chunks, pacing, one in flight per peer,
 * refusals, close()) are in grpc-snapshot.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { nodeId, type NodeId } from "../../src/raft/index.ts";
import {
  type OutgoingSnapshot,
  SnapshotSender,
  snapshotSendConcurrency,
} from "../../src/replication/snapshot-sender.ts";
import { systemPaceClock } from "../../src/replication/rate-limiter.ts";
import { MAX_SNAPSHOT_CHUNK_BYTES } from "../../src/replication/snapshot-transfer.ts";
import type { ShardMessage } from "../../src/replication/index.ts";
import {
  eventually,
  type LogLine,
  N1,
  N2,
  recordingLogger,
  snapshotImage,
  snapshotMessage,
  startRaftServer,
  testLinks,
} from "./peer-support.ts";

function snapshot(shard: number, bytes: number, to: NodeId = N2): OutgoingSnapshot {
  return { shard, message: snapshotMessage(40 + shard, snapshotImage(bytes, 40 + shard), to) };
}

function sender(
  resolve: (node: string) => string | null,
  lines: LogLine[],
  chunkBytes = 4096,
): { snapshots: SnapshotSender; close(): Promise<void> } {
  const log = recordingLogger(lines);
  const { links, closing, close } = testLinks({ resolve, log });
  const snapshots = new SnapshotSender({
    links,
    self: N1,
    replicaId: N1,
    clusterId: "c1",
    chunkBytes,
    rateBytesPerSec: 1 << 30,
    learnerRateBytesPerSec: 1 << 30,
    clock: systemPaceClock,
    maxTransfers: 8,
    tooLargeHoldMs: 60_000,
    stallTimeoutMs: 5_000,
    metrics: undefined,
    log,
    shardWorker: undefined,
    closing: closing.signal,
  });
  return {
    snapshots,
    async close() {
      closing.abort();
      snapshots.dropQueued();
      await close();
    },
  };
}

describe("SnapshotSender", () => {
  it("reports one outcome for a round's snapshots: false when one failed; each counted", async () => {
    const got: ShardMessage[] = [];
    const server = await startRaftServer((_from, messages) => got.push(...messages), {
      clusterId: "c1",
      nodeId: "n2",
      maxSnapshotBytes: 10_000,
    });
    const lines: LogLine[] = [];
    const s = sender(() => server.address, lines);
    try {
      const outcomes: boolean[] = [];
      const small = snapshot(1, 9_000);
      s.snapshots.enqueue(N2, [small, snapshot(2, 20_000)], (d) => outcomes.push(d));
      assert.deepEqual(s.snapshots.stats(N2), {
        snapshotsSent: 0,
        snapshotsFailed: 0,
        snapshotBytesSent: 0,
        snapshotInFlight: true,
        snapshotsQueued: 1,
      });
      await eventually("the outcome", () => outcomes.length === 1);
      assert.deepEqual(outcomes, [false]);
      assert.deepEqual(
        got.map((m) => m.shard),
        [1],
        "the first arrived",
      );
      const stats = s.snapshots.stats(N2);
      assert.equal(stats.snapshotsSent, 1);
      assert.equal(stats.snapshotsFailed, 1);
      assert.equal(stats.snapshotInFlight, false);
      assert.equal(stats.snapshotsQueued, 0);
      const failed = lines.find((l) => l.message === "raft snapshot not sent");
      assert.equal(failed?.level, "warn");
      assert.equal(failed?.fields["code"], "RESOURCE_EXHAUSTED");
      assert.equal(failed?.fields["shard_id"], 2);
      assert.equal(s.snapshots.stats(nodeId("n9")).snapshotsSent, 0, "a peer never sent to");
    } finally {
      await s.close();
      server.stop();
    }
  });

  it("fails a snapshot to a peer whose address is not known, and goes on with the next", async () => {
    const lines: LogLine[] = [];
    const s = sender(() => null, lines);
    try {
      const outcomes: boolean[] = [];
      s.snapshots.enqueue(N2, [snapshot(1, 100)], (d) => outcomes.push(d));
      s.snapshots.enqueue(N2, [snapshot(2, 100)], (d) => outcomes.push(d));
      await eventually("both outcomes", () => outcomes.length === 2);
      assert.deepEqual(outcomes, [false, false]);
      const failures = lines.filter((l) => l.message === "raft snapshot not sent");
      assert.deepEqual(
        failures.map((l) => [l.level, l.fields["shard_id"], l.fields["details"]]),
        [
          ["warn", 1, "Error: the address of n2 is not known"],
          ["warn", 2, "Error: the address of n2 is not known"],
        ],
      );
      assert.equal(s.snapshots.stats(N2).snapshotsFailed, 2);
    } finally {
      await s.close();
    }
  });

  it("streams few enough snapshots at once for each to keep four times the receivers' floor", () => {
    const MIB = 1024 * 1024;
    const at = (rate: number, learnerRate: number, chunkBytes = MIB): number =>
      snapshotSendConcurrency({
        rateBytesPerSec: rate,
        learnerRateBytesPerSec: learnerRate,
        chunkBytes,
      });
    // 1 MiB a minute each: a learner's transfer passes both limiters (1/(1/1 + 1/1) = 0.5 MiB/s).
    assert.equal(at(MIB, MIB), 7, "the lowest rates the configuration allows");
    assert.equal(at(64 * MIB, 4 * MIB), 56, "the defaults");
    assert.equal(at(MIB, MIB, 4 * MIB), 1, "a chunk in each quarter of the window");
    assert.equal(at(1024, 1024), 1, "never none");
    const small = snapshotSendConcurrency({
      rateBytesPerSec: 160 * 1024,
      learnerRateBytesPerSec: 1 << 30,
      chunkBytes: 4096,
      progressWindowMs: 100,
      minProgressBytes: 1024,
    });
    assert.equal(small, 1, "the receivers' pace as given: a 4 KiB chunk in each 25 ms");
  });

  it("wants a positive whole number of bytes a chunk, no more than a receiver takes", () => {
    for (const bad of [0, -1, 1.5, Number.NaN, MAX_SNAPSHOT_CHUNK_BYTES + 1]) {
      assert.throws(() => sender(() => null, [], bad), RangeError);
    }
  });
});
