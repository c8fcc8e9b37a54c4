import assert from "node:assert/strict";
import { spawn } from "node:child_process";
import { once } from "node:events";
import { describe, it } from "node:test";
import { Writable } from "node:stream";
import type { MembershipLogger } from "../../src/membership/index.ts";
import { createLogger, type LogLevel, silentLogger } from "../../src/ops/index.ts";

function capture(level: LogLevel = "trace") {
  const lines: string[] = [];
  const logger = createLogger({
    level,
    target: "node",
    fields: { node_id: "n1" },
    sink: { write: (s: string) => lines.push(s) },
    now: () => new Date("2026-11-21T14:00:00.000Z"),
  });
  return { lines, logger };
}

/** Every line is one JSON object with exactly the five fields, in order, of the right types. */
function parseLines(lines: readonly string[]): Array<Record<string, unknown>> {
  return lines.map((line) => {
    assert.ok(line.endsWith("\n"), "a line ends with a newline");
    assert.equal(line.indexOf("\n"), line.length - 1, "one object per line");
    const obj = JSON.parse(line) as Record<string, unknown>;
    assert.deepEqual(Object.keys(obj), ["timestamp", "level", "target", "message", "fields"]);
    assert.equal(typeof obj["timestamp"], "string");
    assert.equal(new Date(obj["timestamp"] as string).toISOString(), obj["timestamp"]);
    assert.match(obj["level"] as string, /^(TRACE|DEBUG|INFO|WARN|ERROR)$/);
    assert.equal(typeof obj["target"], "string");
    assert.equal(typeof obj["message"], "string");
    assert.equal(typeof obj["fields"], "object");
    assert.notEqual(obj["fields"], null);
    assert.ok(!Array.isArray(obj["fields"]));
    return obj;
  });
}

