/**
 * cairn.v1.Raft Stream frames encoded by hand, straight from the Raft core's messages (see
 * frame-codec.ts for the format, the invariants and the caveats).
 *
 * Encoding makes two passes. The first sums the frame's exact size. The second fills one Buffer
 * of that size from the back, so that every sub-message is written before its length prefix,
 * which is then known without keeping sizes between the passes (vtprotobuf and upb write
 * backwards too). Fields come out in field-number order and proto3 defaults (0, false, "", empty
 * bytes, enum 0) are left out, but a sub-message that is present is written even when empty:
 * the decoder tells an absent snapshot, snapshot meta, batch item message or frame oneof from
 * an empty one.
 */
import type { Entry, Message, NodeId, Snapshot, SnapshotMeta, Term } from "../raft/index.ts";
import {
  APPEND,
  APPEND_RESP,
  BATCH_MESSAGES,
  BATCH_TO_REPLICA_ID,
  CALL_ID,
  CALL_METHOD,
  CALL_REQUEST,
  CALL_TIMEOUT_MS,
  ENTRY_CONF_CHANGE,
  ENTRY_DATA,
  ENTRY_INDEX,
  ENTRY_TERM,
  ENTRY_TYPE,
  FRAME_BATCH,
  FRAME_CALL,
  FRAME_HANDSHAKE,
  FRAME_REPLY,
  HANDSHAKE_CLUSTER_ID,
  HANDSHAKE_FROM_NODE_ID,
  HANDSHAKE_FROM_REPLICA_ID,
  HANDSHAKE_TO_NODE_ID,
  HEARTBEAT,
  HEARTBEAT_RESP,
  type Handshake,
  ITEM_MESSAGE,
  ITEM_SHARD_ID,
  METADATA_KEY,
  METADATA_VALUE,
  META_INDEX,
  META_LEARNERS,
  META_TERM,
  META_VOTERS,
  MSG_COMMIT,
  MSG_COMMIT_TERM,
  MSG_ENTRIES,
  MSG_HINT_INDEX,
  MSG_HINT_TERM,
  MSG_INDEX,
  MSG_LAST_INDEX,
  MSG_LAST_TERM,
  MSG_LOST,
  MSG_NO_REPLY,
  MSG_PREV_INDEX,
  MSG_PREV_TERM,
  MSG_QUIESCE,
  MSG_READ_SEQ,
  MSG_REJECT,
  MSG_SNAPSHOT,
  MSG_TERM,
  MSG_TRANSFER,
  MSG_TYPE,
  PREVOTE,
  PREVOTE_RESP,
  type PeerCall,
  type PeerReply,
  REPLY_CODE,
  REPLY_DETAILS,
  REPLY_ID,
  REPLY_RESPONSE,
  REPLY_TRAILERS,
  SNAPSHOT,
  SNAPSHOT_DATA,
  SNAPSHOT_META,
  TIMEOUT_NOW,
  VOTE,
  VOTE_RESP,
  WAKE,
} from "./frame-codec.ts";
import type { ShardMessage } from "./multi-raft.ts";

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
        head +
        u64FieldSize(m.lastIndex) +
        u64FieldSize(m.lastTerm) +
        boolFieldSize(m.transfer) +
        u64FieldSize(m.commit) +
        twoByteTagU64FieldSize(m.commitTerm)
      );
    case "vote-resp":
    case "prevote-resp":
      return (
        head +
        boolFieldSize(m.reject) +
        u64FieldSize(m.commit) +
        twoByteTagU64FieldSize(m.commitTerm)
      );
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
      p = putTwoByteTagVarintField(buf, p, MSG_COMMIT_TERM, m.commitTerm);
      p = putBoolField(buf, p, MSG_TRANSFER, m.transfer);
      p = putVarintField(buf, p, MSG_LAST_TERM, m.lastTerm);
      p = putVarintField(buf, p, MSG_LAST_INDEX, m.lastIndex);
      p = putVarintField(buf, p, MSG_COMMIT, m.commit);
      return putHead(buf, p, m.type === "vote" ? VOTE : PREVOTE, m.term);
    case "vote-resp":
    case "prevote-resp":
      p = putTwoByteTagVarintField(buf, p, MSG_COMMIT_TERM, m.commitTerm);
      p = putBoolField(buf, p, MSG_REJECT, m.reject);
      p = putVarintField(buf, p, MSG_COMMIT, m.commit);
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

/** A varint field whose tag (fields 16 to 2047) takes two bytes: nothing when 0; ends at `p`. */
function putTwoByteTagVarintField(buf: Buffer, p: number, t: number, v: number): number {
  if (v === 0) return p;
  p = putVarint(buf, p, v);
  buf[--p] = t >>> 7;
  buf[--p] = (t & 0x7f) | 0x80;
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

/** A uint64 field whose tag (fields 16 to 2047) takes two bytes: nothing when 0. */
const twoByteTagU64FieldSize = (v: number): number => (v === 0 ? 0 : 1 + u64FieldSize(v));

/** A length-delimited field with a one-byte tag around `len` bytes. */
const lenFieldSize = (len: number): number => 1 + varintSize(len) + len;

/** A singular string or bytes field of `len` bytes: nothing when empty. */
const stringFieldSize = (len: number): number => (len === 0 ? 0 : lenFieldSize(len));
