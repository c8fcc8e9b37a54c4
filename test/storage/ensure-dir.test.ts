import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { ensureDir, MemoryFileSystem } from "../../src/storage/index.ts";

describe("ensureDir", () => {
  // A replica deleted here (replica GC: removeShardDir) and created again later in the same
  // process gets its shard directory back under the same path. ensureDir remembered that path
  // as durable from the first time and fsynced nothing: the new directory's name was not
  // durable while its engine's manifest and tables, and the WAL compaction they allowed, were.
  for (const [what, makeFirst] of [
    ["made again by the caller (an engine's first table)", true],
    ["made again by ensureDir", false],
  ] as const) {
    it(`makes a directory removed and ${what} durable again`, async () => {
      const fs = new MemoryFileSystem();
      await ensureDir(fs, "/data/shards/7");
      fs.removeTree("/data/shards/7");
      if (makeFirst) await fs.mkdirp("/data/shards/7");
      await ensureDir(fs, "/data/shards/7");
      fs.crash();
      assert.deepEqual(await fs.readdir("/data/shards"), ["7"]);
    });
  }

  it("fsyncs an ancestor once per process, the directory's own parent every time", async () => {
    const fs = new MemoryFileSystem();
    await ensureDir(fs, "/data/shards/1");
    const before = fs.operations;
    await ensureDir(fs, "/data/shards/2");
    // mkdirp, and the fsync of /data/shards: /data and / were made durable by the first call.
    assert.equal(fs.operations - before, 2);
  });
});
