import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import fc from "fast-check";
import { jumpConsistentHash, shardForKey, xxhash64 } from "../../src/cluster/index.ts";

interface Vectors {
  keys: { key_base64: string; xxhash64: string; shard_128: number; shard_1024: number }[];
  jump: { key: string; buckets: number; bucket: number }[];
}

const vectors = JSON.parse(
  readFileSync(join(import.meta.dirname, "testdata", "routing-vectors.json"), "utf8"),
) as Vectors;

/**
 * The specification's arithmetic, in BigInt (as routing.ts was written before it moved to 32-bit
 * halves): the oracle the fast implementation is checked against on random keys.
 */
const M = 0xffff_ffff_ffff_ffffn;
const Q1 = 11400714785074694791n;
const Q2 = 14029467366897019727n;
const Q3 = 1609587929392839161n;
const Q4 = 9650029242287828579n;
const Q5 = 2870177450012600261n;
const rotl = (x: bigint, r: bigint): bigint => ((x << r) | (x >> (64n - r))) & M;
const round = (acc: bigint, lane: bigint): bigint => (rotl((acc + lane * Q2) & M, 31n) * Q1) & M;
function referenceXxhash64(data: Uint8Array): bigint {
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const len = data.length;
  let p = 0;
  let h: bigint;
  if (len >= 32) {
    const v = [(Q1 + Q2) & M, Q2, 0n, (0n - Q1) & M];
    for (; p + 32 <= len; p += 32) {
      for (let i = 0; i < 4; i++) v[i] = round(v[i] as bigint, view.getBigUint64(p + 8 * i, true));
    }
    const [v1, v2, v3, v4] = v as [bigint, bigint, bigint, bigint];
    h = (rotl(v1, 1n) + rotl(v2, 7n) + rotl(v3, 12n) + rotl(v4, 18n)) & M;
    for (const x of v) h = ((h ^ round(0n, x)) * Q1 + Q4) & M;
  } else {
    h = Q5;
  }
  h = (h + BigInt(len)) & M;
  for (; p + 8 <= len; p += 8) {
    h ^= round(0n, view.getBigUint64(p, true));
    h = (rotl(h, 27n) * Q1 + Q4) & M;
  }
  if (p + 4 <= len) {
    h ^= (BigInt(view.getUint32(p, true)) * Q1) & M;
    h = (rotl(h, 23n) * Q2 + Q3) & M;
    p += 4;
  }
  for (; p < len; p++) {
    h ^= (BigInt(data[p] as number) * Q5) & M;
    h = (rotl(h, 11n) * Q1) & M;
  }
  h ^= h >> 33n;
  h = (h * Q2) & M;
  h ^= h >> 29n;
  h = (h * Q3) & M;
  return h ^ (h >> 32n);
}
function referenceJump(key: bigint, buckets: number): number {
  let k = key;
  let b = -1;
  let j = 0;
  while (j < buckets) {
    b = j;
    k = (k * 2862933555777941757n + 1n) & M;
    j = Math.floor((b + 1) * (2147483648 / (Number(k >> 33n) + 1)));
  }
  return b;
}

describe("key routing", () => {
  it("agrees with the BigInt arithmetic of the specification on random keys and shard counts", () => {
    fc.assert(
      fc.property(
        fc.uint8Array({ minLength: 0, maxLength: 200 }),
        fc.integer({ min: 1, max: 1 << 20 }),
        (key, buckets) => {
          const h = referenceXxhash64(key);
          assert.equal(xxhash64(key), h);
          assert.equal(shardForKey(key, buckets), referenceJump(h, buckets));
          assert.equal(jumpConsistentHash(h, buckets), referenceJump(h, buckets));
        },
      ),
      { numRuns: 3000 },
    );
  });

  it("xxhash64 matches the published XXH64 vectors", () => {
    const enc = new TextEncoder();
    assert.equal(xxhash64(enc.encode("")), 0xef46db3751d8e999n);
    assert.equal(xxhash64(enc.encode("a")), 0xd24ec4f1a98c6e5bn);
    assert.equal(xxhash64(enc.encode("abc")), 0x44bc2cf5ad770999n);
    assert.equal(
      xxhash64(enc.encode("Nobody inspects the spammish repetition")),
      0xfbcea83c8a378bf1n,
    );
    assert.equal(
      xxhash64(enc.encode("The quick brown fox jumps over the lazy dog")),
      0x0b242d361fda71bcn,
    );
  });

  it("jump consistent hash matches the reference implementation", () => {
    for (const v of vectors.jump)
      assert.equal(
        jumpConsistentHash(BigInt(`0x${v.key}`), v.buckets),
        v.bucket,
        JSON.stringify(v),
      );
  });

  it("routes every vector key to its recorded shard", () => {
    for (const v of vectors.keys) {
      const key = Buffer.from(v.key_base64, "base64");
      assert.equal(xxhash64(key).toString(16).padStart(16, "0"), v.xxhash64);
      assert.equal(shardForKey(key, 128), v.shard_128);
      assert.equal(shardForKey(key, 1024), v.shard_1024);
    }
  });

  it("spreads keys evenly and moves few keys when shards are added", () => {
    const counts = new Array<number>(16).fill(0);
    let moved = 0;
    for (let i = 0; i < 16000; i++) {
      const key = new TextEncoder().encode(`key-${i}`);
      const s = shardForKey(key, 16);
      counts[s] = (counts[s] ?? 0) + 1;
      if (shardForKey(key, 17) !== s) moved++;
    }
    for (const c of counts) assert.ok(c > 850 && c < 1150, `uneven: ${counts.join(",")}`);
    // Going from 16 to 17 buckets moves about 1/17 of the keys, all to the new bucket.
    assert.ok(moved > 700 && moved < 1200, `moved ${moved}`);
  });

  it("rejects a bad shard count", () => {
    assert.throws(() => jumpConsistentHash(1n, 0), RangeError);
  });
});
