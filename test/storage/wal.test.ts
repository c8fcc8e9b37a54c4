import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { readFileSync, statSync, truncateSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import fc from "fast-check";
import {
  type FileSystem,
  type FsFile,
  MemoryFileSystem,
  nodeFileSystem,
} from "../../src/storage/common/index.ts";
import { MAX_PAYLOAD_BYTES } from "../../src/storage/wal/record.ts";
import { Wal, type WalEntry, type WalRecord } from "../../src/storage/wal/index.ts";
import { CHECKPOINT_ROOM_BYTES, SEGMENT_FILE_MAX_BYTES } from "../../src/storage/wal/wal.ts";
import { powerCut } from "./crash-shim.ts";
import { bytes, entry, segmentFiles, tempDir, texts } from "./helpers.ts";
import { modelSignature, walSignature } from "./wal-workload.ts";

describe("WAL", () => {
  it("recovers each shard's vote among more distinct votes than it keeps encoded", async () => {
    // Votes are encoded once per replica id and the cache is cleared past 64 of them: 200
    // shards voting for 150 different replicas, some twice, must each read back their own.
    const dir = tempDir("wal-votes");
    const wal = await Wal.open(dir);
    const records: WalRecord[] = [];
    const voteOf = (shard: number): string | null =>
      shard % 7 === 0 ? null : `n${shard % 150}@ïd${shard % 3}`;
    for (let shard = 1; shard <= 200; shard++) {
      records.push({
        kind: "hard-state",
        shard,
        state: { term: 1, vote: voteOf(shard), commit: 0 },
      });
    }
    wal.append(records);
    await wal.sync();
    await wal.close();
    const again = await Wal.open(dir);
    for (let shard = 1; shard <= 200; shard++) {
      assert.deepEqual(again.hardState(shard), { term: 1, vote: voteOf(shard), commit: 0 });
    }
    await again.close();
  });

  it("counts the bytes appended and not yet written until a sync writes them", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir);
    assert.equal(wal.stats().unwrittenBytes, 0);
    wal.append([{ kind: "entries", shard: 1, entries: [entry(1, 1)] }]);
    await wal.sync();
    assert.equal(wal.stats().unwrittenBytes, 0);
    // A commit index that moved alone: appended, not written until a sync (multi-raft-round.ts).
    wal.append([{ kind: "hard-state", shard: 1, state: { term: 1, vote: "n1", commit: 1 } }]);
    const pending = wal.stats().unwrittenBytes;
    assert.ok(pending > 0, `${pending} bytes unwritten`);
    const written = wal.stats().bytesWritten;
    await wal.sync();
    assert.equal(wal.stats().unwrittenBytes, 0);
    assert.equal(wal.stats().bytesWritten - written, pending);
    await wal.close();
  });

  it("recovers entries, hard states and snapshots of several shards", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir);
    wal.append([
      { kind: "entries", shard: 1, entries: [entry(1, 1), entry(2, 1)] },
      { kind: "entries", shard: 7, entries: [entry(1, 2)] },
      { kind: "hard-state", shard: 1, state: { term: 1, vote: "n1", commit: 2 } },
      { kind: "hard-state", shard: 7, state: { term: 2, vote: null, commit: 0 } },
      { kind: "snapshot", shard: 9, meta: { index: 40, term: 3, data: bytes("conf") } },
      { kind: "entries", shard: 9, entries: [entry(41, 3)] },
    ]);
    await wal.sync();
    await wal.close();

    const again = await Wal.open(dir);
    assert.equal(again.tornTail, undefined);
    assert.deepEqual(again.shards(), [1, 7, 9]);
    assert.deepEqual(texts(again, 1), ["1@1:e1", "2@1:e2"]);
    assert.deepEqual(texts(again, 7), ["1@2:e1"]);
    assert.deepEqual(again.hardState(1), { term: 1, vote: "n1", commit: 2 });
    assert.deepEqual(again.hardState(7), { term: 2, vote: null, commit: 0 });
    assert.equal(again.firstIndex(9), 41);
    assert.equal(again.term(9, 40), 3);
    assert.deepEqual(again.snapshot(9)?.data, bytes("conf"));
    assert.deepEqual(texts(again, 9), ["41@3:e41"]);
    await again.close();
  });

  it("replaces a conflicting suffix, before and after a restart", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir);
    wal.append([{ kind: "entries", shard: 0, entries: [1, 2, 3, 4].map((i) => entry(i, 1)) }]);
    wal.append([{ kind: "entries", shard: 0, entries: [entry(3, 2, "new3")] }]);
    assert.deepEqual(texts(wal, 0), ["1@1:e1", "2@1:e2", "3@2:new3"]);
    await wal.close();
    const again = await Wal.open(dir);
    assert.deepEqual(texts(again, 0), ["1@1:e1", "2@1:e2", "3@2:new3"]);
    assert.throws(() => again.append([{ kind: "entries", shard: 0, entries: [entry(9, 2)] }]), {
      code: "CAIRN_ERR_WAL_GAP",
    });
    await again.close();
  });

  it("shares one write and one fdatasync among concurrent syncs (group commit)", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir);
    const syncs: Promise<void>[] = [];
    for (let i = 1; i <= 100; i++) {
      wal.append([{ kind: "entries", shard: i % 8, entries: [entry(Math.ceil(i / 8), 1)] }]);
      syncs.push(wal.sync());
    }
    await Promise.all(syncs);
    // The first sync starts a write with the one record appended so far; the other 99 records
    // were appended while it was in flight and go out together in the second.
    assert.equal(wal.stats().syncs, 2);
    assert.equal(wal.stats().recordsAppended, 100);
    await wal.close();
    const again = await Wal.open(dir);
    assert.equal(again.lastIndex(0), 12);
    await again.close();
  });

  it("cuts a torn record off the end of the last segment and reports it", async () => {
    const dir = tempDir("wal");
    // Not preallocated: the file ends where the records do, and the test cuts into the last.
    const wal = await Wal.open(dir, { preallocate: false });
    wal.append([{ kind: "entries", shard: 3, entries: [entry(1, 1), entry(2, 1)] }]);
    await wal.sync();
    wal.append([{ kind: "entries", shard: 3, entries: [entry(3, 1, "x".repeat(100))] }]);
    await wal.close();
    const [file] = segmentFiles(dir) as [string];
    const full = statSync(file).size;
    truncateSync(file, full - 40);

    const again = await Wal.open(dir);
    assert.deepEqual(again.tornTail, { file, offset: full - 132, droppedBytes: 92 });
    assert.deepEqual(texts(again, 3), ["1@1:e1", "2@1:e2"]);
    // The log continues cleanly after the cut.
    again.append([{ kind: "entries", shard: 3, entries: [entry(3, 2)] }]);
    await again.close();
    const third = await Wal.open(dir);
    assert.equal(third.tornTail, undefined);
    assert.deepEqual(texts(third, 3), ["1@1:e1", "2@1:e2", "3@2:e3"]);
    await third.close();
  });

  it("takes zeros after the last record for unwritten space: nothing reported, nothing cut", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { preallocate: false });
    wal.append([{ kind: "entries", shard: 0, entries: [entry(1, 1)] }]);
    await wal.close();
    const [file] = segmentFiles(dir) as [string];
    const data = readFileSync(file);
    writeFileSync(file, Buffer.concat([data, Buffer.alloc(4096)]));
    const again = await Wal.open(dir, { preallocate: false });
    assert.equal(again.tornTail, undefined);
    assert.equal(statSync(file).size, data.length + 4096);
    assert.equal(again.lastIndex(0), 1);
    // The next records go where the zeros begin.
    again.append([{ kind: "entries", shard: 0, entries: [entry(2, 1)] }]);
    await again.close();
    const third = await Wal.open(dir, { preallocate: false });
    assert.deepEqual(texts(third, 0), ["1@1:e1", "2@1:e2"]);
    assert.equal(third.tornTail, undefined);
    await third.close();
  });

  it("preallocates each segment and cuts the one it leaves back to its records", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { segmentBytes: 4096 });
    const [first] = segmentFiles(dir) as [string];
    assert.equal(statSync(first).size, 4096);
    let index = 0;
    while (segmentFiles(dir).length < 3) {
      index++;
      wal.append([{ kind: "entries", shard: 2, entries: [entry(index, 1, "p".repeat(200))] }]);
      await wal.sync();
    }
    const files = segmentFiles(dir);
    // The segments left behind end at their last record: no zeros, not a byte more.
    for (const file of files.slice(0, -1)) {
      const data = readFileSync(file);
      assert.ok(data.length >= 4096 && data.length < 4096 + 300, `${file}: ${data.length} bytes`);
      assert.notEqual(data.at(-1), 0);
    }
    assert.equal(statSync(files.at(-1) as string).size, 4096);
    await wal.close();
    const again = await Wal.open(dir, { segmentBytes: 4096 });
    assert.equal(again.tornTail, undefined);
    assert.equal(again.lastIndex(2), index);
    again.append([{ kind: "entries", shard: 2, entries: [entry(index + 1, 2)] }]);
    await again.close();
    const third = await Wal.open(dir, { segmentBytes: 4096 });
    assert.equal(third.lastIndex(2), index + 1);
    assert.equal(third.term(2, index + 1), 2);
    await third.close();
  });

  it("cuts a segment preallocated by an earlier run back at rotation, preallocating or not", async () => {
    const dir = tempDir("wal");
    // Preallocated to 16 KiB, then written by a run that rotates at 4 KiB and never preallocates.
    const first = await Wal.open(dir, { segmentBytes: 16_384 });
    first.append([{ kind: "entries", shard: 2, entries: [entry(1, 1)] }]);
    await first.close();
    const wal = await Wal.open(dir, { segmentBytes: 4096, preallocate: false });
    for (let i = 2; segmentFiles(dir).length < 2; i++) {
      wal.append([{ kind: "entries", shard: 2, entries: [entry(i, 1, "p".repeat(200))] }]);
      await wal.sync();
    }
    await wal.close();
    const [old] = segmentFiles(dir) as [string];
    assert.notEqual(readFileSync(old).at(-1), 0);
    const again = await Wal.open(dir, { segmentBytes: 4096 });
    assert.equal(again.tornTail, undefined);
    await again.close();
  });

  it("cuts a write torn inside preallocated space, and reports only its bytes", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir);
    wal.append([{ kind: "entries", shard: 3, entries: [entry(1, 1), entry(2, 1)] }]);
    await wal.sync();
    wal.append([{ kind: "entries", shard: 3, entries: [entry(3, 1, "x".repeat(100))] }]);
    await wal.close();
    const [file] = segmentFiles(dir) as [string];
    const data = readFileSync(file);
    assert.equal(data.length, 64 * 1024 * 1024);
    const end = 16 + 2 * 34; // the header and the first two records
    // Only the first 40 bytes of the third record reached the disk: the rest reads as zeros.
    data.fill(0, end + 40);
    writeFileSync(file, data);
    const again = await Wal.open(dir);
    assert.deepEqual(again.tornTail, { file, offset: end, droppedBytes: 40 });
    assert.deepEqual(texts(again, 3), ["1@1:e1", "2@1:e2"]);
    await again.close();
  });

  it("refuses a segment other than the last that ends in zeros", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { segmentBytes: 512 });
    for (let i = 1; segmentFiles(dir).length < 2; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 1, "z".repeat(100))] }]);
      await wal.sync();
    }
    await wal.close();
    const [first] = segmentFiles(dir) as [string];
    const size = statSync(first).size;
    truncateSync(first, size + 4096); // as if its records had been lost to zeros
    await assert.rejects(Wal.open(dir, { segmentBytes: 512 }), {
      code: "CAIRN_ERR_CORRUPTION",
      message: new RegExp(`${first}.*${size}`),
    });
  });

  it("refuses to start on corruption followed by valid records, naming file and offset", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir);
    wal.append([{ kind: "entries", shard: 0, entries: [entry(1, 1), entry(2, 1), entry(3, 1)] }]);
    await wal.close();
    const [file] = segmentFiles(dir) as [string];
    const data = readFileSync(file);
    // Segment header 16 bytes; record 1 is 8 + 24 + 2 bytes; flip a payload byte of record 2.
    const second = 16 + 34;
    data.writeUInt8(data.readUInt8(second + 8 + 24) ^ 0x01, second + 8 + 24);
    writeFileSync(file, data);
    await assert.rejects(Wal.open(dir), (err: Error & { code?: string }) => {
      assert.equal(err.code, "CAIRN_ERR_CORRUPTION");
      assert.match(err.message, new RegExp(`${file} at offset ${second}: WAL record bad-checksum`));
      return true;
    });
  });

  it("refuses to start on corruption in a segment that is not the last", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { segmentBytes: 256 });
    for (let i = 1; i <= 20; i++) {
      wal.append([{ kind: "entries", shard: 0, entries: [entry(i, 1, "y".repeat(50))] }]);
      await wal.sync();
    }
    await wal.close();
    const files = segmentFiles(dir);
    assert.ok(files.length > 2);
    const first = files[0] as string;
    const data = readFileSync(first);
    truncateSync(first, data.length - 3);
    await assert.rejects(Wal.open(dir), { code: "CAIRN_ERR_CORRUPTION" });
  });

  it("deletes a segment once every shard has compacted past it, keeping hard states", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { segmentBytes: 1024 });
    wal.append([
      { kind: "hard-state", shard: 5, state: { term: 4, vote: "n2", commit: 0 } },
      { kind: "snapshot", shard: 6, meta: { index: 10, term: 2, data: bytes("c6") } },
    ]);
    for (let i = 1; i <= 60; i++) {
      wal.append([
        { kind: "entries", shard: 1, entries: [entry(i, 1, "z".repeat(40))] },
        { kind: "entries", shard: 2, entries: [entry(i, 1, "w".repeat(40))] },
      ]);
      await wal.sync();
    }
    const before = segmentFiles(dir).length;
    assert.ok(before >= 5, `expected several segments, got ${before}`);
    wal.compact(1, 50);
    await wal.sync();
    assert.equal(wal.stats().segmentsDeleted, 0, "shard 2 still needs every segment");
    wal.compact(2, 55);
    await wal.sync();
    assert.ok(segmentFiles(dir).length < before - 2);
    assert.ok(wal.stats().segmentsDeleted > 0);
    assert.ok(wal.memoryBytes > 0);
    await wal.close();

    const again = await Wal.open(dir);
    assert.deepEqual(again.hardState(5), { term: 4, vote: "n2", commit: 0 });
    assert.equal(again.snapshot(6)?.index, 10);
    assert.equal(again.firstIndex(1), 51);
    assert.equal(again.firstIndex(2), 56);
    assert.equal(again.lastIndex(1), 60);
    assert.equal(again.term(2, 55), 1);
    assert.throws(() => again.entries(1, 50, 52), { code: "CAIRN_ERR_WAL_COMPACTED" });
    assert.equal(again.entries(2, 56, 61).length, 5);
    await again.close();
  });

  it("keeps the segments of a log restarted below its compaction point (a refill) until compacted again", async () => {
    // Shard 1's log is compacted to its end, 50, then restarted at 0 (MultiRaft's refill of a
    // shard whose directory was lost): its new entries 1..30 must survive although the
    // compaction point it had passed their indexes, while another shard compacts away every
    // segment it wrote to.
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { segmentBytes: 1024 });
    for (let i = 1; i <= 50; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 2, "o".repeat(40))] }]);
      await wal.sync();
    }
    wal.compact(1, 50);
    await wal.sync();
    const floor = bytes("floor");
    wal.append([
      { kind: "snapshot", shard: 1, meta: { index: 0, term: 0, data: floor } },
      { kind: "hard-state", shard: 1, state: { term: 3, vote: "n2", commit: 0 } },
    ]);
    for (let i = 1; i <= 30; i++) {
      wal.append([
        { kind: "entries", shard: 1, entries: [entry(i, 3, `new${i}`)] },
        { kind: "entries", shard: 2, entries: [entry(i, 1, "w".repeat(40))] },
      ]);
      await wal.sync();
    }
    wal.compact(2, 30);
    await wal.sync();
    assert.equal(wal.firstIndex(1), 1);
    await wal.close();

    const again = await Wal.open(dir);
    assert.deepEqual(again.snapshot(1), { index: 0, term: 0, data: floor });
    assert.deepEqual(again.hardState(1), { term: 3, vote: "n2", commit: 0 });
    assert.equal(again.firstIndex(1), 1);
    assert.equal(again.lastIndex(1), 30);
    assert.deepEqual(texts(again, 1).slice(0, 2), ["1@3:new1", "2@3:new2"]);
    // Compacted past what the old log held, its segments go.
    for (let i = 31; i <= 60; i++) {
      again.append([{ kind: "entries", shard: 1, entries: [entry(i, 3, "n".repeat(40))] }]);
      await again.sync();
    }
    const before = segmentFiles(dir).length;
    again.compact(1, 55);
    await again.sync();
    assert.ok(segmentFiles(dir).length < before, "the old segments are deleted");
    await again.close();
    const last = await Wal.open(dir);
    assert.equal(last.firstIndex(1), 56);
    assert.equal(last.lastIndex(1), 60);
    await last.close();
  });

  it("rewrites the checkpoint of a segment whose header was torn by a crash", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { segmentBytes: 512 });
    wal.append([{ kind: "hard-state", shard: 9, state: { term: 3, vote: "n3", commit: 0 } }]);
    for (let i = 1; i <= 12; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 1, "q".repeat(60))] }]);
      await wal.sync();
    }
    await wal.close();
    const files = segmentFiles(dir);
    const last = files.at(-1) as string;
    truncateSync(last, 5); // the rotation's write never completed
    const again = await Wal.open(dir, { segmentBytes: 512 });
    assert.deepEqual(again.tornTail, { file: last, offset: 0, droppedBytes: 5 });
    // Everything older can now go: the new segment's checkpoint must carry shard 9's hard state.
    again.compact(1, again.lastIndex(1));
    again.append([{ kind: "entries", shard: 1, entries: [entry(again.lastIndex(1) + 1, 2)] }]);
    await again.sync();
    assert.equal(segmentFiles(dir).length, 1);
    await again.close();
    const third = await Wal.open(dir);
    assert.deepEqual(third.hardState(9), { term: 3, vote: "n3", commit: 0 });
    await third.close();
  });

  it("keeps every shard's hard state when a crash tore a rotation's checkpoint", async () => {
    // Of the new segment's header and checkpoint, a prefix reached the disk, ending inside the
    // checkpoint's record of shard 2's hard state (a vote, no entries). Recovery cut it as a torn
    // tail and wrote on in that segment: once shard 1 compacted, the older segment holding the
    // vote was deleted, and the vote was gone at the next open (an audit, 2026-12-05).
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { segmentBytes: 1024 });
    wal.append([{ kind: "hard-state", shard: 2, state: { term: 7, vote: "n9", commit: 0 } }]);
    await wal.sync();
    for (let i = 1; segmentFiles(dir).length < 2 && i < 1000; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 1, "z".repeat(40))] }]);
      await wal.sync();
    }
    assert.equal(segmentFiles(dir).length, 2);
    await wal.destroy();
    const second = segmentFiles(dir)[1] as string;
    const buf = readFileSync(second);
    assert.equal(buf[16 + 8], 2, "the checkpoint's first record: a hard state");
    assert.equal(buf.readUInt32LE(16 + 12), 2, "shard 2's");
    truncateSync(second, 16 + 10);
    const again = await Wal.open(dir, { segmentBytes: 1024 });
    assert.ok(again.tornTail !== undefined, "the torn checkpoint is cut off");
    assert.deepEqual(again.hardState(2), { term: 7, vote: "n9", commit: 0 });
    const next = again.lastIndex(1) + 1;
    again.append([{ kind: "entries", shard: 1, entries: [entry(next, 1, "z".repeat(40))] }]);
    again.compact(1, next);
    await again.sync();
    await again.close();
    const third = await Wal.open(dir, { segmentBytes: 1024 });
    try {
      assert.deepEqual(third.hardState(2), { term: 7, vote: "n9", commit: 0 }, "the vote survives");
      assert.equal(third.lastIndex(1), next);
    } finally {
      await third.close();
    }
  });

  it("writes a new segment's header and checkpoint whole when a write takes fewer bytes (a disk filling up)", async () => {
    // write(2) takes what fits on a disk about to fill (a 64 KiB tmpfs took 65,536 of 100,000
    // bytes, no error). A rotation took its checkpoint's first write on trust: the rest stayed
    // zeros, the entries synced after it landed past them, and the next open refused the WAL
    // as corrupt (CAIRN_ERR_CORRUPTION, "WAL record bad-checksum"): every shard's log unread.
    let shorten = false;
    let shortened = 0;
    const fs: FileSystem = {
      ...nodeFileSystem,
      async open(path, flags) {
        const file = await nodeFileSystem.open(path, flags);
        const half = (length: number, position: number): number => {
          if (!shorten || position !== 0 || length <= 16 || !path.endsWith(".wal")) return length;
          shorten = false;
          shortened++;
          return Math.floor(length / 2);
        };
        return {
          write: (b, o, length, position) => file.write(b, o, half(length, position), position),
          truncate: (length) => file.truncate(length),
          sync: () => file.sync(),
          datasync: () => file.datasync(),
          close: () => file.close(),
        };
      },
    };
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { segmentBytes: 1024, fs });
    wal.append([{ kind: "hard-state", shard: 2, state: { term: 7, vote: "n9", commit: 0 } }]);
    await wal.sync();
    shorten = true;
    let last = 0;
    for (let i = 1; segmentFiles(dir).length < 2 && i < 1000; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 1, "z".repeat(40))] }]);
      await wal.sync();
      last = i;
    }
    assert.equal(shortened, 1, "the rotation's first write took half its bytes");
    for (const i of [last + 1, last + 2]) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 1, "z".repeat(40))] }]);
      await wal.sync();
    }
    await wal.close();
    const again = await Wal.open(dir, { segmentBytes: 1024 });
    try {
      assert.equal(again.lastIndex(1), last + 2, "every synced entry is read back");
      assert.deepEqual(again.hardState(2), { term: 7, vote: "n9", commit: 0 });
    } finally {
      await again.close();
    }
  });

  it("refuses a batch with a gap whole: nothing of it applied, nothing left visible and unwritten", async () => {
    // Refused at its second entry, the batch's first was applied (read back) but neither counted
    // nor marked for sync(), which resolved without writing it (an audit, 2026-12-05).
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { segmentBytes: 1024 });
    wal.append([{ kind: "entries", shard: 1, entries: [entry(1, 1)] }]);
    assert.throws(
      () =>
        wal.append([
          { kind: "entries", shard: 1, entries: [entry(2, 1), entry(3, 1)] },
          { kind: "entries", shard: 2, entries: [entry(1, 1)] },
          { kind: "entries", shard: 1, entries: [entry(5, 1)] },
        ]),
      /CAIRN_ERR_WAL_GAP|does not follow \[1, 3\]/,
    );
    assert.equal(wal.lastIndex(1), 1, "nothing of the refused batch applied");
    assert.equal(wal.lastIndex(2), 0);
    // A batch that follows as it goes (an overwrite, a snapshot, entries after it) is taken.
    wal.append([
      { kind: "entries", shard: 1, entries: [entry(2, 1), entry(3, 1)] },
      { kind: "entries", shard: 1, entries: [entry(3, 2)] },
      { kind: "snapshot", shard: 1, meta: { index: 10, term: 2, data: bytes("s") } },
      { kind: "entries", shard: 1, entries: [entry(11, 2)] },
    ]);
    await wal.sync();
    await wal.destroy();
    const again = await Wal.open(dir, { segmentBytes: 1024 });
    try {
      assert.equal(again.lastIndex(1), 11);
      assert.equal(again.firstIndex(1), 11);
    } finally {
      await again.close();
    }
  });

  it("refuses a record larger than recovery reads, whole and before writing it; takes one at the bound", async () => {
    // append wrote any record, and recovery reads none whose body is over MAX_BODY_BYTES: such
    // a record, synced and acknowledged, was cut off at the next open as a torn write when last
    // in the log, and made the open fail as corruption when others followed (an audit,
    // 2026-12-06).
    const dir = tempDir("wal");
    let wal = await Wal.open(dir);
    wal.append([{ kind: "entries", shard: 1, entries: [entry(1, 1)] }]);
    await wal.sync();
    const atBound = new Uint8Array(MAX_PAYLOAD_BYTES).fill(7);
    const over = new Uint8Array(MAX_PAYLOAD_BYTES + 1).fill(9);
    const overRecords: WalRecord[][] = [
      [{ kind: "entries", shard: 1, entries: [entry(2, 1), { ...entry(3, 1), data: over }] }],
      [{ kind: "snapshot", shard: 2, meta: { index: 5, term: 1, data: over } }],
      [
        {
          kind: "hard-state",
          shard: 3,
          state: { term: 1, vote: "v".repeat(over.length), commit: 0 },
        },
      ],
    ];
    for (const records of overRecords) {
      assert.throws(() => wal.append(records), { code: "CAIRN_ERR_WAL_TOO_LARGE" });
    }
    assert.equal(wal.lastIndex(1), 1, "nothing of the refused batches applied");
    assert.equal(wal.snapshot(2), undefined);
    assert.equal(wal.hardState(3), undefined);
    assert.equal(wal.stats().unwrittenBytes, 0, "nor left to write");
    await wal.sync();
    await wal.close();
    wal = await Wal.open(dir);
    try {
      assert.equal(wal.tornTail, undefined);
      assert.deepEqual(texts(wal, 1), ["1@1:e1"]);
      // One at the bound is written, and read back whole, with what follows it.
      wal.append([{ kind: "entries", shard: 1, entries: [{ ...entry(2, 1), data: atBound }] }]);
      wal.append([{ kind: "entries", shard: 1, entries: [entry(3, 1)] }]);
      await wal.sync();
    } finally {
      await wal.close();
    }
    wal = await Wal.open(dir);
    try {
      assert.equal(wal.tornTail, undefined);
      assert.equal(wal.lastIndex(1), 3);
      assert.ok(Buffer.from(wal.entries(1, 2, 3)[0]?.data ?? []).equals(atBound));
    } finally {
      await wal.close();
    }
  });

  it("refuses a batch that would make one write larger than a segment recovery reads", async () => {
    // A write goes whole into one segment, and recovery reads a segment whole: node's readFile
    // refuses a file over 2 GiB - 1 bytes. A write taking its segment past that made the next
    // open fail (ERR_FS_FILE_TOO_LARGE: every shard's log in the WAL unreadable); a write over
    // 2 GiB itself failed the WAL (an audit, 2026-12-06). Thirty 64 MiB entries sharing one
    // buffer: with 64 MiB segments a write may carry 2 GiB less 128 MiB, and less a byte.
    const dir = tempDir("wal");
    let wal = await Wal.open(dir);
    wal.append([{ kind: "entries", shard: 1, entries: [entry(1, 1)] }]);
    const big = new Uint8Array(64 * 1024 * 1024);
    const entries = Array.from({ length: 30 }, (_, i) => ({ ...entry(i + 2, 1), data: big }));
    assert.throws(() => wal.append([{ kind: "entries", shard: 1, entries }]), {
      code: "CAIRN_ERR_WAL_TOO_LARGE",
    });
    assert.equal(wal.lastIndex(1), 1, "nothing of the refused batch applied");
    await wal.sync();
    await wal.close();
    wal = await Wal.open(dir);
    assert.deepEqual(texts(wal, 1), ["1@1:e1"]);
    await wal.close();

    // Segments whose size leaves room for a write of three 1 MiB entries (a small bound to try
    // its edges without writing gigabytes): what was appended and not yet written counts.
    const mib = new Uint8Array(1024 * 1024).fill(5);
    const record = 8 + 24 + mib.length;
    const options = {
      segmentBytes: SEGMENT_FILE_MAX_BYTES - CHECKPOINT_ROOM_BYTES - 3 * record,
      preallocate: false,
    };
    const small = tempDir("wal");
    wal = await Wal.open(small, options);
    const mibEntry = (index: number): WalEntry => ({ ...entry(index, 1), data: mib });
    wal.append([{ kind: "entries", shard: 1, entries: [mibEntry(1), mibEntry(2)] }]);
    assert.throws(
      () => wal.append([{ kind: "entries", shard: 1, entries: [mibEntry(3), mibEntry(4)] }]),
      { code: "CAIRN_ERR_WAL_TOO_LARGE" },
    );
    // At the bound: taken, and so is a batch as large after the write.
    wal.append([{ kind: "entries", shard: 1, entries: [mibEntry(3)] }]);
    await wal.sync();
    wal.append([{ kind: "entries", shard: 1, entries: [mibEntry(4), mibEntry(5), mibEntry(6)] }]);
    await wal.sync();
    await wal.close();
    wal = await Wal.open(small, options);
    try {
      assert.equal(wal.tornTail, undefined);
      assert.equal(wal.lastIndex(1), 6);
      assert.ok(wal.entries(1, 1, 7).every((e) => Buffer.from(e.data).equals(mib)));
    } finally {
      await wal.close();
    }
  });

  it("refuses records appended once close() has begun; close() makes the earlier ones durable", async () => {
    // close() awaited its sync() with the WAL still open to appends: one made meanwhile was
    // accepted and visible, and then written after close() began, or, when its write started a
    // segment, failed on the closed file (CAIRN_ERR_WAL_FAILED, "the node must restart") (an
    // audit, 2026-12-06).
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { segmentBytes: 100 });
    wal.append([{ kind: "entries", shard: 1, entries: [entry(1, 1, "x".repeat(200))] }]);
    const closing = wal.close();
    assert.throws(() => wal.append([{ kind: "entries", shard: 1, entries: [entry(2, 1)] }]), {
      code: "CAIRN_ERR_WAL_CLOSED",
    });
    assert.throws(() => wal.compact(1, 1), { code: "CAIRN_ERR_WAL_CLOSED" });
    assert.throws(() => wal.drop(2), { code: "CAIRN_ERR_WAL_CLOSED" });
    assert.equal(wal.lastIndex(1), 1, "nothing of them applied");
    await closing;
    await wal.sync();
    const again = await Wal.open(dir, { segmentBytes: 100 });
    try {
      assert.equal(again.lastIndex(1), 1);
      assert.equal(again.firstIndex(1), 1, "the compaction was refused");
    } finally {
      await again.close();
    }
  });

  it("rejects a sync() of records a destroy() dropped, not leaving it pending for ever", async () => {
    // destroy() drops the records not yet written, but sync() still counted them as to write:
    // it started a flush that found nothing, and its promise never settled (an audit,
    // 2026-12-06).
    const dir = tempDir("wal");
    const wal = await Wal.open(dir);
    wal.append([{ kind: "entries", shard: 1, entries: [entry(1, 1)] }]);
    await wal.destroy();
    const syncing = wal.sync().then(
      () => "resolved",
      (err: unknown) => (err as { code?: unknown }).code,
    );
    // A rejection settles within the microtasks before the next turn of the event loop; a
    // promise still pending then waits for a write no one will start.
    const turn = new Promise<string>((resolve) => setImmediate(() => resolve("pending")));
    assert.equal(await Promise.race([syncing, turn]), "CAIRN_ERR_WAL_CLOSED");
  });

  it("lowers a recovered commit past the last durable entry, and reports it", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir);
    wal.append([
      { kind: "entries", shard: 1, entries: [entry(1, 1), entry(2, 1), entry(3, 1)] },
      { kind: "hard-state", shard: 1, state: { term: 1, vote: "n1", commit: 5 } },
      { kind: "snapshot", shard: 2, meta: { index: 10, term: 2, data: bytes("c") } },
      { kind: "hard-state", shard: 2, state: { term: 2, vote: null, commit: 10 } },
    ]);
    await wal.close();
    const again = await Wal.open(dir);
    assert.deepEqual(again.clampedCommits, [{ shard: 1, commit: 5, clampedTo: 3 }]);
    assert.deepEqual(again.hardState(1), { term: 1, vote: "n1", commit: 3 });
    assert.deepEqual(again.hardState(2), { term: 2, vote: null, commit: 10 });
    await again.close();
    // The planted bug of old versions keeps the commit as recorded.
    const buggy = await Wal.open(dir, { testingBugs: { rotationCheckpointIncludesBatch: true } });
    assert.deepEqual(buggy.clampedCommits, []);
    assert.equal(buggy.hardState(1)?.commit, 5);
    await buggy.close();
  });

  it("reports the shards holding the most memory", async () => {
    const dir = tempDir("wal");
    const wal = await Wal.open(dir, { memoryBudgetBytes: 1000 });
    wal.append([
      { kind: "entries", shard: 1, entries: [entry(1, 1, "a".repeat(100))] },
      { kind: "entries", shard: 2, entries: [entry(1, 1, "b".repeat(1000))] },
    ]);
    assert.equal(wal.isOverMemoryBudget(), true);
    assert.deepEqual(
      wal.largestShards(1).map((s) => s.shard),
      [2],
    );
    wal.compact(2, 1);
    assert.equal(wal.isOverMemoryBudget(), false);
    await wal.close();
  });
});

