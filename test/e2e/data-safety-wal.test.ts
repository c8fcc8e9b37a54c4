/**
 * A node that cannot prove its data is whole refuses to start (issue 51, items 2 and 4), on real
 * processes: a single node whose WAL was deleted, emptied, or replaced by an older copy while
 * its tables hold more, or whose shard directory was removed after the WAL dropped what it
 * held, exits 1 with CAIRN_ERR_LOST_STATE naming the file. With the documented recovery flag
 * (single node) it starts from what the tables hold, logs the loss at ERROR, and serves writes
 * again (never `entry N applied without an outcome`), its health consistent. A refused start
 * keeps the tables a lost manifest edit may have added (the only copy of their entries), and a
 * torn manifest tail's drop is logged with what it kept aside.
 */
import assert from "node:assert/strict";
import { appendFile, cp, mkdtemp, readdir, readFile, rename, rm, truncate } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type FailedStart, startExpectingExit } from "../support/failed-start.ts";
import { type Clients, connect } from "../support/grpc-client.ts";
import { type ServerProcess, startServer } from "../support/server-process.ts";

// Four shards, so each holds a few keys; values of 2 KiB, so 40 keys fill a 64 KiB memtable.
const ENV = { CAIRN_CLUSTER_TOTAL_SHARDS: "4", CAIRN_STORAGE_MEMTABLE_BYTES: "64KiB" };
const VALUE = "v".repeat(2048);
let root: string;

async function withServer<T>(
  dir: string,
  fn: (c: Clients, s: ServerProcess) => Promise<T>,
  args: readonly string[] = [],
  env: Readonly<Record<string, string>> = ENV,
): Promise<T> {
  const server = await startServer({ dataDir: dir, env, args });
  const c = connect(server.rpc);
  try {
    return await fn(c, server);
  } finally {
    c.close();
    assert.equal((await server.stop()).code, 0);
  }
}

async function put(c: Clients, keys: readonly string[]): Promise<void> {
  for (const k of keys)
    await c.call(c.kv, "Put", { key: Buffer.from(k), value: Buffer.from(VALUE) });
}

/** Flushes every shard's memtable into tables and compacts the WAL behind them. */
async function snapshotAll(c: Clients): Promise<void> {
  for (let id = 0; id < 4; id++) {
    await c.call(c.admin, "SnapshotShard", { shard_id: id }).catch((err: { details?: string }) => {
      // A shard no key reached holds no data.
      if (!String(err.details).includes("not active")) throw err;
    });
  }
}

const keys = (prefix: string, n: number): string[] =>
  Array.from({ length: n }, (_, i) => `${prefix}-${i}`);

function assertLost(failed: FailedStart, pattern: RegExp): void {
  assert.equal(failed.code, 1, failed.stderr);
  assert.equal(failed.errorCode, "CAIRN_ERR_LOST_STATE", failed.lines.join("\n"));
  assert.match(failed.stderr, pattern);
}

/**
 * A directory with tables (flushed keys `a-*`) and keys only in the WAL (`b-*`): a copy of one
 * written once for the cases that start from it (a stopped node's directory, copied as an
 * operator's backup would be).
 */
let template: Promise<string> | undefined;
async function written(): Promise<string> {
  template ??= (async () => {
    const dir = await mkdtemp(join(root, "template-"));
    await withServer(dir, async (c) => {
      await put(c, keys("a", 40));
      await snapshotAll(c);
      await put(c, keys("b", 5));
    });
    return dir;
  })();
  const dir = await mkdtemp(join(root, "d-"));
  await cp(await template, dir, { recursive: true });
  return dir;
}

/** A copy of written()'s directory, and the first of its shards with a directory. */
async function writtenShard(): Promise<{ dir: string; shard: string; shardDir: string }> {
  const dir = await written();
  const [shard] = await readdir(join(dir, "shards"));
  assert.ok(shard !== undefined);
  return { dir, shard, shardDir: join(dir, "shards", shard) };
}

