/**
 * An in-memory FileSystem that models a disk and what a power cut keeps, for the deterministic
 * simulation (which runs the real WAL on it) and for tests. No real I/O and no timers: every
 * operation takes effect when called and settles after one microtask, so a run is a function of
 * its inputs.
 *
 * The model, per file, is two contents: the current one (what reads see) and the durable one
 * (what survives a power cut). A write on a handle opened with `dsync` becomes durable when it
 * resolves; other writes and truncations once a later `sync()` or `datasync()` resolves. Per
 * directory, two entry tables likewise: files created or removed, and directories made, become
 * durable once `fsyncDir` of their parent resolves. `crash()` puts everything back to its durable
 * state and invalidates every open handle; its options model what else a real crash may keep (a
 * prefix of a write in flight, directory changes written back early, or everything when only
 * the process died).
 *
 * A crash does not stop the code that used the file system: whoever runs a simulated process
 * must drop its objects at the crash. Handle operations from before the crash reject (EBADF), and
 * so does an operation in flight across it; a path operation issued later by a stale object
 * would act on the new state.
 */
import { posix } from "node:path";
import type { FileSystem, FsFile, OpenFlags } from "./file-system.ts";

export type FsOperation =
  | "mkdirp"
  | "readdir"
  | "readFile"
  | "open"
  | "write"
  | "truncate"
  | "sync"
  | "datasync"
  | "close"
  | "unlink"
  | "fsyncDir";

export interface CrashOptions {
  /**
   * A torn write: how many bytes of each file's last write not yet durable survive the crash
   * (a prefix; clamped to the write's length). Default 0: unsynced writes are lost whole.
   */
  readonly tornWriteBytes?: number | ((path: string, writeLength: number) => number);
  /**
   * Per directory entry created or removed since its directory's last fsync: whether the change
   * survives anyway (file systems write directory changes back on their own schedule). A kept
   * new file has its durable content only. Default: every such change is lost.
   */
  readonly keepUnsyncedEntry?: (dir: string, name: string) => boolean;
  /**
   * A process crash (SIGKILL) rather than a power cut: the kernel survives, so everything is
   * kept, synced or not; only the handles die.
   */
  readonly processOnly?: boolean;
}

/** File bytes in a buffer that grows by doubling, so appends cost their own length. */
class Content {
  #buf: Buffer;
  size: number;

  constructor(buf: Buffer = Buffer.alloc(0), size = buf.length) {
    this.#buf = buf;
    this.size = size;
  }

