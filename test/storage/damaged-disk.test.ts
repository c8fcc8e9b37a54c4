/**
 * A damaged disk under one node's storage (an audit, 2026-12-07): each kind of file the engine
 * and the WAL keep, damaged after a clean close the way a disk or a stray write damages it (a
 * byte flipped in each part of a table, a file cut short, emptied, replaced by a directory,
 * lost), and opened or read again. What is promised (docs/storage.md, src/storage/README.md): a
 * damaged file is found (CAIRN_ERR_CORRUPTION naming it, which corrupt-shard.ts acts on), never
 * read as wrong data, a deleted key never comes back, and nothing acknowledged is dropped
 * without a word.
 */
import assert from "node:assert/strict";
import {
  chmodSync,
  existsSync,
  mkdirSync,
  readdirSync,
  readFileSync,
  rmSync,
  truncateSync,
  writeFileSync,
} from "node:fs";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { LsmEngine, LsmEnvironment, type LsmOptions } from "../../src/storage/lsm/index.ts";
import { FOOTER_BYTES } from "../../src/storage/lsm/format.ts";
import { type FileSystem, nodeFileSystem } from "../../src/storage/common/index.ts";
import { Wal } from "../../src/storage/wal/index.ts";
import { entry, segmentFiles, tempDir } from "./helpers.ts";

const env = new LsmEnvironment({ workers: 1, blockCacheBytes: 1 << 20 });
after(() => env.close());

/** No compaction: the tables stay as the test made them. */
const OPTIONS: LsmOptions = { l0CompactionTrigger: 8 };

const b = (s: string): Buffer => Buffer.from(s, "latin1");
const text = (v: Uint8Array | undefined): string | undefined =>
  v === undefined ? undefined : Buffer.from(v).toString("latin1");
const keyAt = (i: number): string => `k${String(i).padStart(3, "0")}`;
const KEYS = 200;
const value = (i: number): Buffer => Buffer.alloc(60, 97 + (i % 26));

const tables = (dir: string): string[] =>
  readdirSync(dir)
    .filter((n) => n.endsWith(".sst"))
    .sort()
    .map((n) => join(dir, n));

/**
 * An engine in a new directory, closed: an older table holding keys k000..k199 (several data
 * blocks), then a newer one deleting k005 and writing k010 again.
 */
async function engineOnDisk(): Promise<{ dir: string; older: string; newer: string }> {
  const dir = tempDir("damaged");
  const engine = await LsmEngine.open(dir, env, OPTIONS);
  const ops = [];
  for (let i = 0; i < KEYS; i++)
    ops.push({ type: "put" as const, key: b(keyAt(i)), value: value(i) });
  await engine.write(1, ops);
  await engine.flush();
  await engine.write(2, [
    { type: "delete", key: b(keyAt(5)) },
    { type: "put", key: b(keyAt(10)), value: b("newer") },
  ]);
  await engine.flush();
  await engine.close();
  const [older, newer] = tables(dir) as [string, string];
  return { dir, older, newer };
}

/** The offset and size of a table's index, filter and props blocks (from its footer). */
function blocksOf(path: string): Record<"index" | "filter" | "props", [number, number]> {
  const data = readFileSync(path);
  const footer = data.subarray(data.length - FOOTER_BYTES);
  const handle = (at: number): [number, number] => [
    Number(footer.readBigUInt64LE(at)),
    footer.readUInt32LE(at + 8),
  ];
  return { index: handle(0), filter: handle(12), props: handle(24) };
}

function flip(path: string, offset: number): void {
  const data = readFileSync(path);
  data.writeUInt8(data.readUInt8(offset) ^ 0x10, offset);
  writeFileSync(path, data);
}

