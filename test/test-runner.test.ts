/**
 * `npm test` must report every test it ran. Each test file runs in a child process that sends
 * its verdicts to the runner through its stdout, a pipe; with `--test-force-exit` the child
 * calls process.exit() when its tests end, and on Linux a pipe's pending writes are dropped
 * then (nodejs/node#64833): a run reported 806 of 814 tests, `fail 0`, exit 0. This runs the
 * runner with the flags of package.json's `test:unit` on generated files whose verdicts are
 * large (long names), and counts the verdicts that reach it: the runner of the files that each
 * run in a process of their own (`test:isolated`), and the one that runs files together in one
 * process (`test:shared`; scripts/test.sh runs both).
 *
 * The runner's own output goes to a file, as `.ci/run`'s does: the runner exits the same way,
 * and into a pipe it too can lose its last lines, summary included (its exit status stands).
 * That is the reporter's stream in the runner, not the test files' pipes this test is about;
 * through a pipe here the test failed in one run of six to fifteen, the summary cut off.
 */
import assert from "node:assert/strict";
import { spawnSync } from "node:child_process";
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";

const root = join(import.meta.dirname, "..");
const FILES = 12;
const TESTS_PER_FILE = 20;

/**
 * The node flags of the npm script `script` (e.g. `--import <file> --test --test-force-exit`),
 * a path of the repository made absolute; without its reporter (TAP is counted below).
 */
function unitTestFlags(script: "test:isolated" | "test:shared"): string[] {
  const pkg = JSON.parse(readFileSync(join(root, "package.json"), "utf8")) as {
    scripts: Record<string, string>;
  };
  const words = pkg.scripts[script]?.split(/\s+/) ?? [];
  assert.equal(words[0], "node", `${script} runs node`);
  const flags: string[] = [];
  for (const word of words.slice(1)) {
    if (word.startsWith("--test-reporter")) continue;
    if (word.startsWith("./")) flags.push(join(root, word));
    else if (word.startsWith("-") || flags.at(-1) === "--import") flags.push(word);
  }
  return flags;
}

describe("the test runner as npm test runs it", () => {
  for (const script of ["test:isolated", "test:shared"] as const)
    it(`reports the verdict of every test of every file (${script})`, () => {
      const dir = mkdtempSync(join(tmpdir(), "cairn-runner-"));
      try {
        for (let f = 1; f <= FILES; f++) {
          writeFileSync(
            join(dir, `f${f}.test.mjs`),
            `import { test } from "node:test";\n` +
              `for (let i = 1; i <= ${TESTS_PER_FILE}; i++) ` +
              `test(\`f${f} t\${i} \` + "x".repeat(5000), () => {});\n`,
          );
        }
        const env = { ...process.env };
        // Inside a test file: without this the nested runner would report as a child of ours.
        delete env["NODE_TEST_CONTEXT"];
        const output = join(dir, "runner.tap");
        const fd = openSync(output, "w");
        let run;
        try {
          run = spawnSync(
            process.execPath,
            [...unitTestFlags(script), "--test-reporter=tap", "*.test.mjs"],
            {
              cwd: dir,
              env,
              encoding: "utf8",
              stdio: ["ignore", fd, "pipe"],
              timeout: 60_000,
            },
          );
        } finally {
          closeSync(fd);
        }
        assert.equal(run.status, 0, run.stderr);
        const reported = /^# tests (\d+)$/m.exec(readFileSync(output, "utf8"))?.[1];
        assert.equal(Number(reported), FILES * TESTS_PER_FILE, "verdicts that reached the runner");
      } finally {
        rmSync(dir, { recursive: true, force: true });
      }
    });

  it("test:isolated starts its files in the order given, not by name (longest first: scripts/test-files.ts)", () => {
    const dir = mkdtempSync(join(tmpdir(), "cairn-runner-order-"));
    try {
      const started = join(dir, "started");
      // Each file records its start, then holds its slot for a second: the third file starts
      // only once one of the first two has ended, and both of those have started by then.
      for (const name of ["c", "a", "b"])
        writeFileSync(
          join(dir, `${name}.test.mjs`),
          `import { appendFileSync } from "node:fs";\n` +
            `import { test } from "node:test";\n` +
            `test("${name}", async () => {\n` +
            `  appendFileSync(${JSON.stringify(started)}, "${name}\\n");\n` +
            `  await new Promise((r) => setTimeout(r, 1000));\n` +
            `});\n`,
        );
      const env = { ...process.env };
      delete env["NODE_TEST_CONTEXT"];
      const run = spawnSync(
        process.execPath,
        [
          ...unitTestFlags("test:isolated"),
          "--test-reporter=tap",
          "c.test.mjs",
          "a.test.mjs",
          "b.test.mjs",
        ],
        { cwd: dir, env, encoding: "utf8", timeout: 60_000 },
      );
      assert.equal(run.status, 0, run.stderr);
      const order = readFileSync(started, "utf8").trim().split("\n");
      // By name, a and b would start first and c last.
      assert.deepEqual([order.slice(0, 2).sort(), order[2]], [["a", "c"], "b"]);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
