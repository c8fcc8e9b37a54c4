/**
 * Power cuts while an engine reopens (issue 50): a child process opens an engine prepared here
 * — tables in L0 and below, an orphan table and a leftover `CURRENT.tmp` to remove — and the
 * preloaded crash shim kills it just before its main thread's Nth file operation, for every N
 * until the open (and the compaction it starts) completes. Then what a power cut could lose is
 * undone (crash-shim.ts, both of its modes: everything unsynced lost; renames kept while
 * unsynced creations are lost), and the engine must open again holding exactly what it held
 * before: recovery writes a new manifest and switches CURRENT to it, and a crash at any point
 * of that must leave one of the two manifests whole and named.
 */
import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { cpSync, readdirSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { LsmEngine, LsmEnvironment } from "../../src/storage/lsm/index.ts";
import { powerCut } from "./crash-shim.ts";
import { tempDir } from "./helpers.ts";
import {
  modelAt,
  REOPEN_OPTIONS,
  scanPairs,
  sortedPairs,
  workload,
  type Batch,
} from "./lsm-model.ts";

const env = new LsmEnvironment({ workers: 1 });
after(() => env.close());

const child = join(import.meta.dirname, "lsm-reopen-child.ts");
const shim = join(import.meta.dirname, "crash-shim.ts");
const COUNT = 120;
const batches = workload(17, COUNT);
/** A prepared engine's directory, copied for each crash point, and what it holds. */
let template = "";
let flushedSeq = 0;

before(async () => {
  template = join(tempDir("reopen-template"), "engine");
  // No automatic compaction while preparing: L0 is above the child's trigger when it opens.
  const engine = await LsmEngine.open(template, env, {
    ...REOPEN_OPTIONS,
    l0CompactionTrigger: 100,
    l0SlowdownTrigger: 100,
    l0StopTrigger: 100,
  });
  for (let i = 0; i < COUNT; i++) {
    await engine.write(i + 1, batches[i] as Batch);
    if (i === 60) await engine.compactFully();
  }
  await engine.flush();
  flushedSeq = engine.flushedSeq;
  await engine.close();
  assert.ok(readdirSync(template).filter((n) => n.endsWith(".sst")).length >= 5);
  // Leftovers of an earlier crash, for the open to remove.
  writeFileSync(join(template, "999999.sst"), "an orphan table");
  writeFileSync(join(template, "CURRENT.tmp"), "MANIFEST-000000\n");
});

/** Runs the child with a crash before operation `at`; true if it was killed there. */
async function openAndCrash(dir: string, at: number, journal: string): Promise<boolean> {
  const proc = spawn(process.execPath, ["--import", shim, child, join(dir, "engine")], {
    stdio: ["ignore", "ignore", "inherit"],
    env: {
      ...process.env,
      CAIRN_CRASH_DIR: dir,
      CAIRN_CRASH_THREAD: "0",
      CAIRN_CRASH_AT: String(at),
      CAIRN_CRASH_JOURNAL: journal,
    },
  });
  const [code, signal] = (await once(proc, "exit")) as [number | null, string | null];
  if (signal === "SIGKILL") return true;
  assert.equal(code, 0, "the child opened the engine");
  return false;
}

describe("LSM power cut while reopening (crash during recovery)", () => {
  for (const renamesSurvive of [false, true]) {
    const mode = renamesSurvive ? "renames kept ahead of creations" : "unsynced changes lost";
    /** Crashes an open before operation `at`, recovers; false if the open ended first. */
    const crashAndRecover = async (at: number): Promise<boolean> => {
      const dir = tempDir("reopen");
      cpSync(template, join(dir, "engine"), { recursive: true });
      const journal = join(tempDir("journal"), "journal");
      const killed = await openAndCrash(dir, at, journal);
      powerCut(journal, { renamesSurvive });
      const engine = await LsmEngine.open(join(dir, "engine"), env, REOPEN_OPTIONS);
      try {
        assert.equal(engine.flushedSeq, flushedSeq, `crash before operation ${at}`);
        assert.deepEqual(
          scanPairs(engine.scan()),
          sortedPairs(modelAt(batches, flushedSeq)),
          `crash before operation ${at}`,
        );
        await engine.compactUntilIdle();
      } finally {
        await engine.close();
      }
      return killed;
    };
    it(`recovers what it held, whichever file operation of the open the cut precedes (${mode})`, async () => {
      // Children four at a time: each mostly waits for its start-up.
      let points = 0;
      for (let from = 1; ; from += 4) {
        assert.ok(from < 200, "the open ends within 200 file operations");
        const killed = await Promise.all([0, 1, 2, 3].map((i) => crashAndRecover(from + i)));
        points += killed.filter(Boolean).length;
        if (killed.includes(false)) break;
      }
      assert.ok(points >= 10, `${points} crash points`);
    });
  }
});
