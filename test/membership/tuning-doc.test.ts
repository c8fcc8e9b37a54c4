/**
 * docs/membership.md's "Tuning" table, held to `DEFAULT_SWIM_CONFIG`: one row per setting and no
 * other, each with its default, and the durations it gives at the default 100 ms tick.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { DEFAULT_SWIM_CONFIG, DEFAULT_TICK_MS } from "../../src/membership/index.ts";

const DOC = readFileSync(join(import.meta.dirname, "..", "..", "docs", "membership.md"), "utf8");

/** The table's rows: setting → its default cell. */
function rows(): Map<string, string> {
  const section = DOC.split("\n## Tuning\n")[1]?.split("\n## ")[0];
  assert.ok(section !== undefined, 'docs/membership.md has a "## Tuning" section');
  const out = new Map<string, string>();
  for (const m of section.matchAll(/^\| `(\w+)` +\| ([^|]+?) +\|/gm)) {
    out.set(m[1] as string, m[2] as string);
  }
  return out;
}

/** "300 (30 s)", "5 (500 ms)", "3000 (5 min)" → the milliseconds in parentheses, if any. */
function durationMs(cell: string): number | undefined {
  const m = /\((\d+) (ms|s|min)\)/.exec(cell);
  if (m === null) return undefined;
  return Number(m[1]) * (m[2] === "ms" ? 1 : m[2] === "s" ? 1000 : 60_000);
}

describe("docs/membership.md's Tuning table, held to DEFAULT_SWIM_CONFIG", () => {
  it("has one row per setting, with its default", () => {
    const table = rows();
    assert.deepEqual([...table.keys()].sort(), Object.keys(DEFAULT_SWIM_CONFIG).sort());
    for (const [key, value] of Object.entries(DEFAULT_SWIM_CONFIG)) {
      const cell = table.get(key) ?? "";
      assert.equal(Number(/^\d+/.exec(cell)?.[0]), value, `${key}: ${cell}`);
      const ms = durationMs(cell);
      if (ms !== undefined) assert.equal(ms, value * DEFAULT_TICK_MS, `${key}'s duration: ${cell}`);
    }
  });

  it("is written for the default tick", () => {
    assert.match(
      DOC.split("\n## Tuning\n")[1] ?? "",
      new RegExp(`for a\\s+${DEFAULT_TICK_MS} ms tick`),
    );
  });
});