/** Asserts that `run` throws CAIRN_ERR_CORRUPTION whose message names `file`. */
function throwsCorruption(run: () => unknown, file: string): void {
  assert.throws(run, (err: Error & { code?: string; file?: string }) => {
    assert.equal(err.code, "CAIRN_ERR_CORRUPTION", err.message);
    assert.equal(err.file, file);
    return true;
  });
}

async function rejectsCorruption(run: Promise<unknown>, file: string): Promise<void> {
  await assert.rejects(run, (err: Error & { code?: string; file?: string }) => {
    assert.equal(err.code, "CAIRN_ERR_CORRUPTION", err.message);
    assert.equal(err.file, file, err.message);
    return true;
  });
}

describe("a damaged table", () => {
  it("with a byte flipped in a middle data block: reads of that block fail, never wrong data", async () => {
    const { dir, older } = await engineOnDisk();
    const { index } = blocksOf(older);
    // Inside the second data block: blocks close after the entry reaching 4 KiB, and their
    // arrays of offsets and prefixes (a few hundred bytes) and checksum follow.
    assert.ok(index[0] > 12_000, "the table has at least three data blocks");
    flip(older, 6000);
    const engine = await LsmEngine.open(dir, env, OPTIONS);
    try {
      assert.equal(text(engine.get(b(keyAt(0)))), text(value(0)), "a block before it reads");
      const inside = [...Array(KEYS).keys()].filter((i) => {
        let got: Uint8Array | undefined;
        try {
          got = engine.get(b(keyAt(i)));
        } catch (err) {
          assert.equal((err as { code?: string }).code, "CAIRN_ERR_CORRUPTION");
          assert.equal((err as { file?: string }).file, older);
          assert.ok((err as { offset: number }).offset > 0, "not the first block");
          return true;
        }
        const expected = i === 5 ? undefined : i === 10 ? "newer" : text(value(i));
        assert.equal(text(got), expected, `${keyAt(i)} reads right or not at all`);
        return false;
      });
      assert.ok(inside.length > 0, "some keys live in the damaged block");
      throwsCorruption(() => [...engine.scan()], older);
      assert.equal((engine.failure as { code?: string }).code, "CAIRN_ERR_CORRUPTION");
    } finally {
      await engine.close();
    }
  });

  for (const part of ["index", "filter", "props"] as const) {
    it(`with a byte flipped in its ${part} block: the open fails naming it`, async () => {
      const { dir, older } = await engineOnDisk();
      const [offset, size] = blocksOf(older)[part];
      flip(older, offset + Math.floor(size / 2));
      await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), older);
      assert.equal(tables(dir).length, 2, "nothing deleted");
    });
  }

  it("holding a tombstone, damaged: the deleted key fails to read, never comes back", async () => {
    const { dir, newer } = await engineOnDisk();
    flip(newer, 3);
    const engine = await LsmEngine.open(dir, env, OPTIONS);
    try {
      throwsCorruption(() => engine.get(b(keyAt(5))), newer);
      throwsCorruption(() => engine.get(b(keyAt(10))), newer);
      throwsCorruption(() => [...engine.scan({ start: b(keyAt(4)), limit: 3 })], newer);
    } finally {
      await engine.close();
    }
  });

  it("met by a compaction: the engine fails, installs nothing and keeps its inputs", async () => {
    const { dir, older } = await engineOnDisk();
    flip(older, 6000);
    const engine = await LsmEngine.open(dir, env, OPTIONS);
    try {
      await rejectsCorruption(engine.compactFully(), older);
      // Named, across the worker's boundary: corrupt-shard.ts finds the shard by the file.
      assert.equal((engine.failure as { file?: string }).file, older);
    } finally {
      await engine.close();
    }
    assert.equal(tables(dir).length, 2, "both inputs kept");
    const again = await LsmEngine.open(dir, env, OPTIONS);
    try {
      throwsCorruption(() => [...again.scan()], older);
    } finally {
      await again.close();
    }
  });

  for (const same of [false, true]) {
    it(`replaced by another whole table${same ? " of the same size" : ""}: the open fails naming it, no deleted key back`, async () => {
      // Each table checks its own blocks only: a file whose bytes became another valid table's
      // (a stray copy, a misdirected write, a file restored alone from an older backup) opened
      // as the table the manifest names, and its keys were served in that table's place: here
      // the table deleting k005 replaced by the one before it, so k005 came back.
      const { dir, older, newer } = await engineOnDisk();
      let stray = readFileSync(older);
      if (same) {
        // Another engine's table the size of `newer`: the same writes at another sequence.
        const other = tempDir("damaged");
        const engine = await LsmEngine.open(other, env, OPTIONS);
        await engine.write(7, [
          { type: "delete", key: b(keyAt(5)) },
          { type: "put", key: b(keyAt(10)), value: b("other") },
        ]);
        await engine.flush();
        await engine.close();
        stray = readFileSync(tables(other)[0] as string);
        assert.equal(stray.length, readFileSync(newer).length);
      }
      writeFileSync(newer, stray);
      await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), newer);
    });
  }

  it("emptied (zero length): the open fails naming it", async () => {
    const { dir, older } = await engineOnDisk();
    truncateSync(older, 0);
    await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), older);
  });

  it("cut short: the open fails naming it", async () => {
    const { dir, older } = await engineOnDisk();
    truncateSync(older, 5000);
    await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), older);
  });

  it("replaced by a directory: the open fails naming it, deleting nothing", async () => {
    // It failed with "EISDIR: illegal operation on a directory, read", naming no file, and not
    // as corruption: corrupt-shard.ts neither named the shard nor moved it aside.
    const { dir, older } = await engineOnDisk();
    rmSync(older);
    mkdirSync(older);
    await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), older);
    assert.equal(tables(dir).length, 2);
  });

  it(
    "unreadable (mode 000): the open fails naming it",
    { skip: process.getuid?.() === 0 },
    async () => {
      const { dir, older } = await engineOnDisk();
      chmodSync(older, 0);
      await assert.rejects(LsmEngine.open(dir, env, OPTIONS), (err: Error) => {
        assert.ok(err.message.includes(older), err.message);
        return true;
      });
    },
  );
});

