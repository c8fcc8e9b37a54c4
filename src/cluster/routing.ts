/**
 * Key → shard routing, the one function every client and node must agree on (design.md §2):
 *
 *   shard = jumpConsistentHash(xxhash64(key, seed 0), totalShards)
 *
 * Test vectors live in test/cluster/testdata/routing-vectors.json so a client in any language
 * can check itself.
 *
 * Every request routes its key, so the arithmetic is done on 32-bit halves (`hi`, `lo`) in plain
 * numbers: no BigInt, no allocation (BigInt made a key cost about a microsecond). A 64-bit value
 * lives in a pair of local variables; the helpers below return their result in the module's
 * `(out[0] as number)`/`(out[1] as number)`, read at once by the caller. The BigInt entry points (`xxhash64`,
 * `jumpConsistentHash`) stay for callers that want the 64-bit value itself.
 */

// XXH64's primes, as 32-bit halves.
const P1_HI = 0x9e3779b1;
const P1_LO = 0x85ebca87;
const P2_HI = 0xc2b2ae3d;
const P2_LO = 0x27d4eb4f;
const P3_HI = 0x165667b1;
const P3_LO = 0x9e3779f9;
const P4_HI = 0x85ebca77;
const P4_LO = 0xc2b2ae63;
const P5_HI = 0x27d4eb2f;
const P5_LO = 0x165667c5;
// The jump hash's linear congruential multiplier, 2862933555777941757.
const JUMP_HI = 0x27bb2ee6;
const JUMP_LO = 0x87b0b0fd;

/** The helpers' 64-bit result: [hi, lo]. */
const out = new Uint32Array(2);

/** (aHi:aLo) × (bHi:bLo) mod 2^64 → out. */
function mul(aHi: number, aLo: number, bHi: number, bLo: number): void {
  // The full 64-bit product of the low halves, from 16-bit limbs (each partial product < 2^32).
  const a0 = aLo & 0xffff;
  const a1 = aLo >>> 16;
  const b0 = bLo & 0xffff;
  const b1 = bLo >>> 16;
  const p00 = a0 * b0;
  const p01 = a0 * b1;
  const p10 = a1 * b0;
  const mid = (p00 >>> 16) + (p01 & 0xffff) + (p10 & 0xffff);
  out[1] = (((mid & 0xffff) << 16) | (p00 & 0xffff)) >>> 0;
  const hi = a1 * b1 + (p01 >>> 16) + (p10 >>> 16) + (mid >>> 16);
  // The cross terms only reach the high half.
  out[0] = (hi + Math.imul(aHi, bLo) + Math.imul(aLo, bHi)) >>> 0;
}

/** (aHi:aLo) + (bHi:bLo) mod 2^64 → out. */
function add(aHi: number, aLo: number, bHi: number, bLo: number): void {
  const lo = aLo + bLo;
  out[1] = lo >>> 0;
  out[0] = (aHi + bHi + (lo > 0xffffffff ? 1 : 0)) >>> 0;
}

/** Rotation left by r, 0 < r < 32 → out. */
function rotl(hi: number, lo: number, r: number): void {
  out[0] = ((hi << r) | (lo >>> (32 - r))) >>> 0;
  out[1] = ((lo << r) | (hi >>> (32 - r))) >>> 0;
}

/** XXH64's round: rotl(acc + lane × P2, 31) × P1 → out. */
function round(accHi: number, accLo: number, laneHi: number, laneLo: number): void {
  mul(laneHi, laneLo, P2_HI, P2_LO);
  add(accHi, accLo, out[0] as number, out[1] as number);
  rotl(out[0] as number, out[1] as number, 31);
  mul(out[0] as number, out[1] as number, P1_HI, P1_LO);
}

function u32(data: Uint8Array, p: number): number {
  return (
    ((data[p] as number) |
      ((data[p + 1] as number) << 8) |
      ((data[p + 2] as number) << 16) |
      ((data[p + 3] as number) << 24)) >>>
    0
  );
}

