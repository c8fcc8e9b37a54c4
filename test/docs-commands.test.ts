/**
 * The npm scripts the documents name, held to package.json: docs/development.md lists every
 * script (the README sends a newcomer there for "every `npm run` command"), and no document
 * names a script that is not there. The logs of what happened (docs/perf-log/, docs/history/)
 * name scripts as they were then.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync } from "node:fs";
import { join, relative } from "node:path";
import { describe, it } from "node:test";

const ROOT = join(import.meta.dirname, "..");
const SCRIPTS = Object.keys(
  (JSON.parse(readFileSync(join(ROOT, "package.json"), "utf8")) as { scripts: object }).scripts,
);

/** The documents that describe the repository as it is. */
function documents(): string[] {
  const docs = readdirSync(join(ROOT, "docs"))
    .filter((n) => n.endsWith(".md"))
    .map((n) => join(ROOT, "docs", n));
  const readmes = readdirSync(join(ROOT, "src"))
    .map((d) => join(ROOT, "src", d, "README.md"))
    .filter((p) => existsSync(p));
  return [join(ROOT, "README.md"), join(ROOT, "BENCHMARKS.md"), join(ROOT, "deploy", "README.md")]
    .concat(docs)
    .concat(readmes);
}

describe("the npm scripts the documents name", () => {
  it("are all in docs/development.md", () => {
    const doc = readFileSync(join(ROOT, "docs", "development.md"), "utf8");
    // `install` is npm's hook (`npm install` runs it); `npm start` and `npm test` need no `run`.
    const missing = SCRIPTS.filter(
      (s) =>
        s !== "install" &&
        !doc.includes(`npm run ${s}`) &&
        !doc.includes(`npm ${s}`) &&
        !doc.includes(`\`${s}\``),
    );
    assert.deepEqual(missing, [], "scripts docs/development.md does not name");
  });

  it("exist in package.json", () => {
    const bad: string[] = [];
    for (const file of documents()) {
      readFileSync(file, "utf8")
        .split("\n")
        .forEach((line, i) => {
          for (const m of line.matchAll(/\bnpm run ([a-z][\w:-]*)/g)) {
            const name = m[1] as string;
            // `npm run bench:*`: the family, not a script.
            if (!name.endsWith(":") && !SCRIPTS.includes(name))
              bad.push(`${relative(ROOT, file)}:${i + 1}: ${name}`);
          }
        });
    }
    assert.deepEqual(bad, []);
  });
});
