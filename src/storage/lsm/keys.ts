/**
 * Keys inside the engine are "binary strings": one UTF-16 code unit per byte (latin1). JavaScript
 * compares such strings code unit by code unit, which is exactly unsigned byte order, and V8
 * compares, hashes and stores them (one byte per char) far faster than Uint8Arrays. Keys cross
 * the API as Uint8Array and are converted once at the boundary.
 */

/** Largest sequence number: sorts before every real version of a key (versions are seq-desc). */
export const MAX_SEQ = Number.MAX_SAFE_INTEGER;

/** Node's internal, argument-check-free latin1 decoder (present on every Buffer). */
interface Latin1Slice {
  latin1Slice(start: number, end: number): string;
}

export function keyFromBytes(bytes: Uint8Array): string {
  const buf = Buffer.isBuffer(bytes)
    ? bytes
    : Buffer.from(bytes.buffer, bytes.byteOffset, bytes.length);
  return (buf as unknown as Latin1Slice).latin1Slice(0, buf.length);
}

export function keyToBytes(key: string): Buffer {
  return Buffer.from(key, "latin1");
}

/** Order of internal keys: user key ascending, then sequence descending (newest first). */
export function compareInternal(aKey: string, aSeq: number, bKey: string, bSeq: number): number {
  if (aKey < bKey) return -1;
  if (aKey > bKey) return 1;
  return bSeq - aSeq;
}

/** The smallest key greater than every key starting with `prefix`, or undefined if none. */
export function prefixEnd(prefix: string): string | undefined {
  let end = prefix;
  while (end.length > 0) {
    const last = end.charCodeAt(end.length - 1);
    if (last < 0xff) return end.slice(0, -1) + String.fromCharCode(last + 1);
    end = end.slice(0, -1);
  }
  return undefined;
}

/** The first four bytes of a binary-string key as a big-endian u32, 0-padded: monotonic in it. */
export function keyPrefix(key: string): number {
  const n = key.length;
  return (
    (((n > 0 ? key.charCodeAt(0) : 0) << 24) |
      ((n > 1 ? key.charCodeAt(1) : 0) << 16) |
      ((n > 2 ? key.charCodeAt(2) : 0) << 8) |
      (n > 3 ? key.charCodeAt(3) : 0)) >>>
    0
  );
}
