import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import {
  closeSync,
  mkdirSync,
  openSync,
  readSync,
  rmSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { dupFd, mapFile, mappedFaults } from "../../src/common/native.ts";
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
    const view = mapFile(fd, bytes.length, 1).subarray(4096, 5000);
    closeSync(fd);
    rmSync(path);
    assert.deepEqual(view, bytes.subarray(4096, 5000));
    const empty = join(tempDir("native"), "empty");
    writeFileSync(empty, "");
    const emptyFd = openSync(empty, "r");
    assert.equal(mapFile(emptyFd, 0, 1).length, 0);
    closeSync(emptyFd);
  });

  it("refuses bad arguments and reports mmap's failure with a code", (t) => {
    if (mapFile === undefined) return t.skip("addon not built");
    const map = mapFile;
    assert.throws(() => map(-1, 10, 1), TypeError);
    assert.throws(() => map(Number.NaN, 10, 1), TypeError);
    assert.throws(() => map(0, 1.5, 1), TypeError);
    assert.throws(() => map("3" as unknown as number, 10, 1), TypeError);
    assert.throws(() => map(0, 10, undefined as unknown as number), TypeError);
    const dir = tempDir("native");
    mkdirSync(join(dir, "d"));
    const fd = openSync(join(dir, "d"), "r");
    try {
      assert.throws(() => map(fd, 4096, 1), { code: "CAIRN_ERR_MMAP", message: /^mmap: / });
    } finally {
      closeSync(fd);
    }
  });
});

describe("a mapped file that shrinks", () => {
  it("reads zeros from the pages it lost, each counted once, with its mapping's id and offset", (t) => {
    if (mapFile === undefined || mappedFaults === undefined) return t.skip("addon not built");
    const faults = mappedFaults;
    const path = join(tempDir("native"), "f");
    const bytes = Buffer.from(Array.from({ length: 3 * 4096 }, (_, i) => (i * 13) % 251 || 1));
    writeFileSync(path, bytes);
    const fd = openSync(path, "r");
    const view = mapFile(fd, bytes.length, 77);
    closeSync(fd);
    assert.equal(view[8192 + 5], bytes[8192 + 5]);
    truncateSync(path, 4096);
    const before = Atomics.load(faults.counts, 0);
    // The process lives: the addon's SIGBUS handler maps a page of zeros where the file ended.
    assert.equal(view[8192 + 5], 0);
    assert.equal(Atomics.load(faults.counts, 0), before + 1);
    assert.deepEqual([faults.id, faults.offset], [77, 8192]);
    assert.deepEqual(view.subarray(8192, 12288), Buffer.alloc(4096), "the page is zeros now");
    assert.equal(Atomics.load(faults.counts, 0), before + 1, "and faults no more");
    assert.equal(view[4096 + 100], 0);
    assert.equal(Atomics.load(faults.counts, 0), before + 2, "each lost page once");
    assert.equal(faults.offset, 4096);
    assert.deepEqual(view.subarray(0, 4096), bytes.subarray(0, 4096), "what the file keeps");
    assert.equal(Atomics.load(faults.counts, 0), before + 2);
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

  it("names the file and offset of a lost page read through a mapped block", (t) => {
    if (mapFile === undefined) return t.skip("addon not built");
    const path = join(tempDir("files"), "0.sst");
    writeFileSync(path, Buffer.alloc(3 * 4096, 5));
    const files = new FileCache(2);
    const block = files.block(path, 8192, 100);
    truncateSync(path, 4096);
    const before = files.faults;
    assert.deepEqual(block, Buffer.alloc(100, 0));
    assert.equal(files.faults, before + 1);
    assert.equal(files.lastFault, path);
    assert.equal(files.lastFaultOffset, 8192);
    files.close(path);
    assert.equal(files.lastFault, undefined, "a closed file is no longer named");
  });
});
