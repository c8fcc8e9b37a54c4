/**
 * The manifest rolls while the engine runs: once its log outgrows max(manifestRollBytes, 4× its
 * last snapshot) it is rewritten as one snapshot of the version, in the queue of appends. Its
 * size stays bounded under thousands of edits, concurrent appends are neither lost nor reordered
 * by a roll, and a power cut at any file operation of a roll reopens to every acknowledged key
 * and no deleted one (a child process killed by the preloaded crash shim, crash-shim.ts).
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { open } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import {
  LsmEngine,
  LsmEnvironment,
  type LsmOptions,
  type WriteOp,
} from "../../src/storage/lsm/index.ts";
import {
  applyEdit,
  emptyState,
  Manifest,
  type FileMeta,
  type VersionEdit,
} from "../../src/storage/lsm/manifest.ts";
import { powerCut } from "./crash-shim.ts";
import { ROLL_CRASH_BATCHES_PER_FLUSH, ROLL_CRASH_OPTIONS } from "./lsm-manifest-roll-options.ts";
import { hex, modelAt, scanPairs, sortedPairs, workload, type Batch } from "./lsm-model.ts";

const env = new LsmEnvironment({ workers: 2, blockCacheBytes: 1 << 20 });
after(() => env.close());

/** Directories on tmpfs where there is one: the tests' thousands of fsyncs are then cheap. */
const base = existsSync("/dev/shm") ? "/dev/shm" : tmpdir();
const made: string[] = [];
after(() => {
  for (const d of made.splice(0)) rmSync(d, { recursive: true, force: true });
});

function fastDir(prefix: string): string {
  const dir = mkdtempSync(join(base, `cairn-${prefix}-`));
  made.push(dir);
  return dir;
}

/** Manifest files in `dir`, and the one CURRENT names. */
function manifests(dir: string): { names: string[]; current: string | undefined } {
  const names = readdirSync(dir)
    .filter((n) => n.startsWith("MANIFEST-"))
    .sort();
  const current = existsSync(join(dir, "CURRENT"))
    ? readFileSync(join(dir, "CURRENT"), "utf8").trim()
    : undefined;
  return { names, current };
}

function fileMeta(level: number, number: number, key: string): FileMeta {
  return {
    level,
    number,
    size: 1000 + number,
    smallest: `${key}-a`,
    largest: `${key}-z`,
    minSeq: number,
    maxSeq: number,
    entries: 10,
  };
}

