/**
 * The gossip keys (`cluster.gossip_key_file`, docs/operations.md "Security"): the shared keys
 * that seal SWIM's datagrams (src/membership/seal.ts), as Consul and Serf seal their gossip. The
 * file is text, one key a line, each 32 random bytes in base64 (`cairn cert create-gossip-key`);
 * blank lines and lines starting with `#` are skipped:
 *
 *     # the first key seals what this node sends; every key listed opens what it receives
 *     q3Vx0mU7n1bW4cQK0hQv2sY9pL6tR8eA1fZ5jD3kN0o=
 *     Wm8sF2pQ9rT4vX7yB1cE5hJ0kL3nO6uA9dG2iM5qS8w=
 *
 * Keys rotate without a restart: add the new key as the second line on every node, then make it
 * the first on every node, then remove the old one. The configuration reads the file at start
 * (a bad file is a configuration error, src/config/load.ts); the node looks at it every second
 * (GossipKeyFileWatch): a changed file that reads well replaces the keys for the datagrams that
 * follow, one that does not is reported and the keys before are kept. No error names a key.
 */
import { createHash } from "node:crypto";
import { FileRefusal, readRegularFileBounded } from "./bounded-read.ts";
import { CairnError } from "./errors.ts";
import { ReadingFileWatch, stampFiles } from "./file-watch.ts";

/** Bytes of one key: AES-256. */
export const GOSSIP_KEY_BYTES = 32;
/** Keys one file may list (a rotation needs two; the bound keeps a datagram's work fixed). */
export const MAX_GOSSIP_KEYS = 8;
/** Bytes of a key's id, on every sealed datagram: the first bytes of its SHA-256. */
export const GOSSIP_KEY_ID_BYTES = 4;
/** The largest file read: eight keys are 360 bytes, the rest room for comments. */
export const MAX_GOSSIP_KEY_FILE_BYTES = 64 * 1024;

/** One key and the id a sealed datagram names it by. */
export interface GossipKey {
  readonly id: Buffer;
  readonly key: Buffer;
}

/** The keys of a file, in its order: the first seals, each opens. Never empty. */
export type GossipKeys = readonly [GossipKey, ...GossipKey[]];

/** `cluster.gossip_key_file` cannot be used; `reason` never holds a key. */
export class GossipKeyFileError extends CairnError {
  readonly file: string;
  readonly reason: string;

  constructor(file: string, reason: string) {
    super("CAIRN_ERR_GOSSIP_KEY_FILE", `cluster.gossip_key_file (${file}): ${reason}`);
    this.name = "GossipKeyFileError";
    this.file = file;
    this.reason = reason;
  }
}

/** The id of a key: the first GOSSIP_KEY_ID_BYTES of its SHA-256. */
export function gossipKeyId(key: Buffer): Buffer {
  return createHash("sha256").update(key).digest().subarray(0, GOSSIP_KEY_ID_BYTES);
}

const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;

/** Parses a key file's text; throws GossipKeyFileError naming the line, never its content. */
export function parseGossipKeys(file: string, text: string): GossipKeys {
  const keys: GossipKey[] = [];
  const lines = text.split(/\r?\n/);
  for (const [i, raw] of lines.entries()) {
    const line = raw.trim();
    if (line === "" || line.startsWith("#")) continue;
    const key = BASE64.test(line) ? Buffer.from(line, "base64") : null;
    if (key === null || key.length !== GOSSIP_KEY_BYTES || key.toString("base64") !== line) {
      throw new GossipKeyFileError(
        file,
        `line ${i + 1} is not a key: each key is ${GOSSIP_KEY_BYTES} bytes in base64 (44 characters; \`cairn cert create-gossip-key\` makes one)`,
      );
    }
    const id = gossipKeyId(key);
    if (keys.some((k) => k.id.equals(id))) {
      throw new GossipKeyFileError(file, `line ${i + 1} repeats a key listed before it`);
    }
    if (keys.length === MAX_GOSSIP_KEYS) {
      throw new GossipKeyFileError(file, `lists more than ${MAX_GOSSIP_KEYS} keys`);
    }
    keys.push({ id, key });
  }
  const [first, ...rest] = keys;
  if (first === undefined) {
    throw new GossipKeyFileError(file, "lists no key (blank lines and # comments aside)");
  }
  return [first, ...rest];
}

/** Reads and parses the file; throws GossipKeyFileError. */
export function readGossipKeyFile(file: string): GossipKeys {
  let text: Buffer;
  try {
    text = readRegularFileBounded(file, MAX_GOSSIP_KEY_FILE_BYTES);
  } catch (err) {
    if (err instanceof FileRefusal) throw new GossipKeyFileError(file, err.reason);
    throw new GossipKeyFileError(
      file,
      `cannot be read: ${(err as NodeJS.ErrnoException).code ?? String(err)}`,
    );
  }
  return parseGossipKeys(file, text.toString("utf8"));
}

/** The file's stamp now (taken before it is read, so a change in between is seen). */
export function stampGossipKeyFile(file: string): string {
  return stampFiles([file]);
}

/** How often GossipKeyFileWatch looks at the file. */
export const GOSSIP_KEYS_RELOAD_INTERVAL_MS = 1000;

/**
 * Looks at the file every `intervalMs` (stat: a file replaced by a rename is seen too) and once
 * it changed reads it again: `onReload` gets the new keys, `onError` why they were refused (the
 * caller keeps its keys; the watch tries again at the next change).
 */
export class GossipKeyFileWatch extends ReadingFileWatch<GossipKeys, GossipKeyFileError> {
  constructor(
    file: string,
    readAt: string,
    onReload: (keys: GossipKeys) => void,
    onError: (err: GossipKeyFileError) => void,
    intervalMs = GOSSIP_KEYS_RELOAD_INTERVAL_MS,
  ) {
    super(
      [file],
      readAt,
      () => readGossipKeyFile(file),
      (err) => err instanceof GossipKeyFileError,
      onReload,
      onError,
      intervalMs,
    );
  }
}
