/**
 * cairn.v1.Raft Stream frames (proto/cairn/v1/raft.proto: RaftFrame and all it holds), encoded
 * and decoded by hand, straight from and to the Raft core's messages. It maps every message
 * exactly as codec.ts does, which stays the reference; this codec exists because building
 * protobufjs objects and then serializing them cost ~9% of a three-node cluster's CPU, on the
 * peer transport's hot path.
 *
 * Encoding makes two passes. The first sums the frame's exact size. The second fills one Buffer
 * of that size from the back, so that every sub-message is written before its length prefix,
 * which is then known without keeping sizes between the passes (vtprotobuf and upb write
 * backwards too). Fields come out in field-number order and proto3 defaults (0, false, "", empty
 * bytes, enum 0) are left out, but a sub-message that is present is written even when empty:
 * the decoder tells an absent snapshot, snapshot meta, batch item message or frame oneof from
 * an empty one.
 *
 * Decoding follows proto3 as protobufjs applies it: fields in any order, unknown fields of wire
 * types 0, 1, 2 and 5 skipped, a repeated field's items possibly interleaved with other fields,
 * and the last occurrence of a singular field wins. That includes sub-messages: protobufjs
 * replaces an earlier occurrence instead of merging into it, and so does this decoder.
 * decodeFrame() reads the frame's top level only; the batch's messages wait for
 * decodeBatchMessages(), when the receiver knows who sent them and to whom.
 *
 * Refusals are CodecErrors, of two kinds. Bytes that do not parse are refused wherever they
 * are, as protobufjs fails the whole frame for them. Content that parses but codec.ts would
 * refuse (an unknown message or entry type, an integer past 2^53 - 1, a snapshot message
 * without its snapshot or meta, a batch item without its message) is refused only where
 * codec.ts looks: in the fields the message's type uses, and in the last occurrence of a
 * replaced sub-message. So the sub-message decoders return such a problem as a string, and
 * the batch decoder throws it if the item is kept.
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
 * - Strings are UTF-8. Invalid sequences decode to U+FFFD, as Buffer (and protobufjs with it)
 *   does; a lone surrogate encodes as U+FFFD.
 * - The encoder trusts its messages' shapes to their types, but checks every number: a
 *   negative, fractional or unsafe one (a shard id of 2^32 or more) throws RangeError, a bug of
 *   this node, where protobufjs would have sent a wrong value.
 */
import type {
  Entry,
  LogIndex,
  Message,
  NodeId,
  Snapshot,
  SnapshotMeta,
  Term,
} from "../raft/index.ts";
import { CodecError } from "./codec.ts";
import type { ShardMessage } from "./multi-raft.ts";

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

const VARINT = 0;
const I64 = 1;
const LEN = 2;
const I32 = 5;
const tag = (field: number, wireType: number): number => (field << 3) | wireType;

const FRAME_HANDSHAKE = tag(1, LEN);
const FRAME_BATCH = tag(2, LEN);
const FRAME_CALL = tag(3, LEN);
const FRAME_REPLY = tag(4, LEN);

const CALL_ID = tag(1, VARINT);
const CALL_METHOD = tag(2, LEN);
const CALL_TIMEOUT_MS = tag(3, VARINT);
const CALL_REQUEST = tag(4, LEN);

const REPLY_ID = tag(1, VARINT);
const REPLY_CODE = tag(2, VARINT);
const REPLY_DETAILS = tag(3, LEN);
const REPLY_RESPONSE = tag(4, LEN);
const REPLY_TRAILERS = tag(5, LEN);

const METADATA_KEY = tag(1, LEN);
const METADATA_VALUE = tag(2, LEN);

const HANDSHAKE_CLUSTER_ID = tag(1, LEN);
const HANDSHAKE_FROM_NODE_ID = tag(2, LEN);
const HANDSHAKE_TO_NODE_ID = tag(3, LEN);
const HANDSHAKE_FROM_REPLICA_ID = tag(4, LEN);

const BATCH_MESSAGES = tag(1, LEN);
const BATCH_TO_REPLICA_ID = tag(2, LEN);

const ITEM_SHARD_ID = tag(1, VARINT);
const ITEM_MESSAGE = tag(2, LEN);

const MSG_TYPE = tag(1, VARINT);
const MSG_TERM = tag(2, VARINT);
const MSG_PREV_INDEX = tag(3, VARINT);
const MSG_PREV_TERM = tag(4, VARINT);
const MSG_ENTRIES = tag(5, LEN);
const MSG_COMMIT = tag(6, VARINT);
const MSG_INDEX = tag(7, VARINT);
const MSG_REJECT = tag(8, VARINT);
const MSG_HINT_INDEX = tag(9, VARINT);
const MSG_HINT_TERM = tag(10, VARINT);
const MSG_LAST_INDEX = tag(11, VARINT);
const MSG_LAST_TERM = tag(12, VARINT);
const MSG_TRANSFER = tag(13, VARINT);
const MSG_READ_SEQ = tag(14, VARINT);
const MSG_SNAPSHOT = tag(15, LEN);
/** 128 and 136: the tags that take two bytes on the wire (0x80 0x01, 0x88 0x01). */
const MSG_QUIESCE = tag(16, VARINT);
const MSG_NO_REPLY = tag(17, VARINT);
const MSG_LOST = tag(18, VARINT);

