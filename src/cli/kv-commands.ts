/** `cairn put`, `get`, `delete` and `scan`: the KV service from the command line. */
import { readFile } from "node:fs/promises";
import type { KeyValue, Version } from "../client/index.ts";
import {
  b64,
  type CommandOptions,
  describeSkipped,
  EXIT,
  expectPositionals,
  GLOBAL_HELP,
  intFlag,
  parseVersionFlag,
  printable,
  RANGE_OPTIONS,
  rangeOf,
  runCommand,
  str,
  UsageError,
  writeJson,
  writeOut,
} from "./common.ts";
import type { Io } from "./io.ts";

/**
 * A KEY argument. A key is one byte or more: an empty one (`cairn get "$KEY"`, KEY unset) is a
 * usage error before anything is sent; it was sent, and a node down made it "unavailable".
 */
function keyArgument(text: string): string {
  if (text === "") throw new UsageError("KEY must not be empty: a key is one byte or more");
  return text;
}

const v = (x: Version): string => `${x.index}/${x.term}`;
const jsonVersion = (x: Version): { index: number; term: number } => ({
  index: x.index,
  term: x.term,
});

export const PUT_HELP = `Usage: cairn put KEY [VALUE | -] [options]

Stores VALUE under KEY and prints the write's version (INDEX/TERM). The value comes from the
argument, from --file, or from standard input when it is "-".

Options:
  --file PATH                  read the value from a file
  --expected-version I/T       compare-and-set: write only if KEY's current version is I/T
                               (exit 4 on a mismatch)
${GLOBAL_HELP}

Examples:
  cairn put greeting hello
  cairn put config.json --file ./config.json
  echo -n 42 | cairn put counter -
  cairn put counter 43 --expected-version 17/2
  cairn --endpoints 10.0.0.5:7447 put k v --output json
`;

/** Each command's flags besides the global ones: those its help lists (test/cli/help.test.ts). */
export const PUT_OPTIONS = {
  file: { type: "string" },
  "expected-version": { type: "string" },
} as const satisfies CommandOptions;

export function put(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "put",
    PUT_HELP,
    PUT_OPTIONS,
    argv,
    io,
    async ({ values, positionals, globals, client }) => {
      const file = str(values, "file");
      expectPositionals(positionals, ["KEY", "VALUE"], file === undefined ? 0 : 1);
      const [text, arg] = positionals as [string, string | undefined];
      const key = keyArgument(text);
      if (file !== undefined && arg !== undefined)
        throw new UsageError("give the value either as an argument or with --file, not both");
      const expectedVersion = parseVersionFlag(str(values, "expected-version"));
      const value =
        file !== undefined
          ? await readFile(file).catch((e: Error) => {
              throw new UsageError(`--file: ${e.message}`);
            })
          : arg === "-"
            ? await readAll(io.stdin)
            : new TextEncoder().encode(arg);
      const version = await client().put(
        key,
        value,
        expectedVersion === undefined ? {} : { expectedVersion },
      );
      if (globals.output === "json")
        writeJson(io, { key: b64(new TextEncoder().encode(key)), version: jsonVersion(version) });
      else io.stdout.write(`OK ${v(version)}\n`);
      return EXIT.ok;
    },
  );
}

export const GET_HELP = `Usage: cairn get KEY [options]

Prints KEY's value (raw bytes; a newline is added on a terminal). Exit 1 when KEY does not exist.

Options:
  --serializable         read from the local replica without a quorum check (may be stale)
  --print-version        print the version (INDEX/TERM) on a line before the value
${GLOBAL_HELP}

Examples:
  cairn get greeting
  cairn get greeting --output json      # {"key":"<base64>","value":"<base64>","version":{...}}
  cairn get config.json > config.json
`;

export const GET_OPTIONS = {
  serializable: { type: "boolean" },
  "print-version": { type: "boolean" },
} as const satisfies CommandOptions;

export function get(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "get",
    GET_HELP,
    GET_OPTIONS,
    argv,
    io,
    async ({ values, positionals, globals, client }) => {
      expectPositionals(positionals, ["KEY"]);
      const key = keyArgument(positionals[0] as string);
      const got = await client().get(key, {
        consistency: values["serializable"] === true ? "serializable" : "linearizable",
      });
      if (globals.output === "json") {
        writeJson(
          io,
          got === null
            ? { key: b64(new TextEncoder().encode(key)), found: false }
            : { ...jsonItem(got), found: true },
        );
      } else if (got === null) {
        io.stderr.write(`cairn get: key ${JSON.stringify(key)} not found\n`);
      } else {
        if (values["print-version"] === true) io.stdout.write(`${v(got.version)}\n`);
        io.stdout.write(got.value);
        if (io.stdout.isTTY === true) io.stdout.write("\n");
      }
      return got === null ? EXIT.notFound : EXIT.ok;
    },
  );
}

export const DELETE_HELP = `Usage: cairn delete KEY [options]

Deletes KEY. Exit 1 when KEY did not exist (nothing was deleted).

Options:
  --expected-version I/T       compare-and-set: delete only if KEY's current version is I/T
                               (exit 4 on a mismatch)
${GLOBAL_HELP}

Examples:
  cairn delete greeting
  cairn delete counter --expected-version 18/2
`;