/** XXH64 of `data` with seed 0 → out. */
function hash(data: Uint8Array): void {
  const len = data.length;
  let p = 0;
  let hHi: number;
  let hLo: number;
  if (len >= 32) {
    // v1 = P1 + P2, v2 = P2, v3 = 0, v4 = -P1 (mod 2^64).
    add(P1_HI, P1_LO, P2_HI, P2_LO);
    let v1Hi = out[0] as number;
    let v1Lo = out[1] as number;
    let v2Hi = P2_HI;
    let v2Lo = P2_LO;
    let v3Hi = 0;
    let v3Lo = 0;
    add(~P1_HI >>> 0, ~P1_LO >>> 0, 0, 1);
    let v4Hi = out[0] as number;
    let v4Lo = out[1] as number;
    for (; p + 32 <= len; p += 32) {
      round(v1Hi, v1Lo, u32(data, p + 4), u32(data, p));
      v1Hi = out[0] as number;
      v1Lo = out[1] as number;
      round(v2Hi, v2Lo, u32(data, p + 12), u32(data, p + 8));
      v2Hi = out[0] as number;
      v2Lo = out[1] as number;
      round(v3Hi, v3Lo, u32(data, p + 20), u32(data, p + 16));
      v3Hi = out[0] as number;
      v3Lo = out[1] as number;
      round(v4Hi, v4Lo, u32(data, p + 28), u32(data, p + 24));
      v4Hi = out[0] as number;
      v4Lo = out[1] as number;
    }
    rotl(v1Hi, v1Lo, 1);
    hHi = out[0] as number;
    hLo = out[1] as number;
    rotl(v2Hi, v2Lo, 7);
    add(hHi, hLo, out[0] as number, out[1] as number);
    hHi = out[0] as number;
    hLo = out[1] as number;
    rotl(v3Hi, v3Lo, 12);
    add(hHi, hLo, out[0] as number, out[1] as number);
    hHi = out[0] as number;
    hLo = out[1] as number;
    rotl(v4Hi, v4Lo, 18);
    add(hHi, hLo, out[0] as number, out[1] as number);
    hHi = out[0] as number;
    hLo = out[1] as number;
    const lanes = [v1Hi, v1Lo, v2Hi, v2Lo, v3Hi, v3Lo, v4Hi, v4Lo];
    for (let i = 0; i < 8; i += 2) {
      // mergeRound: (h ^ round(0, v)) × P1 + P4
      round(0, 0, lanes[i] as number, lanes[i + 1] as number);
      mul((hHi ^ (out[0] as number)) >>> 0, (hLo ^ (out[1] as number)) >>> 0, P1_HI, P1_LO);
      add(out[0] as number, out[1] as number, P4_HI, P4_LO);
      hHi = out[0] as number;
      hLo = out[1] as number;
    }
  } else {
    hHi = P5_HI;
    hLo = P5_LO;
  }
  add(hHi, hLo, 0, len);
  hHi = out[0] as number;
  hLo = out[1] as number;
  for (; p + 8 <= len; p += 8) {
    round(0, 0, u32(data, p + 4), u32(data, p));
    rotl((hHi ^ (out[0] as number)) >>> 0, (hLo ^ (out[1] as number)) >>> 0, 27);
    mul(out[0] as number, out[1] as number, P1_HI, P1_LO);
    add(out[0] as number, out[1] as number, P4_HI, P4_LO);
    hHi = out[0] as number;
    hLo = out[1] as number;
  }
  if (p + 4 <= len) {
    mul(0, u32(data, p), P1_HI, P1_LO);
    rotl((hHi ^ (out[0] as number)) >>> 0, (hLo ^ (out[1] as number)) >>> 0, 23);
    mul(out[0] as number, out[1] as number, P2_HI, P2_LO);
    add(out[0] as number, out[1] as number, P3_HI, P3_LO);
    hHi = out[0] as number;
    hLo = out[1] as number;
    p += 4;
  }
  for (; p < len; p++) {
    mul(0, data[p] as number, P5_HI, P5_LO);
    rotl((hHi ^ (out[0] as number)) >>> 0, (hLo ^ (out[1] as number)) >>> 0, 11);
    mul(out[0] as number, out[1] as number, P1_HI, P1_LO);
    hHi = out[0] as number;
    hLo = out[1] as number;
  }
  // Avalanche: h ^= h >> 33; h *= P2; h ^= h >> 29; h *= P3; h ^= h >> 32.
  hLo = (hLo ^ (hHi >>> 1)) >>> 0;
  mul(hHi, hLo, P2_HI, P2_LO);
  hHi = out[0] as number;
  hLo = ((out[1] as number) ^ (((out[1] as number) >>> 29) | ((out[0] as number) << 3))) >>> 0;
  hHi = (hHi ^ (hHi >>> 29)) >>> 0;
  mul(hHi, hLo, P3_HI, P3_LO);
  out[1] = ((out[1] as number) ^ (out[0] as number)) >>> 0;
}

/** The jump hash of the 64-bit key hi:lo. */
function jump(hi: number, lo: number, buckets: number): number {
  let kHi = hi;
  let kLo = lo;
  let b = -1;
  let j = 0;
  while (j < buckets) {
    b = j;
    mul(kHi, kLo, JUMP_HI, JUMP_LO);
    add(out[0] as number, out[1] as number, 0, 1);
    kHi = out[0] as number;
    kLo = out[1] as number;
    // (k >> 33) + 1, exactly: k >> 33 is kHi >>> 1, below 2^31.
    j = Math.floor((b + 1) * (2147483648 / ((kHi >>> 1) + 1)));
  }
  return b;
}

function checkBuckets(buckets: number): void {
  if (!Number.isInteger(buckets) || buckets < 1)
    throw new RangeError(`buckets must be ≥ 1, got ${buckets}`);
}

/** XXH64 of `data` with seed 0, as an unsigned 64-bit BigInt. */
export function xxhash64(data: Uint8Array): bigint {
  hash(data);
  return (BigInt(out[0] as number) << 32n) | BigInt(out[1] as number);
}

/** Lamping & Veach's jump consistent hash: a bucket in [0, buckets) for a 64-bit key. */
export function jumpConsistentHash(key: bigint, buckets: number): number {
  checkBuckets(buckets);
  const k = BigInt.asUintN(64, key);
  return jump(Number(k >> 32n), Number(k & 0xffff_ffffn), buckets);
}

/** The shard that owns `key` in a cluster of `totalShards` virtual shards. */
export function shardForKey(key: Uint8Array, totalShards: number): number {
  checkBuckets(totalShards);
  hash(key);
  return jump(out[0] as number, out[1] as number, totalShards);
}
