/**
 * The WAL writes small batches with a blocking write on a fast disk and everything else
 * asynchronously (Wal#writesNow): which path a batch takes, that both leave the same durable
 * log, and that a slow blocking write sends the next batches back to the thread pool.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  nodeFileSystem,
  threadRunDelayClock,
  type FileSystem,
  type FsFile,
} from "../../src/storage/common/index.ts";
import { parseSecondField } from "../../src/storage/common/run-delay.ts";
import { Wal, type WalEntry } from "../../src/storage/wal/index.ts";
import { bytes, tempDir } from "./helpers.ts";

function entry(index: number, text: string): WalEntry {
  return { index, term: 1, type: 0, data: bytes(text) };
}

/**
 * The real file system, with the blocking writes slowed down: write `i` (from 0) busy-waits
 * `delayMs(i)` first (a slow disk, or a disk's tail).
 */
function slowBlockingWrites(delayMs: (i: number) => number): FileSystem {
  let writes = 0;
  return {
    ...nodeFileSystem,
    async open(path, flags) {
      const file = await nodeFileSystem.open(path, flags);
      const writeNow = file.writeNow?.bind(file);
      const slow: FsFile = {
        write: (...args) => file.write(...args),
        truncate: (length) => file.truncate(length),
        sync: () => file.sync(),
        datasync: () => file.datasync(),
        close: () => file.close(),
      };
      if (writeNow === undefined) return slow;
      return {
        ...slow,
        writeNow(...args) {
          const until = performance.now() + delayMs(writes++);
          while (performance.now() < until) {
            // The disk is busy.
          }
          return writeNow(...args);
        },
      };
    },
  };
}

async function appendAndSync(wal: Wal, shard: number, index: number, size: number): Promise<void> {
  wal.append([{ kind: "entries", shard, entries: [entry(index, "x".repeat(size))] }]);
  await wal.sync();
}

describe("WAL blocking writes", () => {
  it("writes small batches in place and large ones through the thread pool; both recover", async () => {
    const dir = tempDir("wal");
    // However loaded the machine, no write counts as slow here.
    const wal = await Wal.open(dir, { blockingWriteMaxBytes: 4096, blockingWriteSlowMs: Infinity });
    await appendAndSync(wal, 1, 1, 100);
    await appendAndSync(wal, 1, 2, 100);
    assert.deepEqual([wal.stats().syncs, wal.stats().blockingWrites], [2, 2]);
    await appendAndSync(wal, 1, 3, 10_000);
    assert.deepEqual([wal.stats().syncs, wal.stats().blockingWrites], [3, 2]);
    await appendAndSync(wal, 2, 1, 100);
    assert.deepEqual([wal.stats().syncs, wal.stats().blockingWrites], [4, 3]);
    await wal.close();

    const again = await Wal.open(dir);
    assert.deepEqual(
      again.entries(1, 1, 4).map((e) => e.data.length),
      [100, 100, 10_000],
    );
    assert.deepEqual(
      again.entries(2, 1, 2).map((e) => e.data.length),
      [100],
    );
    await again.close();
  });

  it("calls beforeBlockingWrite right before each blocking write, and only then", async () => {
    // What the hook hands to the sockets must leave before the thread blocks: the hook runs
    // before the write, once per blocking write, never for a write through the thread pool.
    const calls: number[] = [];
    let wal: Wal | null = null;
    wal = await Wal.open(tempDir("wal"), {
      blockingWriteMaxBytes: 4096,
      blockingWriteSlowMs: Infinity,
      beforeBlockingWrite: () => calls.push(wal?.stats().blockingWrites ?? -1),
    });
    await appendAndSync(wal, 1, 1, 100);
    await appendAndSync(wal, 1, 2, 10_000);
    await appendAndSync(wal, 1, 3, 100);
    assert.deepEqual(calls, [0, 1]);
    assert.equal(wal.stats().blockingWrites, 2);
    await wal.close();
  });

  it("never blocks with blockingWriteMaxBytes 0", async () => {
    const wal = await Wal.open(tempDir("wal"), { blockingWriteMaxBytes: 0 });
    for (let i = 1; i <= 3; i++) await appendAndSync(wal, 1, i, 10);
    assert.deepEqual([wal.stats().syncs, wal.stats().blockingWrites], [3, 0]);
    await wal.close();
  });

  it("goes back to the thread pool on a slow disk", async () => {
    const dir = tempDir("wal");
    // Every write takes 30 ms: the eighth in a row marks the disk slow. (No run-queue clock:
    // on a loaded machine the busy-wait that stands in for the disk may itself wait for a core.)
    const wal = await Wal.open(dir, {
      fs: slowBlockingWrites(() => 30),
      blockingWriteSlowMs: 2,
      runDelay: null,
    });
    for (let i = 1; i <= 20; i++) await appendAndSync(wal, 1, i, 10);
    assert.deepEqual([wal.stats().syncs, wal.stats().blockingWrites], [20, 8]);
    await wal.close();
    const again = await Wal.open(dir);
    assert.equal(again.lastIndex(1), 20);
    await again.close();
  });

  it("keeps blocking writes through late writes fewer than eight in a row", async () => {
    // A disk's tail (one write fifteen times the threshold: enough to tip a moving average) and
    // seven late writes in a row (a loaded machine's waits for a core) are not a slow disk.
    const wal = await Wal.open(tempDir("wal"), {
      fs: slowBlockingWrites((i) => (i === 2 ? 300 : i >= 5 && i <= 11 ? 40 : 0)),
      blockingWriteSlowMs: 20,
      runDelay: null,
    });
    for (let i = 1; i <= 20; i++) await appendAndSync(wal, 1, i, 10);
    assert.deepEqual([wal.stats().syncs, wal.stats().blockingWrites], [20, 20]);
    await wal.close();
  });
});

