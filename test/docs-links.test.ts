/**
 * The repository's Markdown links resolve: every relative link in a `.md` file names a file or
 * folder that exists, and a link with `#anchor` into a Markdown file names one of its headings
 * (GitHub's anchors: the heading's text in lower case, punctuation dropped, spaces as hyphens).
 * Links to other sites are not followed; links inside code are not links.
 */
import assert from "node:assert/strict";
import { existsSync, readdirSync, readFileSync, statSync } from "node:fs";
import { dirname, join, relative, resolve } from "node:path";
import { describe, it } from "node:test";

const ROOT = join(import.meta.dirname, "..");
const SKIP_DIRS = new Set(["node_modules", ".git", "data", ".cluster", ".chaos", "build"]);

/** The files under `dir` whose names match `pattern`, outside the directories in SKIP_DIRS. */
function filesUnder(dir: string, pattern: RegExp): string[] {
  const out: string[] = [];
  for (const name of readdirSync(dir)) {
    if (SKIP_DIRS.has(name) || name.startsWith(".sim")) continue;
    const path = join(dir, name);
    if (statSync(path).isDirectory()) out.push(...filesUnder(path, pattern));
    else if (pattern.test(name)) out.push(path);
  }
  return out;
}

const markdownFiles = (dir: string): string[] => filesUnder(dir, /\.md$/);
/** The code's files (TypeScript and the plain JavaScript of scripts/) under `dir`. */
const codeFiles = (dir: string): string[] => filesUnder(dir, /\.(ts|mjs|js)$/);

/** The text outside fenced code blocks, with inline code spans blanked. */
function prose(markdown: string): string[] {
  const lines: string[] = [];
  let fence: string | null = null;
  for (const line of markdown.split("\n")) {
    const m = /^\s*(```+|~~~+)/.exec(line);
    if (m?.[1] !== undefined) {
      if (fence === null) fence = m[1];
      else if (m[1].startsWith(fence)) fence = null;
      lines.push("");
      continue;
    }
    lines.push(fence === null ? line.replace(/(`+)[^`]*?\1/g, "") : "");
  }
  return lines;
}

/** GitHub's anchor for a heading's text. */
function slug(heading: string): string {
  const text = heading
    .replace(/!?\[([^\]]*)\]\([^)]*\)/g, "$1") // links: their text
    .replace(/[`*_]/g, (c) => (c === "_" ? "_" : "")) // code and emphasis marks
    .trim()
    .toLowerCase();
  return text.replace(/[^\p{L}\p{N}\s_-]/gu, "").replace(/\s/g, "-");
}

