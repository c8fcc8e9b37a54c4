/**
 * What a shard's Raft log carries and its state machine (the shard's LSM engine) stores.
 *
 * Log entry payload of a KV command (all integers big-endian):
 *   u8 op (1 put, 2 delete) | u8 flags (bit 0: expected version present)
 *   [u64 expected index | u64 expected term] | u32 key length | key | value (put only)
 *
 * Log entry payload of a meta command (shard 0's log only; src/cluster/meta.ts):
 *   u8 op (3) | u8 flags (0) | encodeMetaCommand bytes
 *
 * LSM layout: user keys are stored under the prefix 0x01 (so keys sort exactly as the user's),
 * internal records under 0x00: `0x00 raft/conf`, and in shard 0 the meta records
 * `0x00 meta/...`. A user value is stored as u64 index | u64 term | bytes: the version of the
 * write that produced it.
 */
import {
  decodeMetaCommand,
  encodeMetaCommand,
  META_KEY_PREFIX,
  type MetaCommand,
} from "../cluster/index.ts";
import { CairnError } from "../common/errors.ts";
import type { ConfState } from "../raft/index.ts";

export interface Version {
  readonly index: number;
  readonly term: number;
}

/** "The key must not exist", as an expected version. */
export const ABSENT: Version = { index: 0, term: 0 };

export type KvCommand =
  | {
      readonly op: "put";
      readonly key: Uint8Array;
      readonly value: Uint8Array;
      readonly expected?: Version;
    }
  | { readonly op: "delete"; readonly key: Uint8Array; readonly expected?: Version };

const OP_PUT = 1;
const OP_DELETE = 2;
const OP_META = 3;
const FLAG_EXPECTED = 1;

/**
 * Every byte of a command or a stored value is written, so they take uninitialised memory from
 * Node's buffer pool: one small allocation instead of an ArrayBuffer of its own per write (each
 * a malloc and an object the garbage collector tracks and sweeps), the larger part of a Put's GC.
 */
function allocate(length: number): Buffer {
  return Buffer.allocUnsafe(length);
}

export function encodeCommand(cmd: KvCommand): Uint8Array {
  const hasExpected = cmd.expected !== undefined;
  const valueLength = cmd.op === "put" ? cmd.value.length : 0;
  const out = allocate(2 + (hasExpected ? 16 : 0) + 4 + cmd.key.length + valueLength);
  out[0] = cmd.op === "put" ? OP_PUT : OP_DELETE;
  out[1] = hasExpected ? FLAG_EXPECTED : 0;
  let at = 2;
  if (cmd.expected !== undefined) {
    writeU64(out, at, cmd.expected.index);
    writeU64(out, at + 8, cmd.expected.term);
    at += 16;
  }
  out.writeUInt32BE(cmd.key.length, at);
  out.set(cmd.key, at + 4);
  if (cmd.op === "put") out.set(cmd.value, at + 4 + cmd.key.length);
  return out;
}

export function decodeCommand(data: Uint8Array): KvCommand {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  if (data.length < 6) throw malformed("too short");
  const op = data[0];
  const flags = data[1] as number;
  let at = 2;
  let expected: Version | undefined;
  if ((flags & FLAG_EXPECTED) !== 0) {
    if (data.length < at + 16 + 4) throw malformed("truncated version");
    expected = { index: readU64(view, at), term: readU64(view, at + 8) };
    at += 16;
  }
  const keyLength = view.getUint32(at);
  at += 4;
  if (at + keyLength > data.length) throw malformed("truncated key");
  const key = data.subarray(at, at + keyLength);
  const rest = data.subarray(at + keyLength);
  if (op === OP_PUT)
    return expected === undefined
      ? { op: "put", key, value: rest }
      : { op: "put", key, value: rest, expected };
  if (op === OP_DELETE)
    return expected === undefined ? { op: "delete", key } : { op: "delete", key, expected };
  throw malformed(`unknown op ${op}`);
}

/** The log entry payload of a meta command. */
export function encodeMetaEntry(cmd: MetaCommand): Uint8Array {
  const body = encodeMetaCommand(cmd);
  const out = new Uint8Array(2 + body.length);
  out[0] = OP_META;
  out.set(body, 2);
  return out;
}

/** Whether a (non-empty) entry payload is a meta command rather than a KV command. */
export function isMetaEntry(data: Uint8Array): boolean {
  return data[0] === OP_META;
}

