import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { keyFromBytes, keyToBytes } from "../../src/storage/lsm/keys.ts";

describe("LSM keys", () => {
  it("a key's string holds its bytes, one code unit each, from a Buffer, a Uint8Array or a view into one", () => {
    const bytes = Uint8Array.from([0x01, 0x00, 0x7f, 0x80, 0xff, 0x41]);
    const expected = "\u0001\u0000\u007f\u0080\u00ff\u0041";
    assert.equal(keyFromBytes(bytes), expected);
    assert.equal(keyFromBytes(Buffer.from(bytes)), expected);
    const wide = new Uint8Array(64);
    wide.set(bytes, 10);
    assert.equal(keyFromBytes(wide.subarray(10, 16)), expected);
    assert.equal(keyFromBytes(new Uint8Array(0)), "");
    assert.deepEqual(keyToBytes(expected), Buffer.from(bytes));
  });

  it("never asks a plain Uint8Array for its ArrayBuffer", () => {
    // V8 keeps a small typed array's bytes inside the object; its first `.buffer` allocates an
    // off-heap copy and an ArrayBuffer: one per key of every write and read (the state
    // machine's keys are 17-byte Uint8Arrays).
    const key = Uint8Array.from([0x01, 0x6b, 0x65, 0x79]);
    Object.defineProperty(key, "buffer", {
      get() {
        throw new Error("keyFromBytes read .buffer");
      },
    });
    assert.equal(keyFromBytes(key), "\u0001key");
  });
});
