/**
 * Child process of the crash-during-recovery test (lsm-reopen-crash.test.ts): opens the engine
 * in the directory given (recovery: tables verified, a fresh manifest, CURRENT switched, orphans
 * removed, a compaction the open may start) and closes it, unless the preloaded crash shim kills
 * it first. Prints "opened <flushedSeq>" once open. Not a test file itself.
 */
import { LsmEngine, LsmEnvironment } from "../../src/storage/lsm/index.ts";
import { REOPEN_OPTIONS } from "./lsm-model.ts";

const [dir] = process.argv.slice(2) as [string];
const env = new LsmEnvironment({ workers: 1 });
const engine = await LsmEngine.open(dir, env, REOPEN_OPTIONS);
process.stdout.write(`opened ${engine.flushedSeq}\n`);
await engine.compactUntilIdle();
await engine.close();
await env.close();