describe("LSM manifest roll", () => {
  it("keeps the manifest below its threshold plus one edit across 2,000 edits, and reopens with all data", async () => {
    const dir = fastDir("roll");
    const rollBytes = 32 * 1024;
    const options: LsmOptions = {
      memtableBytes: 1 << 20,
      l0CompactionTrigger: 2,
      levelBaseBytes: 8192,
      targetFileBytes: 4096,
      manifestRollBytes: rollBytes,
    };
    // The bound holds while the snapshot is at most a quarter of rollBytes: a dozen tables with
    // these keys, checked below.
    const bound = rollBytes + 4096;
    const engine = await LsmEngine.open(dir, env, options);
    const model = new Map<string, string>();
    let largest = 0;
    const seen = new Set<string>();
    for (let seq = 1; seq <= 2000; seq++) {
      // Most edits only advance flushedSeq (an empty batch's flush); every tenth adds a table,
      // and every other of those is compacted (tables removed).
      const ops: WriteOp[] = [];
      if (seq % 10 === 0) {
        for (let j = 0; j < 4; j++) {
          const key = Buffer.from(`key-${String((seq * 7 + j * 13) % 150).padStart(40, "0")}`);
          if ((seq + j) % 5 === 0) ops.push({ type: "delete", key });
          else ops.push({ type: "put", key, value: Buffer.alloc(64, seq % 251) });
        }
      }
      await engine.write(seq, ops);
      for (const op of ops) {
        if (op.type === "put") model.set(hex(op.key), hex(op.value));
        else model.delete(hex(op.key));
      }
      await engine.flush();
      // Any manifest file present (the live one, the one a roll is replacing) is bounded.
      const { names } = manifests(dir);
      for (const name of names) {
        seen.add(name);
        largest = Math.max(largest, statSync(join(dir, name)).size);
      }
      assert.ok(largest <= bound, `manifest of ${largest} bytes after edit ${seq}`);
    }
    await engine.compactUntilIdle();
    assert.ok(engine.stats().compactions >= 50, `${engine.stats().compactions} compactions`);
    const tables = engine.stats().filesPerLevel.reduce((a, n) => a + n, 0);
    assert.ok(tables <= 12, `${tables} tables: the snapshot may exceed a quarter of rollBytes`);
    assert.ok(seen.size >= 5, `rolled ${seen.size - 1} times`);
    await engine.close();
    const { names, current } = manifests(dir);
    assert.deepEqual(names, [current], "the old manifests are removed");

    const reopened = await LsmEngine.open(dir, env, options);
    assert.equal(reopened.flushedSeq, 2000);
    assert.deepEqual(scanPairs(reopened.scan()), sortedPairs(model));
    await reopened.close();
  });

  it("rolls behind appends issued at once, losing and reordering none of their edits", async () => {
    const dir = fastDir("roll-race");
    const manifest = await Manifest.create(dir, emptyState(), 1, false, 2048);
    const expected = emptyState();
    const edits: VersionEdit[] = [];
    for (let i = 1; i <= 400; i++) {
      // Each edit adds a table and removes the one added two edits before: a roll that missed
      // or replayed an edit out of order would name a different set.
      edits.push({
        add: [fileMeta(i % 3, i, `k${i}`)],
        ...(i > 2 ? { remove: [{ level: (i - 2) % 3, number: i - 2 }] } : {}),
        flushedSeq: i,
        nextFileNumber: i + 1,
      });
    }
    const sizes: number[] = [];
    // All queued before the first is written: rolls run between them, in the same queue.
    await Promise.all(
      edits.map((edit) =>
        manifest.append(edit).then(() => {
          sizes.push(statSync(join(dir, manifest.fileName)).size);
        }),
      ),
    );
    for (const edit of edits) applyEdit(expected, edit);
    await manifest.close();
    assert.ok(manifest.rolls >= 10, `${manifest.rolls} rolls`);
    assert.ok(
      Math.max(...sizes) <= manifest.rollThreshold + 512,
      `sizes up to ${Math.max(...sizes)}`,
    );
    const { names, current } = manifests(dir);
    assert.deepEqual(names, [current]);
    assert.equal(current, manifest.fileName);
    const { state } = await Manifest.load(dir);
    assert.deepEqual(state, expected);
  });

  it("takes a roll's threshold from the snapshot when that is larger than the floor", async () => {
    const dir = fastDir("roll-ratio");
    const state = emptyState();
    for (let n = 1; n <= 50; n++) applyEdit(state, { add: [fileMeta(6, n, `big${n}`)] });
    // A floor below the snapshot: a roll must not follow every edit.
    const manifest = await Manifest.create(dir, state, 1, false, 1);
    const snapshot = manifest.size;
    assert.equal(manifest.rollThreshold, 4 * snapshot);
    let appended = 0;
    let edits = 0;
    let last = 0;
    while (manifest.rolls === 0) {
      const edit: VersionEdit = { flushedSeq: ++appended };
      last = 8 + Buffer.byteLength(JSON.stringify(edit));
      edits += last;
      await manifest.append(edit);
      await manifest.close(); // waits for the roll this append may have started
    }
    // Rolled by the edit that took the file past four snapshots, not before.
    assert.ok(snapshot + edits > 4 * snapshot, `rolled at ${snapshot + edits} bytes`);
    assert.ok(snapshot + edits - last <= 4 * snapshot, `not rolled at ${snapshot + edits - last}`);
    // The same version but for flushedSeq, a few digits longer.
    assert.ok(Math.abs(manifest.size - snapshot) <= 8, "the new manifest is one snapshot");
    const { state: loaded } = await Manifest.load(dir);
    assert.equal(loaded.flushedSeq, appended);
    assert.equal(loaded.levels[6]?.length, 50);
  });

  it("fails for good when a roll fails, keeping every edit appended before it", async () => {
    const dir = fastDir("roll-fail");
    const manifest = await Manifest.create(dir, emptyState(), 1, false, 256);
    // The roll's first fsync (of the new file: appends fdatasync) fails.
    const probe = await open(import.meta.filename, "r");
    const proto = Object.getPrototypeOf(probe) as { sync: () => Promise<void> };
    await probe.close();
    const original = proto.sync;
    proto.sync = () => Promise.reject(Object.assign(new Error("injected EIO"), { code: "EIO" }));
    let appended = 0;
    try {
      // The appends before the roll, and the one that started it, are durable: they resolve.
      while (manifest.size <= manifest.rollThreshold) {
        await manifest.append({ flushedSeq: ++appended });
      }
      await assert.rejects(manifest.append({ flushedSeq: appended + 1 }), {
        code: "CAIRN_ERR_LSM_FAILED",
      });
    } finally {
      proto.sync = original;
    }
    await manifest.close();
    assert.equal(manifest.rolls, 0);
    const { state } = await Manifest.load(dir);
    assert.equal(state.flushedSeq, appended);
  });
});

// --- power cuts during rolls ---

const child = join(import.meta.dirname, "lsm-manifest-roll-child.ts");
const shim = join(import.meta.dirname, "crash-shim.ts");
const SEED = 23;
const COUNT = 4 * ROLL_CRASH_BATCHES_PER_FLUSH;

/** What the directory says the kill interrupted, before the power cut undoes anything. */
type RollStep = "no roll" | "new manifest not live" | "switching CURRENT" | "old manifest left";

