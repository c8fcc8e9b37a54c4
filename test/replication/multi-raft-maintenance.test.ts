/**
 * retainedFrom: how far a group's log may be compacted. Each case names the rule that decides:
 * a follower compacts to what its engine holds; a leader keeps what its slowest member still
 * needs, but never more than RETAINED_ENTRIES beyond what its engine holds. And the pass itself
 * makes durable what rounds appended without a sync.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  type ConfState,
  type LogIndex,
  logIndex,
  type Message,
  nodeId,
  type NodeId,
  type Role,
  term,
} from "../../src/raft/index.ts";
import { MultiRaft, type ShardEngine, type ShardMessage } from "../../src/replication/index.ts";
import { encodeCommand } from "../../src/replication/commands.ts";
import { MemoryEngine } from "../../src/replication/memory-engine.ts";
import {
  Maintenance,
  RETAINED_ENTRIES,
  retainedFrom,
} from "../../src/replication/multi-raft-maintenance.ts";
import { MemoryFileSystem, Wal } from "../../src/storage/index.ts";
import { DenseMap } from "../../src/common/dense-map.ts";

const conf = (voters: string[], learners: string[] = []): ConfState =>
  ({ voters: voters.map(nodeId), learners: learners.map(nodeId) }) as unknown as ConfState;

function group(role: Role, matches: Record<string, number | null>) {
  return {
    role,
    matchOf(id: NodeId): LogIndex | null {
      const m = matches[id];
      return m === undefined || m === null ? null : logIndex(m);
    },
  };
}

const self = nodeId("a");

describe("retainedFrom", () => {
  it("a follower compacts to what its engine holds (it sends no entries)", () => {
    const raw = group("follower", { b: 10, c: 20 });
    assert.equal(retainedFrom(raw, conf(["a", "b", "c"]), self, 500), 500);
  });

  it("a leader keeps what its slowest member still needs", () => {
    const raw = group("leader", { a: 1, b: 300, c: 450 });
    assert.equal(retainedFrom(raw, conf(["a", "b", "c"]), self, 500), 300);
  });

  it("a learner behind counts as a voter does", () => {
    const raw = group("leader", { b: 480, d: 120 });
    assert.equal(retainedFrom(raw, conf(["a", "b"], ["d"]), self, 500), 120);
  });

  it("a leader's own match index and members ahead of its engine do not hold it back", () => {
    const raw = group("leader", { a: 0, b: 900, c: 700 });
    assert.equal(retainedFrom(raw, conf(["a", "b", "c"]), self, 500), 500);
  });

  it("a member whose match is unknown holds nothing back", () => {
    const raw = group("leader", { b: null, c: 480 });
    assert.equal(retainedFrom(raw, conf(["a", "b", "c"]), self, 500), 480);
  });

  it("never keeps more than RETAINED_ENTRIES beyond what the engine holds", () => {
    const flushed = RETAINED_ENTRIES + 2_000;
    const raw = group("leader", { b: 10, c: flushed });
    assert.equal(retainedFrom(raw, conf(["a", "b", "c"]), self, flushed), 2_000);
  });

  it("a leader alone compacts to what its engine holds", () => {
    assert.equal(retainedFrom(group("leader", { a: 42 }), conf(["a"]), self, 500), 500);
  });
});

describe("the maintenance pass", () => {
  it("makes durable a commit index a round appended without a sync: it survives a crash", async () => {
    // A follower learns a commit index alone (no new entry): its round appends the hard state
    // without a sync (needsSync). An idle group runs no round after it, so without the pass
    // a crash lost it, and a follower restarted without its peers never applied the writes
    // it had applied before (docs/operations.md, "Lost a quorum").
    const fs = new MemoryFileSystem();
    const wal = await Wal.open("/wal", { fs, segmentBytes: 64 * 1024 });
    const entry = { term: 1, index: 1, type: 0, data: new Uint8Array([1]) };
    wal.append([
      { kind: "entries", shard: 3, entries: [entry] },
      { kind: "hard-state", shard: 3, state: { term: 1, vote: "a", commit: 0 } },
    ]);
    await wal.sync();
    wal.append([{ kind: "hard-state", shard: 3, state: { term: 1, vote: "a", commit: 1 } }]);
    const failures: unknown[] = [];
    const pass = new Maintenance({
      shards: new DenseMap(),
      wal,
      replicaId: nodeId("a"),
      stopped: () => false,
      fail: (err) => failures.push(err),
      checkShardId: () => undefined,
    });
    await pass.maintain();
    assert.deepEqual(failures, []);
    fs.crash(); // a power cut: only what was synced survives
    const after = await Wal.open("/wal", { fs });
    assert.equal(after.hardState(3)?.commit, 1);
    await after.close();
  });

  it("a flush whose engine a replica removal closes meanwhile does not fail the node", async () => {
    // The pass flushes shard 1 (the WAL is over its budget) while replica GC removes shard 1's
    // replica: the removal closes the engine without waiting for the pass. An LsmEngine's
    // flush() rejects when close() begins before its memtable's flush started (behind
    // MAX_CONCURRENT_FLUSHES running ones), and the pass failed the node for it.
    const fs = new MemoryFileSystem();
    /** Resolved once n2 acknowledges n1's append to shard 1: it holds a replica of it. */
    const answered = Promise.withResolvers<undefined>();
    const fatals: unknown[] = [];
    let flushing = false;
    /** Shard 1's engine, whose flush waits until close() rejects it, as LsmEngine's can. */
    const flushRejectedByClose = (engine: ShardEngine): ShardEngine => {
      let rejectFlush: ((err: Error) => void) | null = null;
      return new Proxy(engine, {
        get(target, p) {
          if (p === "flush") {
            return (): Promise<void> => {
              flushing = true;
              return new Promise<void>((_resolve, reject) => (rejectFlush = reject));
            };
          }
          if (p === "close") {
            return async (): Promise<void> => {
              rejectFlush?.(new Error("closed while its flush waited"));
              await target.close();
            };
          }
          const v: unknown = Reflect.get(target, p, target);
          return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        },
      });
    };
    const mr = await MultiRaft.open({
      nodeId: "n2",
      dataDir: "/data",
      fs,
      totalShards: 4,
      tickMs: 1_000_000,
      electionTicks: 10,
      heartbeatTicks: 1,
      memtableBytes: 64 * 1024,
      blockCacheBytes: 1 << 20,
      wal: { memoryBudgetBytes: 1 },
      openEngine: async (shard, dir) => {
        const engine = await MemoryEngine.open(fs, dir);
        return shard === 1 ? flushRejectedByClose(engine) : engine;
      },
      transport: {
        send: (_to: string, messages: readonly ShardMessage[]) => {
          if (messages.some((m) => m.message.type === "append-resp")) answered.resolve(undefined);
        },
        flush: () => undefined,
      },
      replicasOf: () => ["n1", "n2", "n3"],
      observer: { fatal: (err) => fatals.push(err) },
    });
    try {
      const entries = [4, 5, 6].map((i) => ({
        term: term(1),
        index: logIndex(i),
        type: "normal" as const,
        // A Put of ~100 bytes (a follower drops an append whose entries hold no command).
        data: encodeCommand({ op: "put", key: new Uint8Array([i]), value: new Uint8Array(90) }),
      }));
      const append: Message = {
        type: "append",
        from: nodeId("n1"),
        to: nodeId("n2"),
        term: term(1),
        prevIndex: logIndex(3),
        prevTerm: term(1),
        entries,
        commit: logIndex(3),
        noReply: false,
      };
      mr.receive("n1", [{ shard: 1, message: append }]);
      await answered.promise;
      const pass = mr.maintain();
      assert.ok(flushing, "the pass flushes shard 1");
      const removed = await mr.removeReplica(1, () => Promise.resolve(true));
      await pass;
      assert.equal(removed.kind, "removed");
      assert.equal(mr.failure, undefined);
      assert.deepEqual(fatals, []);
    } finally {
      await mr.close();
    }
  });
});
