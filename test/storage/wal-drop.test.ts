/**
 * Wal.drop (replica GC): a shard's records reduced to its term and vote (a drop record, kind 5)
 * and its log's last entry (a dropped-log record, kind 6), replayed, carried by rotations'
 * checkpoints, its old segments deleted, a replica created again afterwards, a drop record torn
 * by a crash, and a drop record of a build before kind 6. (A power cut at every operation of a
 * workload with drops: wal-conformance.test.ts, whose workload drops a shard every 13 steps.)
 */
import assert from "node:assert/strict";
import { statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  FLAG_HAS_VOTE,
  KIND_DROP,
  KIND_ENTRY,
  KIND_HARD_STATE,
  encodeRecord,
  encodedSize,
} from "../../src/storage/wal/record.ts";
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

/**
 * A WAL (not preallocated: the file ends where the records do, for tests that cut into the last)
 * whose shard 3 held entries 1–2 at term 2 and a vote for n1@a, then was dropped; closed.
 */
async function droppedShard3(): Promise<{ dir: string; file: string; full: number }> {
  const dir = tempDir("wal-drop");
  const wal = await Wal.open(dir, { preallocate: false });
  wal.append([
    { kind: "entries", shard: 3, entries: [entry(1, 2), entry(2, 2)] },
    { kind: "hard-state", shard: 3, state: { term: 2, vote: "n1@a", commit: 2 } },
  ]);
  await wal.sync();
  wal.drop(3);
  await wal.close();
  const [file] = segmentFiles(dir) as [string];
  return { dir, file, full: statSync(file).size };
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
    const { dir, file, full } = await droppedShard3();
    // The drop record (8 + 24 bytes of header and the vote's 4 bytes), then its dropped-log
    // record (8 + 24); cut inside the drop record.
    truncateSync(file, full - 32 - 10);

    const again = await Wal.open(dir);
    assert.equal(again.tornTail?.offset, full - 32 - 36);
    assert.equal(again.isDropped(3), false);
    assert.equal(again.droppedLog(3), undefined);
    assert.deepEqual(texts(again, 3), ["1@2:e1", "2@2:e2"]);
    assert.deepEqual(again.hardState(3), { term: 2, vote: "n1@a", commit: 2 });
    // Dropped again, durably this time.
    again.drop(3);
    await again.close();
    const third = await Wal.open(dir);
    assert.equal(third.tornTail, undefined);
    assert.equal(third.isDropped(3), true);
    assert.deepEqual(third.hardState(3), { term: 2, vote: "n1@a", commit: 0 });
    assert.deepEqual(third.droppedLog(3), { index: 2, term: 2 });
    await third.close();
  });

  it("a write torn between the drop record and its dropped log keeps the drop, its log's end unknown", async () => {
    const { dir, file, full } = await droppedShard3();
    truncateSync(file, full - 10); // inside the dropped-log record

    const again = await Wal.open(dir);
    assert.equal(again.tornTail?.offset, full - 32);
    assert.equal(again.isDropped(3), true);
    assert.deepEqual(again.hardState(3), { term: 2, vote: "n1@a", commit: 0 });
    // Unknown (a driver then refuses every vote, as it did for every drop before kind 6).
    assert.equal(again.droppedLog(3), null);
    await again.close();
  });

  it("records the dropped log's last entry, across restarts and in the checkpoints that outlive the segment holding the drop", async () => {
    // The driver took it from memory (the replica's log before the drop), forgotten at a
    // restart: a replica created again after one refused every vote (driver simulation seed
    // 1600014's deadlock). Now the WAL holds it.
    const dir = tempDir("wal-drop");
    const wal = await Wal.open(dir, { segmentBytes: 1024 });
    await fill(wal, 40);
    wal.append([
      { kind: "hard-state", shard: 1, state: { term: 5, vote: "n3@b", commit: 40 } },
      // Shard 3: a snapshot, then nothing: its log ends at the snapshot.
      { kind: "snapshot", shard: 3, meta: { index: 70, term: 4, data: bytes("conf") } },
      { kind: "hard-state", shard: 3, state: { term: 4, vote: null, commit: 70 } },
    ]);
    await wal.sync();
    assert.equal(wal.droppedLog(1), undefined);
    wal.drop(1);
    wal.drop(3);
    // Known at once, before the sync.
    assert.deepEqual(wal.droppedLog(1), { index: 40, term: 3 });
    assert.deepEqual(wal.droppedLog(3), { index: 70, term: 4 });
    assert.equal(wal.droppedLog(2), undefined);
    await wal.sync();
    const holdingDrop = segmentFiles(dir).at(-1) as string;
    await wal.close();

    const again = await Wal.open(dir, { segmentBytes: 1024 });
    assert.deepEqual(again.droppedLog(1), { index: 40, term: 3 });
    assert.deepEqual(again.droppedLog(3), { index: 70, term: 4 });
    assert.equal(again.droppedLog(2), undefined);
    // Rotations, and shard 2 compacted: every segment up to the one holding the drops goes.
    for (let i = 41; i <= 120; i++) {
      again.append([{ kind: "entries", shard: 2, entries: [entry(i, 3, "w".repeat(40))] }]);
      await again.sync();
    }
    again.compact(2, 118);
    await again.sync();
    assert.ok(
      (segmentFiles(dir)[0] as string) > holdingDrop,
      "the segment holding the drop records is deleted",
    );
    await again.close();

    const third = await Wal.open(dir, { segmentBytes: 1024 });
    assert.equal(third.isDropped(1), true);
    assert.deepEqual(third.hardState(1), { term: 5, vote: "n3@b", commit: 0 });
    assert.deepEqual(third.droppedLog(1), { index: 40, term: 3 });
    assert.deepEqual(third.droppedLog(3), { index: 70, term: 4 });
    assert.equal(third.droppedLog(2), undefined);
    await third.close();
  });

  it("a replica created again keeps the dropped log through hard states, across restarts and checkpoints, until its first entry or snapshot", async () => {
    const dir = tempDir("wal-drop");
    const wal = await Wal.open(dir, { segmentBytes: 1024 });
    await fill(wal, 30);
    wal.append([{ kind: "hard-state", shard: 1, state: { term: 4, vote: "n1@a", commit: 30 } }]);
    wal.drop(1);
    await wal.sync();
    // Created again: its term moves before any entry reaches it (a heartbeat of a new leader).
    wal.append([{ kind: "hard-state", shard: 1, state: { term: 6, vote: null, commit: 0 } }]);
    assert.equal(wal.isDropped(1), false);
    assert.deepEqual(wal.droppedLog(1), { index: 30, term: 3 });
    await wal.sync();
    await wal.close();

    const again = await Wal.open(dir, { segmentBytes: 1024 });
    assert.equal(again.isDropped(1), false);
    assert.deepEqual(again.droppedLog(1), { index: 30, term: 3 });
    assert.deepEqual(again.hardState(1), { term: 6, vote: null, commit: 0 });
    // Rotations past every segment holding the drop: the checkpoints carry it, and the hard
    // state after it.
    for (let i = 31; i <= 100; i++) {
      again.append([{ kind: "entries", shard: 2, entries: [entry(i, 3, "w".repeat(40))] }]);
      await again.sync();
    }
    again.compact(2, 100);
    await again.sync();
    assert.ok(again.stats().segmentsDeleted > 0);
    // Removed again before any entry: what it lost is still the first log's.
    again.drop(1);
    assert.deepEqual(again.droppedLog(1), { index: 30, term: 3 });
    await again.close();

    const third = await Wal.open(dir, { segmentBytes: 1024 });
    assert.equal(third.isDropped(1), true);
    assert.deepEqual(third.hardState(1), { term: 6, vote: null, commit: 0 });
    assert.deepEqual(third.droppedLog(1), { index: 30, term: 3 });
    // Created again, and this time its first entries come: nothing lost to vote as any more.
    third.append([{ kind: "entries", shard: 1, entries: [entry(1, 7)] }]);
    assert.equal(third.droppedLog(1), undefined);
    // Another shard dropped, created again, given a snapshot.
    third.drop(2);
    third.append([{ kind: "snapshot", shard: 2, meta: { index: 150, term: 7, data: bytes("c") } }]);
    assert.equal(third.droppedLog(2), undefined);
    await third.close();
    const fourth = await Wal.open(dir, { segmentBytes: 1024 });
    assert.equal(fourth.droppedLog(1), undefined);
    assert.equal(fourth.droppedLog(2), undefined);
    assert.deepEqual(texts(fourth, 1), ["1@7:e1"]);
    await fourth.close();
  });

  it("opens a drop record written before kind 6 (no dropped log): dropped, its log's end unknown", async () => {
    // A segment as the previous build wrote it: shard 5's entries 1-2 (term 2) and hard state,
    // then its drop record (term 2, vote "n1@a", index 0), and nothing after it.
    const dir = tempDir("wal-drop");
    const records: Array<[number, number, number, number, Uint8Array]> = [
      [KIND_ENTRY, 0, 1, 2, bytes("e1")],
      [KIND_ENTRY, 0, 2, 2, bytes("e2")],
      [KIND_HARD_STATE, FLAG_HAS_VOTE, 2, 2, bytes("n1@a")],
      [KIND_DROP, FLAG_HAS_VOTE, 0, 2, bytes("n1@a")],
    ];
    const size = 16 + records.reduce((n, r) => n + encodedSize(r[4].length), 0);
    const buf = Buffer.alloc(size);
    buf.write("CAIRNWAL", 0, "latin1");
    buf.writeUInt32LE(1, 8);
    const view = new DataView(buf.buffer, buf.byteOffset, buf.length);
    let at = 16;
    for (const [kind, flags, index, term, payload] of records) {
      at = encodeRecord(buf, view, at, kind, 0, flags, 5, term, index, payload);
    }
    writeFileSync(join(dir, "00000000000000000001.wal"), buf);

    const wal = await Wal.open(dir, { segmentBytes: 1024 });
    assert.equal(wal.tornTail, undefined);
    assert.equal(wal.isDropped(5), true);
    assert.deepEqual(wal.hardState(5), { term: 2, vote: "n1@a", commit: 0 });
    assert.equal(wal.lastIndex(5), 0);
    assert.equal(wal.droppedLog(5), null, "unknown, not none");
    // Created again, its term moved: still unknown, across rotations' checkpoints too.
    wal.append([{ kind: "hard-state", shard: 5, state: { term: 3, vote: null, commit: 0 } }]);
    for (let i = 1; i <= 40; i++) {
      wal.append([{ kind: "entries", shard: 2, entries: [entry(i, 3, "w".repeat(40))] }]);
      await wal.sync();
    }
    wal.compact(2, 40);
    await wal.sync();
    assert.ok(
      !segmentFiles(dir).some((f) => f.endsWith("00000000000000000001.wal")),
      "the old build's segment is deleted",
    );
    await wal.close();
    const again = await Wal.open(dir, { segmentBytes: 1024 });
    assert.equal(again.isDropped(5), false);
    assert.equal(again.droppedLog(5), null);
    assert.deepEqual(again.hardState(5), { term: 3, vote: null, commit: 0 });
    // Removed again with its log still empty: what it lost stays unknown.
    again.drop(5);
    assert.equal(again.droppedLog(5), null);
    await again.close();
    const third = await Wal.open(dir);
    assert.equal(third.isDropped(5), true);
    assert.equal(third.droppedLog(5), null);
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
