/**
 * HTTP/2 conformance of Cairn's own front end, h2spec-style (h2spec is not packaged here): every
 * case of h2-cases.ts (RFC 9113 §3–§8 and RFC 7541 over the wire) against a real node, each case
 * on a connection of its own; then RFC 7541 Appendix C.2–C.6 against src/api/h2/hpack.ts's
 * decoder (and its encoder, read back).
 *
 * A connection error must end with GOAWAY *and* the socket closed (RFC 9113 §5.4.1); a stream
 * error may be a connection error instead (§5.4.1 allows it), with the same code. The cases run
 * eight at a time, each on its own connection: a connection error's socket closes only after the
 * server's GOAWAY grace period (a second), and one at a time they took a minute. The node must
 * still serve after all of them (checked in `after`).
 */
import assert from "node:assert/strict";
import { after, before, describe, it } from "node:test";
import { encodeHeaders, HpackDecoder } from "../../src/api/h2/hpack.ts";
import { NodeUnderAttack } from "../support/node-under-attack.ts";
import { assertCase, CASES } from "./h2-cases.ts";

describe(
  "HTTP/2 conformance (RFC 9113 §3–§8, RFC 7541), against a real node",
  { timeout: 300_000, concurrency: 8 },
  () => {
    // The GOAWAY grace shortened (default 1 s): every connection error waits for it to close.
    const node = new NodeUnderAttack({
      CAIRN_RPC_IO_THREADS: "0",
      CAIRN_RPC_GOAWAY_GRACE_MS: "200",
    });
    before(() => node.ensure());
    after(async () => {
      try {
        await node.assertAlive();
      } finally {
        await node.stop();
      }
    });

    for (const c of CASES) {
      it(`§${c.section}: ${c.what}`, async () => {
        await node.ensure();
        await assertCase(node.port, c);
      });
    }
  },
);

// ── RFC 7541 Appendix C ──────────────────────────────────────────────────────────────────────

const hex = (s: string): Buffer => Buffer.from(s.replace(/\s+/g, ""), "hex");
type Fields = [string, string][];

function pairs(list: readonly string[]): Fields {
  const out: Fields = [];
  for (let i = 0; i < list.length; i += 2) out.push([list[i] as string, list[i + 1] as string]);
  return out;
}

/** One example: the block's octets and the header list it decodes to. */
interface Example {
  readonly name: string;
  readonly block: string;
  readonly fields: Fields;
}

const REQUESTS: Fields[] = [
  [
    [":method", "GET"],
    [":scheme", "http"],
    [":path", "/"],
    [":authority", "www.example.com"],
  ],
  [
    [":method", "GET"],
    [":scheme", "http"],
    [":path", "/"],
    [":authority", "www.example.com"],
    ["cache-control", "no-cache"],
  ],
  [
    [":method", "GET"],
    [":scheme", "https"],
    [":path", "/index.html"],
    [":authority", "www.example.com"],
    ["custom-key", "custom-value"],
  ],
];

const RESPONSES: Fields[] = [
  [
    [":status", "302"],
    ["cache-control", "private"],
    ["date", "Mon, 21 Oct 2013 20:13:21 GMT"],
    ["location", "https://www.example.com"],
  ],
  [
    [":status", "307"],
    ["cache-control", "private"],
    ["date", "Mon, 21 Oct 2013 20:13:21 GMT"],
    ["location", "https://www.example.com"],
  ],
  [
    [":status", "200"],
    ["cache-control", "private"],
    ["date", "Mon, 21 Oct 2013 20:13:22 GMT"],
    ["location", "https://www.example.com"],
    ["content-encoding", "gzip"],
    ["set-cookie", "foo=ASDJKHQKBZXOQWEOPIUAXQWEOIU; max-age=3600; version=1"],
  ],
];

