/**
 * `bin/cairn` keeps Node's module compile cache in the temporary directory (NODE_COMPILE_CACHE,
 * set before Node starts), and starts whatever that directory is: missing, read-only, or a path
 * where a directory cannot be made although its parent exists (Node's own recursive mkdir loops
 * for ever there).
 */
import assert from "node:assert/strict";
import { spawn, spawnSync } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { describe, it } from "node:test";
import { CAIRN, cleanEnv, ROOT } from "../support/server-process.ts";

/**
 * `cairn version` with TMPDIR `tmp` (Node's own compile cache settings left out): its exit
 * code, or "hung" when it has not exited after 20 s.
 */
function versionWithTmpdir(tmp: string): Promise<number | null | "hung"> {
  const env = cleanEnv({ TMPDIR: tmp });
  delete env["NODE_COMPILE_CACHE"];
  delete env["NODE_DISABLE_COMPILE_CACHE"];
  const proc = spawn(CAIRN, ["version"], { cwd: ROOT, env, stdio: "ignore" });
  return new Promise((resolve) => {
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      resolve("hung");
    }, 20_000);
    proc.once("exit", (code) => {
      clearTimeout(timer);
      resolve(code);
    });
  });
}

describe("the module compile cache", () => {
  it("is kept under the temporary directory", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cairn-compile-cache-"));
    try {
      assert.equal(await versionWithTmpdir(dir), 0);
      const cache = join(dir, "node-compile-cache");
      assert.ok(existsSync(cache), "the cache directory was made");
      // One directory per Node.js version and V8 flags, holding the modules compiled.
      assert.ok(readdirSync(cache).length > 0, "something was cached");
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("covers the first module: a second run strips no TypeScript, main.ts included", async () => {
    // Enabled by main.ts itself (as it was), the cache came after main.ts and its imports were
    // compiled, and compiling them loaded the type stripper on every run (~0.2 s of CPU).
    const dir = mkdtempSync(join(tmpdir(), "cairn-compile-cache-"));
    try {
      assert.equal(await versionWithTmpdir(dir), 0);
      const env = cleanEnv({ TMPDIR: dir, NODE_DEBUG_NATIVE: "COMPILE_CACHE" });
      delete env["NODE_COMPILE_CACHE"];
      delete env["NODE_DISABLE_COMPILE_CACHE"];
      const run = spawnSync(CAIRN, ["version"], {
        cwd: ROOT,
        env,
        encoding: "utf8",
        timeout: 20_000,
      });
      assert.equal(run.status, 0, run.stderr);
      // Node's debug log names each TypeScript module whose stripped source it took from the cache.
      const taken = run.stderr
        .split("\n")
        .filter((l) => l.includes("retrieving transpile cache for StrippedTypeScript"));
      assert.ok(
        taken.some((l) => l.includes("/src/cli/main.ts...success")),
        `main.ts was compiled again:\n${run.stderr.slice(0, 2000)}`,
      );
      assert.ok(
        taken.every((l) => l.endsWith("success")),
        `a module missed the cache:\n${taken.join("\n")}`,
      );
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it("is left out, and the command runs, where its directory cannot be made", async () => {
    const dir = mkdtempSync(join(tmpdir(), "cairn-compile-cache-"));
    try {
      const file = join(dir, "a-file");
      writeFileSync(file, "");
      // Under /proc a directory's parent exists but takes no new entry: mkdir says ENOENT, and
      // a recursive mkdir that retries the parent (EEXIST) and the child again never ends.
      for (const tmp of ["/proc/cairn-no-such-dir", "/proc", join(dir, "missing"), file]) {
        assert.equal(await versionWithTmpdir(tmp), 0, `TMPDIR=${tmp}`);
      }
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
