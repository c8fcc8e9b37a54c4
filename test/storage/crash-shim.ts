/**
 * Preloaded (`--import`) into the crash-test child and, through the inherited execArgv, into its
 * worker threads. In the thread named by CAIRN_CRASH_THREAD (0 = main, 1 = first worker) it counts
 * the operations on files under CAIRN_CRASH_DIR (open, write, fsync, close, rename, unlink) and
 * SIGKILLs the whole process just before operation number CAIRN_CRASH_AT: a crash point between
 * any two file operations of that thread.
 *
 * With CAIRN_CRASH_JOURNAL set, every thread also journals (synchronously, to that file) what it
 * writes, fsyncs, creates and renames. The crashing thread only kills: the other threads run on
 * until the kill lands, and a rollback made from inside the process would miss what they finish
 * meanwhile (an fsync completing after the journal was read was undone, yet acted upon). The
 * parent test calls `powerCut(journal)` once the child has exited, when the journal is complete:
 * it undoes what a power cut could lose across all threads — file data written since the file's
 * last fsync is truncated away; files and directories (made with fs.promises.mkdir) created and
 * renames made since their directory's last fsync are undone, a directory with everything in
 * it. Unlinks are not undone (a file that comes back is an orphan the engine
 * removes on open). Test-only; never imported by src/.
 */
import fs from "node:fs";
import fsp from "node:fs/promises";
import { syncBuiltinESMExports } from "node:module";
import { dirname, resolve } from "node:path";
import { fileURLToPath } from "node:url";
import { threadId } from "node:worker_threads";

const crashThread = Number(process.env["CAIRN_CRASH_THREAD"] ?? -1);
const crashAt = Number(process.env["CAIRN_CRASH_AT"] ?? 0);
const journal = process.env["CAIRN_CRASH_JOURNAL"];
/** Only operations on files under this directory count (module loading also opens files). */
const crashDir = resolve(process.env["CAIRN_CRASH_DIR"] ?? "/nonexistent");
const counting = threadId === crashThread && crashAt > 0;

type AnyFn = (...args: never[]) => unknown;
type Event =
  | { e: "create"; p: string }
  | { e: "write"; p: string; before: number }
  | { e: "fsync"; p: string; size: number; dir: boolean }
  | { e: "rename"; from: string; to: string; previous: string | null };

const orig = {
  openSync: fs.openSync,
  writeSync: fs.writeSync,
  readFileSync: fs.readFileSync,
  fstatSync: fs.fstatSync,
  statSync: fs.statSync,
  truncateSync: fs.truncateSync,
  unlinkSync: fs.unlinkSync,
  renameSync: fs.renameSync,
  writeFileSync: fs.writeFileSync,
  existsSync: fs.existsSync,
  rmSync: fs.rmSync,
};

let journalFd: number | undefined;

/**
 * Appends one event with the original functions captured before patching (appendFileSync would
 * call the patched ones and recurse). O_APPEND keeps each small write whole across threads.
 */
function record(event: Event): void {
  if (journal === undefined) return;
  journalFd ??= orig.openSync(journal, "a");
  orig.writeSync(journalFd, `${JSON.stringify(event)}\n`);
}

export interface PowerCutOptions {
  /**
   * Renames not yet made durable by a directory fsync survive the cut, while the files and
   * directories whose creation is not yet durable are still lost. POSIX orders neither against
   * the other until the directory's fsync; ext4 and xfs journal them in order (the default
   * model), other file systems need not. A rename that lands ahead of the creation of the file
   * it points at (CURRENT switched to a manifest whose name is lost) shows here.
   */
  readonly renamesSurvive?: boolean;
}

/**
 * Undoes what the journal of a dead child says a power cut could lose, across all its threads.
 * Call only after the child has exited: then no thread can still add to the journal.
 */
