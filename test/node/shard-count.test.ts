/**
 * The data directory's record of cluster.total_shards (src/node/shard-count.ts): recorded at the
 * first start, another number refused naming both once anything is written, and a record with
 * nothing written under it (a start that failed before it opened its storage) binds nothing.
 */
import assert from "node:assert/strict";
import { mkdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { checkTotalShards } from "../../src/node/shard-count.ts";
import { tempDir } from "../storage/helpers.ts";

const recorded = (dir: string): string => readFileSync(join(dir, "total-shards"), "utf8");

describe("the data directory's total_shards", () => {
  it("records it and refuses another number once a WAL holds data", async () => {
    const dir = tempDir("shards");
    await checkTotalShards(dir, 16);
    assert.equal(recorded(dir), "16\n");
    mkdirSync(join(dir, "wal"));
    writeFileSync(join(dir, "wal", "00000000000000000001.wal"), "x");
    await checkTotalShards(dir, 16);
    await assert.rejects(checkTotalShards(dir, 32), {
      code: "CAIRN_ERR_SHARD_COUNT_MISMATCH",
      message: new RegExp(
        `data directory ${dir} was written with cluster.total_shards 16, but cluster.total_shards is 32`,
      ),
    });
    assert.equal(recorded(dir), "16\n");
  });

  it("lets a record with nothing written under it go", async () => {
    const dir = tempDir("shards");
    await checkTotalShards(dir, 16);
    mkdirSync(join(dir, "wal"));
    await checkTotalShards(dir, 32);
    assert.equal(recorded(dir), "32\n");
  });

  it("stays bound while its WAL is missing (created, then lost): the loss is refused later, not the record rewritten", async () => {
    const dir = tempDir("shards");
    await checkTotalShards(dir, 16);
    // The WAL was created (its marker, written with it), then its directory deleted.
    writeFileSync(
      join(dir, "wal.created"),
      "this WAL was created; if it is missing, it was lost\n",
    );
    await assert.rejects(checkTotalShards(dir, 32), { code: "CAIRN_ERR_SHARD_COUNT_MISMATCH" });
    assert.equal(recorded(dir), "16\n");
    // A shard worker's WAL the same.
    const workers = tempDir("shards");
    await checkTotalShards(workers, 16);
    writeFileSync(join(workers, "wal-worker-1.created"), "created\n");
    await assert.rejects(checkTotalShards(workers, 32), { code: "CAIRN_ERR_SHARD_COUNT_MISMATCH" });
    assert.equal(recorded(workers), "16\n");
  });

  it("refuses a record that is not a number", async () => {
    const dir = tempDir("shards");
    writeFileSync(join(dir, "total-shards"), "many\n");
    await assert.rejects(checkTotalShards(dir, 16), { code: "CAIRN_ERR_SHARD_COUNT_MISMATCH" });
  });
});