export function decodeMetaEntry(data: Uint8Array): MetaCommand {
  if (data.length < 2 || data[0] !== OP_META) throw malformed("not a meta command");
  if (data[1] !== 0) throw malformed(`unknown meta flags ${data[1]}`);
  return decodeMetaCommand(data.subarray(2));
}

/**
 * Why the data of a normal log entry is no command this build applies (a KV or a meta command,
 * or empty: a leader's no-op), or null when it is one. A follower checks each entry a peer
 * sends before it takes it in (Peers.receive): a committed entry that does not decode stops its
 * node, at its apply and again at every restart as the log replays (which is right for an op of
 * a newer build: it must not be misread), so one that does not decode must never reach the log.
 */
export function entryDataProblem(data: Uint8Array): string | null {
  if (data.length === 0) return null;
  try {
    if (isMetaEntry(data)) decodeMetaEntry(data);
    else decodeCommand(data);
    return null;
  } catch (err) {
    return err instanceof Error ? err.message : String(err);
  }
}

function malformed(why: string): CairnError {
  return new CairnError("CAIRN_ERR_MALFORMED_COMMAND", `malformed KV command in the log: ${why}`);
}

const USER = 0x01;
const INTERNAL = 0x00;
const CONF_KEY = new Uint8Array([INTERNAL, ...new TextEncoder().encode("raft/conf")]);

/**
 * The LSM key of a user key, from Node's buffer pool: the engine reads it as a binary string
 * (keyFromBytes), and a plain Uint8Array this small keeps its bytes inside the object until that
 * read moves them to an ArrayBuffer of their own (~0.25 µs, and an object for the collector).
 */
export function storageKey(key: Uint8Array): Uint8Array {
  const out = allocate(key.length + 1);
  out[0] = USER;
  out.set(key, 1);
  return out;
}

/** The user key of an LSM key under the user prefix. */
export function userKey(stored: Uint8Array): Uint8Array {
  return stored.subarray(1);
}

/** The first LSM key past every user key: the end of a scan over the whole keyspace. */
export const USER_KEYS_END = new Uint8Array([USER + 1]);

export function encodeStoredValue(version: Version, value: Uint8Array): Uint8Array {
  const out = allocate(16 + value.length);
  writeU64(out, 0, version.index);
  writeU64(out, 8, version.term);
  out.set(value, 16);
  return out;
}

export function decodeStoredValue(stored: Uint8Array): { version: Version; value: Uint8Array } {
  const view = new DataView(stored.buffer, stored.byteOffset, stored.byteLength);
  return {
    version: { index: readU64(view, 0), term: readU64(view, 8) },
    value: stored.subarray(16),
  };
}

/** The LSM key of a meta record (its key as MetaState gives it, under the internal prefix). */
export function metaStorageKey(key: Uint8Array): Uint8Array {
  // Not from the pool (not a hot path): prefixEnd's slice() copies a Uint8Array, but only views
  // a Buffer, and would then change the key it was given.
  const out = new Uint8Array(key.length + 1);
  out[0] = INTERNAL;
  out.set(key, 1);
  return out;
}

/** The LSM range holding every meta record: [0x00 "meta/", 0x00 "meta0"). */
export const META_RECORDS_START = metaStorageKey(new TextEncoder().encode(META_KEY_PREFIX));
export const META_RECORDS_END = prefixEnd(META_RECORDS_START);

/** The first key after every key starting with `prefix` (whose last byte is not 0xff). */
function prefixEnd(prefix: Uint8Array): Uint8Array {
  const out = prefix.slice();
  out[out.length - 1] = (out[out.length - 1] as number) + 1;
  return out;
}

export function confKey(): Uint8Array {
  return CONF_KEY;
}

export function encodeConf(conf: ConfState): Uint8Array {
  return new TextEncoder().encode(JSON.stringify({ voters: conf.voters, learners: conf.learners }));
}

export function decodeConf(data: Uint8Array): ConfState {
  const parsed = JSON.parse(new TextDecoder().decode(data)) as ConfState;
  return { voters: parsed.voters, learners: parsed.learners };
}

function writeU64(out: Buffer, at: number, n: number): void {
  out.writeUInt32BE(Math.floor(n / 0x1_0000_0000), at);
  out.writeUInt32BE(n >>> 0, at + 4);
}

function readU64(view: DataView, at: number): number {
  return view.getUint32(at) * 0x1_0000_0000 + view.getUint32(at + 4);
}
