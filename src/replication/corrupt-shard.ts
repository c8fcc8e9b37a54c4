/**
 * A cluster node whose shard's tables turn out corrupt (a block, a table's footer or a manifest
 * record fails its checksum when a read, a flush or a compaction meets it: bit rot, a bad
 * sector, a stray write) stops, as on any storage failure: what it serves must be what it
 * acknowledged. Restarted as it is, it would serve again until the next read of the damaged
 * block, and stop again.
 *
 * So as the stopped node closes, the damaged shard's directory is moved out of the way, to
 * `<data_dir>/quarantine/shard-<id>-<time>/` (kept for the operator to examine, then delete),
 * when another voter of its group holds every entry the group committed: every voter but this
 * one when the group has two, a majority of them otherwise, one at least either way. At the next
 * start the shard's directory is missing while the WAL holds its hard state, which is the lost
 * shard directory of refill.ts: its replica votes only as up to date as the log it held, and its
 * leader refills it. Nothing is lost, and no operator has to act for the node to heal.
 *
 * Tables found corrupt as the node starts (its engine's open reads every table's footer, index
 * and filter, and a small table's only block) are handled in that start (Groups#openAtStart):
 * once every other shard is open and the meta group has replayed its log (a shard worker without
 * it: once the worker holding it shared a state that places the shard), the shard's directory
 * is moved aside when the meta state places the shard on another node too, and the shard opens
 * as a lost one. The meta group's own shard (shard 0), whose state is what is damaged, is moved
 * aside when its recorded voters (meta-voters.ts) include another node. Without that knowledge
 * (no record, a state that does not place the shard: none when shard 0 was damaged too) the
 * node refuses to start, naming the directory to move.
 *
 * A single node, and a group with no other voter here (a one-replica cluster, a new replica
 * that has not heard its configuration yet), keeps its directory: its tables are its only copy,
 * and the operator decides (docs/operations.md, "Corrupt storage").
 */
import { mkdir, rename } from "node:fs/promises";
import { join, relative, resolve, sep } from "node:path";
import { CairnError } from "../common/errors.ts";
import { fsyncDir } from "../storage/index.ts";

/** Where the directories of corrupt shards go, under the data directory. */
const CORRUPT_SHARDS_DIR = "quarantine";

/** How deep a cause chain is followed for the corruption. */
const MAX_CAUSES = 8;

/**
 * The shard under `dataDir` whose files `err` (or one of its causes) found corrupt
 * (CAIRN_ERR_CORRUPTION, naming the file), or null: another failure, or a file outside every
 * shard's directory (the WAL's).
 */
export function corruptShardOf(err: unknown, dataDir: string): number | null {
  let e: unknown = err;
  for (let depth = 0; depth < MAX_CAUSES && e instanceof Error; depth++) {
    const { code, file } = e as Error & { code?: unknown; file?: unknown };
    if (code === "CAIRN_ERR_CORRUPTION" && typeof file === "string") {
      return shardOfFile(file, dataDir);
    }
    e = e.cause;
  }
  return null;
}

function shardOfFile(file: string, dataDir: string): number | null {
  const rel = relative(resolve(dataDir, "shards"), resolve(file));
  const [first, second] = rel.split(sep);
  // A file in a shard's directory: "<id>/<name>" (or deeper), never the directory itself.
  if (first === undefined || second === undefined || !/^\d+$/.test(first)) return null;
  return Number(first);
}

/**
 * Moves shard `id`'s directory to `<dataDir>/quarantine/shard-<id>-<time>` durably and returns
 * where it went. The shard's engine must be closed.
 */
export async function quarantineShard(dataDir: string, id: number, now: Date): Promise<string> {
  const shards = join(dataDir, "shards");
  const into = join(dataDir, CORRUPT_SHARDS_DIR);
  const created = await mkdir(into, { recursive: true });
  const stamp = now.toISOString().replace(/[-:]/g, "");
  const target = join(into, `shard-${id}-${stamp}`);
  await rename(join(shards, String(id)), target);
  await fsyncDir(into);
  await fsyncDir(shards);
  if (created !== undefined) await fsyncDir(dataDir);
  return target;
}

/**
 * `err`, met opening the shards at start, with what to do when it is a shard's corruption (a
 * damaged manifest): its directory names the shard, and only a cluster member's peers can refill
 * it. Any other error is returned as it is.
 */
export function explainCorruptShard(err: unknown, dataDir: string, cluster: boolean): unknown {
  const id = corruptShardOf(err, dataDir);
  if (id === null) return err;
  const dir = join(dataDir, "shards", String(id));
  const todo = cluster
    ? `move ${dir} out of ${join(dataDir, "shards")} and start the node again: its peers refill shard ${id}`
    : `${dir} holds this single node's only copy of shard ${id}: restore a backup`;
  return new CairnError(
    "CAIRN_ERR_CORRUPTION",
    `${(err as Error).message}; ${todo} (docs/operations.md, "Corrupt storage")`,
    {
      cause: err,
    },
  );
}
