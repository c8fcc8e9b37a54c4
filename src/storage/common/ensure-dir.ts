import { dirname, resolve } from "node:path";
import type { FileSystem } from "./file-system.ts";

/** Per file system (one per process, or per simulated process): directories made durable. */
const durable = new WeakMap<FileSystem, Set<string>>();

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
 * it, seeds 7151 and 8371). Every ancestor is checked, since one may have failed its fsync after
 * its children succeeded. `dir` itself, and what mkdirp made now, are made durable whatever an
 * earlier call did: a directory can be removed and made again under the same path (a shard's,
 * when a replica deleted here by replica GC comes back), and the new one's name is covered by no
 * fsync yet. Cost: one fsync of `shards/` per shard directory a process opens.
 */
export async function ensureDir(fs: FileSystem, dir: string): Promise<void> {
  const created = await fs.mkdirp(dir);
  const first = created === undefined ? undefined : resolve(created);
  let done = durable.get(fs);
  if (done === undefined) durable.set(fs, (done = new Set()));
  const leaf = resolve(dir);
  for (let d = leaf; d !== dirname(d); d = dirname(d)) {
    // On the path from `dir` up, what mkdirp made is `first` and everything below it.
    const fresh = d === leaf || (first !== undefined && d.length >= first.length);
    if (!fresh && done.has(d)) continue;
    await fs.fsyncDir(dirname(d));
    done.add(d);
  }
}
