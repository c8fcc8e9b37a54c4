/**
 * The LSM engine against a model of versioned keys, with everything random that can be: the
 * engine's options (L0 triggers up to 10, memtables of a few hundred bytes, blocks of one or two
 * entries, caches down to nothing, mapped and unmapped tables, sequences from 0 or past 2^32)
 * and scripts of hundreds of steps — writes (awaited, and bursts left to back-pressure), point
 * reads and scans (ranges, prefixes, limits) now and at several pinned snapshots, scans paused
 * between entries while the engine is written, flushed and compacted, `compactFully`, reopen
 * (memtables lost, the log replayed above `flushedSeq`), and an export paused while the engine
 * is written, checked against the model and imported back.
 *
 * `npm test` runs LSM_MODEL_RUNS cases (default 200); `npm run test:lsm-model:long` runs 3,000.
 * A failure prints the seed and path that replay it (shrunk first, unless LSM_MODEL_SHRINK=0):
 *   LSM_MODEL_SEED=<seed> LSM_MODEL_PATH=<path> node --test test/storage/lsm-model.test.ts
 * Engines live on tmpfs (/dev/shm) where there is one: their fsyncs would otherwise take most of
 * the time (durability is the crash tests' subject, not this one's).
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import fc from "fast-check";
import {
  decodeSnapshotStream,
  LsmEngine,
  LsmEnvironment,
  type LsmOptions,
  type LsmSnapshot,
  type ScanOptions,
  type WriteOp,
} from "../../src/storage/lsm/index.ts";

const RUNS = Number(process.env["LSM_MODEL_RUNS"] ?? 200);
const SEED = process.env["LSM_MODEL_SEED"];
const PATH = process.env["LSM_MODEL_PATH"];
const MAX_STEPS = Number(process.env["LSM_MODEL_STEPS"] ?? 250);
/** LSM_MODEL_SHRINK=0: report the first failing case as is (scripts/lsm-mutations.ts). */
const SHRINK = process.env["LSM_MODEL_SHRINK"] !== "0";

/** Keys that share prefixes, are prefixes of one another, and hold 0x00 and 0xff bytes. */
const KEYS = [
  "\x00",
  "\x00\x00",
  "\x00\xff",
  "a",
  "a\x00",
  "aa",
  "ab",
  "abc",
  "abcd",
  "abcd\x00",
  "abcde",
  "abce",
  "b",
  "ba",
  "bb",
  "k".repeat(20),
  `${"k".repeat(20)}a`,
  "\x7f",
  "\x80",
  "\xfe",
  "\xff",
  "\xff\x00",
  "\xff\xff",
  "\xff\xff\xff\xff\xff",
];
const PREFIXES = ["", "a", "ab", "abc", "abcd", "\x00", "\xff", "\xff\xff", "k", "b", "c"];

const bytes = (s: string): Buffer => Buffer.from(s, "latin1");
const str = (b: Uint8Array): string => Buffer.from(b).toString("latin1");

/** Every version of every key, by sequence: what a read at any sequence must return. */
class Model {
  /** Key → versions, oldest first: [seq, value, or null for a delete]. */
  readonly #keys = new Map<string, Array<[number, string | null]>>();

  apply(seq: number, ops: readonly WriteOp[]): void {
    for (const op of ops) {
      const key = str(op.key);
      const versions = this.#keys.get(key) ?? [];
      const value = op.type === "put" ? str(op.value) : null;
      const last = versions[versions.length - 1];
      // Two writes of one key in one batch: the later wins.
      if (last !== undefined && last[0] === seq) last[1] = value;
      else versions.push([seq, value]);
      this.#keys.set(key, versions);
    }
  }

  /** Forgets every version above `seq` (an import of an image at `seq`). */
  truncate(seq: number): void {
    for (const versions of this.#keys.values()) {
      while (versions.length > 0 && (versions[versions.length - 1] as [number, unknown])[0] > seq) {
        versions.pop();
      }
    }
  }

  get(key: string, seq: number): string | undefined {
    const versions = this.#keys.get(key) ?? [];
    for (let i = versions.length - 1; i >= 0; i--) {
      const [s, value] = versions[i] as [number, string | null];
      if (s <= seq) return value ?? undefined;
    }
    return undefined;
  }

