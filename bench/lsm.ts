/**
 * `npm run bench:lsm [-- --keys N] [--cache-mib M] [--json]`
 *
 * Cairn's LSM engine and LevelDB (classic-level) side by side, in one process run, on the same
 * disk, with the same block cache size (64 MiB unless --cache-mib) and no compression on either
 * side; `sync` runs before each engine so neither pays for the other's dirty pages. Each case is
 * measured the same way on both sides:
 *  1. random batched writes: N keys (default 1M) of 16 bytes with 100-byte values, batches of 1000,
 *     timed until every batch is accepted *and* the memtables are flushed to tables (Cairn:
 *     `flush()`; LevelDB: `compactRange` over an empty key range, which flushes its memtable and
 *     compacts nothing); both may still compact in the background;
 *  2. random point reads of existing keys after a full compaction on both sides (Cairn:
 *     `compactFully()`, LevelDB: `compactRange` over every key: all data in one level),
 *     synchronous API on both sides (`get` / `getSync`). Cairn verifies every block's checksum on
 *     a read; LevelDB, through classic-level, cannot (its `verify_checksums` read option is not
 *     exposed and defaults to false);
 *  3. range scans of 10k keys from random start keys: Cairn's synchronous `scan`, LevelDB's
 *     iterator with a read-ahead buffer large enough that one `nextv(10000)` returns the whole
 *     scan (one asynchronous step per scan, not per key or per 16 KiB).
 * Prints one line per case with both rates and the ratio cairn/leveldb. Goal: ratio ≥ 1.0 each.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ClassicLevel } from "classic-level";
import { LsmEngine, LsmEnvironment, type WriteOp } from "../src/storage/lsm/index.ts";

const { values } = parseArgs({
  options: {
    keys: { type: "string", default: "1000000" },
    reads: { type: "string", default: "200000" },
    scans: { type: "string", default: "100" },
    "cache-mib": { type: "string", default: "64" },
    json: { type: "boolean", default: false },
    dir: { type: "string" },
  },
});
const KEYS = Number(values.keys);
const READS = Number(values.reads);
const SCANS = Number(values.scans);
const SCAN_LENGTH = 10_000;
const BATCH = 1000;
const CACHE_BYTES = Number(values["cache-mib"]) * 1024 * 1024;
const base = mkdtempSync(join(values.dir ?? tmpdir(), "cairn-bench-lsm-"));

/** xorshift32: the same pseudo-random keys and orders for both engines. */
function rng(seed: number): () => number {
  let s = seed >>> 0 || 1;
  return () => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return s >>> 0;
  };
}

function makeKeys(): Buffer[] {
  const next = rng(42);
  const keys: Buffer[] = [];
  for (let i = 0; i < KEYS; i++) {
    const k = Buffer.allocUnsafe(16);
    for (let j = 0; j < 16; j += 4) k.writeUInt32LE(next(), j);
    keys.push(k);
  }
  return keys;
}

const keys = makeKeys();
const value = (i: number): Buffer => {
  const v = Buffer.allocUnsafe(100);
  for (let j = 0; j < 100; j += 4) v.writeUInt32LE((i * 2654435761 + j) >>> 0, j);
  return v;
};
const readOrder = (() => {
  const next = rng(7);
  return Array.from({ length: READS }, () => next() % KEYS);
})();
const scanStarts = (() => {
  const next = rng(9);
  return Array.from({ length: SCANS }, () => keys[next() % KEYS] as Buffer);
})();

interface CaseResult {
  cairn: number;
  leveldb: number;
}

/** Tables per level (L0/L1/…/L6) on each side when the reads start. */
const shapes = { cairn: "", leveldb: "" };

const seconds = (t0: number): number => (performance.now() - t0) / 1000;

