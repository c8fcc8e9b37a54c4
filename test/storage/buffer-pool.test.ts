import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { seededRng } from "../../src/common/rng.ts";
import { BufferPool } from "../../src/storage/lsm/buffer-pool.ts";
import { KIND_DELETE, KIND_PUT } from "../../src/storage/lsm/format.ts";
import { type BuiltTable, runCompact, runFlush } from "../../src/storage/lsm/jobs.ts";
import { Memtable } from "../../src/storage/lsm/memtable.ts";
import { tempDir } from "./helpers.ts";

const MiB = 1024 * 1024;

/**
 * A pool whose buffers are reused at once and dirty: every buffer given back is overwritten on
 * the spot, as the next job's reads would, so a job that still used a buffer after giving it
 * back would read or write garbage.
 */
class ScribblingPool extends BufferPool {
  given = 0;
  override give(buf: Buffer): void {
    buf.fill(0xee);
    this.given++;
    super.give(buf);
  }
}

describe("BufferPool", () => {
  it("hands out the smallest free buffer that fits, and rounds new ones up to a whole MiB", () => {
    const pool = new BufferPool(64 * MiB);
    const a = pool.take(100);
    assert.equal(a.length, MiB);
    const b = pool.take(3 * MiB + 1);
    assert.equal(b.length, 4 * MiB);
    pool.give(b);
    pool.give(a);
    assert.equal(pool.freeBytes, 5 * MiB);
    assert.equal(pool.take(10), a, "the 1 MiB buffer, not the 4 MiB one");
    assert.equal(pool.take(2 * MiB), b);
    assert.equal(pool.freeBytes, 0);
    assert.notEqual(pool.take(10), a, "nothing free: a new buffer");
  });

  it("keeps at most maxBytes of free buffers, and clear() lets them all go", () => {
    const pool = new BufferPool(3 * MiB);
    const [a, b, c] = [pool.take(MiB), pool.take(MiB), pool.take(2 * MiB)];
    pool.give(a);
    pool.give(b);
    pool.give(c); // 4 MiB would be over the limit: dropped
    assert.equal(pool.freeBytes, 2 * MiB);
    assert.notEqual(pool.take(2 * MiB), c);
    pool.clear();
    assert.equal(pool.freeBytes, 0);
  });
});

/** `count` versions over a key space of `keys`, some deletes, as a memtable holds them. */
function memtable(rng: ReturnType<typeof seededRng>, firstSeq: number, count: number): Memtable {
  const mem = new Memtable();
  for (let i = 0; i < count; i++) {
    const key = `key-${String(rng.int(4000)).padStart(5, "0")}`;
    const del = rng.int(10) === 0;
    const value = Buffer.alloc(del ? 0 : rng.int(301), (firstSeq + i) & 0xff);
    mem.put(key, firstSeq + i, del ? KIND_DELETE : KIND_PUT, value);
  }
  return mem;
}

function files(dir: string): Map<string, Buffer> {
  const out = new Map<string, Buffer>();
  for (const f of readdirSync(dir).sort()) out.set(f, readFileSync(join(dir, f)));
  return out;
}

describe("LSM jobs with a reused, dirty BufferPool", () => {
  it(
    "write the same tables as jobs that allocate every buffer, whatever the buffers held before",
    { timeout: 60_000 },
    () => {
      const pooled = tempDir("pool-on");
      const fresh = tempDir("pool-off");
      const pool = new ScribblingPool(64 * MiB);
      const rng = seededRng(7);
      const mems = Array.from({ length: 4 }, (_, m) => memtable(rng, 1 + m * 3000, 3000));
      const flushed = (dir: string, p?: BufferPool): BuiltTable[] =>
        mems.flatMap((mem, m) =>
          runFlush(
            { type: "flush", dir, numbers: [m + 1], arena: mem.arena(), smallestSnapshot: 0 },
            p,
          ),
        );
      assert.deepEqual(flushed(pooled, pool), flushed(fresh));
      // Small output tables: many built, and given back, in one job, while the inputs are read.
      const compact = (dir: string, numbers: number[], inputs: number[], p?: BufferPool) =>
        runCompact(
          {
            type: "compact",
            dir,
            numbers,
            inputs: inputs.map((n) => join(dir, `${String(n).padStart(6, "0")}.sst`)),
            targetFileBytes: 16 * 1024,
            smallestSnapshot: 0,
            bottom: false,
          },
          p,
        );
      const numbers = Array.from({ length: 400 }, (_, i) => 100 + i);
      const first = compact(pooled, numbers, [1, 2, 3], pool);
      assert.deepEqual(first, compact(fresh, numbers, [1, 2, 3]));
      assert.ok(first.length > 20, `${first.length} output tables`);
      // Again, from the pool's dirty buffers: the first compaction's outputs and table 4.
      const inputs = [...first.map((t) => t.number), 4];
      const more = Array.from({ length: 400 }, (_, i) => 1000 + i);
      assert.deepEqual(compact(pooled, more, inputs, pool), compact(fresh, more, inputs));
      assert.ok(pool.given > 2 * first.length, `${pool.given} buffers given back`);
      assert.deepEqual(files(pooled), files(fresh));
    },
  );
});
