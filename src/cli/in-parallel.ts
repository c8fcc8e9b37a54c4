/**
 * A restore's writes: every entry of a backup, in the file's order, written with a bounded
 * number of writes and of key and value bytes in flight.
 */
import type { BackupEntry, BackupReader } from "./backup-file.ts";

/** How many writes, and how many bytes of their keys and values, may be in flight at once. */
export interface InFlight {
  readonly concurrency: number;
  /** A larger entry is written alone: nothing else is in flight with it. */
  readonly maxBytes: number;
}

/**
 * Runs `work` on every entry of the backup, in order, with at most `concurrency` entries and
 * `maxBytes` of their keys and values in flight; the first failure (of a write, or of the
 * reading) stops new work, and is thrown once the work in flight has ended.
 *
 * Entries are taken from the reader one at a time, and only when there is room for them: the
 * writers took them as soon as any of them was free, a batch of the reader's at once, so a
 * backup of large values held `concurrency` of them (64 values of up to 64 MiB, and each
 * write's message) whatever the memory.
 */
export async function inParallel(
  reader: BackupReader,
  { concurrency, maxBytes }: InFlight,
  work: (e: BackupEntry) => Promise<void>,
): Promise<void> {
  const running = new Set<Promise<void>>();
  let bytes = 0;
  let failure: { err: unknown } | null = null;
  const failed = (): boolean => failure !== null;
  try {
    reading: for await (const batch of reader.entries()) {
      for (const e of batch) {
        const size = e.key.length + e.value.length;
        while (
          !failed() &&
          running.size > 0 &&
          (running.size >= concurrency || bytes + size > maxBytes)
        )
          await Promise.race(running);
        if (failed()) break reading;
        bytes += size;
        const write: Promise<void> = work(e)
          .catch((err: unknown) => {
            failure ??= { err };
          })
          .finally(() => {
            bytes -= size;
            running.delete(write);
          });
        running.add(write);
      }
    }
  } catch (err) {
    failure ??= { err };
  }
  await Promise.all(running);
  if (failure !== null) throw (failure as { err: unknown }).err;
}