export function powerCut(journalPath: string, options: PowerCutOptions = {}): void {
  if (!orig.existsSync(journalPath)) return;
  const synced = new Map<string, number>();
  const dirty = new Set<string>();
  const newNames = new Set<string>();
  const renames: Array<{ from: string; to: string; previous: string | null }> = [];
  const lines = orig.readFileSync(journalPath, "utf8").split("\n");
  // The last piece is empty, or a record cut short by the kill: what it describes never happened
  // (writes are journaled before they are made) or was never acted upon (fsyncs after).
  lines.pop();
  for (const line of lines) {
    const ev = JSON.parse(line) as Event;
    switch (ev.e) {
      case "create":
        newNames.add(ev.p);
        synced.set(ev.p, 0);
        break;
      case "write":
        if (!synced.has(ev.p)) synced.set(ev.p, ev.before);
        dirty.add(ev.p);
        break;
      case "fsync":
        if (ev.dir) {
          for (const name of [...newNames]) if (dirname(name) === ev.p) newNames.delete(name);
          for (let i = renames.length - 1; i >= 0; i--) {
            if (dirname((renames[i] as (typeof renames)[number]).to) === ev.p) renames.splice(i, 1);
          }
        } else {
          synced.set(ev.p, ev.size);
          dirty.delete(ev.p);
        }
        break;
      case "rename":
        renames.push(ev);
        break;
    }
  }
  for (const p of dirty) {
    if (orig.existsSync(p)) orig.truncateSync(p, synced.get(p) ?? 0);
  }
  if (options.renamesSurvive === true) renames.length = 0;
  for (const r of renames.reverse()) {
    if (orig.existsSync(r.to)) orig.renameSync(r.to, r.from);
    if (r.previous !== null) orig.writeFileSync(r.to, Buffer.from(r.previous, "base64"));
  }
  for (const p of newNames) orig.rmSync(p, { recursive: true, force: true });
}

