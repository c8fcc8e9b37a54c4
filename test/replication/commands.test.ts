/** Log payloads and stored values (src/replication/commands.ts): what is written reads back. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  decodeCommand,
  decodeStoredValue,
  encodeCommand,
  encodeStoredValue,
  type KvCommand,
} from "../../src/replication/commands.ts";

const bytes = (s: string): Uint8Array => new TextEncoder().encode(s);

/** The same fields with every byte array a plain Uint8Array (decoding gives views of any type). */
function plain<T extends object>(o: T): T {
  return Object.fromEntries(
    Object.entries(o).map(([k, v]) => [k, v instanceof Uint8Array ? new Uint8Array(v) : v]),
  ) as T;
}

describe("KV commands and stored values", () => {
  it("round-trip every command shape, versions past 2^32 included", () => {
    const commands: KvCommand[] = [
      { op: "put", key: bytes("k"), value: bytes("v".repeat(300)) },
      { op: "put", key: bytes("key"), value: new Uint8Array(0), expected: { index: 0, term: 0 } },
      {
        op: "put",
        key: bytes("big"),
        value: bytes("x"),
        expected: { index: 2 ** 40 + 7, term: 2 ** 33 + 1 },
      },
      { op: "delete", key: bytes("gone") },
      { op: "delete", key: bytes("gone"), expected: { index: 5, term: 2 } },
    ];
    // Encoded one after another they share Node's buffer pool: each must keep its own bytes.
    const encoded = commands.map(encodeCommand);
    encoded.forEach((data, i) => assert.deepEqual(plain(decodeCommand(data)), commands[i]));
  });

  it("stores a value behind its version, each in its own bytes", () => {
    const a = encodeStoredValue({ index: 2 ** 36 + 3, term: 9 }, bytes("first"));
    const b = encodeStoredValue({ index: 1, term: 1 }, bytes("second"));
    assert.deepEqual(plain(decodeStoredValue(a)), {
      version: { index: 2 ** 36 + 3, term: 9 },
      value: bytes("first"),
    });
    assert.deepEqual(plain(decodeStoredValue(b)), {
      version: { index: 1, term: 1 },
      value: bytes("second"),
    });
    assert.equal(Buffer.from(decodeStoredValue(a).value).toString(), "first");
  });
});
