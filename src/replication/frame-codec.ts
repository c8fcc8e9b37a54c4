/**
 * cairn.v1.Raft Stream frames (proto/cairn/v1/raft.proto: RaftFrame and all it holds), encoded
 * and decoded by hand, straight from and to the Raft core's messages. It maps every message
 * exactly as codec.ts does, which stays the reference; this codec exists because building
 * protobufjs objects and then serializing them cost ~9% of a three-node cluster's CPU, on the
 * peer transport's hot path.
 *
 * This file holds the frames' types, the wire vocabulary (field tags, message types) and the
 * reading primitives; frame-encode.ts encodes, frame-decode.ts decodes.
 *
 * Invariants:
 * 1. A decoder reads only within the message it is decoding, and returns with the reader
 *    exactly at that message's end: each read checks the end it is given, so no length can
 *    take a read past its parent or the input.
 * 2. The encoder writes every byte it sized, no more, no less (checked: its buffer comes from
 *    Buffer.allocUnsafe, and a gap would send a peer stale memory).
 * 3. Whatever this decoder accepts, protobufjs followed by codec.ts decodes to the same
 *    messages (but for a frame holding several oneof fields); it refuses more (see the
 *    caveats). The tests check it on mangled and mutated frames. Calls and replies
 *    (forwarded KV calls, not Raft messages) decode to protobufjs's PeerCall and PeerReply.
 * 4. Entry and snapshot data are views of the input, not copies (as protobufjs gives them):
 *    they keep the whole input buffer alive as long as they live.
 *
 * Implementation caveats:
 * - Stricter than protobufjs, which skips or misreads these: groups (wire types 3 and 4),
 *   field number 0, a known field with another wire type than the proto declares (packed
 *   encoding does not arise: no field is a repeated scalar), a varint of 6 to 9 bytes where
 *   protobufjs reads 32 bits (it skips five bytes after the fifth, unread), a 10-byte varint
 *   above 2^64 - 1, an unknown varint field over 10 bytes, a string running past the input's
 *   end (protobufjs cuts it short), a field running past the end of its sub-message
 *   (protobufjs reads on into the parent). No Cairn peer sends any of these.
 * - A frame holding several of the oneof's fields (handshake, batch, call, reply) is whichever
 *   comes last on the wire, proto3's rule for a oneof; protobufjs keeps them all. A batch so
 *   replaced is still decoded, and refuses the frame where codec.ts would refuse it.
 * - Tags, lengths, enums, uint32 and bool are the low 32 bits of their varint, as protobufjs
 *   reads them (an enum sent as a ten-byte negative int32 is read, then refused as unknown).
 * - A frame that decodes to more than MAX_FRAME_ITEMS items (messages, entries, a snapshot's
 *   members, a reply's trailers) is refused; protobufjs decodes it. No Cairn peer sends one
 *   (GrpcTransport drops a round's frame over it).
 * - Strings are UTF-8. Invalid sequences decode to U+FFFD, as Buffer (and protobufjs with it)
 *   does; a lone surrogate encodes as U+FFFD.
 * - The encoder trusts its messages' shapes to their types, but checks every number: a
 *   negative, fractional or unsafe one (a shard id of 2^32 or more) throws RangeError, a bug of
 *   this node, where protobufjs would have sent a wrong value.
 */
import { CodecError } from "./codec.ts";

/** A RaftHandshake, in the shape of protobufjs's RaftHandshake__Output (handshakeRefusal). */
export interface Handshake {
  readonly cluster_id: string;
  readonly from_node_id: string;
  readonly to_node_id: string;
  readonly from_replica_id: string;
}

/**
 * A client's KV call forwarded to the node that leads its shard (RaftFrame.call; forward.ts):
 * answered by a PeerReply with the same id on the receiver's own stream back to the sender.
 */
