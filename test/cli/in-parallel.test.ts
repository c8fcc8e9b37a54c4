/**
 * A restore's writes (src/cli/in-parallel.ts) over a real backup file: every entry once, in the
 * file's order, within the writes and the bytes allowed in flight; the first failure stops them.
 */
import assert from "node:assert/strict";
import { mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { type BackupEntry, BackupWriter, openBackup } from "../../src/cli/backup-file.ts";
import { inParallel } from "../../src/cli/in-parallel.ts";

const KIB = 1024;
let dir: string;
let made = 0;

before(() => {
  dir = mkdtempSync(join(tmpdir(), "cairn-in-parallel-"));
});
after(() => rmSync(dir, { recursive: true, force: true }));

/** A backup of `sizes.length` keys ("k00", "k01", …) with values of those sizes. */
async function backupOf(sizes: readonly number[]): Promise<string> {
  const path = join(dir, `b${made++}.bak`);
  const w = await BackupWriter.create(path, {
    created: "2026-12-07T00:00:00.000Z",
    range: {},
    consistency: "linearizable",
  });
  for (const [i, size] of sizes.entries())
    await w.add(Buffer.from(`k${String(i).padStart(2, "0")}`), Buffer.alloc(size, i));
  await w.finish();
  return path;
}

/**
 * Work that ends a turn of the event loop after it starts (every entry handed out in one turn
 * starts before any ends), recording what it started and the most bytes it held at once.
 */
function heldWork(): {
  work: (e: BackupEntry) => Promise<void>;
  started: string[];
  most: { writes: number; bytes: number };
} {
  const started: string[] = [];
  const most = { writes: 0, bytes: 0 };
  let writes = 0;
  let bytes = 0;
  const work = async (e: BackupEntry): Promise<void> => {
    const size = e.key.length + e.value.length;
    started.push(Buffer.from(e.key).toString());
    writes++;
    bytes += size;
    most.writes = Math.max(most.writes, writes);
    most.bytes = Math.max(most.bytes, bytes);
    await new Promise((resolve) => setImmediate(resolve));
    writes--;
    bytes -= size;
  };
  return { work, started, most };
}

describe("inParallel", () => {
  it("holds at most maxBytes of keys and values in flight, one larger entry alone", async () => {
    // 16 values of 256 KiB, then one of 2 MiB, then 4 more: a batch of the reader's (4 MiB) was
    // handed out whole to the 64 writers, whatever its values' size. A restore at the default
    // --concurrency of a store of 64 MiB values held 64 of them, and their messages, at once.
    const sizes = [
      ...Array<number>(16).fill(256 * KIB),
      2048 * KIB,
      ...Array<number>(4).fill(256 * KIB),
    ];
    const file = await backupOf(sizes);
    const reader = await openBackup(file);
    const { work, started, most } = heldWork();
    try {
      await inParallel(reader, { concurrency: 64, maxBytes: 1024 * KIB }, work);
    } finally {
      await reader.close();
    }
    assert.deepEqual(
      started,
      sizes.map((_, i) => `k${String(i).padStart(2, "0")}`),
      "every entry once, in order",
    );
    assert.ok(most.bytes <= 2048 * KIB + 3, `${most.bytes} bytes in flight at most`);
    assert.ok(most.writes <= 4, `${most.writes} writes of 256 KiB in flight within 1 MiB`);
  });

  it("keeps to `concurrency` writes when their bytes allow more", async () => {
    const file = await backupOf(Array<number>(40).fill(10));
    const reader = await openBackup(file);
    const { work, started, most } = heldWork();
    try {
      await inParallel(reader, { concurrency: 8, maxBytes: 1024 * KIB }, work);
    } finally {
      await reader.close();
    }
    assert.equal(started.length, 40);
    assert.equal(most.writes, 8);
  });

  it("stops at the first failure, and throws it once the writes in flight have ended", async () => {
    const file = await backupOf(Array<number>(40).fill(10));
    const reader = await openBackup(file);
    let ended = 0;
    let inFlight = 0;
    const failure = new Error("the node refused k05");
    try {
      await assert.rejects(
        inParallel(reader, { concurrency: 4, maxBytes: 1024 * KIB }, async (e) => {
          inFlight++;
          await new Promise((resolve) => setImmediate(resolve));
          inFlight--;
          ended++;
          if (Buffer.from(e.key).toString() === "k05") throw failure;
        }),
        (err) => err === failure,
      );
    } finally {
      await reader.close();
    }
    assert.equal(inFlight, 0, "nothing in flight once it threw");
    assert.ok(ended < 40, `${ended} writes: none started after the failure was known`);
  });
});
