/**
 * One server per data directory. Two processes on one directory would interleave their WAL
 * writes (it then no longer opens) and each serve a state the other overwrites, so a node takes
 * `<data_dir>/LOCK` before it opens anything, and holds it until it has closed its storage.
 *
 * With Cairn's native addon the lock is an exclusive flock(2) on that file, as etcd and LevelDB
 * take theirs: the kernel drops it when the holder exits, however it exits, so a crash never
 * leaves a stale lock, and it holds across pid namespaces (containers) sharing the directory.
 *
 * Without the addon (no C compiler at install, or CAIRN_NO_NATIVE=1) Node.js has no flock: the
 * lock file is created with O_EXCL and names its holder's pid, and a file naming a pid that no
 * longer runs is a crashed holder's, taken over (and logged). That fallback is weaker, the
 * trade-off docs/operations.md states: it sees pids of its own pid namespace only (two containers
 * with separate namespaces sharing a directory are not stopped), a live process that reused a
 * crashed holder's pid makes it refuse until the file is removed by hand, and two servers taking
 * over one stale lock at the same instant may both succeed. Both kinds write the holder's pid
 * and kind into the file, so a server with the addon also refuses while a live server without
 * it holds the directory.
 *
 * The lock is per process: shard workers (threads) share the main thread's (shard-workers.ts).
 */
import {
  closeSync,
  constants,
  ftruncateSync,
  openSync,
  readFileSync,
  unlinkSync,
  writeSync,
} from "node:fs";
import { statfs } from "node:fs/promises";
import { join, resolve } from "node:path";
import { CairnError } from "../common/errors.ts";
import { lockFile as nativeLockFile } from "../common/native.ts";
import type { Logger } from "../ops/index.ts";
import { dataDirError, prepareDataDir } from "./data-dir.ts";
import { checkMode, checkNodeId } from "./data-dir-owner.ts";
import { checkTotalShards } from "./shard-count.ts";
import { checkShardWorkers } from "./worker-layout.ts";

export const LOCK_FILE = "LOCK";

/** The two kinds of lock, as written after the pid in the lock file. */
type LockKind = "flock" | "pid-file";

export class DataDirLockedError extends CairnError {
  constructor(dataDir: string, holder: number | null) {
    super(
      "CAIRN_ERR_DATA_DIR_LOCKED",
      `data directory ${dataDir} is in use by another Cairn server (${holder === null ? "pid unknown" : `pid ${holder}`}; lock file ${join(dataDir, LOCK_FILE)}): stop that server first, or give this one another data_dir`,
    );
    this.name = "DataDirLockedError";
  }
}

export interface DataDirLock {
  readonly path: string;
  readonly kind: LockKind;
  /** Set when the lock was taken over from a holder that no longer runs (pid-file kind only). */
  readonly tookOverFrom: number | null;
  /** Releases the lock (idempotent). */
  release(): void;
}

export interface LockOptions {
  /** flock(2) on a descriptor (the addon's); undefined: the pid-file fallback. */
  readonly flock?: ((fd: number) => boolean) | undefined;
  /** This process's pid; default process.pid (tests pass another). */
  readonly pid?: number;
  /** Whether `pid` runs; default: signal 0. */
  readonly isAlive?: (pid: number) => boolean;
}

/**
 * What a node does with its data directory before it opens anything: makes sure it is a
 * directory, takes its lock, and checks that it was written with this shard_workers,
 * cluster.total_shards and node_id (recording them on a first start). The caller releases the lock once its
 * storage is closed (or its start failed).
 */
export async function claimDataDir(
  config: {
    readonly node_id: string;
    readonly data_dir: string;
    readonly shard_workers: number;
    readonly cluster: { readonly total_shards: number; readonly seed_nodes: readonly string[] };
  },
  log: Logger,
): Promise<DataDirLock> {
  const dir = config.data_dir;
  await prepareDataDir(dir);
  const lock = lockDataDir(dir);
  try {
    if (lock.tookOverFrom !== null) {
      log.warn("took over the data directory's lock from a server that no longer runs", {
        data_dir: dir,
        lock_file: lock.path,
        previous_pid: lock.tookOverFrom,
      });
    }
    if (lock.kind === "pid-file") {
      log.warn(
        'the native addon is not loaded: the data directory is locked with a pid file, not flock (docs/operations.md, "One server per data directory")',
        { data_dir: dir, lock_file: lock.path },
      );
    }
    await checkFreeSpace(dir);
    await checkShardWorkers(dir, config.shard_workers).catch((err: unknown) => {
      throw dataDirError(err, dir, "check its shard_workers record");
    });
    await checkTotalShards(dir, config.cluster.total_shards).catch((err: unknown) => {
      throw dataDirError(err, dir, "check its total_shards record");
    });
    await checkNodeId(dir, config.node_id).catch((err: unknown) => {
      throw dataDirError(err, dir, "check its node-id record");
    });
    await checkMode(dir, config.cluster.seed_nodes.length > 0).catch((err: unknown) => {
      throw dataDirError(err, dir, "check whether a cluster member wrote it");
    });
  } catch (err) {
    lock.release();
    throw err;
  }
  return lock;
}

/**
 * Below this many free bytes on data_dir's file system a node does not start: it could not
 * write its WAL (a restart on a full disk would only fail again at its first write).
 */
const MIN_FREE_BYTES = 1024 * 1024;

