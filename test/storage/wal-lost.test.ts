/**
 * A lost WAL is refused, not started afresh (issue 51, item 2): the WAL records that it was
 * created in a marker beside its directory, and a directory with the marker and no segment
 * (deleted, or emptied) throws CAIRN_ERR_LOST_STATE naming it, unless the loss is accepted.
 * And a write that fails names the segment file and the cause (item 7).
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, rmSync, truncateSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { nodeFileSystem, type FileSystem } from "../../src/storage/common/index.ts";
import { Wal } from "../../src/storage/wal/index.ts";
import { bytes, tempDir } from "./helpers.ts";

async function written(): Promise<{ dir: string; marker: string }> {
  const root = tempDir("wal-lost");
  const dir = join(root, "wal");
  const marker = `${dir}.created`;
  const wal = await Wal.open(dir, { createdMarker: marker });
  wal.append([
    { kind: "entries", shard: 1, entries: [{ index: 1, term: 1, type: 0, data: bytes("x") }] },
  ]);
  await wal.sync();
  await wal.close();
  assert.ok(existsSync(marker));
  return { dir, marker };
}

describe("a lost WAL", () => {
  it("refuses a deleted WAL directory, every time, naming it", async () => {
    const { dir, marker } = await written();
    rmSync(dir, { recursive: true });
    for (let i = 0; i < 2; i++) {
      await assert.rejects(Wal.open(dir, { createdMarker: marker }), {
        code: "CAIRN_ERR_LOST_STATE",
        message: new RegExp(`the WAL in ${dir} is missing or empty`),
      });
    }
    assert.deepEqual(readdirSync(dir), []);
  });

  it("refuses a WAL whose segments were emptied", async () => {
    const { dir, marker } = await written();
    for (const name of readdirSync(dir)) truncateSync(join(dir, name), 0);
    await assert.rejects(Wal.open(dir, { createdMarker: marker }), {
      code: "CAIRN_ERR_LOST_STATE",
    });
  });

  it("starts a new WAL when the loss is accepted, and reports it", async () => {
    const { dir, marker } = await written();
    rmSync(dir, { recursive: true });
    const wal = await Wal.open(dir, { createdMarker: marker, acceptLoss: true });
    assert.equal(wal.lost, true);
    assert.deepEqual(wal.shards(), []);
    await wal.close();
    const again = await Wal.open(dir, { createdMarker: marker });
    assert.equal(again.lost, false);
    await again.close();
  });

  it("writes the marker for a WAL written before it existed, and for a new one", async () => {
    const root = tempDir("wal-lost");
    const dir = join(root, "wal");
    (await Wal.open(dir)).close();
    const marker = `${dir}.created`;
    assert.equal(existsSync(marker), false);
    const wal = await Wal.open(dir, { createdMarker: marker });
    assert.equal(wal.lost, false);
    await wal.close();
    assert.ok(existsSync(marker));
  });
});

describe("a failed WAL write", () => {
  it("names the segment file and the cause (a full disk)", async () => {
    const enospc = (): never => {
      throw Object.assign(new Error("ENOSPC: no space left on device, write"), {
        code: "ENOSPC",
        errno: -28,
        syscall: "write",
      });
    };
    let full = false;
    const fs: FileSystem = {
      ...nodeFileSystem,
      async open(path, flags) {
        const file = await nodeFileSystem.open(path, flags);
        return {
          write: (...a) => (full ? Promise.reject(enospc()) : file.write(...a)),
          writeNow: (...a) => (full ? enospc() : (file.writeNow?.(...a) ?? 0)),
          truncate: (n) => file.truncate(n),
          sync: () => file.sync(),
          datasync: () => file.datasync(),
          close: () => file.close(),
        };
      },
    };
    const dir = tempDir("wal-full");
    const wal = await Wal.open(dir, { fs });
    full = true;
    wal.append([
      { kind: "entries", shard: 1, entries: [{ index: 1, term: 1, type: 0, data: bytes("x") }] },
    ]);
    await assert.rejects(wal.sync(), {
      code: "CAIRN_ERR_WAL_FAILED",
      message: new RegExp(
        `WAL write or sync to ${dir}/0+1\\.wal failed: no space left on device \\(the disk is full\\)`,
      ),
    });
    await wal.destroy();
  });
});
