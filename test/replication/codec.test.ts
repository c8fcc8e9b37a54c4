/**
 * The peer codec: every Raft message survives encode → protobuf bytes (the real cairn.v1.Raft
 * serializer) → decode unchanged, and what the decoder cannot accept is refused.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { loadRaftProto } from "../../src/api/proto.ts";
import type { RaftFrame__Output } from "../../src/api/generated/cairn/v1/RaftFrame.ts";
import {
  type Entry,
  type LogIndex,
  type Message,
  nodeId,
  type NodeId,
  type Snapshot,
  type Term,
} from "../../src/raft/index.ts";
import { CodecError, decodeBatch, encodeBatch } from "../../src/replication/codec.ts";
import type { ShardMessage } from "../../src/replication/index.ts";

const method = loadRaftProto().cairn.v1.Raft.service.Stream;
const FROM = nodeId("n1");
const TO = nodeId("n2");

function roundTrip(messages: readonly ShardMessage[], from = FROM, to = TO): ShardMessage[] {
  const bytes = method.requestSerialize({ batch: encodeBatch(messages) });
  const frame = method.requestDeserialize(bytes) as RaftFrame__Output;
  assert.equal(frame.frame, "batch");
  assert.ok(frame.batch);
  return decodeBatch(frame.batch, from, to);
}

/** fast-check builds records without a prototype; the decoder builds plain objects. */
const plain = <T>(v: T): T => structuredClone(v);

const u64 = fc.oneof(
  fc.constantFrom(0, 1, 2 ** 32, Number.MAX_SAFE_INTEGER),
  fc.integer({ min: 0, max: 1_000_000 }),
);
const idx = u64.map((n) => n as LogIndex);
const trm = u64.map((n) => n as Term);
const node = fc.stringMatching(/^[a-z0-9-]{1,12}$/).map(nodeId);
const data = fc.oneof(
  { arbitrary: fc.constant(new Uint8Array(0)), weight: 2 },
  { arbitrary: fc.uint8Array({ maxLength: 64 }), weight: 4 },
  {
    // Large payloads (up to 1 MiB), without generating them byte by byte.
    arbitrary: fc
      .record({ len: fc.integer({ min: 64 * 1024, max: 1024 * 1024 }), fill: fc.nat(255) })
      .map(({ len, fill }) => {
        const b = new Uint8Array(len).fill(fill);
        b[len - 1] = (fill + 1) & 0xff;
        return b;
      }),
    weight: 1,
  },
);
const entry: fc.Arbitrary<Entry> = fc.record({
  term: trm,
  index: idx,
  type: fc.constantFrom("normal" as const, "conf-change" as const),
  data,
});
const snapshot: fc.Arbitrary<Snapshot> = fc.record({
  meta: fc.record({
    index: idx,
    term: trm,
    conf: fc.record({
      voters: fc.array(node, { maxLength: 5 }),
      learners: fc.array(node, { maxLength: 3 }),
    }),
  }),
  data,
});

const env = { from: fc.constant(FROM), to: fc.constant(TO), term: trm };
const message: fc.Arbitrary<Message> = fc.oneof(
  fc.record({
    ...env,
    type: fc.constant("append" as const),
    prevIndex: idx,
    prevTerm: trm,
    entries: fc.array(entry, { maxLength: 4 }),
    commit: idx,
  }),
  fc.record({
    ...env,
    type: fc.constant("append-resp" as const),
    index: idx,
    reject: fc.boolean(),
    hintIndex: idx,
    hintTerm: trm,
  }),
  fc.record({
    ...env,
    type: fc.constantFrom("vote" as const, "prevote" as const),
    lastIndex: idx,
    lastTerm: trm,
    transfer: fc.boolean(),
  }),
  fc.record({
    ...env,
    type: fc.constantFrom("vote-resp" as const, "prevote-resp" as const),
    reject: fc.boolean(),
  }),
  fc.record({
    ...env,
    type: fc.constant("heartbeat" as const),
    commit: idx,
    readSeq: u64,
    quiesce: fc.boolean(),
  }),
  fc.record({ ...env, type: fc.constant("heartbeat-resp" as const), readSeq: u64 }),
  fc.record({ ...env, type: fc.constant("snapshot" as const), snapshot }),
  fc.record({ ...env, type: fc.constant("timeout-now" as const) }),
  fc.record({ ...env, type: fc.constant("wake" as const) }),
);
const shardMessage: fc.Arbitrary<ShardMessage> = fc.record({
  shard: fc.oneof(fc.constant(0), fc.nat(65535), fc.constant(2 ** 32 - 1)),
  message,
});

describe("peer codec", () => {
  it("round-trips batches of every message type through protobuf bytes", () => {
    fc.assert(
      fc.property(fc.array(shardMessage, { maxLength: 6 }), (batch) => {
        assert.deepStrictEqual(roundTrip(batch), plain(batch));
      }),
      { numRuns: 300 },
    );
  });

  it("covers every message type with the edge values", () => {
    const types = new Set<string>();
    fc.assert(
      fc.property(message, (m) => {
        types.add(m.type);
        assert.deepStrictEqual(roundTrip([{ shard: 7, message: m }]), [
          { shard: 7, message: plain(m) },
        ]);
      }),
      { numRuns: 200 },
    );
    assert.equal(types.size, 11);
  });

  it("takes a message's ends from the stream, so they are not on the wire", () => {
    const m: Message = { from: FROM, to: TO, term: 3 as Term, type: "timeout-now" };
    const bytes = method.requestSerialize({ batch: encodeBatch([{ shard: 1, message: m }]) });
    assert.ok(bytes.length <= 12, `a timeout-now frame is ${bytes.length} bytes`);
    const other = nodeId("n9") as NodeId;
    assert.deepStrictEqual(roundTrip([{ shard: 1, message: m }], other, TO), [
      { shard: 1, message: { ...m, from: other } },
    ]);
  });

  it("refuses an unknown message type and a snapshot message without a snapshot", () => {
    const base = method.requestDeserialize(
      method.requestSerialize({ batch: encodeBatch([]) }),
    ) as RaftFrame__Output;
    assert.ok(base.batch);
    const wire = (m: object): RaftFrame__Output["batch"] =>
      method.requestDeserialize(
        method.requestSerialize({ batch: { messages: [{ shard_id: 1, message: m }] } }),
      ).batch as RaftFrame__Output["batch"];
    const unknown = wire({ type: 42, term: 1 });
    assert.ok(unknown);
    assert.throws(() => decodeBatch(unknown, FROM, TO), CodecError);
    const unspecified = wire({ term: 1 });
    assert.ok(unspecified);
    assert.throws(() => decodeBatch(unspecified, FROM, TO), CodecError);
    const bare = wire({ type: "RAFT_MESSAGE_TYPE_SNAPSHOT", term: 1 });
    assert.ok(bare);
    assert.throws(() => decodeBatch(bare, FROM, TO), /no snapshot/);
    const unsafe = wire({ type: "RAFT_MESSAGE_TYPE_HEARTBEAT", term: 2 ** 60 });
    assert.ok(unsafe);
    assert.throws(() => decodeBatch(unsafe, FROM, TO), /out of range/);
  });
});
