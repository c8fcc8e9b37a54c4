/**
 * The hand-written Stream frame codec (src/replication/frame-codec.ts) against its model: the
 * project's protobufjs serializer followed by codec.ts. Frames it encodes decode there to the
 * same messages, frames protobufjs encodes decode here to the same messages, and mangled frames
 * (unknown fields, shuffled order, replaced occurrences, truncations, flipped bits) either
 * decode to what the model decodes or are refused with CodecError.
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
  type MessageType,
  type Term,
} from "../../src/raft/index.ts";
import { CodecError, decodeBatch, encodeBatch } from "../../src/replication/codec.ts";
import {
  type Handshake,
  type PeerCall,
  type PeerReply,
} from "../../src/replication/frame-codec.ts";
import { decodeBatchMessages, decodeFrame } from "../../src/replication/frame-decode.ts";
import {
  encodeBatchFrame,
  encodeCallFrame,
  encodeHandshakeFrame,
  encodeReplyFrame,
} from "../../src/replication/frame-encode.ts";
import type { ShardMessage } from "../../src/replication/index.ts";
import { FROM, id, LARGE, message, shardMessage, TO } from "./raft-arbitraries.ts";

const method = loadRaftProto().cairn.v1.Raft.service.Stream;

/** fast-check builds records without a prototype; the decoders build plain objects. */
const plain = <T>(v: T): T => structuredClone(v);

// ── the two decoders, side by side ──────────────────────────────────────────────────────────

/** A call or reply with its bytes as hex, so that a Buffer and a Uint8Array compare equal. */
interface CallSeen {
  readonly id: number;
  readonly method: string;
  readonly timeoutMs: number;
  readonly request: string;
}
interface ReplySeen {
  readonly id: number;
  readonly code: number;
  readonly details: string;
  readonly response: string;
  readonly trailers: [string, string][];
}

type Decoded =
  | { readonly kind: "handshake"; readonly handshake: Handshake }
  | { readonly kind: "batch"; readonly toReplicaId: string; readonly messages: ShardMessage[] }
  | { readonly kind: "call"; readonly call: CallSeen }
  | { readonly kind: "reply"; readonly reply: ReplySeen }
  | { readonly kind: "none" };

const hexOf = (b: Uint8Array): string =>
  Buffer.from(b.buffer, b.byteOffset, b.length).toString("hex");
const callSeen = (c: PeerCall): Decoded => ({
  kind: "call",
  call: { id: c.id, method: c.method, timeoutMs: c.timeoutMs, request: hexOf(c.request) },
});
const replySeen = (r: PeerReply): Decoded => ({
  kind: "reply",
  reply: {
    id: r.id,
    code: r.code,
    details: r.details,
    response: hexOf(r.response),
    trailers: r.trailers.map(([k, v]) => [k, v]),
  },
});

function decodeMine(bytes: Uint8Array): Decoded {
  const frame = decodeFrame(bytes);
  if (frame.kind === "call") return callSeen(frame.call);
  if (frame.kind === "reply") return replySeen(frame.reply);
  if (frame.kind !== "batch") return frame;
  return {
    kind: "batch",
    toReplicaId: frame.toReplicaId,
    messages: decodeBatchMessages(frame.body, FROM, TO),
  };
}

/** The model: protobufjs as the transport used it, then codec.ts. */
function decodeModel(bytes: Uint8Array): Decoded {
  const frame = method.requestDeserialize(Buffer.from(bytes)) as RaftFrame__Output;
  if (frame.frame === "batch" && frame.batch) {
    return {
      kind: "batch",
      toReplicaId: frame.batch.to_replica_id,
      messages: decodeBatch(frame.batch, FROM, TO),
    };
  }
  if (frame.frame === "handshake" && frame.handshake) {
    return { kind: "handshake", handshake: { ...frame.handshake } };
  }
  if (frame.frame === "call" && frame.call) {
    const c = frame.call;
    return callSeen({ id: c.id, method: c.method, timeoutMs: c.timeout_ms, request: c.request });
  }
  if (frame.frame === "reply" && frame.reply) {
    const r = frame.reply;
    return replySeen({
      id: r.id,
      code: r.code,
      details: r.details,
      response: r.response,
      trailers: r.trailers.map((t) => [t.key, t.value]),
    });
  }
  return { kind: "none" };
}

type Outcome = { readonly ok: true; readonly value: Decoded } | { readonly ok: false };

function outcome(decode: (b: Uint8Array) => Decoded, bytes: Uint8Array): Outcome {
  try {
    return { ok: true, value: decode(bytes) };
  } catch {
    return { ok: false };
  }
}

/** Mine refuses only with CodecError. */
function mineOutcome(bytes: Uint8Array): Outcome {
  try {
    return { ok: true, value: decodeMine(bytes) };
  } catch (err) {
    if (!(err instanceof CodecError)) throw err;
    return { ok: false };
  }
}

/** True when the model's frame holds several oneof fields (where the two differ by design). */
function holdsBoth(bytes: Uint8Array): boolean {
  try {
    const frame = method.requestDeserialize(Buffer.from(bytes)) as RaftFrame__Output;
    const present = (v: unknown): boolean => v !== null && v !== undefined;
    return [frame.handshake, frame.batch, frame.call, frame.reply].filter(present).length > 1;
  } catch {
    return false;
  }
}

/**
 * Invariant 3 of frame-codec.ts: whatever mine accepts, the model accepts, with the same
 * result (but for the one documented oneof difference). Mine may refuse more.
 */
function assertAgrees(bytes: Uint8Array): Outcome {
  const mine = mineOutcome(bytes);
  if (!mine.ok) return mine;
  const model = outcome(decodeModel, bytes);
  assert.ok(model.ok, `accepted here, refused by the model: ${Buffer.from(bytes).toString("hex")}`);
  if (!holdsBoth(bytes)) assert.deepStrictEqual(mine.value, model.value);
  return mine;
}

