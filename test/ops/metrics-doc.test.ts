/**
 * docs/operations.md's "Metrics catalogue", held to what a node exports: one row per family of
 * `/metrics` and no other, each with the family's type and label names, and the histograms'
 * bounds as the export writes them. A metric added to the node without its row, or a row left
 * for a metric that is gone, fails here.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { CairnMetrics } from "../../src/ops/index.ts";
import { CATALOGUE, familyTypes, samples } from "./prom-text.ts";

const DOC = readFileSync(join(import.meta.dirname, "..", "..", "docs", "operations.md"), "utf8");

/** The section's tables: each row's cells, by the first cell without its backticks. */
function section(): string {
  const text = DOC.split("\n## Metrics catalogue\n")[1]?.split("\n## ")[0];
  assert.ok(text !== undefined, 'docs/operations.md has a "## Metrics catalogue" section');
  return text;
}

function table(text: string, header: string): Map<string, string[]> {
  const body = text.split(`\n${header}\n`)[1]?.split("\n\n")[0];
  assert.ok(body !== undefined, `the section has the table "${header}"`);
  const rows = new Map<string, string[]>();
  for (const line of body.split("\n").slice(1)) {
    const cells = line
      .slice(2, -2)
      .split(" | ")
      .map((c) => c.trim());
    rows.set((cells[0] ?? "").replaceAll("`", ""), cells.slice(1));
  }
  return rows;
}

/** The label names a Labels cell gives: its backticked words outside parentheses. */
function labelNames(cell: string): string[] {
  if (cell === "—") return [];
  let outside = cell;
  for (let prev = ""; prev !== outside;) {
    prev = outside;
    outside = outside.replace(/\([^()]*\)/g, "");
  }
  return [...outside.matchAll(/`([a-z_]+)`/g)].map((m) => m[1] as string);
}

async function exported(): Promise<{
  text: string;
  types: Map<string, string>;
  labels: Map<string, readonly string[]>;
}> {
  const m = new CairnMetrics({
    nodeId: "n1",
    processStats: () => ({ cpuSeconds: 1, residentBytes: 1 }),
  });
  const text = await m.expose();
  const labels = new Map<string, readonly string[]>();
  // The contract's families: their labels as test/ops/metrics.test.ts checks them on series.
  for (const [name, , names] of CATALOGUE) labels.set(name, names);
  // The others are prom-client's, which keep their label names.
  for (const metric of m.registry.getMetricsAsArray() as unknown as {
    name: string;
    labelNames?: readonly string[];
  }[]) {
    if (!labels.has(metric.name)) labels.set(metric.name, metric.labelNames ?? []);
  }
  return { text, types: familyTypes(text), labels };
}

describe("docs/operations.md's metrics catalogue, held to the export", () => {
  it("has one row per exported family, with its type and label names", async () => {
    const rows = table(section(), "| Metric | Type | Labels | Meaning |");
    const { types, labels } = await exported();
    assert.deepEqual([...rows.keys()].sort(), [...types.keys()].sort());
    for (const [name, [type = "", labelCell = ""]] of rows) {
      assert.equal(type.toUpperCase(), types.get(name), `${name}'s type`);
      assert.deepEqual(
        labelNames(labelCell).sort(),
        [...(labels.get(name) ?? [])].sort(),
        `${name}'s labels (${labelCell})`,
      );
    }
  });

  it("says how many families the contract fixes", () => {
    const count = /Exactly these (\d+) families/.exec(section())?.[1];
    assert.equal(Number(count), CATALOGUE.length);
  });

  it("gives each histogram's bounds as the export writes them", async () => {
    const rows = table(section(), "| Histogram | Bounds (ms), then `+Inf` |");
    const { text, types } = await exported();
    const histograms = [...types].filter(([, t]) => t === "HISTOGRAM").map(([n]) => n);
    assert.deepEqual([...rows.keys()].sort(), histograms.sort());
    const all = samples(text);
    for (const [name, [cell = ""]] of rows) {
      // One series' bounds: the first `le` seen again ends them.
      const les: string[] = [];
      for (const s of all.filter((s) => s.name === `${name}_bucket`)) {
        const le = s.labels["le"] as string;
        if (les.includes(le)) break;
        les.push(le);
      }
      const shown = cell
        .replace(/\([^)]*\)/g, "")
        .replace(/^in seconds:/, "")
        .split(",")
        .map((n) => n.trim());
      assert.deepEqual([...shown, "+Inf"], les, `${name}'s bounds`);
    }
  });

  it("reads a Labels cell as a person does", () => {
    assert.deepEqual(
      labelNames("`level` (`L0`…`L5`, the input level: L6 is only an output), `result` (`a`, `b`)"),
      ["level", "result"],
    );
    assert.deepEqual(labelNames("—"), []);
  });
});
