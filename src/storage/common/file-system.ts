/**
 * The file-system operations the WAL performs, behind a narrow interface: production passes
 * `nodeFileSystem`; a deterministic simulation passes `MemoryFileSystem` (memory-fs.ts), which
 * models what a power cut keeps. Only what the WAL needs is here, so the in-memory twin can model
 * every operation exactly instead of approximating a large API.
 */
import { constants, writeSync } from "node:fs";
import { mkdir, open, readdir, readFile, unlink, type FileHandle } from "node:fs/promises";
import { fsyncDir } from "./fs-util.ts";

/** How to open a file. Files are always opened for reading and writing. */
export interface OpenFlags {
  /** Create the file if it does not exist (O_CREAT). */
  readonly create?: boolean;
  /** With `create`: fail with EEXIST if it exists (O_EXCL). */
  readonly exclusive?: boolean;
  /** Cut the file to length 0 (O_TRUNC). */
  readonly truncate?: boolean;
  /** Every write is durable when it completes, as write + fdatasync (O_DSYNC). */
  readonly dsync?: boolean;
}

/** An open file. Positions are explicit: there is no file offset. */
export interface FsFile {
  /** Writes `length` bytes of `buf` from `offset` at file position `position`; returns how many. */
  write(buf: Uint8Array, offset: number, length: number, position: number): Promise<number>;
  /**
   * The same write, done before returning: the calling thread blocks until it is (with
   * `dsync`, until it is durable). Optional: a file system without it is only written
   * asynchronously.
   */
  writeNow?(buf: Uint8Array, offset: number, length: number, position: number): number;
  truncate(length: number): Promise<void>;
  /** fsync: data and metadata durable. */
  sync(): Promise<void>;
  /** fdatasync: data (and the size needed to read it back) durable. */
  datasync(): Promise<void>;
  close(): Promise<void>;
}

/**
 * Errors are errno-style: an Error with a string `code` ("ENOENT", "EEXIST", "EIO", ...), as
 * node:fs rejects with.
 */
export interface FileSystem {
  /**
   * Creates `dir` and its missing parents (mkdir -p). Returns the first directory it created, as
   * node:fs does, or undefined if `dir` existed: the caller must fsync the parents of what was
   * created to make it durable.
   */
  mkdirp(dir: string): Promise<string | undefined>;
  /** Names of the entries of `dir`, in no particular order. */
  readdir(dir: string): Promise<string[]>;
  readFile(path: string): Promise<Buffer>;
  open(path: string, flags: OpenFlags): Promise<FsFile>;
  unlink(path: string): Promise<void>;
  /** Makes the entries of `dir` (files created, renamed or removed in it) durable. */
  fsyncDir(dir: string): Promise<void>;
}

class NodeFile implements FsFile {
  readonly #handle: FileHandle;

  constructor(handle: FileHandle) {
    this.#handle = handle;
  }

  async write(buf: Uint8Array, offset: number, length: number, position: number): Promise<number> {
    return (await this.#handle.write(buf, offset, length, position)).bytesWritten;
  }

  writeNow(buf: Uint8Array, offset: number, length: number, position: number): number {
    return writeSync(this.#handle.fd, buf, offset, length, position);
  }

  truncate(length: number): Promise<void> {
    return this.#handle.truncate(length);
  }

  sync(): Promise<void> {
    return this.#handle.sync();
  }

  datasync(): Promise<void> {
    return this.#handle.datasync();
  }

  close(): Promise<void> {
    return this.#handle.close();
  }
}

/** The real file system, through node:fs/promises. */
export const nodeFileSystem: FileSystem = {
  mkdirp: (dir) => mkdir(dir, { recursive: true }),
  readdir: (dir) => readdir(dir),
  readFile: (path) => readFile(path),
  async open(path, flags) {
    const mode =
      constants.O_RDWR |
      (flags.create === true ? constants.O_CREAT : 0) |
      (flags.exclusive === true ? constants.O_EXCL : 0) |
      (flags.truncate === true ? constants.O_TRUNC : 0) |
      (flags.dsync === true ? constants.O_DSYNC : 0);
    return new NodeFile(await open(path, mode));
  },
  unlink: (path) => unlink(path),
  fsyncDir: (dir) => fsyncDir(dir),
};