const batchFrameOf = (messages: readonly ShardMessage[], toReplicaId = ""): Decoded => ({
  kind: "batch",
  toReplicaId,
  messages: plain([...messages]),
});

// ── arbitraries ─────────────────────────────────────────────────────────────────────────────

const batch = fc.array(shardMessage, { maxLength: 6 });
const toReplicaId = fc.oneof(fc.constant(""), id);
const handshake: fc.Arbitrary<Handshake> = fc.record({
  cluster_id: fc.oneof(fc.constant(""), fc.uuid(), id),
  from_node_id: fc.oneof(fc.constant(""), id),
  to_node_id: fc.oneof(fc.constant(""), id),
  from_replica_id: fc.oneof(fc.constant(""), id),
});

const text = fc.oneof(fc.constant(""), fc.string({ maxLength: 24 }), id);
const bytesArb = fc.oneof(
  fc.constant(new Uint8Array(0)),
  fc.uint8Array({ maxLength: 64 }),
  fc.uint8Array({ minLength: 200, maxLength: 300 }),
);
const callArb: fc.Arbitrary<PeerCall> = fc.record({
  id: fc.oneof(fc.constant(0), fc.nat(), fc.constant(Number.MAX_SAFE_INTEGER)),
  method: fc.oneof(fc.constant("/cairn.v1.KV/Put"), text),
  timeoutMs: fc.oneof(fc.constant(0), fc.nat(), fc.constant(0xffffffff)),
  request: bytesArb,
});
const replyArb: fc.Arbitrary<PeerReply> = fc.record({
  id: fc.oneof(fc.constant(0), fc.nat(), fc.constant(Number.MAX_SAFE_INTEGER)),
  code: fc.oneof(fc.constant(0), fc.integer({ min: 1, max: 16 }), fc.constant(0xffffffff)),
  details: text,
  response: bytesArb,
  trailers: fc.array(fc.tuple(text, text), { maxLength: 3 }),
});

function callWire(c: PeerCall, defaults: boolean): Wire[] {
  const f: Wire[] = [];
  if (c.id !== 0 || defaults) f.push({ n: 1, t: "varint", v: BigInt(c.id) });
  if (c.method !== "" || defaults) f.push({ n: 2, t: "len", v: utf8(c.method) });
  if (c.timeoutMs !== 0 || defaults) f.push({ n: 3, t: "varint", v: BigInt(c.timeoutMs) });
  if (c.request.length > 0 || defaults) f.push({ n: 4, t: "len", v: c.request });
  return f;
}

function replyWire(r: PeerReply, defaults: boolean): Wire[] {
  const f: Wire[] = [];
  if (r.id !== 0 || defaults) f.push({ n: 1, t: "varint", v: BigInt(r.id) });
  if (r.code !== 0 || defaults) f.push({ n: 2, t: "varint", v: BigInt(r.code) });
  if (r.details !== "" || defaults) f.push({ n: 3, t: "len", v: utf8(r.details) });
  if (r.response.length > 0 || defaults) f.push({ n: 4, t: "len", v: r.response });
  for (const [k, v] of r.trailers) {
    const m: Wire[] = [];
    if (k !== "" || defaults) m.push({ n: 1, t: "len", v: utf8(k) });
    if (v !== "" || defaults) m.push({ n: 2, t: "len", v: utf8(v) });
    f.push({ n: 5, t: "len", v: m, rep: true });
  }
  return f;
}

// ── hand-built wire: a naive protobuf writer and the proto mapping, field by field ──────────

type Wire =
  | { readonly n: number; readonly t: "varint"; readonly v: bigint; readonly rep?: boolean }
  | {
      readonly n: number;
      readonly t: "len";
      /** Bytes (a string or bytes field), or a sub-message's fields. */
      readonly v: Uint8Array | readonly Wire[];
      readonly rep?: boolean;
    }
  | {
      readonly n: number;
      readonly t: "i64" | "i32" | "raw";
      readonly v: Uint8Array;
      readonly rep?: boolean;
    };

const WIRE_TYPE = { varint: 0, i64: 1, len: 2, i32: 5 } as const;

function varint(v: bigint): Uint8Array {
  const out: number[] = [];
  do {
    const b = Number(v & 0x7fn);
    v >>= 7n;
    out.push(v === 0n ? b : b | 0x80);
  } while (v !== 0n);
  return Uint8Array.from(out);
}

/** Serializes fields in the order given; "raw" writes its bytes after the tag, unchecked. */
function serialize(fields: readonly Wire[]): Uint8Array {
  const parts: Uint8Array[] = [];
  for (const f of fields) {
    if (f.t === "raw") {
      parts.push(f.v);
      continue;
    }
    parts.push(varint(BigInt(f.n) * 8n + BigInt(WIRE_TYPE[f.t])));
    if (f.t === "varint") {
      parts.push(varint(f.v));
    } else if (f.t === "len") {
      const body = f.v instanceof Uint8Array ? f.v : serialize(f.v);
      parts.push(varint(BigInt(body.length)), body);
    } else {
      parts.push(f.v);
    }
  }
  return Buffer.concat(parts);
}

const utf8 = (s: string): Uint8Array => Buffer.from(s, "utf8");

const TYPE_NUMBER: Readonly<Record<MessageType, number>> = {
  append: 1,
  "append-resp": 2,
  vote: 3,
  "vote-resp": 4,
  prevote: 5,
  "prevote-resp": 6,
  heartbeat: 7,
  "heartbeat-resp": 8,
  snapshot: 9,
  "timeout-now": 10,
  wake: 11,
};

/**
 * A message's fields as raft.proto and codec.ts map them. `defaults`: zero values written
 * out (protobufjs writes every field it is given) instead of left out (proto3).
 */
