/**
 * Static bearer tokens (`auth.tokens_file`, docs/operations.md "Security"): for clients that
 * cannot hold a certificate. The file is YAML:
 *
 *     tokens:
 *       - name: ci             # who the token is: logs and refusals name it, never the token
 *         role: readwrite      # read | readwrite | admin (src/api/authz.ts)
 *         sha256: 9f86d08...   # the token's SHA-256, 64 hex digits (`printf %s TOKEN | sha256sum`)
 *       - name: ops
 *         role: admin
 *         token: s3cr3t...     # or the token itself, at least 16 characters
 *
 * Only the SHA-256 of each token is kept in memory, whichever form the file gives; a call's
 * token is hashed and looked up (src/api/call-auth.ts caches the answer per connection, so a client
 * that sends the same header on every call costs one hash per connection). The configuration
 * reads the file at start (a bad file is a configuration error, src/config/load.ts); each
 * thread that serves `rpc_addr` reads it again and looks at it every second (TokensFileWatch):
 * a changed file that reads well replaces the table for the calls that follow, one that does not
 * is reported and the table before is kept.
 */
import { createHash } from "node:crypto";
import { loadYaml } from "./yaml.ts";
import { FileRefusal, readRegularFileBounded } from "./bounded-read.ts";
import { ReadingFileWatch, stampFiles } from "./file-watch.ts";
import { CairnError } from "./errors.ts";

/** A client's role (src/api/authz.ts says what each may call), each including the ones before. */
export type Role = "read" | "readwrite" | "admin";

export function isRole(value: unknown): value is Role {
  return value === "read" || value === "readwrite" || value === "admin";
}

/** Who holds a token: the client identity src/api/authz.ts checks. */
export interface TokenHolder {
  readonly kind: "client";
  readonly name: string;
  readonly role: Role;
  readonly via: "token";
}

/** `auth.tokens_file` cannot be used; `reason` never holds a token. */
export class TokensFileError extends CairnError {
  readonly file: string;
  readonly reason: string;

  constructor(file: string, reason: string) {
    super("CAIRN_ERR_AUTH_TOKENS_FILE", `auth.tokens_file (${file}): ${reason}`);
    this.name = "TokensFileError";
    this.file = file;
    this.reason = reason;
  }
}

/** The largest file read: some 10,000 entries (one is a line of about 100 bytes). */
export const MAX_TOKENS_FILE_BYTES = 1024 * 1024;

/** The shortest token accepted in its plain form. */
export const MIN_TOKEN_LENGTH = 16;
const NAME = /^[A-Za-z0-9._@-]{1,128}$/;
const HEX64 = /^[0-9a-f]{64}$/;

/** The tokens of a file: SHA-256 (hex) → who. */
export class TokenTable {
  readonly #byHash: ReadonlyMap<string, TokenHolder>;

  constructor(byHash: ReadonlyMap<string, TokenHolder>) {
    this.#byHash = byHash;
  }

  get size(): number {
    return this.#byHash.size;
  }

  /**
   * The identity of an `authorization` metadata value, or why it is refused (never quoting the
   * value: it may be a token, or most of one).
   */
  lookup(header: string): TokenHolder | string {
    const space = header.indexOf(" ");
    if (space < 0 || header.slice(0, space).toLowerCase() !== "bearer") {
      return "is not of the form 'Bearer TOKEN'";
    }
    const token = header.slice(space + 1).trim();
    if (token.length === 0) return "holds an empty token";
    const who = this.#byHash.get(sha256Hex(token));
    return who ?? "holds a token auth.tokens_file does not list";
  }
}

export function sha256Hex(token: string): string {
  return createHash("sha256").update(token, "utf8").digest("hex");
}

/**
 * An unknown key as a refusal names it: quoted when it is a short lower-case word (a misspelt
 * `token`, `sha256`: shorter than any plain token), else by its length only, since a key may be
 * a token written where a key goes (a mapping of token to role, say).
 */
function unknownKey(key: string): string {
  return /^[a-z][a-z0-9_]{0,11}$/.test(key)
    ? `unknown key ${JSON.stringify(key)}`
    : `unknown key of ${key.length} characters (not shown: it may be a token)`;
}

/**
 * The file's text as YAML. A refusal names where and what kind of mistake (the parser's code),
 * never the parser's own words, which may quote the text: a plain token may start with any
 * visible character, and unquoted, `*s3cr3t...` is an alias ("Unresolved alias ...: s3cr3t...")
 * and `!s3cr3t...` a tag, whose warning the parser printed on standard error.
 */