export interface PeerCall {
  /** The sender's number for the call (a safe integer), unique among its calls in flight. */
  readonly id: number;
  /** The gRPC method path, e.g. "/cairn.v1.KV/Put". */
  readonly method: string;
  /** How long the caller still waits, in ms (a uint32). */
  readonly timeoutMs: number;
  /** The request message's bytes (decoded: a view of the frame). */
  readonly request: Uint8Array;
}

/** The answer to a PeerCall (RaftFrame.reply), as the receiver would have answered a client. */
export interface PeerReply {
  readonly id: number;
  /** A gRPC status code; OK (0) with `response`. */
  readonly code: number;
  readonly details: string;
  /** The response message's bytes (decoded: a view of the frame). */
  readonly response: Uint8Array;
  /** Trailing metadata, in order; a "-bin" key's value is base64. */
  readonly trailers: readonly (readonly [string, string])[];
}

export type Frame =
  | { readonly kind: "handshake"; readonly handshake: Handshake }
  | { readonly kind: "call"; readonly call: PeerCall }
  | { readonly kind: "reply"; readonly reply: PeerReply }
  | {
      readonly kind: "batch";
      /** RaftBatch.to_replica_id; "" means the handshake's to_node_id. */
      readonly toReplicaId: string;
      /** The RaftBatch's bytes (a view of the input), for decodeBatchMessages(). */
      readonly body: Uint8Array;
    }
  /** Neither field of the oneof: the frame is empty, or holds only unknown fields. */
  | { readonly kind: "none" };

// ── wire vocabulary ─────────────────────────────────────────────────────────────────────────

export const VARINT = 0;
export const I64 = 1;
export const LEN = 2;
export const I32 = 5;
export const tag = (field: number, wireType: number): number => (field << 3) | wireType;

export const FRAME_HANDSHAKE = tag(1, LEN);
export const FRAME_BATCH = tag(2, LEN);
export const FRAME_CALL = tag(3, LEN);
export const FRAME_REPLY = tag(4, LEN);

export const CALL_ID = tag(1, VARINT);
export const CALL_METHOD = tag(2, LEN);
export const CALL_TIMEOUT_MS = tag(3, VARINT);
export const CALL_REQUEST = tag(4, LEN);

export const REPLY_ID = tag(1, VARINT);
export const REPLY_CODE = tag(2, VARINT);
export const REPLY_DETAILS = tag(3, LEN);
export const REPLY_RESPONSE = tag(4, LEN);
export const REPLY_TRAILERS = tag(5, LEN);

export const METADATA_KEY = tag(1, LEN);
export const METADATA_VALUE = tag(2, LEN);

export const HANDSHAKE_CLUSTER_ID = tag(1, LEN);
export const HANDSHAKE_FROM_NODE_ID = tag(2, LEN);
export const HANDSHAKE_TO_NODE_ID = tag(3, LEN);
export const HANDSHAKE_FROM_REPLICA_ID = tag(4, LEN);

export const BATCH_MESSAGES = tag(1, LEN);
export const BATCH_TO_REPLICA_ID = tag(2, LEN);

export const ITEM_SHARD_ID = tag(1, VARINT);
export const ITEM_MESSAGE = tag(2, LEN);

export const MSG_TYPE = tag(1, VARINT);
export const MSG_TERM = tag(2, VARINT);
export const MSG_PREV_INDEX = tag(3, VARINT);
export const MSG_PREV_TERM = tag(4, VARINT);
export const MSG_ENTRIES = tag(5, LEN);
export const MSG_COMMIT = tag(6, VARINT);
export const MSG_INDEX = tag(7, VARINT);
export const MSG_REJECT = tag(8, VARINT);
export const MSG_HINT_INDEX = tag(9, VARINT);
export const MSG_HINT_TERM = tag(10, VARINT);
export const MSG_LAST_INDEX = tag(11, VARINT);
export const MSG_LAST_TERM = tag(12, VARINT);
export const MSG_TRANSFER = tag(13, VARINT);
export const MSG_READ_SEQ = tag(14, VARINT);
export const MSG_SNAPSHOT = tag(15, LEN);
/** 128 and 136: the tags that take two bytes on the wire (0x80 0x01, 0x88 0x01). */
export const MSG_QUIESCE = tag(16, VARINT);
export const MSG_NO_REPLY = tag(17, VARINT);
export const MSG_LOST = tag(18, VARINT);
export const MSG_COMMIT_TERM = tag(19, VARINT);