const anchorCache = new Map<string, Set<string>>();
function anchors(file: string): Set<string> {
  let set = anchorCache.get(file);
  if (set !== undefined) return set;
  set = new Set();
  const seen = new Map<string, number>();
  let fence = false;
  for (const line of readFileSync(file, "utf8").split("\n")) {
    if (/^\s*(```|~~~)/.test(line)) fence = !fence;
    if (fence) continue;
    const m = /^#{1,6}\s+(.*?)\s*#*\s*$/.exec(line);
    if (m?.[1] === undefined) continue;
    const base = slug(m[1]);
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    set.add(n === 0 ? base : `${base}-${n}`);
  }
  for (const m of readFileSync(file, "utf8").matchAll(/<a\s+(?:name|id)="([^"]+)"/g)) {
    if (m[1] !== undefined) set.add(m[1]);
  }
  anchorCache.set(file, set);
  return set;
}

interface Link {
  file: string;
  line: number;
  target: string;
}

function links(file: string): Link[] {
  const out: Link[] = [];
  prose(readFileSync(file, "utf8")).forEach((text, i) => {
    for (const m of text.matchAll(/\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)/g)) {
      if (m[1] !== undefined) out.push({ file, line: i + 1, target: m[1] });
    }
    const ref = /^\s{0,3}\[[^\]]+\]:\s+<?(\S+?)>?(\s|$)/.exec(text);
    if (ref?.[1] !== undefined) out.push({ file, line: i + 1, target: ref[1] });
  });
  return out;
}

/** Why a link does not resolve, or null when it does. */
function broken(link: Link): string | null {
  const { target } = link;
  if (/^[a-z][a-z0-9+.-]*:/i.test(target)) return null; // https:, mailto:, …
  if (target.startsWith("/")) return "an absolute path (breaks in a clone and on GitHub)";
  const hash = target.indexOf("#");
  const path = hash === -1 ? target : target.slice(0, hash);
  const anchor = hash === -1 ? null : decodeURIComponent(target.slice(hash + 1));
  const file = path === "" ? link.file : resolve(dirname(link.file), decodeURIComponent(path));
  if (!existsSync(file)) return "no such file";
  if (anchor !== null && file.endsWith(".md") && !anchors(file).has(anchor)) {
    return `no heading with anchor #${anchor} in ${relative(ROOT, file)}`;
  }
  return null;
}

/**
 * Files named in the text by their path from the repository's root (`src/api/forward.ts`,
 * `docs/storage.md`): a document that describes the code as it is must not name a file that is
 * gone. The logs of what happened (docs/perf-log/, docs/history/) name files as they were then.
 */
function pathsNamed(file: string): Link[] {
  if (/[/\\]docs[/\\](perf-log|history)[/\\]/.test(file)) return [];
  const out: Link[] = [];
  let fence = false;
  readFileSync(file, "utf8")
    .split("\n")
    .forEach((text, i) => {
      if (/^\s*(```|~~~)/.test(text)) fence = !fence;
      if (fence) return;
      const re =
        /(?<![\w/.-])((?:src|test|bench|scripts|native|proto|deploy|docs)\/[\w./-]*\.(?:ts|mjs|js|c|proto|yaml|json|md))\b/g;
      for (const m of text.matchAll(re)) {
        if (m[1] !== undefined) out.push({ file, line: i + 1, target: m[1] });
      }
    });
  return out;
}

describe("Markdown links", () => {
  it("computes GitHub's anchors", () => {
    assert.equal(
      slug("A Put, from the gRPC handler to the disk and back"),
      "a-put-from-the-grpc-handler-to-the-disk-and-back",
    );
    assert.equal(
      slug("`npm run bench:wal` — group commit vs the raw disk"),
      "npm-run-benchwal--group-commit-vs-the-raw-disk",
    );
    assert.equal(
      slug("/metrics at 1,024 shards (`npm run bench:metrics`, issue 51)"),
      "metrics-at-1024-shards-npm-run-benchmetrics-issue-51",
    );
  });

  it("resolve to files and headings that exist", () => {
    const files = markdownFiles(ROOT);
    assert.ok(files.length > 10, "the repository's Markdown files were found");
    const bad = files
      .flatMap(links)
      .map((l) => ({ l, why: broken(l) }))
      .filter((x) => x.why !== null)
      .map(({ l, why }) => `${relative(ROOT, l.file)}:${l.line}: ${l.target}: ${why}`);
    assert.deepEqual(bad, []);
  });

  it("name files, by their path from the root, that exist", () => {
    const bad = markdownFiles(ROOT)
      .flatMap(pathsNamed)
      .filter((l) => !existsSync(join(ROOT, l.target)))
      .map((l) => `${relative(ROOT, l.file)}:${l.line}: ${l.target}: no such file`);
    assert.deepEqual(bad, []);
  });
});

describe("the code's comments and messages", () => {
  // An error's "see scripts/…" is read by an operator, who cannot follow a file that is gone.
  it("name files, by their path from the root, that exist", () => {
    const files = ["src", "scripts", "bench", "test"].flatMap((d) => codeFiles(join(ROOT, d)));
    assert.ok(files.length > 100, "the repository's code was found");
    const bad = files
      .flatMap(pathsNamed)
      .filter((l) => !existsSync(join(ROOT, l.target)))
      .map((l) => `${relative(ROOT, l.file)}:${l.line}: ${l.target}: no such file`);
    assert.deepEqual(bad, []);
  });
});
