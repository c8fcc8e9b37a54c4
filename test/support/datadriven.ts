/**
 * Data-driven golden scripts, in the style of etcd-io/raft's testdata:
 *
 *     # a comment
 *     command arg key=value
 *     ----
 *     expected output (no blank lines)
 *
 * Blocks are separated by blank lines. `run` executes every command against a fresh environment
 * and compares outputs; with UPDATE_GOLDEN=1 it rewrites the file with the actual outputs.
 */
import assert from "node:assert/strict";
import { readFileSync, writeFileSync } from "node:fs";

export interface Command {
  readonly name: string;
  /** Positional arguments. */
  readonly args: readonly string[];
  /** key=value arguments. */
  readonly kv: ReadonlyMap<string, string>;
  readonly line: number;
  readonly text: string;
}

interface Block {
  readonly comments: readonly string[];
  readonly command: Command;
  readonly expected: string;
}

export function parseCommand(text: string, line: number): Command {
  const words = text.trim().split(/\s+/);
  const name = words.shift() ?? "";
  const args: string[] = [];
  const kv = new Map<string, string>();
  for (const w of words) {
    const eq = w.indexOf("=");
    if (eq > 0) kv.set(w.slice(0, eq), w.slice(eq + 1));
    else args.push(w);
  }
  return { name, args, kv, line, text: text.trim() };
}

function parse(path: string, source: string): Block[] {
  const lines = source.split("\n");
  const blocks: Block[] = [];
  let comments: string[] = [];
  for (let i = 0; i < lines.length; i++) {
    const line = lines[i] as string;
    if (line.trim() === "") continue;
    if (line.startsWith("#")) {
      comments.push(line);
      continue;
    }
    if (lines[i + 1] !== "----") throw new Error(`${path}:${i + 1}: expected "----" after command`);
    const command = parseCommand(line, i + 1);
    const out: string[] = [];
    i += 2;
    while (i < lines.length && (lines[i] as string).trim() !== "") out.push(lines[i++] as string);
    blocks.push({ comments, command, expected: out.join("\n") });
    comments = [];
  }
  return blocks;
}

/** Runs a script file; `exec` returns each command's output (lines, no blank line). */
export function runScript(path: string, exec: (cmd: Command) => string): void {
  const blocks = parse(path, readFileSync(path, "utf8"));
  const rewrite = process.env.UPDATE_GOLDEN === "1";
  const rendered: string[] = [];
  for (const b of blocks) {
    let actual: string;
    try {
      actual = exec(b.command).trimEnd();
    } catch (err) {
      throw new Error(
        `${path}:${b.command.line}: ${b.command.text}: ${(err as Error).stack ?? String(err)}`,
      );
    }
    if (actual === "") actual = "ok";
    if (/\n\s*\n/.test(actual))
      throw new Error(`${path}:${b.command.line}: output contains a blank line`);
    if (rewrite) {
      rendered.push([...b.comments, b.command.text, "----", actual].join("\n"));
    } else {
      assert.equal(actual, b.expected, `${path}:${b.command.line}: ${b.command.text}`);
    }
  }
  if (rewrite) writeFileSync(path, `${rendered.join("\n\n")}\n`);
}
