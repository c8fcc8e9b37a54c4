/**
 * The data directory's lock (src/node/data-dir-lock.ts), both kinds, with pids and liveness
 * injected: a live holder is refused and named, a dead one's pid file is taken over, a lock is
 * released at release(), and a server with flock still refuses a live pid-file holder.
 * (test/e2e/data-safety-lock.test.ts runs it on real processes.)
 */
import assert from "node:assert/strict";
import { existsSync, readFileSync, symlinkSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { lockFile } from "../../src/common/native.ts";
import { LOCK_FILE, lockDataDir } from "../../src/node/data-dir-lock.ts";
import { tempDir } from "../storage/helpers.ts";

const noFlock = { flock: undefined };

describe("data directory lock", () => {
  it("pid file: refuses a live holder by its pid, takes over a dead one's, releases", () => {
    const dir = tempDir("lock");
    writeFileSync(join(dir, LOCK_FILE), "4242 pid-file\n");
    assert.throws(() => lockDataDir(dir, { ...noFlock, pid: 7, isAlive: () => true }), {
      code: "CAIRN_ERR_DATA_DIR_LOCKED",
      message: new RegExp(`data directory ${dir} is in use by another Cairn server \\(pid 4242;`),
    });
    const lock = lockDataDir(dir, { ...noFlock, pid: 7, isAlive: (p) => p !== 4242 });
    assert.equal(lock.kind, "pid-file");
    assert.equal(lock.tookOverFrom, 4242);
    assert.equal(readFileSync(join(dir, LOCK_FILE), "utf8"), "7 pid-file\n");
    // The same process cannot take it twice.
    assert.throws(() => lockDataDir(dir, { ...noFlock, pid: 7 }), {
      code: "CAIRN_ERR_DATA_DIR_LOCKED",
    });
    lock.release();
    assert.equal(existsSync(join(dir, LOCK_FILE)), false);
    lockDataDir(dir, { ...noFlock, pid: 8 }).release();
  });

  it("pid file: a lock naming no pid is refused (it may be being written)", () => {
    const dir = tempDir("lock");
    writeFileSync(join(dir, LOCK_FILE), "");
    assert.throws(() => lockDataDir(dir, { ...noFlock, pid: 7, isAlive: () => false }), {
      code: "CAIRN_ERR_DATA_DIR_LOCKED",
      message: /pid unknown/,
    });
  });

  it("flock: refuses while a live server without flock holds the directory", () => {
    const dir = tempDir("lock");
    const flock = (): boolean => true;
    writeFileSync(join(dir, LOCK_FILE), "4242 pid-file\n");
    assert.throws(() => lockDataDir(dir, { flock, pid: 7, isAlive: () => true }), {
      message: /pid 4242/,
    });
    const lock = lockDataDir(dir, { flock, pid: 7, isAlive: () => false });
    assert.equal(lock.kind, "flock");
    assert.equal(readFileSync(join(dir, LOCK_FILE), "utf8"), "7 flock\n");
    lock.release();
    // The file stays (only the flock goes).
    assert.equal(existsSync(join(dir, LOCK_FILE)), true);
  });

  it(
    "flock: a held flock is refused with the holder's pid",
    { skip: lockFile === undefined ? "no native addon" : false },
    () => {
      const dir = tempDir("lock");
      const first = lockDataDir(dir);
      // Through a symbolic link, so this process's own bookkeeping does not see the same path:
      // another open file description of the file, as another process would have.
      const alias = join(tempDir("lock-alias"), "d");
      symlinkSync(dir, alias);
      assert.throws(() => lockDataDir(alias, { pid: 99 }), {
        code: "CAIRN_ERR_DATA_DIR_LOCKED",
        message: new RegExp(`pid ${process.pid};`),
      });
      first.release();
    },
  );
});
