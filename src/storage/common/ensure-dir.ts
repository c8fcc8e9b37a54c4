import { dirname, resolve } from "node:path";
import type { FileSystem } from "./file-system.ts";

/** Per file system (one per process, or per simulated process): what is known durable. */
interface Durability {
  /** Directories whose names are durable (their parent was fsynced after they existed). */
  readonly names: Set<string>;
  /** Directories fsynced by this process. */
  readonly synced: Set<string>;
}

const known = new WeakMap<FileSystem, Durability>();

/**
 * Creates `dir` and its missing parents durably: mkdir -p, then, from `dir` up to the root, an
 * fsync of the parent of every directory whose name this file system has not made durable yet.
 * A directory's name is durable only once its parent is fsynced: without this, a power cut soon
 * after the first start could take the directory, and every file fsynced inside it, away.
 *
 * Directories that exist already are covered too, once per process: an earlier call (or an
 * earlier process) may have created them and then failed on that fsync (EIO), and skipping it
 * on the retry would leave the names undurable for good while files inside are synced and relied
 * on (found by the driver simulation: a shard directory lost after a snapshot was installed in
 * it, seeds 7151 and 8371). An existing directory whose parent this process fsynced already
 * needs nothing more, so a node opening its 1024 shard directories fsyncs their parent once.
 */
export async function ensureDir(fs: FileSystem, dir: string): Promise<void> {
  const created = await fs.mkdirp(dir);
  let k = known.get(fs);
  if (k === undefined) known.set(fs, (k = { names: new Set(), synced: new Set() }));
  // Directories from `created` down to `dir` are new: their parents must be fsynced now.
  const fresh = created === undefined ? null : resolve(created);
  // Every ancestor is checked: one may have failed its fsync after its children succeeded.
  for (let d = resolve(dir); d !== dirname(d); d = dirname(d)) {
    if (k.names.has(d)) continue;
    const parent = dirname(d);
    const isNew = fresh !== null && d.length >= fresh.length;
    // A new entry in `parent` is not covered by an fsync of it done before: until the next one
    // succeeds, `parent` does not count as synced.
    if (isNew) k.synced.delete(parent);
    if (!k.synced.has(parent)) {
      await fs.fsyncDir(parent);
      k.synced.add(parent);
    }
    k.names.add(d);
  }
}
