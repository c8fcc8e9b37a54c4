/**
 * A follower's read index across nodes (read-index.ts): the leader's answers, shard by shard.
 * The whole call over real sockets, behind both receivers, is in grpc-transport.test.ts.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CairnError } from "../../src/common/errors.ts";
import { nodeId, NotLeaderError } from "../../src/raft/index.ts";
import { READ_INDEX_SHARD_TIMEOUT_MS, readIndexResults } from "../../src/replication/read-index.ts";
import type { ReadVoucher } from "../../src/replication/index.ts";

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
});
