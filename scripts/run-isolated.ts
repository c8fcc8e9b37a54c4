/**
 * `npm run test:isolated [-- [--concurrency=N] FILE|GLOB ...]`: runs test files each in a process
 * of its own, two at a time (N), in the order given (without files: every isolated file,
 * longest first, as scripts/test-files.ts lists them). `node --test` sorts the files it is
 * given by name, so it cannot start the longest first; node:test's run() keeps their order.
 *
 * As `node --test` with package.json's flags ran them: each file's process exits when its tests
 * end (forceExit), a test that runs past 10 minutes fails, and each file writes its verdicts to
 * the runner blocking (the `--import` this script is started with reaches each file's process:
 * test/support/blocking-stdout.ts, test/test-runner.test.ts). `--test-reporter=spec|tap` (spec
 * by default). Exit status 1 when a test failed, 2 on a bad argument.
 */
import { globSync } from "node:fs";
import { resolve } from "node:path";
import { run } from "node:test";
import { spec, tap } from "node:test/reporters";
import { testFiles } from "./test-files.ts";

/**
 * Files running at once unless `--concurrency=N` says: the checks and the in-memory files' run
 * take the rest of two cores.
 */
let concurrency = 2;
/** A test running past this fails rather than holding the run to CI's limit. */
const TEST_TIMEOUT_MS = 600_000;

function usage(message: string): never {
  process.stderr.write(
    `run-isolated: ${message}\nusage: node scripts/run-isolated.ts [--test-reporter=spec|tap] [--concurrency=N] [FILE|GLOB ...]\n`,
  );
  process.exit(2);
}

let reporter: "spec" | "tap" = "spec";
const patterns: string[] = [];
for (const arg of process.argv.slice(2)) {
  if (arg.startsWith("--test-reporter=")) {
    const name = arg.slice("--test-reporter=".length);
    if (name !== "spec" && name !== "tap") usage(`unknown reporter ${name}`);
    reporter = name;
  } else if (arg.startsWith("--concurrency=")) {
    const given = arg.slice("--concurrency=".length);
    concurrency = Number(given);
    if (!Number.isInteger(concurrency) || concurrency < 1 || concurrency > 16)
      usage(`--concurrency takes an integer from 1 to 16, not ${given}`);
  } else if (arg.startsWith("-")) {
    usage(`unknown option ${arg}`);
  } else {
    patterns.push(arg);
  }
}

const files: string[] = [];
for (const pattern of patterns.length > 0 ? patterns : testFiles().isolated) {
  const found = globSync(pattern).sort();
  if (found.length === 0) usage(`no test file matches ${pattern}`);
  for (const f of found) {
    const path = resolve(f);
    if (!files.includes(path)) files.push(path);
  }
}

const stream = run({
  files,
  concurrency,
  isolation: "process",
  forceExit: true,
  timeout: TEST_TIMEOUT_MS,
});
stream.on("test:fail", () => {
  process.exitCode = 1;
});
stream.compose(reporter === "spec" ? spec : tap).pipe(process.stdout);
