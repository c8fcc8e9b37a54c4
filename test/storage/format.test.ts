import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  blockKey,
  blockKind,
  blockSeq,
  blockValue,
  ByteSink,
  compareBlockKey,
  entryEnd,
  entryStart,
  KIND_DELETE,
  KIND_PUT,
  parseBlock,
  putEntry,
  seekInBlock,
} from "../../src/storage/lsm/format.ts";
import { keyPrefix } from "../../src/storage/lsm/keys.ts";

/**
 * A block of entries (key, kind, seq, value) with the entry offset and key prefix arrays a
 * builder appends (either may be given instead, to make a bad block).
 */
function encode(
  entries: ReadonlyArray<[string, number, number, string]>,
  offsets?: number[],
  prefixes?: number[],
): Buffer {
  const sink = new ByteSink();
  const starts: number[] = [];
  for (const [key, kind, seq, value] of entries) {
    starts.push(sink.length);
    putEntry(sink, key, kind, seq, Buffer.from(value, "latin1"));
  }
  const offs = offsets ?? starts;
  for (const at of offs) sink.u32(at);
  const keys = entries.map(([key]) => keyPrefix(key));
  for (const p of prefixes ?? keys.slice(0, offs.length)) sink.u32(p);
  sink.u32(offs.length);
  return Buffer.from(sink.view());
}

const ENTRIES: Array<[string, number, number, string]> = [
  ["apple", KIND_PUT, 9, "red"],
  ["apple", KIND_PUT, 4, "green"],
  ["k".repeat(200), KIND_DELETE, 7, ""], // a key length that takes a two-byte varint
  ["pear", KIND_PUT, 1, "v".repeat(300)],
];

describe("SSTable blocks", () => {
  it("reads entries in place through the offset array", () => {
    const block = parseBlock(encode(ENTRIES));
    assert.ok(block !== undefined);
    assert.equal(block.count, 4);
    ENTRIES.forEach(([key, kind, seq, value], i) => {
      assert.equal(blockKey(block, i), key);
      assert.equal(blockKind(block, i), kind);
      assert.equal(blockSeq(block, i), seq);
      assert.equal(Buffer.from(blockValue(block, i)).toString("latin1"), value);
      assert.equal(compareBlockKey(block, i, key), 0);
      assert.equal(entryEnd(block, i), i + 1 < 4 ? entryStart(block, i + 1) : block.offsetsAt);
    });
    assert.ok(compareBlockKey(block, 0, "apples") < 0);
    assert.ok(compareBlockKey(block, 3, "pea") > 0);
    assert.equal(seekInBlock(block, "apple", 5), 1, "the newest version at or below seq 5");
    assert.equal(seekInBlock(block, "apple", 10), 0);
    assert.equal(seekInBlock(block, "b", 10), 2);
    assert.equal(seekInBlock(block, "zebra", 10), 4);
    assert.equal(seekInBlock(block, "", 10), 0, "a key shorter than its prefix");
    assert.equal(seekInBlock(block, "app", 10), 0);
    assert.equal(seekInBlock(block, "kk", 10), 2);
  });

  it("finds the same entry through the key prefixes as by comparing whole keys", () => {
    // Keys sharing their first four bytes, shorter than four bytes, and with 0x00 / 0xff bytes.
    const keys = [
      "",
      "\x00",
      "\x00\x00\x00\x00\x01",
      "ab",
      "abcd",
      "abcd\x00",
      "abcde",
      "abce",
      "\xff\xff\xff\xff",
      "\xff\xff\xff\xff\xff",
    ];
    const block = parseBlock(encode(keys.map((k) => [k, KIND_PUT, 1, "v"])));
    assert.ok(block !== undefined);
    const probes = [
      ...keys,
      "a",
      "abc",
      "abcd\x01",
      "abcf",
      "b",
      "\xff",
      "\xff\xff\xff\xff\x00",
      "\xff".repeat(6),
    ];
    for (const probe of probes) {
      const want = keys.filter((k) => k < probe).length;
      assert.equal(seekInBlock(block, probe, 1), want, JSON.stringify(probe));
    }
  });

  it("searches by prefixes until every key string is made, not when only the ends are", () => {
    // Issue 50, bug 1: a scan that stops early makes the first keys' strings, one that starts
    // late the last ones; seekInBlock took its string fast path with only the two ends made,
    // compared `undefined` keys and answered wrong (a point read missed or read an older level).
    const keys = Array.from({ length: 60 }, (_, i) => `k${String(i).padStart(3, "0")}`);
    const block = parseBlock(encode(keys.map((k) => [k, KIND_PUT, 1, "v"])));
    assert.ok(block !== undefined);
    for (const i of [0, 1, 2, 58, 59]) blockKey(block, i);
    for (const [i, k] of keys.entries()) assert.equal(seekInBlock(block, k, 1), i, k);
    assert.equal(seekInBlock(block, "k0305", 1), 31);
    for (let i = 0; i < keys.length; i++) blockKey(block, i);
    for (const [i, k] of keys.entries()) assert.equal(seekInBlock(block, k, 1), i, k);
  });

  it("refuses blocks whose offset array does not describe their entries", () => {
    const good = encode(ENTRIES);
    const block = parseBlock(good);
    assert.ok(block !== undefined);
    const real = [0, 1, 2, 3].map((i) => entryStart(block, i));
    const cases: Array<[string, Buffer]> = [
      [
        "an offset off by one",
        encode(ENTRIES, [real[0], (real[1] as number) + 1, real[2], real[3]] as number[]),
      ],
      ["an entry missing from the array", encode(ENTRIES, real.slice(0, 3))],
      [
        "a key prefix that is not its key's",
        encode(ENTRIES, undefined, [keyPrefix("apple"), keyPrefix("apple"), 0, keyPrefix("pear")]),
      ],
      [
        "a count larger than the block",
        Buffer.concat([good.subarray(0, -4), Buffer.from([0xff, 0xff, 0, 0])]),
      ],
      ["no entries", encode([])],
      ["shorter than a count", Buffer.from([1, 0])],
      // The first entry's key length byte made 127: the key runs into the offset array.
      ["an entry running past the array", encode([["a", KIND_PUT, 1, "x"]]).fill(0x7f, 0, 1)],
    ];
    for (const [name, bytes] of cases) assert.equal(parseBlock(bytes), undefined, name);
  });
});