  scan(seq: number, range: Range): Array<[string, string]> {
    const out: Array<[string, string]> = [];
    for (const key of [...this.#keys.keys()].sort()) {
      if (range.start !== undefined && key < range.start) continue;
      if (range.end !== undefined && key >= range.end) continue;
      if (range.prefix !== undefined && !key.startsWith(range.prefix)) continue;
      const value = this.get(key, seq);
      if (value !== undefined) out.push([key, value]);
      if (out.length === range.limit) break;
    }
    return out;
  }
}

interface Range {
  readonly start?: string;
  readonly end?: string;
  readonly prefix?: string;
  readonly limit?: number;
}

// --- the script ---

const writeOpArb = fc.record({
  key: fc.nat(KEYS.length - 1),
  del: fc.integer({ min: 0, max: 3 }).map((n) => n === 0),
  len: fc.oneof(fc.integer({ min: 0, max: 40 }), fc.integer({ min: 0, max: 400 })),
});
const batchArb = fc.record({
  ops: fc.array(writeOpArb, { minLength: 0, maxLength: 5 }),
  gap: fc.integer({ min: 1, max: 3 }),
});
const rangeArb = fc.record({
  how: fc.constantFrom("all", "range", "prefix", "from", "to"),
  a: fc.nat(KEYS.length - 1),
  b: fc.nat(KEYS.length - 1),
  p: fc.nat(PREFIXES.length - 1),
  limit: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 6 })),
});
/** `at`: 0 reads now, n > 0 at the (n-1 modulo count)-th live snapshot. */
const atArb = fc.nat(6);

