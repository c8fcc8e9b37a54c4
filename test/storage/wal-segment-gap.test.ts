/**
 * No WAL segment outlives a newer deleted one (review, bug 1). Recovery replays every segment on
 * disk, and some obsolete segments hold entries no compaction mark covers (a drop, a log reset,
 * held in the newer segment): replayed without that newer segment, they brought back a removed
 * replica's entries, or made start-up fail. Segments are deleted oldest first, each deletion
 * durable before the next, and a failed one holds back every newer one; a gap left on disk by an
 * older version is skipped at open, unless the segments after it do not stand on their own.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MemoryFileSystem } from "../../src/storage/common/index.ts";
import { Wal, type WalOptions, type WalRecord } from "../../src/storage/wal/index.ts";
import { entry, texts } from "./helpers.ts";

const DIR = "/wal";

function segmentPath(seq: number): string {
  return `${DIR}/${String(seq).padStart(20, "0")}.wal`;
}

async function segments(fs: MemoryFileSystem): Promise<number[]> {
  const names = (await fs.readdir(DIR)).filter((n) => n.endsWith(".wal")).sort();
  return names.map((n) => Number(n.slice(0, 20)));
}

/** Small segments: each batch carrying a filler entry (shard 8) fills its segment. */
function options(fs: MemoryFileSystem): WalOptions {
  return { fs, segmentBytes: 1024, preallocate: false, blockingWriteMaxBytes: 0 };
}

/** Shard 8's entries, 1,200 bytes each: the next batch starts a new segment. */
class Filler {
  last = 0;

  next(): WalRecord {
    this.last++;
    return { kind: "entries", shard: 8, entries: [entry(this.last, 1, "f".repeat(1200))] };
  }
}

/** Shard 7's state as `first..last hs term/commit [entries]`. */
function shard7(wal: Wal): string {
  const hs = wal.hardState(7);
  const log = texts(wal, 7).join(",");
  return `${wal.firstIndex(7)}..${wal.lastIndex(7)} hs ${hs?.term}/${hs?.commit} [${log}]`;
}

/** Shard 7's state once the WAL in `fs` is opened again (and closed). */
async function reopened(fs: MemoryFileSystem): Promise<string> {
  const again = await Wal.open(DIR, options(fs));
  try {
    return shard7(again);
  } finally {
    await again.close();
  }
}

/** Shard 7's replica removed (drop) and created again: entries 1-2 of term 2, committed. */
async function recreate7(wal: Wal, filler: Filler): Promise<void> {
  wal.drop(7);
  wal.append([
    { kind: "entries", shard: 7, entries: [entry(1, 2, "new1"), entry(2, 2, "new2")] },
    { kind: "hard-state", shard: 7, state: { term: 2, vote: null, commit: 2 } },
    filler.next(),
  ]);
  await wal.sync();
}

/**
 * Segment 1: shard 7's entries 1-3 (term 1). Segment 2: the replica is removed (drop) and
 * created again (entries 1-2, term 2). Segment 3: the new entries compacted. Each unlink of
 * segment 1 in `failUnlinks` fails with EIO. Returns the open WAL and shard 7's state.
 */
async function dropAndRecreate(
  fs: MemoryFileSystem,
  failUnlinks: number,
): Promise<{ wal: Wal; before: string }> {
  const filler = new Filler();
  const wal = await Wal.open(DIR, options(fs));
  wal.append([
    { kind: "entries", shard: 7, entries: [entry(1, 1), entry(2, 1), entry(3, 1)] },
    { kind: "hard-state", shard: 7, state: { term: 1, vote: null, commit: 1 } },
    filler.next(),
  ]);
  await wal.sync();
  for (let i = 0; i < failUnlinks; i++) fs.failNext("unlink", segmentPath(1), "EIO");
  wal.compact(8, filler.last);
  await recreate7(wal, filler);
  wal.compact(7, 2);
  wal.compact(8, filler.last);
  wal.append([filler.next()]);
  await wal.sync();
  return { wal, before: shard7(wal) };
}

