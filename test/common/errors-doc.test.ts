/**
 * docs/errors.md held to the code: every error code a source file names (a `"CAIRN_ERR_…"`
 * literal under src/) is listed there, by name or by a family row (`CAIRN_ERR_WAL_*`), so that
 * an operator who finds a code in a log or an answer finds what it means.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { toServiceError } from "../../src/api/errors.ts";
import { CairnError } from "../../src/common/errors.ts";

const ROOT = join(import.meta.dirname, "..", "..");

/** Every `"CAIRN_ERR_…"` string literal in the TypeScript files under `dir`. */
function codesIn(dir: string): Set<string> {
  const codes = new Set<string>();
  for (const entry of readdirSync(dir, { withFileTypes: true, recursive: true })) {
    if (!entry.isFile() || !entry.name.endsWith(".ts")) continue;
    const text = readFileSync(join(entry.parentPath, entry.name), "utf8");
    for (const m of text.matchAll(/["'`](CAIRN_ERR_[A-Z0-9_]+)["'`]/g)) codes.add(m[1] ?? "");
  }
  return codes;
}

/** The codes docs/errors.md names, and the prefixes of its family rows (`CAIRN_ERR_WAL_*`). */
function documented(): { names: Set<string>; families: string[] } {
  const doc = readFileSync(join(ROOT, "docs", "errors.md"), "utf8");
  const names = new Set<string>();
  const families: string[] = [];
  for (const m of doc.matchAll(/`(CAIRN_ERR_[A-Z0-9_]*)(\*?)`/g)) {
    if (m[2] === "*") families.push(m[1] ?? "");
    else names.add(m[1] ?? "");
  }
  return { names, families };
}

/** The rows of the "What clients see (gRPC)" table: code → the gRPC status it names. */
function grpcTable(): Map<string, string> {
  const doc = readFileSync(join(ROOT, "docs", "errors.md"), "utf8");
  const section = doc.split("\n## What clients see (gRPC)\n")[1]?.split("\n## ")[0] ?? "";
  const rows = new Map<string, string>();
  for (const m of section.matchAll(/^\| `(CAIRN_ERR_[A-Z0-9_]+)` \| `([A-Z_]+)` \|/gm)) {
    rows.set(m[1] ?? "", m[2] ?? "");
  }
  return rows;
}

describe("docs/errors.md", () => {
  it("finds the codes in the source (the scan works)", () => {
    const codes = codesIn(join(ROOT, "src"));
    assert.ok(codes.has("CAIRN_ERR_NOT_LEADER"));
    assert.ok(codes.size > 50, `${codes.size} codes`);
  });

  it("names every error code the source raises", () => {
    const { names, families } = documented();
    const missing = [...codesIn(join(ROOT, "src"))]
      .filter((c) => !names.has(c) && !families.some((f) => c.startsWith(f)))
      .sort();
    assert.deepEqual(missing, [], `docs/errors.md does not list ${missing.join(", ")}`);
  });

  it("lists every code a gRPC answer carries with a status of its own, under that status", () => {
    const table = grpcTable();
    assert.ok(table.get("CAIRN_ERR_NOT_LEADER") === "UNAVAILABLE", "the table parses");
    const wrong: string[] = [];
    for (const code of [...codesIn(join(ROOT, "src"))].sort()) {
      const answer = toServiceError(new CairnError(code, "x"));
      if (answer.code === undefined || answer.code === status.INTERNAL) continue;
      const name = status[answer.code];
      if (table.get(code) !== name)
        wrong.push(`${code} is ${name}, the table says ${table.get(code) ?? "nothing"}`);
    }
    assert.deepEqual(wrong, []);
  });
});
