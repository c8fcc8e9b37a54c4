/**
 * Messages between the members of one Raft group. Each variant says who may send it and what the
 * receiver does with it; `term` is the sender's current term on every message.
 */
import type { Entry, LogIndex, NodeId, Snapshot, Term } from "./types.ts";

interface Envelope {
  readonly from: NodeId;
  readonly to: NodeId;
  readonly term: Term;
}

/** Leader → follower: entries after (prevIndex, prevTerm), and the leader's commit index. */
export interface AppendMessage extends Envelope {
  readonly type: "append";
  readonly prevIndex: LogIndex;
  readonly prevTerm: Term;
  readonly entries: readonly Entry[];
  readonly commit: LogIndex;
  /**
   * Answer only a refusal: an acceptance would tell the leader nothing (RaftConfig's
   * omitRedundantReplies).
   */
  readonly noReply: boolean;
}

/**
 * Follower → leader. Accepted: `index` is the last index known to match the leader's log.
 * Rejected: `index` is the rejected prevIndex and (hintIndex, hintTerm) is the follower's guess of
 * where the logs may agree: the largest index ≤ prevIndex whose term is ≤ the leader's prevTerm.
 */
export interface AppendResponseMessage extends Envelope {
  readonly type: "append-resp";
  readonly index: LogIndex;
  readonly reject: boolean;
  readonly hintIndex: LogIndex;
  readonly hintTerm: Term;
  /**
   * A refusal from a member that lost its log and is being refilled (RaftConfig.recoveringUntil):
   * what it acknowledged before its loss is gone, so the leader forgets its match index.
   */
  readonly lost: boolean;
}

/**
 * Candidate → voters. `prevote` asks whether a real election at `term` would be won, without
 * anyone changing term. `transfer` marks an election forced by leadership transfer: receivers
 * do not refuse it because of a live leader lease.
 */
export interface VoteMessage extends Envelope {
  readonly type: "vote" | "prevote";
  readonly lastIndex: LogIndex;
  readonly lastTerm: Term;
  readonly transfer: boolean;
  /**
   * The candidate's commit index and the term of its entry there (0 and 0 if it has none): a
   * receiver whose own entry at `commit` has that term commits it (as with a refusal's, below).
   * Without it, a learner whose promotion only the candidate knew had committed, its log longer
   * than the candidate's, refuses the candidate and, a learner still, never campaigns itself.
   */
  readonly commit: LogIndex;
  readonly commitTerm: Term;
}

export interface VoteResponseMessage extends Envelope {
  readonly type: "vote-resp" | "prevote-resp";
  readonly reject: boolean;
  /**
   * A refusal's word on the commit: the refuser's commit index, capped at the candidate's last
   * index, and the term of the refuser's entry there (0 and 0 on a grant, or when the refuser no
   * longer has that entry's term). A candidate whose own entry at `commit` has that term holds
   * the same log up to it (log matching) and so knows it is committed. Without it, a voter removed
   * by a change that only it heard is committed refuses every candidate (its log is longer) and
   * never campaigns, while the others count it among the voters (Raft's #learnCommit).
   */
  readonly commit: LogIndex;
  readonly commitTerm: Term;
}

/**
 * Leader → follower: liveness and commit (never beyond what the follower is known to hold).
 * `readSeq` is the newest ReadIndex round the leader wants confirmed; the response echoes it.
 * `quiesce` is the leader's last heartbeat before its group goes quiet: a follower whose log
 * ends at `commit`, in this term, stops its election timer and does not answer (any answer
 * would wake the leader); otherwise it answers as to any heartbeat.
 */
export interface HeartbeatMessage extends Envelope {
  readonly type: "heartbeat";
  readonly commit: LogIndex;
  readonly readSeq: number;
  readonly quiesce: boolean;
  /** No answer wanted (RaftConfig's omitRedundantReplies); never set with `quiesce`. */
  readonly noReply: boolean;
}

export interface HeartbeatResponseMessage extends Envelope {
  readonly type: "heartbeat-resp";
  readonly readSeq: number;
}

/** Leader → follower too far behind for the log: install this snapshot. */
export interface SnapshotMessage extends Envelope {
  readonly type: "snapshot";
  readonly snapshot: Snapshot;
}

/** Leader → chosen successor during leadership transfer: campaign now. */
export interface TimeoutNowMessage extends Envelope {
  readonly type: "timeout-now";
}

/**
 * Follower → leader: wake up. Sent by a quiesced follower that woke for another reason than its
 * leader (a local request, another member's message, a failure report), so that the leader
 * heartbeats again before the follower's election timer runs out. Any other receiver ignores it.
 */
export interface WakeMessage extends Envelope {
  readonly type: "wake";
}

export type Message =
  | AppendMessage
  | AppendResponseMessage
  | VoteMessage
  | VoteResponseMessage
  | HeartbeatMessage
  | HeartbeatResponseMessage
  | SnapshotMessage
  | TimeoutNowMessage
  | WakeMessage;

export type MessageType = Message["type"];
