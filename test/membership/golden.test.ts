/**
 * Golden scenario scripts for the SWIM core: test/membership/testdata/swim_<case>.txt.
 *
 * A script is a list of blocks: a command, a `----` line, and the output the command must
 * produce (membership events in the order observers reported them, or a state dump), then a
 * blank line. Commands:
 *
 *   cluster a b c      start members; b, c, … join through a; run until quiet (50 ticks)
 *   add d [shards=N]   start one more member that joins through the first one
 *   tick N             advance every live member N ticks
 *   crash c            c stops; its datagrams are lost
 *   restart c          a new process for c (incarnation 0) joins through the first member
 *   partition a b | c  datagrams between the groups are lost
 *   heal               remove the partition
 *   leave c            c leaves gracefully (then stops)
 *   state              each live member's view: member=state@incarnation
 *   errors             refusals reported since the last `errors`
 *
 * `UPDATE_GOLDEN=1 npm run test:unit` rewrites the expected output from the actual.
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync, writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { TinyNet } from "./tiny-net.ts";

const dir = join(import.meta.dirname, "testdata");
const update = process.env["UPDATE_GOLDEN"] === "1";

interface Block {
  readonly command: string;
  readonly expected: string[];
}

function parse(text: string): Block[] {
  const blocks: Block[] = [];
  const lines = text.split("\n");
  let i = 0;
  while (i < lines.length) {
    const line = lines[i] ?? "";
    if (line.trim() === "" || line.startsWith("#")) {
      i++;
      continue;
    }
    assert.equal(lines[i + 1], "----", `line ${i + 2}: expected ---- after "${line}"`);
    const expected: string[] = [];
    i += 2;
    while (i < lines.length && (lines[i] ?? "") !== "") expected.push(lines[i++] ?? "");
    blocks.push({ command: line, expected });
  }
  return blocks;
}

class Runner {
  readonly net = new TinyNet(7);
  first = "";
  readonly #printed = new Map<string, number>();
  readonly #errorsPrinted = new Map<string, number>();

  run(command: string): string[] {
    const [verb, ...args] = command.split(/\s+/);
    switch (verb) {
      case "cluster": {
        const [first, ...rest] = args;
        assert.ok(first !== undefined);
        this.first = first;
        this.net.add(first);
        for (const n of rest) this.net.add(n).join([`${first}.test:7447`]);
        this.net.flush();
        this.net.tick(50);
        return this.#events();
      }
      case "add": {
        const [name, shards] = args;
        assert.ok(name !== undefined);
        const total = shards === undefined ? 1024 : Number(shards.replace("shards=", ""));
        this.net.add(name, total).join([`${this.first}.test:7447`]);
        this.net.flush();
        return this.#events();
      }
      case "tick":
        this.net.tick(Number(args[0]));
        return this.#events();
      case "crash":
        for (const n of args) this.net.crashed.add(n);
        return this.#events();
      case "restart":
        for (const n of args) {
          this.net.add(n).join([`${this.first}.test:7447`]);
          this.#printed.set(n, 0);
        }
        this.net.flush();
        return this.#events();
      case "partition": {
        const bar = args.indexOf("|");
        const left = new Set(args.slice(0, bar));
        this.net.drop = (from, to) => left.has(from) !== left.has(to);
        return this.#events();
      }
      case "heal":
        this.net.drop = () => false;
        return this.#events();
      case "leave":
        for (const n of args) {
          this.net.get(n).leave();
          this.net.flush();
          this.net.crashed.add(n);
        }
        return this.#events();
      case "state":
        return this.#state();
      case "errors":
        return this.#errors();
      default:
        throw new Error(`unknown command: ${command}`);
    }
  }

  #events(): string[] {
    const out: string[] = [];
    for (const [name, events] of this.net.events) {
      const from = this.#printed.get(name) ?? 0;
      for (const e of events.slice(from)) {
        out.push(`${name}: ${e.kind} ${e.member.meta.id}@${e.member.incarnation}`);
      }
      this.#printed.set(name, events.length);
    }
    return out.length === 0 ? ["(no events)"] : out;
  }

  #state(): string[] {
    const out: string[] = [];
    for (const [name, swim] of this.net.members) {
      if (this.net.crashed.has(name)) continue;
      const views = swim
        .members()
        .map((m) => `${m.meta.id}=${m.state}@${m.incarnation}`)
        .join(" ");
      out.push(`${name}: ${views}`);
    }
    return out;
  }

  #errors(): string[] {
    const out: string[] = [];
    for (const [name, errors] of this.net.errors) {
      const from = this.#errorsPrinted.get(name) ?? 0;
      for (const e of errors.slice(from)) out.push(`${name}: ${e.code}: ${e.message}`);
      this.#errorsPrinted.set(name, errors.length);
    }
    return out.length === 0 ? ["(no errors)"] : out;
  }
}

describe("SWIM golden scripts", () => {
  for (const file of readdirSync(dir).filter((f) => f.startsWith("swim_") && f.endsWith(".txt"))) {
    it(file, () => {
      const path = join(dir, file);
      const text = readFileSync(path, "utf8");
      const header = text
        .split("\n")
        .filter(
          (l, i, all) => l.startsWith("#") && all.slice(0, i).every((p) => p.startsWith("#")),
        );
      const runner = new Runner();
      const actual: Block[] = parse(text).map((b) => ({
        command: b.command,
        expected: runner.run(b.command),
      }));
      if (update) {
        const body = actual.map((b) => [b.command, "----", ...b.expected].join("\n")).join("\n\n");
        writeFileSync(path, `${header.length > 0 ? `${header.join("\n")}\n\n` : ""}${body}\n`);
        return;
      }
      const expected = parse(text);
      actual.forEach((b, i) => {
        assert.deepEqual(b.expected, expected[i]?.expected, `${file}: after "${b.command}"`);
      });
    });
  }
});
