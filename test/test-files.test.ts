/**
 * scripts/test-files.ts: which test files `npm test` runs together in one process and which
 * each in its own. A file that starts processes, directly or through a test module it imports,
 * must not share a process; nor one that asks not to.
 */
import assert from "node:assert/strict";
import { globSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { LONGEST_FIRST, testFiles } from "../scripts/test-files.ts";

const root = join(import.meta.dirname, "..");

describe("the test files npm test runs together", () => {
  const { shared, isolated } = testFiles();

  it("lists every test file once, in one list or the other", () => {
    const all = globSync("test/**/*.test.ts", { cwd: root }).sort();
    assert.deepEqual([...shared, ...isolated].sort(), all);
    assert.ok(shared.length > 50, `${shared.length} files run together`);
    assert.ok(isolated.length > 50, `${isolated.length} files run alone`);
  });

  it("runs alone a file that starts processes, directly or through the test modules it imports", () => {
    // test/e2e/kv.test.ts starts servers through test/support/server-process.ts; the chaos
    // smoke through ./run.ts → ./cluster.ts; lsm.test.ts starts its crash children itself.
    for (const f of ["test/e2e/kv.test.ts", "test/chaos/chaos.test.ts", "test/storage/lsm.test.ts"])
      assert.ok(isolated.includes(f), f);
  });

  it("runs alone a file that changes what the process shares, or asks to", () => {
    // mock.timers; `// test: own process` (a budget measured in the process's CPU time).
    for (const f of ["test/common/soonest-timer.test.ts", "test/ops/shard-metrics.test.ts"])
      assert.ok(isolated.includes(f), f);
  });

  it("runs in-memory tests together", () => {
    for (const f of [
      "test/raft/log.test.ts",
      "test/storage/bloom.test.ts",
      "test/cluster/view.test.ts",
    ])
      assert.ok(shared.includes(f), f);
  });

  it("starts the isolated files longest first, the rest after in name order", () => {
    // Every entry of the list names a file that runs alone: a renamed or merged file's entry
    // is caught here, not left to run it in name order unnoticed.
    for (const f of LONGEST_FIRST) assert.ok(isolated.includes(f), `${f} is an isolated file`);
    assert.deepEqual(isolated.slice(0, LONGEST_FIRST.length), LONGEST_FIRST);
    const rest = isolated.slice(LONGEST_FIRST.length);
    assert.deepEqual(rest, [...rest].sort());
  });
});