async function checkFreeSpace(dir: string): Promise<void> {
  let free: number;
  try {
    const st = await statfs(dir);
    free = st.bavail * st.bsize;
  } catch {
    return; // No statfs here: the first write says it.
  }
  if (free < MIN_FREE_BYTES) {
    throw new CairnError(
      "CAIRN_ERR_DISK_FULL",
      `data_dir ${dir}: the disk is full (${free} bytes free for this user, under the ${MIN_FREE_BYTES} a node needs to write its WAL): free space on it, or move data_dir to a larger disk`,
    );
  }
}

/** Directories this process holds (a second node in the same process is refused too). */
const held = new Set<string>();

/**
 * Takes the exclusive lock of `dataDir` (which must exist), or throws DataDirLockedError naming
 * the holder's pid; a file-system failure (read-only, permission) throws a CairnError naming
 * the lock file and the cause.
 */
export function lockDataDir(dataDir: string, options: LockOptions = {}): DataDirLock {
  const flock = "flock" in options ? options.flock : nativeLockFile;
  const pid = options.pid ?? process.pid;
  const isAlive = options.isAlive ?? pidRuns;
  const path = join(dataDir, LOCK_FILE);
  const key = resolve(path);
  if (held.has(key)) throw new DataDirLockedError(dataDir, pid);
  const lock =
    flock === undefined
      ? lockWithPidFile(dataDir, path, pid, isAlive)
      : lockWithFlock(dataDir, path, pid, isAlive, flock);
  held.add(key);
  let released = false;
  return {
    ...lock,
    path,
    release() {
      if (released) return;
      released = true;
      held.delete(key);
      lock.release();
    },
  };
}

function lockWithFlock(
  dataDir: string,
  path: string,
  pid: number,
  isAlive: (pid: number) => boolean,
  flock: (fd: number) => boolean,
): { kind: LockKind; tookOverFrom: null; release(): void } {
  let fd: number;
  try {
    fd = openSync(path, constants.O_RDWR | constants.O_CREAT, 0o644);
  } catch (err) {
    throw dataDirError(err, dataDir, "create the lock file");
  }
  try {
    let taken: boolean;
    try {
      taken = flock(fd);
    } catch (err) {
      throw dataDirError(err, dataDir, `lock ${path}`);
    }
    const holder = readHolder(path);
    if (!taken) throw new DataDirLockedError(dataDir, holder?.pid ?? null);
    // A server without the addon holds it by its pid alone.
    if (
      holder !== null &&
      holder.kind === "pid-file" &&
      holder.pid !== pid &&
      isAlive(holder.pid)
    ) {
      throw new DataDirLockedError(dataDir, holder.pid);
    }
    writeHolder(fd, path, dataDir, pid, "flock");
  } catch (err) {
    closeSync(fd);
    throw err;
  }
  // Closing the descriptor drops the flock; the file stays (deleting it would let a server that
  // opened it before the deletion lock an unlinked file while another creates a new one).
  return { kind: "flock", tookOverFrom: null, release: () => closeSync(fd) };
}

function lockWithPidFile(
  dataDir: string,
  path: string,
  pid: number,
  isAlive: (pid: number) => boolean,
): { kind: LockKind; tookOverFrom: number | null; release(): void } {
  let tookOverFrom: number | null = null;
  for (let attempt = 0; ; attempt++) {
    let fd: number;
    try {
      fd = openSync(path, constants.O_RDWR | constants.O_CREAT | constants.O_EXCL, 0o644);
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "EEXIST") {
        throw dataDirError(err, dataDir, "create the lock file");
      }
      const holder = readHolder(path);
      // Our own pid is a previous life's (a container restarted with the same pid): this
      // process holds no lock on it (`held` says so).
      if (holder === null || (holder.pid !== pid && isAlive(holder.pid)) || attempt > 0) {
        throw new DataDirLockedError(dataDir, holder?.pid ?? null);
      }
      tookOverFrom = holder.pid;
      try {
        unlinkSync(path);
      } catch (unlinkErr) {
        if ((unlinkErr as NodeJS.ErrnoException).code !== "ENOENT") {
          throw dataDirError(unlinkErr, dataDir, "remove a stale lock file");
        }
      }
      continue;
    }
    try {
      writeHolder(fd, path, dataDir, pid, "pid-file");
    } finally {
      closeSync(fd);
    }
    return {
      kind: "pid-file",
      tookOverFrom,
      release: () => {
        // Only if it is still ours (never another server's that took it over).
        if (readHolder(path)?.pid !== pid) return;
        try {
          unlinkSync(path);
        } catch {
          // Left behind, it names a pid that no longer runs: the next start takes it over.
        }
      },
    };
  }
}

function writeHolder(fd: number, path: string, dataDir: string, pid: number, kind: LockKind): void {
  try {
    ftruncateSync(fd, 0);
    const text = Buffer.from(`${pid} ${kind}\n`);
    writeSync(fd, text, 0, text.length, 0);
  } catch (err) {
    throw dataDirError(err, dataDir, `write ${path}`);
  }
}

/** The pid and kind a lock file names; null when it names none (empty, or being written). */
function readHolder(path: string): { pid: number; kind: LockKind } | null {
  let text: string;
  try {
    text = readFileSync(path, "utf8");
  } catch {
    return null;
  }
  const m = /^(\d+)(?: (flock|pid-file))?\s*$/.exec(text);
  if (m === null) return null;
  return { pid: Number(m[1]), kind: m[2] === "pid-file" ? "pid-file" : "flock" };
}

function pidRuns(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    // EPERM: it runs, as another user.
    return (err as NodeJS.ErrnoException).code === "EPERM";
  }
}
