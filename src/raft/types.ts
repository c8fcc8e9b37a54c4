/**
 * Vocabulary of the Raft core: branded ids and counters, log entries, persistent state,
 * configurations, snapshots. Everything here is plain data; behaviour lives in raft.ts.
 */

/** A member of a Raft group: the Cairn node id (`node_id` in the configuration). */
export type NodeId = string & { readonly __brand: "NodeId" };
/** A Raft term. Starts at 0; a node's term never decreases. */
export type Term = number & { readonly __brand: "Term" };
/** A position in the Raft log. Index 0 is the empty prefix; real entries start at 1. */
export type LogIndex = number & { readonly __brand: "LogIndex" };

export const nodeId = (id: string): NodeId => id as NodeId;
export const term = (t: number): Term => t as Term;
export const logIndex = (i: number): LogIndex => i as LogIndex;

/** `normal` carries application data (empty for the leader's no-op); `conf-change` a ConfChange. */
export type EntryType = "normal" | "conf-change";

export interface Entry {
  readonly term: Term;
  readonly index: LogIndex;
  readonly type: EntryType;
  readonly data: Uint8Array;
}

/** What must be on stable storage before any message that depends on it leaves the node. */
export interface HardState {
  readonly term: Term;
  /** The candidate this node voted for in `term`, or null. */
  readonly vote: NodeId | null;
  readonly commit: LogIndex;
}

/** A group configuration: voters decide elections and commits; learners only receive the log. */
export interface ConfState {
  readonly voters: readonly NodeId[];
  readonly learners: readonly NodeId[];
}

/**
 * One membership change at a time. `add-voter` on a learner promotes it. `remove` removes a voter
 * or a learner. Encoded into a `conf-change` entry with encodeConfChange().
 */
export interface ConfChange {
  readonly type: "add-learner" | "add-voter" | "remove";
  readonly node: NodeId;
}

export interface SnapshotMeta {
  /** Last log index the snapshot contains. */
  readonly index: LogIndex;
  /** Term of the entry at `index`. */
  readonly term: Term;
  /** Configuration in force at `index`. */
  readonly conf: ConfState;
}

/**
 * A snapshot's image read where it lies instead of held in memory: on the sender, frames made
 * lazily from a pinned engine version; on the receiver, a verified file. Opaque to Raft, like
 * `Snapshot.data`. Whoever consumes it (the transport that sends it, the driver that installs or
 * drops it) releases it, whatever the outcome.
 */
export interface SnapshotStream {
  /**
   * The image's bytes, in chunks; read at most once. Throws once released. A chunk may be a view
   * of memory the stream reuses for the next one: a reader that keeps bytes past asking for the
   * next chunk copies them.
   */
  chunks(): AsyncIterable<Uint8Array>;
  /** Frees what the image holds (a pinned version, a file). Idempotent; fails a read under way. */
  release(): void;
}

export interface Snapshot {
  readonly meta: SnapshotMeta;
  /** The state machine's image at `meta.index`, opaque to Raft; empty when `stream` carries it. */
  readonly data: Uint8Array;
  /** The image as a stream, for images too large to hold in memory (the driver's shards). */
  readonly stream?: SnapshotStream;
}

/** Answer to readIndex(ctx): once the state machine has applied `index`, a read is linearizable. */
export interface ReadState {
  readonly index: LogIndex;
  readonly context: Uint8Array;
}

export type Role = "follower" | "pre-candidate" | "candidate" | "leader";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

export function encodeConfChange(cc: ConfChange): Uint8Array {
  return encoder.encode(`${cc.type} ${cc.node}`);
}

export function decodeConfChange(data: Uint8Array): ConfChange {
  const text = decoder.decode(data);
  const space = text.indexOf(" ");
  const type = text.slice(0, space);
  const node = text.slice(space + 1);
  if (space <= 0 || node.length === 0)
    throw new Error(`malformed conf change: ${JSON.stringify(text)}`);
  if (type !== "add-learner" && type !== "add-voter" && type !== "remove") {
    throw new Error(`unknown conf change type: ${JSON.stringify(type)}`);
  }
  return { type, node: nodeId(node) };
}

/** The configuration that results from applying `cc` to `conf` (as the core does on apply). */
export function confAfter(conf: ConfState, cc: ConfChange): ConfState {
  const voters = new Set(conf.voters);
  const learners = new Set(conf.learners);
  switch (cc.type) {
    case "add-learner":
      voters.delete(cc.node); // a voter is demoted
      learners.add(cc.node);
      break;
    case "add-voter":
      learners.delete(cc.node);
      voters.add(cc.node);
      break;
    case "remove":
      voters.delete(cc.node);
      learners.delete(cc.node);
      break;
  }
  return { voters: [...voters].sort(), learners: [...learners].sort() };
}
