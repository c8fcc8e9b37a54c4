import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { closeSync, mkdirSync, openSync, readSync, rmSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { dupFd, mapFile } from "../../src/common/native.ts";
import { FileCache } from "../../src/storage/lsm/caches.ts";
import { tempDir } from "./helpers.ts";

/** A C compiler on PATH: where there is one, `npm install` must have built the addon. */
function hasCompiler(): boolean {
  try {
    execFileSync(process.env.CC ?? "cc", ["--version"], { stdio: "ignore" });
    return true;
  } catch {
    return false;
  }
}

describe("native addon", () => {
  it("is built and loaded wherever a C compiler is (unless CAIRN_NO_NATIVE=1)", (t) => {
    if (process.env.CAIRN_NO_NATIVE === "1") return t.skip("CAIRN_NO_NATIVE=1");
    if (!hasCompiler()) return t.skip("no C compiler: SSTables are read with pread");
    assert.notEqual(mapFile, undefined, "npm install should have run scripts/build-native.mjs");
  });

  it("maps a file read-only; a view outlives the descriptor and the file's name", (t) => {
    if (mapFile === undefined) return t.skip("addon not built");
    const path = join(tempDir("native"), "f");
    const bytes = Buffer.from(Array.from({ length: 10_000 }, (_, i) => (i * 7) & 0xff));
    writeFileSync(path, bytes);
    const fd = openSync(path, "r");
    const view = mapFile(fd, bytes.length).subarray(4096, 5000);
    closeSync(fd);
    rmSync(path);
    assert.deepEqual(view, bytes.subarray(4096, 5000));
    const empty = join(tempDir("native"), "empty");
    writeFileSync(empty, "");
    const emptyFd = openSync(empty, "r");
    assert.equal(mapFile(emptyFd, 0).length, 0);
    closeSync(emptyFd);
  });

  it("refuses bad arguments and reports mmap's failure with a code", (t) => {
    if (mapFile === undefined) return t.skip("addon not built");
    const map = mapFile;
    assert.throws(() => map(-1, 10), TypeError);
    assert.throws(() => map(Number.NaN, 10), TypeError);
    assert.throws(() => map(0, 1.5), TypeError);
    assert.throws(() => map("3" as unknown as number, 10), TypeError);
    const dir = tempDir("native");
    mkdirSync(join(dir, "d"));
    const fd = openSync(join(dir, "d"), "r");
    try {
      assert.throws(() => map(fd, 4096), { code: "CAIRN_ERR_MMAP", message: /^mmap: / });
    } finally {
      closeSync(fd);
    }
  });
});

describe("dupFd", () => {
  it("gives a second descriptor to the same open file, which outlives the first", (t) => {
    if (dupFd === undefined) return t.skip("addon not built");
    const path = join(tempDir("native"), "f");
    writeFileSync(path, "abcdef");
    const fd = openSync(path, "r");
    const copy = dupFd(fd);
    assert.notEqual(copy, fd);
    const first = Buffer.alloc(3);
    assert.equal(readSync(fd, first), 3);
    closeSync(fd);
    // The same open file description: its offset moved with the first read.
    const rest = Buffer.alloc(3);
    assert.equal(readSync(copy, rest), 3);
    assert.equal(`${first}${rest}`, "abcdef");
    closeSync(copy);
  });

  it("refuses what is not a descriptor", (t) => {
    if (dupFd === undefined) return t.skip("addon not built");
    const dup = dupFd;
    assert.throws(() => dup(-1), TypeError);
    assert.throws(() => dup(1.5), TypeError);
    assert.throws(() => dup("3" as unknown as number), TypeError);
    assert.throws(
      () => dup(1_000_000),
      (err: NodeJS.ErrnoException) => err.code === "CAIRN_ERR_DUP",
    );
  });
});

describe("file cache", () => {
  for (const map of [true, false]) {
    it(`reads the same bytes as blocks (mapped: ${map}) and with pread, short at the end`, () => {
      const dir = tempDir("files");
      const files = new FileCache(2, { map });
      assert.equal(files.mapping, map && mapFile !== undefined);
      const contents = [0, 1, 2].map((n) => Buffer.alloc(3000 + n, n + 1));
      contents.forEach((c, n) => writeFileSync(join(dir, `${n}.sst`), c));
      for (let round = 0; round < 2; round++) {
        contents.forEach((c, n) => {
          const path = join(dir, `${n}.sst`);
          assert.equal(files.size(path), c.length);
          for (const read of [files.read.bind(files), files.block.bind(files)]) {
            assert.deepEqual(read(path, 100, 50), c.subarray(100, 150));
            assert.deepEqual(read(path, c.length - 10, 50), c.subarray(c.length - 10));
            assert.equal(read(path, c.length + 5, 10).length, 0);
          }
          assert.ok(files.openFiles <= 2, "bounded by count");
        });
      }
      files.closeAll();
      assert.equal(files.openFiles, 0);
    });

    it(`keeps the file it opens when every other one was read since (mapped: ${map})`, () => {
      const dir = tempDir("files");
      const files = new FileCache(2, { map });
      const paths = [0, 1, 2].map((n) => join(dir, `${n}.sst`));
      paths.forEach((path, n) => writeFileSync(path, Buffer.alloc(4096, n + 1)));
      const [a, b, c] = paths as [string, string, string];
      files.block(a, 0, 16);
      files.block(b, 0, 16);
      files.block(a, 16, 16);
      files.block(b, 16, 16);
      // Both open files were read again: c's opening closes one of them, never c itself.
      assert.deepEqual(files.read(c, 0, 16), Buffer.alloc(16, 3));
      assert.deepEqual(files.block(c, 16, 16), Buffer.alloc(16, 3));
      assert.equal(files.openFiles, 2);
      files.closeAll();
    });
  }
});
