/**
 * Child process of issue 50's bug-3 tests (lsm-regressions.test.ts): a table truncated to a
 * quarter of its size while an engine reads it through a mapping. Before the fix a read of a
 * page past the new end raised SIGBUS and the process died, so these run in a child. Runs the
 * scenarios named on the command line one after another, each with its own engine, and prints
 * "ok <scenario>" after each whose checks held; with `--worker` first, in a worker thread (the
 * LSM runs in worker threads too). Scenario "kill" sends this process SIGBUS: it must die of it.
 * Not a test file itself.
 */
import assert from "node:assert/strict";
import { mkdtempSync, readdirSync, rmSync, statSync, truncateSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { LsmEngine, LsmEnvironment } from "../../src/storage/lsm/index.ts";

const keyAt = (i: number): string => `k${String(i).padStart(3, "0")}`;
const KEYS = Array.from({ length: 200 }, (_, i) => keyAt(i));
/** 100 bytes, different for each key. */
const valueOf = (key: string): Buffer =>
  Buffer.from(`${key}:`.padEnd(100, String.fromCharCode(97 + (Number(key.slice(1)) % 26))));
const b = (s: string): Buffer => Buffer.from(s, "latin1");
const text = (v: Uint8Array): string => Buffer.from(v).toString("latin1");

interface Setup {
  readonly env: LsmEnvironment;
  readonly engine: LsmEngine;
  /** The one table's path. */
  readonly path: string;
  /** Truncates the table to a quarter of its size (tens of blocks of ~256 bytes fall off). */
  shrink(): void;
  close(): Promise<void>;
}

/** An engine in `dir` holding KEYS in one table of small blocks; the table's path. */
async function filled(dir: string, env: LsmEnvironment): Promise<[LsmEngine, string]> {
  const engine = await LsmEngine.open(dir, env, { l0CompactionTrigger: 8, blockBytes: 256 });
  await engine.write(
    1,
    KEYS.map((k) => ({ type: "put", key: b(k), value: valueOf(k) })),
  );
  await engine.flush();
  const [table] = readdirSync(dir).filter((n) => n.endsWith(".sst")) as [string];
  return [engine, join(dir, table)];
}

/** An engine holding KEYS in one table of small blocks, read through a mapping. */
async function setup(blockCacheBytes: number): Promise<Setup> {
  const dir = mkdtempSync(join(tmpdir(), "cairn-shrink-"));
  const env = new LsmEnvironment({ workers: 1, blockCacheBytes, mapTables: true });
  assert.ok(env.files.mapping, "the addon maps tables");
  const [engine, path] = await filled(dir, env);
  return {
    env,
    engine,
    path,
    shrink: () => truncateSync(path, statSync(path).size >> 2),
    close: async () => {
      await engine.close();
      await env.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `read` throws a CorruptionError naming the table, and it failed the engine. */
function throwsCorruption(s: Setup, read: () => unknown): void {
  assert.throws(read, (err) => {
    assert.equal((err as { code?: string }).code, "CAIRN_ERR_CORRUPTION", String(err));
    assert.equal((err as { file?: string }).file, s.path);
    assert.match((err as Error).message, new RegExp(s.path));
    assert.equal((s.engine.failure as { code?: string } | undefined)?.code, "CAIRN_ERR_CORRUPTION");
    return true;
  });
}

const SCENARIOS: Record<string, () => Promise<void>> = {
  /** A block never read before, past the new end. */
  async first() {
    const s = await setup(1 << 20);
    assert.equal(text(s.engine.get(b(keyAt(0))) as Uint8Array), text(valueOf(keyAt(0))));
    s.shrink();
    throwsCorruption(s, () => s.engine.get(b(keyAt(190))));
    await s.close();
  },
  /**
   * Every block cached before the file shrank: one in the part the file keeps reads right; one
   * past the new end is corruption, and then so is every read of the table (never zeros).
   */
  async cached() {
    const s = await setup(1 << 20);
    for (const k of KEYS) s.engine.get(b(k));
    s.shrink();
    assert.equal(text(s.engine.get(b(keyAt(0))) as Uint8Array), text(valueOf(keyAt(0))));
    throwsCorruption(s, () => s.engine.get(b(keyAt(190))));
    for (const k of [keyAt(190), keyAt(0)]) {
      assert.throws(() => s.engine.get(b(k)), { code: "CAIRN_ERR_CORRUPTION", file: s.path });
    }
    await s.close();
  },
  /** Blocks read before and evicted (no block cache): read again past the new end. */
  async reread() {
    const s = await setup(0);
    for (const k of KEYS) s.engine.get(b(k));
    s.shrink();
    throwsCorruption(s, () => s.engine.get(b(keyAt(190))));
    await s.close();
  },
  /** A value a caller holds, from a block past the new end. */
  async held() {
    const s = await setup(1 << 20);
    const value = s.engine.get(b(keyAt(190))) as Uint8Array;
    s.shrink();
    assert.equal(text(value), text(valueOf(keyAt(190))));
    await s.close();
  },
  /** A scan under way in a block past the new end: what it yields is right, then it fails. */
  async scan() {
    const s = await setup(1 << 20);
    const it = s.engine.scan({ start: b(keyAt(150)) });
    const first = it.next().value as [Uint8Array, Uint8Array];
    s.shrink();
    let i = 151;
    throwsCorruption(s, () => {
      for (const [k, v] of it) {
        assert.equal(text(k), keyAt(i));
        assert.equal(text(v), text(valueOf(keyAt(i))));
        i++;
      }
    });
    assert.ok(i < 200, "the scan failed before its end");
    assert.equal(text(first[0]), keyAt(150));
    assert.equal(text(first[1]), text(valueOf(keyAt(150))));
    await s.close();
  },
  /**
   * A scan paused in a block past the new end, whose lost page a point read meets (and the
   * addon fills with zeros): the scan fails at its next entry, never reading the zeros. Another
   * engine of the same node and thread, and its paused scan, go on unharmed.
   */
  async paused() {
    const s = await setup(1 << 20);
    const otherDir = mkdtempSync(join(tmpdir(), "cairn-shrink-"));
    const [other] = await filled(otherDir, s.env);
    const scan = s.engine.scan({ start: b(keyAt(190)) });
    assert.equal(text((scan.next().value as [Uint8Array, Uint8Array])[0]), keyAt(190));
    const otherScan = other.scan({ start: b(keyAt(190)) });
    assert.equal(text((otherScan.next().value as [Uint8Array, Uint8Array])[0]), keyAt(190));
    s.shrink();
    throwsCorruption(s, () => s.engine.get(b(keyAt(190))));
    throwsCorruption(s, () => scan.next());
    let i = 191;
    for (const [k, v] of otherScan) {
      assert.equal(text(k), keyAt(i));
      assert.equal(text(v), text(valueOf(keyAt(i))));
      i++;
    }
    assert.equal(i, 200);
    assert.equal(other.failure, undefined);
    await other.close();
    rmSync(otherDir, { recursive: true, force: true });
    await s.close();
  },
  async kill() {
    process.kill(process.pid, "SIGBUS");
    await new Promise((resolve) => setTimeout(resolve, 2000));
  },
};

async function run(names: readonly string[], report: (line: string) => void): Promise<void> {
  for (const name of names) {
    const scenario = SCENARIOS[name];
    if (scenario === undefined) throw new Error(`no scenario ${name}`);
    await scenario();
    report(`ok ${name}`);
  }
}

if (isMainThread) {
  const args = process.argv.slice(2);
  const names = args.filter((a) => a !== "--worker");
  const print = (line: string): void => void process.stdout.write(`${line}\n`);
  if (args.includes("--worker")) {
    const worker = new Worker(new URL(import.meta.url), { workerData: names });
    worker.on("message", (line: string) => print(`worker ${line}`));
    const [code] = (await new Promise((resolve, reject) => {
      worker.on("exit", (c: number) => resolve([c]));
      worker.on("error", reject);
    })) as [number];
    assert.equal(code, 0);
  }
  await run(names, print);
} else {
  await run(workerData as string[], (line) => parentPort?.postMessage(line));
}
