/**
 * The data directory's identity and errors that name their cause (issue 51, items 5 and 8), on
 * real processes: a directory written with one cluster.total_shards refuses another, naming
 * both; a data_dir that is a file, under a file, or on a read-only file system exits 1 with
 * CAIRN_ERR_DATA_DIR naming data_dir, the path and the real cause.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm, writeFile } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { startExpectingExit } from "../support/failed-start.ts";
import { connect } from "../support/grpc-client.ts";
import { freePort } from "../support/ports.ts";
import { startServer } from "../support/server-process.ts";
import { mountTmpfs, remount, tmpfsSkip, unmount } from "../support/tmpfs.ts";

let root: string;
const mounts: string[] = [];

/** Starts a node on `dataDir` with `args` and `env`, writes k = v through it, and stops it. */
async function writeK(
  dataDir: string,
  args: readonly string[],
  env: Record<string, string> = {},
): Promise<void> {
  const server = await startServer({ dataDir, args, env });
  const c = connect(server.rpc);
  try {
    await c.call(c.kv, "Put", { key: Buffer.from("k"), value: Buffer.from("v") });
  } finally {
    c.close();
    await server.stop();
  }
}

describe("the data directory", () => {
  before(async () => {
    root = await mkdtemp(join(tmpdir(), "cairn-e2e-dir-"));
  });
  after(async () => {
    for (const m of mounts) unmount(m);
    await rm(root, { recursive: true, force: true });
  });

  it("refuses another cluster.total_shards than it was written with, naming both", async () => {
    const dir = await mkdtemp(join(root, "d-"));
    const keys = Array.from({ length: 10 }, (_, i) => `key-${i}`);
    const first = await startServer({ dataDir: dir, env: { CAIRN_CLUSTER_TOTAL_SHARDS: "16" } });
    const c = connect(first.rpc);
    try {
      for (const k of keys)
        await c.call(c.kv, "Put", { key: Buffer.from(k), value: Buffer.from(k) });
    } finally {
      c.close();
      await first.stop();
    }
    const refused = await startExpectingExit({
      dataDir: dir,
      env: { CAIRN_CLUSTER_TOTAL_SHARDS: "32" },
    });
    assert.equal(refused.code, 1, refused.stderr);
    assert.equal(refused.errorCode, "CAIRN_ERR_SHARD_COUNT_MISMATCH");
    assert.match(
      refused.stderr,
      new RegExp(
        `data directory ${dir} was written with cluster.total_shards 16, but cluster.total_shards is 32`,
      ),
    );
    // With the number it was written with, every key is there.
    const again = await startServer({ dataDir: dir, env: { CAIRN_CLUSTER_TOTAL_SHARDS: "16" } });
    const c2 = connect(again.rpc);
    try {
      for (const k of keys) {
        const got = await c2.call(c2.kv, "Get", { key: Buffer.from(k) });
        assert.equal((got["value"] as Buffer).toString(), k);
      }
    } finally {
      c2.close();
      await again.stop();
    }
  });

  it("refuses another node_id than it belongs to, naming both", async () => {
    // Before: a single node started under another id stopped a second later on an internal
    // invariant (CAIRN_ERR_INVARIANT, "a single-voter group emitted 1 messages").
    const dir = await mkdtemp(join(root, "d-"));
    await writeK(dir, ["--node-id", "alpha"]);
    const refused = await startExpectingExit({ dataDir: dir, args: ["--node-id", "beta"] });
    assert.equal(refused.code, 1, refused.stderr);
    assert.equal(refused.errorCode, "CAIRN_ERR_NODE_ID_MISMATCH");
    assert.match(
      refused.stderr,
      new RegExp(`data directory ${dir} belongs to node alpha, but node_id is beta`),
    );
    const again = await startServer({ dataDir: dir, args: ["--node-id", "alpha"] });
    const c2 = connect(again.rpc);
    try {
      const got = await c2.call(c2.kv, "Get", { key: Buffer.from("k") });
      assert.equal((got["value"] as Buffer).toString(), "v");
    } finally {
      c2.close();
      await again.stop();
    }
  });

  it("refuses a cluster member's directory as a single node, and a single node's in a cluster", async () => {
    // Before: the member's directory ran as a single node and stopped a second later on an
    // internal invariant; the single node's exited 1 with nothing on stderr ("shard 0 is already
    // open here").
    const member = await mkdtemp(join(root, "member-"));
    const port = await freePort();
    await writeK(
      member,
      ["--node-id", "n1", "--rpc-addr", `127.0.0.1:${port}`, "--seed-nodes", `127.0.0.1:${port}`],
      { CAIRN_CLUSTER_BOOTSTRAP_EXPECT: "1" },
    );
    const alone = await startExpectingExit({ dataDir: member });
    assert.equal(alone.code, 1, alone.stderr);
    assert.equal(alone.errorCode, "CAIRN_ERR_MODE_MISMATCH");
    assert.match(alone.stderr, /belongs to a cluster member, but cluster.seed_nodes is empty/);

    const single = await mkdtemp(join(root, "single-"));
    await writeK(single, ["--node-id", "n1"]);
    const joined = await startExpectingExit({
      dataDir: single,
      args: ["--seed-nodes", `127.0.0.1:${await freePort()}`],
    });
    assert.equal(joined.code, 1, joined.stderr);
    assert.equal(joined.errorCode, "CAIRN_ERR_MODE_MISMATCH");
    assert.match(joined.stderr, /was written by a single node .*cairn backup and cairn restore/);
  });

  it("names a data_dir that is a file", async () => {
    const file = join(root, "a-file");
    await writeFile(file, "not a directory\n");
    const refused = await startExpectingExit({ dataDir: file });
    assert.equal(refused.code, 1, refused.stderr);
    assert.equal(refused.errorCode, "CAIRN_ERR_DATA_DIR");
    assert.match(
      refused.stderr,
      new RegExp(`data_dir ${file} is not a directory \\(it is a file\\)`),
    );
  });

  it("names a data_dir under a file", async () => {
    const file = join(root, "another-file");
    await writeFile(file, "not a directory\n");
    const refused = await startExpectingExit({ dataDir: join(file, "data") });
    assert.equal(refused.code, 1, refused.stderr);
    assert.equal(refused.errorCode, "CAIRN_ERR_DATA_DIR");
    assert.match(refused.stderr, new RegExp(`data_dir ${file}/data: .*a path component is a file`));
  });

  it("names a read-only data_dir, new or written before", { skip: tmpfsSkip }, async () => {
    const mount = mountTmpfs("8m");
    mounts.push(mount);
    const written = join(mount, "written");
    const server = await startServer({ dataDir: written });
    await server.stop();
    remount(mount, "ro");
    for (const dir of [written, join(mount, "new")]) {
      const refused = await startExpectingExit({ dataDir: dir });
      assert.equal(refused.code, 1, refused.stderr);
      assert.equal(refused.errorCode, "CAIRN_ERR_DATA_DIR", refused.lines.join("\n"));
      assert.match(refused.stderr, new RegExp(`data_dir ${dir}: .*the file system is read-only`));
    }
  });
});
