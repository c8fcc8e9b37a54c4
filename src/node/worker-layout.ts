/**
 * How shard workers lay out a data directory (shard-workers.ts): worker i of N keeps its WAL in
 * `wal-worker-<i>` (one worker: `wal`, as a node without workers), and the shard directories
 * stay in `shards/`. N is fixed for the life of the directory, since each worker's WAL holds only
 * its own shards: a first start with N > 1 records it in `shard-workers`, and a later start with
 * another N is refused before anything is opened (unless nothing was written under the record).
 */
import { readdir, stat, unlink } from "node:fs/promises";
import { join } from "node:path";
import { CairnError } from "../common/errors.ts";
import { ensureDir, fsyncDir, nodeFileSystem, writeFileDurably } from "../storage/index.ts";
import { readRecord } from "./data-dir.ts";

const MARKER = "shard-workers";

export class ShardWorkersMismatchError extends CairnError {
  constructor(dataDir: string, recorded: number, configured: number) {
    super(
      "CAIRN_ERR_SHARD_WORKERS_MISMATCH",
      `data directory ${dataDir} was written with shard_workers ${recorded}, but shard_workers is ${configured}: start it with shard_workers ${recorded} (each worker's WAL holds only its own shards)`,
    );
    this.name = "ShardWorkersMismatchError";
  }
}

/** Worker `index`'s WAL directory among `workers`. */
export function walDirOf(dataDir: string, workers: number, index: number): string {
  return workers === 1 ? join(dataDir, "wal") : join(dataDir, `wal-worker-${index}`);
}

/**
 * Checks that `dataDir` was written with `workers` shard workers, and records the number in a
 * new directory started with more than one. A directory without the record was written by a
 * node without workers (or is new). A record with nothing written under it (no WAL, no shard:
 * a first start that failed before it opened its storage, e.g. on a port in use) binds nothing:
 * the directory is new.
 */
export async function checkShardWorkers(dataDir: string, workers: number): Promise<void> {
  const recorded = await readRecorded(dataDir);
  if (recorded === null) await refuseUnrecordedWorkers(dataDir);
  if (recorded === workers) return;
  if (recorded !== null) {
    if (!(await nothingWritten(dataDir, recorded))) {
      throw new ShardWorkersMismatchError(dataDir, recorded, workers);
    }
    await unlink(join(dataDir, MARKER));
    await fsyncDir(dataDir);
  }
  if (workers === 1) return;
  if (
    (await entries(join(dataDir, "wal"))) > 0 ||
    (await entries(join(dataDir, "shards"))) > 0 ||
    (await exists(`${join(dataDir, "wal")}.created`))
  ) {
    throw new ShardWorkersMismatchError(dataDir, 1, workers);
  }
  await ensureDir(nodeFileSystem, dataDir);
  await writeFileDurably(join(dataDir, MARKER), `${workers}\n`);
}

/**
 * A directory without the record, but with workers' WALs (or their `.created` markers): the
 * record was lost (deleted by hand). Taken for a directory of no workers, a start with one
 * opened a new `wal` beside them, their writes never replayed; with more, the refusal named 1 as
 * the number written. The number cannot be read back for sure (the last workers' WALs may be
 * gone too): the operator writes it again.
 */
async function refuseUnrecordedWorkers(dataDir: string): Promise<void> {
  let names: string[];
  try {
    names = await readdir(dataDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return;
    throw err;
  }
  const indexes = names
    .map((n) => /^wal-worker-(\d+)(?:\.created)?$/.exec(n)?.[1])
    .filter((i) => i !== undefined)
    .map(Number);
  if (indexes.length === 0) return;
  const last = Math.max(...indexes);
  throw new CairnError(
    "CAIRN_ERR_SHARD_WORKERS_MISMATCH",
    `data directory ${dataDir} holds shard workers' WALs (wal-worker-0 to wal-worker-${last}) but not its record of their number (${MARKER}, lost): write the number it was run with (at least ${last + 1}) into ${join(dataDir, MARKER)}, then start it with shard_workers that number`,
  );
}

/**
 * Whether no WAL (of `recorded` workers, or of none) and no shard directory holds anything, and
 * no WAL was created (its `.created` marker: a WAL since lost binds the number too, and its loss
 * is refused when it opens).
 */
async function nothingWritten(dataDir: string, recorded: number): Promise<boolean> {
  const wals = [join(dataDir, "wal")];
  for (let i = 0; i < recorded; i++) wals.push(walDirOf(dataDir, recorded, i));
  for (const dir of [...wals, join(dataDir, "shards")]) if ((await entries(dir)) > 0) return false;
  for (const dir of wals) if (await exists(`${dir}.created`)) return false;
  return true;
}

async function exists(path: string): Promise<boolean> {
  try {
    await stat(path);
    return true;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return false;
    throw err;
  }
}

async function readRecorded(dataDir: string): Promise<number | null> {
  const text = await readRecord(join(dataDir, MARKER));
  if (text === null) return null;
  const n = Number(text.trim());
  if (!Number.isInteger(n) || n < 1) {
    throw new CairnError(
      "CAIRN_ERR_SHARD_WORKERS_MISMATCH",
      `${join(dataDir, MARKER)} does not hold a number of shard workers: ${JSON.stringify(text)}`,
    );
  }
  return n;
}

async function entries(dir: string): Promise<number> {
  try {
    return (await readdir(dir)).length;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === "ENOENT") return 0;
    throw err;
  }
}
