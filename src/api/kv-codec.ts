/**
 * Hand-written codecs for the hottest KV messages: PutRequest and GetRequest in, PutResponse and
 * GetResponse out. protobufjs decodes a request into a message instance and then copies it into
 * a plain object (with an empty Buffer made for every bytes field first), and encodes a response
 * through a plain object, a message instance and one writer operation per field: a few dozen
 * objects per call. These build the same plain objects and the same bytes directly.
 *
 * Each decoder handles the shape a client sends (each known field once, in any order, with its
 * proto3 wire type; version numbers below 2^49) and hands anything else — an unknown or repeated
 * field, a truncated or over-long message, an unknown enum value — to protobufjs, so that every
 * input decodes exactly as before, errors included. Each encoder writes what protobufjs writes
 * for the objects the handlers return (every field present is written, zeros included) and falls
 * back to protobufjs for anything else. `test/api/kv-codec.test.ts` checks both against
 * protobufjs over random messages.
 */
import type { MethodDefinition, ServiceDefinition } from "@grpc/grpc-js";

type AnyMethod = MethodDefinition<unknown, unknown>;

/** Varints up to 7 bytes (values below 2^49) are decoded here; longer ones by protobufjs. */
const MAX_FAST_VARINT_BYTES = 7;

/** Thrown inside a fast decoder: the input is not the common shape; protobufjs decodes it. */
const NOT_FAST = Symbol("not fast");

interface Cursor {
  pos: number;
}

function varint(buf: Buffer, c: Cursor, end: number): number {
  let value = 0;
  let scale = 1;
  for (let i = 0; i < MAX_FAST_VARINT_BYTES; i++) {
    if (c.pos >= end) throw NOT_FAST;
    const b = buf[c.pos++] as number;
    value += (b & 0x7f) * scale;
    if (b < 0x80) return value;
    scale *= 128;
  }
  throw NOT_FAST;
}

/** A length-delimited field's bounds, after its tag. */
function delimited(buf: Buffer, c: Cursor, end: number): number {
  const length = varint(buf, c, end);
  const stop = c.pos + length;
  if (stop > end) throw NOT_FAST;
  return stop;
}

function bytesField(buf: Buffer, c: Cursor, end: number): Buffer {
  const stop = delimited(buf, c, end);
  const out = buf.subarray(c.pos, stop);
  c.pos = stop;
  return out;
}

/** cairn.v1.Version { uint64 index = 1; uint64 term = 2; } as longs: Number, defaults: true. */
function version(buf: Buffer, c: Cursor, end: number): { index: number; term: number } {
  const stop = delimited(buf, c, end);
  let index = -1;
  let term = -1;
  while (c.pos < stop) {
    const tag = buf[c.pos++] as number;
    if (tag === 0x08 && index < 0) index = varint(buf, c, stop);
    else if (tag === 0x10 && term < 0) term = varint(buf, c, stop);
    else throw NOT_FAST;
  }
  return { index: Math.max(index, 0), term: Math.max(term, 0) };
}

function decodePut(buf: Buffer): unknown {
  const c: Cursor = { pos: 0 };
  const end = buf.length;
  let key: Buffer | null = null;
  let value: Buffer | null = null;
  let expected: { index: number; term: number } | null = null;
  while (c.pos < end) {
    const tag = buf[c.pos++] as number;
    if (tag === 0x0a && key === null) key = bytesField(buf, c, end);
    else if (tag === 0x12 && value === null) value = bytesField(buf, c, end);
    else if (tag === 0x1a && expected === null) expected = version(buf, c, end);
    else throw NOT_FAST;
  }
  const req: Record<string, unknown> = {
    key: key ?? Buffer.alloc(0),
    value: value ?? Buffer.alloc(0),
  };
  if (expected !== null) {
    req["expected_version"] = expected;
    req["_expected_version"] = "expected_version";
  }
  return req;
}

const CONSISTENCY = ["LINEARIZABLE", "SERIALIZABLE"] as const;

function decodeGet(buf: Buffer): unknown {
  const c: Cursor = { pos: 0 };
  const end = buf.length;
  let key: Buffer | null = null;
  let consistency = -1;
  while (c.pos < end) {
    const tag = buf[c.pos++] as number;
    if (tag === 0x0a && key === null) key = bytesField(buf, c, end);
    else if (tag === 0x10 && consistency < 0) consistency = varint(buf, c, end);
    else throw NOT_FAST;
  }
  const name = CONSISTENCY[Math.max(consistency, 0)];
  if (name === undefined) throw NOT_FAST;
  return { key: key ?? Buffer.alloc(0), consistency: name };
}