const ENTRY_TERM = tag(1, VARINT);
const ENTRY_INDEX = tag(2, VARINT);
const ENTRY_TYPE = tag(3, VARINT);
const ENTRY_DATA = tag(4, LEN);

const SNAPSHOT_META = tag(1, LEN);
const SNAPSHOT_DATA = tag(2, LEN);

const META_INDEX = tag(1, VARINT);
const META_TERM = tag(2, VARINT);
const META_VOTERS = tag(3, LEN);
const META_LEARNERS = tag(4, LEN);

// RaftMessageType and RaftEntryType values.
const APPEND = 1;
const APPEND_RESP = 2;
const VOTE = 3;
const VOTE_RESP = 4;
const PREVOTE = 5;
const PREVOTE_RESP = 6;
const HEARTBEAT = 7;
const HEARTBEAT_RESP = 8;
const SNAPSHOT = 9;
const TIMEOUT_NOW = 10;
const WAKE = 11;
const ENTRY_NORMAL = 0;
const ENTRY_CONF_CHANGE = 1;

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

// ── encoding ────────────────────────────────────────────────────────────────────────────────

/** RaftFrame{handshake}. The handshake is written even when all its fields are empty. */
export function encodeHandshakeFrame(hs: Handshake): Buffer {
  const cluster = Buffer.byteLength(hs.cluster_id, "utf8");
  const from = Buffer.byteLength(hs.from_node_id, "utf8");
  const to = Buffer.byteLength(hs.to_node_id, "utf8");
  const replica = Buffer.byteLength(hs.from_replica_id, "utf8");
  const body =
    stringFieldSize(cluster) +
    stringFieldSize(from) +
    stringFieldSize(to) +
    stringFieldSize(replica);
  const size = 1 + varintSize(body) + body;
  const buf = Buffer.allocUnsafe(size);
  let p = putString(buf, size, HANDSHAKE_FROM_REPLICA_ID, hs.from_replica_id, replica);
  p = putString(buf, p, HANDSHAKE_TO_NODE_ID, hs.to_node_id, to);
  p = putString(buf, p, HANDSHAKE_FROM_NODE_ID, hs.from_node_id, from);
  p = putString(buf, p, HANDSHAKE_CLUSTER_ID, hs.cluster_id, cluster);
  return finish(buf, putLength(buf, p, FRAME_HANDSHAKE, size - p));
}

/**
 * RaftFrame{batch{messages, to_replica_id}}: the messages in order, each without its ends (the
 * stream's). The batch is written even when empty. Throws RangeError for a number the wire
 * cannot carry exactly (see the module doc).
 */
export function encodeBatchFrame(messages: readonly ShardMessage[], toReplicaId: string): Buffer {
  const to = Buffer.byteLength(toReplicaId, "utf8");
  let body = stringFieldSize(to);
  for (const { shard, message } of messages) {
    const item = u32FieldSize(shard) + lenFieldSize(messageSize(message));
    body += lenFieldSize(item);
  }
  const size = 1 + varintSize(body) + body;
  const buf = Buffer.allocUnsafe(size);
  let p = putString(buf, size, BATCH_TO_REPLICA_ID, toReplicaId, to);
  for (let i = messages.length - 1; i >= 0; i--) {
    const { shard, message } = messages[i] as ShardMessage;
    const end = p;
    p = putMessage(buf, p, message);
    p = putLength(buf, p, ITEM_MESSAGE, end - p);
    p = putVarintField(buf, p, ITEM_SHARD_ID, shard);
    p = putLength(buf, p, BATCH_MESSAGES, end - p);
  }
  return finish(buf, putLength(buf, p, FRAME_BATCH, size - p));
}

/** RaftFrame{call}. Throws RangeError for an id or timeout the wire cannot carry exactly. */
export function encodeCallFrame(call: PeerCall): Buffer {
  const method = Buffer.byteLength(call.method, "utf8");
  const body =
    u64FieldSize(call.id) +
    stringFieldSize(method) +
    u32FieldSize(call.timeoutMs) +
    stringFieldSize(call.request.length);
  const size = 1 + varintSize(body) + body;
  const buf = Buffer.allocUnsafe(size);
  let p = putBytes(buf, size, CALL_REQUEST, call.request);
  p = putVarintField(buf, p, CALL_TIMEOUT_MS, call.timeoutMs);
  p = putString(buf, p, CALL_METHOD, call.method, method);
  p = putVarintField(buf, p, CALL_ID, call.id);
  return finish(buf, putLength(buf, p, FRAME_CALL, size - p));
}