export const ENTRY_TERM = tag(1, VARINT);
export const ENTRY_INDEX = tag(2, VARINT);
export const ENTRY_TYPE = tag(3, VARINT);
export const ENTRY_DATA = tag(4, LEN);

export const SNAPSHOT_META = tag(1, LEN);
export const SNAPSHOT_DATA = tag(2, LEN);

export const META_INDEX = tag(1, VARINT);
export const META_TERM = tag(2, VARINT);
export const META_VOTERS = tag(3, LEN);
export const META_LEARNERS = tag(4, LEN);

// RaftMessageType and RaftEntryType values.
export const APPEND = 1;
export const APPEND_RESP = 2;
export const VOTE = 3;
export const VOTE_RESP = 4;
export const PREVOTE = 5;
export const PREVOTE_RESP = 6;
export const HEARTBEAT = 7;
export const HEARTBEAT_RESP = 8;
export const SNAPSHOT = 9;
export const TIMEOUT_NOW = 10;
export const WAKE = 11;
export const ENTRY_NORMAL = 0;
export const ENTRY_CONF_CHANGE = 1;

export const MAX_SAFE = Number.MAX_SAFE_INTEGER;

/**
 * The most items one frame decodes to: its messages, their entries, a snapshot's voters and
 * learners, a reply's trailers, together. A decoded item costs far more than its bytes: an empty
 * entry is 2 bytes on the wire (its tag and a zero length) and ~170 bytes of heap (an Entry and
 * its data's view), a heartbeat 6 and ~140, a trailer 4 and a pair of strings; the peers'
 * 128 MiB frame could hold 67 million entries, past V8's heap limit (8 MiB of them: +700 MiB
 * of heap and 1.6 s of the main thread). At the bound a frame costs ~170 MiB at most, about
 * its own largest size; an honest round sends a peer a few messages a shard (65,536 shards at
 * most) and appends of at most 1 MiB of entries each, far under it.
 */
export const MAX_FRAME_ITEMS = 1 << 20;

/** A position in the input; every read is also given the end of the message it reads in. */
export class Reader {
  readonly buf: Uint8Array;
  pos = 0;
  /** Items decoded so far (frame-decode.ts, MAX_FRAME_ITEMS). */
  items = 0;

  constructor(buf: Uint8Array) {
    this.buf = buf;
  }
}

// ── wire primitives ─────────────────────────────────────────────────────────────────────────
// Each takes the end of the message being read and refuses to cross it (invariant 1).

export function fail(what: string, r: Reader): never {
  throw new CodecError(`malformed raft frame: ${what} at byte ${r.pos}`);
}

/** A tag, with a field number of 1 or more. */
export function readTag(r: Reader, end: number): number {
  const t = readVarint32(r, end);
  if (t < 8) fail("field number 0", r);
  return t;
}

/**
 * Skips the field of tag `t`, unknown to a message whose fields are numbered 1 to `known`: a
 * known field gets here only with another wire type than its own, which is refused.
 */
export function skipField(r: Reader, end: number, t: number, known: number): void {
  const field = t >>> 3;
  const wireType = t & 7;
  if (field <= known) fail(`field ${field} with wire type ${wireType}`, r);
  switch (wireType) {
    case VARINT:
      readVarint64(r, end);
      return;
    case I64:
      skipBytes(r, end, 8);
      return;
    case LEN: {
      // Not `r.pos += readLength()`: that would add to the position from before the length.
      const len = readLength(r, end);
      r.pos += len;
      return;
    }
    case I32:
      skipBytes(r, end, 4);
      return;
    default:
      fail(`wire type ${wireType}`, r);
  }
}