function messageWire(m: Message, defaults: boolean): Wire[] {
  const f: Wire[] = [];
  const num = (n: number, v: number | boolean): void => {
    const b = BigInt(typeof v === "boolean" ? Number(v) : v);
    if (b !== 0n || defaults) f.push({ n, t: "varint", v: b });
  };
  num(1, TYPE_NUMBER[m.type]);
  num(2, m.term);
  switch (m.type) {
    case "append":
      num(3, m.prevIndex);
      num(4, m.prevTerm);
      for (const e of m.entries) f.push({ n: 5, t: "len", v: entryWire(e, defaults), rep: true });
      num(6, m.commit);
      num(17, m.noReply);
      break;
    case "append-resp":
      num(7, m.index);
      num(8, m.reject);
      num(9, m.hintIndex);
      num(10, m.hintTerm);
      num(18, m.lost);
      break;
    case "vote":
    case "prevote":
      num(6, m.commit);
      num(11, m.lastIndex);
      num(12, m.lastTerm);
      num(13, m.transfer);
      num(19, m.commitTerm);
      break;
    case "vote-resp":
    case "prevote-resp":
      num(6, m.commit);
      num(8, m.reject);
      num(19, m.commitTerm);
      break;
    case "heartbeat":
      num(6, m.commit);
      num(14, m.readSeq);
      num(16, m.quiesce);
      num(17, m.noReply);
      break;
    case "heartbeat-resp":
      num(14, m.readSeq);
      break;
    case "snapshot": {
      const { meta } = m.snapshot;
      const mf: Wire[] = [];
      if (meta.index !== 0 || defaults) mf.push({ n: 1, t: "varint", v: BigInt(meta.index) });
      if (meta.term !== 0 || defaults) mf.push({ n: 2, t: "varint", v: BigInt(meta.term) });
      for (const v of meta.conf.voters) mf.push({ n: 3, t: "len", v: utf8(v), rep: true });
      for (const l of meta.conf.learners) mf.push({ n: 4, t: "len", v: utf8(l), rep: true });
      const sf: Wire[] = [{ n: 1, t: "len", v: mf }];
      if (m.snapshot.data.length > 0 || defaults) sf.push({ n: 2, t: "len", v: m.snapshot.data });
      f.push({ n: 15, t: "len", v: sf });
      break;
    }
    case "timeout-now":
    case "wake":
      break;
  }
  return f;
}

function entryWire(e: Entry, defaults: boolean): Wire[] {
  const f: Wire[] = [];
  if (e.term !== 0 || defaults) f.push({ n: 1, t: "varint", v: BigInt(e.term) });
  if (e.index !== 0 || defaults) f.push({ n: 2, t: "varint", v: BigInt(e.index) });
  if (e.type === "conf-change" || defaults) {
    f.push({ n: 3, t: "varint", v: e.type === "conf-change" ? 1n : 0n });
  }
  if (e.data.length > 0 || defaults) f.push({ n: 4, t: "len", v: e.data });
  return f;
}

function batchWire(messages: readonly ShardMessage[], to: string, defaults: boolean): Wire[] {
  const f: Wire[] = messages.map(({ shard, message: m }) => {
    const item: Wire[] = [];
    if (shard !== 0 || defaults) item.push({ n: 1, t: "varint", v: BigInt(shard) });
    item.push({ n: 2, t: "len", v: messageWire(m, defaults) });
    return { n: 1, t: "len", v: item, rep: true };
  });
  if (to !== "" || defaults) f.push({ n: 2, t: "len", v: utf8(to) });
  return f;
}

function handshakeWire(hs: Handshake, defaults: boolean): Wire[] {
  return [hs.cluster_id, hs.from_node_id, hs.to_node_id, hs.from_replica_id].flatMap((s, i) =>
    s !== "" || defaults ? [{ n: i + 1, t: "len" as const, v: utf8(s) }] : [],
  );
}

/** A seeded generator, so that one fast-check integer drives a whole mangling. */
function rng(seed: number): (n: number) => number {
  let s = seed >>> 0;
  return (n) => {
    s = (s + 0x6d2b79f5) >>> 0;
    let t = s;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) % n;
  };
}

/** A field no message of raft.proto knows (every message's fields are numbered 1 to 19 at most). */
function unknownField(pick: (n: number) => number): Wire {
  const n = pick(2) === 0 ? 20 + pick(40) : 2 ** 29 - 1 - pick(3);
  const bytes = Uint8Array.from({ length: pick(12) }, () => pick(256));
  switch (pick(4)) {
    case 0:
      return { n, t: "varint", v: BigInt(pick(2) === 0 ? pick(300) : 2 ** 52 + pick(99)) * 3n };
    case 1:
      return { n, t: "i64", v: Uint8Array.from({ length: 8 }, () => pick(256)) };
    case 2:
      return { n, t: "len", v: bytes };
    default:
      return { n, t: "i32", v: Uint8Array.from({ length: 4 }, () => pick(256)) };
  }
}

/**
 * What every decoder must see through, at every level: unknown fields anywhere, fields in any
 * order (a repeated field's items keeping theirs, interleaved with the rest), and a decoy
 * occurrence before each singular field, which the real one replaces (a decoy sub-message is
 * empty, which would be refused were it kept: a message of type 0, a snapshot without meta).
 */
function mangle(fields: readonly Wire[], pick: (n: number) => number, topLevel = false): Wire[] {
  const out: Wire[] = [];
  for (const f of fields) {
    if (f.t === "len" && !(f.v instanceof Uint8Array)) {
      // A top-level decoy batch would have to be one of a frame's oneof fields: left out.
      if (!f.rep && !topLevel && pick(3) === 0) out.push({ n: f.n, t: "len", v: [] });
      out.push({ ...f, v: mangle(f.v, pick) });
      continue;
    }
    if (!f.rep && pick(3) === 0) {
      // Below 2^32: a 32-bit field's varint longer than five bytes is refused (see the caveats).
      if (f.t === "varint") out.push({ n: f.n, t: "varint", v: BigInt(pick(2 ** 30)) * 3n });
      else if (f.t === "len") out.push({ n: f.n, t: "len", v: Uint8Array.of(pick(256)) });
    }
    out.push(f);
  }
  for (let i = pick(4); i > 0; i--) out.splice(pick(out.length + 1), 0, unknownField(pick));
  // Shuffle, keeping the order among the fields of one number.
  const queues = new Map<number, Wire[]>();
  for (const f of out) queues.set(f.n, [...(queues.get(f.n) ?? []), f]);
  const shuffled: Wire[] = [];
  while (queues.size > 0) {
    const keys = [...queues.keys()];
    const k = keys[pick(keys.length)] as number;
    const q = queues.get(k) as Wire[];
    shuffled.push(q.shift() as Wire);
    if (q.length === 0) queues.delete(k);
  }
  return shuffled;
}