/** RaftFrame{reply}. Throws RangeError for an id or code the wire cannot carry exactly. */
export function encodeReplyFrame(reply: PeerReply): Buffer {
  const details = Buffer.byteLength(reply.details, "utf8");
  const lengths: number[] = [];
  let body =
    u64FieldSize(reply.id) +
    u32FieldSize(reply.code) +
    stringFieldSize(details) +
    stringFieldSize(reply.response.length);
  for (const [key, value] of reply.trailers) {
    const k = Buffer.byteLength(key, "utf8");
    const v = Buffer.byteLength(value, "utf8");
    lengths.push(k, v);
    body += lenFieldSize(stringFieldSize(k) + stringFieldSize(v));
  }
  const size = 1 + varintSize(body) + body;
  const buf = Buffer.allocUnsafe(size);
  let p = size;
  for (let i = reply.trailers.length - 1; i >= 0; i--) {
    const [key, value] = reply.trailers[i] as readonly [string, string];
    const end = p;
    p = putString(buf, p, METADATA_VALUE, value, lengths[2 * i + 1] as number);
    p = putString(buf, p, METADATA_KEY, key, lengths[2 * i] as number);
    p = putLength(buf, p, REPLY_TRAILERS, end - p);
  }
  p = putBytes(buf, p, REPLY_RESPONSE, reply.response);
  p = putString(buf, p, REPLY_DETAILS, reply.details, details);
  p = putVarintField(buf, p, REPLY_CODE, reply.code);
  p = putVarintField(buf, p, REPLY_ID, reply.id);
  return finish(buf, putLength(buf, p, FRAME_REPLY, size - p));
}

function finish(buf: Buffer, p: number): Buffer {
  // Invariant 2: sizing and writing disagree only through a bug here, never through input.
  if (p !== 0) throw new Error(`frame-codec: sized ${buf.length} bytes, wrote ${buf.length - p}`);
  return buf;
}

/** The body of a RaftMessage (its tag and length excluded). */
function messageSize(m: Message): number {
  // The type (1 to 11) is one byte, after its one-byte tag; term = 0 is left out like any zero.
  const head = 2 + u64FieldSize(m.term);
  switch (m.type) {
    case "append": {
      let n = head + u64FieldSize(m.prevIndex) + u64FieldSize(m.prevTerm) + u64FieldSize(m.commit);
      for (const e of m.entries) n += lenFieldSize(entrySize(e));
      // no_reply's tag (field 17) takes two bytes.
      return n + (m.noReply ? 3 : 0);
    }
    case "append-resp":
      return (
        head +
        u64FieldSize(m.index) +
        boolFieldSize(m.reject) +
        u64FieldSize(m.hintIndex) +
        u64FieldSize(m.hintTerm) +
        // lost's tag (field 18) takes two bytes.
        (m.lost ? 3 : 0)
      );
    case "vote":
    case "prevote":
      return (
        head + u64FieldSize(m.lastIndex) + u64FieldSize(m.lastTerm) + boolFieldSize(m.transfer)
      );
    case "vote-resp":
    case "prevote-resp":
      return head + boolFieldSize(m.reject);
    case "heartbeat":
      // quiesce's and no_reply's tags (fields 16 and 17) take two bytes.
      return (
        head +
        u64FieldSize(m.commit) +
        u64FieldSize(m.readSeq) +
        (m.quiesce ? 3 : 0) +
        (m.noReply ? 3 : 0)
      );
    case "heartbeat-resp":
      return head + u64FieldSize(m.readSeq);
    case "snapshot":
      return head + lenFieldSize(snapshotSize(m.snapshot));
    case "timeout-now":
    case "wake":
      return head;
  }
}

function entrySize(e: Entry): number {
  const data = e.data.length;
  return (
    u64FieldSize(e.term) +
    u64FieldSize(e.index) +
    (e.type === "conf-change" ? 2 : 0) +
    stringFieldSize(data)
  );
}

function snapshotSize(s: Snapshot): number {
  return lenFieldSize(metaSize(s.meta)) + stringFieldSize(s.data.length);
}

function metaSize(meta: SnapshotMeta): number {
  let n = u64FieldSize(meta.index) + u64FieldSize(meta.term);
  for (const id of meta.conf.voters) n += lenFieldSize(Buffer.byteLength(id, "utf8"));
  for (const id of meta.conf.learners) n += lenFieldSize(Buffer.byteLength(id, "utf8"));
  return n;
}

