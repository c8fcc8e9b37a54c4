/**
 * The WAL on MemoryFileSystem, the in-memory disk the deterministic simulation runs it on: the
 * basic scenarios of wal.test.ts as a conformance check of the twin, then a power cut at every
 * file-system operation of a workload that rotates, compacts and deletes segments.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { MemoryFileSystem } from "../../src/storage/common/index.ts";
import { Wal, type WalOptions } from "../../src/storage/wal/index.ts";
import { CrashingFileSystem } from "../support/crashing-fs.ts";
import { bytes, entry, texts } from "./helpers.ts";
import { modelSignature, walSignature, walStep } from "./wal-workload.ts";

const DIR = "/data/wal";

async function segments(fs: MemoryFileSystem): Promise<string[]> {
  return (await fs.readdir(DIR)).filter((n) => n.endsWith(".wal")).sort();
}

describe("WAL on MemoryFileSystem", () => {
  it("recovers synced entries, hard states and snapshots after a power cut", async () => {
    const fs = new MemoryFileSystem();
    const wal = await Wal.open(DIR, { fs });
    wal.append([
      { kind: "entries", shard: 1, entries: [entry(1, 1), entry(2, 1)] },
      { kind: "hard-state", shard: 1, state: { term: 1, vote: "n1", commit: 2 } },
      { kind: "snapshot", shard: 9, meta: { index: 40, term: 3, data: bytes("conf") } },
      { kind: "entries", shard: 9, entries: [entry(41, 3)] },
    ]);
    await wal.sync();
    wal.append([{ kind: "entries", shard: 1, entries: [entry(3, 1)] }]); // never synced
    fs.crash();

    const again = await Wal.open(DIR, { fs });
    assert.equal(again.tornTail, undefined);
    assert.deepEqual(again.shards(), [1, 9]);
    assert.deepEqual(texts(again, 1), ["1@1:e1", "2@1:e2"]);
    assert.deepEqual(again.hardState(1), { term: 1, vote: "n1", commit: 2 });
    assert.equal(again.firstIndex(9), 41);
    assert.deepEqual(again.snapshot(9)?.data, bytes("conf"));
    await again.close();
  });

  it("cuts a write torn by a power cut and continues after it", async () => {
    const fs = new MemoryFileSystem();
    const wal = await Wal.open(DIR, { fs });
    wal.append([{ kind: "entries", shard: 3, entries: [entry(1, 1), entry(2, 1)] }]);
    await wal.sync();
    wal.append([{ kind: "entries", shard: 3, entries: [entry(3, 1, "x".repeat(100))] }]);
    const inFlight = wal.sync();
    fs.crash({ tornWriteBytes: 40 });
    await assert.rejects(inFlight, { code: "CAIRN_ERR_WAL_FAILED" });

    const again = await Wal.open(DIR, { fs });
    assert.deepEqual(again.tornTail, {
      file: `${DIR}/00000000000000000001.wal`,
      offset: 16 + 2 * 34,
      droppedBytes: 40,
    });
    assert.deepEqual(texts(again, 3), ["1@1:e1", "2@1:e2"]);
    again.append([{ kind: "entries", shard: 3, entries: [entry(3, 2)] }]);
    await again.sync();
    fs.crash();
    const third = await Wal.open(DIR, { fs });
    assert.equal(third.tornTail, undefined);
    assert.deepEqual(texts(third, 3), ["1@1:e1", "2@1:e2", "3@2:e3"]);
    await third.close();
  });

  it("rotates, deletes compacted segments durably and keeps every shard's state", async () => {
    const fs = new MemoryFileSystem();
    const wal = await Wal.open(DIR, { fs, segmentBytes: 1024 });
    wal.append([{ kind: "hard-state", shard: 5, state: { term: 4, vote: "n2", commit: 0 } }]);
    for (let i = 1; i <= 60; i++) {
      wal.append([
        { kind: "entries", shard: 1, entries: [entry(i, 1, "z".repeat(40))] },
        { kind: "entries", shard: 2, entries: [entry(i, 1, "w".repeat(40))] },
      ]);
      await wal.sync();
    }
    const before = (await segments(fs)).length;
    assert.ok(before >= 5, `expected several segments, got ${before}`);
    wal.compact(1, 50);
    wal.compact(2, 55);
    await wal.sync();
    const after = await segments(fs);
    assert.ok(after.length < before - 2);
    fs.crash();
    // The deletions were made durable (a directory fsync) before sync() resolved.
    assert.deepEqual(await segments(fs), after);

    const again = await Wal.open(DIR, { fs });
    assert.deepEqual(again.hardState(5), { term: 4, vote: "n2", commit: 0 });
    assert.equal(again.firstIndex(1), 51);
    assert.equal(again.firstIndex(2), 56);
    assert.equal(again.lastIndex(1), 60);
    await again.close();
  });

  it("retries a failed segment deletion at the next flush instead of failing", async () => {
    const fs = new MemoryFileSystem();
    const wal = await Wal.open(DIR, { fs, segmentBytes: 512 });
    for (let i = 1; i <= 30; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 1, "z".repeat(40))] }]);
      await wal.sync();
    }
    const before = await segments(fs);
    assert.ok(before.length >= 4);
    fs.failNext("unlink", `${DIR}/${before[0] as string}`, "EIO");
    wal.compact(1, 30);
    await wal.sync(); // resolves: a deletion that failed costs disk space, not durability
    assert.equal(wal.stats().segmentDeleteFailures, 1);
    // The newer obsolete segments wait behind it: none outlives a newer one's deletion.
    assert.deepEqual(await segments(fs), before);
    wal.append([{ kind: "entries", shard: 1, entries: [entry(31, 1)] }]);
    await wal.sync();
    assert.deepEqual(await segments(fs), [before.at(-1)]);
    fs.crash({ keepUnsyncedEntry: () => false });
    // Each deletion was durable before sync() resolved.
    assert.deepEqual(await segments(fs), [before.at(-1)]);

    const again = await Wal.open(DIR, { fs, segmentBytes: 512 });
    assert.equal(again.firstIndex(1), 31);
    assert.equal(again.lastIndex(1), 31);
    await again.close();
  });

  it("retries the deletion in the same WAL, and survives a failing directory fsync", async () => {
    const fs = new MemoryFileSystem();
    const wal = await Wal.open(DIR, { fs, segmentBytes: 512 });
    for (let i = 1; i <= 30; i++) {
      wal.append([{ kind: "entries", shard: 1, entries: [entry(i, 1, "z".repeat(40))] }]);
      await wal.sync();
    }
    const before = await segments(fs);
    fs.failNext("unlink", `${DIR}/${before[1] as string}`, "EIO");
    fs.failNext("fsyncDir", DIR, "EIO");
    wal.compact(1, 30);
    await wal.sync();
    // The oldest unlink's directory fsync failed: nothing newer was touched.
    assert.equal(wal.stats().segmentDeleteFailures, 1);
    assert.deepEqual(await segments(fs), before.slice(1));
    wal.append([{ kind: "entries", shard: 1, entries: [entry(31, 1)] }]);
    await wal.sync(); // the oldest's fsync is retried; the next unlink fails and holds the rest
    assert.equal(wal.stats().segmentDeleteFailures, 2);
    assert.deepEqual(await segments(fs), before.slice(1));
    wal.append([{ kind: "entries", shard: 1, entries: [entry(32, 1)] }]);
    await wal.sync();
    assert.deepEqual(await segments(fs), [before.at(-1)]);
    assert.equal(wal.stats().segmentDeleteFailures, 2);
    fs.crash();
    assert.deepEqual(await segments(fs), [before.at(-1)]);
    await Wal.open(DIR, { fs });
  });
});

// --- a power cut at every operation ---

const STEPS = 60;
const OPTIONS: WalOptions = { segmentBytes: 2048 };

interface CrashRun {
  acked: number;
  operations: number;
}

/** Runs the workload on `fs` until a sync fails (the power cut) or the end. */
async function runWorkload(fs: CrashingFileSystem, options: WalOptions): Promise<CrashRun> {
  let acked = 0;
  try {
    const wal = await Wal.open(DIR, { ...options, fs });
    for (let step = 1; step <= STEPS; step++) {
      walStep(wal, step);
      await wal.sync();
      acked = step;
    }
    await wal.close();
  } catch (err) {
    if (!fs.crashed) throw err;
  }
  return { acked, operations: fs.operations };
}