const hex = (h: string): Uint8Array => Buffer.from(h.replace(/\s+/g, ""), "hex");
const item = (shard: number, msg: readonly Wire[]): Wire => ({
  n: 1,
  t: "len",
  v: [
    { n: 1, t: "varint", v: BigInt(shard) },
    { n: 2, t: "len", v: msg },
  ],
});
const frameOfItems = (...items: Wire[]): Uint8Array => serialize([{ n: 2, t: "len", v: items }]);
const frameOfMessage = (msg: readonly Wire[]): Uint8Array => frameOfItems(item(1, msg));
const field = (n: number, v: bigint | number): Wire => ({ n, t: "varint", v: BigInt(v) });

/** `good` with the bits at `flips` (each taken modulo its length in bits) inverted. */
function flipped(good: Uint8Array, flips: readonly number[]): Uint8Array {
  const bad = Uint8Array.from(good);
  for (const f of flips) {
    const at = f % (bad.length * 8);
    bad[at >> 3] = (bad[at >> 3] as number) ^ (1 << (at & 7));
  }
  return bad;
}

function refused(bytes: Uint8Array, pattern?: RegExp): void {
  assert.throws(
    () => decodeMine(bytes),
    (err: unknown) =>
      err instanceof CodecError && (pattern === undefined || pattern.test(String(err))),
    Buffer.from(bytes).toString("hex"),
  );
}

// ── the tests ───────────────────────────────────────────────────────────────────────────────