function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 128);
    size++;
  }
  return size;
}

function writeVarint(buf: Buffer, pos: number, n: number): number {
  while (n >= 0x80) {
    buf[pos++] = (n % 128) | 0x80;
    n = Math.floor(n / 128);
  }
  buf[pos++] = n;
  return pos;
}

/** A version the fast encoders write: two non-negative safe integers (else protobufjs does). */
function isPlainVersion(v: unknown): v is { index: number; term: number } {
  if (typeof v !== "object" || v === null) return false;
  const { index, term } = v as { index?: unknown; term?: unknown };
  return (
    Number.isSafeInteger(index) &&
    Number.isSafeInteger(term) &&
    (index as number) >= 0 &&
    (term as number) >= 0
  );
}

/** The Version message's body size (both fields written, as protobufjs writes them). */
function versionBodySize(v: { index: number; term: number }): number {
  return 2 + varintSize(v.index) + varintSize(v.term);
}

function writeVersion(buf: Buffer, pos: number, v: { index: number; term: number }): number {
  pos = writeVarint(buf, pos, versionBodySize(v));
  buf[pos++] = 0x08;
  pos = writeVarint(buf, pos, v.index);
  buf[pos++] = 0x10;
  return writeVarint(buf, pos, v.term);
}

/** PutResponse { Version version = 1; } as the Put handler returns it: `{ version }`. */
function encodePut(res: unknown): Buffer | null {
  if (typeof res !== "object" || res === null) return null;
  const keys = Object.keys(res);
  const v = (res as { version?: unknown }).version;
  if (keys.length !== 1 || keys[0] !== "version" || !isPlainVersion(v)) return null;
  const body = versionBodySize(v);
  const out = Buffer.allocUnsafe(1 + varintSize(body) + body);
  out[0] = 0x0a;
  writeVersion(out, 1, v);
  return out;
}

/**
 * GetResponse { bool found = 1; bytes value = 2; Version version = 3; } as the Get handler returns
 * it: `{ found: false }` or `{ found: true, value, version }`.
 */
function encodeGet(res: unknown): Buffer | null {
  if (typeof res !== "object" || res === null) return null;
  const r = res as { found?: unknown; value?: unknown; version?: unknown };
  const keys = Object.keys(res);
  if (keys.length === 1 && r.found === false) return Buffer.from([0x08, 0x00]);
  if (
    keys.length !== 3 ||
    r.found !== true ||
    !(r.value instanceof Uint8Array) ||
    !isPlainVersion(r.version)
  ) {
    return null;
  }
  const value = r.value;
  const body = versionBodySize(r.version);
  const size = 2 + 1 + varintSize(value.length) + value.length + 1 + varintSize(body) + body;
  const out = Buffer.allocUnsafe(size);
  out[0] = 0x08;
  out[1] = 0x01;
  out[2] = 0x12;
  let pos = writeVarint(out, 3, value.length);
  out.set(value, pos);
  pos += value.length;
  out[pos++] = 0x1a;
  writeVersion(out, pos, r.version);
  return out;
}

function withFastDecode(def: AnyMethod, decode: (buf: Buffer) => unknown): AnyMethod {
  const slow = def.requestDeserialize;
  return {
    ...def,
    requestDeserialize: (buf: Buffer) => {
      try {
        return decode(buf);
      } catch (err) {
        if (err !== NOT_FAST) throw err;
        return slow(buf);
      }
    },
  };
}

function withFastEncode(def: AnyMethod, encode: (res: unknown) => Buffer | null): AnyMethod {
  const slow = def.responseSerialize;
  return { ...def, responseSerialize: (res: unknown) => encode(res) ?? slow(res) };
}

/** cairn.v1.KV's definition with the fast codecs on Put and Get; other methods unchanged. */
export function withFastKvCodecs(kv: ServiceDefinition): ServiceDefinition {
  const put = kv["Put"] as AnyMethod | undefined;
  const get = kv["Get"] as AnyMethod | undefined;
  if (put === undefined || get === undefined) return kv;
  return {
    ...kv,
    Put: withFastEncode(withFastDecode(put, decodePut), encodePut),
    Get: withFastEncode(withFastDecode(get, decodeGet), encodeGet),
  };
}
