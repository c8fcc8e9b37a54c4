/**
 * Pure cores must stay deterministic: no clock, timers, global randomness, file system, sockets
 * or asynchrony. Time enters through tick(), randomness through an injected Rng. This test fails
 * on any forbidden token in the listed folders (comments included: keep them free of the words).
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync, statSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, it } from "node:test";

const root = join(import.meta.dirname, "..");

/** Folders (or single files) whose code must be a pure, synchronous state machine. */
export const PURE_DIRS = [
  "src/raft",
  "src/membership/core",
  "src/membership/sim",
  "src/storage/lsm/planner.ts",
  "src/cluster/meta.ts",
];

const FORBIDDEN: ReadonlyArray<[RegExp, string]> = [
  [/\bDate\b/, "Date (time comes through tick())"],
  [/\bperformance\s*\./, "performance clock"],
  [/\bprocess\.hrtime\b/, "process.hrtime"],
  [/\bMath\.random\b/, "Math.random (inject an Rng)"],
  [/\bset(Timeout|Interval|Immediate)\b/, "timers"],
  [/\bqueueMicrotask\b/, "microtasks"],
  [/\bPromise\b/, "promises"],
  [/\basync\b/, "async"],
  [/\bawait\b/, "await"],
  [
    /from\s+["'](node:)?(fs|fs\/promises|net|dgram|http|http2|child_process|worker_threads|timers)["']/,
    "I/O module import",
  ],
  [/\brequire\s*\(/, "require()"],
];

function tsFiles(dir: string): string[] {
  if (dir.endsWith(".ts")) return [dir];
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) out.push(...tsFiles(p));
    else if (name.endsWith(".ts")) out.push(p);
  }
  return out;
}

describe("pure cores", () => {
  for (const dir of PURE_DIRS) {
    it(`${dir} uses no clock, timers, randomness, I/O or async`, () => {
      const files = tsFiles(join(root, dir));
      assert.ok(files.length > 0, `${dir} has no TypeScript files`);
      const violations: string[] = [];
      for (const file of files) {
        const lines = readFileSync(file, "utf8").split("\n");
        lines.forEach((line, i) => {
          for (const [re, what] of FORBIDDEN) {
            if (re.test(line)) violations.push(`${relative(root, file)}:${i + 1}: ${what}`);
          }
        });
      }
      assert.deepEqual(violations, []);
    });
  }
});
