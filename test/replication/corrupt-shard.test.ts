import assert from "node:assert/strict";
import { mkdir, mkdtemp, readdir, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { CairnError } from "../../src/common/errors.ts";
import {
  corruptShardOf,
  explainCorruptShard,
  quarantineShard,
} from "../../src/replication/corrupt-shard.ts";
import { CorruptionError } from "../../src/storage/index.ts";

describe("corrupt shards (corrupt-shard.ts)", () => {
  const data = "/var/lib/cairn";

  it("names the shard of a corrupt file in its directory, through causes", () => {
    const table = new CorruptionError(`${data}/shards/24/000001.sst`, 0, "block checksum mismatch");
    assert.equal(corruptShardOf(table, data), 24);
    assert.equal(corruptShardOf(table, `${data}/`), 24, "a trailing slash");
    const wrapped = new CairnError("CAIRN_ERR_NODE_FAILED", "failed", {
      cause: new Error("x", { cause: table }),
    });
    assert.equal(corruptShardOf(wrapped, data), 24);
    // A manifest's own quarantine folder is still the shard's directory.
    const deeper = new CorruptionError(`${data}/shards/7/quarantine/MANIFEST-1/000002.sst`, 9, "x");
    assert.equal(corruptShardOf(deeper, data), 7);
  });

  it("names none for the WAL, another directory, a shard directory itself or another error", () => {
    const at = (file: string): number | null =>
      corruptShardOf(new CorruptionError(file, 0, "x"), data);
    assert.equal(at(`${data}/wal/00000000000000000001.wal`), null);
    assert.equal(at(`/elsewhere/shards/3/000001.sst`), null);
    assert.equal(at(`${data}/shards/3`), null);
    assert.equal(at(`${data}/shards/x/000001.sst`), null);
    assert.equal(at(`${data}/shards/../shards/3/000001.sst`), 3, "a path is resolved first");
    const disk = Object.assign(new Error("ENOSPC"), { code: "ENOSPC", file: `${data}/shards/3/a` });
    assert.equal(corruptShardOf(disk, data), null);
    assert.equal(corruptShardOf("a string", data), null);
  });

  it("explains a shard's corruption met at start: a cluster member's peers refill it", () => {
    const table = new CorruptionError(`${data}/shards/5/MANIFEST-000003`, 40, "checksum");
    const cluster = explainCorruptShard(table, data, true) as CairnError;
    assert.equal(cluster.code, "CAIRN_ERR_CORRUPTION");
    assert.equal(cluster.cause, table);
    assert.match(cluster.message, /^corruption in .*MANIFEST-000003 at offset 40: checksum; /);
    assert.match(
      cluster.message,
      /move \/var\/lib\/cairn\/shards\/5 out of .* peers refill shard 5/,
    );
    const single = explainCorruptShard(table, data, false) as CairnError;
    assert.match(single.message, /only copy of shard 5: restore a backup/);
    const other = new Error("EIO");
    assert.equal(explainCorruptShard(other, data, true), other);
  });

  describe("moving a shard's directory aside", () => {
    let root: string;
    before(async () => {
      root = await mkdtemp(join(tmpdir(), "cairn-corrupt-shard-"));
    });
    after(async () => {
      await rm(root, { recursive: true, force: true });
    });

    it("moves it whole under quarantine/, twice for the same shard without a clash", async () => {
      const dir = join(root, "shards", "3");
      await mkdir(dir, { recursive: true });
      await writeFile(join(dir, "000001.sst"), "table");
      const first = await quarantineShard(root, 3, new Date("2026-12-04T15:01:41.621Z"));
      assert.equal(first, join(root, "quarantine", "shard-3-20261204T150141.621Z"));
      assert.deepEqual(await readdir(first), ["000001.sst"]);
      assert.deepEqual(await readdir(join(root, "shards")), []);

      await mkdir(dir);
      await writeFile(join(dir, "000002.sst"), "table");
      const second = await quarantineShard(root, 3, new Date("2026-12-04T15:01:42.000Z"));
      assert.notEqual(second, first);
      assert.deepEqual((await readdir(join(root, "quarantine"))).length, 2);
    });

    it("fails, moving nothing, when the shard has no directory", async () => {
      await assert.rejects(quarantineShard(root, 9, new Date()), { code: "ENOENT" });
    });
  });
});