/** Writes the body of `m` so that it ends at `p`; returns where it starts. */
function putMessage(buf: Buffer, p: number, m: Message): number {
  switch (m.type) {
    case "append": {
      if (m.noReply) p = putTwoByteTrue(buf, p, MSG_NO_REPLY);
      p = putVarintField(buf, p, MSG_COMMIT, m.commit);
      for (let i = m.entries.length - 1; i >= 0; i--) {
        const end = p;
        p = putEntry(buf, p, m.entries[i] as Entry);
        p = putLength(buf, p, MSG_ENTRIES, end - p);
      }
      p = putVarintField(buf, p, MSG_PREV_TERM, m.prevTerm);
      p = putVarintField(buf, p, MSG_PREV_INDEX, m.prevIndex);
      return putHead(buf, p, APPEND, m.term);
    }
    case "append-resp":
      if (m.lost) p = putTwoByteTrue(buf, p, MSG_LOST);
      p = putVarintField(buf, p, MSG_HINT_TERM, m.hintTerm);
      p = putVarintField(buf, p, MSG_HINT_INDEX, m.hintIndex);
      p = putBoolField(buf, p, MSG_REJECT, m.reject);
      p = putVarintField(buf, p, MSG_INDEX, m.index);
      return putHead(buf, p, APPEND_RESP, m.term);
    case "vote":
    case "prevote":
      p = putBoolField(buf, p, MSG_TRANSFER, m.transfer);
      p = putVarintField(buf, p, MSG_LAST_TERM, m.lastTerm);
      p = putVarintField(buf, p, MSG_LAST_INDEX, m.lastIndex);
      return putHead(buf, p, m.type === "vote" ? VOTE : PREVOTE, m.term);
    case "vote-resp":
    case "prevote-resp":
      p = putBoolField(buf, p, MSG_REJECT, m.reject);
      return putHead(buf, p, m.type === "vote-resp" ? VOTE_RESP : PREVOTE_RESP, m.term);
    case "heartbeat":
      if (m.noReply) p = putTwoByteTrue(buf, p, MSG_NO_REPLY);
      if (m.quiesce) p = putTwoByteTrue(buf, p, MSG_QUIESCE);
      p = putVarintField(buf, p, MSG_READ_SEQ, m.readSeq);
      p = putVarintField(buf, p, MSG_COMMIT, m.commit);
      return putHead(buf, p, HEARTBEAT, m.term);
    case "heartbeat-resp":
      p = putVarintField(buf, p, MSG_READ_SEQ, m.readSeq);
      return putHead(buf, p, HEARTBEAT_RESP, m.term);
    case "snapshot": {
      const end = p;
      p = putSnapshot(buf, p, m.snapshot);
      p = putLength(buf, p, MSG_SNAPSHOT, end - p);
      return putHead(buf, p, SNAPSHOT, m.term);
    }
    case "timeout-now":
      return putHead(buf, p, TIMEOUT_NOW, m.term);
    case "wake":
      return putHead(buf, p, WAKE, m.term);
  }
}

function putHead(buf: Buffer, p: number, type: number, term: Term): number {
  p = putVarintField(buf, p, MSG_TERM, term);
  buf[--p] = type;
  buf[--p] = MSG_TYPE;
  return p;
}

function putEntry(buf: Buffer, p: number, e: Entry): number {
  p = putBytes(buf, p, ENTRY_DATA, e.data);
  if (e.type === "conf-change") {
    buf[--p] = ENTRY_CONF_CHANGE;
    buf[--p] = ENTRY_TYPE;
  }
  p = putVarintField(buf, p, ENTRY_INDEX, e.index);
  return putVarintField(buf, p, ENTRY_TERM, e.term);
}

function putSnapshot(buf: Buffer, p: number, s: Snapshot): number {
  p = putBytes(buf, p, SNAPSHOT_DATA, s.data);
  const end = p;
  const { voters, learners } = s.meta.conf;
  for (let i = learners.length - 1; i >= 0; i--) {
    const id = learners[i] as NodeId;
    p = putString(buf, p, META_LEARNERS, id, Buffer.byteLength(id, "utf8"), true);
  }
  for (let i = voters.length - 1; i >= 0; i--) {
    const id = voters[i] as NodeId;
    p = putString(buf, p, META_VOTERS, id, Buffer.byteLength(id, "utf8"), true);
  }
  p = putVarintField(buf, p, META_TERM, s.meta.term);
  p = putVarintField(buf, p, META_INDEX, s.meta.index);
  return putLength(buf, p, SNAPSHOT_META, end - p);
}

/** A string field of `len` UTF-8 bytes; an empty one is left out unless it is a repeated item. */
function putString(
  buf: Buffer,
  p: number,
  fieldTag: number,
  s: string,
  len: number,
  repeated = false,
): number {
  if (len === 0 && !repeated) return p;
  p -= len;
  buf.write(s, p, len, "utf8");
  return putLength(buf, p, fieldTag, len);
}

function putBytes(buf: Buffer, p: number, fieldTag: number, data: Uint8Array): number {
  if (data.length === 0) return p;
  p -= data.length;
  buf.set(data, p);
  return putLength(buf, p, fieldTag, data.length);
}

/** The tag and length of a length-delimited field whose content starts at `p`. */
function putLength(buf: Buffer, p: number, fieldTag: number, len: number): number {
  p = putVarint(buf, p, len);
  buf[--p] = fieldTag;
  return p;
}

function putVarintField(buf: Buffer, p: number, fieldTag: number, v: number): number {
  if (v === 0) return p;
  p = putVarint(buf, p, v);
  buf[--p] = fieldTag;
  return p;
}

/** A bool field set to true whose tag (fields 16 to 2047) takes two bytes; ends at `p`. */
function putTwoByteTrue(buf: Buffer, p: number, t: number): number {
  buf[--p] = 1;
  buf[--p] = t >>> 7;
  buf[--p] = (t & 0x7f) | 0x80;
  return p;
}

