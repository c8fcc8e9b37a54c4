/**
 * Child process of the LSM crash test: applies the workload to an engine with a tiny memtable
 * (so flushes and compactions run all the time) and reports progress on stdout until the parent
 * kills it with SIGKILL. Not a test file itself.
 *
 * With CAIRN_CRASH_LOCKSTEP=1 the child waits, after each write that rotated the memtable, until
 * the flush and every compaction it triggers are done: the engine's file operations then come in
 * the same order and number on a loaded machine as on a quiet one, so a crash point chosen by its
 * number is always reached. Without it, writes race the background work, as on a node.
 */
import { LsmEngine, LsmEnvironment } from "../../src/storage/lsm/index.ts";
import { workload } from "./lsm-model.ts";

const [dir, seedText, countText] = process.argv.slice(2) as [string, string, string];
const batches = workload(Number(seedText), Number(countText));
const env = new LsmEnvironment({ workers: 1 });
const engine = await LsmEngine.open(dir, env, CRASH_OPTIONS());
// Lines "f <seq>" report each new flushedSeq: a driver would compact its WAL up to it, so after a
// crash the engine must never come back below a value it reported (stdout to a pipe is
// synchronous on Linux: a reported line was written before any later crash).
let reported = engine.flushedSeq;
const lockstep = process.env["CAIRN_CRASH_LOCKSTEP"] === "1";
for (let i = engine.lastSeq; i < batches.length; i++) {
  const before = engine.activeMemtableBytes;
  await engine.write(i + 1, batches[i] as (typeof batches)[number]);
  if (lockstep && engine.activeMemtableBytes < before) await engine.compactUntilIdle();
  if ((i + 1) % 25 === 0) process.stdout.write(`${i + 1}\n`);
  if (engine.flushedSeq !== reported) {
    reported = engine.flushedSeq;
    process.stdout.write(`f ${reported}\n`);
  }
}
process.stdout.write("done\n");
await engine.flush();
await engine.close();
await env.close();

function CRASH_OPTIONS(): {
  memtableBytes: number;
  l0CompactionTrigger: number;
  levelBaseBytes: number;
  targetFileBytes: number;
} {
  return {
    memtableBytes: 8192,
    l0CompactionTrigger: 2,
    levelBaseBytes: 32768,
    targetFileBytes: 8192,
  };
}