interface Mode {
  /** Crash once the operation has taken effect in memory, before it settles. */
  readonly during: boolean;
  /** Half of the write in flight survives. */
  readonly torn: boolean;
  /** What survives besides the durable state: unsynced directory entries, or everything. */
  readonly keep: "durable" | "entries" | "all";
}

/**
 * Cuts the power at operation `at` and reopens. Returns why the recovered WAL is wrong, or
 * undefined when it holds every acknowledged step and at most the one in flight (with torn
 * writes: any prefix of that step's records).
 */
async function crashAndCheck(
  at: number,
  mode: Mode,
  options: WalOptions,
): Promise<string | undefined> {
  const mem = new MemoryFileSystem();
  const fs = new CrashingFileSystem(mem, at, {
    during: mode.during,
    crash: {
      ...(mode.torn ? { tornWriteBytes: (_path: string, length: number) => length >> 1 } : {}),
      ...(mode.keep === "entries" ? { keepUnsyncedEntry: () => true } : {}),
      ...(mode.keep === "all" ? { processOnly: true } : {}),
    },
  });
  const { acked } = await runWorkload(fs, options);
  let wal: Wal;
  try {
    wal = await Wal.open(DIR, { ...options, fs: mem });
  } catch (err) {
    return `reopening failed: ${String(err)}`;
  }
  const got = walSignature(wal);
  for (let shard = 0; shard < 8; shard++) {
    const commit = wal.hardState(shard)?.commit ?? 0;
    if (commit > wal.lastIndex(shard)) {
      return `shard ${shard}: commit ${commit} beyond the last entry ${wal.lastIndex(shard)}`;
    }
  }
  await wal.close();
  const allowed = [modelSignature(acked), modelSignature(acked + 1)];
  // (A step writes up to 7 records: 3 entries, a hard state, a compaction, a drop and its
  // dropped log.)
  if (mode.torn) for (let k = 1; k <= 6; k++) allowed.push(modelSignature(acked, k));
  return allowed.includes(got) ? undefined : `recovered state is not step ${acked} or ${acked + 1}`;
}

