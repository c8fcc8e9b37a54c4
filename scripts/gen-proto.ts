/**
 * Generates TypeScript types for proto/ into src/api/generated/ with proto-loader-gen-types.
 *
 *   npm run gen:proto            rewrite src/api/generated/
 *   npm run check:proto          fail if src/api/generated/ is not what proto/ generates
 */
import { execFileSync } from "node:child_process";
import { mkdtempSync, readdirSync, readFileSync, rmSync, statSync } from "node:fs";
import { tmpdir } from "node:os";
import { join, relative } from "node:path";

const root = join(import.meta.dirname, "..");
const out = join(root, "src", "api", "generated");
const protos = [
  "cairn/v1/kv.proto",
  "cairn/v1/meta.proto",
  "cairn/v1/admin.proto",
  "cairn/v1/raft.proto",
];

function generate(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  execFileSync(
    join(root, "node_modules", ".bin", "proto-loader-gen-types"),
    [
      "--keepCase",
      "--longs=Number",
      "--enums=String",
      "--defaults",
      "--oneofs",
      "--grpcLib=@grpc/grpc-js",
      "--targetFileExtension=.ts",
      "--importFileExtension=.ts",
      // Relative to the repository root: the generated files name the .proto they come from.
      "-I",
      "proto",
      "-O",
      dir,
      ...protos,
    ],
    { cwd: root, stdio: ["ignore", "ignore", "inherit"] },
  );
}

function files(dir: string): Map<string, string> {
  const found = new Map<string, string>();
  const walk = (d: string): void => {
    for (const name of readdirSync(d)) {
      const p = join(d, name);
      if (statSync(p).isDirectory()) walk(p);
      else found.set(relative(dir, p), readFileSync(p, "utf8"));
    }
  };
  walk(dir);
  return found;
}

if (process.argv.includes("--check")) {
  const tmp = mkdtempSync(join(tmpdir(), "cairn-proto-"));
  try {
    generate(tmp);
    const want = files(tmp);
    const have = files(out);
    const stale = [...new Set([...want.keys(), ...have.keys()])].filter(
      (f) => want.get(f) !== have.get(f),
    );
    if (stale.length > 0) {
      console.error(
        `src/api/generated/ is out of date with proto/ (${stale.join(", ")}): run npm run gen:proto`,
      );
      process.exit(1);
    }
  } finally {
    rmSync(tmp, { recursive: true, force: true });
  }
} else {
  generate(out);
}
