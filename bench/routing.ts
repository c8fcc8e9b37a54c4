/**
 * `npm run bench:routing [-- --keys N]`
 *
 * Key → shard routing (src/cluster/routing.ts), the cost every KV request pays once on the client
 * and once on the node: 16-byte and 64-byte keys, 1024 shards; nanoseconds per key, best of five
 * passes over N keys (default 200,000). Beside it, the same hash in BigInt arithmetic (the
 * implementation before the 32-bit one), for the ratio.
 */
import { parseArgs } from "node:util";
import { shardForKey } from "../src/cluster/index.ts";

const { values } = parseArgs({ options: { keys: { type: "string", default: "200000" } } });
const N = Number(values.keys);
const SHARDS = 1024;

const M = 0xffff_ffff_ffff_ffffn;
const Q1 = 11400714785074694791n;
const Q2 = 14029467366897019727n;
const Q3 = 1609587929392839161n;
const Q4 = 9650029242287828579n;
const Q5 = 2870177450012600261n;
const rotl = (x: bigint, r: bigint): bigint => ((x << r) | (x >> (64n - r))) & M;
const round = (acc: bigint, lane: bigint): bigint => (rotl((acc + lane * Q2) & M, 31n) * Q1) & M;

/** The BigInt routing, short keys only (< 32 bytes) and long ones, as before. */
function bigintShard(data: Uint8Array, buckets: number): number {
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
  let k = h ^ (h >> 32n);
  let b = -1;
  let j = 0;
  while (j < buckets) {
    b = j;
    k = (k * 2862933555777941757n + 1n) & M;
    j = Math.floor((b + 1) * (2147483648 / (Number(k >> 33n) + 1)));
  }
  return b;
}

function keys(bytes: number): Uint8Array[] {
  const out: Uint8Array[] = [];
  for (let i = 0; i < N; i++) {
    const k = Buffer.alloc(bytes, 0x61);
    k.write(`key-${i}`);
    out.push(k);
  }
  return out;
}

function nsPerKey(route: (k: Uint8Array, n: number) => number, ks: Uint8Array[]): number {
  let best = Infinity;
  let sink = 0;
  for (let pass = 0; pass < 5; pass++) {
    const t0 = process.hrtime.bigint();
    for (const k of ks) sink += route(k, SHARDS);
    best = Math.min(best, Number(process.hrtime.bigint() - t0) / ks.length);
  }
  if (sink < 0) console.log(sink);
  return best;
}

for (const bytes of [16, 64]) {
  const ks = keys(bytes);
  const fast = nsPerKey(shardForKey, ks);
  const slow = nsPerKey(bigintShard, ks);
  console.log(
    `routing ${bytes}-byte keys, ${SHARDS} shards: ${fast.toFixed(0)} ns/key (BigInt: ${slow.toFixed(0)} ns/key, ${(slow / fast).toFixed(1)}× faster)`,
  );
}
