/**
 * Reads a file the node takes whole at start or on reload (the configuration file, the gossip
 * keys, the tokens, the TLS files), at most to a bound of its own. readFileSync read until the
 * end: a path naming a device (/dev/zero, /dev/urandom: a typo, a hostile mount) or a huge file
 * (a log, a disk image) had the node read until its memory ran out, and it died of that (V8's
 * out-of-memory abort, naming no file) rather than refusing the file. The size fstat gives on
 * the opened file refuses a large regular file unread; a device gives 0 there, and a file may
 * grow after fstat, so no more than the bound and one byte is ever read, and that byte refuses it.
 */
import { closeSync, fstatSync, openSync, readSync } from "node:fs";

/** A file over its bound; `reason` says so, to follow the file's name in a refusal. */
export class FileTooLargeError extends Error {
  readonly file: string;
  readonly maxBytes: number;
  readonly reason: string;

  constructor(file: string, maxBytes: number) {
    const reason = `is larger than ${formatBound(maxBytes)}, the most read of such a file (is the path right?)`;
    super(`${file} ${reason}`);
    this.name = "FileTooLargeError";
    this.file = file;
    this.maxBytes = maxBytes;
    this.reason = reason;
  }
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
 * The file's bytes; throws FileTooLargeError when it holds more than `maxBytes` (having read at
 * most `maxBytes` + 1 of them), and what open and read throw (ENOENT, EACCES, EISDIR) as they
 * throw it.
 */
export function readFileBounded(file: string, maxBytes: number): Buffer {
  const fd = openSync(file, "r");
  try {
    const stats = fstatSync(fd);
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
