/** HPACK (src/api/h2/hpack.ts): RFC 7541's examples, the table's limits, malformed blocks. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  encodeHeaders,
  HpackDecoder,
  HpackEncoder,
  HpackError,
  huffmanDecode,
} from "../../src/api/h2/hpack.ts";

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ""), "hex");

/** Name/value pairs of a decoded list. */
function pairs(list: string[]): [string, string][] {
  const out: [string, string][] = [];
  for (let i = 0; i < list.length; i += 2) out.push([list[i] as string, list[i + 1] as string]);
  return out;
}

const REQUEST_1: [string, string][] = [
  [":method", "GET"],
  [":scheme", "http"],
  [":path", "/"],
  [":authority", "www.example.com"],
];
const REQUEST_2: [string, string][] = [...REQUEST_1, ["cache-control", "no-cache"]];
const REQUEST_3: [string, string][] = [
  [":method", "GET"],
  [":scheme", "https"],
  [":path", "/index.html"],
  [":authority", "www.example.com"],
  ["custom-key", "custom-value"],
];

describe("HPACK", () => {
  it("decodes RFC 7541 C.3: three requests on one connection, raw strings, the table reused", () => {
    const d = new HpackDecoder();
    assert.deepEqual(pairs(d.decode(hex("828684410f7777772e6578616d706c652e636f6d"))), REQUEST_1);
    assert.deepEqual(pairs(d.decode(hex("828684be58086e6f2d6361636865"))), REQUEST_2);
    assert.deepEqual(
      pairs(d.decode(hex("828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565"))),
      REQUEST_3,
    );
  });

  it("decodes RFC 7541 C.4: the same requests Huffman-coded", () => {
    const d = new HpackDecoder();
    assert.deepEqual(pairs(d.decode(hex("828684418cf1e3c2e5f23a6ba0ab90f4ff"))), REQUEST_1);
    assert.deepEqual(pairs(d.decode(hex("828684be5886a8eb10649cbf"))), REQUEST_2);
    assert.deepEqual(
      pairs(d.decode(hex("828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf"))),
      REQUEST_3,
    );
    assert.equal(huffmanDecode(hex("f1e3c2e5f23a6ba0ab90f4ff"), 0, 12), "www.example.com");
  });

  it("evicts the oldest entries to stay within the table size, and an oversized entry empties it", () => {
    // A table of 100 octets: two entries of 32 + 2 + 8 = 42 fit, a third evicts the first.
    const d = new HpackDecoder(100);
    const literal = (name: string, value: string): number[] => [
      0x40,
      name.length,
      ...Buffer.from(name),
      value.length,
      ...Buffer.from(value),
    ];
    d.decode(Buffer.from([...literal("aa", "11111111"), ...literal("bb", "22222222")]));
    assert.deepEqual(pairs(d.decode(Buffer.from([0xbe, 0xbf]))), [
      ["bb", "22222222"],
      ["aa", "11111111"],
    ]);
    d.decode(Buffer.from(literal("cc", "33333333")));
    assert.deepEqual(pairs(d.decode(Buffer.from([0xbe, 0xbf]))), [
      ["cc", "33333333"],
      ["bb", "22222222"],
    ]);
    assert.throws(() => d.decode(Buffer.from([0xc0])), HpackError, "index 64 was evicted");
    // An entry larger than the table is not added, and everything before it is gone.
    d.decode(Buffer.from(literal("dd", "x".repeat(80))));
    assert.throws(() => d.decode(Buffer.from([0xbe])), HpackError);
    // A size update to 0 (allowed: below the setting) empties it too.
    const e = new HpackDecoder(100);
    e.decode(Buffer.from(literal("aa", "1")));
    e.decode(Buffer.from([0x20]));
    assert.throws(() => e.decode(Buffer.from([0xbe])), HpackError);
  });

  it("refuses malformed blocks: bad indexes, truncation, bad Huffman, misplaced size updates", () => {
    const d = (): HpackDecoder => new HpackDecoder(4096, 1024);
    const bad: [string, number[]][] = [
      ["index 0", [0x80]],
      ["an index past the tables", [0xbe]],
      ["a truncated integer", [0xff]],
      ["a truncated string", [0x00, 0x05, 0x61]],
      ["a truncated Huffman string", [0x00, 0x81]],
      ["Huffman padding of zeros", [0x00, 0x01, 0x61, 0x81, 0x00]],
      ["Huffman padding of 8 ones or more", [0x00, 0x01, 0x61, 0x82, 0x1f, 0xff]],
      ["EOS in a Huffman string", [0x00, 0x01, 0x61, 0x84, 0xff, 0xff, 0xff, 0xff]],
      ["a size update above the setting", [0x3f, 0xe2, 0x1f]],
      ["a size update after a field", [0x82, 0x20]],
      ["an integer that overflows", [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]],
    ];
    for (const [what, bytes] of bad) {
      assert.throws(() => d().decode(Buffer.from(bytes)), HpackError, what);
    }
  });

  it("decodes a list past its limit to the end, keeping the table in step, and flags it", () => {
    const decoder = new HpackDecoder(4096, 1024);
    const encoder = new HpackEncoder();
    // 40 octets (as the setting counts them), then 1,033 (past the limit of 1,024), then a field
    // the encoder indexes: the next block names it by index alone.
    const big = encoder.encode([
      ["x-first", "1"],
      ["a", "b".repeat(1000)],
      ["cairn-served-by", "n1"],
    ]);
    assert.deepEqual(pairs(decoder.decode(big)), [["x-first", "1"]], "the fields past it dropped");
    assert.equal(decoder.tooLarge, true);
    assert.equal(decoder.listSize, 40 + 1033 + 49);
    const next = encoder.encode([["cairn-served-by", "n1"]]);
    assert.equal(next.length, 1, "the field went into both tables");
    assert.deepEqual(pairs(decoder.decode(next)), [["cairn-served-by", "n1"]]);
    assert.equal(decoder.tooLarge, false);
  });

  it("indexes a served-by trailer: after its first block it costs a connection 3 bytes", () => {
    const encoder = new HpackEncoder();
    const decoder = new HpackDecoder(4096);
    const fields: [string, string][] = [
      ["grpc-status", "0"],
      ["grpc-message", "OK"],
      ["cairn-served-by", "n1"],
    ];
    const first = encoder.cached(2, fields);
    assert.deepEqual(pairs(decoder.decode(first)), fields);
    const again = encoder.cached(2, fields);
    assert.equal(again.length, 3, "three references to the dynamic table");
    assert.deepEqual(pairs(decoder.decode(again)), fields);
  });

  it("encodes literals without indexing that a decoder reads back, leaving its table alone", () => {
    const fields: [string, string][] = [
      [":status", "200"],
      ["content-type", "application/grpc+proto"],
      ["grpc-status", "0"],
      ["grpc-message", "compare-and-set%20failed"],
      ["x-long", "v".repeat(300)],
    ];
    const d = new HpackDecoder();
    const block = encodeHeaders(fields);
    assert.equal(block[0], 0x88, ":status 200 from the static table");
    assert.deepEqual(pairs(d.decode(block)), fields);
    // Nothing was inserted: index 62 does not exist.
    assert.throws(() => d.decode(Buffer.from([0xbe])), HpackError);
  });

  it("the encoder's blocks decode in order to what was encoded, as the peer's table size changes", () => {
    const encoder = new HpackEncoder();
    const decoder = new HpackDecoder(4096);
    const response: [string, string][] = [
      [":status", "200"],
      ["content-type", "application/grpc+proto"],
      ["grpc-accept-encoding", "identity,deflate,gzip"],
    ];
    const ok: [string, string][] = [
      ["grpc-status", "0"],
      ["grpc-message", "OK"],
    ];
    const error: [string, string][] = [
      ["grpc-status", "5"],
      ["grpc-message", "not found"],
    ];
    // A KV answer's trailers name the node that served it (indexed whatever the id).
    const servedBy = (id: string): [string, string][] => [...ok, ["cairn-served-by", id]];
    const lists = [response, ok, error, servedBy("n1"), servedBy("node-with-a-long-id-7")];
    // A seeded sequence of blocks, cached or not, and table size changes between them.
    let seed = 7;
    const next = (n: number): number => {
      seed = (seed * 1_103_515_245 + 12_345) % 2 ** 31;
      return seed % n;
    };
    const sizes = [4096, 0, 100, 150, 4096, 64, 8192];
    for (let i = 0; i < 2000; i++) {
      if (next(20) === 0) encoder.setPeerTableSize(sizes[next(sizes.length)] as number);
      const which = next(lists.length);
      const fields = lists[which] as [string, string][];
      const body = next(2) === 0 ? encoder.cached(which, fields) : encoder.encode(fields);
      const update = encoder.takeSizeUpdate();
      const block = update === null ? body : Buffer.concat([update, body]);
      assert.deepEqual(pairs(decoder.decode(block)), fields, `block ${i}`);
    }
  });
});