function putBoolField(buf: Buffer, p: number, fieldTag: number, v: boolean): number {
  if (!v) return p;
  buf[--p] = 1;
  buf[--p] = fieldTag;
  return p;
}

/** Writes varint `v` so that it ends at `end`; returns where it starts. */
function putVarint(buf: Buffer, end: number, v: number): number {
  const start = end - varintSize(v);
  let p = start;
  if (v <= 0x7fffffff) {
    while (v > 0x7f) {
      buf[p++] = (v & 0x7f) | 0x80;
      v >>>= 7;
    }
  } else {
    // Above 2^31 the bit operators no longer apply; division by 128 stays exact below 2^53.
    while (v > 0x7f) {
      buf[p++] = (v % 128) | 0x80;
      v = Math.floor(v / 128);
    }
  }
  buf[p] = v;
  return start;
}

/** Bytes of the varint of a safe integer ≥ 0 (at most 8: 2^53 < 2^56). */
function varintSize(v: number): number {
  if (v < 0x80) return 1;
  if (v < 0x4000) return 2;
  if (v < 0x200000) return 3;
  if (v < 0x10000000) return 4;
  if (v < 0x800000000) return 5;
  if (v < 0x40000000000) return 6;
  if (v < 0x2000000000000) return 7;
  return 8;
}

/** A uint64 field with a one-byte tag: nothing when 0. Checks what putVarint relies on. */
function u64FieldSize(v: number): number {
  if (v === 0) return 0;
  if (!(v > 0 && Number.isSafeInteger(v))) {
    throw new RangeError(`not a uint64 the wire carries exactly: ${v}`);
  }
  return 1 + varintSize(v);
}

function u32FieldSize(v: number): number {
  if (v === 0) return 0;
  if (v >>> 0 !== v) throw new RangeError(`not a uint32: ${v}`);
  return 1 + varintSize(v);
}

const boolFieldSize = (v: boolean): number => (v ? 2 : 0);

/** A length-delimited field with a one-byte tag around `len` bytes. */
const lenFieldSize = (len: number): number => 1 + varintSize(len) + len;

/** A singular string or bytes field of `len` bytes: nothing when empty. */
const stringFieldSize = (len: number): number => (len === 0 ? 0 : lenFieldSize(len));

// ── decoding ────────────────────────────────────────────────────────────────────────────────

/** A position in the input; every read is also given the end of the message it reads in. */
class Reader {
  readonly buf: Uint8Array;
  pos = 0;

  constructor(buf: Uint8Array) {
    this.buf = buf;
  }
}

const NONE: Frame = Object.freeze({ kind: "none" });

/**
 * The frame's oneof, without decoding the batch's messages: for a batch, its to_replica_id and
 * its bytes. Throws CodecError for bytes that do not parse.
 */
export function decodeFrame(bytes: Uint8Array): Frame {
  const r = new Reader(bytes);
  const end = bytes.length;
  // The last oneof field seen: a decoded one, or a batch's bounds (batchStart >= 0).
  let last: Frame | null = null;
  let batchStart = -1;
  let batchEnd = -1;
  while (r.pos < end) {
    const t = readTag(r, end);
    if (t === FRAME_HANDSHAKE || t === FRAME_BATCH || t === FRAME_CALL || t === FRAME_REPLY) {
      const len = readLength(r, end);
      // A batch another oneof field replaces would still have failed protobufjs and codec.ts
      // were it malformed (invariant 3): check it before it is forgotten.
      if (batchStart >= 0) scanBatch(bytes, batchStart, batchEnd, true);
      batchStart = -1;
      last = null;
      if (t === FRAME_HANDSHAKE) {
        last = { kind: "handshake", handshake: readHandshake(r, r.pos + len) };
      } else if (t === FRAME_CALL) {
        last = { kind: "call", call: readCall(r, r.pos + len) };
      } else if (t === FRAME_REPLY) {
        last = { kind: "reply", reply: readReply(r, r.pos + len) };
      } else {
        batchStart = r.pos;
        batchEnd = r.pos + len;
        r.pos = batchEnd;
      }
    } else {
      skipField(r, end, t, 4);
    }
  }
  if (last !== null) return last;
  if (batchStart < 0) return NONE;
  return {
    kind: "batch",
    toReplicaId: scanBatch(bytes, batchStart, batchEnd, false),
    body: bytes.subarray(batchStart, batchEnd),
  };
}

/**
 * The messages of a RaftBatch's bytes (a batch frame's body) received on the stream from `from`
 * to `to`, as codec.ts's decodeBatch gives them. Throws CodecError for bytes that do not parse
 * and for what codec.ts refuses.
 */
export function decodeBatchMessages(body: Uint8Array, from: NodeId, to: NodeId): ShardMessage[] {
  const r = new Reader(body);
  const end = body.length;
  const out: ShardMessage[] = [];
  while (r.pos < end) {
    const t = readTag(r, end);
    if (t === BATCH_MESSAGES) {
      const len = readLength(r, end);
      const item = readItem(r, r.pos + len, from, to);
      if (typeof item === "string") throw new CodecError(item);
      out.push(item);
    } else if (t === BATCH_TO_REPLICA_ID) {
      // Read by decodeFrame.
      const len = readLength(r, end);
      r.pos += len;
    } else {
      skipField(r, end, t, 2);
    }
  }
  return out;
}

