/**
 * The WAL's on-disk record. Every record is framed as
 *
 *     u32 bodyLength | u32 crc32c(body) | body
 *
 * and every body starts with a fixed 24-byte header:
 *
 *     u8 kind | u8 entryType | u16 flags | u32 shard | u64 term | u64 index | payload
 *
 * All integers little-endian; u64 fields hold values below 2^53 (JavaScript safe integers).
 * `flags` bit 0 on a hard state means "has a vote" (the payload is the UTF-8 vote).
 */
import { crc32c } from "../common/index.ts";

export const FRAME_HEADER_BYTES = 8;
export const BODY_HEADER_BYTES = 24;
/** Bound on one record's body: rejects absurd lengths read from a damaged frame quickly. */
export const MAX_BODY_BYTES = 64 * 1024 * 1024;

export const KIND_ENTRY = 1;
export const KIND_HARD_STATE = 2;
export const KIND_SNAPSHOT = 3;
export const KIND_COMPACT = 4;

export const FLAG_HAS_VOTE = 1;

/** A decoded record; `payload` is a view into the buffer it was decoded from. */
export interface RawRecord {
  readonly kind: number;
  readonly entryType: number;
  readonly flags: number;
  readonly shard: number;
  readonly term: number;
  readonly index: number;
  readonly payload: Uint8Array;
}

export function encodedSize(payloadBytes: number): number {
  return FRAME_HEADER_BYTES + BODY_HEADER_BYTES + payloadBytes;
}

function writeU64(view: DataView, at: number, value: number): void {
  view.setUint32(at, value >>> 0, true);
  view.setUint32(at + 4, Math.floor(value / 0x1_0000_0000), true);
}

function readU64(view: DataView, at: number): number {
  return view.getUint32(at, true) + view.getUint32(at + 4, true) * 0x1_0000_0000;
}

/** Writes one framed record at `at` in `buf`; returns the offset after it. */
export function encodeRecord(
  buf: Uint8Array,
  view: DataView,
  at: number,
  kind: number,
  entryType: number,
  flags: number,
  shard: number,
  term: number,
  index: number,
  payload: Uint8Array,
): number {
  const body = at + FRAME_HEADER_BYTES;
  const bodyLength = BODY_HEADER_BYTES + payload.length;
  view.setUint32(at, bodyLength, true);
  view.setUint8(body, kind);
  view.setUint8(body + 1, entryType);
  view.setUint16(body + 2, flags, true);
  view.setUint32(body + 4, shard, true);
  writeU64(view, body + 8, term);
  writeU64(view, body + 16, index);
  buf.set(payload, body + BODY_HEADER_BYTES);
  view.setUint32(at + 4, crc32c(buf, 0, body, body + bodyLength), true);
  return body + bodyLength;
}

/** Why a frame could not be decoded: the frame runs past the data, or its bytes are wrong. */
export type DecodeFailure = "truncated" | "bad-length" | "bad-checksum" | "bad-header";

export type DecodeResult =
  | { readonly ok: true; readonly record: RawRecord; readonly next: number }
  | { readonly ok: false; readonly failure: DecodeFailure };

/** Decodes the frame starting at `at`; never throws on bad input. */
export function decodeRecord(buf: Uint8Array, view: DataView, at: number): DecodeResult {
  if (at + FRAME_HEADER_BYTES > buf.length) return { ok: false, failure: "truncated" };
  const bodyLength = view.getUint32(at, true);
  if (bodyLength < BODY_HEADER_BYTES || bodyLength > MAX_BODY_BYTES) {
    return { ok: false, failure: "bad-length" };
  }
  const body = at + FRAME_HEADER_BYTES;
  if (body + bodyLength > buf.length) return { ok: false, failure: "truncated" };
  if (crc32c(buf, 0, body, body + bodyLength) !== view.getUint32(at + 4, true)) {
    return { ok: false, failure: "bad-checksum" };
  }
  const kind = view.getUint8(body);
  if (kind < KIND_ENTRY || kind > KIND_COMPACT) return { ok: false, failure: "bad-header" };
  return {
    ok: true,
    next: body + bodyLength,
    record: {
      kind,
      entryType: view.getUint8(body + 1),
      flags: view.getUint16(body + 2, true),
      shard: view.getUint32(body + 4, true),
      term: readU64(view, body + 8),
      index: readU64(view, body + 16),
      payload: buf.subarray(body + BODY_HEADER_BYTES, body + bodyLength),
    },
  };
}

/**
 * True when some valid frame starts after `from`. Recovery uses it to tell a torn tail (nothing
 * valid follows the bad record: the last write was cut short) from corruption in the middle of
 * the log (valid records follow the damage: something rewrote or lost acknowledged data).
 */
export function hasValidRecordAfter(buf: Uint8Array, view: DataView, from: number): boolean {
  for (let at = from + 1; at + FRAME_HEADER_BYTES + BODY_HEADER_BYTES <= buf.length; at++) {
    const bodyLength = view.getUint32(at, true);
    if (bodyLength < BODY_HEADER_BYTES || at + FRAME_HEADER_BYTES + bodyLength > buf.length) {
      continue;
    }
    const kind = view.getUint8(at + FRAME_HEADER_BYTES);
    if (kind < KIND_ENTRY || kind > KIND_COMPACT) continue;
    if (decodeRecord(buf, view, at).ok) return true;
  }
  return false;
}
