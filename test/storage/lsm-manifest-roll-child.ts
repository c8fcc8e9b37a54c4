/**
 * Child process of the manifest-roll crash test (lsm-manifest-roll.test.ts): applies a workload
 * to an engine whose manifest rolls every few edits (`manifestRollBytes: 1`: the threshold is 4×
 * the last snapshot), flushing every few batches and waiting for the compactions each flush
 * starts, so its file operations come in the same order on every run. Prints "f <flushedSeq>"
 * after each flush (what a driver would compact its WAL up to) until the preloaded crash shim
 * kills it, or "done". Not a test file itself.
 */
import { LsmEngine, LsmEnvironment } from "../../src/storage/lsm/index.ts";
import { workload } from "./lsm-model.ts";
import { ROLL_CRASH_BATCHES_PER_FLUSH, ROLL_CRASH_OPTIONS } from "./lsm-manifest-roll-options.ts";

const [dir, seedText, countText] = process.argv.slice(2) as [string, string, string];
const batches = workload(Number(seedText), Number(countText));
const env = new LsmEnvironment({ workers: 1 });
const engine = await LsmEngine.open(dir, env, ROLL_CRASH_OPTIONS);
for (let i = 0; i < batches.length; i++) {
  await engine.write(i + 1, batches[i] as (typeof batches)[number]);
  if ((i + 1) % ROLL_CRASH_BATCHES_PER_FLUSH === 0) {
    await engine.flush();
    await engine.compactUntilIdle();
    // Stdout to a pipe is synchronous on Linux: a reported line was written before the kill.
    process.stdout.write(`f ${engine.flushedSeq}\n`);
  }
}
await engine.close();
await env.close();
process.stdout.write("done\n");
