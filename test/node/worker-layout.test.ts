/**
 * The data directory's record of its number of shard workers (src/node/worker-layout.ts): a
 * directory is bound to the number it was written with, and a record with nothing written under
 * it (a first start that failed before it opened its storage) binds nothing.
 */
import assert from "node:assert/strict";
import { existsSync, mkdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { checkShardWorkers, walDirOf } from "../../src/node/worker-layout.ts";
import { tempDir } from "../storage/helpers.ts";

const recorded = (dir: string): string | null =>
  existsSync(join(dir, "shard-workers")) ? readFileSync(join(dir, "shard-workers"), "utf8") : null;

describe("shard workers' data directory layout", () => {
  it("records the number in a new directory and refuses another once a worker's WAL holds data", async () => {
    const dir = tempDir("layout");
    await checkShardWorkers(dir, 3);
    assert.equal(recorded(dir), "3\n");
    await checkShardWorkers(dir, 3);
    mkdirSync(walDirOf(dir, 3, 2), { recursive: true });
    writeFileSync(join(walDirOf(dir, 3, 2), "00000000000000000001.wal"), "x");
    await assert.rejects(checkShardWorkers(dir, 2), { code: "CAIRN_ERR_SHARD_WORKERS_MISMATCH" });
    await assert.rejects(checkShardWorkers(dir, 1), { code: "CAIRN_ERR_SHARD_WORKERS_MISMATCH" });
    assert.equal(recorded(dir), "3\n");
  });

  it("lets a record with nothing written under it go: the directory is new", async () => {
    const dir = tempDir("layout");
    await checkShardWorkers(dir, 3);
    // The first start failed before it opened its storage (a port in use): another number now.
    await checkShardWorkers(dir, 2);
    assert.equal(recorded(dir), "2\n");
    await checkShardWorkers(dir, 1);
    assert.equal(recorded(dir), null);
    mkdirSync(join(dir, "shards", "0"), { recursive: true });
    await assert.rejects(checkShardWorkers(dir, 2), { code: "CAIRN_ERR_SHARD_WORKERS_MISMATCH" });
  });

  it("a WAL created and since lost still binds the number: its loss is refused, not taken for a new directory", async () => {
    const dir = tempDir("layout");
    await checkShardWorkers(dir, 2);
    // Both workers' WALs were created (their markers), then deleted; no table was flushed.
    for (const i of [0, 1]) writeFileSync(`${walDirOf(dir, 2, i)}.created`, "created\n");
    await assert.rejects(checkShardWorkers(dir, 1), { code: "CAIRN_ERR_SHARD_WORKERS_MISMATCH" });
    assert.equal(recorded(dir), "2\n");
    await assert.rejects(checkShardWorkers(dir, 3), { code: "CAIRN_ERR_SHARD_WORKERS_MISMATCH" });
    // A single node's lost WAL the same, started with workers.
    const single = tempDir("layout");
    writeFileSync(join(single, "wal.created"), "created\n");
    await assert.rejects(checkShardWorkers(single, 2), {
      code: "CAIRN_ERR_SHARD_WORKERS_MISMATCH",
    });
    assert.equal(recorded(single), null);
  });

  it("a lost record with workers' WALs left is refused, naming them, whatever the number now", async () => {
    // The record deleted by hand: a start with 1 opened a new `wal` beside the workers' WALs
    // (their unflushed writes never replayed), and one with another number named 1 as recorded.
    const dir = tempDir("layout");
    await checkShardWorkers(dir, 3);
    for (const i of [0, 1, 2]) {
      mkdirSync(walDirOf(dir, 3, i), { recursive: true });
      writeFileSync(join(walDirOf(dir, 3, i), "00000000000000000001.wal"), "x");
    }
    rmSync(join(dir, "shard-workers"));
    for (const n of [1, 2, 3]) {
      await assert.rejects(checkShardWorkers(dir, n), (err: Error & { code?: string }) => {
        assert.equal(err.code, "CAIRN_ERR_SHARD_WORKERS_MISMATCH");
        assert.match(err.message, /wal-worker-0 to wal-worker-2/);
        return true;
      });
    }
    assert.equal(existsSync(join(dir, "wal")), false, "no WAL of a single node made beside them");
  });
});
