/**
 * Planted bugs that need code of their own, for the chaos harness's canaries (test/chaos/;
 * MultiRaftOptions.testingBugs, which only tests and CAIRN_TESTING_BUGS set). Never on a
 * production path: the driver calls these only when the matching bug is planted.
 */
import { decodeSnapshotStream, type WriteOp } from "../storage/index.ts";
import type { ShardEngine } from "./engine.ts";

/**
 * `snapshotInstallNotDurable`: installs a snapshot as an ordinary write at the snapshot's index
 * (the keys it lacks deleted, its items put), which lives in the memtable until a later flush,
 * instead of `importSnapshot`, which makes it durable before the WAL records the snapshot. After
 * a crash the engine reopens below the snapshot while the WAL no longer holds the log under it:
 * what a skipped fsync of the install loses in a power cut, made visible to a SIGKILL.
 */
export async function installSnapshotNotDurably(
  lsm: ShardEngine,
  frames: AsyncIterable<Uint8Array>,
  index: number,
): Promise<void> {
  const items = new Map<string, WriteOp>();
  for await (const item of decodeSnapshotStream(frames)) {
    if (item.kind === "entry") {
      // Copied: an entry is a view valid until the next item is asked for.
      items.set(Buffer.from(item.key).toString("hex"), {
        type: "put",
        key: Buffer.from(item.key),
        value: Buffer.from(item.value),
      });
    }
  }
  const ops: WriteOp[] = [];
  for (const [key] of lsm.scan({})) {
    if (!items.has(Buffer.from(key).toString("hex"))) ops.push({ type: "delete", key });
  }
  ops.push(...items.values());
  await lsm.write(index, ops);
}
