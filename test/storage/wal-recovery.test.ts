/**
 * WAL recovery cases found by the driver simulation (test/replication/sim) and the crash-model
 * probe, each replayed here on the in-memory file system.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MemoryFileSystem } from "../../src/storage/index.ts";
import { Wal, type WalEntry, type WalRecord } from "../../src/storage/wal/index.ts";
import { entry as textEntry, texts } from "./helpers.ts";

const DIR = "/data/wal";

function entry(index: number, term = 1): WalEntry {
  return { index, term, type: 0, data: new Uint8Array(700).fill(index & 0xff) };
}

describe("WAL recovery", () => {
  // Found by the driver simulation, seed 3: a shard's entries 1..11 sit in old segments; its
  // entry 12 starts a newer one (whose checkpoint predates the compaction); the compaction of 11
  // lands in a later segment, which lets the old segments be deleted. On replay the shard's log
  // starts at 12 with a hole below it, and the compaction mark at exactly the hole's edge was
  // ignored: the node refused to start ("misses the entries below 12").
  it("reopens when the only record of a shard's compaction comes after its first surviving entry", async () => {
    const fs = new MemoryFileSystem();
    let wal = await Wal.open(DIR, { fs, segmentBytes: 600 });
    for (let i = 1; i <= 11; i++) {
      wal.append([{ kind: "entries", shard: 6, entries: [entry(i)] }]);
      await wal.sync();
    }
    wal.append([{ kind: "entries", shard: 6, entries: [entry(12)] }]);
    await wal.sync();
    // Every batch is larger than a segment: each lands in a segment of its own.
    for (let i = 1; i <= 12; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i)] }]);
      await wal.sync();
    }
    wal.compact(6, 11);
    wal.compact(1, 12);
    await wal.sync();
    // One more batch: the segments that held only compacted entries are deleted.
    wal.append([{ kind: "hard-state", shard: 1, state: { term: 1, vote: null, commit: 12 } }]);
    await wal.sync();
    // And rotations, whose directory fsyncs make those deletions durable.
    for (let i = 13; i <= 15; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i)] }]);
      await wal.sync();
    }
    const before = (await fs.readdir(DIR)).length;
    await wal.close();
    fs.crash();

    wal = await Wal.open(DIR, { fs, segmentBytes: 600 });
    try {
      assert.equal(wal.firstIndex(6), 12);
      assert.equal(wal.lastIndex(6), 12);
      assert.equal(wal.term(6, 11), 1, "the compaction mark's term is restored");
      assert.ok(before >= 1);
    } finally {
      await wal.close();
    }
  });
});

describe("WAL recovery above a hole", () => {
  // Found by the crash-model probe, seed 4805. Segment 1 (later deleted) holds shard 2's entries
  // 35-36 after its snapshot at 34; segment 2 starts with the checkpoint (compaction mark 34),
  // then entries 37-38, and segment 3 overwrites 35-36 (truncating 37-38). Replay starts shard 2
  // at 37 with a hole below it and a placeholder compaction point at 36, and skipped the
  // overwrites at 35-36 as compacted: the truncated 37 came back after the compaction of 36.
  it("replays an overwrite at or below the hole's placeholder compaction point", async () => {
    const fs = new MemoryFileSystem();
    // Each batch carries a filler entry (shard 8) larger than a segment: the next one rotates.
    const options = { fs, segmentBytes: 1024, preallocate: false, blockingWriteMaxBytes: 0 };
    let fill = 0;
    const filler = (): WalRecord => ({
      kind: "entries",
      shard: 8,
      entries: [textEntry(++fill, 1, "f".repeat(1200))],
    });
    const entries = (...list: WalEntry[]): WalRecord => ({
      kind: "entries",
      shard: 2,
      entries: list,
    });
    let wal = await Wal.open(DIR, options);
    wal.append([
      { kind: "snapshot", shard: 2, meta: { index: 34, term: 1, data: new Uint8Array(1) } },
      { kind: "hard-state", shard: 2, state: { term: 1, vote: null, commit: 34 } },
      entries(textEntry(35, 1, "a35"), textEntry(36, 1, "a36")),
      filler(),
    ]);
    await wal.sync();
    wal.append([entries(textEntry(37, 1, "a37"), textEntry(38, 1, "a38")), filler()]);
    await wal.sync();
    wal.append([entries(textEntry(35, 2, "b35"), textEntry(36, 2, "b36")), filler()]);
    await wal.sync();
    wal.append([entries(textEntry(37, 2, "b37")), filler()]);
    await wal.sync();
    wal.append([entries(textEntry(36, 3, "c36"))]);
    wal.compact(2, 36);
    wal.compact(8, fill);
    await wal.sync();
    const shard2 = (w: Wal): string =>
      `${w.firstIndex(2)}..${w.lastIndex(2)} [${texts(w, 2).join(",")}]`;
    const before = shard2(wal);
    assert.equal(before, "37..36 []");
    // Segment 1 is gone (everything in it is compacted); segment 2 is kept for entry 38.
    assert.deepEqual(
      (await fs.readdir(DIR)).filter((n) => n.endsWith(".wal")).map((n) => Number(n.slice(0, 20))),
      [2, 3, 4, 5],
    );
    await wal.close();

    wal = await Wal.open(DIR, options);
    try {
      // Was "37..37 [37@2:b37]".
      assert.equal(shard2(wal), before);
      assert.equal(wal.term(2, 36), 3);
    } finally {
      await wal.close();
    }
  });
});

describe("WAL failures", () => {
  // Found by the driver simulation: a batch that no sync() call was waiting for failed, and its
  // internal promise rejected unhandled, which takes the whole process down.
  it("a failed write of records nobody synced yet is reported to the next caller, not thrown", async () => {
    const fs = new MemoryFileSystem();
    const wal = await Wal.open(DIR, { fs });
    wal.append([{ kind: "entries", shard: 1, entries: [entry(1)] }]);
    const first = wal.sync();
    // Appended while the first write is in flight, with no sync() of its own: the flush loop
    // writes it next, on its own.
    wal.append([{ kind: "entries", shard: 1, entries: [entry(2)] }]);
    fs.failNext("write", DIR, "EIO");
    await first.catch(() => undefined);
    // Let the loop reach the second batch and fail on it (event-loop turns, not time: the
    // in-memory file system settles in microtasks, so this is deterministic).
    for (let i = 0; i < 20; i++) await new Promise((resolve) => setImmediate(resolve));
    await assert.rejects(wal.sync(), { code: "CAIRN_ERR_WAL_FAILED" });
    await wal.destroy();
  });
});

describe("WAL records as large as the API lets a Put be", () => {
  // limits.max_value_bytes goes up to 64 MiB and limits.max_key_bytes to 65,535: such a Put's
  // log entry (encodeCommand: 22 bytes, the key, the value) is more than 64 MiB. The WAL wrote
  // its record, and recovery refused it as "bad-length" (bodies were bounded at 64 MiB): at the
  // end of the log it was cut off as a torn write, an acknowledged Put silently lost.
  it("reads back an entry holding the largest value and key the API accepts", async () => {
    const fs = new MemoryFileSystem();
    let wal = await Wal.open(DIR, { fs });
    const data = new Uint8Array(22 + 65_535 + 64 * 1024 * 1024).fill(7);
    wal.append([{ kind: "entries", shard: 1, entries: [{ index: 1, term: 1, type: 0, data }] }]);
    await wal.sync();
    await wal.close();
    wal = await Wal.open(DIR, { fs });
    try {
      assert.equal(wal.tornTail, undefined);
      assert.equal(wal.lastIndex(1), 1);
      assert.equal(wal.entries(1, 1, 2)[0]?.data.length, data.length);
    } finally {
      await wal.close();
    }
  });
});
