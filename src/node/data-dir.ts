/**
 * The data directory as an operator sees it: before a node opens anything it checks that
 * `data_dir` is (or can be made) a writable directory, and a file-system error met while
 * starting is reported with the setting, the path and the real cause (a full disk, a read-only
 * file system, a file where a directory should be), never as a bare `ENOENT … mkdir`.
 */
import { constants } from "node:fs";
import { access, mkdir, readFile, stat } from "node:fs/promises";
import { dirname } from "node:path";
import { CairnError } from "../common/errors.ts";

/** What an errno means for a data directory, in words an operator acts on. */
const CAUSES: Readonly<Record<string, string>> = {
  ENOSPC: "the disk is full (no space left on device)",
  EDQUOT: "the disk quota is exhausted",
  EROFS: "the file system is read-only",
  EACCES: "permission denied",
  EPERM: "operation not permitted",
  ENOTDIR: "a path component is a file, not a directory",
  EISDIR: "a directory is where a file should be",
  EIO: "an I/O error (the disk may be failing)",
  EMFILE: "too many open files (raise the open-file limit, ulimit -n)",
  ENFILE: "too many open files on the system",
};

/** Error codes that mean the disk has no room: CAIRN_ERR_DISK_FULL. */
const FULL = new Set(["ENOSPC", "EDQUOT"]);

/** Whether `err` is a file-system error (node:fs style, with an errno `code`). */
export function isFsError(err: unknown): err is NodeJS.ErrnoException {
  return (
    err instanceof Error &&
    !(err instanceof CairnError) &&
    typeof (err as NodeJS.ErrnoException).code === "string" &&
    typeof (err as NodeJS.ErrnoException).errno === "number"
  );
}

/**
 * `err`, met trying to `action` in data directory `dataDir`, as operators should read it: a
 * file-system error becomes a CairnError, CAIRN_ERR_DISK_FULL for a full disk or quota, else
 * CAIRN_ERR_DATA_DIR, whose message names `data_dir`, the file when known and the cause (`err`
 * kept as its cause). Any other error is returned as it is.
 */
export function dataDirError(err: unknown, dataDir: string, action: string): unknown {
  if (!isFsError(err)) return err;
  const code = err.code ?? "";
  const cause = CAUSES[code] ?? err.message;
  const file = err.path ?? null;
  return new CairnError(
    FULL.has(code) ? "CAIRN_ERR_DISK_FULL" : "CAIRN_ERR_DATA_DIR",
    `data_dir ${dataDir}: cannot ${action}${file === null ? "" : ` (${file})`}: ${cause} [${code}${err.syscall === undefined ? "" : ` in ${err.syscall}`}]`,
    { cause: err },
  );
}

/**
 * Makes sure `dataDir` is a directory, creating it (and its parents) if missing. A file in its
 * place, a parent that is a file, or a directory that cannot be created is a CairnError
 * (CAIRN_ERR_DATA_DIR) naming data_dir and the cause. Whether it is writable is proven by the
 * lock file (data-dir-lock.ts), the first thing written in it.
 */
export async function prepareDataDir(dataDir: string): Promise<void> {
  try {
    const st = await stat(dataDir);
    if (!st.isDirectory()) {
      throw new CairnError(
        "CAIRN_ERR_DATA_DIR",
        `data_dir ${dataDir} is not a directory (it is a ${st.isFile() ? "file" : "special file"}): point data_dir at a directory, or remove the file`,
      );
    }
    return;
  } catch (err) {
    if (err instanceof CairnError) throw err;
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") {
      throw dataDirError(err, dataDir, "use it as the data directory");
    }
  }
  try {
    await mkdir(dataDir, { recursive: true });
  } catch (err) {
    // A recursive mkdir on a read-only file system says ENOENT: the directory it could not
    // create is missing. The nearest existing parent tells the real cause.
    throw dataDirError(
      (err as NodeJS.ErrnoException).code === "ENOENT" ? await parentCause(dataDir, err) : err,
      dataDir,
      "create the data directory",
    );
  }
}

/** Why `dir`'s nearest existing parent does not take a new directory, else `err`. */
async function parentCause(dir: string, err: unknown): Promise<unknown> {
  for (let d = dirname(dir); d !== dirname(d); d = dirname(d)) {
    try {
      await access(d, constants.W_OK);
      return err;
    } catch (parentErr) {
      if ((parentErr as NodeJS.ErrnoException).code !== "ENOENT") return parentErr;
    }
  }
  return err;
}

/**
 * The text of a small record the data directory keeps (`total-shards`, `node-id`, …), or null
 * when it has none.
 */
export async function readRecord(path: string): Promise<string | null> {
  try {
    return await readFile(path, "utf8");
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return null;
    throw err;
  }
}
