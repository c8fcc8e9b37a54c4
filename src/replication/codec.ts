/**
 * Raft messages ⇄ the cairn.v1.Raft protobuf objects (proto/cairn/v1/raft.proto), as pure
 * functions. A message is flattened into one RaftMessage whose `type` says which fields carry
 * meaning; the others stay at their proto3 defaults and cost nothing on the wire. `from` and `to`
 * are not encoded: every message of a stream goes from the handshake's sender to its receiver,
 * so the decoder takes them from the stream.
 *
 * Decoding checks what the wire cannot guarantee (a known type, the snapshot of a snapshot
 * message, integer fields within the safe range) and throws CodecError otherwise: a peer that
 * sends such a frame runs another version of the protocol, and its stream is refused.
 */
import { CairnError } from "../common/errors.ts";
import type {
  Entry,
  EntryType,
  LogIndex,
  Message,
  MessageType,
  NodeId,
  Snapshot,
  Term,
} from "../raft/index.ts";
import { logIndex, nodeId, term } from "../raft/index.ts";
import type { RaftBatch, RaftBatch__Output } from "../api/generated/cairn/v1/RaftBatch.ts";
import type { RaftEntry, RaftEntry__Output } from "../api/generated/cairn/v1/RaftEntry.ts";
import type { RaftEntryType__Output } from "../api/generated/cairn/v1/RaftEntryType.ts";
import type { RaftMessage, RaftMessage__Output } from "../api/generated/cairn/v1/RaftMessage.ts";
import type { RaftMessageType__Output } from "../api/generated/cairn/v1/RaftMessageType.ts";
import type { RaftSnapshot, RaftSnapshot__Output } from "../api/generated/cairn/v1/RaftSnapshot.ts";
import type { ShardMessage } from "./multi-raft.ts";

export class CodecError extends CairnError {
  constructor(message: string) {
    super("CAIRN_ERR_PEER_PROTOCOL", message);
    this.name = "CodecError";
  }
}

const TO_WIRE_TYPE: Readonly<Record<MessageType, RaftMessageType__Output>> = {
  append: "RAFT_MESSAGE_TYPE_APPEND",
  "append-resp": "RAFT_MESSAGE_TYPE_APPEND_RESP",
  vote: "RAFT_MESSAGE_TYPE_VOTE",
  "vote-resp": "RAFT_MESSAGE_TYPE_VOTE_RESP",
  prevote: "RAFT_MESSAGE_TYPE_PREVOTE",
  "prevote-resp": "RAFT_MESSAGE_TYPE_PREVOTE_RESP",
  heartbeat: "RAFT_MESSAGE_TYPE_HEARTBEAT",
  "heartbeat-resp": "RAFT_MESSAGE_TYPE_HEARTBEAT_RESP",
  snapshot: "RAFT_MESSAGE_TYPE_SNAPSHOT",
  "timeout-now": "RAFT_MESSAGE_TYPE_TIMEOUT_NOW",
  wake: "RAFT_MESSAGE_TYPE_WAKE",
};

const FROM_WIRE_TYPE = new Map<string, MessageType>(
  Object.entries(TO_WIRE_TYPE).map(([k, v]) => [v, k as MessageType]),
);

const TO_WIRE_ENTRY_TYPE: Readonly<Record<EntryType, RaftEntryType__Output>> = {
  normal: "RAFT_ENTRY_TYPE_NORMAL",
  "conf-change": "RAFT_ENTRY_TYPE_CONF_CHANGE",
};

// ── encoding ────────────────────────────────────────────────────────────────────────────────

export function encodeBatch(messages: readonly ShardMessage[]): RaftBatch {
  return {
    messages: messages.map(({ shard, message }) => ({
      shard_id: shard,
      message: encodeMessage(message),
    })),
  };
}

export function encodeMessage(m: Message): RaftMessage {
  const head = { type: TO_WIRE_TYPE[m.type], term: m.term };
  switch (m.type) {
    case "append":
      return {
        ...head,
        prev_index: m.prevIndex,
        prev_term: m.prevTerm,
        entries: m.entries.map(encodeEntry),
        commit: m.commit,
        no_reply: m.noReply,
      };
    case "append-resp":
      return {
        ...head,
        index: m.index,
        reject: m.reject,
        hint_index: m.hintIndex,
        hint_term: m.hintTerm,
        lost: m.lost,
      };
    case "vote":
    case "prevote":
      return {
        ...head,
        last_index: m.lastIndex,
        last_term: m.lastTerm,
        transfer: m.transfer,
        commit: m.commit,
        commit_term: m.commitTerm,
      };
    case "vote-resp":
    case "prevote-resp":
      return { ...head, reject: m.reject, commit: m.commit, commit_term: m.commitTerm };
    case "heartbeat":
      return {
        ...head,
        commit: m.commit,
        read_seq: m.readSeq,
        quiesce: m.quiesce,
        no_reply: m.noReply,
      };
    case "heartbeat-resp":
      return { ...head, read_seq: m.readSeq };
    case "snapshot":
      return { ...head, snapshot: encodeSnapshot(m.snapshot) };
    case "timeout-now":
    case "wake":
      return head;
  }
}

