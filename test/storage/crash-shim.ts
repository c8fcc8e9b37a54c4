/**
 * Preloaded (`--import`) into the crash-test child and, through the inherited execArgv, into its
 * worker threads. In the thread named by CAIRN_CRASH_THREAD (0 = main, 1 = first worker) it counts
 * the file operations that change what is on disk and SIGKILLs the whole process just before
 * operation number CAIRN_CRASH_AT: a crash point between any two file operations of that thread.
 * Test-only; never imported by src/.
 */
import fs from "node:fs";
import fsp from "node:fs/promises";
import { syncBuiltinESMExports } from "node:module";
import { threadId } from "node:worker_threads";

const crashThread = Number(process.env["CAIRN_CRASH_THREAD"] ?? -1);
const crashAt = Number(process.env["CAIRN_CRASH_AT"] ?? 0);

if (threadId === crashThread && crashAt > 0) {
  // FileHandle methods live on an internal prototype: reach it through a handle, before counting.
  const probe = await fsp.open(import.meta.filename, "r");
  const proto = Object.getPrototypeOf(probe) as Record<string, unknown>;
  await probe.close();
  let ops = 0;
  const step = (): void => {
    ops++;
    if (ops >= crashAt) process.kill(process.pid, "SIGKILL");
  };
  type AnyFn = (...args: never[]) => unknown;
  const wrap = (target: Record<string, unknown>, names: string[]): void => {
    for (const name of names) {
      const orig = target[name] as AnyFn;
      target[name] = (...args: never[]) => {
        step();
        return orig.apply(target, args);
      };
    }
  };
  wrap(fs as unknown as Record<string, unknown>, [
    "openSync",
    "writeSync",
    "fsyncSync",
    "fdatasyncSync",
    "closeSync",
    "renameSync",
    "unlinkSync",
  ]);
  wrap(fsp as unknown as Record<string, unknown>, ["open", "rename", "unlink", "writeFile"]);
  for (const name of ["write", "sync", "datasync", "truncate"]) {
    const orig = proto[name] as AnyFn;
    proto[name] = function (this: unknown, ...args: never[]) {
      step();
      return orig.apply(this, args);
    };
  }
  syncBuiltinESMExports();
}