describe("a damaged manifest or CURRENT", () => {
  const manifestOf = (dir: string): string =>
    join(dir, readdirSync(dir).find((n) => n.startsWith("MANIFEST-")) as string);

  it("an emptied manifest: the open fails naming it, deleting nothing", async () => {
    const { dir } = await engineOnDisk();
    const manifest = manifestOf(dir);
    truncateSync(manifest, 0);
    await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), manifest);
    assert.equal(tables(dir).length, 2);
  });

  it("a manifest cut inside its only record: the open fails naming it, deleting nothing", async () => {
    const { dir } = await engineOnDisk();
    const manifest = manifestOf(dir);
    truncateSync(manifest, 20);
    await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), manifest);
    assert.equal(tables(dir).length, 2);
  });

  it("a manifest replaced by a directory: the open fails naming it", async () => {
    const { dir } = await engineOnDisk();
    const manifest = manifestOf(dir);
    rmSync(manifest);
    mkdirSync(manifest);
    await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), manifest);
    // Said as it is: it was reported "missing", sending an operator to look for a lost file.
    await assert.rejects(
      LsmEngine.open(dir, env, OPTIONS),
      /manifest named by CURRENT is not a regular file/,
    );
    assert.equal(tables(dir).length, 2);
  });

  it("an emptied CURRENT: the open fails naming it, deleting nothing", async () => {
    const { dir } = await engineOnDisk();
    truncateSync(join(dir, "CURRENT"), 0);
    await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), join(dir, "CURRENT"));
    assert.equal(tables(dir).length, 2);
  });

  it("a CURRENT replaced by a directory: the open fails naming it, deleting nothing", async () => {
    const { dir } = await engineOnDisk();
    rmSync(join(dir, "CURRENT"));
    mkdirSync(join(dir, "CURRENT"));
    await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), join(dir, "CURRENT"));
    assert.equal(tables(dir).length, 2);
  });

  it("a CURRENT naming a manifest that is not there: the open fails, deleting nothing", async () => {
    const { dir } = await engineOnDisk();
    writeFileSync(join(dir, "CURRENT"), "MANIFEST-000099\n");
    await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), join(dir, "MANIFEST-000099"));
    assert.equal(tables(dir).length, 2);
  });

  for (const reopened of [false, true]) {
    it(`a lost CURRENT beside a manifest${reopened ? " an open rewrote" : ""}: the open fails naming it, deleting nothing`, async () => {
      // It opened as a new engine and deleted every table and manifest as orphans: the shard's
      // data gone from the disk, by the node itself, for want of one small file.
      const { dir } = await engineOnDisk();
      if (reopened) await (await LsmEngine.open(dir, env, OPTIONS)).close();
      const manifest = manifestOf(dir);
      assert.equal(manifest, join(dir, reopened ? "MANIFEST-000002" : "MANIFEST-000001"));
      rmSync(join(dir, "CURRENT"));
      await rejectsCorruption(LsmEngine.open(dir, env, OPTIONS), join(dir, "CURRENT"));
      assert.equal(tables(dir).length, 2, "the tables are kept");
      assert.ok(existsSync(manifest), "the manifest is kept");
    });
  }

  for (const cut of ["its snapshot", "nothing", "part of its snapshot"]) {
    it(`no CURRENT beside a first manifest holding ${cut} (a crash making it): opens empty`, async () => {
      // A new engine's first edit makes MANIFEST-000001 (the empty version), then CURRENT, and
      // only then appends the edit: a crash before CURRENT leaves a prefix of that snapshot,
      // and nothing of the engine was acknowledged (its table is an orphan).
      const dir = tempDir("damaged");
      const engine = await LsmEngine.open(dir, env, OPTIONS);
      await engine.write(1, [{ type: "put", key: b("a"), value: b("1") }]);
      await engine.flush();
      await engine.close();
      const manifest = manifestOf(dir);
      const snapshot = 8 + readFileSync(manifest).readUInt32LE(0);
      truncateSync(manifest, cut === "its snapshot" ? snapshot : cut === "nothing" ? 0 : 10);
      rmSync(join(dir, "CURRENT"));
      const again = await LsmEngine.open(dir, env, OPTIONS);
      try {
        assert.equal(again.flushedSeq, 0);
        assert.equal(again.get(b("a")), undefined);
      } finally {
        await again.close();
      }
      assert.deepEqual(tables(dir), [], "the orphan table is removed");
    });
  }
});

