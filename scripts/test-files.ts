/**
 * Which test files `npm test` runs together in one process, and which each in a process of its
 * own (scripts/test.sh).
 *
 *   node scripts/test-files.ts shared     the files one process runs, one after another
 *   node scripts/test-files.ts isolated   the files that each get a process
 *
 * A test file's process costs ~0.4 s of CPU before its first test (Node.js, the type stripper,
 * the modules it imports): a third of what the suite's ~140 in-memory files cost, 172 s of CPU
 * a process each against 113 s in one (docs/development.md, `npm test`). Those run in one
 * process, as mocha runs a suite.
 * A file runs alone when it, or a module of test/ it imports (followed through test/'s own
 * imports), starts processes or threads, or changes what the whole process shares: its
 * environment, directory, umask, listeners or timers. A file may also ask for a process of its
 * own with the line `// test: own process`.
 */
import { globSync, readFileSync } from "node:fs";
import { dirname, join, resolve } from "node:path";

const root = join(import.meta.dirname, "..");
const testDir = join(root, "test");

/** What makes a file (or a test module it imports) run in a process of its own. */
const OWN_PROCESS: readonly RegExp[] = [
  /node:child_process|node:worker_threads|node:cluster/,
  /\bWorker\b|\bworkers?:/,
  /process\.(exit|chdir|umask|on|once|off|addListener|removeListener|removeAllListeners|setUncaughtExceptionCaptureCallback)\(/,
  /process\.env(\.\w+|\[[^\]]+\])\s*=[^=]|delete process\.env/,
  /process\.exitCode\s*=[^=]/,
  /mock\.(timers|method|module)/,
  /^\/\/ test: own process$/m,
];

/** Relative imports of `source` that stay inside test/. */
function localImports(file: string, source: string): string[] {
  const found: string[] = [];
  for (const m of source.matchAll(/(?:from|import)\s*\(?\s*["'](\.{1,2}\/[^"']+)["']/g)) {
    const target = resolve(dirname(file), m[1] as string);
    if (target.startsWith(testDir + "/")) found.push(target);
  }
  return found;
}

/** Whether `file` or a test module it reaches needs a process of its own. */
function needsOwnProcess(file: string, seen = new Set<string>()): boolean {
  if (seen.has(file)) return false;
  seen.add(file);
  let source: string;
  try {
    source = readFileSync(file, "utf8");
  } catch {
    return false; // not a file of test/ (a data file named like one): nothing to follow
  }
  if (OWN_PROCESS.some((p) => p.test(source))) return true;
  return localImports(file, source).some((f) => needsOwnProcess(f, seen));
}

export function testFiles(): { shared: string[]; isolated: string[] } {
  const shared: string[] = [];
  const isolated: string[] = [];
  for (const f of globSync("test/**/*.test.ts", { cwd: root }).sort())
    (needsOwnProcess(join(root, f)) ? isolated : shared).push(f);
  return { shared, isolated };
}

if (import.meta.main) {
  const which = process.argv[2];
  if (which !== "shared" && which !== "isolated") {
    process.stderr.write("usage: node scripts/test-files.ts shared|isolated\n");
    process.exitCode = 2;
  } else {
    process.stdout.write(`${testFiles()[which].join("\n")}\n`);
  }
}