// --- model-based: random operations, syncs, restarts and crashes against a simple model ---

interface ShardModel {
  entries: Map<number, { term: number; text: string }>;
  first: number;
  last: number;
  hard: { term: number; vote: string | null; commit: number } | undefined;
}

type Op =
  | { op: "append"; shard: number; back: number; count: number; term: number }
  | { op: "hard"; shard: number; term: number; vote: string | null }
  | { op: "compact"; shard: number; back: number }
  | { op: "sync" }
  | { op: "restart" }
  | { op: "crash" };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  {
    arbitrary: fc.record({
      op: fc.constant("append" as const),
      shard: fc.integer({ min: 0, max: 3 }),
      back: fc.integer({ min: 0, max: 3 }),
      count: fc.integer({ min: 1, max: 6 }),
      term: fc.integer({ min: 1, max: 5 }),
    }),
    weight: 6,
  },
  {
    arbitrary: fc.record({
      op: fc.constant("hard" as const),
      shard: fc.integer({ min: 0, max: 3 }),
      term: fc.integer({ min: 1, max: 9 }),
      vote: fc.option(fc.constantFrom("n1", "n2", "nœud-3"), { nil: null }),
    }),
    weight: 2,
  },
  {
    arbitrary: fc.record({
      op: fc.constant("compact" as const),
      shard: fc.integer({ min: 0, max: 3 }),
      back: fc.integer({ min: 0, max: 4 }),
    }),
    weight: 2,
  },
  { arbitrary: fc.constant({ op: "sync" as const }), weight: 3 },
  { arbitrary: fc.constant({ op: "restart" as const }), weight: 1 },
  { arbitrary: fc.constant({ op: "crash" as const }), weight: 1 },
);

