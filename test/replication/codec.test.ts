/**
 * The peer codec: every Raft message survives encode → protobuf bytes (the real cairn.v1.Raft
 * serializer) → decode unchanged, and what the decoder cannot accept is refused.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import fc from "fast-check";
import { loadRaftProto } from "../../src/api/proto.ts";
import type { RaftFrame__Output } from "../../src/api/generated/cairn/v1/RaftFrame.ts";
import { type Message, nodeId, type NodeId, type Term } from "../../src/raft/index.ts";
import { CodecError, decodeBatch, encodeBatch } from "../../src/replication/codec.ts";
import type { ShardMessage } from "../../src/replication/index.ts";
import { FROM, message, shardMessage, TO } from "./raft-arbitraries.ts";

const method = loadRaftProto().cairn.v1.Raft.service.Stream;

function roundTrip(messages: readonly ShardMessage[], from = FROM, to = TO): ShardMessage[] {
  const bytes = method.requestSerialize({ batch: encodeBatch(messages) });
  const frame = method.requestDeserialize(bytes) as RaftFrame__Output;
  assert.equal(frame.frame, "batch");
  assert.ok(frame.batch);
  return decodeBatch(frame.batch, from, to);
}

/** fast-check builds records without a prototype; the decoder builds plain objects. */
const plain = <T>(v: T): T => structuredClone(v);

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