/** Sequences decoded on one decoder each (the dynamic table carries over), and its table size. */
const SEQUENCES: { name: string; tableSize: number; examples: Example[] }[] = [
  {
    name: "C.3 requests without Huffman coding",
    tableSize: 4096,
    examples: [
      {
        name: "C.3.1",
        block: "828684410f7777772e6578616d706c652e636f6d",
        fields: REQUESTS[0] as Fields,
      },
      { name: "C.3.2", block: "828684be58086e6f2d6361636865", fields: REQUESTS[1] as Fields },
      {
        name: "C.3.3",
        block: "828785bf400a637573746f6d2d6b65790c637573746f6d2d76616c7565",
        fields: REQUESTS[2] as Fields,
      },
    ],
  },
  {
    name: "C.4 requests with Huffman coding",
    tableSize: 4096,
    examples: [
      { name: "C.4.1", block: "828684418cf1e3c2e5f23a6ba0ab90f4ff", fields: REQUESTS[0] as Fields },
      { name: "C.4.2", block: "828684be5886a8eb10649cbf", fields: REQUESTS[1] as Fields },
      {
        name: "C.4.3",
        block: "828785bf408825a849e95ba97d7f8925a849e95bb8e8b4bf",
        fields: REQUESTS[2] as Fields,
      },
    ],
  },
  {
    name: "C.5 responses without Huffman coding (a 256-octet table: evictions)",
    tableSize: 256,
    examples: [
      {
        name: "C.5.1",
        block:
          "4803333032580770726976617465611d4d6f6e2c203231204f637420323031332032303a31333a323120474d546e1768747470733a2f2f7777772e6578616d706c652e636f6d",
        fields: RESPONSES[0] as Fields,
      },
      { name: "C.5.2", block: "4803333037c1c0bf", fields: RESPONSES[1] as Fields },
      {
        name: "C.5.3",
        block:
          "88c1611d4d6f6e2c203231204f637420323031332032303a31333a323220474d54c05a04677a69707738666f6f3d4153444a4b48514b425a584f5157454f50495541585157454f49553b206d61782d6167653d333630303b2076657273696f6e3d31",
        fields: RESPONSES[2] as Fields,
      },
    ],
  },
  {
    name: "C.6 responses with Huffman coding (a 256-octet table: evictions)",
    tableSize: 256,
    examples: [
      {
        name: "C.6.1",
        block:
          "488264025885aec3771a4b6196d07abe941054d444a8200595040b8166e082a62d1bff6e919d29ad171863c78f0b97c8e9ae82ae43d3",
        fields: RESPONSES[0] as Fields,
      },
      { name: "C.6.2", block: "4883640effc1c0bf", fields: RESPONSES[1] as Fields },
      {
        name: "C.6.3",
        block:
          "88c16196d07abe941054d444a8200595040b8166e084a62d1bffc05a839bd9ab77ad94e7821dd7f2e6c7b335dfdfcd5b3960d5af27087f3672c1ab270fb5291f9587316065c003ed4ee5b1063d5007",
        fields: RESPONSES[2] as Fields,
      },
    ],
  },
];

describe("HPACK: RFC 7541 Appendix C", () => {
  it("C.2.1 a literal with indexing: custom-key: custom-header, then reused by index 62", () => {
    const d = new HpackDecoder();
    assert.deepEqual(pairs(d.decode(hex("400a637573746f6d2d6b65790d637573746f6d2d686561646572"))), [
      ["custom-key", "custom-header"],
    ]);
    assert.deepEqual(pairs(d.decode(hex("be"))), [["custom-key", "custom-header"]]);
  });

  it("C.2.2 a literal without indexing: :path: /sample/path, the table left empty", () => {
    const d = new HpackDecoder();
    assert.deepEqual(pairs(d.decode(hex("040c2f73616d706c652f70617468"))), [
      [":path", "/sample/path"],
    ]);
    assert.throws(() => d.decode(hex("be")), "nothing was indexed");
  });

  it("C.2.3 a literal never indexed: password: secret, the table left empty", () => {
    const d = new HpackDecoder();
    assert.deepEqual(pairs(d.decode(hex("100870617373776f726406736563726574"))), [
      ["password", "secret"],
    ]);
    assert.throws(() => d.decode(hex("be")), "nothing was indexed");
  });

  it("C.2.4 an indexed field: :method: GET", () => {
    assert.deepEqual(pairs(new HpackDecoder().decode(hex("82"))), [[":method", "GET"]]);
  });

  for (const seq of SEQUENCES) {
    it(`${seq.name}: each block in order on one decoder`, () => {
      const d = new HpackDecoder(seq.tableSize);
      for (const ex of seq.examples) {
        assert.deepEqual(pairs(d.decode(hex(ex.block))), ex.fields, ex.name);
      }
    });
  }

  it("C.5 evicts as the RFC says: after C.5.1's four entries, C.5.2's :status 307 evicts :status 302", () => {
    const d = new HpackDecoder(256);
    d.decode(hex(SEQUENCES[2]?.examples[0]?.block ?? ""));
    d.decode(hex("4803333037c1c0bf"));
    // The table now holds (newest first) :status 307, location, date, cache-control: 62 is 307,
    // 65 is cache-control (C.5.2's table), and nothing is at 66.
    assert.deepEqual(pairs(d.decode(hex("be"))), [[":status", "307"]]);
    assert.deepEqual(pairs(d.decode(hex("c1"))), [["cache-control", "private"]]);
    assert.throws(() => d.decode(hex("c2")), "index 66 is beyond the table");
  });

  it("the encoder's blocks of every example decode back to the same fields", () => {
    for (const fields of [...REQUESTS, ...RESPONSES]) {
      const d = new HpackDecoder();
      // Twice on one decoder: an encoder that indexes must still agree with the decoder's table.
      assert.deepEqual(pairs(d.decode(encodeHeaders(fields))), fields);
      assert.deepEqual(pairs(d.decode(encodeHeaders(fields))), fields);
    }
  });
});
