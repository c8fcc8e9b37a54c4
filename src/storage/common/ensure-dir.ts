import { dirname, resolve } from "node:path";
import type { FileSystem } from "./file-system.ts";

/**
 * Creates `dir` and its missing parents durably: after each directory it creates, the parent's
 * entries are fsynced. `mkdir -p` alone leaves a new directory's name in the page cache, and a
 * power cut can take the directory, and every file fsynced inside it, away.
 */
export async function ensureDir(fs: FileSystem, dir: string): Promise<void> {
  const path = resolve(dir);
  const parent = dirname(path);
  if (parent === path) return;
  let exists: boolean;
  try {
    exists = (await fs.readdir(parent)).includes(
      path.slice(parent.length + (parent.endsWith("/") ? 0 : 1)),
    );
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== "ENOENT") throw err;
    exists = false;
  }
  if (exists) return;
  await ensureDir(fs, parent);
  await fs.mkdirp(path);
  await fs.fsyncDir(parent);
}
