/**
 * Builds Cairn's Node-API addon, native/src/cairn_native.c, into native/build/cairn_native.node.
 * Runs on `npm install` / `npm ci` (the package's `install` script); `npm run build:native`
 * rebuilds it by hand.
 *
 * It needs a C compiler (`$CC`, else `cc`) and the Node-API headers of the `node-api-headers`
 * package; no node-gyp, no Python, no download. Node-API is ABI-stable, so the one build serves
 * every Node.js this package runs on. The addon is an optimisation: when it cannot be built, the
 * node reads SSTables with pread instead of mapping them and computes CRC32C in JavaScript
 * (src/common/native.ts), so a failed build warns and exits 0 — unless CAIRN_REQUIRE_NATIVE=1, which makes it fail (CI sets
 * nothing; the test suite checks the addon loads on machines with a compiler).
 *
 * Plain JavaScript, unlike the rest of Cairn: the install script runs on whatever Node.js runs
 * npm, and a production install (`npm ci --omit=dev`) does not install the pinned Node.js 24
 * (a dev dependency), so this may run on an older Node.js without type stripping (Node 20 on
 * Debian). test/install.test.ts runs it on such a Node.js when the machine has one.
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, renameSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import process from "node:process";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const out = join(root, "native", "build", "cairn_native.node");
const cc = process.env.CC ?? "cc";

try {
  const headers = join(
    dirname(createRequire(import.meta.url).resolve("node-api-headers/package.json")),
    "include",
  );
  mkdirSync(dirname(out), { recursive: true });
  const tmp = `${out}.${process.pid}.tmp`;
  execFileSync(
    cc,
    [
      "-shared",
      "-fPIC",
      "-O2",
      "-Wall",
      "-Wextra",
      "-DNAPI_VERSION=8",
      `-I${headers}`,
      "-o",
      tmp,
      join(root, "native", "src", "cairn_native.c"),
    ],
    { stdio: ["ignore", "inherit", "inherit"] },
  );
  // Renamed into place: a node running from this checkout never loads a half-written file.
  renameSync(tmp, out);
  process.stdout.write(`cairn: built ${out}\n`);
} catch (cause) {
  // No compiler at all is the common case (a slim container, a fresh machine): say so in words,
  // not as spawnSync's "spawnSync cc ENOENT".
  const why =
    cause?.code === "ENOENT" && cause?.path === cc
      ? `no C compiler: ${cc} not found; set CC to use another, then run npm run build:native`
      : cause instanceof Error
        ? cause.message.split("\n")[0]
        : String(cause);
  process.stderr.write(
    `cairn: the native addon was not built (${why}); tables will be read with pread and checksummed in JavaScript, slower but correct\n`,
  );
  if (process.env.CAIRN_REQUIRE_NATIVE === "1") process.exit(1);
}
