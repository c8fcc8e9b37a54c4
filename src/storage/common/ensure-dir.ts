import { dirname, resolve } from "node:path";
import type { FileSystem } from "./file-system.ts";

/**
 * Creates `dir` and its missing parents durably (mkdir -p, then an fsync of the parent of every
 * directory it created). A new directory's name is durable only once its parent is fsynced:
 * without this, a power cut soon after the first start could take the directory, and every file
 * fsynced inside it, away.
 */
export async function ensureDir(fs: FileSystem, dir: string): Promise<void> {
  const created = await fs.mkdirp(dir);
  if (created === undefined) return;
  for (let d = resolve(dir); ; d = dirname(d)) {
    await fs.fsyncDir(dirname(d));
    if (d === resolve(created) || d === dirname(d)) break;
  }
}