function parseYaml(file: string, text: string): unknown {
  const { LineCounter, parseDocument } = loadYaml();
  const lineCounter = new LineCounter();
  // parseDocument prints no warning (parse() did, with process.emitWarning).
  const doc = parseDocument(text, { prettyErrors: false, lineCounter });
  const mistake = doc.errors[0] ?? doc.warnings[0];
  if (mistake !== undefined) {
    const { line, col } = lineCounter.linePos(mistake.pos[0]);
    const hint =
      mistake.code === "TAG_RESOLVE_FAILED" ? ": a tag (!); quote a token that starts with !" : "";
    throw new TokensFileError(
      file,
      `is not YAML (${mistake.code} at line ${line}, column ${col}${hint})`,
    );
  }
  try {
    return doc.toJS();
  } catch {
    // The only refusals of toJS: an alias that names no anchor, or too many aliases.
    throw new TokensFileError(
      file,
      "is not YAML: an alias (*) names no anchor (&) set before it, or aliases are too many; quote a token that starts with *",
    );
  }
}

/** Parses the file's text; throws TokensFileError naming the entry at fault. */
export function parseTokens(file: string, text: string): TokenTable {
  const doc = parseYaml(file, text);
  if (typeof doc !== "object" || doc === null || !("tokens" in doc)) {
    throw new TokensFileError(file, "must be a mapping with a `tokens` list");
  }
  const extra = Object.keys(doc).filter((k) => k !== "tokens");
  if (extra.length > 0) throw new TokensFileError(file, unknownKey(extra[0] as string));
  const list = (doc as { tokens: unknown }).tokens;
  if (!Array.isArray(list)) throw new TokensFileError(file, "`tokens` must be a list");
  const byHash = new Map<string, TokenHolder>();
  const names = new Set<string>();
  list.forEach((entry: unknown, i: number) => {
    const at = `tokens[${i}]`;
    if (typeof entry !== "object" || entry === null) {
      throw new TokensFileError(file, `${at} must be a mapping of name, role and sha256 or token`);
    }
    const e = entry as Record<string, unknown>;
    const unknown = Object.keys(e).find((k) => !["name", "role", "sha256", "token"].includes(k));
    if (unknown !== undefined) {
      throw new TokensFileError(file, `${at} has an ${unknownKey(unknown)}`);
    }
    const name = e["name"];
    if (typeof name !== "string" || !NAME.test(name)) {
      throw new TokensFileError(
        file,
        `${at}.name must be 1-128 of letters, digits, '.', '_', '@', '-'`,
      );
    }
    if (names.has(name)) throw new TokensFileError(file, `${at}: name ${name} appears twice`);
    names.add(name);
    const role = e["role"];
    if (!isRole(role)) {
      throw new TokensFileError(file, `${at} (${name}): role must be read, readwrite or admin`);
    }
    const hash = hashOf(file, at, name, e["sha256"], e["token"]);
    if (byHash.has(hash)) {
      throw new TokensFileError(file, `${at} (${name}): the same token as another entry`);
    }
    byHash.set(hash, { kind: "client", name, role, via: "token" });
  });
  return new TokenTable(byHash);
}

function hashOf(file: string, at: string, name: string, sha: unknown, token: unknown): string {
  if ((sha === undefined) === (token === undefined)) {
    throw new TokensFileError(file, `${at} (${name}): give exactly one of sha256 and token`);
  }
  if (sha !== undefined) {
    const hex = typeof sha === "string" ? sha.toLowerCase() : "";
    if (!HEX64.test(hex)) {
      throw new TokensFileError(file, `${at} (${name}): sha256 must be 64 hexadecimal digits`);
    }
    return hex;
  }
  if (
    typeof token !== "string" ||
    token.length < MIN_TOKEN_LENGTH ||
    !/^[\x21-\x7e]+$/.test(token)
  ) {
    throw new TokensFileError(
      file,
      `${at} (${name}): token must be at least ${MIN_TOKEN_LENGTH} visible ASCII characters`,
    );
  }
  return sha256Hex(token);
}

/** Reads and parses the file; throws TokensFileError. */
export function readTokensFile(file: string): TokenTable {
  let text: string;
  try {
    text = readRegularFileBounded(file, MAX_TOKENS_FILE_BYTES).toString("utf8");
  } catch (err) {
    if (err instanceof FileRefusal) throw new TokensFileError(file, err.reason);
    throw new TokensFileError(
      file,
      `cannot be read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`,
    );
  }
  return parseTokens(file, text);
}

/** The file's stamp now (taken before it is read, so a change in between is seen). */
export function stampTokensFile(file: string): string {
  return stampFiles([file]);
}

/** How often TokensFileWatch looks at the file. */
export const TOKENS_RELOAD_INTERVAL_MS = 1000;

/**
 * Looks at the file every `intervalMs` (stat: a file replaced by a rename is seen too) and once
 * it changed reads it again: `onReload` gets the new table, `onError` why it was refused (the
 * caller keeps its table; the watch tries again at the next change).
 */
export class TokensFileWatch extends ReadingFileWatch<TokenTable, TokensFileError> {
  constructor(
    file: string,
    readAt: string,
    onReload: (table: TokenTable) => void,
    onError: (err: TokensFileError) => void,
    intervalMs = TOKENS_RELOAD_INTERVAL_MS,
  ) {
    super(
      [file],
      readAt,
      () => readTokensFile(file),
      (err) => err instanceof TokensFileError,
      onReload,
      onError,
      intervalMs,
    );
  }
}
