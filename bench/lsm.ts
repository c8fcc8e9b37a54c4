/**
 * `npm run bench:lsm [-- --keys N] [--cache-mib M] [--write-rounds W] [--rounds R] [--json]`
 *
 * Cairn's LSM engine and LevelDB (classic-level) side by side, in one process run, on the same
 * disk, with the same block cache size (64 MiB unless --cache-mib) and no compression on either
 * side. Each case is measured the same way on both sides:
 *  1. random batched writes: N keys (default 1M) of 16 bytes with 100-byte values, batches of 1000,
 *     timed until every batch is accepted *and* the memtables are flushed to tables (Cairn:
 *     `flush()`; LevelDB: `compactRange` over an empty key range, which flushes its memtable and
 *     compacts nothing). W rounds (default 3), each into a new engine, alternating which side
 *     goes first; each side waits until its own compactions are done before the other starts,
 *     and `sync` runs before each: neither pays for the other's dirty pages or background work;
 *  2. random point reads of existing keys after a full compaction on both sides (Cairn:
 *     `compactFully()`, LevelDB: `compactRange` over every key: all data in one level),
 *     synchronous API on both sides (`get` / `getSync`). Cairn verifies every block's checksum
 *     when it enters its block cache; LevelDB, through classic-level, cannot (its
 *     `verify_checksums` read option is not exposed and defaults to false);
 *  3. range scans of 10k keys from random start keys: Cairn's synchronous `scan`, LevelDB's
 *     iterator with a read-ahead buffer large enough that one `nextv(10000)` returns the whole
 *     scan (one asynchronous step per scan, not per key or per 16 KiB).
 * Reads and scans run on the last write round's engines, in R alternating rounds (default 5) with
 * both open, so the machine's drift falls on both alike. Each case reports the median round of
 * each side, with the range.
 * Prints one line per case with both rates and the ratio cairn/leveldb. Goal: ratio ≥ 1.0 each.
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, rmSync } from "node:fs";
import { cpus, tmpdir } from "node:os";
import { join } from "node:path";
import { parseArgs } from "node:util";
import { ClassicLevel } from "classic-level";
import { LsmEngine, LsmEnvironment } from "../src/storage/lsm/index.ts";

const { values } = parseArgs({
  options: {
    keys: { type: "string", default: "1000000" },
    reads: { type: "string", default: "200000" },
    scans: { type: "string", default: "100" },
    rounds: { type: "string", default: "5" },
    "write-rounds": { type: "string", default: "3" },
    "cache-mib": { type: "string", default: "64" },
    json: { type: "boolean", default: false },
    dir: { type: "string" },
  },
});
const KEYS = Number(values.keys);
const READS = Number(values.reads);
const SCANS = Number(values.scans);
const ROUNDS = Number(values.rounds);
const WRITE_ROUNDS = Math.max(1, Number(values["write-rounds"]));
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

/** The write batch starting at key `i`, the same for both engines (built inside both clocks). */
function batchAt(i: number): Array<{ type: "put"; key: Buffer; value: Buffer }> {
  const ops: Array<{ type: "put"; key: Buffer; value: Buffer }> = [];
  for (let j = i; j < Math.min(KEYS, i + BATCH); j++) {
    ops.push({ type: "put", key: keys[j] as Buffer, value: value(j) });
  }
  return ops;
}

interface CaseResult {
  cairn: number[];
  leveldb: number[];
}

/** Tables per level (L0/L1/…/L6) on each side when the reads start. */
const shapes = { cairn: "", leveldb: "" };

const seconds = (t0: number): number => (performance.now() - t0) / 1000;

/** One side of the comparison, open, filled and fully compacted, ready for read rounds. */
interface Side {
  readonly writes: number;
  reads(): number;
  scans(): Promise<number>;
  close(): Promise<void>;
}

/**
 * Fills a new Cairn engine in `dir` and times it. Unless `keep`, waits until it is idle, closes
 * it and deletes it (a write round); else compacts it fully for the reads.
 */
async function openCairn(dir: string, keep: boolean): Promise<Side | number> {
  const env = new LsmEnvironment({ blockCacheBytes: CACHE_BYTES });
  const engine = await LsmEngine.open(dir, env);
  const t0 = performance.now();
  for (let i = 0; i < KEYS; i += BATCH) await engine.write(i / BATCH + 1, batchAt(i));
  await engine.flush();
  const writes = KEYS / seconds(t0);
  if (!keep) {
    await engine.compactUntilIdle();
    await engine.close();
    await env.close();
    rmSync(dir, { recursive: true, force: true });
    return writes;
  }
  await engine.compactFully();
  // Nothing may run in the background while the other side writes or either side reads.
  await engine.compactUntilIdle();
  shapes.cairn = engine.stats().filesPerLevel.join("/");
  return {
    writes,
    reads() {
      const t = performance.now();
      let found = 0;
      for (const i of readOrder) if (engine.get(keys[i] as Buffer) !== undefined) found++;
      const rate = READS / seconds(t);
      if (found !== READS) throw new Error(`cairn: found ${found} of ${READS}`);
      return rate;
    },
    scans() {
      const t = performance.now();
      let scanned = 0;
      for (const start of scanStarts) {
        for (const entry of engine.scan({ start, limit: SCAN_LENGTH }))
          scanned += entry.length > 0 ? 1 : 0;
      }
      return Promise.resolve(scanned / seconds(t));
    },
    async close() {
      await engine.close();
      await env.close();
    },
  };
}

