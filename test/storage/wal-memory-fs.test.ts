/**
 * MemoryFileSystem, the WAL's in-memory file system for the deterministic simulation: what
 * survives a power cut, handles across a crash, injected faults, and settling on microtasks only.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MemoryFileSystem } from "../../src/storage/common/index.ts";

const text = (s: string): Buffer => Buffer.from(s);

async function contents(fs: MemoryFileSystem, path: string): Promise<string> {
  return (await fs.readFile(path)).toString();
}

async function names(fs: MemoryFileSystem, dir: string): Promise<string[]> {
  return (await fs.readdir(dir)).sort();
}

/** A file /d/f whose name and first content are durable. */
async function durableFile(fs: MemoryFileSystem, content: string): Promise<void> {
  await fs.mkdirp("/d");
  await fs.fsyncDir("/");
  const f = await fs.open("/d/f", { create: true });
  await f.write(text(content), 0, content.length, 0);
  await f.sync();
  await f.close();
  await fs.fsyncDir("/d");
}

describe("MemoryFileSystem", () => {
  it("reads back what was written, with holes as zeros", async () => {
    const fs = new MemoryFileSystem();
    assert.equal(await fs.mkdirp("a/b"), "/a");
    assert.equal(await fs.mkdirp("/a/b/c"), "/a/b/c");
    assert.equal(await fs.mkdirp("/a/b"), undefined);
    const f = await fs.open("/a/b/x", { create: true });
    assert.equal(await f.write(text("..hello.."), 2, 5, 0), 5);
    await f.write(text("!"), 0, 1, 7);
    assert.deepEqual(await fs.readFile("/a/b/x"), Buffer.from("hello\0\0!"));
    await f.truncate(2);
    assert.equal(await contents(fs, "/a/b/x"), "he");
    assert.deepEqual(await names(fs, "/a/b"), ["c", "x"]);
    await f.close();
  });

  it("loses writes not yet synced in a crash, and keeps synced ones", async () => {
    const fs = new MemoryFileSystem();
    await durableFile(fs, "one");
    const f = await fs.open("/d/f", {});
    await f.write(text("TWO"), 0, 3, 3);
    assert.equal(await contents(fs, "/d/f"), "oneTWO");
    fs.crash();
    assert.equal(await contents(fs, "/d/f"), "one");

    const g = await fs.open("/d/f", {});
    await g.write(text("two"), 0, 3, 3);
    await g.datasync();
    await g.write(text("3"), 0, 1, 6);
    await g.truncate(6); // not durable either
    fs.crash();
    assert.equal(await contents(fs, "/d/f"), "onetwo");
  });

  it("makes a write on a dsync handle durable when it resolves, not before", async () => {
    const fs = new MemoryFileSystem();
    await durableFile(fs, "");
    const f = await fs.open("/d/f", { dsync: true });
    await f.write(text("abc"), 0, 3, 0);
    const inFlight = f.write(text("def"), 0, 3, 3);
    fs.crash();
    await assert.rejects(inFlight, { code: "EBADF" });
    assert.equal(await contents(fs, "/d/f"), "abc");
  });

  it("loses a created file, a made directory and an unlink until the directory is fsynced", async () => {
    const fs = new MemoryFileSystem();
    await durableFile(fs, "kept");
    await fs.mkdirp("/d/sub/deeper");
    const n = await fs.open("/d/new", { create: true, dsync: true });
    await n.write(text("data"), 0, 4, 0); // durable data under a name that is not
    await fs.unlink("/d/f");
    assert.deepEqual(await names(fs, "/d"), ["new", "sub"]);
    fs.crash();
    assert.deepEqual(await names(fs, "/d"), ["f"]);
    assert.equal(await contents(fs, "/d/f"), "kept");

    const m = await fs.open("/d/new", { create: true, dsync: true });
    await m.write(text("data"), 0, 4, 0);
    await fs.unlink("/d/f");
    await fs.mkdirp("/d/sub/deeper");
    await fs.fsyncDir("/d");
    fs.crash();
    // /d/sub survives, but not /d/sub/deeper: /d/sub itself was never fsynced.
    assert.deepEqual(await names(fs, "/d"), ["new", "sub"]);
    assert.deepEqual(await names(fs, "/d/sub"), []);
    assert.equal(await contents(fs, "/d/new"), "data");
  });

  it("keeps a durable file's old content when its name was removed but not durably", async () => {
    const fs = new MemoryFileSystem();
    await durableFile(fs, "old");
    await fs.unlink("/d/f");
    const f = await fs.open("/d/f", { create: true, dsync: true });
    await f.write(text("new"), 0, 3, 0);
    fs.crash();
    assert.equal(await contents(fs, "/d/f"), "old");
  });

  it("invalidates every handle at a crash", async () => {
    const fs = new MemoryFileSystem();
    await durableFile(fs, "x");
    const f = await fs.open("/d/f", {});
    fs.crash();
    await assert.rejects(f.write(text("y"), 0, 1, 0), { code: "EBADF" });
    await assert.rejects(f.sync(), { code: "EBADF" });
    await assert.rejects(f.close(), { code: "EBADF" });
    const g = await fs.open("/d/f", {});
    await g.close();
    await assert.rejects(g.truncate(0), { code: "EBADF" });
    assert.equal(await contents(fs, "/d/f"), "x");
  });

  it("keeps a prefix of the last unsynced write in a torn-write crash", async () => {
    const fs = new MemoryFileSystem();
    await durableFile(fs, "base");
    const f = await fs.open("/d/f", {});
    await f.write(text("lost"), 0, 4, 4);
    await f.write(text("TORN"), 0, 4, 8);
    fs.crash({ tornWriteBytes: 2 });
    // Only the last write is torn; the earlier unsynced one is lost, leaving a zero-filled hole.
    assert.deepEqual(await fs.readFile("/d/f"), Buffer.from("base\0\0\0\0TO"));
    const g = await fs.open("/d/f", {});
    await g.write(text("abcdef"), 0, 6, 0);
    const seen: Array<[string, number]> = [];
    fs.crash({ tornWriteBytes: (path, length) => (seen.push([path, length]), 3) });
    assert.deepEqual(seen, [["/d/f", 6]]);
    assert.deepEqual(await fs.readFile("/d/f"), Buffer.from("abce\0\0\0\0TO"));
  });

  it("keeps unsynced directory changes it is told to, and everything in a process crash", async () => {
    const fs = new MemoryFileSystem();
    await durableFile(fs, "f");
    const a = await fs.open("/d/a", { create: true, dsync: true });
    await a.write(text("aa"), 0, 2, 0);
    const b = await fs.open("/d/b", { create: true });
    await b.write(text("bb"), 0, 2, 0); // not synced
    await fs.unlink("/d/f");
    const asked: string[] = [];
    fs.crash({ keepUnsyncedEntry: (dir, name) => (asked.push(`${dir}:${name}`), name !== "a") });
    assert.deepEqual(asked.sort(), ["/d:a", "/d:b", "/d:f"]);
    assert.deepEqual(await names(fs, "/d"), ["b"]);
    assert.equal(await contents(fs, "/d/b"), ""); // the name survived, the data did not
    fs.crash();
    assert.deepEqual(await names(fs, "/d"), ["b"]); // what survived a crash is durable

    const c = await fs.open("/d/c", { create: true });
    await c.write(text("cc"), 0, 2, 0);
    fs.crash({ processOnly: true });
    await assert.rejects(c.close(), { code: "EBADF" });
    assert.deepEqual(await names(fs, "/d"), ["b", "c"]);
    assert.equal(await contents(fs, "/d/c"), "cc");
    fs.crash();
    assert.equal(await contents(fs, "/d/c"), "cc");
  });

  it("fails the next matching operation with an injected errno, without effect", async () => {
    const fs = new MemoryFileSystem();
    await durableFile(fs, "x");
    fs.failNext("unlink", "/d/", "EIO");
    fs.failNext("write", "/d/f", "ENOSPC");
    await assert.rejects(fs.unlink("/other"), { code: "ENOENT" }); // not matching: no fault used
    await assert.rejects(fs.unlink("/d/f"), (err: Error & { code?: string; syscall?: string }) => {
      assert.equal(err.code, "EIO");
      assert.equal(err.syscall, "unlink");
      return true;
    });
    assert.deepEqual(await names(fs, "/d"), ["f"]);
    const f = await fs.open("/d/f", {});
    await assert.rejects(f.write(text("y"), 0, 1, 1), { code: "ENOSPC" });
    assert.equal(await contents(fs, "/d/f"), "x");
    await f.write(text("y"), 0, 1, 1); // used once
    await fs.unlink("/d/f");
    assert.deepEqual(await names(fs, "/d"), []);
  });

  it("rejects like node:fs on missing and existing paths", async () => {
    const fs = new MemoryFileSystem();
    await assert.rejects(fs.readdir("/nope"), { code: "ENOENT" });
    await assert.rejects(fs.readFile("/nope"), { code: "ENOENT" });
    await assert.rejects(fs.open("/nope/f", { create: true }), { code: "ENOENT" });
    await assert.rejects(fs.open("/f", {}), { code: "ENOENT" });
    await (await fs.open("/f", { create: true })).close();
    await assert.rejects(fs.open("/f", { create: true, exclusive: true }), { code: "EEXIST" });
    await assert.rejects(fs.mkdirp("/f/g"), { code: "EEXIST" });
    await fs.mkdirp("/g");
    await assert.rejects(fs.unlink("/g"), { code: "EISDIR" });
    await assert.rejects(fs.readFile("/g"), { code: "EISDIR" });
  });

  it("settles every operation on microtasks alone", async () => {
    const fs = new MemoryFileSystem();
    let done = false;
    const work = (async () => {
      await fs.mkdirp("/w");
      const f = await fs.open("/w/f", { create: true, dsync: true });
      await f.write(text("x"), 0, 1, 0);
      await f.sync();
      await f.close();
      await fs.fsyncDir("/w");
      done = true;
    })();
    // A bounded number of microtask turns, no timer or I/O phase in between.
    for (let i = 0; i < 100 && !done; i++) await Promise.resolve();
    assert.equal(done, true);
    await work;
    assert.equal(fs.operations, 6);
  });
});
