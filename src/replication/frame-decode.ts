/**
 * cairn.v1.Raft Stream frames decoded by hand, straight into the Raft core's messages (see
 * frame-codec.ts for the format, the invariants and the caveats).
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
  ENTRY_NORMAL,
  ENTRY_TERM,
  ENTRY_TYPE,
  FRAME_BATCH,
  FRAME_CALL,
  FRAME_HANDSHAKE,
  FRAME_REPLY,
  type Frame,
  HANDSHAKE_CLUSTER_ID,
  HANDSHAKE_FROM_NODE_ID,
  HANDSHAKE_FROM_REPLICA_ID,
  HANDSHAKE_TO_NODE_ID,
  HEARTBEAT,
  HEARTBEAT_RESP,
  type Handshake,
  ITEM_MESSAGE,
  ITEM_SHARD_ID,
  MAX_FRAME_ITEMS,
  MAX_SAFE,
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
  Reader,
  SNAPSHOT,
  SNAPSHOT_DATA,
  SNAPSHOT_META,
  TIMEOUT_NOW,
  VOTE,
  VOTE_RESP,
  WAKE,
  readLength,
  readString,
  readTag,
  readVarint32,
  readVarint64,
  skipField,
} from "./frame-codec.ts";
import type { ShardMessage } from "./multi-raft.ts";

// ── decoding ────────────────────────────────────────────────────────────────────────────────

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
        countItem(r);
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

/** Counts one more item decoded from `r`'s frame; past MAX_FRAME_ITEMS, the frame is refused. */
function countItem(r: Reader): void {
  if (++r.items > MAX_FRAME_ITEMS) {
    throw new CodecError(
      `malformed raft frame: more than ${MAX_FRAME_ITEMS} messages, entries, members or trailers in one frame`,
    );
  }
}

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
  countItem(r);
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
  let commitTerm = 0;
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
        countItem(r);
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
      case MSG_COMMIT_TERM:
        commitTerm = readVarint64(r, end);
        break;
      default:
        skipField(r, end, t, 19);
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
      const worst = Math.max(lastIndex, lastTerm, commit, commitTerm);
      if (worst > MAX_SAFE) return outOfRange(worst);
      return {
        from,
        to,
        term: term as Term,
        type: type === VOTE ? "vote" : "prevote",
        lastIndex: lastIndex as LogIndex,
        lastTerm: lastTerm as Term,
        transfer,
        commit: commit as LogIndex,
        commitTerm: commitTerm as Term,
      };
    }
    case VOTE_RESP:
    case PREVOTE_RESP: {
      const worst = Math.max(commit, commitTerm);
      if (worst > MAX_SAFE) return outOfRange(worst);
      return {
        from,
        to,
        term: term as Term,
        type: type === VOTE_RESP ? "vote-resp" : "prevote-resp",
        reject,
        commit: commit as LogIndex,
        commitTerm: commitTerm as Term,
      };
    }
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
        countItem(r);
        voters.push(readString(r, end) as NodeId);
        break;
      case META_LEARNERS:
        countItem(r);
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
