/**
 * `cairn serve --help` and docs/operations.md's configuration table, held to the configuration
 * schema (src/config/schema.ts): the key list comes from the schema, so a key added there (in any
 * branch) must appear in both, and nothing they say about a key can outlive the key.
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { SERVE_HELP } from "../../src/cli/serve.ts";
import { CONFIG_KEYS, parseBytes } from "../../src/config/index.ts";

const DOC = readFileSync(join(import.meta.dirname, "..", "..", "docs", "operations.md"), "utf8");

/** The options block of the help: each option with its description lines. */
function helpOptions(help: string): Map<string, string> {
  const block = help.split("\nOptions:\n")[1]?.split("\n\n")[0] ?? "";
  const options = new Map<string, string>();
  let current: string | null = null;
  for (const line of block.split("\n")) {
    const m = /^ {2}(?:-\w, )?--([a-z][a-z-]*)/.exec(line);
    if (m?.[1] !== undefined) {
      current = m[1];
      options.set(current, line);
    } else if (current !== null) {
      options.set(current, `${options.get(current) ?? ""}\n${line}`);
    }
  }
  return options;
}

/** The rows of docs/operations.md's "### Keys" table: first cell without backticks → cells. */
function docRows(): Map<string, string[]> {
  const section = DOC.split("\n### Keys\n")[1]?.trimStart().split("\n\n")[0] ?? "";
  const rows = new Map<string, string[]>();
  for (const line of section.split("\n")) {
    if (!line.startsWith("| ") || line.startsWith("| Key") || line.startsWith("| ---")) continue;
    const cells = line
      .slice(2, -2)
      .split(" | ")
      .map((c) => c.trim());
    rows.set((cells[0] ?? "").replaceAll("`", ""), cells);
  }
  return rows;
}

describe("cairn serve --help, held to the configuration schema", () => {
  it("lists exactly the schema's flags, with --config and --help", () => {
    const options = helpOptions(SERVE_HELP);
    const expected = [
      ...CONFIG_KEYS.flatMap((k) => (k.flag === undefined ? [] : [k.flag])),
      "config",
      "help",
    ].sort();
    assert.deepEqual([...options.keys()].sort(), expected);
  });

  it("names each flag's environment variable and default", () => {
    const options = helpOptions(SERVE_HELP);
    for (const k of CONFIG_KEYS) {
      if (k.flag === undefined) continue;
      // Wrapped over lines: compared with its whitespace collapsed.
      const text = (options.get(k.flag) ?? "").replace(/\s+/g, " ");
      assert.ok(text.includes(k.env), `--${k.flag} names ${k.env}`);
      if (k.default !== undefined && !(Array.isArray(k.default) && k.default.length === 0)) {
        // A size in binary units (`256MiB`), read back as the schema's number of bytes.
        const shown = /default (\S+?)\)/.exec(text)?.[1] ?? "";
        const same =
          k.kind === "bytes"
            ? parseBytes(shown) === k.default
            : text.includes(`default ${String(k.default)}`);
        assert.ok(same, `--${k.flag} gives its default (${shown})`);
      }
      // Its description is the schema's own: nothing said here can contradict it.
      const first = k.doc.split(/(?<=\.) /)[0] ?? k.doc;
      assert.ok(
        text.includes(first.replace(/\s+/g, " ")),
        `--${k.flag} says the schema's "${first}"`,
      );
    }
  });

  it("gives sizes in binary units, as the configuration takes them", () => {
    const help = helpOptions(SERVE_HELP).get("rpc-max-incoming-request-bytes") ?? "";
    assert.match(help.replace(/\s+/g, " "), /default 256MiB\)/);
  });
});

describe("docs/operations.md's configuration table, held to the schema", () => {
  it("has one row per key of the schema and no other (besides the file itself)", () => {
    const rows = docRows();
    assert.deepEqual(
      [...rows.keys()].filter((k) => k !== "(the file itself)").sort(),
      CONFIG_KEYS.map((k) => k.key).sort(),
    );
  });

  it("gives each key's default, environment variable and flag as the schema does", () => {
    const rows = docRows();
    for (const k of CONFIG_KEYS) {
      const [, def = "", env = "", flag = ""] = rows.get(k.key) ?? [];
      assert.ok(env.includes(`\`${k.env}\``), `${k.key}: ${env} names ${k.env}`);
      if (k.flag === undefined) assert.equal(flag, "—", `${k.key} has no flag`);
      else assert.ok(flag.includes(`\`--${k.flag}`), `${k.key}: ${flag} names --${k.flag}`);
      if (k.default === undefined) continue; // derived (advertise addresses): said in words
      const shown = def.replaceAll("`", "");
      const same =
        k.kind === "bytes"
          ? parseBytes(shown) === parseBytes(k.default)
          : shown === (Array.isArray(k.default) ? JSON.stringify(k.default) : String(k.default));
      assert.ok(same, `${k.key}: the table's default ${def}, the schema's ${String(k.default)}`);
    }
  });
});