/**
 * A batch's to_replica_id, from its top level. With `parseItems`, its messages are decoded as
 * well, and what codec.ts would refuse in them refuses the frame: a batch that another oneof
 * field replaces. protobufjs's oneof is the present field with the highest number, so the
 * model decodes such a batch, and refuses the frame, unless a call or a reply is present too;
 * then this refuses more than the model, as invariant 3 allows.
 */
function scanBatch(bytes: Uint8Array, start: number, end: number, parseItems: boolean): string {
  const r = new Reader(bytes);
  r.pos = start;
  let id = "";
  while (r.pos < end) {
    const t = readTag(r, end);
    if (t === BATCH_TO_REPLICA_ID) {
      id = readString(r, end);
    } else if (t === BATCH_MESSAGES) {
      const len = readLength(r, end);
      if (parseItems) {
        const item = readItem(r, r.pos + len, UNUSED, UNUSED);
        if (typeof item === "string") throw new CodecError(item);
      } else {
        r.pos += len;
      }
    } else {
      skipField(r, end, t, 2);
    }
  }
  return id;
}

const UNUSED = "" as NodeId;

function readHandshake(r: Reader, end: number): Handshake {
  let cluster = "";
  let from = "";
  let to = "";
  let replica = "";
  while (r.pos < end) {
    const t = readTag(r, end);
    switch (t) {
      case HANDSHAKE_CLUSTER_ID:
        cluster = readString(r, end);
        break;
      case HANDSHAKE_FROM_NODE_ID:
        from = readString(r, end);
        break;
      case HANDSHAKE_TO_NODE_ID:
        to = readString(r, end);
        break;
      case HANDSHAKE_FROM_REPLICA_ID:
        replica = readString(r, end);
        break;
      default:
        skipField(r, end, t, 4);
    }
  }
  return { cluster_id: cluster, from_node_id: from, to_node_id: to, from_replica_id: replica };
}

function readCall(r: Reader, end: number): PeerCall {
  let id = 0;
  let method = "";
  let timeoutMs = 0;
  let request: Uint8Array = EMPTY_BYTES;
  while (r.pos < end) {
    const t = readTag(r, end);
    switch (t) {
      case CALL_ID:
        id = readVarint64(r, end);
        break;
      case CALL_METHOD:
        method = readString(r, end);
        break;
      case CALL_TIMEOUT_MS:
        timeoutMs = readVarint32(r, end);
        break;
      case CALL_REQUEST:
        request = readBytes(r, end);
        break;
      default:
        skipField(r, end, t, 4);
    }
  }
  if (id > MAX_SAFE) throw new CodecError(outOfRange(id));
  return { id, method, timeoutMs, request };
}

function readReply(r: Reader, end: number): PeerReply {
  let id = 0;
  let code = 0;
  let details = "";
  let response: Uint8Array = EMPTY_BYTES;
  const trailers: [string, string][] = [];
  while (r.pos < end) {
    const t = readTag(r, end);
    switch (t) {
      case REPLY_ID:
        id = readVarint64(r, end);
        break;
      case REPLY_CODE:
        code = readVarint32(r, end);
        break;
      case REPLY_DETAILS:
        details = readString(r, end);
        break;
      case REPLY_RESPONSE:
        response = readBytes(r, end);
        break;
      case REPLY_TRAILERS: {
        const len = readLength(r, end);
        trailers.push(readMetadata(r, r.pos + len));
        break;
      }
      default:
        skipField(r, end, t, 5);
    }
  }
  if (id > MAX_SAFE) throw new CodecError(outOfRange(id));
  return { id, code, details, response, trailers };
}

function readMetadata(r: Reader, end: number): [string, string] {
  let key = "";
  let value = "";
  while (r.pos < end) {
    const t = readTag(r, end);
    if (t === METADATA_KEY) key = readString(r, end);
    else if (t === METADATA_VALUE) value = readString(r, end);
    else skipField(r, end, t, 2);
  }
  return [key, value];
}

function readBytes(r: Reader, end: number): Uint8Array {
  const len = readLength(r, end);
  const bytes = view(r.buf, r.pos, len);
  r.pos += len;
  return bytes;
}

const EMPTY_BYTES = new Uint8Array(0);

// The readers below return what codec.ts would refuse as a string (see the module doc).

function readItem(r: Reader, end: number, from: NodeId, to: NodeId): ShardMessage | string {
  let shard = 0;
  let message: Message | string | null = null;
  while (r.pos < end) {
    const t = readTag(r, end);
    if (t === ITEM_SHARD_ID) {
      shard = readVarint32(r, end);
    } else if (t === ITEM_MESSAGE) {
      const len = readLength(r, end);
      message = readMessage(r, r.pos + len, from, to);
    } else {
      skipField(r, end, t, 2);
    }
  }
  if (message === null) return `shard ${shard}: a batch item has no message`;
  if (typeof message === "string") return message;
  return { shard, message };
}

