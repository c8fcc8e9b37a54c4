/**
 * Each command's `--help`, held to what its parser takes: the flags the help lists (with a
 * placeholder when the flag takes a value) are exactly the flags the command accepts, the global
 * ones included, so a flag added to a command without its line in the help, or a line left for a
 * flag that is gone, fails here. `cairn serve --help` is held to the configuration schema in
 * test/config/docs-drift.test.ts. And the exit codes the help texts and the READMEs list are
 * those the commands return (src/cli/exit-codes.ts).
 */
import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import {
  BACKUP_HELP,
  BACKUP_OPTIONS,
  RESTORE_HELP,
  RESTORE_OPTIONS,
} from "../../src/cli/backup-commands.ts";
import { BENCH_HELP, BENCH_OPTIONS } from "../../src/cli/bench.ts";
import { CERT_HELP, CERT_OPTIONS } from "../../src/cli/cert-commands.ts";
import { type CommandOptions, GLOBAL_HELP, GLOBAL_OPTIONS } from "../../src/cli/common.ts";
import { EXIT } from "../../src/cli/exit-codes.ts";
import {
  DELETE_HELP,
  DELETE_OPTIONS,
  GET_HELP,
  GET_OPTIONS,
  PUT_HELP,
  PUT_OPTIONS,
  SCAN_HELP,
  SCAN_OPTIONS,
} from "../../src/cli/kv-commands.ts";
import {
  CLUSTER_HELP,
  CLUSTER_OPTIONS,
  HEALTH_HELP,
  HEALTH_OPTIONS,
  METRICS_HELP,
  METRICS_OPTIONS,
  NODE_HELP,
  NODE_OPTIONS,
  SNAPSHOT_HELP,
  SNAPSHOT_OPTIONS,
  TRANSFER_LEADER_HELP,
  TRANSFER_LEADER_OPTIONS,
} from "../../src/cli/ops-commands.ts";

const ROOT = join(import.meta.dirname, "..", "..");

/** The client commands: their help and the flags they take besides the global ones. */
const CLIENT_COMMANDS: readonly (readonly [string, string, CommandOptions])[] = [
  ["put", PUT_HELP, PUT_OPTIONS],
  ["get", GET_HELP, GET_OPTIONS],
  ["delete", DELETE_HELP, DELETE_OPTIONS],
  ["scan", SCAN_HELP, SCAN_OPTIONS],
  ["backup", BACKUP_HELP, BACKUP_OPTIONS],
  ["restore", RESTORE_HELP, RESTORE_OPTIONS],
  ["cluster", CLUSTER_HELP, CLUSTER_OPTIONS],
  ["health", HEALTH_HELP, HEALTH_OPTIONS],
  ["metrics", METRICS_HELP, METRICS_OPTIONS],
  ["snapshot", SNAPSHOT_HELP, SNAPSHOT_OPTIONS],
  ["transfer-leader", TRANSFER_LEADER_HELP, TRANSFER_LEADER_OPTIONS],
  ["node", NODE_HELP, NODE_OPTIONS],
  ["bench", BENCH_HELP, BENCH_OPTIONS],
];

interface Listed {
  /** Long flag → whether its line gives it a value (`--file PATH`) or not (`--watch`). */
  readonly long: Map<string, boolean>;
  readonly short: Set<string>;
}

/**
 * The flags a help lists: the first column of each line of its options block (from `Options:`
 * or `Global options:` to the next blank line), `-h, --help` and `--cert FILE, --key FILE`
 * alike; and an alias its description names (`alias -w/--write-out`).
 */