describe("a single node's lost WAL or shard directory", () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "cairn-e2e-wal-"));
  });
  after(async () => {
    await rm(root, { recursive: true, force: true });
  });

  it("refuses a deleted WAL, then starts with the recovery flag from what the tables hold", async () => {
    const dir = await written();
    await rm(join(dir, "wal"), { recursive: true });
    assertLost(
      await startExpectingExit({ dataDir: dir, env: ENV }),
      new RegExp(`the WAL in ${dir}/wal is missing or empty`),
    );
    // Refused again: the refusal changed nothing.
    assertLost(await startExpectingExit({ dataDir: dir, env: ENV }), /missing or empty/);

    await withServer(
      dir,
      async (c, server) => {
        assert.ok(
          server.lines.some(
            (l) => l.includes('"level":"ERROR"') && l.includes("accepted the loss"),
          ),
          server.lines.join("\n"),
        );
        // What the tables hold is served; what only the WAL held is gone, as accepted.
        for (const k of keys("a", 40)) {
          const got = await c.call(c.kv, "Get", { key: Buffer.from(k) });
          assert.equal((got["value"] as Buffer).length, VALUE.length, k);
        }
        // Writes work again: no entry at an index the tables already applied.
        await put(c, [...keys("a", 40), ...keys("c", 10)]);
        const health = (await (await fetch(`http://${server.http}/health`)).json()) as {
          status: string;
          shards: { last_applied: number; commit_index: number }[];
        };
        assert.equal(health.status, "healthy");
        for (const s of health.shards) assert.ok(s.last_applied <= s.commit_index);
      },
      ["--unsafe-accept-lost-wal", "true"],
    );
    // Whole again: it starts without the flag, with every key written since.
    await withServer(dir, async (c) => {
      for (const k of keys("c", 10)) await c.call(c.kv, "Get", { key: Buffer.from(k) });
    });
  });

  it("refuses an emptied WAL", async () => {
    const dir = await written();
    for (const name of await readdir(join(dir, "wal"))) await truncate(join(dir, "wal", name), 0);
    assertLost(
      await startExpectingExit({ dataDir: dir, env: ENV }),
      new RegExp(`the WAL in ${dir}/wal is missing or empty`),
    );
  });

  it("refuses a WAL that ends before what the tables hold (an older copy)", async () => {
    const dir = await mkdtemp(join(root, "d-"));
    await withServer(dir, (c) => put(c, keys("a", 5)));
    await cp(join(dir, "wal"), join(root, "old-wal"), { recursive: true });
    await withServer(dir, async (c) => {
      await put(c, keys("b", 40));
      await snapshotAll(c);
    });
    await rm(join(dir, "wal"), { recursive: true });
    await cp(join(root, "old-wal"), join(dir, "wal"), { recursive: true });
    assertLost(
      await startExpectingExit({ dataDir: dir, env: ENV }),
      new RegExp(
        `shard \\d+'s tables \\(${dir}/shards/\\d+\\) hold log entries up to \\d+, but the WAL in ${dir}/wal ends at \\d+`,
      ),
    );
  });

  it("refuses a shard directory older than the WAL (restored from an older copy)", async () => {
    const { dir, shard, shardDir } = await writtenShard();
    await cp(shardDir, join(root, "old-shard"), { recursive: true });
    // More keys, flushed, and the WAL compacted past them: only the tables hold them.
    await withServer(dir, async (c) => {
      await put(c, keys("b", 40));
      await snapshotAll(c);
    });
    await rm(shardDir, { recursive: true });
    await cp(join(root, "old-shard"), shardDir, { recursive: true });
    assertLost(
      await startExpectingExit({ dataDir: dir, env: ENV }),
      new RegExp(
        `shard ${shard}'s directory ${shardDir} holds its log entries up to \\d+, but the WAL dropped its entries up to \\d+: an older copy.*restore the newest copy`,
      ),
    );
  });

  it("a missing WAL does not unbind the directory's total_shards: put back, another number is still refused", async () => {
    // Keys only in the WAL (nothing flushed: no shard directory holds a table).
    const dir = await mkdtemp(join(root, "d-"));
    await withServer(dir, (c) => put(c, keys("b", 5)));
    const other = { ...ENV, CAIRN_CLUSTER_TOTAL_SHARDS: "8" };
    // The WAL is moved away, and the node started with another total_shards: refused.
    await rename(join(dir, "wal"), join(root, "aside-wal"));
    const first = await startExpectingExit({ dataDir: dir, env: other });
    assert.equal(first.code, 1, first.stderr);
    // The WAL is put back (what the refusal tells the operator to do), the number unchanged:
    // the directory was written with 4 shards, and must still be refused with 8 (with 8 most
    // keys would be looked for in the wrong shard, and read as not found).
    await rename(join(root, "aside-wal"), join(dir, "wal"));
    const again = await startExpectingExit({ dataDir: dir, env: other });
    assert.equal(again.code, 1, again.stderr);
    assert.equal(again.errorCode, "CAIRN_ERR_SHARD_COUNT_MISMATCH", again.lines.join("\n"));
    assert.match(
      again.stderr,
      /written with cluster.total_shards 4, but cluster.total_shards is 8/,
    );
    // With its own number it serves every key.
    await withServer(dir, async (c) => {
      for (const k of keys("b", 5)) {
        const got = await c.call(c.kv, "Get", { key: Buffer.from(k) });
        assert.equal((got["value"] as Buffer).length, VALUE.length, k);
      }
    });
  });

  it("refuses shard workers' lost WALs when started with one worker", async () => {
    const dir = await mkdtemp(join(root, "d-"));
    const workers = { ...ENV, CAIRN_SHARD_WORKERS: "2" };
    await withServer(dir, (c) => put(c, keys("b", 8)), [], workers);
    await rm(join(dir, "wal-worker-0"), { recursive: true });
    await rm(join(dir, "wal-worker-1"), { recursive: true });
    // Its writes were acknowledged and are gone: it must not start as a new, empty node.
    const failed = await startExpectingExit({ dataDir: dir, env: ENV });
    assert.equal(failed.code, 1, failed.stderr);
    // With its two workers it says what was lost.
    assertLost(await startExpectingExit({ dataDir: dir, env: workers }), /missing or empty/);
  });

  it("refuses a removed shard directory whose entries the WAL dropped", async () => {
    const { dir, shard, shardDir } = await writtenShard();
    await rm(shardDir, { recursive: true });
    assertLost(
      await startExpectingExit({ dataDir: dir, env: ENV }),
      new RegExp(
        `shard ${shard}'s directory ${dir}/shards/${shard} is missing, .*restore the directory from a backup`,
      ),
    );
  });

  it("keeps the tables of a shard directory that lost its CURRENT and manifests, and refuses", async () => {
    const { dir, shardDir } = await writtenShard();
    const tables = (await readdir(shardDir)).filter((n) => n.endsWith(".sst"));
    assert.ok(tables.length > 0);
    for (const n of await readdir(shardDir)) {
      if (n === "CURRENT" || n.startsWith("MANIFEST-")) await rm(join(shardDir, n));
    }
    assertLost(await startExpectingExit({ dataDir: dir, env: ENV }), /is missing/);
    // The tables hold the only copy of the shard's flushed keys: the refused start keeps them
    // for the operator (it used to delete them as a crash's orphans before refusing).
    const left = (await readdir(shardDir)).filter((n) => n.endsWith(".sst"));
    assert.deepEqual(left, tables);
  });

  it("keeps the tables a manifest cut at a record boundary lost, and refuses", async () => {
    const { dir, shardDir } = await writtenShard();
    // More keys, flushed, and the WAL compacted past them: the manifest's edits name the new
    // tables, and only those tables hold the keys.
    await withServer(dir, async (c) => {
      await put(c, keys("b", 40));
      await snapshotAll(c);
    });
    const tables = (await readdir(shardDir)).filter((n) => n.endsWith(".sst")).sort();
    const current = (await readFile(join(shardDir, "CURRENT"), "utf8")).trim();
    const manifest = await readFile(join(shardDir, current));
    // The manifest cut after its first record (the snapshot a start writes): the edits after
    // it are lost whole, as a disk that drops an acknowledged append would lose them.
    const first = 8 + manifest.readUInt32LE(0);
    assert.ok(first < manifest.length, "the manifest holds edits after its snapshot");
    await truncate(join(shardDir, current), first);
    assertLost(
      await startExpectingExit({ dataDir: dir, env: ENV }),
      /holds its log entries up to \d+, but the WAL dropped its entries up to \d+/,
    );
    const left = (await readdir(shardDir)).filter((n) => n.endsWith(".sst")).sort();
    assert.deepEqual(left, tables);
  });

  it("logs what a torn manifest tail's drop kept aside, and serves every key", async () => {
    const { dir, shard, shardDir } = await writtenShard();
    const current = (await readFile(join(shardDir, "CURRENT"), "utf8")).trim();
    const manifest = await readFile(join(shardDir, current));
    // Half of a record appended: the torn tail a crash during an append leaves.
    await appendFile(join(shardDir, current), manifest.subarray(0, manifest.readUInt32LE(0) >> 1));
    await withServer(dir, async (c, server) => {
      const logged = server.lines
        .map((l) => JSON.parse(l) as { message: string; fields: Record<string, unknown> })
        .find((l) => l.message.includes("torn last record"));
      assert.ok(logged !== undefined, server.lines.join("\n"));
      assert.equal(logged.fields["shard_id"], Number(shard));
      assert.deepEqual(logged.fields["kept_aside"], [
        join(shardDir, "quarantine", current, current),
      ]);
      for (const k of [...keys("a", 40), ...keys("b", 5)]) {
        const got = await c.call(c.kv, "Get", { key: Buffer.from(k) });
        assert.equal((got["value"] as Buffer).length, VALUE.length, k);
      }
    });
  });
});
