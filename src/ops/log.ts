/**
 * Structured logs, one JSON object per line, exactly as design.md §7 and contract §2.6:
 *
 *   {"timestamp":"2026-11-21T14:00:00.000Z","level":"INFO","target":"raft","message":"became leader","fields":{"node_id":"n1","shard_id":0}}
 *
 * - `level` is upper case (TRACE, DEBUG, INFO, WARN, ERROR); `fields` is always an object.
 * - There is no global logger: the node builds one with `createLogger` and hands `child(target,
 *   fields)` loggers to each module.
 * - **Never log a key or a value.** Callers must not pass user data in `fields`; as a safety net,
 *   every `Uint8Array`/`Buffer` in `fields` is written as `"<N bytes>"`, so a key or value passed
 *   by mistake never reaches the log. Keys are identified by their shard, never by their bytes.
 * - A line is at most MAX_LINE_BYTES: a string a peer or a client chose (an error's message, an
 *   address, a name) can be of any length, and a line of megabytes is one a log shipper cuts or
 *   drops, if the node's memory and the pipe hold it first. Over the bound, long strings are cut
 *   with a marker saying how long they were (formatLine), and the line is still one JSON object.
 *
 * Why not pino: pino's line is `{"level":30,"time":…,"msg":…}` plus top-level bindings. Getting
 * this shape needs `formatters.level`, a custom `timestamp` fragment, `messageKey`, `base: null`
 * and `nestedKey: "fields"` — and child bindings still land at the top level, outside `fields`,
 * and `fields` is missing when a call has none. The remaining code would be more than this file.
 * Logging is not on Cairn's hot path (no per-request lines), so one `JSON.stringify` and one
 * synchronous-on-Linux `write` per line is cheap enough, and lines are never lost on exit.
 */
import { writeSync } from "node:fs";

export const LEVELS = ["trace", "debug", "info", "warn", "error"] as const;
export type LogLevel = (typeof LEVELS)[number];

export type LogFields = Readonly<Record<string, unknown>>;

export interface Logger {
  /** The lowest level this logger writes. */
  readonly level: LogLevel;
  isLevelEnabled(level: LogLevel): boolean;
  trace(message: string, fields?: LogFields): void;
  debug(message: string, fields?: LogFields): void;
  info(message: string, fields?: LogFields): void;
  warn(message: string, fields?: LogFields): void;
  error(message: string, fields?: LogFields): void;
  /** A logger for module `target` whose lines carry `fields` too (a call's own fields win). */
  child(target: string, fields?: LogFields): Logger;
}

/** Where lines go: `process.stdout` by default; anything with a string `write` works. */
export interface LogSink {
  write(line: string): unknown;
}

export interface LoggerOptions {
  /** Default "info". */
  readonly level?: LogLevel;
  /** Default "cairn". */
  readonly target?: string;
  readonly fields?: LogFields;
  readonly sink?: LogSink;
  /** Injected for tests; default `() => new Date()`. */
  readonly now?: () => Date;
}

const RANK: Readonly<Record<LogLevel, number>> = { trace: 0, debug: 1, info: 2, warn: 3, error: 4 };
const UPPER: Readonly<Record<LogLevel, string>> = {
  trace: "TRACE",
  debug: "DEBUG",
  info: "INFO",
  warn: "WARN",
  error: "ERROR",
};

interface Shared {
  readonly level: LogLevel;
  readonly sink: LogSink;
  readonly now: () => Date;
}

class JsonLogger implements Logger {
  readonly #shared: Shared;
  readonly #target: string;
  readonly #fields: LogFields;

  constructor(shared: Shared, target: string, fields: LogFields) {
    this.#shared = shared;
    this.#target = target;
    this.#fields = fields;
  }

  get level(): LogLevel {
    return this.#shared.level;
  }

