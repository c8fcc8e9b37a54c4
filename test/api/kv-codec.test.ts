import assert from "node:assert/strict";
import { describe, it } from "node:test";
import type { MethodDefinition, ServiceDefinition } from "@grpc/grpc-js";
import fc from "fast-check";
import { withFastKvCodecs } from "../../src/api/kv-codec.ts";
import { loadCairnProto } from "../../src/api/proto.ts";

type AnyMethod = MethodDefinition<unknown, unknown>;

const slow = loadCairnProto().proto.cairn.v1.KV.service as ServiceDefinition;
const fast = withFastKvCodecs(slow);
const method = (def: ServiceDefinition, name: string): AnyMethod => def[name] as AnyMethod;

/** Decodes with both; both throw, or both give the same object (Buffers compared by content). */
function sameDecode(name: string, buf: Buffer): void {
  let expected: unknown;
  let expectedError: unknown = null;
  try {
    expected = method(slow, name).requestDeserialize(buf);
  } catch (err) {
    expectedError = err;
  }
  if (expectedError !== null) {
    assert.throws(() => method(fast, name).requestDeserialize(buf));
    return;
  }
  const actual = method(fast, name).requestDeserialize(buf);
  assert.deepEqual(actual, expected, `${name} ${buf.toString("hex")}`);
  assert.deepEqual(Object.keys(actual as object), Object.keys(expected as object));
}

const bytes = fc.uint8Array({ maxLength: 40 }).map((a) => Buffer.from(a));
/** Mostly small numbers, some near and above the fast path's 2^49 and up to 2^53. */
const u64 = fc.oneof(
  fc.nat(300),
  fc.nat(),
  fc.integer({ min: 2 ** 48, max: 2 ** 50 }),
  fc.integer({ min: 0, max: Number.MAX_SAFE_INTEGER }),
);
const version = fc.record({ index: u64, term: u64 });

/** Random field soup: known fields, repeated ones, unknown ones, odd wire types, in any order. */
const field = fc.oneof(
  fc
    .record({ tag: fc.constantFrom(0x0a, 0x12, 0x1a, 0x22, 0x52), body: bytes })
    .map(({ tag, body }) => Buffer.concat([Buffer.from([tag, body.length]), body])),
  fc.record({ tag: fc.constantFrom(0x08, 0x10, 0x18, 0x28), n: fc.nat(1000) }).map(({ tag, n }) => {
    const out: number[] = [tag];
    let v = n;
    while (v >= 0x80) {
      out.push((v & 0x7f) | 0x80);
      v >>>= 7;
    }
    out.push(v);
    return Buffer.from(out);
  }),
  fc.uint8Array({ minLength: 1, maxLength: 4 }).map((a) => Buffer.from(a)),
);
const soup = fc.array(field, { maxLength: 5 }).map((parts) => Buffer.concat(parts));

describe("KV codecs (Put, Get) against protobufjs", () => {
  it("decode a PutRequest as protobufjs does: sent by a client, or any bytes at all", () => {
    const put = method(slow, "Put");
    fc.assert(
      fc.property(
        bytes,
        fc.option(bytes, { nil: undefined }),
        fc.option(version, { nil: undefined }),
        (key, value, expected) => {
          const req: Record<string, unknown> = { key };
          if (value !== undefined) req["value"] = value;
          if (expected !== undefined) req["expected_version"] = expected;
          sameDecode("Put", put.requestSerialize(req));
        },
      ),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(soup, (buf) => sameDecode("Put", buf)),
      { numRuns: 5000 },
    );
  });

  it("decode a GetRequest as protobufjs does: sent by a client, or any bytes at all", () => {
    const get = method(slow, "Get");
    fc.assert(
      fc.property(bytes, fc.constantFrom(undefined, "LINEARIZABLE", "SERIALIZABLE"), (key, c) =>
        sameDecode(
          "Get",
          get.requestSerialize(c === undefined ? { key } : { key, consistency: c }),
        ),
      ),
      { numRuns: 1000 },
    );
    fc.assert(
      fc.property(soup, (buf) => sameDecode("Get", buf)),
      { numRuns: 5000 },
    );
  });

  it("decode and encode what clients send and handlers answer without protobufjs", () => {
    let slowCalls = 0;
    const counting = (def: AnyMethod): AnyMethod => ({
      ...def,
      requestDeserialize: (buf: Buffer) => (slowCalls++, def.requestDeserialize(buf)),
      responseSerialize: (res: unknown) => (slowCalls++, def.responseSerialize(res)),
    });
    const own = withFastKvCodecs({
      ...slow,
      Put: counting(method(slow, "Put")),
      Get: counting(method(slow, "Get")),
    });
    const put = method(own, "Put");
    const get = method(own, "Get");
    const v = { index: 12345, term: 3 };
    put.requestDeserialize(
      method(slow, "Put").requestSerialize({ key: Buffer.from("k"), value: Buffer.from("v") }),
    );
    put.requestDeserialize(
      method(slow, "Put").requestSerialize({ key: Buffer.from("k"), expected_version: v }),
    );
    get.requestDeserialize(
      method(slow, "Get").requestSerialize({ key: Buffer.from("k"), consistency: "SERIALIZABLE" }),
    );
    put.responseSerialize({ version: v });
    get.responseSerialize({ found: false });
    get.responseSerialize({ found: true, value: Buffer.from("v"), version: v });
    assert.equal(slowCalls, 0);
    put.requestDeserialize(Buffer.from([0x0a, 0x01, 0x6b, 0x0a, 0x01, 0x6c])); // key twice
    assert.equal(slowCalls, 1, "a repeated field goes to protobufjs");
  });

  it("keys and values are views of the received bytes, not copies", () => {
    const buf = method(slow, "Put").requestSerialize({
      key: Buffer.from("k1"),
      value: Buffer.from("v1"),
    });
    const req = method(fast, "Put").requestDeserialize(buf) as { key: Buffer; value: Buffer };
    assert.equal(req.key.buffer, buf.buffer);
    assert.equal(req.value.buffer, buf.buffer);
  });

  it("encode the Put and Get handlers' answers byte for byte as protobufjs does", () => {
    fc.assert(
      fc.property(version, (v) => {
        const res = { version: v };
        assert.deepEqual(
          method(fast, "Put").responseSerialize(res),
          method(slow, "Put").responseSerialize(res),
        );
      }),
      { numRuns: 2000 },
    );
    fc.assert(
      fc.property(fc.option(fc.record({ value: bytes, version }), { nil: null }), (item) => {
        const res = item === null ? { found: false } : { found: true, ...item };
        assert.deepEqual(
          method(fast, "Get").responseSerialize(res),
          method(slow, "Get").responseSerialize(res),
        );
      }),
      { numRuns: 2000 },
    );
  });

  it("hand any other answer to protobufjs", () => {
    for (const res of [
      { version: { index: -1, term: 0 } },
      { version: { index: 1.5, term: 0 } },
      { version: { index: "7", term: 0 } },
      { version: null },
      {},
    ]) {
      assert.deepEqual(
        method(fast, "Put").responseSerialize(res),
        method(slow, "Put").responseSerialize(res),
      );
    }
    for (const res of [{ found: true }, { found: true, value: Buffer.from("x") }, {}]) {
      assert.deepEqual(
        method(fast, "Get").responseSerialize(res),
        method(slow, "Get").responseSerialize(res),
      );
    }
  });
});