describe("JSON logger", () => {
  it("writes the exact line shape", () => {
    const { lines, logger } = capture();
    logger.info("started", { shard_id: 0 });
    assert.equal(
      lines[0],
      '{"timestamp":"2026-11-21T14:00:00.000Z","level":"INFO","target":"node","message":"started","fields":{"node_id":"n1","shard_id":0}}\n',
    );
  });

  it("writes every level upper case, fields always an object", () => {
    const { lines, logger } = capture();
    logger.trace("t");
    logger.debug("d");
    logger.info("i");
    logger.warn("w");
    logger.error("e");
    silentLogger.error("never");
    const objs = parseLines(lines);
    assert.deepEqual(
      objs.map((o) => o["level"]),
      ["TRACE", "DEBUG", "INFO", "WARN", "ERROR"],
    );
    assert.deepEqual(objs[0]?.["fields"], { node_id: "n1" });
  });

  it("drops lines below the level", () => {
    const { lines, logger } = capture("warn");
    logger.info("no");
    logger.debug("no");
    logger.warn("yes");
    logger.child("raft").error("yes");
    assert.deepEqual(
      parseLines(lines).map((o) => o["message"]),
      ["yes", "yes"],
    );
    assert.equal(logger.isLevelEnabled("info"), false);
    assert.equal(logger.isLevelEnabled("error"), true);
  });

  it("child loggers set the target and add fields; a call's fields win", () => {
    const { lines, logger } = capture();
    const raft = logger.child("raft", { shard_id: 3 });
    raft.info("campaign", { term: 2 });
    raft.child("raft.log", { shard_id: 4 }).info("x", { node_id: "n2" });
    logger.info("root");
    const [a, b, c] = parseLines(lines);
    assert.equal(a?.["target"], "raft");
    assert.deepEqual(a?.["fields"], { node_id: "n1", shard_id: 3, term: 2 });
    assert.equal(b?.["target"], "raft.log");
    assert.deepEqual(b?.["fields"], { node_id: "n2", shard_id: 4 });
    assert.deepEqual(c?.["fields"], { node_id: "n1" });
  });

  it("never writes bytes (keys, values): they become their length", () => {
    const { lines, logger } = capture();
    const key = Buffer.from("secret-key");
    logger.warn("oops", { key, nested: { value: new Uint8Array([1, 2, 3]) } });
    assert.ok(!lines[0]?.includes("secret"));
    assert.deepEqual(parseLines(lines)[0]?.["fields"], {
      node_id: "n1",
      key: "<10 bytes>",
      nested: { value: "<3 bytes>" },
    });
  });

  it("serialises errors, bigints, cycles and odd numbers safely", () => {
    const { lines, logger } = capture();
    const err = Object.assign(new Error("boom", { cause: new Error("root") }), { code: "E_X" });
    const cyclic: Record<string, unknown> = { a: 1 };
    cyclic["self"] = cyclic;
    logger.error("failed", { err, big: 10n, cyclic, nan: Number.NaN, skip: undefined });
    const fields = parseLines(lines)[0]?.["fields"] as Record<string, unknown>;
    const e = fields["err"] as Record<string, unknown>;
    assert.equal(e["message"], "boom");
    assert.equal(e["code"], "E_X");
    assert.equal((e["cause"] as Record<string, unknown>)["message"], "root");
    assert.equal(typeof e["stack"], "string");
    assert.equal(fields["big"], "10");
    assert.deepEqual(fields["cyclic"], { a: 1, self: "[Circular]" });
    assert.equal(fields["nan"], "NaN");
    assert.ok(!("skip" in fields));
  });

  it("bounds a line: a 1 MiB string field is cut, marked, and the line stays one JSON object", () => {
    // A peer's error message, a client's address or name: of any length, and a line of any size
    // with it (a log shipper cuts or drops a line of megabytes).
    const { lines, logger } = capture();
    const huge = "x".repeat(1024 * 1024);
    logger.warn("a peer's call failed", { peer: "n2", error: huge, shard_id: 3 });
    assert.equal(lines.length, 1);
    const line = lines[0] ?? "";
    assert.ok(Buffer.byteLength(line) <= 16 * 1024, `a line of ${Buffer.byteLength(line)} bytes`);
    const obj = parseLines(lines)[0] ?? {};
    assert.equal(obj["message"], "a peer's call failed");
    const fields = obj["fields"] as Record<string, unknown>;
    assert.equal(fields["node_id"], "n1");
    assert.equal(fields["peer"], "n2");
    assert.equal(fields["shard_id"], 3);
    const error = fields["error"] as string;
    assert.match(error, /^x{1000,}…\[cut: 1048576 characters\]$/);
  });

  it("bounds a line in bytes, whatever makes it long", () => {
    const { lines, logger } = capture();
    const big = (n: number, s: string): string => s.repeat(n);
    // Characters JSON escapes (6 bytes each), and 4-byte ones: never cut within a pair.
    logger.info("control", { s: big(200_000, "\u0001") });
    logger.info("emoji", { s: big(200_000, "😀") });
    logger.info(big(100_000, "m"), {});
    logger.error("an error", { err: new Error(big(100_000, "e"), { cause: big(50_000, "c") }) });
    logger.info("many", { list: Array.from({ length: 100_000 }, (_, i) => `item-${i}`) });
    logger.info("wide", {
      ids: new Set(Array.from({ length: 100_000 }, (_, i) => i)),
      byName: new Map(Array.from({ length: 10_000 }, (_, i) => [`name-${i}`, big(50, "v")])),
    });
    const nested = (d: number): unknown =>
      d === 0 ? big(64, "z") : Array.from({ length: 8 }, () => nested(d - 1));
    logger.info("deep", { tree: nested(5) });
    logger.info(big(10, "ok"), { fine: "small" });
    assert.equal(lines.length, 8);
    for (const line of lines) {
      assert.ok(Buffer.byteLength(line) <= 16 * 1024, `a line of ${Buffer.byteLength(line)} bytes`);
    }
    const objs = parseLines(lines);
    const fieldsOf = (i: number): Record<string, unknown> =>
      objs[i]?.["fields"] as Record<string, unknown>;
    assert.match(fieldsOf(0)["s"] as string, /…\[cut: 200000 characters\]$/);
    const emoji = fieldsOf(1)["s"] as string;
    assert.match(emoji, /^(😀)+…\[cut: 400000 characters\]$/u);
    assert.match(objs[2]?.["message"] as string, /^m+…\[cut: 100000 characters\]$/);
    const err = fieldsOf(3)["err"] as Record<string, unknown>;
    assert.match(err["message"] as string, /…\[cut: 100000 characters\]$/);
    assert.match(err["cause"] as string, /…\[cut: 50000 characters\]$/);
    const list = fieldsOf(4)["list"] as string[];
    assert.equal(list[0], "item-0");
    assert.match(list.at(-1) ?? "", /^…\[cut: \d+ more entries\]$/);
    assert.match(JSON.stringify(fieldsOf(5)), /cut: \d+ more entries/);
    // Cut as far as they go, fields of many lists within lists are still too long: left out.
    assert.deepEqual(Object.keys(fieldsOf(6)), ["log_fields_cut"]);
    assert.match(fieldsOf(6)["log_fields_cut"] as string, /^left out, the line was \d+ bytes$/);
    assert.deepEqual(objs[7], {
      timestamp: "2026-11-21T14:00:00.000Z",
      level: "INFO",
      target: "node",
      message: big(10, "ok"),
      fields: { node_id: "n1", fine: "small" },
    });
  });

  it("can be handed to membership as its logger", () => {
    const { lines, logger } = capture();
    const forMembership: MembershipLogger = logger.child("membership");
    forMembership.warn("suspect", { member: "n2" });
    assert.equal(parseLines(lines)[0]?.["target"], "membership");
  });

  it("survives a sink that throws", () => {
    const logger = createLogger({
      sink: {
        write: () => {
          throw new Error("EPIPE");
        },
      },
    });
    assert.doesNotThrow(() => logger.error("x"));
  });

  it("survives a stream sink whose reader went away (EPIPE reported as an 'error' event)", async () => {
    // A pipe whose reader died (`cairn serve | log-shipper`, the shipper restarted) fails the
    // write asynchronously, as process.stdout does: an 'error' event nobody heard ended the node.
    const sink = new Writable({
      write(_chunk, _encoding, done) {
        done(Object.assign(new Error("write EPIPE"), { code: "EPIPE" }));
      },
    });
    const logger = createLogger({ sink });
    const uncaught: unknown[] = [];
    const onUncaught = (err: unknown): void => void uncaught.push(err);
    process.on("uncaughtException", onUncaught);
    try {
      logger.info("a");
      logger.child("raft").info("b");
      await new Promise((resolve) => setImmediate(resolve));
      await new Promise((resolve) => setImmediate(resolve));
    } finally {
      process.off("uncaughtException", onUncaught);
    }
    assert.deepEqual(uncaught, []);
    assert.ok(sink.destroyed, "the sink did fail");
  });
});