function readMessage(r: Reader, end: number, from: NodeId, to: NodeId): Message | string {
  let type = 0;
  let term = 0;
  let prevIndex = 0;
  let prevTerm = 0;
  let commit = 0;
  let index = 0;
  let reject = false;
  let hintIndex = 0;
  let hintTerm = 0;
  let lastIndex = 0;
  let lastTerm = 0;
  let transfer = false;
  let readSeq = 0;
  let quiesce = false;
  let noReply = false;
  let lost = false;
  let entries: Entry[] | null = null;
  let entryProblem: string | null = null;
  let snapshot: Snapshot | string | null = null;
  while (r.pos < end) {
    const t = readTag(r, end);
    switch (t) {
      case MSG_TYPE:
        type = readVarint32(r, end) | 0;
        break;
      case MSG_TERM:
        term = readVarint64(r, end);
        break;
      case MSG_PREV_INDEX:
        prevIndex = readVarint64(r, end);
        break;
      case MSG_PREV_TERM:
        prevTerm = readVarint64(r, end);
        break;
      case MSG_ENTRIES: {
        const len = readLength(r, end);
        const e = readEntry(r, r.pos + len);
        if (typeof e === "string") entryProblem ??= e;
        else (entries ??= []).push(e);
        break;
      }
      case MSG_COMMIT:
        commit = readVarint64(r, end);
        break;
      case MSG_INDEX:
        index = readVarint64(r, end);
        break;
      case MSG_REJECT:
        reject = readVarint32(r, end) !== 0;
        break;
      case MSG_HINT_INDEX:
        hintIndex = readVarint64(r, end);
        break;
      case MSG_HINT_TERM:
        hintTerm = readVarint64(r, end);
        break;
      case MSG_LAST_INDEX:
        lastIndex = readVarint64(r, end);
        break;
      case MSG_LAST_TERM:
        lastTerm = readVarint64(r, end);
        break;
      case MSG_TRANSFER:
        transfer = readVarint32(r, end) !== 0;
        break;
      case MSG_READ_SEQ:
        readSeq = readVarint64(r, end);
        break;
      case MSG_SNAPSHOT: {
        const len = readLength(r, end);
        snapshot = readSnapshot(r, r.pos + len);
        break;
      }
      case MSG_QUIESCE:
        quiesce = readVarint32(r, end) !== 0;
        break;
      case MSG_NO_REPLY:
        noReply = readVarint32(r, end) !== 0;
        break;
      case MSG_LOST:
        lost = readVarint32(r, end) !== 0;
        break;
      default:
        skipField(r, end, t, 18);
    }
  }
  // Only the fields `type` uses are checked, and built, as codec.ts's decodeMessage does.
  if (type < APPEND || type > WAKE) return `unknown Raft message type ${type}`;
  if (term > MAX_SAFE) return outOfRange(term);
  switch (type) {
    case APPEND: {
      const worst = Math.max(prevIndex, prevTerm, commit);
      if (worst > MAX_SAFE) return outOfRange(worst);
      if (entryProblem !== null) return entryProblem;
      return {
        from,
        to,
        term: term as Term,
        type: "append",
        prevIndex: prevIndex as LogIndex,
        prevTerm: prevTerm as Term,
        entries: entries ?? [],
        commit: commit as LogIndex,
        noReply,
      };
    }
    case APPEND_RESP: {
      const worst = Math.max(index, hintIndex, hintTerm);
      if (worst > MAX_SAFE) return outOfRange(worst);
      return {
        from,
        to,
        term: term as Term,
        type: "append-resp",
        index: index as LogIndex,
        reject,
        hintIndex: hintIndex as LogIndex,
        hintTerm: hintTerm as Term,
        lost,
      };
    }
    case VOTE:
    case PREVOTE: {
      const worst = Math.max(lastIndex, lastTerm);
      if (worst > MAX_SAFE) return outOfRange(worst);
      return {
        from,
        to,
        term: term as Term,
        type: type === VOTE ? "vote" : "prevote",
        lastIndex: lastIndex as LogIndex,
        lastTerm: lastTerm as Term,
        transfer,
      };
    }
    case VOTE_RESP:
    case PREVOTE_RESP:
      return {
        from,
        to,
        term: term as Term,
        type: type === VOTE_RESP ? "vote-resp" : "prevote-resp",
        reject,
      };
    case HEARTBEAT: {
      const worst = Math.max(commit, readSeq);
      if (worst > MAX_SAFE) return outOfRange(worst);
      return {
        from,
        to,
        term: term as Term,
        type: "heartbeat",
        commit: commit as LogIndex,
        readSeq,
        quiesce,
        noReply,
      };
    }
    case HEARTBEAT_RESP:
      if (readSeq > MAX_SAFE) return outOfRange(readSeq);
      return { from, to, term: term as Term, type: "heartbeat-resp", readSeq };
    case SNAPSHOT:
      if (snapshot === null) return "a snapshot message carries no snapshot";
      if (typeof snapshot === "string") return snapshot;
      return { from, to, term: term as Term, type: "snapshot", snapshot };
    case TIMEOUT_NOW:
      return { from, to, term: term as Term, type: "timeout-now" };
    default:
      return { from, to, term: term as Term, type: "wake" };
  }
}

