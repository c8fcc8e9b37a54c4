import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { crc32c } from "../../src/storage/common/index.ts";
import { crc32cJs } from "../../src/storage/common/crc32c.ts";
import { crc32cNative } from "../../src/common/native.ts";

describe("crc32c", () => {
  it("matches the RFC 3720 B.4 test vectors", () => {
    assert.equal(crc32c(new Uint8Array(32)), 0x8a9136aa);
    assert.equal(crc32c(new Uint8Array(32).fill(0xff)), 0x62a8ab43);
    assert.equal(crc32c(Uint8Array.from({ length: 32 }, (_, i) => i)), 0x46dd794e);
    assert.equal(crc32c(Uint8Array.from({ length: 32 }, (_, i) => 31 - i)), 0x113fdb5c);
    assert.equal(crc32c(new TextEncoder().encode("123456789")), 0xe3069283);
  });

  it("gives the same result on the word-at-a-time path as byte by byte, at any alignment", () => {
    fc.assert(
      fc.property(fc.uint8Array({ minLength: 64, maxLength: 600 }), fc.nat(7), (raw, shift) => {
        const data = raw.subarray(Math.min(shift, raw.length));
        let bytewise = 0;
        for (let i = 0; i < data.length; i++) bytewise = crc32c(data, bytewise, i, i + 1);
        assert.equal(crc32c(data), bytewise);
      }),
    );
  });

  it("can be computed in pieces and over sub-ranges", () => {
    fc.assert(
      fc.property(fc.uint8Array({ maxLength: 300 }), fc.nat(), (data, cut) => {
        const at = data.length === 0 ? 0 : cut % data.length;
        const whole = crc32c(data);
        assert.equal(crc32c(data, crc32c(data, 0, 0, at), at), whole);
        assert.equal(crc32c(data.subarray(at)), crc32c(data, 0, at));
      }),
    );
  });

  it("computes the same value in the native addon as in JavaScript, at any length, offset and seed", (t) => {
    const native = crc32cNative;
    if (native === undefined) return t.skip("addon not built");
    // Lengths past 3 × 256 bytes take the addon's three interleaved streams.
    fc.assert(
      fc.property(
        fc.uint8Array({ maxLength: 5000 }),
        fc.nat(),
        fc.nat(),
        fc.nat(),
        (data, a, b, seed) => {
          const start = data.length === 0 ? 0 : a % data.length;
          const end = start + (data.length === start ? 0 : b % (data.length - start + 1));
          assert.equal(native(data, seed >>> 0, start, end), crc32cJs(data, seed, start, end));
        },
      ),
      { numRuns: 500 },
    );
    assert.equal(native(new TextEncoder().encode("123456789"), 0, 0, 9), 0xe3069283);
    assert.throws(() => native(new Uint8Array(4), 0, 2, 8), TypeError);
    assert.throws(() => native(new Uint16Array(4) as unknown as Uint8Array, 0, 0, 1), TypeError);
  });
});
