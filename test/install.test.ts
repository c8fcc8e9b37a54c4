/**
 * A production install (`npm ci --omit=dev`, as deploy/README.md documents) has no pinned
 * Node.js 24: npm runs the install script on the machine's Node.js (Node 20 on Debian), and
 * bin/cairn must find a Node.js that runs Cairn.
 */
import assert from "node:assert/strict";
import { execFileSync, spawnSync } from "node:child_process";
import { cpSync, mkdtempSync, readFileSync, rmSync, symlinkSync } from "node:fs";
import { tmpdir } from "node:os";
import { dirname, join } from "node:path";
import { describe, it } from "node:test";

const ROOT = join(import.meta.dirname, "..");
const pkg = JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as {
  scripts: Record<string, string>;
};

/** Node.js binaries on PATH other than the pinned one this test runs on. */
function otherNodes(): string[] {
  const out = spawnSync("sh", ["-c", "which -a node"], { encoding: "utf8" }).stdout;
  return out
    .split("\n")
    .filter((p) => p !== "")
    .filter((p) => {
      const version = spawnSync(p, ["-p", "process.versions.node"], { encoding: "utf8" }).stdout;
      return version.trim() !== process.versions.node;
    });
}

describe("a production install", () => {
  it("runs an install script any Node.js can run (plain JavaScript, not TypeScript)", () => {
    const install = pkg.scripts["install"] ?? "";
    const file = /^node (\S+)$/.exec(install)?.[1];
    assert.ok(file !== undefined, `install is "node FILE": ${install}`);
    assert.match(file, /\.m?js$/, "Node 20 cannot run a .ts file");
  });

  it("the install script runs on the machine's older Node.js and exits 0 without a compiler", (t) => {
    const older = otherNodes();
    if (older.length === 0) {
      t.skip("no Node.js on PATH other than the pinned one");
      return;
    }
    const file = /^node (\S+)$/.exec(pkg.scripts["install"] ?? "")?.[1] ?? "";
    for (const node of older) {
      // CC=false: the build fails as it would without a compiler; the script warns, exits 0,
      // and leaves an existing addon in place.
      const r = spawnSync(node, [join(ROOT, file)], {
        cwd: ROOT,
        env: { ...process.env, CC: "false" },
        encoding: "utf8",
      });
      assert.equal(r.status, 0, `${node}: ${r.stderr}`);
      assert.match(r.stderr, /native addon was not built/);
    }
  });

  it("without a C compiler the install script says so in words and exits 0 (1 with CAIRN_REQUIRE_NATIVE=1)", () => {
    const file = /^node (\S+)$/.exec(pkg.scripts["install"] ?? "")?.[1] ?? "";
    // A compiler that is not there, as on a machine without one (cc: ENOENT); an existing addon
    // stays in place.
    const env = { ...process.env, CC: "cairn-test-no-such-cc" };
    const r = spawnSync(process.execPath, [join(ROOT, file)], { cwd: ROOT, env, encoding: "utf8" });
    assert.equal(r.status, 0, r.stderr);
    assert.match(
      r.stderr,
      /native addon was not built \(no C compiler: cairn-test-no-such-cc not found; set CC to use another/,
    );
    assert.doesNotMatch(r.stderr, /ENOENT/, "not spawnSync's error code");
    const required = spawnSync(process.execPath, [join(ROOT, file)], {
      cwd: ROOT,
      env: { ...env, CAIRN_REQUIRE_NATIVE: "1" },
      encoding: "utf8",
    });
    assert.equal(required.status, 1, required.stderr);
  });

  it("bin/cairn runs on the machine's Node.js 24 when the pinned one is not installed", () => {
    // A checkout without node_modules/.bin/node: bin/cairn and src/ (its modules resolve
    // through the real path of src/).
    const dir = mkdtempSync(join(tmpdir(), "cairn-prod-"));
    try {
      cpSync(join(ROOT, "bin"), join(dir, "bin"), { recursive: true });
      symlinkSync(join(ROOT, "src"), join(dir, "src"));
      const withNode24 = { ...process.env, PATH: `${dirname(process.execPath)}:/usr/bin:/bin` };
      const help = execFileSync(join(dir, "bin", "cairn"), ["--help"], {
        env: withNode24,
        encoding: "utf8",
      });
      assert.match(help, /^Usage: cairn/);
      // Without a fitting Node.js it says what it needs instead.
      const none = spawnSync(join(dir, "bin", "cairn"), ["--help"], {
        env: { ...process.env, PATH: "/nonexistent" },
        encoding: "utf8",
      });
      assert.equal(none.status, 1);
      assert.match(none.stderr, /needs Node.js >=24.11 <25/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe("package-lock.json", () => {
  it("is what npm writes for package.json (hasInstallScript), so npm install leaves it unchanged", () => {
    const lock = JSON.parse(readFileSync(join(ROOT, "package-lock.json"), "utf8")) as {
      packages: Record<string, { hasInstallScript?: boolean }>;
    };
    const root = lock.packages[""];
    assert.ok(root !== undefined);
    assert.equal(
      root.hasInstallScript === true,
      pkg.scripts["install"] !== undefined,
      "the root entry's \"hasInstallScript\" matches package.json's install script",
    );
  });
});