function readEntry(r: Reader, end: number): Entry | string {
  let term = 0;
  let index = 0;
  let type = ENTRY_NORMAL;
  let dataStart = r.pos;
  let dataLen = 0;
  while (r.pos < end) {
    const t = readTag(r, end);
    switch (t) {
      case ENTRY_TERM:
        term = readVarint64(r, end);
        break;
      case ENTRY_INDEX:
        index = readVarint64(r, end);
        break;
      case ENTRY_TYPE:
        type = readVarint32(r, end) | 0;
        break;
      case ENTRY_DATA:
        dataLen = readLength(r, end);
        dataStart = r.pos;
        r.pos += dataLen;
        break;
      default:
        skipField(r, end, t, 4);
    }
  }
  if (type !== ENTRY_NORMAL && type !== ENTRY_CONF_CHANGE) return `unknown Raft entry type ${type}`;
  const worst = Math.max(term, index);
  if (worst > MAX_SAFE) return outOfRange(worst);
  return {
    term: term as Term,
    index: index as LogIndex,
    type: type === ENTRY_NORMAL ? "normal" : "conf-change",
    data: view(r.buf, dataStart, dataLen),
  };
}

function readSnapshot(r: Reader, end: number): Snapshot | string {
  let meta: SnapshotMeta | string | null = null;
  let dataStart = r.pos;
  let dataLen = 0;
  while (r.pos < end) {
    const t = readTag(r, end);
    if (t === SNAPSHOT_META) {
      const len = readLength(r, end);
      meta = readMeta(r, r.pos + len);
    } else if (t === SNAPSHOT_DATA) {
      dataLen = readLength(r, end);
      dataStart = r.pos;
      r.pos += dataLen;
    } else {
      skipField(r, end, t, 2);
    }
  }
  if (meta === null) return "a snapshot carries no metadata";
  if (typeof meta === "string") return meta;
  return { meta, data: view(r.buf, dataStart, dataLen) };
}

function readMeta(r: Reader, end: number): SnapshotMeta | string {
  let index = 0;
  let term = 0;
  const voters: NodeId[] = [];
  const learners: NodeId[] = [];
  while (r.pos < end) {
    const t = readTag(r, end);
    switch (t) {
      case META_INDEX:
        index = readVarint64(r, end);
        break;
      case META_TERM:
        term = readVarint64(r, end);
        break;
      case META_VOTERS:
        voters.push(readString(r, end) as NodeId);
        break;
      case META_LEARNERS:
        learners.push(readString(r, end) as NodeId);
        break;
      default:
        skipField(r, end, t, 4);
    }
  }
  const worst = Math.max(index, term);
  if (worst > MAX_SAFE) return outOfRange(worst);
  return { index: index as LogIndex, term: term as Term, conf: { voters, learners } };
}

const outOfRange = (n: number): string => `integer out of range: ${n}`;

/** A plain Uint8Array over the input's memory, as codec.ts's bytes() gives (no copy). */
function view(buf: Uint8Array, start: number, len: number): Uint8Array {
  return new Uint8Array(buf.buffer, buf.byteOffset + start, len);
}

// ── wire primitives ─────────────────────────────────────────────────────────────────────────
// Each takes the end of the message being read and refuses to cross it (invariant 1).

function fail(what: string, r: Reader): never {
  throw new CodecError(`malformed raft frame: ${what} at byte ${r.pos}`);
}

/** A tag, with a field number of 1 or more. */
function readTag(r: Reader, end: number): number {
  const t = readVarint32(r, end);
  if (t < 8) fail("field number 0", r);
  return t;
}

/**
 * Skips the field of tag `t`, unknown to a message whose fields are numbered 1 to `known`: a
 * known field gets here only with another wire type than its own, which is refused.
 */
function skipField(r: Reader, end: number, t: number, known: number): void {
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

function skipBytes(r: Reader, end: number, n: number): void {
  if (end - r.pos < n) fail("truncated field", r);
  r.pos += n;
}

/** A length prefix, checked to stay within `end`. */
function readLength(r: Reader, end: number): number {
  const len = readVarint32(r, end);
  if (len > end - r.pos) fail(`length ${len} past the end`, r);
  return len;
}

function readString(r: Reader, end: number): string {
  const len = readLength(r, end);
  const start = r.pos;
  r.pos += len;
  return utf8(r.buf, start, len);
}

/**
 * A varint as a number: exact below 2^53; larger values come out ≥ 2^53 (not exact), which
 * is enough to refuse them. Up to 10 bytes, the last one 0 or 1 (at most 2^64 - 1).
 */
function readVarint64(r: Reader, end: number): number {
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
function readVarint32(r: Reader, end: number): number {
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
function utf8(buf: Uint8Array, start: number, len: number): string {
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
