/**
 * WAL recovery cases found by the driver simulation (test/replication/sim), each replayed here
 * on the in-memory file system.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MemoryFileSystem } from "../../src/storage/index.ts";
import { Wal, type WalEntry } from "../../src/storage/wal/index.ts";

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
