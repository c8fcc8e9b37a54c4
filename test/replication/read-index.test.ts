/**
 * A follower's read index across nodes (read-index.ts): the follower's batching of its reads
 * into calls, one in flight per leader node (the calls answered here, in this process), and the
 * leader's answers, shard by shard. The whole call over real sockets, behind both receivers, is
 * in grpc-transport.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { deadlineClock } from "../../src/common/index.ts";
import { CairnError } from "../../src/common/errors.ts";
import { nodeId, type NodeId, NotLeaderError } from "../../src/raft/index.ts";
import {
  READ_INDEX_SHARD_TIMEOUT_MS,
  ReadIndexBatcher,
  readIndexResults,
} from "../../src/replication/read-index.ts";
import type { ReadVoucher } from "../../src/replication/index.ts";
import { ReadPastDeadlineError } from "../../src/replication/request-errors.ts";

function request(shards: number[], replica = "", terms: number[] = []) {
  return { cluster_id: "c1", shard_ids: shards, replica, terms };
}

describe("readIndexResults (the leader's side)", () => {
  it("answers every shard in order: its index, or its refusal as an error code", async () => {
    const results = await readIndexResults(
      (shard) => {
        if (shard === 13) return Promise.reject(new NotLeaderError(nodeId("n3")));
        if (shard === 14) return Promise.reject(new NotLeaderError(null));
        if (shard === 15) {
          return Promise.reject(new CairnError("CAIRN_ERR_SHUTTING_DOWN", "stopping"));
        }
        if (shard === 16) return Promise.reject(new Error("a bug"));
        return Promise.resolve(100 + shard);
      },
      request([5, 13, 14, 15, 16, 7]),
    );
    assert.deepEqual(results, [
      { index: 105 },
      { error_code: "CAIRN_ERR_NOT_LEADER", error: "not the leader (leader is n3)", leader: "n3" },
      { error_code: "CAIRN_ERR_NOT_LEADER", error: "not the leader (leader unknown)", leader: "" },
      { error_code: "CAIRN_ERR_SHUTTING_DOWN", error: "stopping" },
      { error_code: "CAIRN_ERR_INTERNAL", error: "a bug" },
      { index: 107 },
    ]);
  });

  it("passes the sender's vouchers on only with its replica, one term per shard, and a term above 0", async () => {
    const asked: [number, ReadVoucher | undefined][] = [];
    const readIndex = (shard: number, voucher?: ReadVoucher): Promise<number> => {
      asked.push([shard, voucher]);
      return Promise.resolve(1);
    };
    await readIndexResults(readIndex, request([1, 2], "n1@ab", [4, 0]));
    await readIndexResults(readIndex, request([3], "", [4]));
    await readIndexResults(readIndex, request([4, 5], "n1@ab", [4]));
    assert.deepEqual(asked, [
      [1, { replica: "n1@ab", term: 4 }],
      [2, undefined],
      [3, undefined],
      [4, undefined],
      [5, undefined],
    ]);
  });

  it("answers a shard that cannot confirm in time alone, retryably, without holding the others", async (t) => {
    t.mock.timers.enable({ apis: ["setTimeout"] });
    const pending = readIndexResults(
      (shard) => (shard === 2 ? new Promise<number>(() => undefined) : Promise.resolve(shard)),
      request([1, 2, 3]),
    );
    t.mock.timers.tick(READ_INDEX_SHARD_TIMEOUT_MS);
    const results = await pending;
    assert.deepEqual(results[0], { index: 1 });
    assert.equal(results[1]?.error_code, "CAIRN_ERR_TIMEOUT");
    assert.match(results[1]?.error ?? "", /shard 2's leadership was not confirmed within 2000 ms/);
    assert.deepEqual(results[2], { index: 3 });
  });

  it("gives each shard's read the moment its answer is given up on as its deadline", async () => {
    // Without it the leader's read kept waiting (and holding its share of the node's request
    // budget) up to the driver's 10 s after its answer had gone back as a timeout.
    const deadlines: number[] = [];
    const before = deadlineClock();
    await readIndexResults(
      (_shard, _voucher, deadline) => {
        deadlines.push(deadline);
        return Promise.resolve(1);
      },
      request([1, 2], "n1@ab", [4, 4]),
    );
    const after = deadlineClock();
    assert.equal(deadlines.length, 2);
    // A read that stops at that deadline is answered as one not confirmed in time, not as one
    // past its client's deadline (the follower passes the text on to its client).
    const [late] = await readIndexResults(
      () => Promise.reject(new ReadPastDeadlineError(2_000)),
      request([9]),
    );
    assert.equal(late?.error_code, "CAIRN_ERR_TIMEOUT");
    assert.match(late?.error ?? "", /shard 9's leadership was not confirmed within 2000 ms/);
    for (const d of deadlines) {
      assert.ok(
        d >= before + READ_INDEX_SHARD_TIMEOUT_MS && d <= after + READ_INDEX_SHARD_TIMEOUT_MS,
        `deadline ${d - before} ms away`,
      );
    }
  });
});

/** A ReadIndex call the test answers when it likes. */
interface HeldCall {
  readonly node: NodeId;
  readonly shards: number[];
  readonly terms: number[];
  answer(results: { index?: number; error_code?: string; error?: string; leader?: string }[]): void;
  fail(err: Error): void;
}