function rollStep(dir: string): RollStep {
  if (!existsSync(dir)) return "no roll";
  const { names, current } = manifests(dir);
  // One manifest: none rolled, or the first being made (lsm.test.ts crashes there).
  if (names.length < 2) return "no roll";
  if (existsSync(join(dir, "CURRENT.tmp"))) return "switching CURRENT";
  return current === names.at(-1) ? "old manifest left" : "new manifest not live";
}

/**
 * Runs the child with a crash before its main thread's operation `at` on the engine's files,
 * undoes what a power cut could lose, and checks the reopened engine. Returns where the kill
 * landed, or undefined if the child finished first.
 */
async function crashAt(at: number, renamesSurvive: boolean): Promise<RollStep | undefined> {
  const dir = fastDir("roll-crash");
  const journalDir = fastDir("roll-journal");
  // The engine makes its directory and its parent, as a node's shard does: both under the
  // shim's directory, so that the power cut sees their creation and the fsyncs making it durable.
  const engineDir = join(dir, "shards", "3");
  const journal = join(journalDir, "journal");
  const proc = spawn(
    process.execPath,
    ["--import", shim, child, engineDir, String(SEED), String(COUNT)],
    {
      stdio: ["ignore", "pipe", "inherit"],
      env: {
        ...process.env,
        CAIRN_CRASH_DIR: dir,
        CAIRN_CRASH_THREAD: "0",
        CAIRN_CRASH_AT: String(at),
        CAIRN_CRASH_JOURNAL: journal,
      },
    },
  );
  let output = "";
  proc.stdout.on("data", (chunk: Buffer) => (output += chunk.toString()));
  const [code, signal] = (await once(proc, "exit")) as [number | null, string | null];
  if (signal !== "SIGKILL") {
    assert.equal(code, 0, "the child ran its workload");
    assert.ok(output.includes("done"));
    return undefined;
  }
  const step = rollStep(engineDir);
  // Only now, with every thread of the child dead, is the journal complete.
  powerCut(journal, { renamesSurvive });
  let reported = 0;
  for (const line of output.split("\n")) {
    if (line.startsWith("f ")) reported = Math.max(reported, Number(line.slice(2)));
  }
  const what = `crash before operation ${at} (${step})`;
  const engine = await LsmEngine.open(engineDir, env, ROLL_CRASH_OPTIONS);
  try {
    const flushed = engine.flushedSeq;
    assert.ok(flushed >= reported, `${what}: flushedSeq ${flushed} below reported ${reported}`);
    const batches = workload(SEED, COUNT);
    // Every key acknowledged (flushed) is there, and no deleted one came back.
    assert.deepEqual(scanPairs(engine.scan()), sortedPairs(modelAt(batches, flushed)), what);
    for (let i = flushed; i < COUNT; i++) await engine.write(i + 1, batches[i] as Batch);
    await engine.flush();
    await engine.compactUntilIdle();
    assert.deepEqual(scanPairs(engine.scan()), sortedPairs(modelAt(batches, COUNT)), what);
  } finally {
    await engine.close();
  }
  const { names, current } = manifests(engineDir);
  assert.deepEqual(names, [current], `${what}: one manifest left`);
  return step;
}

describe("LSM power cut during a manifest roll", () => {
  it("reopens to every acknowledged key and no deleted one, whichever file operation the cut precedes", async () => {
    const steps = new Map<RollStep, number>();
    const inRoll: number[] = [];
    // Every operation of the child's main thread, children three at a time (each mostly waits
    // for its start-up), losing what a power cut could: unsynced data, undurable names.
    for (let from = 1; ; from += 3) {
      assert.ok(from < 600, "the workload ends within 600 file operations");
      const points = [from, from + 1, from + 2];
      const landed = await Promise.all(points.map((at) => crashAt(at, false)));
      landed.forEach((s, i) => {
        if (s === undefined) return;
        steps.set(s, (steps.get(s) ?? 0) + 1);
        if (s !== "no roll") inRoll.push(points[i] as number);
      });
      if (landed.includes(undefined)) break;
    }
    // The kills landed at each step of a roll, not only between rolls.
    for (const s of ["new manifest not live", "switching CURRENT", "old manifest left"] as const) {
      assert.ok((steps.get(s) ?? 0) >= 1, `${steps.get(s) ?? 0} kills at "${s}"`);
    }
    assert.ok(inRoll.length >= 8, `${inRoll.length} kills inside a roll`);
    // The points inside a roll once more, with a power cut that keeps the unsynced renames while
    // it loses the unsynced creations (POSIX orders neither until the directory's fsync): CURRENT
    // switched to a manifest whose name was lost, unless the roll synced it first.
    for (let i = 0; i < inRoll.length; i += 3) {
      await Promise.all(inRoll.slice(i, i + 3).map((at) => crashAt(at, true)));
    }
  });
});
