/**
 * fast-check arbitraries of Raft messages as the peers exchange them (every type, the edge
 * values of their integers, node ids in any UTF-8, entries from empty to 1 MiB), for the peer
 * codecs' property tests (codec.test.ts, frame-codec.test.ts). Every message goes from FROM to
 * TO, as on one stream.
 */
import fc from "fast-check";
import {
  type Entry,
  type LogIndex,
  type Message,
  nodeId,
  type Snapshot,
  type Term,
} from "../../src/raft/index.ts";
import type { ShardMessage } from "../../src/replication/index.ts";

export const FROM = nodeId("n1");
export const TO = nodeId("n2");

export const u64 = fc.oneof(
  fc.constantFrom(0, 1, 127, 128, 2 ** 31, 2 ** 32, Number.MAX_SAFE_INTEGER),
  fc.integer({ min: 0, max: 1_000_000 }),
);
export const idx = u64.map((n) => n as LogIndex);
export const trm = u64.map((n) => n as Term);
// Node ids may be any UTF-8.
export const id = fc.oneof(
  fc.stringMatching(/^[a-z0-9-]{1,12}$/),
  fc.string({ unit: "grapheme", maxLength: 8 }),
  fc.string({ unit: "grapheme-ascii", minLength: 30, maxLength: 40 }),
);
export const node = id.map(nodeId);
export const LARGE = 64 * 1024;
export const data = fc.oneof(
  { arbitrary: fc.constant(new Uint8Array(0)), weight: 2 },
  { arbitrary: fc.uint8Array({ maxLength: 200 }), weight: 4 },
  {
    // Large payloads (64 KiB to 1 MiB), without generating them byte by byte.
    arbitrary: fc
      .record({ len: fc.integer({ min: LARGE, max: 1024 * 1024 }), fill: fc.nat(255) })
      .map(({ len, fill }) => {
        const b = new Uint8Array(len).fill(fill);
        b[0] = (fill + 7) & 0xff;
        b[len - 1] = (fill + 1) & 0xff;
        return b;
      }),
    weight: 1,
  },
);
export const entry: fc.Arbitrary<Entry> = fc.record({
  term: trm,
  index: idx,
  type: fc.constantFrom("normal" as const, "conf-change" as const),
  data,
});
export const snapshot: fc.Arbitrary<Snapshot> = fc.record({
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
export const message: fc.Arbitrary<Message> = fc.oneof(
  fc.record({
    ...env,
    type: fc.constant("append" as const),
    prevIndex: idx,
    prevTerm: trm,
    entries: fc.array(entry, { maxLength: 4 }),
    commit: idx,
    noReply: fc.boolean(),
  }),
  fc.record({
    ...env,
    type: fc.constant("append-resp" as const),
    index: idx,
    reject: fc.boolean(),
    hintIndex: idx,
    hintTerm: trm,
    lost: fc.boolean(),
  }),
  fc.record({
    ...env,
    type: fc.constantFrom("vote" as const, "prevote" as const),
    lastIndex: idx,
    lastTerm: trm,
    transfer: fc.boolean(),
    commit: idx,
    commitTerm: trm,
  }),
  fc.record({
    ...env,
    type: fc.constantFrom("vote-resp" as const, "prevote-resp" as const),
    reject: fc.boolean(),
    commit: idx,
    commitTerm: trm,
  }),
  fc.record({
    ...env,
    type: fc.constant("heartbeat" as const),
    commit: idx,
    readSeq: u64,
    quiesce: fc.boolean(),
    noReply: fc.boolean(),
  }),
  fc.record({ ...env, type: fc.constant("heartbeat-resp" as const), readSeq: u64 }),
  fc.record({ ...env, type: fc.constant("snapshot" as const), snapshot }),
  fc.record({ ...env, type: fc.constant("timeout-now" as const) }),
  fc.record({ ...env, type: fc.constant("wake" as const) }),
);
export const shardMessage: fc.Arbitrary<ShardMessage> = fc.record({
  shard: fc.oneof(fc.constant(0), fc.nat(65535), fc.constant(2 ** 32 - 1)),
  message,
});
