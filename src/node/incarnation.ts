/**
 * The incarnation of a data directory: a random id created, durably, with the directory's first
 * start, and kept in `<data_dir>/incarnation`. In a cluster it names the node's replicas in every
 * group (`<node id>@<tag>`, src/cluster/replica.ts): a wiped or replaced data directory is a new
 * incarnation, hence new replicas, which rejoin the groups rather than answer for state they do
 * not hold (src/node/cluster.ts).
 */
import { randomUUID } from "node:crypto";
import { readFile } from "node:fs/promises";
import { join } from "node:path";
import { ensureDir, nodeFileSystem, writeFileDurably } from "../storage/index.ts";

const FILE = "incarnation";
const VALID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

/**
 * Reads the data directory's incarnation, creating it (durably) on the directory's first start;
 * `created` tells which.
 */
export async function loadIncarnation(dataDir: string): Promise<{ id: string; created: boolean }> {
  const path = join(dataDir, FILE);
  try {
    const text = (await readFile(path, "utf8")).trim();
    if (!VALID.test(text)) throw new Error(`${path} holds no valid incarnation id`);
    return { id: text, created: false };
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
  }
  const id = randomUUID();
  await ensureDir(nodeFileSystem, dataDir);
  // A crash leaves either no file or a whole one.
  await writeFileDurably(path, `${id}\n`);
  return { id, created: true };
}