export function skipBytes(r: Reader, end: number, n: number): void {
  if (end - r.pos < n) fail("truncated field", r);
  r.pos += n;
}

/** A length prefix, checked to stay within `end`. */
export function readLength(r: Reader, end: number): number {
  const len = readVarint32(r, end);
  if (len > end - r.pos) fail(`length ${len} past the end`, r);
  return len;
}

export function readString(r: Reader, end: number): string {
  const len = readLength(r, end);
  const start = r.pos;
  r.pos += len;
  return utf8(r.buf, start, len);
}

/**
 * A varint as a number: exact below 2^53; larger values come out ≥ 2^53 (not exact), which
 * is enough to refuse them. Up to 10 bytes, the last one 0 or 1 (at most 2^64 - 1).
 */
export function readVarint64(r: Reader, end: number): number {
  const buf = r.buf;
  let pos = r.pos;
  if (pos >= end) fail("truncated varint", r);
  let b = buf[pos++] as number;
  if (b < 0x80) {
    r.pos = pos;
    return b;
  }
  // The first four bytes with bit operations (28 bits), the rest in floating point.
  let value = b & 0x7f;
  for (let shift = 7; shift < 28; shift += 7) {
    if (pos >= end) fail("truncated varint", r);
    b = buf[pos++] as number;
    value |= (b & 0x7f) << shift;
    if (b < 0x80) {
      r.pos = pos;
      return value;
    }
  }
  let scale = 0x10000000;
  for (let i = 4; i < 10; i++) {
    if (pos >= end) fail("truncated varint", r);
    b = buf[pos++] as number;
    if (i === 9 && b > 1) fail(b < 0x80 ? "varint above 2^64 - 1" : "varint over 10 bytes", r);
    value += (b & 0x7f) * scale;
    if (b < 0x80) {
      r.pos = pos;
      return value;
    }
    scale *= 0x80;
  }
  return fail("unreachable: the tenth byte ends the varint or fails", r);
}

/**
 * The low 32 bits of a varint, unsigned: how protobufjs reads tags, lengths, uint32, enums and
 * bools. One to five bytes, or ten.
 */
export function readVarint32(r: Reader, end: number): number {
  const buf = r.buf;
  let pos = r.pos;
  if (pos >= end) fail("truncated varint", r);
  let b = buf[pos++] as number;
  if (b < 0x80) {
    r.pos = pos;
    return b;
  }
  let value = b & 0x7f;
  // Bytes two to five; of the fifth's bits, those past the 32nd fall off.
  for (let shift = 7; shift < 35; shift += 7) {
    if (pos >= end) fail("truncated varint", r);
    b = buf[pos++] as number;
    value |= (b & 0x7f) << shift;
    if (b < 0x80) {
      r.pos = pos;
      return value >>> 0;
    }
  }
  // protobufjs skips exactly five more bytes here, unread: only ten bytes in all (a negative
  // int32) mean the same to both decoders.
  for (let i = 5; i < 10; i++) {
    if (pos >= end) fail("truncated varint", r);
    b = buf[pos++] as number;
    if (i < 9 && b < 0x80) fail("32-bit varint of 6 to 9 bytes", r);
  }
  if (b > 1) fail(b < 0x80 ? "varint above 2^64 - 1" : "varint over 10 bytes", r);
  r.pos = pos;
  return value >>> 0;
}

/**
 * UTF-8 bytes as a string. Node ids are short and ASCII, where a loop beats a call into C++;
 * anything else goes through Buffer, which replaces invalid sequences as protobufjs's does.
 */
export function utf8(buf: Uint8Array, start: number, len: number): string {
  if (len <= 32) {
    let s = "";
    let i = start;
    const end = start + len;
    for (; i < end; i++) {
      const c = buf[i] as number;
      if (c >= 0x80) break;
      s += String.fromCharCode(c);
    }
    if (i === end) return s;
  }
  return Buffer.from(buf.buffer, buf.byteOffset + start, len).toString("utf8");
}