describe("a damaged WAL segment", () => {
  async function walOnDisk(): Promise<string> {
    const dir = tempDir("damaged-wal");
    const wal = await Wal.open(dir, { segmentBytes: 1024 });
    wal.append([{ kind: "hard-state", shard: 2, state: { term: 7, vote: "n9", commit: 0 } }]);
    for (let i = 1; segmentFiles(dir).length < 3 && i < 1000; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 1, "z".repeat(40))] }]);
      await wal.sync();
    }
    await wal.close();
    assert.equal(segmentFiles(dir).length, 3);
    return dir;
  }

  it("a middle segment emptied: start-up fails naming it", async () => {
    const dir = await walOnDisk();
    const middle = segmentFiles(dir)[1] as string;
    truncateSync(middle, 0);
    await rejectsCorruption(Wal.open(dir, { segmentBytes: 1024 }), middle);
  });

  it("a middle segment's header damaged: start-up fails naming it", async () => {
    const dir = await walOnDisk();
    const middle = segmentFiles(dir)[1] as string;
    flip(middle, 2);
    await rejectsCorruption(Wal.open(dir, { segmentBytes: 1024 }), middle);
  });

  it("the last segment's header damaged, records after it: start-up fails naming it", async () => {
    const dir = await walOnDisk();
    const last = segmentFiles(dir)[2] as string;
    flip(last, 2);
    await rejectsCorruption(Wal.open(dir, { segmentBytes: 1024 }), last);
  });

  it("a segment replaced by a directory: start-up fails naming it", async () => {
    // It failed with "EISDIR: illegal operation on a directory, read", naming no file.
    const dir = await walOnDisk();
    const middle = segmentFiles(dir)[1] as string;
    rmSync(middle);
    mkdirSync(middle);
    await rejectsCorruption(Wal.open(dir, { segmentBytes: 1024 }), middle);
  });

  /** A WAL whose last record, an entry of shard 1 ending in "z", starts at the returned offset. */
  async function lastRecordOnDisk(
    preallocate: boolean,
    value = "acknowledged z",
  ): Promise<{ dir: string; at: number }> {
    const dir = tempDir("damaged-wal");
    const wal = await Wal.open(dir, { preallocate, segmentBytes: 4096 });
    wal.append([{ kind: "entries", shard: 1, entries: [entry(1, 1, "first")] }]);
    await wal.sync();
    const segment = segmentFiles(dir)[0] as string;
    const at = preallocate ? nonZeroEnd(readFileSync(segment)) : readFileSync(segment).length;
    wal.append([{ kind: "entries", shard: 1, entries: [entry(2, 1, value)] }]);
    await wal.sync();
    await wal.close();
    return { dir, at };
  }

  const nonZeroEnd = (buf: Buffer): number => {
    let end = buf.length;
    while (end > 0 && buf[end - 1] === 0) end--;
    return end;
  };

  // A node's segments are always preallocated: a record written in full is followed by zeros.
  for (const [what, where] of [
    ["its body", 8 + 24 + 3],
    ["its checksum", 5],
    ["its length", 1],
  ] as const) {
    it(`the last record written in full, ${what} damaged: start-up fails naming it`, async () => {
      // Read as a torn write, it was cut off and logged as "never acknowledged": an
      // acknowledged entry lost, in silence but for that. A crash leaves a prefix of a
      // record, whose last byte is never written (zeros, or past the end of the file).
      const { dir, at } = await lastRecordOnDisk(true);
      const segment = segmentFiles(dir)[0] as string;
      flip(segment, at + where);
      const damaged = readFileSync(segment);
      await assert.rejects(
        Wal.open(dir, { segmentBytes: 4096 }),
        (err: Error & { code?: string }) => {
          assert.equal(err.code, "CAIRN_ERR_CORRUPTION", err.message);
          assert.equal((err as { file?: string }).file, segment);
          assert.equal((err as { offset?: number }).offset, at);
          return true;
        },
      );
      assert.deepEqual(readFileSync(segment), damaged, "nothing cut");
    });
  }

  it("the last record torn, its unwritten bytes and the rest of their block stale: cut off", async () => {
    // A file system may show a block a crash left unwritten with its old contents (ext4's
    // data=writeback): the torn record's tail, and the bytes after it in its block, are not
    // zeros then. Still a torn write: nothing after it is zero to its block's end.
    const { dir, at } = await lastRecordOnDisk(true);
    const segment = segmentFiles(dir)[0] as string;
    const torn = readFileSync(segment);
    for (let i = at + 20; i < 4096; i++) torn[i] = 1 + (i % 200);
    writeFileSync(segment, torn);
    const wal = await Wal.open(dir, { segmentBytes: 4096 });
    try {
      assert.equal(wal.tornTail?.offset, at);
      assert.equal(wal.lastIndex(1), 1);
    } finally {
      await wal.close();
    }
  });

  it("the last record torn, a sector inside it never written (a power loss that persisted a later one): cut off", async () => {
    // Sectors of one write may persist out of order: the record's last byte written, an earlier
    // sector of it still zeros. A record synced in full has no such sector (damage since would
    // have to zero a whole aligned sector): torn, as etcd's WAL reads it.
    const { dir, at } = await lastRecordOnDisk(true, `${"v".repeat(1500)}z`);
    const segment = segmentFiles(dir)[0] as string;
    const torn = readFileSync(segment);
    const sector = Math.ceil((at + 64) / 512) * 512;
    assert.ok(sector + 512 < nonZeroEnd(torn), "the sector lies inside the record");
    torn.fill(0, sector, sector + 512);
    writeFileSync(segment, torn);
    const wal = await Wal.open(dir, { segmentBytes: 4096 });
    try {
      assert.equal(wal.tornTail?.offset, at);
      assert.equal(wal.lastIndex(1), 1);
    } finally {
      await wal.close();
    }
  });

  for (const preallocate of [true, false]) {
    it(`the last record torn, any prefix of it written: cut off (preallocated: ${preallocate})`, async () => {
      const { dir, at } = await lastRecordOnDisk(preallocate);
      const segment = segmentFiles(dir)[0] as string;
      const whole = readFileSync(segment);
      const end = nonZeroEnd(whole);
      for (let cut = at + 1; cut < end; cut++) {
        // The write's prefix up to `cut`; after it what was there before: zeros, or nothing.
        const torn = Buffer.from(whole);
        if (preallocate) torn.fill(0, cut, end);
        writeFileSync(segment, preallocate ? torn : torn.subarray(0, cut));
        // The segment the last open went on in (after a torn tail, a new one).
        for (const other of segmentFiles(dir).slice(1)) rmSync(other);
        const wal = await Wal.open(dir, { preallocate, segmentBytes: 4096 });
        try {
          assert.equal(wal.tornTail?.offset, at, `cut at ${cut}`);
          assert.equal(wal.lastIndex(1), 1);
        } finally {
          await wal.close();
        }
      }
    });
  }
});