function cloneModel(m: Map<number, ShardModel>): Map<number, ShardModel> {
  const out = new Map<number, ShardModel>();
  for (const [k, v] of m) out.set(k, { ...v, entries: new Map(v.entries) });
  return out;
}

describe("WAL against a model", () => {
  it("recovers exactly the synced state after restarts and crashes", async () => {
    let run = 0;
    await fc.assert(
      fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 60 }), async (ops) => {
        const dir = tempDir(`walmodel${run++}`);
        let wal = await Wal.open(dir, { segmentBytes: 700 });
        let live = new Map<number, ShardModel>();
        let durable = cloneModel(live);
        const shardModel = (id: number): ShardModel => {
          let s = live.get(id);
          if (s === undefined) {
            s = { entries: new Map(), first: 1, last: 0, hard: undefined };
            live.set(id, s);
          }
          return s;
        };
        let serial = 0;
        for (const op of ops) {
          switch (op.op) {
            case "append": {
              const s = shardModel(op.shard);
              const start = Math.max(s.first, s.last + 1 - op.back);
              const list: WalEntry[] = [];
              for (let i = start; i <= s.last; i++) s.entries.delete(i);
              for (let k = 0; k < op.count; k++) {
                const text = `s${serial++}`;
                list.push(entry(start + k, op.term, text));
                s.entries.set(start + k, { term: op.term, text });
              }
              s.last = start + op.count - 1;
              wal.append([{ kind: "entries", shard: op.shard, entries: list } as WalRecord]);
              break;
            }
            case "hard": {
              const hard = { term: op.term, vote: op.vote, commit: 0 };
              shardModel(op.shard).hard = hard;
              wal.append([{ kind: "hard-state", shard: op.shard, state: hard }]);
              break;
            }
            case "compact": {
              const s = live.get(op.shard);
              if (s === undefined || s.last < s.first) break;
              const index = Math.max(s.first, s.last - op.back);
              for (let i = s.first; i <= index; i++) s.entries.delete(i);
              s.first = index + 1;
              wal.compact(op.shard, index);
              break;
            }
            case "sync":
              await wal.sync();
              durable = cloneModel(live);
              break;
            case "restart":
              await wal.close();
              durable = cloneModel(live);
              wal = await Wal.open(dir, { segmentBytes: 700 });
              break;
            case "crash":
              await wal.destroy();
              live = cloneModel(durable);
              wal = await Wal.open(dir, { segmentBytes: 700 });
              break;
          }
          if (op.op === "restart" || op.op === "crash") {
            for (const [id, s] of live) {
              assert.equal(wal.firstIndex(id), s.first, `shard ${id} first`);
              assert.equal(wal.lastIndex(id), s.last, `shard ${id} last`);
              const got = texts(wal, id);
              const want = [...s.entries]
                .sort((a, b) => a[0] - b[0])
                .map(([i, e]) => `${i}@${e.term}:${e.text}`);
              assert.deepEqual(got, want, `shard ${id} entries`);
              assert.deepEqual(wal.hardState(id), s.hard, `shard ${id} hard state`);
            }
          }
        }
        await wal.close();
      }),
      { numRuns: 100 },
    );
  });
});

