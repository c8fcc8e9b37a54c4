/**
 * Reads a file the node takes whole at start or on reload (the configuration file, the gossip
 * keys, the tokens, the TLS files), at most to a bound of its own. readFileSync read until the
 * end: a path naming a device (/dev/zero, /dev/urandom: a typo, a hostile mount) or a huge file
 * (a log, a disk image) had the node read until its memory ran out, and it died of that (V8's
 * out-of-memory abort, naming no file) rather than refusing the file. The size fstat gives on
 * the opened file refuses a large regular file unread; a device gives 0 there, and a file may
 * grow after fstat, so no more than the bound and one byte is ever read, and that byte refuses it.
 *
 * A file read again when it changes (the gossip keys, the tokens, the TLS files:
 * readRegularFileBounded) must be a regular file. Its reads are synchronous, on the thread
 * that serves calls: a FIFO's open waits until a writer opens it, so a path given as one (or
 * replaced by one) held that thread's event loop at the reload (every call, every Raft round)
 * until someone opened it to write, which nothing may ever do; a device or a socket is no file to
 * read again either. Only the configuration file, read once at start before anything runs, may be a
 * pipe (`--config /dev/stdin`, a shell's `<(…)`): readFileBounded.
 */
import { closeSync, constants, fstatSync, openSync, readSync, type Stats, statSync } from "node:fs";

/** A file refused unread or read in part; `reason` says why, to follow the file's name. */
export class FileRefusal extends Error {
  readonly file: string;
  readonly reason: string;

  constructor(file: string, reason: string) {
    super(`${file} ${reason}`);
    this.name = "FileRefusal";
    this.file = file;
    this.reason = reason;
  }
}

/** A file over its bound. */
export class FileTooLargeError extends FileRefusal {
  readonly maxBytes: number;

  constructor(file: string, maxBytes: number) {
    super(
      file,
      `is larger than ${formatBound(maxBytes)}, the most read of such a file (is the path right?)`,
    );
    this.name = "FileTooLargeError";
    this.maxBytes = maxBytes;
  }
}

/** A file read again when it changes that is not a regular file (a FIFO, a device). */
export class NotRegularFileError extends FileRefusal {
  constructor(file: string, stats: Stats) {
    super(
      file,
      `is not a regular file (${kindOf(stats)}): the node reads this file again whenever it changes, which only a regular file allows (is the path right?)`,
    );
    this.name = "NotRegularFileError";
  }
}

function kindOf(stats: Stats): string {
  if (stats.isFIFO()) return "a FIFO";
  if (stats.isCharacterDevice()) return "a character device";
  if (stats.isBlockDevice()) return "a block device";
  if (stats.isSocket()) return "a socket";
  if (stats.isDirectory()) return "a directory";
  return "not a file";
}

/** A bound as the documentation writes it: 64 KiB, 1 MiB. */
function formatBound(bytes: number): string {
  if (bytes % (1024 * 1024) === 0) return `${bytes / (1024 * 1024)} MiB`;
  if (bytes % 1024 === 0) return `${bytes / 1024} KiB`;
  return `${bytes} bytes`;
}

/** The first read's room for a file whose size fstat does not give (a device, a pipe). */
const UNSIZED_FIRST_BYTES = 64 * 1024;

/**
 * The file's bytes, whatever the file (a pipe too: the configuration file); throws
 * FileTooLargeError when it holds more than `maxBytes` (having read at most `maxBytes` + 1 of
 * them), and what open and read throw (ENOENT, EACCES, EISDIR) as they throw it.
 */
export function readFileBounded(file: string, maxBytes: number): Buffer {
  return readOpened(file, openSync(file, "r"), maxBytes, false);
}

/**
 * The bytes of a regular file (one read again when it changes), as readFileBounded reads them;
 * throws NotRegularFileError for anything else, without waiting: the path is stat-ed before it
 * is opened (a FIFO's open would wait for a writer), and opened non-blocking, so a path replaced
 * by a FIFO in between is opened at once, and refused then.
 */
export function readRegularFileBounded(file: string, maxBytes: number): Buffer {
  const stats = statSync(file);
  if (!stats.isFile()) throw new NotRegularFileError(file, stats);
  return readOpened(
    file,
    openSync(file, constants.O_RDONLY | constants.O_NONBLOCK),
    maxBytes,
    true,
  );
}

function readOpened(file: string, fd: number, maxBytes: number, regularOnly: boolean): Buffer {
  try {
    const stats = fstatSync(fd);
    if (regularOnly && !stats.isFile()) throw new NotRegularFileError(file, stats);
    if (stats.isFile() && stats.size > maxBytes) throw new FileTooLargeError(file, maxBytes);
    // Room for the bytes fstat counts and one more, so a file that grew since is seen too.
    const first = stats.isFile() && stats.size > 0 ? stats.size + 1 : UNSIZED_FIRST_BYTES;
    let buf = Buffer.allocUnsafe(Math.min(first, maxBytes + 1));
    let length = 0;
    for (;;) {
      if (length === buf.length) {
        if (length > maxBytes) throw new FileTooLargeError(file, maxBytes);
        const bigger = Buffer.allocUnsafe(Math.min(buf.length * 2, maxBytes + 1));
        buf.copy(bigger, 0, 0, length);
        buf = bigger;
      }
      const n = readSync(fd, buf, length, buf.length - length, null);
      if (n === 0) break;
      length += n;
    }
    return Buffer.from(buf.subarray(0, length));
  } finally {
    closeSync(fd);
  }
}
