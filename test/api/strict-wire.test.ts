/**
 * Protobuf's wire rules on requests (src/api/strict-wire.ts), against the real cairn.v1 and Raft
 * definitions: what protobufjs alone would misread is refused, naming the field; what any
 * protobuf encoder writes (protobufjs itself, packed or not) passes and decodes as before.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { MethodDefinition, ServiceDefinition } from "@grpc/grpc-js";
import fc from "fast-check";
import { loadCairnProto, loadRaftDefinition, loadRaftProto } from "../../src/api/proto.ts";
import { WireError, WireRules } from "../../src/api/strict-wire.ts";

type AnyMethod = MethodDefinition<unknown, unknown>;

const { definition, proto } = loadCairnProto();
const rules = new WireRules(definition, loadRaftDefinition());
const kv = proto.cairn.v1.KV.service as unknown as ServiceDefinition;
const admin = proto.cairn.v1.Admin.service as unknown as ServiceDefinition;
const raft = loadRaftProto().cairn.v1.Raft.service as unknown as ServiceDefinition;

const bytes = (...b: number[]): Buffer => Buffer.from(b);

function refusal(type: string, body: Buffer): string {
  try {
    rules.check(type, body);
  } catch (err) {
    assert.ok(err instanceof WireError, String(err));
    return err.message;
  }
  return "passed";
}

describe("protobuf's wire rules on requests", () => {
  it("refuses a tag with field 0, wire type 6 or 7, or a group, naming where", () => {
    const put = "cairn.v1.PutRequest";
    assert.equal(
      refusal(put, bytes(0x00, 0x05, 0x0a, 0x01, 0x61)),
      `${put}: field number 0 at byte 0`,
    );
    assert.equal(
      refusal(put, bytes(0x0a, 0x01, 0x61, 0x0e, 0x01)),
      `${put}: field 1 has wire type 6, which does not exist`,
    );
    assert.match(refusal(put, bytes(0x17)), /field 2 has wire type 7/);
    assert.match(refusal(put, bytes(0x0b, 0x0c)), /field 1 is a group \(wire type 3\)/);
    assert.match(refusal(put, bytes(0xfc, 0x06)), /field 111 is a group \(wire type 4\)/);
  });

  it("refuses a known field under another wire type than its type's, nested messages too", () => {
    assert.equal(
      refusal("cairn.v1.PutRequest", bytes(0x08, 0x01, 0x61)),
      "cairn.v1.PutRequest: field 1 (key) comes varint, its type is length-delimited",
    );
    assert.equal(
      refusal("cairn.v1.PutRequest", bytes(0x1a, 0x02, 0x0d, 0x00)),
      "cairn.v1.PutRequest.expected_version: field 1 (index) comes 32-bit, its type is varint",
    );
    assert.match(
      refusal("cairn.v1.ScanRequest", bytes(0x22, 0x01, 0x05)),
      /field 4 \(limit\) comes length-delimited/,
    );
  });

  it("refuses what runs past the message: a tag, a varint, a length, a fixed-size value", () => {
    const put = "cairn.v1.PutRequest";
    assert.match(refusal(put, bytes(0x8a)), /a tag cut short at byte 0/);
    assert.match(
      refusal(put, bytes(0x8a, 0x80, 0x80, 0x80, 0x80, 0x00)),
      /a tag longer than 5 bytes/,
    );
    assert.match(
      refusal(put, bytes(0xf8, 0xff, 0xff, 0xff, 0x7f, 0x00)),
      /field number \d+ past 536870911/,
    );
    assert.match(
      refusal(put, bytes(0x0a, 0x05, 0x61)),
      /cairn\.v1\.PutRequest\.key: 5 bytes announced, 1 left/,
    );
    assert.match(refusal(put, bytes(0x0a, 0xff)), /key: a length cut short/);
    const scan = "cairn.v1.ScanRequest";
    assert.match(refusal(scan, bytes(0x20, 0xff)), /limit: a varint cut short/);
    const eleven = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
    assert.match(refusal(scan, bytes(0x20, ...eleven)), /a varint longer than 10 bytes/);
    assert.match(refusal(scan, bytes(0x20, ...eleven.slice(0, 9), 0x02)), /a varint past 64 bits/);
    // An unknown fixed64 (field 9) cut short.
    assert.match(refusal(scan, bytes(0x49, 0x01, 0x02)), /field 9: a 8-byte value cut short/);
  });

  it("refuses a string that is not UTF-8, and takes one that is", () => {
    const node = "cairn.v1.NodeRequest";
    assert.equal(refusal(node, bytes(0x0a, 0x02, 0xc3, 0x28)), `${node}.node_id: not UTF-8`);
    assert.equal(
      refusal(node, Buffer.concat([bytes(0x0a, 0x05), Buffer.from("nœud", "utf8")])),
      "passed",
    );
  });

  it("skips unknown fields of every wire type, as protobuf does", () => {
    const unknown = bytes(
      ...[0xf8, 0x06, 0x96, 0x01], // field 111, varint
      ...[0xf9, 0x06, 1, 2, 3, 4, 5, 6, 7, 8], // fixed64
      ...[0xfa, 0x06, 0x02, 0xff, 0xfe], // length-delimited (not UTF-8: unread)
      ...[0xfd, 0x06, 1, 2, 3, 4], // fixed32
    );
    assert.equal(
      refusal("cairn.v1.PutRequest", Buffer.concat([bytes(0x0a, 0x01, 0x61), unknown])),
      "passed",
    );
  });

  it("takes a repeated number packed or one by one", () => {
    const type = "cairn.v1.ReadIndexRequest";
    // shard_ids = 3: packed [1, 300], then unpacked 7; terms = 5: packed, cut inside a value.
    assert.equal(refusal(type, bytes(0x1a, 0x03, 0x01, 0xac, 0x02, 0x18, 0x07)), "passed");
    assert.match(refusal(type, bytes(0x2a, 0x02, 0x01, 0xac)), /terms: a varint cut short/);
  });

  it("passes whatever protobufjs writes, which then decodes as before", () => {
    const put = kv["Put"] as AnyMethod;
    const scan = kv["Scan"] as AnyMethod;
    const readIndex = raft["ReadIndex"] as AnyMethod;
    const node = admin["GetNode"] as AnyMethod;
    const u64 = fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER });
    const blob = fc.uint8Array({ maxLength: 40 }).map((a) => Buffer.from(a));
    const cases: [AnyMethod, string, fc.Arbitrary<unknown>][] = [
      [
        put,
        "cairn.v1.PutRequest",
        fc.record(
          {
            key: blob,
            value: blob,
            expected_version: fc.option(fc.record({ index: u64, term: u64 }), { nil: undefined }),
          },
          { requiredKeys: ["key", "value"] },
        ),
      ],
      [
        scan,
        "cairn.v1.ScanRequest",
        fc.record({ start: blob, end: blob, prefix: blob, limit: fc.nat(), page_token: blob }),
      ],
      [
        readIndex,
        "cairn.v1.ReadIndexRequest",
        fc.record({
          cluster_id: fc.string(),
          shard_ids: fc.array(fc.nat()),
          replica: fc.string(),
          terms: fc.array(u64),
        }),
      ],
      [node, "cairn.v1.NodeRequest", fc.record({ node_id: fc.string({ unit: "grapheme" }) })],
    ];
    for (const [method, type, arb] of cases) {
      const strict = rules.strict(method, type);
      fc.assert(
        fc.property(arb, (message) => {
          const wire = method.requestSerialize(message);
          rules.check(type, wire);
          assert.deepEqual(strict.requestDeserialize(wire), method.requestDeserialize(wire));
        }),
        { numRuns: 300 },
      );
    }
  });

  it("holds every method of a service to them but those it is told to leave, and Raft.Stream", () => {
    const strictKv = rules.strictService(kv);
    const put = strictKv["Put"] as AnyMethod;
    assert.throws(() => put.requestDeserialize(bytes(0x08, 0x01, 0x61)), WireError);
    assert.deepEqual(
      put.requestDeserialize(bytes(0x0a, 0x01, 0x61)),
      (kv["Put"] as AnyMethod).requestDeserialize(bytes(0x0a, 0x01, 0x61)),
    );
    const stream = raft["Stream"] as AnyMethod;
    const strictRaft = rules.strictService(raft, [stream.path]);
    assert.equal(strictRaft["Stream"], stream, "left as it is");
    assert.throws(
      () => (strictRaft["ReadIndex"] as AnyMethod).requestDeserialize(bytes(0x00, 0x01)),
      /cairn\.v1\.ReadIndexRequest: field number 0/,
    );
  });
});