function heldCalls(): { calls: HeldCall[]; batcher: ReadIndexBatcher } {
  const calls: HeldCall[] = [];
  const batcher = new ReadIndexBatcher(
    (node, shards, terms) =>
      new Promise((resolve, reject) => {
        calls.push({
          node,
          shards,
          terms,
          answer: (results) =>
            resolve(
              results.map((r) => ({
                index: r.index ?? 0,
                error_code: r.error_code ?? "",
                error: r.error ?? "",
                leader: r.leader ?? "",
              })),
            ),
          fail: reject,
        });
      }),
  );
  return { calls, batcher };
}

const settled = (): Promise<void> => new Promise((r) => setImmediate(r));

describe("ReadIndexBatcher (the follower's side)", () => {
  it("holds the reads asked while a call is in flight for the next call, one entry per shard", async () => {
    const { calls, batcher } = heldCalls();
    const first = batcher.read(nodeId("n2"), 5, 1_000);
    assert.equal(calls.length, 1, "the first read goes at once");
    // Asked while the first call is in flight: the answer it brings must not serve them.
    const later = [
      batcher.read(nodeId("n2@ab"), 5, 1_000, 3),
      batcher.read(nodeId("n2"), 7, 1_000),
      batcher.read(nodeId("n2"), 5, 1_000, 4),
    ];
    assert.equal(calls.length, 1, "no second call while one is in flight");
    calls[0]?.answer([{ index: 105 }]);
    assert.equal(await first, 105);
    await settled();
    assert.equal(calls.length, 2);
    assert.equal(calls[1]?.node, "n2", "a replica id names its node");
    assert.deepEqual(calls[1]?.shards, [5, 7]);
    assert.deepEqual(calls[1]?.terms, [4, 0], "the highest term asked per shard; 0 for none");
    calls[1]?.answer([{ index: 205 }, { index: 207 }]);
    assert.deepEqual(await Promise.all(later), [205, 207, 205]);
    await settled();
    assert.equal(calls.length, 2, "nothing more to send");
  });

  it("sends to each leader node on its own, concurrently", async () => {
    const { calls, batcher } = heldCalls();
    const a = batcher.read(nodeId("n2"), 1, 1_000);
    const b = batcher.read(nodeId("n3"), 1, 1_000);
    assert.deepEqual(
      calls.map((c) => c.node),
      ["n2", "n3"],
    );
    calls[1]?.answer([{ index: 30 }]);
    calls[0]?.answer([{ index: 20 }]);
    assert.deepEqual(await Promise.all([a, b]), [20, 30]);
  });

  it("rejects a read with its shard's refusal, and every read of a failed call; later calls go on", async () => {
    const { calls, batcher } = heldCalls();
    const first = batcher.read(nodeId("n2"), 9, 1_000);
    const reads = [11, 12, 13, 14].map((shard) => batcher.read(nodeId("n2"), shard, 1_000));
    calls[0]?.fail(new Error("14 UNAVAILABLE: the stream broke"));
    await assert.rejects(first, /the stream broke/);
    await settled();
    calls[1]?.answer([
      { error_code: "CAIRN_ERR_NOT_LEADER", error: "not the leader", leader: "n3" },
      { error_code: "CAIRN_ERR_NOT_LEADER", error: "not the leader" },
      { error_code: "CAIRN_ERR_TIMEOUT", error: "not confirmed" },
    ]);
    const [n3, unknown, timeout, missing] = await Promise.allSettled(reads);
    assert.ok(n3?.status === "rejected" && n3.reason instanceof NotLeaderError);
    assert.equal(n3.reason.leader, "n3");
    assert.ok(unknown?.status === "rejected" && unknown.reason instanceof NotLeaderError);
    assert.equal(unknown.reason.leader, null);
    assert.ok(timeout?.status === "rejected" && timeout.reason instanceof CairnError);
    assert.equal(timeout.reason.code, "CAIRN_ERR_TIMEOUT");
    assert.equal(timeout.reason.retryable, true);
    assert.ok(missing?.status === "rejected");
    assert.match(String(missing.reason), /no read index answered for shard 14/);
  });
});