export const DELETE_OPTIONS = {
  "expected-version": { type: "string" },
} as const satisfies CommandOptions;

export function del(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "delete",
    DELETE_HELP,
    DELETE_OPTIONS,
    argv,
    io,
    async ({ values, positionals, globals, client }) => {
      expectPositionals(positionals, ["KEY"]);
      const key = keyArgument(positionals[0] as string);
      const expectedVersion = parseVersionFlag(str(values, "expected-version"));
      const res = await client().delete(
        key,
        expectedVersion === undefined ? {} : { expectedVersion },
      );
      if (globals.output === "json")
        writeJson(io, {
          key: b64(new TextEncoder().encode(key)),
          deleted: res.deleted,
          version: jsonVersion(res.version),
        });
      else if (res.deleted) io.stdout.write(`deleted ${v(res.version)}\n`);
      else io.stderr.write(`cairn delete: key ${JSON.stringify(key)} not found\n`);
      return res.deleted ? EXIT.ok : EXIT.notFound;
    },
  );
}

export const SCAN_HELP = `Usage: cairn scan [--prefix P | --from A --to B] [--limit N] [options]

Lists keys in key order with their values: every key, those starting with P, or those in
[A, B) (either bound may be left out). Text output is one "KEY<TAB>VALUE" line per key; keys or
values that are not printable UTF-8 are shown JSON-quoted or as base64:... . Keys are read
and printed a page (up to 1,000 keys) at a time, so a scan of any size runs in bounded memory;
--timeout bounds each page's read. A scan that fails part-way exits non-zero after printing
the pages it read.

Options:
  --prefix P             keys starting with P
  --from A               first key (inclusive)
  --to B                 end key (exclusive)
  --limit N              at most N keys (default 0: all of them)
  --keys-only            print only the keys (JSON: each item's key and version, no value)
  --serializable         read one replica of each shard without a quorum check (may be stale)
  --skip-unavailable     with --serializable: leave out a shard none of whose replicas
                         answers instead of failing, and name it (stderr; JSON:
                         "skipped_shards"): for a cluster that lost a shard's replicas
${GLOBAL_HELP}

Examples:
  cairn scan --prefix user/
  cairn scan --from a --to m --limit 100
  cairn scan --prefix user/ --output json | jq -r '.items[].key | @base64d'
`;

export const SCAN_OPTIONS = {
  ...RANGE_OPTIONS,
  limit: { type: "string" },
  "keys-only": { type: "boolean" },
  serializable: { type: "boolean" },
  "skip-unavailable": { type: "boolean" },
} as const satisfies CommandOptions;

export function scan(argv: readonly string[], io: Io): Promise<number> {
  return runCommand(
    "scan",
    SCAN_HELP,
    SCAN_OPTIONS,
    argv,
    io,
    async ({ values, positionals, globals, client }) => {
      expectPositionals(positionals, []);
      const range = rangeOf(values);
      const limit = intFlag(values, "limit", 0, 0);
      const serializable = values["serializable"] === true;
      const skip = values["skip-unavailable"] === true;
      if (skip && !serializable)
        throw new UsageError(
          "--skip-unavailable needs --serializable: a linearizable scan reads every shard",
        );
      const pages = client().scanPages(range, {
        limit,
        consistency: serializable ? "serializable" : "linearizable",
        ...(skip ? { skipUnavailableShards: true } : {}),
      });
      const skipped = new Set<number>();
      const json = globals.output === "json";
      const keysOnly = values["keys-only"] === true;
      // JSON: the one object of before, {"items":[...],"more":...}, written a page at a time.
      let out = json ? '{"items":[' : "";
      let first = true;
      let more = false;
      for await (const page of pages) {
        for (const it of page.items) {
          if (json) {
            const item = keysOnly
              ? { key: b64(it.key), version: jsonVersion(it.version) }
              : jsonItem(it);
            out += `${first ? "" : ","}${JSON.stringify(item)}`;
            first = false;
          } else {
            out += keysOnly
              ? `${printable(it.key)}\n`
              : `${printable(it.key)}\t${printable(it.value)}\n`;
          }
        }
        await writeOut(io, out);
        out = "";
        more = page.more;
        for (const id of page.skippedShards) skipped.add(id);
      }
      const left = [...skipped].sort((a, b) => a - b);
      if (json)
        await writeOut(
          io,
          `${out}],"more":${more}${skip ? `,"skipped_shards":${JSON.stringify(left)}` : ""}}\n`,
        );
      else if (more) io.stderr.write(`cairn scan: more keys beyond --limit ${limit}\n`);
      if (left.length > 0)
        io.stderr.write(
          `cairn scan: WARNING: no replica of ${describeSkipped(left)} answered: their keys are missing\n`,
        );
      return EXIT.ok;
    },
  );
}

function jsonItem(it: KeyValue): {
  key: string;
  value: string;
  version: { index: number; term: number };
} {
  return { key: b64(it.key), value: b64(it.value), version: jsonVersion(it.version) };
}

async function readAll(stream: NodeJS.ReadableStream): Promise<Uint8Array> {
  const chunks: Buffer[] = [];
  for await (const c of stream) chunks.push(typeof c === "string" ? Buffer.from(c) : c);
  return Buffer.concat(chunks);
}