describe("raft frame codec", () => {
  describe("compatibility with protobufjs and codec.ts", () => {
    it("encodes batches that protobufjs decodes, through codec.ts, to the same messages", () => {
      const types = new Set<string>();
      fc.assert(
        fc.property(batch, toReplicaId, (messages, to) => {
          for (const { message: m } of messages) types.add(m.type);
          const bytes = encodeBatchFrame(messages, to);
          assert.deepStrictEqual(decodeModel(bytes), batchFrameOf(messages, to));
          assert.deepStrictEqual(decodeMine(bytes), batchFrameOf(messages, to));
        }),
        { numRuns: 300 },
      );
      assert.equal(types.size, 11);
    });

    it("decodes the batches protobufjs encodes from codec.ts's objects to the same messages", () => {
      fc.assert(
        fc.property(batch, toReplicaId, (messages, to) => {
          const bytes = method.requestSerialize({
            batch: { ...encodeBatch(messages), to_replica_id: to },
          });
          assert.deepStrictEqual(decodeMine(bytes), batchFrameOf(messages, to));
          assert.deepStrictEqual(decodeMine(bytes), decodeModel(bytes));
        }),
        { numRuns: 300 },
      );
    });

    it("round-trips every message type alone, with the edge values", () => {
      const types = new Set<string>();
      fc.assert(
        fc.property(message, (m) => {
          types.add(m.type);
          const bytes = encodeBatchFrame([{ shard: 7, message: m }], "");
          assert.deepStrictEqual(decodeMine(bytes), batchFrameOf([{ shard: 7, message: m }]));
          assert.deepStrictEqual(decodeModel(bytes), decodeMine(bytes));
        }),
        { numRuns: 300 },
      );
      assert.equal(types.size, 11);
    });

    it("carries entries and snapshots of 64 KiB and more, as views of the input", () => {
      const big = new Uint8Array(LARGE + 3).map((_, i) => i * 31);
      const image = new Uint8Array(3 * LARGE).map((_, i) => i * 7);
      const messages: ShardMessage[] = [
        {
          shard: 1,
          message: {
            from: FROM,
            to: TO,
            term: 4 as Term,
            type: "append",
            prevIndex: 9 as LogIndex,
            prevTerm: 4 as Term,
            entries: [{ term: 4 as Term, index: 10 as LogIndex, type: "normal", data: big }],
            commit: 9 as LogIndex,
            noReply: false,
          },
        },
        {
          shard: 2,
          message: {
            from: FROM,
            to: TO,
            term: 4 as Term,
            type: "snapshot",
            snapshot: {
              meta: { index: 9 as LogIndex, term: 3 as Term, conf: { voters: [TO], learners: [] } },
              data: image,
            },
          },
        },
      ];
      for (const bytes of [
        encodeBatchFrame(messages, ""),
        method.requestSerialize({ batch: encodeBatch(messages) }),
      ]) {
        const decoded = decodeMine(bytes);
        assert.deepStrictEqual(decoded, batchFrameOf(messages));
        assert.ok(decoded.kind === "batch");
        const [append, snap] = decoded.messages.map((s) => s.message);
        assert.ok(append?.type === "append" && snap?.type === "snapshot");
        for (const d of [append.entries[0]?.data, snap.snapshot.data]) {
          assert.ok(d !== undefined);
          assert.equal(Object.getPrototypeOf(d), Uint8Array.prototype, "a plain Uint8Array");
          assert.equal(d.buffer, bytes.buffer, "a view of the input, not a copy");
        }
      }
    });

    it("encodes empty batches, and decodes protobufjs's", () => {
      assert.deepStrictEqual([...encodeBatchFrame([], "")], [0x12, 0x00]);
      for (const to of ["", "n2@7"]) {
        const expected = batchFrameOf([], to);
        assert.deepStrictEqual(decodeModel(encodeBatchFrame([], to)), expected);
        assert.deepStrictEqual(
          decodeMine(method.requestSerialize({ batch: { messages: [], to_replica_id: to } })),
          expected,
        );
        assert.deepStrictEqual(decodeMine(encodeBatchFrame([], to)), expected);
      }
    });

    it("carries handshakes both ways", () => {
      fc.assert(
        fc.property(handshake, (hs) => {
          const expected = { kind: "handshake", handshake: plain(hs) };
          assert.deepStrictEqual(decodeModel(encodeHandshakeFrame(hs)), expected);
          assert.deepStrictEqual(decodeMine(encodeHandshakeFrame(hs)), expected);
          assert.deepStrictEqual(decodeMine(method.requestSerialize({ handshake: hs })), expected);
        }),
        { numRuns: 300 },
      );
      // Even an all-default handshake is present: the oneof says "handshake".
      const empty = { cluster_id: "", from_node_id: "", to_node_id: "", from_replica_id: "" };
      assert.deepStrictEqual([...encodeHandshakeFrame(empty)], [0x0a, 0x00]);
      assert.equal(decodeFrame(encodeHandshakeFrame(empty)).kind, "handshake");
    });

    it("carries forwarded calls and their replies both ways, as protobufjs does", () => {
      fc.assert(
        fc.property(callArb, replyArb, (c, r) => {
          const call = encodeCallFrame(c);
          assert.deepStrictEqual(decodeMine(call), callSeen(c));
          assert.deepStrictEqual(decodeModel(call), callSeen(c));
          const reply = encodeReplyFrame(r);
          assert.deepStrictEqual(decodeMine(reply), replySeen(r));
          assert.deepStrictEqual(decodeModel(reply), replySeen(r));
          // And what protobufjs encodes decodes here the same.
          const theirs = method.requestSerialize({
            call: { id: c.id, method: c.method, timeout_ms: c.timeoutMs, request: c.request },
          });
          assert.deepStrictEqual(decodeMine(theirs), callSeen(c));
          const theirReply = method.requestSerialize({
            reply: {
              id: r.id,
              code: r.code,
              details: r.details,
              response: r.response,
              trailers: r.trailers.map(([key, value]) => ({ key, value })),
            },
          });
          assert.deepStrictEqual(decodeMine(theirReply), replySeen(r));
        }),
        { numRuns: 300 },
      );
    });

    it("sees through unknown fields, shuffled order and replaced fields in calls and replies", () => {
      fc.assert(
        fc.property(callArb, replyArb, fc.boolean(), fc.integer(), (c, r, defaults, seed) => {
          const pick = rng(seed);
          const call = serialize(
            mangle([{ n: 3, t: "len", v: callWire(c, defaults) }], pick, true),
          );
          assert.deepStrictEqual(decodeMine(call), callSeen(c));
          assert.deepStrictEqual(decodeModel(call), callSeen(c));
          const reply = serialize(
            mangle([{ n: 4, t: "len", v: replyWire(r, defaults) }], pick, true),
          );
          assert.deepStrictEqual(decodeMine(reply), replySeen(r));
          assert.deepStrictEqual(decodeModel(reply), replySeen(r));
        }),
        { numRuns: 300 },
      );
    });

    it("refuses a call or reply id above 2^53 - 1; truncated and flipped ones agree or are refused", () => {
      refused(serialize([{ n: 3, t: "len", v: [{ n: 1, t: "varint", v: 2n ** 53n }] }]), /range/);
      refused(serialize([{ n: 4, t: "len", v: [{ n: 1, t: "varint", v: 2n ** 60n }] }]), /range/);
      fc.assert(
        fc.property(
          callArb,
          replyArb,
          fc.array(fc.nat(), { minLength: 1, maxLength: 3 }),
          fc.nat(),
          (c, r, flips, cut) => {
            for (const good of [encodeCallFrame(c), encodeReplyFrame(r)]) {
              assertAgrees(flipped(good, flips));
              assertAgrees(good.subarray(0, cut % (good.length + 1)));
            }
          },
        ),
        { numRuns: 2000 },
      );
    });

    it("writes proto3: defaults left out, fields in number order, nothing else", () => {
      const m: Message = { from: FROM, to: TO, term: 3 as Term, type: "timeout-now" };
      // RaftFrame{batch{messages[{shard_id: 1, message{type: 10, term: 3}}]}}
      assert.equal(
        encodeBatchFrame([{ shard: 1, message: m }], "").toString("hex"),
        "120a" + "0a08" + "0801" + "1204" + "080a" + "1003",
      );
      const hb: Message = {
        ...m,
        term: 0 as Term,
        type: "heartbeat",
        commit: 0 as LogIndex,
        readSeq: 0,
        quiesce: true,
        noReply: false,
      };
      // quiesce is field 16: a two-byte tag.
      assert.equal(
        encodeBatchFrame([{ shard: 0, message: hb }], "").toString("hex"),
        "1209" + "0a07" + "1205" + "0807" + "800101",
      );
      // no_reply is field 17: a two-byte tag too, after quiesce.
      assert.equal(
        encodeBatchFrame([{ shard: 0, message: { ...hb, noReply: true } }], "").toString("hex"),
        "120c" + "0a0a" + "1208" + "0807" + "800101" + "880101",
      );
      // A refused vote's commit (field 6) and its term (field 19, a two-byte tag) around reject.
      const refusal: Message = {
        ...m,
        term: 0 as Term,
        type: "vote-resp",
        reject: true,
        commit: 5 as LogIndex,
        commitTerm: 2 as Term,
      };
      assert.equal(
        encodeBatchFrame([{ shard: 0, message: refusal }], "").toString("hex"),
        "120d" + "0a0b" + "1209" + "0804" + "3005" + "4001" + "980102",
      );
    });

    it("sees through unknown fields, shuffled order, interleaved items and replaced fields", () => {
      fc.assert(
        fc.property(
          batch,
          toReplicaId,
          fc.boolean(),
          fc.integer(),
          (messages, to, defaults, seed) => {
            const pick = rng(seed);
            const wire = mangle(
              [{ n: 2, t: "len", v: batchWire(messages, to, defaults) }],
              pick,
              true,
            );
            const bytes = serialize(wire);
            assert.deepStrictEqual(decodeMine(bytes), batchFrameOf(messages, to));
            assert.deepStrictEqual(decodeModel(bytes), batchFrameOf(messages, to));
          },
        ),
        { numRuns: 300 },
      );
      fc.assert(
        fc.property(handshake, fc.boolean(), fc.integer(), (hs, defaults, seed) => {
          const wire = mangle(
            [{ n: 1, t: "len", v: handshakeWire(hs, defaults) }],
            rng(seed),
            true,
          );
          const bytes = serialize(wire);
          assert.deepStrictEqual(decodeMine(bytes), { kind: "handshake", handshake: plain(hs) });
          assert.deepStrictEqual(decodeModel(bytes), decodeMine(bytes));
        }),
        { numRuns: 200 },
      );
    });

    it("checks only the fields a message's type uses, as codec.ts does", () => {
      const unsafe = 2n ** 60n;
      // A heartbeat carrying what an append or a snapshot message would be refused for.
      const bytes = frameOfMessage([
        field(1, 7),
        field(2, 5),
        field(3, unsafe),
        { n: 5, t: "len", v: [field(3, 9)] },
        { n: 15, t: "len", v: [] },
        field(6, 4),
      ]);
      const expected = batchFrameOf([
        {
          shard: 1,
          message: {
            from: FROM,
            to: TO,
            term: 5 as Term,
            type: "heartbeat",
            commit: 4 as LogIndex,
            readSeq: 0,
            quiesce: false,
            noReply: false,
          },
        },
      ]);
      assert.deepStrictEqual(decodeMine(bytes), expected);
      assert.deepStrictEqual(decodeModel(bytes), expected);
    });

    it("reads enums, uint32 and bools from the low 32 bits of their varint, as protobufjs", () => {
      // type 2^32 + 10 (timeout-now), shard 2^32 + 5, reject 2^32 (false) on a vote-resp.
      const ok = frameOfItems(
        item(2 ** 32 + 5, [field(1, 2n ** 32n + 10n), field(2, 1)]),
        item(3, [field(1, 4), field(8, 2n ** 32n)]),
      );
      const expected = batchFrameOf([
        { shard: 5, message: { from: FROM, to: TO, term: 1 as Term, type: "timeout-now" } },
        {
          shard: 3,
          message: {
            from: FROM,
            to: TO,
            term: 0 as Term,
            type: "vote-resp",
            reject: false,
            commit: 0 as LogIndex,
            commitTerm: 0 as Term,
          },
        },
      ]);
      assert.deepStrictEqual(decodeMine(ok), expected);
      assert.deepStrictEqual(decodeModel(ok), expected);
      // A negative type, sent as a ten-byte int32 (-1), is read, and is no known type.
      const negative = frameOfMessage([field(1, 2n ** 64n - 1n)]);
      refused(negative, /unknown Raft message type -1/);
      assert.ok(!outcome(decodeModel, negative).ok);
    });

    it("takes the last oneof field on the wire (protobufjs: the highest-numbered one)", () => {
      const hs = { n: 1, t: "len" as const, v: [{ n: 2, t: "len" as const, v: utf8("n1") }] };
      const bt = { n: 2, t: "len" as const, v: [{ n: 2, t: "len" as const, v: utf8("n2@1") }] };
      assert.deepStrictEqual(decodeMine(serialize([hs, bt])), batchFrameOf([], "n2@1"));
      assert.equal(decodeMine(serialize([bt, hs])).kind, "handshake");
      assert.equal(decodeModel(serialize([bt, hs])).kind, "batch");
      // A replaced batch is still parsed (the model fails the frame when it is malformed).
      refused(serialize([{ n: 2, t: "len", v: [{ n: 1, t: "len", v: hex("08") }] }, hs]));
      refused(serialize([{ n: 2, t: "len", v: [{ n: 1, t: "len", v: hex("08") }] }, bt]));
      // And what codec.ts would refuse in it still refuses the frame: the model decodes the
      // batch whatever follows it (a fuzz run found a handshake after a batch with message
      // type 12 accepted here, refused by the model).
      const typeZero = { n: 2, t: "len" as const, v: [item(1, [])] };
      refused(serialize([typeZero]), /unknown Raft message type 0/);
      refused(serialize([typeZero, hs]), /unknown Raft message type 0/);
      assert.ok(!outcome(decodeModel, serialize([typeZero, hs])).ok);
      const found = hex("120d0a0b1209080c108080017080010a0e120c080810808001708080808008");
      refused(found, /unknown Raft message type 12/);
      assert.ok(!outcome(decodeModel, found).ok);
      // A frame without either is "none", as an empty one is.
      assert.deepStrictEqual(decodeFrame(new Uint8Array(0)), { kind: "none" });
      assert.deepStrictEqual(decodeFrame(serialize([unknownField(rng(1))])), { kind: "none" });
    });

    it("reads only the frame's top level; the messages wait for decodeBatchMessages", () => {
      // An item whose message does not parse: decodeFrame does not look into it.
      const bytes = frameOfItems({ n: 1, t: "len", v: hex("12 01 08") });
      const frame = decodeFrame(bytes);
      assert.ok(frame.kind === "batch");
      assert.throws(() => decodeBatchMessages(frame.body, FROM, TO), CodecError);
    });
  });

  describe("refusals, each a CodecError", () => {
    const valid = encodeBatchFrame(
      [
        {
          shard: 3,
          message: {
            from: FROM,
            to: TO,
            term: 2 as Term,
            type: "append",
            prevIndex: 300 as LogIndex,
            prevTerm: 2 as Term,
            entries: [
              {
                term: 2 as Term,
                index: 301 as LogIndex,
                type: "normal",
                data: utf8("x".repeat(150)),
              },
            ],
            commit: 300 as LogIndex,
            noReply: true,
          },
        },
      ],
      "n2@1",
    );

    it("truncated input: every proper prefix of a one-field frame", () => {
      for (let n = 1; n < valid.length; n++) refused(valid.subarray(0, n));
      const hs = encodeHandshakeFrame({
        cluster_id: "c",
        from_node_id: "n1",
        to_node_id: "n2",
        from_replica_id: "",
      });
      for (let n = 1; n < hs.length; n++) refused(hs.subarray(0, n));
    });

    it("a varint over 10 bytes, or above 2^64 - 1", () => {
      const eleven = hex("ffffffffffffffffff ff 01");
      refused(Buffer.concat([hex("a801"), eleven]), /over 10 bytes/); // unknown field 21
      const term = Buffer.concat([hex("10"), eleven]);
      refused(frameOfMessage([field(1, 1), { n: 2, t: "raw", v: term }]), /over 10 bytes/);
      refused(Buffer.concat([hex("a801"), hex("ffffffffffffffffff02")]), /above 2\^64/);
      refused(
        frameOfMessage([field(1, 7), { n: 2, t: "raw", v: hex("10 ffffffffffffffffff 7f") }]),
      );
      // At most ten bytes, ending in 1: accepted (an unknown field, skipped).
      assert.equal(
        decodeMine(Buffer.concat([hex("a801"), hex("ffffffffffffffffff01")])).kind,
        "none",
      );
    });

    it("a length past the end, at every level", () => {
      refused(hex("1205 0a03"));
      refused(hex("0a03 1203 616263")); // a handshake string past its message's end
      refused(hex("1204 0a05 1203")); // an item past its batch
      refused(frameOfItems({ n: 1, t: "raw", v: hex("0a03 1202 0801") })); // a message past its item
      refused(frameOfMessage([field(1, 1), { n: 5, t: "raw", v: hex("2a03 2205 00") }])); // data
      refused(hex("a2 01 05 00")); // an unknown length-delimited field
      refused(hex("a1 01 00000000")); // an unknown fixed64 field cut short
      refused(hex("a5 01 000000")); // an unknown fixed32 field cut short
    });

    it("groups (wire types 3, 4) and wire types 6, 7, at every level", () => {
      for (const wt of [3, 4, 6, 7]) {
        const t = BigInt(20 * 8 + wt);
        const unknown: Wire = { n: 20, t: "raw", v: Buffer.concat([varint(t), hex("00")]) };
        refused(serialize([unknown]), /wire type/);
        refused(frameOfItems(unknown), /wire type/);
        refused(frameOfItems({ n: 1, t: "len", v: [unknown] }), /wire type/);
        refused(frameOfMessage([field(1, 7), unknown]), /wire type/);
        refused(frameOfMessage([field(1, 1), { n: 5, t: "len", v: [unknown] }]), /wire type/);
        refused(serialize([{ n: 1, t: "len", v: [unknown] }]), /wire type/);
      }
    });

    it("field number 0, a 32-bit varint of 6 to 9 bytes, a known field's other wire type", () => {
      refused(hex("0000"), /field number 0/);
      refused(hex("1202 0000"), /field number 0/);
      // Tags are the low 32 bits of their varint, of five bytes or ten, as protobufjs reads
      // them (2^32 + 18 is the batch's tag); it misreads six to nine.
      for (const tag of ["92 80 80 80 10", "92 80 80 80 80 80 80 80 80 00"]) {
        const bytes = hex(`${tag} 00`);
        assert.deepStrictEqual(decodeMine(bytes), batchFrameOf([]));
        assert.deepStrictEqual(decodeModel(bytes), batchFrameOf([]));
      }
      for (const tag of ["92 80 80 80 80 00", "92 80 80 80 80 80 80 80 00"]) {
        refused(hex(`${tag} 00`), /6 to 9 bytes/);
      }
      refused(hex("1209 0a 87 80 80 80 80 80 80 00"), /6 to 9 bytes/); // a length
      refused(frameOfMessage([{ n: 1, t: "raw", v: hex("08 81 80 80 80 80 00") }]), /6 to 9/);
      refused(hex("1000"), /field 2 with wire type 0/); // RaftFrame.batch as a varint
      refused(frameOfMessage([{ n: 1, t: "len", v: hex("07") }]), /field 1 with wire type 2/);
      refused(frameOfMessage([field(1, 7), { n: 16, t: "len", v: hex("01") }]), /field 16/);
      refused(frameOfItems({ n: 2, t: "varint", v: 5n }), /field 2 with wire type 0/);
    });

    it("an unknown message type or entry type", () => {
      for (const type of [0n, 12n, 42n, 2n ** 31n]) {
        refused(frameOfMessage([field(1, type), field(2, 1)]), /unknown Raft message type/);
        assert.ok(!outcome(decodeModel, frameOfMessage([field(1, type), field(2, 1)])).ok);
      }
      refused(frameOfMessage([field(2, 1)]), /unknown Raft message type 0/);
      for (const type of [2n, 7n, 2n ** 64n - 1n]) {
        const bytes = frameOfMessage([field(1, 1), { n: 5, t: "len", v: [field(3, type)] }]);
        refused(bytes, /unknown Raft entry type/);
        assert.ok(!outcome(decodeModel, bytes).ok);
      }
    });

    it("integers above 2^53 - 1 in the fields a type uses", () => {
      const cases: [number, Wire[]][] = [
        [7, [field(2, 2n ** 53n)]],
        [7, [field(2, 2n ** 64n - 1n)]],
        [1, [field(3, 2n ** 53n)]],
        [1, [field(4, 2n ** 60n)]],
        [1, [field(6, 2n ** 53n + 1n)]],
        [1, [{ n: 5, t: "len", v: [field(2, 2n ** 53n)] }]],
        [1, [{ n: 5, t: "len", v: [field(1, 2n ** 63n)] }]],
        [2, [field(7, 2n ** 53n)]],
        [2, [field(9, 2n ** 53n)]],
        [2, [field(10, 2n ** 53n)]],
        [3, [field(11, 2n ** 53n)]],
        [3, [field(6, 2n ** 53n)]],
        [5, [field(19, 2n ** 53n)]],
        [4, [field(6, 2n ** 53n)]],
        [6, [field(19, 2n ** 53n)]],
        [5, [field(12, 2n ** 53n)]],
        [7, [field(6, 2n ** 53n)]],
        [7, [field(14, 2n ** 53n)]],
        [8, [field(14, 2n ** 64n - 1n)]],
        [9, [{ n: 15, t: "len", v: [{ n: 1, t: "len", v: [field(1, 2n ** 53n)] }] }]],
        [9, [{ n: 15, t: "len", v: [{ n: 1, t: "len", v: [field(2, 2n ** 53n)] }] }]],
      ];
      for (const [type, fields] of cases) {
        const bytes = frameOfMessage([field(1, type), ...fields]);
        refused(bytes, /out of range/);
        assert.ok(!outcome(decodeModel, bytes).ok);
      }
      // 2^53 - 1 itself is fine.
      const max = frameOfMessage([field(1, 8), field(2, Number.MAX_SAFE_INTEGER)]);
      assert.deepStrictEqual(decodeMine(max), decodeModel(max));
    });

    it("a batch item without a message, a snapshot message without snapshot or meta", () => {
      refused(frameOfItems({ n: 1, t: "len", v: [field(1, 4)] }), /shard 4: a batch item has no/);
      refused(frameOfItems({ n: 1, t: "len", v: [] }), /no message/);
      refused(frameOfMessage([field(1, 9), field(2, 1)]), /carries no snapshot/);
      refused(frameOfMessage([field(1, 9), { n: 15, t: "len", v: [] }]), /no metadata/);
      refused(
        frameOfMessage([field(1, 9), { n: 15, t: "len", v: [{ n: 2, t: "len", v: hex("01") }] }]),
        /no metadata/,
      );
      for (const bytes of [
        frameOfItems({ n: 1, t: "len", v: [field(1, 4)] }),
        frameOfMessage([field(1, 9), field(2, 1)]),
        frameOfMessage([field(1, 9), { n: 15, t: "len", v: [] }]),
      ]) {
        assert.ok(!outcome(decodeModel, bytes).ok);
      }
    });
  });

  describe("fuzz", () => {
    it("random bytes: decoded or refused with CodecError, never otherwise", () => {
      fc.assert(
        fc.property(fc.uint8Array({ maxLength: 300 }), (bytes) => {
          assertAgrees(bytes);
          mineBatchOutcome(bytes);
        }),
        { numRuns: 5000 },
      );
    });

    it("random bytes behind a valid batch header, and inside a valid message", () => {
      fc.assert(
        fc.property(fc.uint8Array({ maxLength: 200 }), fc.nat(11), (body, type) => {
          assertAgrees(serialize([{ n: 2, t: "len", v: body }]));
          assertAgrees(frameOfItems({ n: 1, t: "len", v: body }));
          assertAgrees(frameOfMessage([field(1, type), { n: 2, t: "raw", v: body }]));
        }),
        { numRuns: 3000 },
      );
    });

    it("truncations and bit flips of valid frames: decoded as the model does, or refused", () => {
      const small = fc.array(
        shardMessage.filter((s) => !hasLargeData(s.message)),
        { maxLength: 4 },
      );
      fc.assert(
        fc.property(
          small,
          toReplicaId,
          fc.array(fc.nat(), { minLength: 1, maxLength: 3 }),
          fc.nat(),
          (messages, to, flips, cut) => {
            const good = encodeBatchFrame(messages, to);
            const bad = flipped(good, flips);
            assertAgrees(bad);
            assertAgrees(good.subarray(0, cut % (good.length + 1)));
            assertAgrees(bad.subarray(0, cut % (bad.length + 1)));
          },
        ),
        { numRuns: 3000 },
      );
    });

    it("each prefix of a batch's body decodes to a prefix of its messages, or is refused", () => {
      fc.assert(
        fc.property(fc.array(shardMessage, { maxLength: 4 }), fc.nat(), (messages, cut) => {
          const frame = decodeFrame(encodeBatchFrame(messages, "n2@3"));
          assert.ok(frame.kind === "batch");
          const body = frame.body.subarray(0, cut % (frame.body.length + 1));
          let decoded: ShardMessage[];
          try {
            decoded = decodeBatchMessages(body, FROM, TO);
          } catch (err) {
            assert.ok(err instanceof CodecError);
            return;
          }
          assert.deepStrictEqual(decoded, plain(messages.slice(0, decoded.length)));
        }),
        { numRuns: 500 },
      );
    });
  });

  describe("encoding refuses what the wire cannot carry exactly", () => {
    it("throws RangeError for a negative, fractional or unsafe number, or a shard ≥ 2^32", () => {
      const base: Message = { from: FROM, to: TO, term: 1 as Term, type: "wake" };
      for (const t of [-1, 1.5, 2 ** 53, NaN, Infinity]) {
        assert.throws(
          () => encodeBatchFrame([{ shard: 0, message: { ...base, term: t as Term } }], ""),
          RangeError,
        );
      }
      assert.throws(
        () =>
          encodeBatchFrame(
            [{ shard: 0, message: { ...base, type: "heartbeat-resp", readSeq: -3 } }],
            "",
          ),
        RangeError,
      );
      for (const shard of [-1, 2 ** 32, 0.5]) {
        assert.throws(() => encodeBatchFrame([{ shard, message: base }], ""), RangeError);
      }
    });
  });
});

function hasLargeData(m: Message): boolean {
  if (m.type === "append") return m.entries.some((e) => e.data.length >= LARGE);
  return m.type === "snapshot" && m.snapshot.data.length >= LARGE;
}

/** decodeBatchMessages straight on arbitrary bytes, as a body: decoded or CodecError. */
function mineBatchOutcome(bytes: Uint8Array): void {
  try {
    decodeBatchMessages(bytes, FROM, TO);
  } catch (err) {
    if (!(err instanceof CodecError)) throw err;
  }
}
