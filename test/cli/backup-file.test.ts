/**
 * The backup file (src/cli/backup-file.ts): what is written reads back byte for byte, and a file
 * damaged anywhere — a flipped byte, a cut, records dropped or repeated, bytes appended, a
 * hostile length — is refused with where, without reading past its bounds.
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import fsp from "node:fs/promises";
import { syncBuiltinESMExports } from "node:module";
import { basename, join } from "node:path";
import { after, before, describe, it, mock } from "node:test";
import fc from "fast-check";
import {
  BackupChangedError,
  BackupDamagedError,
  type BackupEntry,
  type BackupHeader,
  type BackupTotals,
  type BackupTrace,
  BackupWriter,
  openBackup,
} from "../../src/cli/backup-file.ts";
import { crc32c } from "../../src/storage/common/crc32c.ts";

let dir: string;
let n = 0;
const fresh = (): string => join(dir, `b${n++}.bak`);
const HEADER: BackupHeader = {
  created: "2026-12-02T00:00:00.000Z",
  range: {},
  consistency: "linearizable",
};
const b64 = (s: string): string => Buffer.from(s).toString("base64");

before(() => {
  dir = mkdtempSync(join(tmpdir(), "cairn-backup-file-"));
});
after(() => rmSync(dir, { recursive: true, force: true }));

async function write(
  path: string,
  entries: readonly BackupEntry[],
  skippedShards: readonly number[] = [],
): Promise<void> {
  const w = await BackupWriter.create(path, HEADER);
  for (const e of entries) await w.add(e.key, e.value);
  assert.deepEqual(await w.finish(skippedShards), {
    records: entries.length,
    bytes: entries.reduce((s, e) => s + e.key.length + e.value.length, 0),
    skippedShards,
  });
}

async function read(
  path: string,
): Promise<{ header: BackupHeader; entries: BackupEntry[]; totals: BackupTotals | null }> {
  const r = await openBackup(path);
  try {
    const entries: BackupEntry[] = [];
    for await (const batch of r.entries(7)) entries.push(...batch);
    return { header: r.header, entries, totals: r.totals };
  } finally {
    await r.close();
  }
}

const sorted = (keys: Uint8Array[]): BackupEntry[] =>
  keys
    .map((k, i) => ({ key: k, value: Buffer.alloc(i % 5 === 0 ? 0 : 1 + (i % 300), i) }))
    .sort((a, b) => Buffer.compare(a.key, b.key));

describe("the backup file", () => {
  it("reads back what was written, header and entries, byte for byte", async () => {
    await fc.assert(
      fc.asyncProperty(
        fc.uniqueArray(fc.uint8Array({ minLength: 1, maxLength: 40 }), {
          maxLength: 60,
          selector: (k) => Buffer.from(k).toString("hex"),
        }),
        fc.uniqueArray(fc.integer({ min: 0, max: 65_535 }), { maxLength: 30 }),
        async (keys, skipped) => {
          const path = fresh();
          const entries = sorted(keys);
          const skippedShards = skipped.sort((a, b) => a - b);
          await write(path, entries, skippedShards);
          const got = await read(path);
          assert.deepEqual(got.header, HEADER);
          assert.deepEqual(got.totals?.skippedShards, skippedShards);
          assert.deepEqual(
            got.entries.map((e) => [Buffer.from(e.key), Buffer.from(e.value)]),
            entries.map((e) => [Buffer.from(e.key), Buffer.from(e.value)]),
          );
        },
      ),
      { numRuns: 40 },
    );
  });

  it("holds values larger than its read chunk", async () => {
    const path = fresh();
    const big = Buffer.alloc(3 * 1024 * 1024 + 17, 9);
    await write(path, [
      { key: Buffer.from("a"), value: big },
      { key: Buffer.from("b"), value: Buffer.from("x") },
    ]);
    const got = await read(path);
    assert.deepEqual(Buffer.from(got.entries[0]?.value ?? []), big);
    assert.equal(got.entries.length, 2);
  });

  it("reads large values a few at a time: a batch is bounded in bytes, not only in entries", async () => {
    // A batch was 256 entries whatever their size: with values of up to 64 MiB, restore's
    // check pass (which only reads) held up to 16 GiB. Here 24 values of 1 MiB came as one batch.
    const path = fresh();
    const mib = 1024 * 1024;
    await write(
      path,
      Array.from({ length: 24 }, (_, i) => ({
        key: Buffer.from(`k${String(i).padStart(2, "0")}`),
        value: Buffer.alloc(mib, i),
      })),
    );
    const r = await openBackup(path);
    try {
      let entries = 0;
      for await (const batch of r.entries()) {
        // Under 4 MiB before its last entry.
        const bytes = batch.slice(0, -1).reduce((s, e) => s + e.key.length + e.value.length, 0);
        assert.ok(
          bytes < 4 * mib,
          `a batch of ${batch.length} entries, ${bytes} bytes before its last`,
        );
        entries += batch.length;
      }
      assert.equal(entries, 24);
    } finally {
      await r.close();
    }
  });

  it("never replaces a file, and leaves no partial file when aborted", async () => {
    const path = fresh();
    await write(path, []);
    await assert.rejects(BackupWriter.create(path, HEADER), /exists; a backup never replaces/);
    const other = fresh();
    const w = await BackupWriter.create(other, HEADER);
    await assert.rejects(
      BackupWriter.create(other, HEADER),
      /left by a backup that did not finish/,
    );
    await w.add(Buffer.from("k"), Buffer.from("v"));
    await w.abort();
    assert.equal(existsSync(`${other}.partial`), false);
    assert.equal(existsSync(other), false);
  });

  it("on a file system that refuses hard links, refuses the backup before it starts, saying why", async () => {
    // No file system here refuses hard links (FAT, some FUSE mounts do), and the one link a
    // backup makes is within one directory (no EXDEV): fs/promises' link is made to refuse as
    // such a file system does, for the module under test too (its named import is live).
    mock.method(fsp, "link", () =>
      Promise.reject(
        Object.assign(new Error("EPERM: operation not permitted, link"), { code: "EPERM" }),
      ),
    );
    syncBuiltinESMExports();
    try {
      const path = fresh();
      await assert.rejects(
        BackupWriter.create(path, HEADER),
        /refuses hard links \(EPERM\).*'cairn backup - > FILE'/,
      );
      assert.deepEqual(
        readdirSync(dir).filter((f) => f.startsWith(basename(path))),
        [],
        "no file left",
      );
    } finally {
      mock.restoreAll();
      syncBuiltinESMExports();
    }
  });

  it("refuses keys out of order at write time", async () => {
    const w = await BackupWriter.create(fresh(), HEADER);
    await w.add(Buffer.from("b"), Buffer.from("1"));
    await assert.rejects(w.add(Buffer.from("a"), Buffer.from("2")), /strictly ascending/);
    await assert.rejects(w.add(Buffer.from("b"), Buffer.from("2")), /strictly ascending/);
    await w.abort();
  });

  it("refuses a file damaged anywhere: every byte flipped, every cut, bytes appended", async () => {
    const path = fresh();
    // A partial backup, so the skipped shards' record is attacked too.
    await write(path, sorted(["a", "bb", "ccc", "dddd"].map((k) => Buffer.from(k))), [3, 700]);
    const whole = readFileSync(path);
    const damaged = join(dir, "damaged.bak");
    const refused = async (bytes: Buffer, what: string): Promise<void> => {
      writeFileSync(damaged, bytes);
      await assert.rejects(read(damaged), BackupDamagedError, what);
    };
    for (let i = 0; i < whole.length; i++) {
      const b = Buffer.from(whole);
      b[i] = (b[i] as number) ^ 0x01;
      await refused(b, `byte ${i} flipped`);
    }
    for (let cut = 0; cut < whole.length; cut++)
      await refused(whole.subarray(0, cut), `cut at ${cut}`);
    await refused(Buffer.concat([whole, Buffer.from([0])]), "a byte appended");
  });

  it("refuses records dropped, repeated or swapped, though each record is whole", async () => {
    const entries = sorted(["a", "b", "c"].map((k) => Buffer.from(k)));
    const path = fresh();
    await write(path, entries);
    const whole = readFileSync(path);
    // Each record here: 1 + 4 + 4 + 1-byte key + value + 4.
    const headerEnd = 16 + whole.readUInt32BE(12) + 4;
    const records: Buffer[] = [];
    let at = headerEnd;
    for (let i = 0; i < 3; i++) {
      const len = 13 + whole.readUInt32BE(at + 1) + whole.readUInt32BE(at + 5);
      records.push(whole.subarray(at, at + len));
      at += len;
    }
    const [r0, r1, r2] = records as [Buffer, Buffer, Buffer];
    const head = whole.subarray(0, headerEnd);
    const end = whole.subarray(at);
    const damaged = join(dir, "reordered.bak");
    for (const [what, body] of [
      ["dropped", [r0, r2]],
      ["repeated", [r0, r1, r1, r2]],
      ["swapped", [r1, r0, r2]],
    ] as const) {
      writeFileSync(damaged, Buffer.concat([head, ...body, end]));
      await assert.rejects(read(damaged), BackupDamagedError, what);
    }
  });

  it("records the shards a partial backup left out; refuses that record dropped, moved or invalid", async () => {
    const entries = sorted(["a", "b"].map((k) => Buffer.from(k)));
    const whole = fresh();
    await write(whole, entries);
    const partial = fresh();
    await write(partial, entries, [5, 17, 1023]);
    assert.deepEqual((await read(whole)).totals?.skippedShards, []);
    assert.deepEqual((await read(partial)).totals?.skippedShards, [5, 17, 1023]);
    // The partial file is the whole one with the record inserted before the end record.
    const w = readFileSync(whole);
    const p = readFileSync(partial);
    const endAt = w.length - 21;
    const record = p.subarray(endAt, p.length - 21);
    assert.equal(record[0], 3);
    assert.deepEqual(JSON.parse(record.subarray(5, record.length - 4).toString()), [5, 17, 1023]);
    const damaged = join(dir, "skipped.bak");
    const refused = async (bytes: Buffer, what: RegExp): Promise<void> => {
      writeFileSync(damaged, bytes);
      await assert.rejects(read(damaged), what);
    };
    // Dropped: the end record's checksum chains through it.
    await refused(
      Buffer.concat([p.subarray(0, endAt), p.subarray(p.length - 21)]),
      /the end record's checksum does not match/,
    );
    // Before a record: its checksum chains from the record before it, and it must be the last.
    const headerEnd = 16 + p.readUInt32BE(12) + 4;
    await refused(
      Buffer.concat([
        p.subarray(0, headerEnd),
        record,
        p.subarray(headerEnd, endAt),
        p.subarray(p.length - 21),
      ]),
      /the skipped shards' record's checksum does not match/,
    );
    // Ids that are not ascending shard numbers, under a checksum that matches.
    const withIds = async (json: string): Promise<Buffer> => {
      const path = fresh();
      const out = await BackupWriter.create(path, HEADER);
      for (const e of entries) await out.add(e.key, e.value);
      await out.finish([0]);
      const b = readFileSync(path);
      const body = Buffer.from(json);
      const head = Buffer.from([3, 0, 0, 0, 0]);
      head.writeUInt32BE(body.length, 1);
      const before = b.subarray(0, b.length - 21 - (5 + "[0]".length + 4));
      const seed = before.readUInt32BE(before.length - 4);
      const crc = Buffer.alloc(4);
      crc.writeUInt32BE(crc32c(body, crc32c(head, seed)));
      const end = Buffer.from(b.subarray(b.length - 21, b.length - 4));
      const endCrc = Buffer.alloc(4);
      endCrc.writeUInt32BE(crc32c(end, crc.readUInt32BE(0)));
      return Buffer.concat([before, head, body, crc, end, endCrc]);
    };
    // The forged record is read as valid when its ids are (the forgery is right).
    writeFileSync(damaged, await withIds("[2,9]"));
    assert.deepEqual((await read(damaged)).totals?.skippedShards, [2, 9]);
    for (const json of ["[9,2]", "[1,1]", "[-1]", "[65536]", "[]", "{}", '["1"]', "[1.5]", "nope"])
      await refused(await withIds(json), /the skipped shards' record is not valid/);
    // A hostile length, refused before it is allocated.
    const huge = Buffer.from(p);
    huge.writeUInt32BE(0x7fffffff, endAt + 1);
    await refused(huge, /a skipped shards' record of 2147483647 bytes/);
  });

  it("refuses a key outside the header's range, written or read (a restore checks only that range)", async () => {
    for (const range of [{ prefix: b64("p/") }, { start: b64("b"), end: b64("d") }]) {
      const header = { ...HEADER, range };
      const w = await BackupWriter.create(fresh(), header);
      await assert.rejects(w.add(Buffer.from("a"), Buffer.from("1")), /outside the backup's range/);
      await w.abort();
    }
    // A file whose header says "p/" and whose record does not, every checksum right: the
    // header of a range-less backup swapped for a prefix one, and the chain recomputed.
    const path = fresh();
    await write(path, [{ key: Buffer.from("q/1"), value: Buffer.from("v") }]);
    const whole = readFileSync(path);
    const oldHeaderEnd = 16 + whole.readUInt32BE(12) + 4;
    const json = Buffer.from(JSON.stringify({ ...HEADER, range: { prefix: b64("p/") } }));
    const head = Buffer.from(whole.subarray(0, 16));
    head.writeUInt32BE(json.length, 12);
    const u32 = (n: number): Buffer => {
      const b = Buffer.alloc(4);
      b.writeUInt32BE(n);
      return b;
    };
    let crc = crc32c(json);
    const parts = [head, json, u32(crc)];
    let at = oldHeaderEnd;
    for (const len of [9 + 3 + 1, 17]) {
      const body = whole.subarray(at, at + len);
      crc = crc32c(body, crc);
      parts.push(body, u32(crc));
      at += len + 4;
    }
    const forged = join(dir, "outside.bak");
    writeFileSync(forged, Buffer.concat(parts));
    await assert.rejects(read(forged), /record 1's key is outside the backup's range/);
    // Inside the range, and an empty end (none): read back.
    const ok = fresh();
    const w = await BackupWriter.create(ok, { ...HEADER, range: { start: b64("b"), end: "" } });
    await w.add(Buffer.from("b"), Buffer.from("1"));
    await w.add(Buffer.from("zz"), Buffer.from("2"));
    await w.finish();
    assert.equal((await read(ok)).entries.length, 2);
  });

  it("refuses a hostile length before allocating it", async () => {
    const path = fresh();
    await write(path, [{ key: Buffer.from("k"), value: Buffer.from("v") }]);
    const whole = readFileSync(path);
    const at = 16 + whole.readUInt32BE(12) + 4;
    const huge = Buffer.from(whole);
    huge.writeUInt32BE(0xffffffff, at + 5); // a 4 GiB value
    writeFileSync(path + ".huge", huge);
    await assert.rejects(read(path + ".huge"), /a 1-byte key, a 4294967295-byte value/);
    const header = Buffer.from(whole);
    header.writeUInt32BE(0x7fffffff, 12); // a 2 GiB header
    writeFileSync(path + ".header", header);
    await assert.rejects(read(path + ".header"), /a header of 2147483647 bytes/);
    writeFileSync(path + ".other", Buffer.from("PK\x03\x04 not a backup at all"));
    await assert.rejects(read(path + ".other"), /not a Cairn backup/);
  });

  it("a second reading given the first's trace reads the file the first checked, and refuses one overwritten in place since, before the batch that differs", async () => {
    // A restore reads a backup twice through one handle, to check it and then to write it: a
    // file overwritten in place in between (\`cp other.bak FILE\`), another valid backup, was
    // written unchecked.
    const path = fresh();
    const keys = Array.from({ length: 50 }, (_, i) =>
      Buffer.from(`k${String(i).padStart(2, "0")}`),
    );
    const entries = sorted(keys);
    const backupOf = async (
      es: readonly BackupEntry[],
      skipped: readonly number[],
      header = HEADER,
    ): Promise<Buffer> => {
      const p = fresh();
      const w = await BackupWriter.create(p, header);
      for (const e of es) await w.add(e.key, e.value);
      await w.finish(skipped);
      return readFileSync(p);
    };
    const original = await backupOf(entries, [3, 4]);
    writeFileSync(path, original);
    const file = await fsp.open(path);
    try {
      // Each batch's keys, the trace, and the error that ended the reading.
      const reading = async (
        same: BackupTrace | null,
      ): Promise<{ batches: string[][]; trace: BackupTrace | null; err: unknown }> => {
        const batches: string[][] = [];
        const r = await openBackup(file, "b.bak", same).catch((err: unknown) => err);
        if (r instanceof Error) return { batches, trace: null, err: r };
        const opened = r as Awaited<ReturnType<typeof openBackup>>;
        try {
          // The second reading batches as the first did, whatever it is asked.
          for await (const batch of opened.entries(same === null ? 7 : 3))
            batches.push(batch.map((e) => Buffer.from(e.key).toString()));
          return { batches, trace: opened.trace, err: null };
        } catch (err) {
          return { batches, trace: null, err };
        } finally {
          await opened.close();
        }
      };
      const first = await reading(null);
      assert.equal(first.err, null);
      const trace = first.trace as BackupTrace;
      assert.deepEqual(trace.totals.skippedShards, [3, 4]);
      assert.equal(first.batches.length, 8);
      // Unchanged: the same entries in the same batches (and read again, as often as wanted).
      for (let i = 0; i < 2; i++) {
        const again = await reading(trace);
        assert.equal(again.err, null);
        assert.deepEqual(again.batches, first.batches);
      }
      const refused = async (bytes: Buffer, batchesGiven: number, want: RegExp): Promise<void> => {
        writeFileSync(path, bytes); // in place: the same file, the same handle
        const again = await reading(trace);
        assert.ok(again.err instanceof BackupChangedError, String(again.err));
        assert.match((again.err as Error).message, want);
        assert.deepEqual(again.batches, first.batches.slice(0, batchesGiven));
      };
      // Another backup (another header): refused at its opening.
      await refused(
        await backupOf(entries.slice(0, 10), [], {
          ...HEADER,
          created: "2026-12-03T00:00:00.000Z",
        }),
        0,
        /^b\.bak changed since it was checked: its header is not the one checked \(another backup\?\) \(at byte 0\)$/,
      );
      // The same backup, one value changed (record 20, in the third batch: 15 to 21).
      const changed = entries.map((e, i) =>
        i === 19 ? { key: e.key, value: Buffer.alloc(e.value.length, 0xee) } : e,
      );
      await refused(
        await backupOf(changed, [3, 4]),
        2,
        /changed since it was checked: what follows record 14, up to record 21, is not what was checked \(at byte \d+\)$/,
      );
      // A record fewer, or more: refused where it no longer lines up.
      await refused(
        await backupOf(entries.slice(0, 49), [3, 4]),
        7,
        /what follows record 49, up to the end/,
      );
      // Its skipped shards changed: refused at the end, the last batch not given.
      await refused(await backupOf(entries, [3]), 7, /what follows record 49, up to the end/);
      // Cut short, or damaged: "changed", not "not a whole backup" (the first reading read it whole).
      await refused(
        original.subarray(0, original.length - 30),
        7,
        /changed since it was checked: the file ends inside a record/,
      );
      const flipped = Buffer.from(original);
      const firstKey = 16 + original.readUInt32BE(12) + 4 + 9;
      flipped[firstKey] = (flipped[firstKey] as number) ^ 1;
      await refused(flipped, 0, /changed since it was checked: record 1's checksum does not match/);
      // Put back: read again as checked.
      writeFileSync(path, original);
      assert.deepEqual((await reading(trace)).batches, first.batches);
    } finally {
      await file.close();
    }
  });
});