describe("a scan paused across close() (an audit, 2026-12-07)", () => {
  it("ends with CAIRN_ERR_LSM_CLOSED when resumed, and the engine deletes nothing after close()", async () => {
    // Resumed, it read on through the node's file cache (opening again, under the closed
    // engine's paths, files a new engine in the same directory may have taken), and as it
    // ended it deleted the tables a compaction had made obsolete under it: after close(), whose
    // caller may already reuse the directory (a corrupt shard's is refilled in the same start).
    const { dir } = await engineOnDisk();
    const engine = await LsmEngine.open(dir, env, OPTIONS);
    const scan = engine.scan();
    assert.equal(text(scan.next().value?.[0]), keyAt(0));
    await engine.compactFully();
    await engine.close();
    const files = readdirSync(dir).sort();
    assert.equal(
      tables(dir).length,
      3,
      "the compaction's inputs, pinned by the scan, and its output",
    );
    const openFiles = env.files.openFiles;
    assert.throws(() => scan.next(), { code: "CAIRN_ERR_LSM_CLOSED" });
    assert.deepEqual(scan.next(), { done: true, value: undefined }, "the scan has ended");
    assert.deepEqual(readdirSync(dir).sort(), files, "nothing deleted after close()");
    assert.equal(env.files.openFiles, openFiles, "no file opened again");
    const again = await LsmEngine.open(dir, env, OPTIONS);
    try {
      assert.equal(tables(again.dir).length, 1, "the next open removes the obsolete tables");
      assert.equal([...again.scan()].length, KEYS - 1);
    } finally {
      await again.close();
    }
  });
});