const stepArb = fc.oneof(
  { weight: 12, arbitrary: fc.record({ t: fc.constant("write" as const), batch: batchArb }) },
  {
    weight: 2,
    arbitrary: fc.record({
      t: fc.constant("burst" as const),
      batches: fc.array(batchArb, { minLength: 2, maxLength: 12 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("settle" as const) }) },
  {
    weight: 6,
    arbitrary: fc.record({
      t: fc.constant("get" as const),
      key: fc.nat(KEYS.length - 1),
      at: atArb,
    }),
  },
  {
    weight: 4,
    arbitrary: fc.record({ t: fc.constant("scan" as const), range: rangeArb, at: atArb }),
  },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("snapshot" as const) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("release" as const), i: fc.nat(6) }) },
  {
    weight: 2,
    arbitrary: fc.record({ t: fc.constant("open-scan" as const), range: rangeArb, at: atArb }),
  },
  {
    weight: 3,
    arbitrary: fc.record({
      t: fc.constant("step-scan" as const),
      i: fc.nat(6),
      n: fc.integer({ min: 1, max: 4 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("end-scan" as const), i: fc.nat(6) }) },
  { weight: 2, arbitrary: fc.record({ t: fc.constant("flush" as const) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("compact" as const) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("compact-fully" as const) }) },
  { weight: 1, arbitrary: fc.record({ t: fc.constant("reopen" as const) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      t: fc.constant("export" as const),
      at: atArb,
      frames: fc.nat(3),
      writes: fc.array(batchArb, { maxLength: 3 }),
      reimport: fc.boolean(),
    }),
  },
);
type Batch = typeof batchArb extends fc.Arbitrary<infer B> ? B : never;
type RangeGen = typeof rangeArb extends fc.Arbitrary<infer R> ? R : never;

const optionsArb = fc.record({
  memtableBytes: fc.oneof(
    fc.integer({ min: 256, max: 2048 }),
    fc.integer({ min: 2048, max: 8192 }),
    fc.integer({ min: 8192, max: 65536 }),
  ),
  l0CompactionTrigger: fc.integer({ min: 1, max: 10 }),
  l0SlowdownExtra: fc.integer({ min: 0, max: 8 }),
  l0StopExtra: fc.integer({ min: 0, max: 10 }),
  levelBaseBytes: fc.integer({ min: 1024, max: 65536 }),
  targetFileBytes: fc.integer({ min: 256, max: 16384 }),
  maxImmutableMemtables: fc.integer({ min: 1, max: 3 }),
  blockBytes: fc.oneof(fc.integer({ min: 1, max: 128 }), fc.integer({ min: 128, max: 4096 })),
});

/** Environments shared by the cases (a worker pool each): mapped or not, caches down to nothing. */
const ENV_OPTIONS = [
  { mapTables: true, blockCacheBytes: 1 << 20, tableCacheBytes: 1 << 20, maxOpenFiles: 64 },
  { mapTables: false, blockCacheBytes: 1 << 20, tableCacheBytes: 1 << 20, maxOpenFiles: 64 },
  { mapTables: true, blockCacheBytes: 1, tableCacheBytes: 1, maxOpenFiles: 1 },
  { mapTables: false, blockCacheBytes: 1, tableCacheBytes: 1, maxOpenFiles: 1 },
  { mapTables: true, blockCacheBytes: 8192, tableCacheBytes: 2048, maxOpenFiles: 3 },
  { mapTables: false, blockCacheBytes: 8192, tableCacheBytes: 2048, maxOpenFiles: 3 },
] as const;
const caseArb = fc.record({
  options: optionsArb,
  env: fc.nat(ENV_OPTIONS.length - 1),
  // Where the sequences start: Raft indexes are u64 on disk, and a sequence past 2^32 takes the
  // high half of every encoding of it (entries, blocks, the manifest, the snapshot stream).
  seqBase: fc.constantFrom(0, 2 ** 32 - 100, 2 ** 45 + 7),
  steps: fc.array(stepArb, { minLength: 100, maxLength: MAX_STEPS }),
});
type Case = typeof caseArb extends fc.Arbitrary<infer C> ? C : never;

const envs = new Map<number, LsmEnvironment>();
function envAt(i: number): LsmEnvironment {
  let env = envs.get(i);
  if (env === undefined) {
    env = new LsmEnvironment({ ...(ENV_OPTIONS[i] as (typeof ENV_OPTIONS)[number]), workers: 1 });
    envs.set(i, env);
  }
  return env;
}
after(async () => {
  for (const env of envs.values()) await env.close();
});

const base = existsSync("/dev/shm") ? "/dev/shm" : tmpdir();

function engineOptions(o: Case["options"]): LsmOptions {
  const slowdown = o.l0CompactionTrigger + o.l0SlowdownExtra;
  return {
    memtableBytes: o.memtableBytes,
    l0CompactionTrigger: o.l0CompactionTrigger,
    l0SlowdownTrigger: slowdown,
    // Writes stall at this many L0 tables: at or above the trigger, or nothing would drain it.
    l0StopTrigger: o.l0CompactionTrigger + o.l0StopExtra,
    levelBaseBytes: o.levelBaseBytes,
    targetFileBytes: o.targetFileBytes,
    maxImmutableMemtables: o.maxImmutableMemtables,
    blockBytes: o.blockBytes,
  };
}

function toRange(r: RangeGen): Range & { readonly opts: ScanOptions } {
  const a = KEYS[Math.min(r.a, r.b)] as string;
  const z = KEYS[Math.max(r.a, r.b)] as string;
  const limit = r.limit === 0 ? undefined : r.limit;
  const range: Range =
    r.how === "range"
      ? { start: a, end: z }
      : r.how === "prefix"
        ? { prefix: PREFIXES[r.p] as string }
        : r.how === "from"
          ? { start: a }
          : r.how === "to"
            ? { end: z }
            : {};
  const withLimit = limit === undefined ? range : { ...range, limit };
  const opts: ScanOptions = {
    ...(withLimit.start === undefined ? {} : { start: bytes(withLimit.start) }),
    ...(withLimit.end === undefined ? {} : { end: bytes(withLimit.end) }),
    ...(withLimit.prefix === undefined ? {} : { prefix: bytes(withLimit.prefix) }),
    ...(limit === undefined ? {} : { limit }),
  };
  return { ...withLimit, opts };
}

const pairs = (it: Iterable<[Uint8Array, Uint8Array]>): Array<[string, string]> =>
  [...it].map(([k, v]) => [str(k), str(v)]);

/** One case: the engine and the model, step by step. */
async function runCase(c: Case): Promise<void> {
  const dir = mkdtempSync(join(base, "cairn-lsm-model-"));
  const env = envAt(c.env);
  const options = engineOptions(c.options);
  const model = new Model();
  /** Batches applied or queued, in order: replayed above flushedSeq after a reopen. */
  let log: Array<{ seq: number; ops: WriteOp[] }> = [];
  let seq = c.seqBase;
  let engine = await LsmEngine.open(dir, env, options);
  let flushedSeen = 0;
  const pending = new Set<Promise<void>>();
  const snapshots: LsmSnapshot[] = [];
  const scans: Array<{
    it: Generator<[Uint8Array, Uint8Array]>;
    want: Array<[string, string]>;
    got: Array<[string, string]>;
    snapshot: LsmSnapshot | undefined;
  }> = [];

  const makeBatch = (b: Batch): { seq: number; ops: WriteOp[] } => {
    seq += b.gap;
    const ops = b.ops.map((o): WriteOp => {
      const key = bytes(KEYS[o.key] as string);
      if (o.del) return { type: "delete", key };
      const tag = `${seq}.${o.key}.`;
      return { type: "put", key, value: bytes(tag.padEnd(Math.max(o.len, tag.length), "v")) };
    });
    return { seq, ops };
  };
  /** Queues a batch; the model learns it when the engine applies it (reads see lastSeq). */
  const write = (b: Batch): Promise<void> => {
    const batch = makeBatch(b);
    log.push(batch);
    model.apply(batch.seq, batch.ops);
    const p = engine.write(batch.seq, batch.ops);
    pending.add(p);
    return p.finally(() => pending.delete(p));
  };
  const settle = async (): Promise<void> => {
    await Promise.all(pending);
  };
  const snapshotAt = (at: number): LsmSnapshot | undefined =>
    at === 0 || snapshots.length === 0 ? undefined : snapshots[(at - 1) % snapshots.length];
  const quiesce = async (): Promise<void> => {
    await settle();
    for (const s of scans.splice(0)) s.it.return(undefined);
    for (const s of snapshots.splice(0)) s.release();
  };
  const checkAll = (what: string): void => {
    const now = engine.lastSeq;
    assert.deepEqual(pairs(engine.scan()), model.scan(now, {}), `${what}: scan at ${now}`);
    for (const key of KEYS) {
      const got = engine.get(bytes(key));
      assert.equal(got === undefined ? undefined : str(got), model.get(key, now), `${what}: get`);
    }
  };

  try {
    for (const [n, step] of c.steps.entries()) {
      const where = `step ${n} (${step.t})`;
      switch (step.t) {
        case "write":
          await write(step.batch);
          break;
        case "burst":
          for (const b of step.batches) void write(b).catch(() => undefined);
          break;
        case "settle":
          await settle();
          break;
        case "get": {
          const snap = snapshotAt(step.at);
          const at = snap?.seq ?? engine.lastSeq;
          const key = KEYS[step.key] as string;
          const got = engine.get(bytes(key), snap);
          assert.equal(
            got === undefined ? undefined : str(got),
            model.get(key, at),
            `${where} at ${at}`,
          );
          break;
        }
        case "scan": {
          const snap = snapshotAt(step.at);
          const at = snap?.seq ?? engine.lastSeq;
          const r = toRange(step.range);
          const opts = snap === undefined ? r.opts : { ...r.opts, snapshot: snap };
          assert.deepEqual(pairs(engine.scan(opts)), model.scan(at, r), `${where} at ${at}`);
          break;
        }
        case "snapshot":
          snapshots.push(engine.snapshot());
          break;
        case "release": {
          if (snapshots.length === 0) break;
          const i = step.i % snapshots.length;
          const s = snapshots[i] as LsmSnapshot;
          // A paused scan reads at its snapshot: released only once the scan ends.
          if (scans.some((x) => x.snapshot === s)) break;
          snapshots.splice(i, 1);
          s.release();
          break;
        }
        case "open-scan": {
          const snap = snapshotAt(step.at);
          const r = toRange(step.range);
          const it = engine.scan(snap === undefined ? r.opts : { ...r.opts, snapshot: snap });
          // The scan's sequence is taken at its first step.
          const want = model.scan(snap?.seq ?? engine.lastSeq, r);
          const first = it.next();
          const got: Array<[string, string]> = first.done === true ? [] : pairs([first.value]);
          if (first.done === true) assert.deepEqual(want, [], where);
          else scans.push({ it, want, got, snapshot: snap });
          break;
        }
        case "step-scan":
        case "end-scan": {
          if (scans.length === 0) break;
          const i = step.i % scans.length;
          const s = scans[i] as (typeof scans)[number];
          for (let k = 0; step.t === "end-scan" || k < step.n; k++) {
            const r = s.it.next();
            if (r.done === true) {
              assert.deepEqual(s.got, s.want, `${where}: a scan paused between entries`);
              scans.splice(i, 1);
              break;
            }
            s.got.push(...pairs([r.value]));
          }
          break;
        }
        case "flush":
          await engine.flush();
          break;
        case "compact":
          await engine.compactUntilIdle();
          break;
        case "compact-fully":
          await engine.compactFully();
          break;
        case "reopen": {
          await quiesce();
          assert.ok(engine.flushedSeq >= flushedSeen);
          flushedSeen = engine.flushedSeq;
          await engine.close();
          engine = await LsmEngine.open(dir, env, options);
          const flushed = engine.flushedSeq;
          assert.ok(flushed >= flushedSeen, `${where}: flushedSeq ${flushed} < ${flushedSeen}`);
          flushedSeen = flushed;
          assert.deepEqual(pairs(engine.scan()), model.scan(flushed, {}), `${where} at ${flushed}`);
          for (const b of log) if (b.seq > flushed) await engine.write(b.seq, b.ops);
          break;
        }
        case "export": {
          const snap = snapshotAt(step.at);
          const at = snap?.seq ?? engine.lastSeq;
          const frames: Uint8Array[] = [];
          const exporting = engine.exportSnapshot(snap);
          // Paused after a few frames while the engine is written and read.
          // The header at least: the export takes its sequence at its first step.
          for (let k = 0; k <= step.frames; k++) {
            const r = await exporting.next();
            if (r.done === true) break;
            frames.push(r.value);
          }
          for (const b of step.writes) await write(b);
          engine.get(bytes(KEYS[0] as string));
          for await (const f of exporting) frames.push(f);
          const image: Array<[string, string]> = [];
          for await (const item of decodeSnapshotStream(
            (async function* () {
              yield* frames;
            })(),
          )) {
            if (item.kind === "header") assert.equal(item.seq, at, where);
            else image.push([str(item.key), str(item.value)]);
          }
          assert.deepEqual(image, model.scan(at, {}), `${where}: image at ${at}`);
          if (!step.reimport) break;
          await quiesce();
          await engine.importSnapshot(
            (async function* () {
              yield* frames;
            })(),
          );
          model.truncate(at);
          log = log.filter((b) => b.seq <= at);
          flushedSeen = at;
          assert.equal(engine.flushedSeq, at);
          checkAll(`${where}: after the import`);
          break;
        }
      }
      if (engine.failure !== undefined) throw engine.failure;
    }
    await quiesce();
    checkAll("at the end");
  } finally {
    for (const s of scans.splice(0)) s.it.return(undefined);
    for (const s of snapshots.splice(0)) s.release();
    await Promise.allSettled(pending);
    await engine.close();
    rmSync(dir, { recursive: true, force: true });
  }
}

/**
 * Cases run in CHAINS chains at once: a case mostly waits (for its flushes and compactions in
 * the worker, its manifest's appends), so chains side by side cut the wall time. A replay runs
 * its one chain.
 */
const CHAINS = SEED === undefined ? 4 : 1;

describe(
  "LSM engine against a model (random options, long scripts)",
  { concurrency: CHAINS },
  () => {
    for (let chain = 0; chain < CHAINS; chain++) {
      const runs = Math.ceil(RUNS / CHAINS);
      it(`chain ${chain}: agrees on every read over ${runs} scripts of up to ${MAX_STEPS} steps`, async () => {
        const details = await fc.check(fc.asyncProperty(caseArb, runCase), {
          numRuns: runs,
          ...(SEED === undefined ? {} : { seed: Number(SEED) }),
          ...(PATH === undefined ? {} : { path: PATH }),
          ...(SHRINK ? {} : { endOnFailure: true }),
        });
        if (details.failed) {
          const replay = `LSM_MODEL_SEED=${details.seed} LSM_MODEL_PATH=${details.counterexamplePath ?? ""} node --test test/storage/lsm-model.test.ts`;
          const shrunk = details.counterexample?.[0];
          assert.fail(
            `the model test failed (seed ${details.seed}); replay with\n  ${replay}\n` +
              `shrunk case: ${shrunk?.steps.length} steps, env ${shrunk?.env}, options ${JSON.stringify(shrunk?.options)}\n` +
              `steps: ${JSON.stringify(shrunk?.steps)}\n` +
              String(
                details.errorInstance instanceof Error
                  ? details.errorInstance.stack
                  : details.errorInstance,
              ),
          );
        }
      });
    }
  },
);
