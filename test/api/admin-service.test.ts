/**
 * Admin.TransferLeader without a meta group (transferInPlace: a single node, a shard worker's own
 * shards), over a real single-node MultiRaft: what it answers, and that asking changes nothing it
 * was not asked to change.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { toServiceError, transferInPlace } from "../../src/api/index.ts";
import type { MultiRaft } from "../../src/replication/index.ts";
import { openLeaderStore } from "./forward-support.ts";

let dir: string;
let store: MultiRaft;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "cairn-admin-"));
  store = await openLeaderStore(dir);
});

after(async () => {
  await store.close();
  await rm(dir, { recursive: true, force: true });
});

async function answer(id: number, to: string): Promise<{ code: number; cairnCode?: string }> {
  try {
    await transferInPlace(store, id, to);
    return { code: status.OK };
  } catch (err) {
    const e = toServiceError(err);
    return { code: e.code ?? -1, cairnCode: String(e.metadata?.get("cairn-error-code")[0]) };
  }
}

describe("Admin.TransferLeader on a single node", () => {
  it("refuses a shard that holds no data here, as SnapshotShard does, and creates nothing", async () => {
    const before = store.shardIds();
    assert.ok(!before.includes(5) && !before.includes(6));
    // A typo's node, and this node itself: the shard has no group here, no leader to move.
    assert.deepEqual(await answer(5, "nX"), {
      code: status.FAILED_PRECONDITION,
      cairnCode: "CAIRN_ERR_SHARD_NOT_ACTIVE",
    });
    assert.deepEqual(await answer(6, "n1"), {
      code: status.FAILED_PRECONDITION,
      cairnCode: "CAIRN_ERR_SHARD_NOT_ACTIVE",
    });
    assert.deepEqual(store.shardIds(), before, "no shard was opened to answer");
  });

  it("answers the leader of a shard that holds data, and refuses a node that is not its replica", async () => {
    await store.put(Buffer.from("k"), Buffer.from("v"));
    const id = store.shardIds().find((s) => s !== 0) ?? 0;
    assert.equal(await transferInPlace(store, id, "n1"), "n1");
    assert.deepEqual(await answer(id, "nX"), {
      code: status.INVALID_ARGUMENT,
      cairnCode: "CAIRN_ERR_INVALID_ARGUMENT",
    });
  });
});