  isLevelEnabled(level: LogLevel): boolean {
    return RANK[level] >= RANK[this.#shared.level];
  }

  trace(message: string, fields?: LogFields): void {
    this.#log("trace", message, fields);
  }
  debug(message: string, fields?: LogFields): void {
    this.#log("debug", message, fields);
  }
  info(message: string, fields?: LogFields): void {
    this.#log("info", message, fields);
  }
  warn(message: string, fields?: LogFields): void {
    this.#log("warn", message, fields);
  }
  error(message: string, fields?: LogFields): void {
    this.#log("error", message, fields);
  }

  child(target: string, fields: LogFields = {}): Logger {
    return new JsonLogger(this.#shared, target, { ...this.#fields, ...fields });
  }

  #log(level: LogLevel, message: string, fields: LogFields | undefined): void {
    if (RANK[level] < RANK[this.#shared.level]) return;
    const merged = fields === undefined ? this.#fields : { ...this.#fields, ...fields };
    const line = formatLine(this.#shared.now(), level, this.#target, message, merged);
    try {
      this.#shared.sink.write(line);
    } catch {
      // A broken log sink (closed pipe) must not take the node down with it.
    }
  }
}

/** The longest line written, newline included (UTF-8 bytes). */
export const MAX_LINE_BYTES = 16 * 1024;

/**
 * How a line over MAX_LINE_BYTES is cut, tried in turn until it fits: each string (the message,
 * a field's name or value, an error's stack) to `chars` characters, each list, set, map and
 * object to `entries` entries, each with a marker of what was left out.
 */
interface Cut {
  readonly chars: number;
  readonly entries: number;
}

const CUTS: readonly Cut[] = [
  { chars: 4096, entries: 256 },
  { chars: 1024, entries: 64 },
  { chars: 256, entries: 16 },
  { chars: 64, entries: 4 },
];

/** One log line, newline included, at most MAX_LINE_BYTES. Exported for tests of the shape. */
export function formatLine(
  time: Date,
  level: LogLevel,
  target: string,
  message: string,
  fields: LogFields,
): string {
  const line = render(time, level, target, message, fields, null);
  if (fits(line)) return line;
  for (const cut of CUTS) {
    const shorter = render(time, level, target, message, fields, cut);
    if (fits(shorter)) return shorter;
  }
  // Cut to 64 characters a string and 4 entries a list, fields of many lists within lists may
  // still be too long: they are left out, and the line says so.
  return (
    JSON.stringify({
      timestamp: time.toISOString(),
      level: UPPER[level],
      target: cutString(target, 64),
      message: cutString(message, 1024),
      fields: { log_fields_cut: `left out, the line was ${Buffer.byteLength(line)} bytes` },
    }) + "\n"
  );
}

function render(
  time: Date,
  level: LogLevel,
  target: string,
  message: string,
  fields: LogFields,
  cut: Cut | null,
): string {
  return (
    JSON.stringify({
      timestamp: time.toISOString(),
      level: UPPER[level],
      target: cutString(target, cut?.chars),
      message: cutString(message, cut?.chars),
      fields: sanitizeFields(fields, cut),
    }) + "\n"
  );
}

/** Whether a line is within MAX_LINE_BYTES; a UTF-16 unit is at most 3 bytes of UTF-8. */
function fits(line: string): boolean {
  return line.length * 3 <= MAX_LINE_BYTES || Buffer.byteLength(line) <= MAX_LINE_BYTES;
}

/** `s` cut to `chars` characters (never within a surrogate pair), marked; `s` when shorter. */
function cutString(s: string, chars: number | undefined): string {
  if (chars === undefined || s.length <= chars) return s;
  const code = s.charCodeAt(chars - 1);
  const end = code >= 0xd800 && code <= 0xdbff ? chars - 1 : chars;
  return `${s.slice(0, end)}…[cut: ${s.length} characters]`;
}

/** `entries` cut to `cut.entries`, with a marker of how many were left out as the last. */
function cutEntries<T>(entries: T[], cut: Cut | null, more: (left: number) => T): T[] {
  if (cut === null || entries.length <= cut.entries) return entries;
  return [...entries.slice(0, cut.entries), more(entries.length - cut.entries)];
}

const MAX_DEPTH = 6;

function sanitizeFields(fields: LogFields, cut: Cut | null): Record<string, unknown> {
  return sanitizeEntries(definedEntries(fields), 0, [], cut);
}

/** An object's entries but those whose value is undefined (JSON leaves them out too). */
function definedEntries(value: object): Array<[string, unknown]> {
  return Object.entries(value).filter(([, v]) => v !== undefined);
}

/** An object of `entries`, each value sanitized at `depth`. */
function sanitizeEntries(
  entries: Array<[string, unknown]>,
  depth: number,
  ancestors: object[],
  cut: Cut | null,
): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  const kept = cutEntries(entries, cut, (left): [string, unknown] => [
    "…",
    `[cut: ${left} more entries]`,
  ]);
  for (const [k, v] of kept) out[cutString(k, cut?.chars)] = sanitize(v, depth, ancestors, cut);
  return out;
}

/**
 * A JSON-safe copy: errors unpacked, bytes redacted, bigints as strings, cycles cut; with `cut`,
 * long strings and collections cut too.
 */
function sanitize(value: unknown, depth: number, ancestors: object[], cut: Cut | null): unknown {
  switch (typeof value) {
    case "string":
      return cutString(value, cut?.chars);
    case "boolean":
      return value;
    case "number":
      return Number.isFinite(value) ? value : String(value);
    case "bigint":
      return value.toString();
    case "undefined":
      return null;
    case "symbol":
    case "function":
      return cutString(String(value), cut?.chars);
    case "object":
      break;
  }
  if (value === null) return null;
  if (value instanceof Uint8Array) return `<${value.byteLength} bytes>`;
  if (ArrayBuffer.isView(value) || value instanceof ArrayBuffer) {
    return `<${value.byteLength} bytes>`;
  }
  if (value instanceof Date) return Number.isNaN(value.getTime()) ? null : value.toISOString();
  if (ancestors.includes(value)) return "[Circular]";
  if (depth >= MAX_DEPTH) return "[Object]";
  const next = [...ancestors, value];
  if (value instanceof Error) {
    const e: Record<string, unknown> = {
      name: cutString(value.name, cut?.chars),
      message: cutString(value.message, cut?.chars),
    };
    const code = (value as { code?: unknown }).code;
    if (code !== undefined) e["code"] = sanitize(code, depth + 1, next, cut);
    if (value.stack !== undefined) e["stack"] = cutString(value.stack, cut?.chars);
    if (value.cause !== undefined) e["cause"] = sanitize(value.cause, depth + 1, next, cut);
    return e;
  }
  const list = (items: unknown[]): unknown[] =>
    cutEntries(items, cut, (left) => `…[cut: ${left} more entries]`).map((v) =>
      sanitize(v, depth + 1, next, cut),
    );
  if (Array.isArray(value)) return list(value);
  if (value instanceof Map) {
    const entries = [...value].map(([k, v]): [string, unknown] => [String(k), v]);
    return sanitizeEntries(entries, depth + 1, next, cut);
  }
  if (value instanceof Set) return list([...value]);
  return sanitizeEntries(definedEntries(value), depth + 1, next, cut);
}

export function isLogLevel(s: string): s is LogLevel {
  return (LEVELS as readonly string[]).includes(s);
}

/** Sinks whose 'error' events are heard already: one listener each, however many loggers. */
const heardSinks = new WeakSet<LogSink>();

/**
 * A stream sink reports a failed write asynchronously, as an 'error' event: process.stdout on a
 * pipe whose reader went away (`cairn serve | log-shipper`, the shipper restarted) says EPIPE
 * so, and an event nobody heard ended the node. Its lines are lost, the node goes on.
 */
function hearErrors(sink: LogSink): void {
  const on = (sink as { on?: unknown }).on;
  if (typeof on !== "function" || heardSinks.has(sink)) return;
  heardSinks.add(sink);
  on.call(sink, "error", () => {});
}

/** The root logger of a node; hand `child(target, fields)` loggers to its modules. */
export function createLogger(options: LoggerOptions = {}): Logger {
  const sink = options.sink ?? process.stdout;
  hearErrors(sink);
  const shared: Shared = {
    level: options.level ?? "info",
    sink,
    now: options.now ?? (() => new Date()),
  };
  return new JsonLogger(shared, options.target ?? "cairn", options.fields ?? {});
}

/** Discards everything; for tests and tools that log nowhere. */
export const silentLogger: Logger = {
  level: "error",
  isLevelEnabled: () => false,
  trace: () => {},
  debug: () => {},
  info: () => {},
  warn: () => {},
  error: () => {},
  child: () => silentLogger,
};

/**
 * A budget of log lines for one kind of event that a client can cause at will (a refused call,
 * an internal error on every request): at most `perWindow` lines every `windowMs`, so that a
 * loop cannot flood the log. `admit()` says whether a line may be written now and, if so, how
 * many were left out since the last one written (to say so on that line).
 */
export class LogWindow {
  readonly #perWindow: number;
  readonly #windowMs: number;
  readonly #now: () => number;
  #windowStart = -Infinity;
  #logged = 0;
  #suppressed = 0;

  constructor(perWindow = 10, windowMs = 10_000, now: () => number = () => performance.now()) {
    this.#perWindow = perWindow;
    this.#windowMs = windowMs;
    this.#now = now;
  }

  /** Null: leave this one out. Otherwise the lines left out before it (0 or more). */
  admit(): number | null {
    const now = this.#now();
    if (now - this.#windowStart >= this.#windowMs) {
      this.#windowStart = now;
      this.#logged = 0;
    }
    if (this.#logged >= this.#perWindow) {
      this.#suppressed++;
      return null;
    }
    this.#logged++;
    return this.takeLeftOut();
  }

  /** The lines left out since the last one written, from now on said (by the caller's line). */
  takeLeftOut(): number {
    const skipped = this.#suppressed;
    this.#suppressed = 0;
    return skipped;
  }

  /** Milliseconds until the current window ends (0 when it has). */
  msLeft(): number {
    return Math.max(0, this.#windowStart + this.#windowMs - this.#now());
  }
}

/** How long fdSink waits for room in a full pipe before it gives a line up. */
const FD_SINK_MAX_WAIT_MS = 10_000;

/**
 * A sink writing each line whole to `fd` itself, for a thread with no process.stdout of its own
 * to speak of (a shard worker's is relayed through the main thread, and a line still in that
 * relay is lost if the process exits). The main thread's process.stdout makes a pipe's fd
 * non-blocking: a plain writeSync into a full pipe (a slow log shipper) threw EAGAIN, the line
 * lost (1,712 of 2,000 in a test), or wrote part of it. This one waits for room, a millisecond
 * at a time, as long as FD_SINK_MAX_WAIT_MS for a line, and then throws (the logger drops it).
 */
export function fdSink(fd: number): LogSink {
  const pause = new Int32Array(new SharedArrayBuffer(4));
  return {
    write(line: string): void {
      const bytes = Buffer.from(line, "utf8");
      let written = 0;
      let waited = 0;
      while (written < bytes.length) {
        try {
          written += writeSync(fd, bytes, written);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code !== "EAGAIN" || waited >= FD_SINK_MAX_WAIT_MS)
            throw err;
          Atomics.wait(pause, 0, 0, 1);
          waited++;
        }
      }
    },
  };
}