describe("WAL blocking writes on a loaded machine", () => {
  // Each write takes 50 ms of wall time before the real write, of which the thread waited
  // `waitMs` for a core (the clock WalOptions.runDelay reads, advanced while the write runs).
  // The threshold leaves the real write 20 ms: with 2 ms, a write that waited 49 of its 50 ms
  // had 1 ms left for the disk, and a loaded disk (the whole suite's, or dd's) took more.
  async function blockingWritesOf(waitMs: number): Promise<number> {
    let waited = 0;
    const wal = await Wal.open(tempDir("wal"), {
      fs: slowBlockingWrites(() => {
        waited += waitMs;
        return 50;
      }),
      blockingWriteSlowMs: 20,
      runDelay: () => waited,
    });
    for (let i = 1; i <= 20; i++) await appendAndSync(wal, 1, i, 10);
    assert.equal(wal.stats().syncs, 20);
    const blocking = wal.stats().blockingWrites;
    await wal.close();
    return blocking;
  }

  it("keeps blocking writes when what made them late was waiting for a core", async () => {
    // All of each write's 50 ms in the run queue: what is left is the real write's time.
    assert.equal(await blockingWritesOf(50), 20);
  });

  it("still finds a slow disk behind the waits for a core", async () => {
    // 10 of 50 ms waiting for a core, 40 ms in the "disk": the eighth such write marks it slow.
    assert.equal(await blockingWritesOf(10), 8);
  });
});

describe("the thread's run-queue clock", () => {
  it("reads the second field of schedstat", () => {
    const text = new TextEncoder().encode("82781948 133104 8\n");
    assert.equal(parseSecondField(text, text.length), 133104);
    assert.equal(parseSecondField(text, 9), null);
    assert.equal(parseSecondField(new TextEncoder().encode("123"), 3), null);
  });

  it(
    "counts milliseconds that never go back, on Linux",
    { skip: process.platform !== "linux" },
    () => {
      const clock = threadRunDelayClock();
      assert.ok(clock !== null, "Linux gives /proc/thread-self/schedstat");
      let last = clock();
      assert.ok(Number.isFinite(last) && last >= 0);
      for (let i = 0; i < 1000; i++) {
        const now = clock();
        assert.ok(now >= last);
        last = now;
      }
    },
  );
});

describe("WAL write reports", () => {
  it("reports every durable batch, blocking or through the thread pool, with its time and bytes", async () => {
    const dir = tempDir("wal");
    const reports: { ms: number; bytes: number }[] = [];
    // Every blocking write takes at least 20 ms: its report says so.
    const wal = await Wal.open(dir, {
      blockingWriteMaxBytes: 4096,
      blockingWriteSlowMs: Infinity,
      fs: slowBlockingWrites(() => 20),
      onBatchWritten: (ms, bytes) => reports.push({ ms, bytes }),
    });
    const before = wal.stats().bytesWritten;
    const opened = reports.length;
    await appendAndSync(wal, 1, 1, 100);
    await appendAndSync(wal, 1, 2, 100);
    await appendAndSync(wal, 1, 3, 10_000); // past blockingWriteMaxBytes: the thread pool
    const mine = reports.slice(opened);
    assert.equal(mine.length, 3);
    assert.equal(
      mine.reduce((sum, r) => sum + r.bytes, 0),
      wal.stats().bytesWritten - before,
    );
    assert.ok((mine[2]?.bytes ?? 0) > 10_000);
    assert.ok((mine[0]?.ms ?? 0) >= 20 && (mine[1]?.ms ?? 0) >= 20, JSON.stringify(mine));
    assert.ok((mine[2]?.ms ?? -1) >= 0);
    // Nothing appended: no batch, no report.
    await wal.sync();
    assert.equal(reports.length, opened + 3);
    await wal.close();
  });
});
