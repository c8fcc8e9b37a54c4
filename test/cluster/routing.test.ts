import assert from "node:assert/strict";
import { readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { jumpConsistentHash, shardForKey, xxhash64 } from "../../src/cluster/index.ts";

interface Vectors {
  keys: { key_base64: string; xxhash64: string; shard_128: number; shard_1024: number }[];
  jump: { key: string; buckets: number; bucket: number }[];
}

const vectors = JSON.parse(
  readFileSync(join(import.meta.dirname, "testdata", "routing-vectors.json"), "utf8"),
) as Vectors;

describe("key routing", () => {
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
