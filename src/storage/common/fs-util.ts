import { closeSync, openSync, fsyncSync } from "node:fs";
import { open } from "node:fs/promises";

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
