/**
 * The README's commands run as written in a fresh checkout: `cairn` is not on the PATH there,
 * so a command line says `bin/cairn` (or `npx cairn`).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";

const README = readFileSync(join(import.meta.dirname, "..", "README.md"), "utf8");

/** The lines of the README's ```sh blocks. */
function shellLines(markdown: string): string[] {
  const out: string[] = [];
  let inShell = false;
  for (const line of markdown.split("\n")) {
    if (line.startsWith("```")) inShell = !inShell && line.trim() === "```sh";
    else if (inShell) out.push(line);
  }
  return out;
}

describe("README.md", () => {
  it("runs the cairn command as bin/cairn or npx cairn, never a bare cairn", () => {
    const lines = shellLines(README);
    assert.ok(
      lines.some((l) => l.includes("bin/cairn")),
      "the README has cairn commands",
    );
    const bare = lines.filter((l) => /(^|[|;&]\s*)cairn\s/.test(l.trim()));
    assert.deepEqual(bare, [], "commands that fail with 'cairn: command not found'");
  });
});
