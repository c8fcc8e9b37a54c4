/**
 * Wal.drop (replica GC): a shard's records reduced to its term and vote (a drop record, kind 5),
 * replayed, carried by rotations' checkpoints, its old segments deleted, a replica created again
 * afterwards, and a drop record torn by a crash. (A power cut at every operation of a workload
 * with drops: wal-conformance.test.ts, whose workload drops a shard every 13 steps.)
 */
import assert from "node:assert/strict";
import { statSync, truncateSync } from "node:fs";
import { describe, it } from "node:test";
import { Wal } from "../../src/storage/wal/index.ts";
import { bytes, entry, segmentFiles, tempDir, texts } from "./helpers.ts";

/** Shards 1 and 2 each write `n` entries of 40 bytes at term 3, a sync each. */
async function fill(wal: Wal, n: number, from = 1): Promise<void> {
  for (let i = from; i < from + n; i++) {
    wal.append([
      { kind: "entries", shard: 1, entries: [entry(i, 3, "z".repeat(40))] },
      { kind: "entries", shard: 2, entries: [entry(i, 3, "w".repeat(40))] },
    ]);
    await wal.sync();
  }
}

describe("WAL drop (replica GC)", () => {
  it("keeps only the term and vote, across a restart, and frees the segments the shard held", async () => {
    const dir = tempDir("wal-drop");
    const wal = await Wal.open(dir, { segmentBytes: 1024 });
    wal.append([
      { kind: "snapshot", shard: 1, meta: { index: 0, term: 0, data: bytes("conf") } },
      { kind: "hard-state", shard: 1, state: { term: 3, vote: "n2@a", commit: 0 } },
    ]);
    await fill(wal, 60);
    wal.append([{ kind: "hard-state", shard: 1, state: { term: 5, vote: "n3@b", commit: 60 } }]);
    wal.compact(2, 55);
    await wal.sync();
    const before = segmentFiles(dir).length;
    assert.ok(before >= 5, `expected several segments, got ${before}`);
    assert.equal(wal.stats().segmentsDeleted, 0, "shard 1 still needs every segment");

    wal.drop(1);
    assert.equal(wal.isDropped(1), true);
    assert.deepEqual(wal.hardState(1), { term: 5, vote: "n3@b", commit: 0 });
    assert.equal(wal.snapshot(1), undefined);
    assert.equal(wal.lastIndex(1), 0);
    assert.equal(wal.firstIndex(1), 1);
    assert.equal(wal.isDropped(2), false);
    await wal.sync();
    // Shard 2 compacted past them: nothing needs the old segments any more.
    assert.ok(segmentFiles(dir).length < before, "the segments shard 1 held are deleted");
    await wal.close();

    const again = await Wal.open(dir, { segmentBytes: 1024 });
    assert.equal(again.isDropped(1), true);
    assert.deepEqual(again.hardState(1), { term: 5, vote: "n3@b", commit: 0 });
    assert.equal(again.snapshot(1), undefined);
    assert.equal(again.lastIndex(1), 0);
    assert.deepEqual(again.shards(), [1, 2]);
    assert.equal(again.lastIndex(2), 60);
    // Rotations past the segment holding the drop record: their checkpoints carry it.
    for (let i = 61; i <= 120; i++) {
      again.append([{ kind: "entries", shard: 2, entries: [entry(i, 3, "w".repeat(40))] }]);
      await again.sync();
    }
    again.compact(2, 118);
    await again.sync();
    assert.ok(again.stats().segmentsDeleted > 0);
    await again.close();
    const third = await Wal.open(dir);
    assert.equal(third.isDropped(1), true);
    assert.deepEqual(third.hardState(1), { term: 5, vote: "n3@b", commit: 0 });
    assert.deepEqual(texts(third, 2), ["119@3:" + "w".repeat(40), "120@3:" + "w".repeat(40)]);
    await third.close();
  });

  it("a replica created again after the drop is not dropped, and its new log survives", async () => {
    const dir = tempDir("wal-drop");
    const wal = await Wal.open(dir, { segmentBytes: 1024 });
    await fill(wal, 30);
    wal.append([{ kind: "hard-state", shard: 1, state: { term: 4, vote: "n1@a", commit: 30 } }]);
    // The drop and the new replica's first entries in one batch: the entries after the drop
    // keep the segment they are in.
    wal.drop(1);
    wal.append([
      { kind: "entries", shard: 1, entries: [entry(1, 6, "new1"), entry(2, 6, "new2")] },
    ]);
    assert.equal(wal.isDropped(1), false);
    assert.deepEqual(wal.hardState(1), { term: 4, vote: "n1@a", commit: 0 });
    wal.append([{ kind: "hard-state", shard: 1, state: { term: 6, vote: null, commit: 2 } }]);
    await wal.sync();
    // Shard 2 compacts everything it wrote: segments go, the new entries of shard 1 stay.
    for (let i = 31; i <= 60; i++) {
      wal.append([{ kind: "entries", shard: 2, entries: [entry(i, 3, "w".repeat(40))] }]);
      await wal.sync();
    }
    wal.compact(2, 60);
    await wal.sync();
    assert.ok(wal.stats().segmentsDeleted > 0);
    await wal.close();

    const again = await Wal.open(dir);
    assert.equal(again.isDropped(1), false);
    assert.deepEqual(texts(again, 1), ["1@6:new1", "2@6:new2"]);
    assert.deepEqual(again.hardState(1), { term: 6, vote: null, commit: 2 });
    await again.close();
  });

  it("a compaction and a drop in one write: the replica created again keeps the segments holding its log", async () => {
    // The compaction point the old replica's compaction set, replayed after the write, outlived
    // the drop: the new replica's entries 1..10 counted as compacted past (10 <= 50), their
    // segment was deleted, and they were gone after a restart (an audit, 2026-12-05).
    const dir = tempDir("wal-drop");
    const wal = await Wal.open(dir, { segmentBytes: 1024 });
    for (let i = 1; i <= 50; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 3, "z".repeat(40))] }]);
      await wal.sync();
    }
    wal.compact(1, 50);
    wal.drop(1);
    await wal.sync();
    for (let i = 1; i <= 10; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 4, "n".repeat(40))] }]);
      await wal.sync();
    }
    // Shard 2 writes past the segments holding them, compacting as it goes.
    for (let i = 1; i <= 80; i++) {
      wal.append([{ kind: "entries", shard: 2, entries: [entry(i, 3, "w".repeat(40))] }]);
      wal.compact(2, i);
      await wal.sync();
    }
    await wal.close();
    const again = await Wal.open(dir, { segmentBytes: 1024 });
    try {
      assert.equal(again.lastIndex(1), 10, "the new replica's entries survive the restart");
      assert.deepEqual(
        texts(again, 1),
        Array.from({ length: 10 }, (_, i) => `${i + 1}@4:${"n".repeat(40)}`),
      );
    } finally {
      await again.close();
    }
  });

  it("a drop record torn by a crash is cut off: the shard is whole again", async () => {
    const dir = tempDir("wal-drop");
    // Not preallocated: the file ends where the records do, and the test cuts into the last.
    const wal = await Wal.open(dir, { preallocate: false });
    wal.append([
      { kind: "entries", shard: 3, entries: [entry(1, 2), entry(2, 2)] },
      { kind: "hard-state", shard: 3, state: { term: 2, vote: "n1@a", commit: 2 } },
    ]);
    await wal.sync();
    wal.drop(3);
    await wal.close();
    const [file] = segmentFiles(dir) as [string];
    const full = statSync(file).size;
    // The drop record: 8 + 24 bytes of header and the vote's 4 bytes; cut inside it.
    truncateSync(file, full - 10);

    const again = await Wal.open(dir);
    assert.equal(again.tornTail?.offset, full - 36);
    assert.equal(again.isDropped(3), false);
    assert.deepEqual(texts(again, 3), ["1@2:e1", "2@2:e2"]);
    assert.deepEqual(again.hardState(3), { term: 2, vote: "n1@a", commit: 2 });
    // Dropped again, durably this time.
    again.drop(3);
    await again.close();
    const third = await Wal.open(dir);
    assert.equal(third.tornTail, undefined);
    assert.equal(third.isDropped(3), true);
    assert.deepEqual(third.hardState(3), { term: 2, vote: "n1@a", commit: 0 });
    await third.close();
  });

  it("keeps the term of the log when the shard has no hard state", async () => {
    const dir = tempDir("wal-drop");
    const wal = await Wal.open(dir);
    wal.append([{ kind: "entries", shard: 4, entries: [entry(1, 7)] }]);
    wal.drop(4);
    assert.deepEqual(wal.hardState(4), { term: 7, vote: null, commit: 0 });
    await wal.close();
  });
});
