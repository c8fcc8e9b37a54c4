/**
 * readFileBounded (src/common/bounded-read.ts), which reads the files the node takes whole at
 * start or on reload: a file up to its bound is read whole; one larger is refused, unread when
 * fstat gives its size, after the bound and one byte when it does not (/dev/zero, which would be
 * read until the memory ran out). readRegularFileBounded, which reads the files read again when
 * they change, refuses anything but a regular file unopened: a FIFO nobody writes to (whose open
 * waits for a writer), a device, a directory.
 */
import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync, symlinkSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import {
  FileTooLargeError,
  NotRegularFileError,
  readFileBounded,
  readRegularFileBounded,
} from "../../src/common/bounded-read.ts";

const dir = mkdtempSync(join(tmpdir(), "cairn-bounded-read-"));
after(() => rmSync(dir, { recursive: true, force: true }));

function tooLarge(file: string, reason: RegExp): (err: unknown) => boolean {
  return (err) => {
    assert.ok(err instanceof FileTooLargeError, String(err));
    assert.equal(err.file, file);
    assert.match(err.reason, reason);
    assert.ok(err.message.startsWith(`${file} is larger than`), err.message);
    return true;
  };
}

describe("readFileBounded", () => {
  it("reads a file whole up to its bound, an empty one too", () => {
    const file = join(dir, "exact");
    const bytes = Buffer.alloc(100_000, 7);
    writeFileSync(file, bytes);
    assert.ok(readFileBounded(file, 100_000).equals(bytes));
    writeFileSync(file, "");
    assert.equal(readFileBounded(file, 100_000).length, 0);
  });

  it("refuses a file one byte over its bound, naming it and the bound", () => {
    const file = join(dir, "over");
    writeFileSync(file, Buffer.alloc(64 * 1024 + 1));
    assert.throws(() => readFileBounded(file, 64 * 1024), tooLarge(file, /larger than 64 KiB/));
    writeFileSync(file, Buffer.alloc(1024 * 1024 + 1));
    assert.throws(() => readFileBounded(file, 1024 * 1024), tooLarge(file, /larger than 1 MiB/));
  });

  it("refuses a device with no end, whose fstat size is 0", () => {
    assert.throws(() => readFileBounded("/dev/zero", 1024 * 1024), tooLarge("/dev/zero", /MiB/));
  });

  it("reads a device that ends within the bound", () => {
    assert.equal(readFileBounded("/dev/null", 1024).length, 0);
  });

  it("throws what open and read throw", () => {
    assert.throws(() => readFileBounded(join(dir, "missing"), 1024), { code: "ENOENT" });
    assert.throws(() => readFileBounded(dir, 1024), { code: "EISDIR" });
  });
});

describe("readRegularFileBounded", () => {
  function notRegular(file: string, kind: string): (err: unknown) => boolean {
    return (err) => {
      assert.ok(err instanceof NotRegularFileError, String(err));
      assert.equal(err.file, file);
      assert.ok(err.reason.startsWith(`is not a regular file (${kind})`), err.reason);
      assert.ok(err.message.startsWith(`${file} is not a regular file`), err.message);
      return true;
    };
  }

  it("reads a regular file, through a symlink too, to its bound", () => {
    const file = join(dir, "regular");
    writeFileSync(file, "pem");
    symlinkSync(file, join(dir, "link"));
    assert.equal(readRegularFileBounded(join(dir, "link"), 1024).toString(), "pem");
    writeFileSync(file, Buffer.alloc(1025));
    assert.throws(() => readRegularFileBounded(file, 1024), tooLarge(file, /larger than 1 KiB/));
  });

  it("refuses a FIFO nobody writes to, at once, a device and a directory", () => {
    const fifo = join(dir, "fifo");
    execFileSync("mkfifo", [fifo]);
    assert.throws(() => readRegularFileBounded(fifo, 1024), notRegular(fifo, "a FIFO"));
    assert.throws(
      () => readRegularFileBounded("/dev/zero", 1024),
      notRegular("/dev/zero", "a character device"),
    );
    assert.throws(() => readRegularFileBounded(dir, 1024), notRegular(dir, "a directory"));
    assert.throws(() => readRegularFileBounded(join(dir, "missing"), 1024), { code: "ENOENT" });
  });
});