// --- crash at chosen file operations, with and without losing unsynced data ---

const crashChild = join(import.meta.dirname, "wal-crash-child.ts");
const CRASH_STEPS = 300;

/**
 * Runs the crash child until it kills itself; returns the highest acknowledged step. `args` come
 * before the child script (a preloaded shim), `env` tells it where to crash.
 */
async function runCrashChild(
  dir: string,
  args: string[],
  env: Record<string, string>,
): Promise<number> {
  const proc = spawn(process.execPath, [...args, crashChild, dir, String(CRASH_STEPS)], {
    stdio: ["ignore", "pipe", "inherit"],
    env: { ...process.env, ...env },
  });
  let output = "";
  proc.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const [, signal] = (await once(proc, "exit")) as [number | null, string | null];
  assert.equal(signal, "SIGKILL", "the child reached the crash point");
  // Only now, with the child dead, is a power-cut journal complete (crash-shim.ts).
  const journal = env["CAIRN_CRASH_JOURNAL"];
  if (journal !== undefined) powerCut(journal);
  let acked = 0;
  for (const line of output.split("\n")) {
    if (line.startsWith("a ")) acked = Math.max(acked, Number(line.slice(2)));
  }
  return acked;
}

/** Reopens the crashed child's WAL and checks it holds every acknowledged step. */
async function checkRecovered(dir: string, acked: number): Promise<void> {
  const wal = await Wal.open(dir, { segmentBytes: 2048 });
  const got = walSignature(wal);
  for (let shard = 0; shard < 8; shard++) {
    const commit = wal.hardState(shard)?.commit ?? 0;
    assert.ok(
      commit <= wal.lastIndex(shard),
      `shard ${shard}: commit ${commit} beyond the last entry ${wal.lastIndex(shard)}`,
    );
  }
  await wal.close();
  // Acknowledged steps are all there; the one in flight may or may not be.
  assert.ok(
    got === modelSignature(acked) || got === modelSignature(acked + 1),
    `recovered state is neither step ${acked} nor ${acked + 1}`,
  );
}