/** As openCairn, for LevelDB (whose close waits for its background compaction). */
async function openLevel(dir: string, keep: boolean): Promise<Side | number> {
  const db = new ClassicLevel<Buffer, Buffer>(dir, {
    keyEncoding: "buffer",
    valueEncoding: "buffer",
    cacheSize: CACHE_BYTES,
    compression: false,
  });
  await db.open();
  const t0 = performance.now();
  for (let i = 0; i < KEYS; i += BATCH) await db.batch(batchAt(i));
  // Above every 16-byte key: flushes the memtable, overlaps no table.
  await db.compactRange(Buffer.alloc(17, 0xff), Buffer.alloc(18, 0xff));
  const writes = KEYS / seconds(t0);
  if (!keep) {
    await db.close();
    rmSync(dir, { recursive: true, force: true });
    return writes;
  }
  await db.compactRange(Buffer.alloc(0), Buffer.alloc(17, 0xff));
  shapes.leveldb = Array.from({ length: 7 }, (_, level) =>
    db.getProperty(`leveldb.num-files-at-level${level}`),
  ).join("/");
  return {
    writes,
    reads() {
      const t = performance.now();
      let found = 0;
      for (const i of readOrder) if (db.getSync(keys[i] as Buffer) !== undefined) found++;
      const rate = READS / seconds(t);
      if (found !== READS) throw new Error(`leveldb: found ${found} of ${READS}`);
      return rate;
    },
    async scans() {
      const t = performance.now();
      let scanned = 0;
      for (const start of scanStarts) {
        // A read-ahead buffer large enough that one nextv() returns the whole scan.
        const iterator = db.iterator({
          gte: start,
          limit: SCAN_LENGTH,
          highWaterMarkBytes: 4 << 20,
        });
        for (;;) {
          const entries = await iterator.nextv(SCAN_LENGTH);
          if (entries.length === 0) break;
          scanned += entries.length;
        }
        await iterator.close();
      }
      return scanned / seconds(t);
    },
    close: () => db.close(),
  };
}

const median = (xs: readonly number[]): number => {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)] as number;
};

let results: Record<string, CaseResult>;
try {
  // Write rounds alternate which side goes first; each side writes on a quiet disk (`sync` writes
  // back what the other left dirty) with nothing of the other running (each waits until its
  // compactions are done before the other starts). The last round's engines stay for the reads.
  const writes: CaseResult = { cairn: [], leveldb: [] };
  let cairn: Side | undefined;
  let level: Side | undefined;
  for (let round = 0; round < WRITE_ROUNDS; round++) {
    const keep = round === WRITE_ROUNDS - 1;
    for (const side of round % 2 === 0 ? ["cairn", "leveldb"] : ["leveldb", "cairn"]) {
      execFileSync("sync");
      const dir = join(base, `${side}-${round}`);
      const opened = side === "cairn" ? await openCairn(dir, keep) : await openLevel(dir, keep);
      const rate = typeof opened === "number" ? opened : opened.writes;
      if (side === "cairn") writes.cairn.push(rate);
      else writes.leveldb.push(rate);
      if (typeof opened !== "number") {
        if (side === "cairn") cairn = opened;
        else level = opened;
      }
    }
  }
  if (cairn === undefined || level === undefined) throw new Error("no write round kept");
  try {
    results = {
      "random batched writes (keys/s)": writes,
      "random point reads (reads/s)": { cairn: [], leveldb: [] },
      "range scans of 10k keys (keys/s)": { cairn: [], leveldb: [] },
    };
    // Reads and scans in alternating rounds, both data sets in memory: the machine's drift
    // (other tenants, frequency) falls on both sides alike. Medians are reported.
    const reads = results["random point reads (reads/s)"] as CaseResult;
    const scans = results["range scans of 10k keys (keys/s)"] as CaseResult;
    for (let round = 0; round < ROUNDS; round++) {
      const first = round % 2 === 0;
      if (first) reads.cairn.push(cairn.reads());
      reads.leveldb.push(level.reads());
      if (!first) reads.cairn.push(cairn.reads());
    }
    for (let round = 0; round < ROUNDS; round++) {
      const first = round % 2 === 0;
      if (first) scans.cairn.push(await cairn.scans());
      scans.leveldb.push(await level.scans());
      if (!first) scans.cairn.push(await cairn.scans());
    }
  } finally {
    await cairn.close();
    await level.close();
  }
} finally {
  rmSync(base, { recursive: true, force: true });
}

const range = (xs: readonly number[]): string =>
  xs.length > 1 ? ` (${Math.round(Math.min(...xs))}–${Math.round(Math.max(...xs))})` : "";

if (values.json) {
  console.log(
    JSON.stringify({
      keys: KEYS,
      reads: READS,
      scans: SCANS,
      rounds: ROUNDS,
      writeRounds: WRITE_ROUNDS,
      cpu: cpus()[0]?.model ?? "unknown",
      tablesPerLevel: shapes,
      cases: Object.entries(results).map(([name, r]) => ({
        name,
        cairn: Math.round(median(r.cairn)),
        leveldb: Math.round(median(r.leveldb)),
        ratio: Number((median(r.cairn) / median(r.leveldb)).toFixed(3)),
        rounds: { cairn: r.cairn.map(Math.round), leveldb: r.leveldb.map(Math.round) },
      })),
    }),
  );
} else {
  console.log(`tables per level at the reads: cairn ${shapes.cairn}, leveldb ${shapes.leveldb}`);
  for (const [name, r] of Object.entries(results)) {
    const ratio = median(r.cairn) / median(r.leveldb);
    console.log(
      `${name.padEnd(34)} cairn ${Math.round(median(r.cairn)).toString().padStart(9)}${range(r.cairn)}  leveldb ${Math.round(median(r.leveldb)).toString().padStart(9)}${range(r.leveldb)}  ratio ${ratio.toFixed(2)} ${ratio >= 1 ? "(goal met)" : "(goal NOT met)"}`,
    );
  }
}