  write(position: number, bytes: Uint8Array): void {
    const end = position + bytes.length;
    if (end > this.#buf.length) {
      const bigger = Buffer.alloc(Math.max(end, this.#buf.length * 2, 4096));
      this.#buf.copy(bigger, 0, 0, this.size);
      this.#buf = bigger;
    }
    // Writing past the end leaves a hole that reads as zeros, as on a real file system.
    if (position > this.size) this.#buf.fill(0, this.size, position);
    this.#buf.set(bytes, position);
    this.size = Math.max(this.size, end);
  }

  truncate(length: number): void {
    if (length > this.size) this.write(this.size, new Uint8Array(length - this.size));
    this.size = length;
  }

  read(): Buffer {
    return Buffer.from(this.#buf.subarray(0, this.size));
  }

  clone(): Content {
    return new Content(this.read());
  }
}

class FileNode {
  readonly kind = "file";
  current = new Content();
  durable = new Content();
  /** The last write not yet durable, kept for a torn-write crash. */
  lastWrite: { readonly position: number; readonly bytes: Buffer } | undefined = undefined;
}

class DirNode {
  readonly kind = "dir";
  entries = new Map<string, FileNode | DirNode>();
  durableEntries = new Map<string, FileNode | DirNode>();
}

interface Fault {
  readonly op: FsOperation;
  readonly pathPrefix: string;
  readonly code: string;
}

/** An errno-style error, shaped as node:fs rejects. */
function fsError(code: string, syscall: string, path: string, why = ""): Error {
  return Object.assign(new Error(`${code}: ${why || code}, ${syscall} '${path}'`), {
    code,
    syscall,
    path,
  });
}

export class MemoryFileSystem implements FileSystem {
  readonly #root = new DirNode();
  /** Bumped by every crash: handles and operations in flight from before it are void. */
  #generation = 0;
  readonly #faults: Fault[] = [];
  #operations = 0;

  /** How many operations were issued (handle operations included), for tests. */
  get operations(): number {
    return this.#operations;
  }

  /**
   * Makes the next operation `op` on a path starting with `pathPrefix` reject with `code` (an
   * errno code such as "EIO" or "ENOSPC") without any effect. Faults queue up, each used once.
   */
  failNext(op: FsOperation, pathPrefix: string, code: string): void {
    this.#faults.push({ op, pathPrefix: posix.resolve("/", pathPrefix), code });
  }

  /**
   * A power cut: every directory and file goes back to its durable state (with `tornWriteBytes`,
   * a prefix of each file's last unsynced write survives), and every open handle is invalidated.
   */
  crash(options: CrashOptions = {}): void {
    this.#generation++;
    const torn = options.tornWriteBytes ?? 0;
    const keepEntry = options.keepUnsyncedEntry;
    const reset = (dir: DirNode, path: string): void => {
      if (options.processOnly !== true) {
        const entries = new Map(dir.durableEntries);
        if (keepEntry !== undefined) {
          for (const name of new Set([...dir.entries.keys(), ...dir.durableEntries.keys()])) {
            const now = dir.entries.get(name);
            if (now === dir.durableEntries.get(name) || !keepEntry(path, name)) continue;
            if (now === undefined) entries.delete(name);
            else entries.set(name, now);
          }
        }
        dir.entries = entries;
      }
      dir.durableEntries = new Map(dir.entries);
      for (const [name, node] of dir.entries) {
        const child = posix.join(path, name);
        if (node.kind === "dir") {
          reset(node, child);
          continue;
        }
        if (options.processOnly === true) {
          node.durable = node.current.clone();
          node.lastWrite = undefined;
          continue;
        }
        const last = node.lastWrite;
        if (last !== undefined) {
          const keep = typeof torn === "number" ? torn : torn(child, last.bytes.length);
          const bytes = last.bytes.subarray(0, Math.max(0, Math.min(keep, last.bytes.length)));
          if (bytes.length > 0) node.durable.write(last.position, bytes);
          node.lastWrite = undefined;
        }
        node.current = node.durable.clone();
      }
    };
    reset(this.#root, "/");
  }

  /**
   * An operator's `rm -rf` of `path` while no process runs (between a crash and a restart), done
   * durably: the entry is gone from its directory, synced or not. False when there was none.
   */
  removeTree(path: string): boolean {
    const abs = posix.resolve("/", path);
    let parent: FileNode | DirNode;
    try {
      parent = this.#lookup(posix.dirname(abs), "rm");
    } catch {
      return false;
    }
    if (parent.kind !== "dir") return false;
    const name = posix.basename(abs);
    const had = parent.entries.delete(name);
    parent.durableEntries.delete(name);
    return had;
  }

  async mkdirp(dir: string): Promise<string | undefined> {
    const path = this.#begin("mkdirp", dir);
    let node = this.#root;
    let first: string | undefined;
    let at = "/";
    for (const name of path.split("/").filter((n) => n !== "")) {
      at = posix.join(at, name);
      const next = node.entries.get(name);
      if (next === undefined) {
        const made = new DirNode();
        node.entries.set(name, made);
        node = made;
        first ??= at;
      } else if (next.kind === "dir") {
        node = next;
      } else {
        throw fsError("EEXIST", "mkdir", path, "file already exists");
      }
    }
    const generation = this.#generation;
    await this.#settle("mkdir", path, generation);
    this.#check("mkdir", path, generation);
    return first;
  }

  async readdir(dir: string): Promise<string[]> {
    const path = this.#begin("readdir", dir);
    const node = this.#lookup(path, "scandir");
    if (node.kind !== "dir") throw fsError("ENOTDIR", "scandir", path);
    const names = [...node.entries.keys()];
    const generation = this.#generation;
    await this.#settle("scandir", path, generation);
    this.#check("scandir", path, generation);
    return names;
  }

  async readFile(file: string): Promise<Buffer> {
    const path = this.#begin("readFile", file);
    const node = this.#lookup(path, "open");
    if (node.kind !== "file") throw fsError("EISDIR", "read", path);
    const data = node.current.read();
    const generation = this.#generation;
    await this.#settle("read", path, generation);
    this.#check("read", path, generation);
    return data;
  }

  async open(file: string, flags: OpenFlags): Promise<FsFile> {
    const path = this.#begin("open", file);
    const parent = this.#parent(path, "open");
    const name = posix.basename(path);
    let node = parent.entries.get(name);
    if (node !== undefined && flags.create === true && flags.exclusive === true) {
      throw fsError("EEXIST", "open", path, "file already exists");
    }
    if (node === undefined) {
      if (flags.create !== true) throw fsError("ENOENT", "open", path, "no such file");
      node = new FileNode();
      parent.entries.set(name, node);
    }
    if (node.kind !== "file") throw fsError("EISDIR", "open", path);
    if (flags.truncate === true) {
      node.current.truncate(0);
      node.lastWrite = undefined;
    }
    const generation = this.#generation;
    await this.#settle("open", path, generation);
    this.#check("open", path, generation);
    return new MemoryFile(this.#handleOps, node, path, flags.dsync === true, generation);
  }

  async unlink(file: string): Promise<void> {
    const path = this.#begin("unlink", file);
    const parent = this.#parent(path, "unlink");
    const node = parent.entries.get(posix.basename(path));
    if (node === undefined) throw fsError("ENOENT", "unlink", path, "no such file");
    if (node.kind === "dir") throw fsError("EISDIR", "unlink", path);
    parent.entries.delete(posix.basename(path));
    const generation = this.#generation;
    await this.#settle("unlink", path, generation);
    this.#check("unlink", path, generation);
  }

  async fsyncDir(dir: string): Promise<void> {
    const path = this.#begin("fsyncDir", dir);
    const node = this.#lookup(path, "open");
    if (node.kind !== "dir") throw fsError("ENOTDIR", "fsync", path);
    const generation = this.#generation;
    await this.#settle("fsync", path, generation);
    this.#check("fsync", path, generation);
    node.durableEntries = new Map(node.entries);
  }

  // --- shared by MemoryFile ---

  /**
   * Starts an operation: counts it and applies an injected fault. Returns the absolute path. The
   * caller throws before any effect if this throws.
   */
  #begin(op: FsOperation, path: string): string {
    this.#operations++;
    const abs = posix.resolve("/", path);
    const i = this.#faults.findIndex((f) => f.op === op && abs.startsWith(f.pathPrefix));
    if (i >= 0) {
      const [fault] = this.#faults.splice(i, 1);
      throw fsError((fault as Fault).code, op, abs, "injected fault");
    }
    return abs;
  }

  /** Yields one microtask; an operation that a crash overtook rejects. */
  async #settle(syscall: string, path: string, generation: number): Promise<void> {
    await undefined;
    this.#check(syscall, path, generation);
  }

  /**
   * Throws if a crash came since `generation`. Callers check again right after awaiting
   * #settle, synchronously before the operation's durable effect: other microtasks (a crash
   * among them) can run between #settle's own check and the caller's continuation, and an
   * effect applied after the crash would land in the post-crash state of a write that failed.
   */
  #check(syscall: string, path: string, generation: number): void {
    if (generation !== this.#generation) {
      throw fsError("EBADF", syscall, path, "the machine crashed during the operation");
    }
  }

  #lookup(path: string, syscall: string): FileNode | DirNode {
    let node: FileNode | DirNode = this.#root;
    for (const name of path.split("/").filter((n) => n !== "")) {
      if (node.kind !== "dir") throw fsError("ENOTDIR", syscall, path);
      const next: FileNode | DirNode | undefined = node.entries.get(name);
      if (next === undefined) throw fsError("ENOENT", syscall, path, "no such file or directory");
      node = next;
    }
    return node;
  }

  #parent(path: string, syscall: string): DirNode {
    const dir = this.#lookup(posix.dirname(path), syscall);
    if (dir.kind !== "dir") throw fsError("ENOTDIR", syscall, path);
    return dir;
  }