describe("a WAL rotation whose new segment cannot be written (an audit, 2026-12-07)", () => {
  const enospc = (): Error =>
    Object.assign(new Error("ENOSPC: no space left on device, write"), { code: "ENOSPC" });

  /**
   * Fails the new segment's first write (its header and checkpoint, at position 0 of a segment
   * other than the first) after `prefix` of its bytes were written (a short write first), or
   * its preallocation (`prefix` "preallocation"). Counts the files opened and closed.
   */
  function failingRotation(prefix: number | "preallocation") {
    const counts = { opened: 0, closed: 0, failed: 0 };
    const first = "00000000000000000001.wal";
    const fs: FileSystem = {
      ...nodeFileSystem,
      async open(path, flags) {
        const file = await nodeFileSystem.open(path, flags);
        counts.opened++;
        const rotated = flags.exclusive === true && !path.endsWith(first);
        let failures = rotated ? 1 : 0;
        const fail = (): boolean => failures-- > 0 && ++counts.failed > 0;
        return {
          async write(buf, offset, length, position) {
            if (prefix !== "preallocation" && position === 0 && rotated) {
              if (prefix > 0 && failures > 0 && length > prefix) {
                return file.write(buf, offset, prefix, position);
              }
              if (fail()) throw enospc();
            }
            if (prefix !== "preallocation" && position > 0 && rotated && fail()) throw enospc();
            return file.write(buf, offset, length, position);
          },
          async truncate(length) {
            if (prefix === "preallocation" && rotated && length > 0 && fail()) throw enospc();
            return file.truncate(length);
          },
          sync: () => file.sync(),
          datasync: () => file.datasync(),
          async close() {
            counts.closed++;
            return file.close();
          },
        };
      },
    };
    return { fs, counts };
  }

  for (const prefix of [0, 5, 16 + 10, "preallocation"] as const) {
    const what =
      prefix === "preallocation"
        ? "its preallocation fails"
        : prefix === 0
          ? "nothing of it is written"
          : `${prefix} bytes of it are written`;
    it(`leaves a file a restart reads right: ${what}`, async () => {
      const dir = tempDir("damaged-wal");
      const { fs, counts } = failingRotation(prefix);
      const wal = await Wal.open(dir, { segmentBytes: 1024, fs });
      wal.append([{ kind: "hard-state", shard: 2, state: { term: 7, vote: "n9", commit: 0 } }]);
      await wal.sync();
      let synced = 0;
      for (let i = 1; i < 1000; i++) {
        wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 1, "z".repeat(40))] }]);
        const failed = await wal.sync().then(
          () => false,
          (err: Error & { code?: string }) => {
            assert.equal(err.code, "CAIRN_ERR_WAL_FAILED", err.message);
            return true;
          },
        );
        if (failed) break;
        synced = i;
      }
      assert.equal(counts.failed, 1, "the rotation failed");
      assert.equal(segmentFiles(dir).length, 2, "its segment's file is left behind");
      await wal.close().catch(() => undefined);
      assert.equal(counts.closed, counts.opened, "every file the WAL opened is closed");
      const again = await Wal.open(dir, { segmentBytes: 1024 });
      try {
        assert.equal(again.lastIndex(1), synced, "every synced entry, and nothing else");
        assert.deepEqual(again.hardState(2), { term: 7, vote: "n9", commit: 0 });
        // Written on, and compacted: the older segments go, the new ones' checkpoints keep
        // shard 2's vote.
        for (let i = synced + 1; i <= synced + 30; i++) {
          again.append([{ kind: "entries", shard: 1, entries: [entry(i, 1, "z".repeat(40))] }]);
          await again.sync();
        }
        again.compact(1, synced + 30);
        again.append([{ kind: "entries", shard: 1, entries: [entry(synced + 31, 1)] }]);
        await again.sync();
      } finally {
        await again.close();
      }
      const third = await Wal.open(dir, { segmentBytes: 1024 });
      try {
        assert.equal(third.lastIndex(1), synced + 31);
        assert.deepEqual(third.hardState(2), { term: 7, vote: "n9", commit: 0 });
      } finally {
        await third.close();
      }
    });
  }
});
