import { closeSync, openSync, fsyncSync } from "node:fs";
import { open, rename, writeFile } from "node:fs/promises";
import { dirname } from "node:path";

/**
 * Makes a directory's entries (created, renamed, removed files) durable. Without it a crash can
 * lose a rename or a new file's name even though the file's data was fsynced.
 */
export async function fsyncDir(dir: string): Promise<void> {
  const handle = await open(dir, "r");
  try {
    await handle.sync();
  } finally {
    await handle.close();
  }
}

/** Synchronous twin of fsyncDir, for worker threads and start-up. */
export function fsyncDirSync(dir: string): void {
  const fd = openSync(dir, "r");
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/**
 * Replaces the small file at `path` with `text`, durably and whole: written aside, flushed,
 * renamed into place, and the directory synced. A crash leaves the old file or the new one.
 */
export async function writeFileDurably(path: string, text: string): Promise<void> {
  const tmp = `${path}.tmp`;
  await writeFile(tmp, text, { flush: true });
  await rename(tmp, path);
  await fsyncDir(dirname(path));
}