describe("WAL crash at chosen file operations (SIGKILL from a preloaded shim)", () => {
  const shim = join(import.meta.dirname, "crash-shim.ts");
  // Opening takes 6 operations (create, write header, preallocate and fsync the segment, open
  // and fsync the directory); each step one O_DSYNC write; a rotation 8 more (cut and fsync the
  // old segment, create, write, preallocate and fsync the new one, close the old, fsync the
  // directory); each deleted segment one unlink.
  const points = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 13, 17, 22, 28, 35, 45, 57, 70, 90, 115, 150];
  for (const at of points) {
    it(`before operation ${at}${at % 2 === 0 ? ", unsynced data dropped" : ""}`, async () => {
      const dir = tempDir("walpoint");
      const acked = await runCrashChild(dir, ["--import", shim], {
        CAIRN_CRASH_DIR: dir,
        CAIRN_CRASH_THREAD: "0",
        CAIRN_CRASH_AT: String(at),
        ...(at % 2 === 0 ? { CAIRN_CRASH_JOURNAL: join(tempDir("journal"), "journal") } : {}),
      });
      await checkRecovered(dir, acked);
    });
  }
});

describe("WAL crash inside a segment rotation (SIGKILL at a counted operation)", () => {
  // The operations after a rotation has created its segment, in order; the last one is whatever
  // follows the directory fsync (a deletion or the next batch's write).
  const phases = [
    "before the checkpoint write",
    "before preallocating the new segment",
    "before syncing its size",
    "before closing the old segment",
    "before the batch write",
    "before the directory fsync",
    "after the directory fsync",
  ];
  for (const rotation of [1, 4]) {
    phases.forEach((phase, i) => {
      it(`rotation ${rotation}, ${phase}`, async () => {
        const dir = tempDir("walrot");
        const acked = await runCrashChild(dir, [], {
          CAIRN_WAL_CRASH: `rotation:${rotation}:${i + 1}`,
        });
        await checkRecovered(dir, acked);
      });
    });
  }
  // Rotation 1 cuts the old segment back to its records (truncate 2), then preallocates the new
  // one (truncate 3); rotation 3's are truncates 6 and 7.
  for (const [k, n, what] of [
    [2, 0, "before cutting the old segment back"],
    [2, 1, "before syncing the cut"],
    [2, 2, "before creating the new segment"],
    [6, 1, "before syncing the cut of rotation 3"],
    [7, 0, "before preallocating the segment of rotation 3"],
  ] as const) {
    it(`rotation, ${what}`, async () => {
      const dir = tempDir("walrot");
      const acked = await runCrashChild(dir, [], { CAIRN_WAL_CRASH: `truncate:${k}:${n}` });
      await checkRecovered(dir, acked);
    });
  }
  for (const k of [1, 3]) {
    it(`before segment deletion ${k}`, async () => {
      const dir = tempDir("walrot");
      const acked = await runCrashChild(dir, [], { CAIRN_WAL_CRASH: `unlink:${k}` });
      await checkRecovered(dir, acked);
    });
  }
});

