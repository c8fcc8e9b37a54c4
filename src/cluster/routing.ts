/**
 * Key → shard routing, the one function every client and node must agree on (design.md §2):
 *
 *   shard = jumpConsistentHash(xxhash64(key, seed 0), totalShards)
 *
 * Test vectors live in test/cluster/testdata/routing-vectors.json so a client in any language
 * can check itself. BigInt keeps the 64-bit arithmetic exact; a key costs a few microseconds.
 */

const MASK = 0xffff_ffff_ffff_ffffn;
const P1 = 11400714785074694791n;
const P2 = 14029467366897019727n;
const P3 = 1609587929392839161n;
const P4 = 9650029242287828579n;
const P5 = 2870177450012600261n;

function rotl(x: bigint, r: bigint): bigint {
  return ((x << r) | (x >> (64n - r))) & MASK;
}

function round(acc: bigint, lane: bigint): bigint {
  return (rotl((acc + lane * P2) & MASK, 31n) * P1) & MASK;
}

function mergeRound(acc: bigint, v: bigint): bigint {
  return (((acc ^ round(0n, v)) * P1 + P4) & MASK) as bigint;
}

/** XXH64 of `data` with `seed`, as an unsigned 64-bit BigInt. */
export function xxhash64(data: Uint8Array, seed = 0n): bigint {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const len = data.length;
  let p = 0;
  let h: bigint;
  if (len >= 32) {
    let v1 = (seed + P1 + P2) & MASK;
    let v2 = (seed + P2) & MASK;
    let v3 = seed & MASK;
    let v4 = (seed - P1) & MASK;
    for (; p + 32 <= len; p += 32) {
      v1 = round(v1, view.getBigUint64(p, true));
      v2 = round(v2, view.getBigUint64(p + 8, true));
      v3 = round(v3, view.getBigUint64(p + 16, true));
      v4 = round(v4, view.getBigUint64(p + 24, true));
    }
    h = (rotl(v1, 1n) + rotl(v2, 7n) + rotl(v3, 12n) + rotl(v4, 18n)) & MASK;
    h = mergeRound(h, v1);
    h = mergeRound(h, v2);
    h = mergeRound(h, v3);
    h = mergeRound(h, v4);
  } else {
    h = (seed + P5) & MASK;
  }
  h = (h + BigInt(len)) & MASK;
  for (; p + 8 <= len; p += 8) {
    h ^= round(0n, view.getBigUint64(p, true));
    h = (rotl(h, 27n) * P1 + P4) & MASK;
  }
  if (p + 4 <= len) {
    h ^= (BigInt(view.getUint32(p, true)) * P1) & MASK;
    h = (rotl(h, 23n) * P2 + P3) & MASK;
    p += 4;
  }
  for (; p < len; p++) {
    h ^= (BigInt(data[p] as number) * P5) & MASK;
    h = (rotl(h, 11n) * P1) & MASK;
  }
  h ^= h >> 33n;
  h = (h * P2) & MASK;
  h ^= h >> 29n;
  h = (h * P3) & MASK;
  h ^= h >> 32n;
  return h;
}

/** Lamping & Veach's jump consistent hash: a bucket in [0, buckets) for a 64-bit key. */
export function jumpConsistentHash(key: bigint, buckets: number): number {
  if (!Number.isInteger(buckets) || buckets < 1)
    throw new RangeError(`buckets must be ≥ 1, got ${buckets}`);
  let k = key & MASK;
  let b = -1;
  let j = 0;
  while (j < buckets) {
    b = j;
    k = (k * 2862933555777941757n + 1n) & MASK;
    j = Math.floor((b + 1) * (2147483648 / (Number(k >> 33n) + 1)));
  }
  return b;
}

/** The shard that owns `key` in a cluster of `totalShards` virtual shards. */
export function shardForKey(key: Uint8Array, totalShards: number): number {
  return jumpConsistentHash(xxhash64(key), totalShards);
}
