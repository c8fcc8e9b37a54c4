/**
 * DiskReserve (src/node/disk-reserve.ts): the disk space a node keeps free. Puts are refused
 * while a look finds less available than storage.min_free_bytes, and taken again an eighth
 * above it; the WAL's writes bring the next look forward. (The real disk, a tmpfs filled by a
 * real node: test/e2e/data-safety-disk.test.ts.)
 */
import assert from "node:assert/strict";
import { statfs } from "node:fs/promises";
import { tmpdir } from "node:os";
import { describe, it } from "node:test";
import { DiskReserve } from "../../src/node/disk-reserve.ts";
import { usedPercentOf } from "../../src/node/disk-watch.ts";
import { createLogger } from "../../src/ops/index.ts";

const MIB = 1024 * 1024;

/** A reserve of `min` over a disk whose available bytes the test sets; its log lines kept. */
function reserve(min: number, size = 1024 * MIB, writers?: number) {
  const disk = { available: Math.min(100 * MIB, size), looks: 0, error: null as Error | null };
  const lines: Record<string, unknown>[] = [];
  const checks: [number, boolean][] = [];
  const r = new DiskReserve({
    minFreeBytes: min,
    ...(writers === undefined ? {} : { writers }),
    dataDir: "/var/lib/cairn",
    // A file system of 1-byte blocks: what is available is bavail.
    statfs: () => {
      disk.looks++;
      if (disk.error !== null) return Promise.reject(disk.error);
      const free = disk.available;
      return Promise.resolve({ bsize: 1, blocks: size, bfree: free, bavail: free });
    },
    onCheck: (available, low) => checks.push([available, low]),
    log: createLogger({
      level: "debug",
      sink: { write: (l: string) => lines.push(JSON.parse(l) as Record<string, unknown>) },
    }),
  });
  return { r, disk, lines, checks };
}