describe("WAL close", () => {
  /** A file system whose files' writes fail once `broken.now`, counting each file's closes. */
  function breakable() {
    const broken = { now: false };
    const closes: number[] = [];
    const fs: FileSystem = new Proxy(new MemoryFileSystem(), {
      get(target, p) {
        if (p === "open") {
          return async (path: string, flags: Parameters<FileSystem["open"]>[1]) => {
            const file = await target.open(path, flags);
            const n = closes.push(0) - 1;
            const fail = (): never => {
              throw Object.assign(new Error("EIO: i/o error, write"), { code: "EIO" });
            };
            return {
              write: (...a: Parameters<FsFile["write"]>) =>
                broken.now ? Promise.reject(new Error("EIO")) : file.write(...a),
              ...(file.writeNow === undefined
                ? {}
                : {
                    writeNow: (...a: Parameters<NonNullable<FsFile["writeNow"]>>) =>
                      broken.now
                        ? fail()
                        : (file.writeNow as NonNullable<FsFile["writeNow"]>)(...a),
                  }),
              truncate: (length: number) => file.truncate(length),
              sync: () => file.sync(),
              datasync: () => file.datasync(),
              close: () => {
                closes[n] = (closes[n] ?? 0) + 1;
                return file.close();
              },
            } satisfies FsFile;
          };
        }
        const v: unknown = Reflect.get(target, p, target);
        return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
      },
    });
    return { fs, broken, closes };
  }

  it("closes its file when the last sync fails, and rejects with that failure", async () => {
    const { fs, broken, closes } = breakable();
    const wal = await Wal.open("/wal", { fs, preallocate: false });
    wal.append([{ kind: "entries", shard: 1, entries: [entry(1, 1)] }]);
    broken.now = true;
    await assert.rejects(wal.close());
    assert.ok(closes.length > 0);
    assert.equal(closes.at(-1), 1, "the segment's file closed once");
  });

  it("closes its file once when close() is called twice at once, both resolving", async () => {
    const { fs, closes } = breakable();
    const wal = await Wal.open("/wal", { fs, preallocate: false });
    wal.append([{ kind: "entries", shard: 1, entries: [entry(1, 1)] }]);
    await Promise.all([wal.close(), wal.close()]);
    assert.equal(closes.at(-1), 1, "the segment's file closed once");
  });
});