describe("WAL on MemoryFileSystem: a power cut at every operation", () => {
  const modes: Array<[string, Mode]> = [
    ["before each operation", { during: false, torn: false, keep: "durable" }],
    ["during each operation", { during: true, torn: false, keep: "durable" }],
    ["during each operation, the write torn", { during: true, torn: true, keep: "durable" }],
    ["before each operation, unsynced names kept", { during: false, torn: false, keep: "entries" }],
    ["before each operation, a process crash", { during: false, torn: false, keep: "all" }],
  ];
  for (const [name, mode] of modes) {
    it(name, async () => {
      const { operations, acked } = await runWorkload(
        new CrashingFileSystem(new MemoryFileSystem(), Infinity),
        OPTIONS,
      );
      assert.equal(acked, STEPS);
      assert.ok(operations > 80, `only ${operations} operations`);
      for (let at = 1; at <= operations; at++) {
        const problem = await crashAndCheck(at, mode, OPTIONS);
        assert.equal(problem, undefined, `power cut ${name} ${at}: ${problem}`);
      }
    });
  }

  it("finds the planted rotation-checkpoint bug", async () => {
    const buggy: WalOptions = {
      ...OPTIONS,
      testingBugs: { rotationCheckpointIncludesBatch: true },
    };
    const { operations } = await runWorkload(
      new CrashingFileSystem(new MemoryFileSystem(), Infinity),
      buggy,
    );
    const found: string[] = [];
    for (let at = 1; at <= operations; at++) {
      const mode: Mode = { during: false, torn: false, keep: "all" };
      const problem = await crashAndCheck(at, mode, buggy);
      if (problem !== undefined) found.push(`${at}: ${problem}`);
    }
    assert.ok(found.length > 0, "no crash point exposes the bug");
    assert.match(found.join("\n"), /commit \d+ beyond the last entry/);
  });
});
