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
 */
import { execFileSync } from "node:child_process";
import { mkdirSync, renameSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";

const root = join(import.meta.dirname, "..");
const out = join(root, "native", "build", "cairn_native.node");

try {
  const headers = join(
    dirname(createRequire(import.meta.url).resolve("node-api-headers/package.json")),
    "include",
  );
  mkdirSync(dirname(out), { recursive: true });
  const tmp = `${out}.${process.pid}.tmp`;
  execFileSync(
    process.env.CC ?? "cc",
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
  console.log(`cairn: built ${out}`);
} catch (cause) {
  const why = cause instanceof Error ? cause.message.split("\n")[0] : String(cause);
  console.warn(
    `cairn: the native addon was not built (${why}); tables will be read with pread and checksummed in JavaScript, slower but correct`,
  );
  if (process.env.CAIRN_REQUIRE_NATIVE === "1") process.exit(1);
}