  /** What a MemoryFile needs to run its operations under this file system's rules. */
  readonly #handleOps: HandleOps = {
    begin: (op, path) => this.#begin(op, path),
    settle: (syscall, path, generation) => this.#settle(syscall, path, generation),
    check: (syscall, path, generation) => this.#check(syscall, path, generation),
    generation: () => this.#generation,
  };
}

interface HandleOps {
  begin(op: FsOperation, path: string): string;
  settle(syscall: string, path: string, generation: number): Promise<void>;
  check(syscall: string, path: string, generation: number): void;
  generation(): number;
}

class MemoryFile implements FsFile {
  readonly #ops: HandleOps;
  readonly #node: FileNode;
  readonly #path: string;
  readonly #dsync: boolean;
  readonly #generation: number;
  #closed = false;

  constructor(ops: HandleOps, node: FileNode, path: string, dsync: boolean, generation: number) {
    this.#ops = ops;
    this.#node = node;
    this.#path = path;
    this.#dsync = dsync;
    this.#generation = generation;
  }

  async write(buf: Uint8Array, offset: number, length: number, position: number): Promise<number> {
    this.#begin("write");
    const bytes = Buffer.from(buf.subarray(offset, offset + length));
    this.#node.current.write(position, bytes);
    const write = { position, bytes };
    this.#node.lastWrite = write;
    await this.#ops.settle("write", this.#path, this.#generation);
    this.#ops.check("write", this.#path, this.#generation);
    if (this.#dsync) {
      this.#node.durable.write(position, bytes);
      if (this.#node.lastWrite === write) this.#node.lastWrite = undefined;
    }
    return length;
  }

  async truncate(length: number): Promise<void> {
    this.#begin("truncate");
    this.#node.current.truncate(length);
    this.#node.lastWrite = undefined;
    await this.#ops.settle("ftruncate", this.#path, this.#generation);
    this.#ops.check("ftruncate", this.#path, this.#generation);
  }

  sync(): Promise<void> {
    return this.#sync("sync");
  }

  datasync(): Promise<void> {
    return this.#sync("datasync");
  }

  async close(): Promise<void> {
    this.#begin("close");
    this.#closed = true;
    await this.#ops.settle("close", this.#path, this.#generation);
    this.#ops.check("close", this.#path, this.#generation);
  }

  async #sync(op: "sync" | "datasync"): Promise<void> {
    this.#begin(op);
    // What is durable is what was written before the call, not what arrives while it runs.
    const content = this.#node.current.clone();
    const last = this.#node.lastWrite;
    await this.#ops.settle(op === "sync" ? "fsync" : "fdatasync", this.#path, this.#generation);
    this.#ops.check(op === "sync" ? "fsync" : "fdatasync", this.#path, this.#generation);
    this.#node.durable = content;
    if (this.#node.lastWrite === last) this.#node.lastWrite = undefined;
  }

  #begin(op: FsOperation): void {
    if (this.#closed) throw fsError("EBADF", op, this.#path, "file handle is closed");
    this.#ops.begin(op, this.#path);
    if (this.#generation !== this.#ops.generation()) {
      throw fsError("EBADF", op, this.#path, "file handle from before a crash");
    }
  }
}