describe("WAL segment deletion keeps the segments on disk contiguous", () => {
  it("holds back newer obsolete segments while an older one's unlink fails", async () => {
    const fs = new MemoryFileSystem();
    const filler = new Filler();
    const wal = await Wal.open(DIR, options(fs));
    wal.append([
      { kind: "entries", shard: 7, entries: [entry(1, 1), entry(2, 1), entry(3, 1)] },
      { kind: "hard-state", shard: 7, state: { term: 1, vote: null, commit: 3 } },
      filler.next(),
    ]);
    await wal.sync();
    wal.append([{ kind: "entries", shard: 7, entries: [entry(4, 1), entry(5, 1)] }, filler.next()]);
    await wal.sync();
    fs.failNext("unlink", segmentPath(2), "EIO");
    fs.failNext("unlink", segmentPath(2), "EIO");
    // Segment 3: the replica is removed and created again; segment 4 compacts the new one.
    wal.compact(7, 3);
    wal.compact(8, filler.last);
    await recreate7(wal, filler);
    wal.compact(7, 2);
    wal.compact(8, filler.last);
    wal.append([filler.next()]);
    await wal.sync();
    assert.equal(wal.stats().segmentDeleteFailures, 2);
    const onDisk = await segments(fs);
    const before = shard7(wal);
    assert.equal(before, "3..2 hs 2/2 []");
    await wal.close();

    // Was: "shard 7 misses the entries below 4" (segment 2 replayed without segment 3).
    assert.equal(await reopened(fs), before);
    assert.deepEqual(onDisk, [2, 3, 4]);
  });

  it("recovers no entry of a removed replica after a failed unlink", async () => {
    const fs = new MemoryFileSystem();
    const { wal, before } = await dropAndRecreate(fs, 2);
    assert.equal(before, "3..2 hs 2/2 []");
    const onDisk = await segments(fs);
    await wal.close();
    // Was "3..3 [3@1:e3]": the removed replica's entry 3, from segment 1 replayed alone.
    assert.equal(await reopened(fs), before);
    assert.deepEqual(onDisk, [1, 2, 3]);
  });

  it("makes each deletion durable before the next (a power cut keeps any subset)", async () => {
    const fs = new MemoryFileSystem();
    const filler = new Filler();
    const wal = await Wal.open(DIR, options(fs));
    // Shard 9 pins segment 1 until segment 2 is obsolete too: both go in one run.
    wal.append([
      { kind: "entries", shard: 7, entries: [entry(1, 1), entry(2, 1), entry(3, 1)] },
      { kind: "entries", shard: 9, entries: [entry(1, 1)] },
      filler.next(),
    ]);
    await wal.sync();
    wal.compact(8, filler.last);
    await recreate7(wal, filler);
    wal.append([{ kind: "hard-state", shard: 9, state: { term: 1, vote: null, commit: 1 } }]);
    await wal.sync(); // segment 3, not full: the next batch stays in it
    assert.deepEqual(await segments(fs), [1, 2, 3]);
    fs.failNext("fsyncDir", DIR, "EIO");
    wal.compact(7, 2);
    wal.compact(8, filler.last);
    wal.compact(9, 1);
    await wal.sync();
    const before = shard7(wal);
    assert.equal(before, "3..2 hs 2/2 []");
    // The power cut keeps the newer deletion, loses the older: a gap, had both been unsynced.
    fs.crash({ keepUnsyncedEntry: (_dir, name) => `${DIR}/${name}` === segmentPath(2) });
    assert.equal(await reopened(fs), before);
  });
});

describe("WAL open with a gap in its segments", () => {
  it("skips and deletes the segments below a gap an older version left", async () => {
    const fs = new MemoryFileSystem();
    const { wal, before } = await dropAndRecreate(fs, 2);
    await wal.close();
    // An older version deleted segment 2 while segment 1's unlink failed.
    fs.removeTree(segmentPath(2));
    assert.deepEqual(await segments(fs), [1, 3]);
    const again = await Wal.open(DIR, options(fs));
    assert.equal(shard7(again), before);
    assert.deepEqual(await segments(fs), [3]);
    await again.close();
    fs.crash();
    assert.deepEqual(await segments(fs), [3], "the deletion was durable");
  });

  it("refuses a gap whose segments the newer ones still need, deleting nothing", async () => {
    // Shard 7's entries 1-3, committed, are in segment 1 only; segments 2 and 3 are lost.
    const fs = new MemoryFileSystem();
    const filler = new Filler();
    const wal = await Wal.open(DIR, options(fs));
    wal.append([
      { kind: "entries", shard: 7, entries: [entry(1, 1), entry(2, 1), entry(3, 1)] },
      { kind: "hard-state", shard: 7, state: { term: 1, vote: null, commit: 3 } },
      filler.next(),
    ]);
    await wal.sync();
    wal.append([filler.next()]);
    await wal.sync();
    wal.compact(8, filler.last);
    wal.append([filler.next()]);
    await wal.sync();
    wal.compact(8, filler.last);
    await wal.sync();
    await wal.close();
    assert.deepEqual(await segments(fs), [1, 2, 3, 4]);
    fs.removeTree(segmentPath(2));
    fs.removeTree(segmentPath(3));
    // Segment 4 needs what only segment 1 held: its checkpoint's hard state commits entries 1-3.
    await assert.rejects(Wal.open(DIR, options(fs)), {
      code: "CAIRN_ERR_CORRUPTION",
      message: /shard 7 commits entries up to 3 .*segments 2 to 3 are missing/,
    });
    assert.deepEqual(await segments(fs), [1, 4]);
  });

  it("refuses a lost segment between live ones, deleting nothing", async () => {
    const fs = new MemoryFileSystem();
    const filler = new Filler();
    const wal = await Wal.open(DIR, options(fs));
    wal.append([
      { kind: "entries", shard: 7, entries: [entry(1, 1), entry(2, 1)] },
      { kind: "hard-state", shard: 7, state: { term: 1, vote: null, commit: 2 } },
      filler.next(),
    ]);
    await wal.sync();
    wal.append([{ kind: "entries", shard: 7, entries: [entry(3, 1)] }, filler.next()]);
    await wal.sync();
    wal.append([{ kind: "entries", shard: 7, entries: [entry(4, 1)] }, filler.next()]);
    await wal.sync();
    await wal.close();
    assert.deepEqual(await segments(fs), [1, 2, 3]);
    fs.removeTree(segmentPath(2));
    for (let i = 0; i < 2; i++) {
      await assert.rejects(Wal.open(DIR, options(fs)), {
        code: "CAIRN_ERR_CORRUPTION",
        message: /segment 2 is missing/,
      });
    }
    assert.deepEqual(await segments(fs), [1, 3]);
  });
});