if (counting || journal !== undefined) {
  // FileHandle methods live on an internal prototype: reach it through a handle, before counting.
  const probe = await fsp.open(import.meta.filename, "r");
  const proto = Object.getPrototypeOf(probe) as Record<string, unknown>;
  await probe.close();

  const fdPaths = new Map<number, string>();
  /** Descriptors opened with O_DSYNC: each write is durable when it returns. */
  const dsync = new Set<number>();
  const toPath = (path: unknown): string =>
    resolve(path instanceof URL ? fileURLToPath(path) : String(path));
  const creates = (flags: unknown): boolean =>
    typeof flags === "string"
      ? /[wax]/.test(flags)
      : typeof flags === "number" && (flags & fs.constants.O_CREAT) !== 0;
  const noteOpen = (path: unknown, flags: unknown, existed: boolean, fd: number): void => {
    const p = toPath(path);
    if (!inDir(p)) return;
    fdPaths.set(fd, p);
    if (typeof flags === "number" && (flags & fs.constants.O_DSYNC) !== 0) dsync.add(fd);
    else dsync.delete(fd);
    if (creates(flags) && !existed) record({ e: "create", p });
  };
  const noteWrite = (fd: number): void => {
    const p = fdPaths.get(fd);
    if (p !== undefined) record({ e: "write", p, before: orig.fstatSync(fd).size });
  };
  const noteSync = (fd: number): void => {
    const p = fdPaths.get(fd);
    if (p === undefined) return;
    const st = orig.fstatSync(fd);
    record({ e: "fsync", p, size: st.size, dir: st.isDirectory() });
  };

  const inDir = (p: string | undefined): boolean =>
    p !== undefined && (p === crashDir || p.startsWith(`${crashDir}/`));
  let ops = 0;
  let crashing = false;
  /** Counts an operation on `p` (a path under the data directory) and crashes at the chosen one. */
  const step = (p: string | undefined): void => {
    if (!counting || crashing || !inDir(p)) return;
    ops++;
    if (ops >= crashAt) {
      crashing = true;
      // Nothing else here: the parent rolls back once the whole process is dead (see above).
      process.kill(process.pid, "SIGKILL");
    }
  };

  const f = fs as unknown as Record<string, AnyFn>;
  /** The file an fd or path argument names, if it is under the data directory. */
  const target = (arg: unknown): string | undefined =>
    typeof arg === "number" ? fdPaths.get(arg) : toPath(arg);
  /** Counts the operation; `before` sees its arguments first, `after` once it is done. */
  const wrap = (
    module: Record<string, AnyFn>,
    name: string,
    hooks: { before?: AnyFn; after?: AnyFn } = {},
  ): void => {
    const fn = module[name] as AnyFn;
    module[name] = (...args: never[]) => {
      step(target(args[0]));
      hooks.before?.(...args);
      const result = fn.apply(module, args);
      hooks.after?.(...args);
      return result;
    };
  };
  const openSync = fs.openSync;
  f["openSync"] = ((path: string, flags?: unknown, mode?: number) => {
    step(toPath(path));
    const existed = orig.existsSync(path);
    const fd = openSync(path, flags as fs.OpenMode, mode);
    noteOpen(path, flags, existed, fd);
    return fd;
  }) as AnyFn;
  wrap(f, "writeSync", {
    before: ((fd: number) => noteWrite(fd)) as AnyFn,
    // On an O_DSYNC descriptor the write is durable once it returns (the WAL's blocking writes).
    after: ((fd: number) => {
      if (dsync.has(fd)) noteSync(fd);
    }) as AnyFn,
  });
  wrap(f, "fsyncSync", { after: ((fd: number) => noteSync(fd)) as AnyFn });
  wrap(f, "fdatasyncSync", { after: ((fd: number) => noteSync(fd)) as AnyFn });
  wrap(f, "closeSync", { after: ((fd: number) => fdPaths.delete(fd)) as AnyFn });
  wrap(f, "unlinkSync");

  const p = fsp as unknown as Record<string, AnyFn>;
  const open = fsp.open;
  p["open"] = (async (path: string, flags?: unknown, mode?: number) => {
    step(toPath(path));
    const existed = orig.existsSync(path);
    const handle = await open(path, flags as string, mode);
    const fd = handle.fd;
    noteOpen(path, flags, existed, fd);
    // A closed handle's descriptor number is free for the next open, in any thread and inside
    // fs.promises.writeFile (whose handle does not come through this `open`): forget it before
    // the close, or that file's sync is journaled under this handle's path (a fsync of
    // CURRENT.tmp recorded as the manifest's, at 16 bytes, cut the manifest to 16 bytes at the
    // power cut once two flushes ran at a time). `close` is an own property of each handle, not
    // on the prototype. Not counted as an operation: crash points keep their numbers.
    const close = handle.close;
    handle.close = () => {
      fdPaths.delete(fd);
      dsync.delete(fd);
      return close();
    };
    return handle;
  }) as AnyFn;
  const rename = fsp.rename;
  p["rename"] = (async (from: string, to: string) => {
    step(toPath(to));
    const previous = orig.existsSync(to) ? orig.readFileSync(to).toString("base64") : null;
    // Journaled before it is made, as writes are: recorded after, a kill landing between the two
    // (another thread's crash point) left a rename on disk that the power cut did not undo, while
    // it undid the unsynced creation of the file the rename pointed at (CURRENT naming a
    // manifest the cut removed: a CI run at c25939a). Undoing a rename that never happened
    // leaves its target as it was.
    if (inDir(toPath(to))) record({ e: "rename", from: toPath(from), to: toPath(to), previous });
    await rename(from, to);
  }) as AnyFn;
  const writeFile = fsp.writeFile;
  p["writeFile"] = (async (path: string, data: string, options?: { flush?: boolean }) => {
    const file = toPath(path);
    step(file);
    if (!inDir(file)) return writeFile(path, data, options);
    const existed = orig.existsSync(file);
    if (!existed) record({ e: "create", p: file });
    record({ e: "write", p: file, before: existed ? orig.statSync(file).size : 0 });
    await writeFile(path, data, options);
    // `flush: true` fsyncs the data before close: durable data, not yet a durable name.
    if (options?.flush === true) {
      record({ e: "fsync", p: file, size: Buffer.byteLength(data), dir: false });
    }
    return undefined;
  }) as AnyFn;
  wrap(p, "unlink");
  const mkdir = fsp.mkdir;
  p["mkdir"] = (async (path: string, options?: { recursive?: boolean }) => {
    // Journaled, not counted (crash points keep their numbers): each directory this call makes.
    const made: string[] = [];
    for (let d = toPath(path); inDir(d) && !orig.existsSync(d); d = dirname(d)) made.push(d);
    const result = await mkdir(path, options);
    for (const d of made.reverse()) if (orig.existsSync(d)) record({ e: "create", p: d });
    return result;
  }) as AnyFn;

  type Note = (fd: number) => void;
  const method = (name: string, hooks: { before?: Note; after?: Note }): void => {
    const fn = proto[name] as AnyFn;
    proto[name] = function (this: { fd: number }, ...args: never[]) {
      const fd = this.fd;
      step(fdPaths.get(fd));
      hooks.before?.(fd);
      return (fn.apply(this, args) as Promise<unknown>).then((result) => {
        hooks.after?.(fd);
        return result;
      });
    };
  };
  method("write", {
    before: noteWrite,
    after: (fd) => {
      if (dsync.has(fd)) noteSync(fd);
    },
  });
  method("truncate", { before: noteWrite });
  method("sync", { after: noteSync });
  method("datasync", { after: noteSync });
  syncBuiltinESMExports();
}
