/**
 * CRC32C (Castagnoli, reflected polynomial 0x82F63B78), the checksum of every WAL record and
 * every SSTable block. Node has no built-in CRC32C: ranges of NATIVE_FROM bytes or more go to the
 * native addon (the CPU's CRC32C instruction: ~0.25 µs per 4 KiB block against ~2.3 µs here),
 * shorter ones, and every range where the addon is not built, to slicing-by-8 over eight
 * 256-entry tables in JavaScript (below the threshold the call into the addon costs more than it
 * saves). Both give the same value; test vectors from RFC 3720 §B.4 and a comparison of the two
 * are in the tests.
 */
import { crc32cNative } from "../../common/index.ts";

/** Shortest range handed to the addon (measured: equal cost near 64 bytes). */
const NATIVE_FROM = 128;

const POLY = 0x82f63b78;
const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

const TABLES: Uint32Array[] = (() => {
  const tables: Uint32Array[] = [];
  const t0 = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? (c >>> 1) ^ POLY : c >>> 1;
    t0[n] = c >>> 0;
  }
  tables.push(t0);
  for (let t = 1; t < 8; t++) {
    const prev = tables[t - 1] as Uint32Array;
    const next = new Uint32Array(256);
    for (let n = 0; n < 256; n++) {
      const p = prev[n] as number;
      next[n] = ((p >>> 8) ^ (t0[p & 0xff] as number)) >>> 0;
    }
    tables.push(next);
  }
  return tables;
})();

const [T0, T1, T2, T3, T4, T5, T6, T7] = TABLES as [
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
  Uint32Array,
];

/**
 * CRC32C of `data[start, end)`, continuing from `crc` (the value returned for the bytes before;
 * 0 to start). The result is an unsigned 32-bit integer.
 */
export function crc32c(data: Uint8Array, crc = 0, start = 0, end = data.length): number {
  if (crc32cNative !== undefined && end - start >= NATIVE_FROM) {
    return crc32cNative(data, crc >>> 0, start, end);
  }
  return crc32cJs(data, crc, start, end);
}

/** The JavaScript CRC32C, whatever the addon: for tests comparing the two. */
export function crc32cJs(data: Uint8Array, crc = 0, start = 0, end = data.length): number {
  let c = ~crc >>> 0;
  let i = start;
  // Aligned fast path: two 32-bit loads per 8 bytes instead of eight byte loads (little-endian
  // hosts only, which is every platform Node supports in practice; checked once below).
  if (LITTLE_ENDIAN && end - start >= 64) {
    while (i < end && ((data.byteOffset + i) & 3) !== 0) {
      c = (T0[(c ^ (data[i] as number)) & 0xff] as number) ^ (c >>> 8);
      i++;
    }
    const words = new Uint32Array(data.buffer, data.byteOffset + i, (end - i) >>> 2);
    const pairs = words.length >>> 1;
    for (let w = 0; w < pairs; w++) {
      const lo = (c ^ (words[2 * w] as number)) >>> 0;
      const hi = words[2 * w + 1] as number;
      c =
        (T7[lo & 0xff] as number) ^
        (T6[(lo >>> 8) & 0xff] as number) ^
        (T5[(lo >>> 16) & 0xff] as number) ^
        (T4[lo >>> 24] as number) ^
        (T3[hi & 0xff] as number) ^
        (T2[(hi >>> 8) & 0xff] as number) ^
        (T1[(hi >>> 16) & 0xff] as number) ^
        (T0[hi >>> 24] as number);
    }
    i += pairs * 8;
  }
  // Indexed reads below are in bounds by construction; the `as number` casts only satisfy
  // noUncheckedIndexedAccess without a branch in the hot loop.
  while (i + 8 <= end) {
    const lo =
      (c ^
        ((data[i] as number) |
          ((data[i + 1] as number) << 8) |
          ((data[i + 2] as number) << 16) |
          ((data[i + 3] as number) << 24))) >>>
      0;
    c =
      (T7[lo & 0xff] as number) ^
      (T6[(lo >>> 8) & 0xff] as number) ^
      (T5[(lo >>> 16) & 0xff] as number) ^
      (T4[lo >>> 24] as number) ^
      (T3[data[i + 4] as number] as number) ^
      (T2[data[i + 5] as number] as number) ^
      (T1[data[i + 6] as number] as number) ^
      (T0[data[i + 7] as number] as number);
    i += 8;
  }
  while (i < end) {
    c = (T0[(c ^ (data[i] as number)) & 0xff] as number) ^ (c >>> 8);
    i++;
  }
  return ~c >>> 0;
}
