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
 *
 * The isolated files start longest first (LONGEST_FIRST), the rest after in name order: their
 * runner (scripts/run-isolated.ts; `node --test` sorts its files by name) takes the next file
 * in the list when one of its two ends, so the longest going first leaves only short files to
 * even out the end. In name order the end-to-end files of test/e2e/cluster-*, each mostly
 * waiting on its nodes' timers, ran side by side, and the two cores were ~60 % busy for four
 * minutes; started first, they run beside the shared run and the checks.
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

/**
 * The isolated files that take longest, longest first: seconds each took in a fresh-clone
 * `.ci/run` on the 2-vCPU VM of 2026-12-07 (a sampler of the test processes; every file of
 * 8 s or more). An entry naming no file is skipped (test/test-files.test.ts names it); a file not
 * listed runs after these.
 */
export const LONGEST_FIRST: readonly string[] = [
  "test/e2e/cluster-elastic.test.ts", // 152 s
  "test/chaos/chaos.test.ts", // 130 (~90 since its rotate run went to npm run chaos)
  "test/e2e/cluster-move-crash.test.ts", // 85
  "test/cli/cli.test.ts", // 76
  "test/cli/backup.test.ts", // 59
  "test/e2e/data-safety-disk.test.ts", // 56
  "test/e2e/data-safety-corrupt-table.test.ts", // 49
  "test/e2e/cluster-quiesce.test.ts", // 46
  "test/e2e/connection-flood.test.ts", // 42
  "test/storage/lsm.test.ts", // 41
  "test/e2e/overload.test.ts", // 39
  "test/storage/lsm-manifest-roll.test.ts", // 35
  "test/e2e/cluster-durability.test.ts", // 33
  "test/e2e/cluster-version.test.ts", // 32
  "test/cli/bench.test.ts", // 32
  "test/e2e/front-end-attacks.test.ts", // 31
  "test/e2e/cluster-wipe.test.ts", // 30
  "test/e2e/data-safety-wal.test.ts", // 28
  "test/e2e/authz.test.ts", // 27
  "test/storage/lsm-model.test.ts", // 27
  "test/e2e/durability.test.ts", // 26
  "test/e2e/cluster-workers.test.ts", // 24
  "test/cli/cert.test.ts", // 24
  "test/e2e/ops.test.ts", // 22
  "test/e2e/data-safety-lock.test.ts", // 20
  "test/raft/sim.test.ts", // 20
  "test/e2e/cluster-tls.test.ts", // 20
  "test/e2e/shard-workers.test.ts", // 20
  "test/storage/wal.test.ts", // 20
  "test/e2e/cluster-five.test.ts", // 18
  "test/e2e/cluster-seedless-restart.test.ts", // 17
  "test/e2e/cluster-join-flood.test.ts", // 16
  "test/e2e/cluster.test.ts", // 16
  "test/e2e/cluster-start.test.ts", // 15
  "test/storage/lsm-regressions.test.ts", // 15
  "test/client/client.test.ts", // 14
  "test/e2e/data-safety-dir.test.ts", // 14
  "test/e2e/cluster-address-change.test.ts", // 13
  "test/api/h2-differential.test.ts", // 13
  "test/e2e/tls.test.ts", // 13
  "test/e2e/membership.test.ts", // 13
  "test/membership/sim.test.ts", // 12
  "test/e2e/rpc-addr-first.test.ts", // 11
  "test/e2e/cluster-failover.test.ts", // 10
  "test/membership/udp.test.ts", // 10
  "test/api/h2-conformance.test.ts", // 9
  "test/e2e/reloaded-files.test.ts", // 9
  "test/e2e/data-safety-node-id.test.ts", // 8
  "test/deploy/deploy.test.ts", // 8
  "test/e2e/data-safety-shard-dir.test.ts", // 8
  "test/e2e/shutdown.test.ts", // 8
  "test/e2e/hangup.test.ts", // 8
  "test/replication/multi-raft.test.ts", // 8
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
  const rank = (f: string): number => {
    const i = LONGEST_FIRST.indexOf(f);
    return i < 0 ? LONGEST_FIRST.length : i;
  };
  // A stable sort: the files not listed keep their name order.
  isolated.sort((a, b) => rank(a) - rank(b));
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
