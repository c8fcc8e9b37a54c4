/**
 * A bloom filter over a table's user keys, ~10 bits per key with 7 probes (false positive rate
 * about 1%). Probes use double hashing from one 32-bit FNV-1a hash of the key's bytes (binary
 * string char codes), the scheme LevelDB uses.
 */

export const BLOOM_BITS_PER_KEY = 10;
const PROBES = 7;

export function keyHash(key: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < key.length; i++) {
    h ^= key.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** Builds the filter: byte 0 is the probe count, the rest the bit array. */
export function buildBloom(hashes: readonly number[]): Uint8Array {
  const bits = Math.max(64, hashes.length * BLOOM_BITS_PER_KEY);
  const bytes = Math.ceil(bits / 8);
  const out = new Uint8Array(bytes + 1);
  out[0] = PROBES;
  const nbits = bytes * 8;
  for (const hash of hashes) {
    let h = hash;
    const delta = ((h >>> 17) | (h << 15)) >>> 0;
    for (let j = 0; j < PROBES; j++) {
      const bit = h % nbits;
      out[1 + (bit >>> 3)] = (out[1 + (bit >>> 3)] as number) | (1 << (bit & 7));
      h = (h + delta) >>> 0;
    }
  }
  return out;
}

/** False means the key is certainly absent; true means it may be present. */
export function bloomMayContain(filter: Uint8Array, hash: number): boolean {
  const probes = filter[0] as number;
  const nbits = (filter.length - 1) * 8;
  if (nbits === 0) return true;
  let h = hash;
  const delta = ((h >>> 17) | (h << 15)) >>> 0;
  for (let j = 0; j < probes; j++) {
    const bit = h % nbits;
    if (((filter[1 + (bit >>> 3)] as number) & (1 << (bit & 7))) === 0) return false;
    h = (h + delta) >>> 0;
  }
  return true;
}