function encodeEntry(e: Entry): RaftEntry {
  return { term: e.term, index: e.index, type: TO_WIRE_ENTRY_TYPE[e.type], data: e.data };
}

function encodeSnapshot(s: Snapshot): RaftSnapshot {
  return {
    meta: {
      index: s.meta.index,
      term: s.meta.term,
      voters: [...s.meta.conf.voters],
      learners: [...s.meta.conf.learners],
    },
    data: s.data,
  };
}

// ── decoding ────────────────────────────────────────────────────────────────────────────────

/** The messages of a batch received on the stream from `from` to `to`. */
export function decodeBatch(batch: RaftBatch__Output, from: NodeId, to: NodeId): ShardMessage[] {
  return batch.messages.map(({ shard_id, message }) => {
    if (message === null) throw new CodecError(`shard ${shard_id}: a batch item has no message`);
    return { shard: shard_id, message: decodeMessage(message, from, to) };
  });
}

export function decodeMessage(pb: RaftMessage__Output, from: NodeId, to: NodeId): Message {
  const type = FROM_WIRE_TYPE.get(String(pb.type));
  if (type === undefined) throw new CodecError(`unknown Raft message type ${String(pb.type)}`);
  const envelope = { from, to, term: asTerm(pb.term) };
  switch (type) {
    case "append":
      return {
        ...envelope,
        type,
        prevIndex: asIndex(pb.prev_index),
        prevTerm: asTerm(pb.prev_term),
        entries: pb.entries.map(decodeEntry),
        commit: asIndex(pb.commit),
        noReply: pb.no_reply,
      };
    case "append-resp":
      return {
        ...envelope,
        type,
        index: asIndex(pb.index),
        reject: pb.reject,
        hintIndex: asIndex(pb.hint_index),
        hintTerm: asTerm(pb.hint_term),
        lost: pb.lost,
      };
    case "vote":
    case "prevote":
      return {
        ...envelope,
        type,
        lastIndex: asIndex(pb.last_index),
        lastTerm: asTerm(pb.last_term),
        transfer: pb.transfer,
        commit: asIndex(pb.commit),
        commitTerm: asTerm(pb.commit_term),
      };
    case "vote-resp":
    case "prevote-resp":
      return {
        ...envelope,
        type,
        reject: pb.reject,
        commit: asIndex(pb.commit),
        commitTerm: asTerm(pb.commit_term),
      };
    case "heartbeat":
      return {
        ...envelope,
        type,
        commit: asIndex(pb.commit),
        readSeq: asCount(pb.read_seq),
        quiesce: pb.quiesce,
        noReply: pb.no_reply,
      };
    case "heartbeat-resp":
      return { ...envelope, type, readSeq: asCount(pb.read_seq) };
    case "snapshot":
      if (pb.snapshot === null) throw new CodecError("a snapshot message carries no snapshot");
      return { ...envelope, type, snapshot: decodeSnapshot(pb.snapshot) };
    case "timeout-now":
    case "wake":
      return { ...envelope, type };
  }
}

function decodeEntry(e: RaftEntry__Output): Entry {
  const type: EntryType | undefined =
    e.type === "RAFT_ENTRY_TYPE_NORMAL"
      ? "normal"
      : e.type === "RAFT_ENTRY_TYPE_CONF_CHANGE"
        ? "conf-change"
        : undefined;
  if (type === undefined) throw new CodecError(`unknown Raft entry type ${String(e.type)}`);
  return { term: asTerm(e.term), index: asIndex(e.index), type, data: bytes(e.data) };
}

function decodeSnapshot(s: RaftSnapshot__Output): Snapshot {
  if (s.meta === null) throw new CodecError("a snapshot carries no metadata");
  return {
    meta: {
      index: asIndex(s.meta.index),
      term: asTerm(s.meta.term),
      conf: { voters: s.meta.voters.map(nodeId), learners: s.meta.learners.map(nodeId) },
    },
    data: bytes(s.data),
  };
}

/** A plain Uint8Array view of a decoded Buffer (no copy), as the rest of the node expects. */
function bytes(b: Uint8Array): Uint8Array {
  return new Uint8Array(b.buffer, b.byteOffset, b.byteLength);
}

function asCount(n: number): number {
  // uint64 fields decode to numbers (longs: Number); past 2^53 they are no longer exact.
  if (!Number.isSafeInteger(n) || n < 0) throw new CodecError(`integer out of range: ${n}`);
  return n;
}

const asIndex = (n: number): LogIndex => logIndex(asCount(n));
const asTerm = (n: number): Term => term(asCount(n));