describe("a shard worker's log sink (fdSink)", () => {
  it(
    "writes every line whole into a pipe whose reader is slow (waits, loses none)",
    { timeout: 20_000 },
    async () => {
      // A worker thread writes its lines to fd 1 itself, and a pipe's fd is non-blocking: a
      // plain writeSync threw EAGAIN once the pipe was full (the line lost), or wrote part of it.
      const script = [
        `import { fdSink } from ${JSON.stringify(new URL("../../src/ops/log.ts", import.meta.url).pathname)};`,
        // As in a node: the main thread's process.stdout makes the pipe's fd non-blocking.
        `process.stdout.write("");`,
        `const sink = fdSink(1);`,
        `for (let i = 0; i < 2000; i++) sink.write(JSON.stringify({ i, pad: "x".repeat(200) }) + "\\n");`,
      ].join("\n");
      const child = spawn(process.execPath, ["--input-type=module", "-e", script], {
        stdio: ["ignore", "pipe", "inherit"],
      });
      const out = child.stdout;
      out.pause(); // the reader is slow: the pipe fills
      await new Promise((resolve) => setTimeout(resolve, 300));
      const chunks: Buffer[] = [];
      out.on("data", (c: Buffer) => chunks.push(c));
      out.resume();
      const [code] = (await once(child, "close")) as [number];
      assert.equal(code, 0);
      const lines = Buffer.concat(chunks)
        .toString("utf8")
        .split("\n")
        .filter((l) => l !== "");
      assert.equal(lines.length, 2000);
      lines.forEach((l, i) => assert.equal((JSON.parse(l) as { i: number }).i, i));
    },
  );
});
