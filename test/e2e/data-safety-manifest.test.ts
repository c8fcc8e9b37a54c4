/**
 * A damaged last manifest record is refused, not read as a torn tail (issue 51, item 3), on a
 * real process: the record that adds a flushed table was acknowledged (the WAL was compacted
 * behind it), so dropping it and deleting the table as an orphan would lose acknowledged keys.
 * The node exits 1 with CAIRN_ERR_CORRUPTION naming the manifest and the table it could not
 * account for, deletes no file, and once the record is repaired serves every key again.
 */
import assert from "node:assert/strict";
import { mkdtemp, readdir, readFile, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { after, before, describe, it } from "node:test";
import { startExpectingExit } from "../support/failed-start.ts";
import { type Clients, connect } from "../support/grpc-client.ts";
import { startServer } from "../support/server-process.ts";

// Four shards, so each holds a few keys; values of 2 KiB, so 40 keys fill a 64 KiB memtable.
const ENV = { CAIRN_CLUSTER_TOTAL_SHARDS: "4", CAIRN_STORAGE_MEMTABLE_BYTES: "64KiB" };
const VALUE = "v".repeat(2048);
let root: string;

async function withServer(dir: string, fn: (c: Clients) => Promise<void>): Promise<void> {
  const server = await startServer({ dataDir: dir, env: ENV });
  const c = connect(server.rpc);
  try {
    await fn(c);
  } finally {
    c.close();
    assert.equal((await server.stop()).code, 0);
  }
}

const keys = (prefix: string, n: number): string[] =>
  Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

/** The offset and length of each record of a manifest (u32 length | u32 crc | body). */
function records(buf: Buffer): { at: number; len: number }[] {
  const out: { at: number; len: number }[] = [];
  for (let at = 0; at + 8 <= buf.length; at += 8 + buf.readUInt32LE(at)) {
    out.push({ at, len: buf.readUInt32LE(at) });
  }
  return out;
}

/** The table files of every shard directory, sorted. */
async function tableFiles(dir: string): Promise<string[]> {
  const out: string[] = [];
  for (const shard of await readdir(join(dir, "shards"))) {
    for (const name of await readdir(join(dir, "shards", shard), { recursive: true })) {
      if (name.endsWith(".sst")) out.push(join(shard, name));
    }
  }
  return out.sort();
}

describe("a damaged last manifest record", () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "cairn-e2e-manifest-"));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("is refused with the manifest and table named; no table is deleted, nothing is lost", async () => {
    const dir = await mkdtemp(join(root, "d-"));
    await withServer(dir, async (c) => {
      for (const k of keys("a", 80)) {
        await c.call(c.kv, "Put", { key: Buffer.from(k), value: Buffer.from(VALUE) });
      }
      // Flush every shard and compact the WAL behind the tables: the tables alone hold the keys.
      for (let id = 0; id < 4; id++) await c.call(c.admin, "SnapshotShard", { shard_id: id });
    });

    // The shard whose manifest's last record adds a table (a flush).
    let target: { path: string; buf: Buffer; at: number; len: number; table: number } | undefined;
    for (const shard of await readdir(join(dir, "shards"))) {
      const shardDir = join(dir, "shards", shard);
      const current = (await readFile(join(shardDir, "CURRENT"), "utf8")).trim();
      const path = join(shardDir, current);
      const buf = await readFile(path);
      const last = records(buf).at(-1);
      assert.ok(last !== undefined && last.at + 8 + last.len === buf.length, path);
      const edit = JSON.parse(buf.toString("utf8", last.at + 8, last.at + 8 + last.len)) as {
        add?: { number: number }[];
      };
      const added = edit.add?.[0];
      if (added !== undefined) {
        target = { path, buf, at: last.at, len: last.len, table: added.number };
        break;
      }
    }
    assert.ok(target !== undefined, "no shard's last manifest record adds a table");
    const tablesBefore = await tableFiles(dir);
    const shardDir = dirname(target.path);
    const shardBefore = (await readdir(shardDir, { recursive: true })).sort();

    // One flipped byte inside the record's body: its length is whole, its checksum fails.
    const damaged = Buffer.from(target.buf);
    const at = target.at + 8 + Math.floor(target.len / 2);
    damaged[at] = (damaged[at] as number) ^ 0x01;
    await writeFile(target.path, damaged);

    const failed = await startExpectingExit({ dataDir: dir, env: ENV });
    assert.equal(failed.code, 1, failed.stderr);
    assert.equal(failed.errorCode, "CAIRN_ERR_CORRUPTION", failed.lines.join("\n"));
    const table = `${String(target.table).padStart(6, "0")}.sst`;
    const refusal = failed.lines.find(
      (l) => l.includes('"level":"ERROR"') && l.includes(target.path),
    );
    assert.ok(refusal !== undefined, failed.lines.join("\n"));
    assert.match(refusal, /damaged/);
    assert.ok(refusal.includes(table), refusal);
    // What to do: this single node's tables are the shard's only copy.
    assert.match(refusal, /only copy of shard \d+: restore a backup \(docs\/operations.md/);
    // A node that never started is not said to have stopped.
    assert.ok(!failed.lines.some((l) => l.includes('"message":"node stopped"')), refusal);
    // No table was deleted or moved anywhere, and the damaged shard's directory is as it was
    // (the other shards opened normally: each wrote a fresh manifest).
    assert.deepEqual(await tableFiles(dir), tablesBefore);
    assert.deepEqual((await readdir(shardDir, { recursive: true })).sort(), shardBefore);
    assert.deepEqual(await readFile(target.path), damaged);

    // Repaired, the node starts and serves every acknowledged key.
    await writeFile(target.path, target.buf);
    await withServer(dir, async (c) => {
      for (const k of keys("a", 80)) {
        const got = await c.call(c.kv, "Get", { key: Buffer.from(k) });
        assert.equal((got["value"] as Buffer).length, VALUE.length, k);
      }
    });
  });
});
