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
 * `flags` bit 0 on a hard state or a drop means "has a vote" (the payload is the UTF-8 vote);
 * bit 1 on a snapshot marks a checkpoint copy.
 *
 * Kinds: 1 entry, 2 hard state (index: the commit), 3 snapshot (payload: its metadata's data),
 * 4 compaction mark, 5 drop: the shard's replica here was deleted (replica GC): its entries,
 * snapshot and compaction mark are gone, and only its term and vote stay (index 0), so that a
 * replica created again later never votes twice in a term. 6 dropped log: written right after
 * its shard's drop record (in the same write, or the same checkpoint), the last entry of the
 * log that drop deleted as its index and term, no payload, no flag; a replica created again
 * votes as that log would (Wal.droppedLog). A drop record with no dropped-log record after it
 * (written by a version before kind 6) leaves that entry unknown.
 *
 * Kinds 5 and 6 are newer than the others: a version before a kind stops on a record of it
 * ("bad-header": corruption) unless the record is the last of the log, which it cuts off as a
 * torn write. For kind 6 that is harmless: the drop before it is read as that version reads
 * any drop. (A new flag bit would not do: decodeRecord ignores flags it does not know, so a
 * version before it would misread the record instead of stopping.)
 */
import { crc32c } from "../common/index.ts";

export const FRAME_HEADER_BYTES = 8;
export const BODY_HEADER_BYTES = 24;
/**
 * Bound on one record's body: rejects absurd lengths read from a damaged frame quickly. It must
 * hold the largest record the node writes: an entry of a Put of `limits.max_value_bytes` (at
 * most 64 MiB) and `limits.max_key_bytes` (at most 65,535), 22 bytes of command around them, and
 * the body's 24-byte header. At 64 MiB such a record was written, then read back as damage: at
 * the end of the log it was cut off as a torn write, an acknowledged Put lost. The writer holds
 * to the same bound (MAX_PAYLOAD_BYTES): `Wal.append` refuses a larger record before writing it.
 */
export const MAX_BODY_BYTES = 65 * 1024 * 1024;
/**
 * The largest payload a record may carry (an entry's data, a snapshot's metadata, a vote): what
 * MAX_BODY_BYTES leaves after the body's header. `Wal.append` refuses a record carrying more, as
 * the reader would take it for damage.
 */
export const MAX_PAYLOAD_BYTES = MAX_BODY_BYTES - BODY_HEADER_BYTES;

export const KIND_ENTRY = 1;
export const KIND_HARD_STATE = 2;
export const KIND_SNAPSHOT = 3;
export const KIND_COMPACT = 4;
export const KIND_DROP = 5;
export const KIND_DROPPED_LOG = 6;
/** The highest kind this version writes and reads. */
const KIND_LAST = KIND_DROPPED_LOG;

export const FLAG_HAS_VOTE = 1;
/** Set on snapshot records written as a segment's checkpoint: restore the metadata, keep the log. */
export const FLAG_CHECKPOINT = 2;

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
  if (kind < KIND_ENTRY || kind > KIND_LAST) return { ok: false, failure: "bad-header" };
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
 * How far after damage a valid record is looked for: a record whose length field is damaged is
 * followed by the next one at most one maximal record later, so a window of one maximal record
 * finds it. (A record damaged elsewhere keeps its length, and its successor is checked directly.)
 */
export const SCAN_WINDOW_BYTES = FRAME_HEADER_BYTES + MAX_BODY_BYTES;
/**
 * Bytes a scan may checksum over candidates in its window. Garbage rarely passes the header
 * checks, so a scan that runs out has met something record-like, and reports "found": start-up
 * stops on corruption rather than dropping what might be acknowledged records.
 */
export const SCAN_CRC_BUDGET_BYTES = 2 * MAX_BODY_BYTES;

/** The work a scan did, for tests: offsets examined, checksums computed and their bytes. */
export interface ScanWork {
  offsets: number;
  crcAttempts: number;
  crcBytes: number;
}

/**
 * The length of the frame at `at` if its header could have been written by encodeRecord (the
 * length fits the data and the bound, the kind is known, no unknown flag, entryType only on
 * entries, term and index below 2^53), else 0. Cheap, so that only such frames get a checksum:
 * random bytes pass about once in 10^10 offsets.
 */
function plausibleLength(buf: Uint8Array, view: DataView, at: number): number {
  const body = at + FRAME_HEADER_BYTES;
  if (body + BODY_HEADER_BYTES > buf.length) return 0;
  const kind = buf[body] as number;
  if (kind < KIND_ENTRY || kind > KIND_LAST) return 0;
  if (kind !== KIND_ENTRY && buf[body + 1] !== 0) return 0;
  if (view.getUint16(body + 2, true) > (FLAG_HAS_VOTE | FLAG_CHECKPOINT)) return 0;
  if (
    view.getUint32(body + 12, true) >= 0x20_0000 ||
    view.getUint32(body + 20, true) >= 0x20_0000
  ) {
    return 0;
  }
  const bodyLength = view.getUint32(at, true);
  if (bodyLength < BODY_HEADER_BYTES || bodyLength > MAX_BODY_BYTES) return 0;
  return body + bodyLength <= buf.length ? bodyLength : 0;
}

/**
 * True when a valid frame starts after the damaged one at `from`. Recovery uses it to tell a torn
 * tail (nothing valid follows the bad record: the last write was cut short) from corruption in
 * the middle of the log (valid records follow the damage: something rewrote or lost acknowledged
 * data). Bounded: the damaged frame's own successor, then offsets within SCAN_WINDOW_BYTES, a
 * checksum only where a plausible header parses, at most SCAN_CRC_BUDGET_BYTES of them.
 */
export function hasValidRecordAfter(
  buf: Uint8Array,
  view: DataView,
  from: number,
  work: ScanWork = { offsets: 0, crcAttempts: 0, crcBytes: 0 },
): boolean {
  const attempt = (at: number, bodyLength: number): boolean => {
    work.crcAttempts++;
    work.crcBytes += bodyLength;
    return decodeRecord(buf, view, at).ok;
  };
  // Damage inside a body leaves the length intact: the next record starts where it says.
  if (from + FRAME_HEADER_BYTES <= buf.length) {
    const successor = from + FRAME_HEADER_BYTES + view.getUint32(from, true);
    const length = plausibleLength(buf, view, successor);
    if (length > 0 && attempt(successor, length)) return true;
  }
  const end = Math.min(buf.length, from + 1 + SCAN_WINDOW_BYTES);
  let budget = SCAN_CRC_BUDGET_BYTES;
  work.offsets += Math.max(0, end - from - 1);
  for (let at = from + 1; at < end; at++) {
    // Two byte checks inline first (the kind, the flags' high byte): they rule out all but one
    // offset in 16384 of random bytes before the full header check.
    const body = at + FRAME_HEADER_BYTES;
    if (((buf[body] as number) - KIND_ENTRY) >>> 0 > KIND_LAST - KIND_ENTRY) continue;
    if (buf[body + 3] !== 0) continue;
    const length = plausibleLength(buf, view, at);
    if (length === 0) continue;
    if (length > budget) return true;
    budget -= length;
    if (attempt(at, length)) return true;
  }
  return false;
}