function listed(help: string): Listed {
  const lines = help.split("\n");
  const start = lines.findIndex((l) => l === "Options:" || l === "Global options:");
  assert.ok(start >= 0, "the help has an options block");
  const end = lines.findIndex((l, i) => i > start && l.trim() === "");
  const block = lines.slice(start, end === -1 ? undefined : end);
  const long = new Map<string, boolean>();
  const short = new Set<string>();
  for (const line of block) {
    const column = /^ {2}(-\S.*?)(?: {2,}|$)/.exec(line)?.[1];
    if (column !== undefined) {
      for (const part of column.split(", ")) {
        const m = /^(?:-(\w)|--([a-z][a-z-]*))(?: (\S+))?$/.exec(part);
        assert.ok(m !== null, `an option line reads "${part}"`);
        if (m[1] !== undefined) short.add(m[1]);
        if (m[2] !== undefined) long.set(m[2], m[3] !== undefined);
      }
    }
    for (const m of line.matchAll(/alias -(\w)\/--([a-z][a-z-]*)/g)) {
      short.add(m[1] as string);
      long.set(m[2] as string, true);
    }
  }
  return { long, short };
}

function assertHelpMatches(name: string, help: string, options: CommandOptions): void {
  const { long, short } = listed(help);
  assert.deepEqual(
    [...long.keys()].sort(),
    Object.keys(options).sort(),
    `cairn ${name}: the flags its --help lists, and those its parser takes`,
  );
  for (const [flag, spec] of Object.entries(options)) {
    assert.equal(
      long.get(flag),
      spec.type === "string",
      `cairn ${name} --${flag}: ${spec.type === "string" ? "takes a value, its help line shows none" : "takes no value, its help line shows one"}`,
    );
  }
  const shorts = Object.values(options).flatMap((o) => (o.short === undefined ? [] : [o.short]));
  assert.deepEqual([...short].sort(), shorts.sort(), `cairn ${name}: short flags`);
}

describe("each command's --help", () => {
  for (const [name, help, options] of CLIENT_COMMANDS) {
    it(`cairn ${name}: lists exactly the flags it takes, global ones included`, () => {
      assertHelpMatches(name, help, { ...GLOBAL_OPTIONS, ...options });
    });
  }

  it("cairn cert: lists exactly the flags it takes", () => {
    assertHelpMatches("cert", CERT_HELP, CERT_OPTIONS);
  });

  it("reads a help's options as a person does", () => {
    const { long, short } = listed(
      "Usage: x\n\nOptions:\n  --file PATH   a file\n  --watch       follow\n                --not-an-option here\n  --cert FILE, --key FILE\n                both\n  --output F    alias -w/--write-out\n  -h, --help    help\n\nExamples:\n  --after the block\n",
    );
    assert.deepEqual(
      [...long.entries()].sort(),
      [
        ["cert", true],
        ["file", true],
        ["help", false],
        ["key", true],
        ["output", true],
        ["watch", false],
        ["write-out", true],
      ].sort(),
    );
    assert.deepEqual([...short].sort(), ["h", "w"]);
  });
});

describe("the exit codes the texts list", () => {
  const codes = Object.values(EXIT)
    .map(Number)
    .sort((a, b) => a - b);
  /** The codes of an "Exit codes: 0 ok, 1 not found, …" sentence. */
  const sentence = (text: string, start: string): number[] => {
    const from = text.indexOf(start);
    assert.ok(from >= 0, `the text says "${start}"`);
    const body = text.slice(from, text.indexOf(".", from));
    return [...body.matchAll(/(?:^|[:,]\s*)(\d+) [a-z]/g)].map((m) => Number(m[1]));
  };

  it("are the client commands' own, in their --help", () => {
    assert.deepEqual(sentence(GLOBAL_HELP, "Exit codes:"), codes);
  });

  it("are the client commands' own, in src/cli/README.md", () => {
    const readme = readFileSync(join(ROOT, "src", "cli", "README.md"), "utf8");
    assert.deepEqual(sentence(readme, "Exit codes:"), codes);
  });

  it("are the client commands' own, in the README's table (and backup -'s 141)", () => {
    const readme = readFileSync(join(ROOT, "README.md"), "utf8");
    const table = readme.split("\n| exit code | meaning |\n")[1]?.split("\n\n")[0] ?? "";
    const rows = [...table.matchAll(/^\| (\d+) \|/gm)].map((m) => Number(m[1]));
    assert.deepEqual(rows, [...codes, 141]);
  });
});
