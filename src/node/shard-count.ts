/**
 * A data directory's number of virtual shards. A key's shard is its hash modulo
 * `cluster.total_shards`, so a directory written with one number and read with another looks
 * for most keys in the wrong shard: they read as not found. The first start records the number
 * in `<data_dir>/total-shards`, and a later start with another is refused before anything is
 * opened, naming both numbers (as worker-layout.ts does for shard_workers).
 */
import { readdir } from "node:fs/promises";
import { join } from "node:path";
import { CairnError } from "../common/errors.ts";
import { writeFileDurably } from "../storage/index.ts";
import { readRecord } from "./data-dir.ts";

const RECORD = "total-shards";

export class TotalShardsMismatchError extends CairnError {
  constructor(dataDir: string, recorded: number, configured: number) {
    super(
      "CAIRN_ERR_SHARD_COUNT_MISMATCH",
      `data directory ${dataDir} was written with cluster.total_shards ${recorded}, but cluster.total_shards is ${configured}: start it with cluster.total_shards ${recorded} (a key's shard is its hash modulo total_shards; with another number most keys would be looked for in the wrong shard)`,
    );
    this.name = "TotalShardsMismatchError";
  }
}

/**
 * Checks that `dataDir` (which exists) was written with `totalShards` shards, and records the
 * number when the directory holds no record yet: a new directory, or one written before the
 * record existed (whose shards beyond the number are refused when the storage opens).
 */
export async function checkTotalShards(dataDir: string, totalShards: number): Promise<void> {
  const path = join(dataDir, RECORD);
  const text = await readRecord(path);
  if (text !== null) {
    const recorded = Number(text.trim());
    if (!Number.isInteger(recorded) || recorded < 1) {
      throw new CairnError(
        "CAIRN_ERR_SHARD_COUNT_MISMATCH",
        `${path} does not hold a number of shards: ${JSON.stringify(text)} (it records the data directory's cluster.total_shards)`,
      );
    }
    if (recorded === totalShards) return;
    // A record with nothing written under it binds nothing (a first start that failed before it
    // opened its storage, e.g. on a port in use).
    if (!(await holdsData(dataDir))) {
      await writeFileDurably(path, `${totalShards}\n`);
      return;
    }
    throw new TotalShardsMismatchError(dataDir, recorded, totalShards);
  }
  await writeFileDurably(path, `${totalShards}\n`);
}

/**
 * Whether a WAL (`wal`, `wal-worker-<i>`) or the shards' directory holds anything, or a WAL was
 * created here (its marker, `wal.created` or `wal-worker-<i>.created`, src/storage/wal/): a WAL
 * since lost still binds the directory. Its loss is refused when the WAL opens; taken for a new
 * directory, the records were rewritten first, and the WAL put back was then served under
 * another total_shards, node_id or mode.
 */
export async function holdsData(dataDir: string): Promise<boolean> {
  const names = await readdir(dataDir);
  for (const name of names) {
    if (isWalMarker(name)) return true;
    if (name !== "shards" && name !== "wal" && !name.startsWith("wal-worker-")) continue;
    try {
      if ((await readdir(join(dataDir, name))).length > 0) return true;
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== "ENOTDIR") throw err;
    }
  }
  return false;
}

/** Whether `name` is a WAL's created marker (`wal.created`, `wal-worker-<i>.created`). */
function isWalMarker(name: string): boolean {
  return name === "wal.created" || /^wal-worker-\d+\.created$/.test(name);
}
