/**
 * Keys inside the engine are "binary strings": one UTF-16 code unit per byte (latin1). JavaScript
 * compares such strings code unit by code unit, which is exactly unsigned byte order, and V8
 * compares, hashes and stores them (one byte per char) far faster than Uint8Arrays. Keys cross
 * the API as Uint8Array and are converted once at the boundary.
 */

/** Largest sequence number: sorts before every real version of a key (versions are seq-desc). */
export const MAX_SEQ = Number.MAX_SAFE_INTEGER;

/**
 * Node's internal, argument-check-free latin1 decoder (Buffer.prototype's). It reads any
 * Uint8Array in place, a plain one included, so it is called on the key as it is.
 */
const latin1Slice = (
  Buffer.prototype as unknown as {
    latin1Slice(this: Uint8Array, start: number, end: number): string;
  }
).latin1Slice;

/**
 * The key's binary string. V8 keeps a small plain Uint8Array's bytes inside the object, and this
 * read (Node's decoder needs the view's ArrayBuffer) moves them to a new off-heap ArrayBuffer
 * first: ~0.25 µs more per key, and an object for the garbage collector. Keys read on every
 * write and read are therefore made in Node's buffer pool (storageKey), a view on an
 * ArrayBuffer that already exists.
 */
export function keyFromBytes(bytes: Uint8Array): string {
  return latin1Slice.call(bytes, 0, bytes.length);
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