async function runCairn(): Promise<[number, number, number]> {
  const env = new LsmEnvironment({ blockCacheBytes: CACHE_BYTES });
  const engine = await LsmEngine.open(join(base, "cairn"), env);
  let t0 = performance.now();
  for (let i = 0; i < KEYS; i += BATCH) {
    const ops: WriteOp[] = [];
    for (let j = i; j < Math.min(KEYS, i + BATCH); j++) {
      ops.push({ type: "put", key: keys[j] as Buffer, value: value(j) });
    }
    await engine.write(i / BATCH + 1, ops);
  }
  await engine.flush();
  const writes = KEYS / seconds(t0);
  await engine.compactFully();
  shapes.cairn = engine.stats().filesPerLevel.join("/");

  t0 = performance.now();
  let found = 0;
  for (const i of readOrder) if (engine.get(keys[i] as Buffer) !== undefined) found++;
  const reads = READS / seconds(t0);
  if (found !== READS) throw new Error(`cairn: found ${found} of ${READS}`);

  t0 = performance.now();
  let scanned = 0;
  for (const start of scanStarts) {
    for (const entry of engine.scan({ start, limit: SCAN_LENGTH }))
      scanned += entry.length > 0 ? 1 : 0;
  }
  const scans = scanned / seconds(t0);
  await engine.close();
  await env.close();
  return [writes, reads, scans];
}

async function runLevel(): Promise<[number, number, number]> {
  const db = new ClassicLevel<Buffer, Buffer>(join(base, "leveldb"), {
    keyEncoding: "buffer",
    valueEncoding: "buffer",
    cacheSize: CACHE_BYTES,
    compression: false,
  });
  await db.open();
  let t0 = performance.now();
  for (let i = 0; i < KEYS; i += BATCH) {
    const ops: Array<{ type: "put"; key: Buffer; value: Buffer }> = [];
    for (let j = i; j < Math.min(KEYS, i + BATCH); j++) {
      ops.push({ type: "put", key: keys[j] as Buffer, value: value(j) });
    }
    await db.batch(ops);
  }
  // Above every 16-byte key: flushes the memtable, overlaps no table.
  await db.compactRange(Buffer.alloc(17, 0xff), Buffer.alloc(18, 0xff));
  const writes = KEYS / seconds(t0);
  await db.compactRange(Buffer.alloc(0), Buffer.alloc(17, 0xff));
  shapes.leveldb = Array.from({ length: 7 }, (_, level) =>
    db.getProperty(`leveldb.num-files-at-level${level}`),
  ).join("/");

  t0 = performance.now();
  let found = 0;
  for (const i of readOrder) if (db.getSync(keys[i] as Buffer) !== undefined) found++;
  const reads = READS / seconds(t0);
  if (found !== READS) throw new Error(`leveldb: found ${found} of ${READS}`);

  t0 = performance.now();
  let scanned = 0;
  for (const start of scanStarts) {
    // A read-ahead buffer large enough that one nextv() returns the whole scan.
    const iterator = db.iterator({ gte: start, limit: SCAN_LENGTH, highWaterMarkBytes: 4 << 20 });
    for (;;) {
      const entries = await iterator.nextv(SCAN_LENGTH);
      if (entries.length === 0) break;
      scanned += entries.length;
    }
    await iterator.close();
  }
  const scans = scanned / seconds(t0);
  await db.close();
  return [writes, reads, scans];
}

let results: Record<string, CaseResult>;
try {
  // Each engine starts on a quiet disk: `sync` writes back what the previous one left dirty.
  execFileSync("sync");
  const cairn = await runCairn();
  execFileSync("sync");
  const level = await runLevel();
  results = {
    "random batched writes (keys/s)": { cairn: cairn[0], leveldb: level[0] },
    "random point reads (reads/s)": { cairn: cairn[1], leveldb: level[1] },
    "range scans of 10k keys (keys/s)": { cairn: cairn[2], leveldb: level[2] },
  };
} finally {
  rmSync(base, { recursive: true, force: true });
}

if (values.json) {
  console.log(
    JSON.stringify({
      keys: KEYS,
      reads: READS,
      scans: SCANS,
      cpu: cpus()[0]?.model ?? "unknown",
      tablesPerLevel: shapes,
      cases: Object.entries(results).map(([name, r]) => ({
        name,
        cairn: Math.round(r.cairn),
        leveldb: Math.round(r.leveldb),
        ratio: Number((r.cairn / r.leveldb).toFixed(3)),
      })),
    }),
  );
} else {
  console.log(`tables per level at the reads: cairn ${shapes.cairn}, leveldb ${shapes.leveldb}`);
  for (const [name, r] of Object.entries(results)) {
    const ratio = r.cairn / r.leveldb;
    console.log(
      `${name.padEnd(34)} cairn ${Math.round(r.cairn).toString().padStart(9)}  leveldb ${Math.round(r.leveldb).toString().padStart(9)}  ratio ${ratio.toFixed(2)} ${ratio >= 1 ? "(goal met)" : "(goal NOT met)"}`,
    );
  }
}