describe("the disk's reserve", () => {
  it("warns at start of a reserve over half the file system's size", async () => {
    for (const [min, size, warned] of [
      [512 * MIB, 256 * MIB, true],
      [128 * MIB, 256 * MIB, false],
      [129 * MIB, 256 * MIB, true],
      [0, 256 * MIB, false],
    ] as const) {
      const { r, lines } = reserve(min, size);
      await r.start();
      r.stop();
      const warn = lines.find((l) => /is over half the size/.test(String(l["message"])));
      assert.equal(warn !== undefined, warned, `${min} of ${size}`);
      if (warn !== undefined) {
        assert.match(
          String(warn["message"]),
          /^storage\.min_free_bytes \(\d+\.0 MiB\) is over half the size of data_dir's file system \(256\.0 MiB\)/,
        );
      }
    }
  });

  it("refuses Puts under storage.min_free_bytes, and takes them again an eighth above it", async () => {
    const { r, disk, lines, checks } = reserve(64 * MIB);
    assert.equal(r.refusal("put"), null, "before any look");
    disk.available = 64 * MIB; // At the reserve: not under it.
    await r.check();
    assert.equal(r.refusal("put"), null);
    disk.available = 64 * MIB - 1;
    await r.check();
    assert.equal(r.low, true);
    assert.equal(
      r.refusal("put"),
      "the disk of data_dir /var/lib/cairn has 64.0 MiB available, under storage.min_free_bytes (64.0 MiB): Puts are refused until it has 72.0 MiB; reads and Deletes are served (free disk space, delete keys, or add a member)",
    );
    const warn = lines.find((l) => l["level"] === "WARN");
    assert.ok(warn !== undefined);
    assert.match(String(warn["message"]), /under storage\.min_free_bytes: Puts are refused/);
    assert.equal((warn["fields"] as Record<string, unknown>)["available_bytes"], 64 * MIB - 1);
    // Above the reserve but short of an eighth more: still refused, and no new line.
    disk.available = 72 * MIB - 1;
    await r.check();
    assert.equal(r.low, true);
    assert.equal(lines.length, 1);
    disk.available = 72 * MIB;
    await r.check();
    assert.equal(r.refusal("put"), null);
    assert.match(String(lines[1]?.["message"]), /has room again: Puts are taken/);
    assert.deepEqual(
      checks.map(([, low]) => low),
      [false, true, true, false],
    );
  });

  it("serves Deletes under the reserve, and refuses them too under a quarter of it", async () => {
    const { r, disk, lines } = reserve(64 * MIB);
    disk.available = 16 * MIB; // A quarter: Puts refused, Deletes served.
    await r.check();
    assert.notEqual(r.refusal("put"), null);
    assert.equal(r.refusal("delete"), null);
    disk.available = 16 * MIB - 1;
    await r.check();
    assert.equal(
      r.refusal("delete"),
      "the disk of data_dir /var/lib/cairn has 16.0 MiB available, under a quarter of storage.min_free_bytes (64.0 MiB): Deletes are refused too (their tombstones take room until compactions drop them), until it has 16.0 MiB; reads are served (free disk space, or add a member)",
    );
    assert.ok(lines.some((l) => String(l["message"]).includes("Deletes are refused too")));
    // Deletes again at a quarter, Puts still not (an eighth above the reserve).
    disk.available = 20 * MIB;
    await r.check();
    assert.equal(r.refusal("delete"), null);
    assert.notEqual(r.refusal("put"), null);
  });

  it("0 refuses nothing, and still reports what is available", async () => {
    const { r, disk, checks } = reserve(0);
    disk.available = 0;
    await r.check();
    assert.equal(r.refusal("put"), null);
    assert.equal(r.available, 0);
    assert.deepEqual(checks, [[0, false]]);
    r.wrote(1024 * MIB);
    assert.equal(disk.looks, 1, "no look brought forward by the WAL's writes");
  });

  it("looks again once the WAL wrote an eighth of the reserve, one look at a time", async () => {
    const { r, disk } = reserve(64 * MIB);
    await r.check();
    assert.equal(disk.looks, 1);
    r.wrote(8 * MIB - 1);
    assert.equal(disk.looks, 1);
    disk.available = MIB;
    r.wrote(1);
    assert.equal(disk.looks, 2, "a look as the eighth went by");
    // Writes during that look share it.
    r.wrote(8 * MIB);
    await r.check();
    assert.equal(disk.looks, 2);
    assert.equal(r.low, true);
  });

  it("with shard workers, each looks once it wrote its share of the eighth: their WALs together write no more between looks", async () => {
    const workers = 8;
    // One reserve a worker, over one disk (each with its own WAL in data_dir).
    const reserves = Array.from({ length: workers }, () => reserve(64 * MIB, 1024 * MIB, workers));
    for (const { r } of reserves) await r.check();
    // Each worker's WAL writes its share of an eighth of the reserve: the node, an eighth.
    for (const { r } of reserves) r.wrote((8 * MIB) / workers);
    assert.deepEqual(
      reserves.map(({ disk }) => disk.looks),
      Array.from({ length: workers }, () => 2),
      "each looked again: eight eighths (the whole reserve) must not go by unseen",
    );
  });

  it("keeps its verdict when a look fails, and says so once", async () => {
    const { r, disk, lines } = reserve(64 * MIB);
    disk.available = MIB;
    await r.check();
    assert.equal(r.low, true);
    disk.error = new Error("EIO: i/o error, statfs");
    await r.check();
    await r.check();
    assert.equal(r.low, true);
    const unknown = lines.filter((l) => String(l["message"]).includes("disk space unknown"));
    assert.equal(unknown.length, 1);
    assert.equal(
      (unknown[0]?.["fields"] as Record<string, unknown>)["error"],
      "EIO: i/o error, statfs",
    );
    disk.error = null;
    disk.available = 100 * MIB;
    await r.check();
    assert.equal(r.low, false);
  });

  it("looks every second from start() until stop(), on the real file system", async () => {
    const st = await statfs(tmpdir());
    const looked: number[] = [];
    let seen: (() => void) | null = null;
    const r = new DiskReserve({
      minFreeBytes: 1,
      dataDir: tmpdir(),
      statfs: () => statfs(tmpdir()),
      onCheck: (available) => {
        looked.push(available);
        seen?.();
      },
      log: createLogger({ sink: { write: () => undefined } }),
    });
    await r.start();
    try {
      assert.equal(looked.length, 1, "the first look is done when start() resolves");
      assert.ok(r.available !== null && r.available > 0 && r.available <= st.blocks * st.bsize);
      // The used share DiskWatch reports comes from the same look.
      assert.ok(Math.abs(r.usedPercent() - usedPercentOf(st)) <= 1);
      await new Promise<void>((resolve) => (seen = resolve));
      assert.equal(looked.length, 2);
    } finally {
      r.stop();
    }
  });
});
