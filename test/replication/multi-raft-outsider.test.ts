/**
 * A message from a node its group never had, to a group with a single voter (the meta group of
 * a one-node cluster, a shard of replication_factor 1). The peers' service takes a sender it does
 * not know when it names the cluster's id (handshake.ts): any caller can be one. Its refusal
 * went out as any answer does, and the driver's check that a sole voter talks only to its
 * learners took it for a group whose configuration is wrong, and stopped the node (a review of
 * 2026-12-06, on a live one-node cluster).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { logIndex, type Message, nodeId, term } from "../../src/raft/index.ts";
import {
  MultiRaft,
  type MultiRaftOptions,
  type ShardMessage,
} from "../../src/replication/index.ts";
import { MemoryEngine } from "../../src/replication/memory-engine.ts";
import { MemoryFileSystem } from "../../src/storage/index.ts";
import { eventually } from "./peer-support.ts";

describe("a single-voter group and a sender it never had", () => {
  it("answers a stale term's heartbeat, and the node goes on", async () => {
    const fs = new MemoryFileSystem();
    const sent: { to: string; message: Message }[] = [];
    const options: MultiRaftOptions = {
      nodeId: "n1",
      dataDir: "/data",
      fs,
      totalShards: 4,
      tickMs: 10,
      electionTicks: 10,
      heartbeatTicks: 1,
      memtableBytes: 64 * 1024,
      blockCacheBytes: 1 << 20,
      openEngine: (_shard: number, dir: string) => MemoryEngine.open(fs, dir),
      transport: {
        send: (to: string, messages: readonly ShardMessage[]) => {
          for (const { message } of messages) sent.push({ to, message });
        },
        flush: () => undefined,
      },
      replicasOf: () => ["n1"],
    };
    const mr = await MultiRaft.open(options);
    try {
      await mr.foundShard(0, ["n1"], []);
      await eventually("n1 leads shard 0", () => mr.shardInfo(0)?.role === "leader");
      const now = mr.shardInfo(0)?.term ?? 0;
      assert.ok(now >= 1);
      const heartbeat: Message = {
        type: "heartbeat",
        from: nodeId("evil"),
        to: nodeId("n1"),
        term: term(now - 1),
        commit: logIndex(0),
        readSeq: 0,
        quiesce: false,
        noReply: false,
      };
      mr.receive("evil", [{ shard: 0, message: heartbeat }]);
      await eventually(
        "the heartbeat answered, or the node failed",
        () => mr.failure !== undefined || sent.some((s) => s.to === "evil"),
      );
      assert.equal(mr.failure, undefined, "the node goes on");
      const answer = sent.find((s) => s.to === "evil")?.message;
      assert.equal(answer?.type, "append-resp", "the stale sender learns the term");
      // And serves: a write commits.
      const put = await mr.put(new TextEncoder().encode("k"), new TextEncoder().encode("v"));
      assert.equal(put.type, "written");
    } finally {
      await mr.close();
    }
  });
});
