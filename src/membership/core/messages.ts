/**
 * The SWIM messages and the membership updates they carry, with a one-line describe() each,
 * reused by logs and test output. Every message names its sender (`from`) and the sender's
 * `total_shards`, so a node of another cluster shape is refused at the first datagram.
 */
import type { Incarnation, MemberId, MemberMeta, MemberState } from "./types.ts";

export interface AliveUpdate {
  readonly kind: "alive";
  readonly incarnation: Incarnation;
  readonly meta: MemberMeta;
}

/** `from` is the member that suspected or declared; confirmations count distinct ones. */
export interface SuspectUpdate {
  readonly kind: "suspect";
  readonly id: MemberId;
  readonly incarnation: Incarnation;
  readonly from: MemberId;
}

export interface DeadUpdate {
  readonly kind: "dead";
  readonly id: MemberId;
  readonly incarnation: Incarnation;
  readonly from: MemberId;
}

export interface LeftUpdate {
  readonly kind: "left";
  readonly id: MemberId;
  readonly incarnation: Incarnation;
}

/** A membership update, piggybacked on probes and acks (gossip). */
export type Update = AliveUpdate | SuspectUpdate | DeadUpdate | LeftUpdate;

/** One member's full record, as exchanged by push-pull. */
export interface MemberRecord {
  readonly meta: MemberMeta;
  readonly state: MemberState;
  readonly incarnation: Incarnation;
}

interface Header {
  readonly from: MemberId;
  readonly totalShards: number;
}

/** A direct probe of `target`; answered by an `ack` with the same `seq`. */
export interface Ping extends Header {
  readonly type: "ping";
  readonly seq: number;
  readonly target: MemberId;
  readonly gossip: readonly Update[];
}

/** Asks the receiver to probe `target` at `targetAddr` and relay the ack under `seq`. */
export interface PingReq extends Header {
  readonly type: "ping-req";
  readonly seq: number;
  readonly target: MemberId;
  readonly targetAddr: string;
  readonly gossip: readonly Update[];
}

export interface Ack extends Header {
  readonly type: "ack";
  readonly seq: number;
  readonly gossip: readonly Update[];
}

/** Updates alone, sent to a few random members every gossip interval while any are queued. */
export interface Gossip extends Header {
  readonly type: "gossip";
  readonly gossip: readonly Update[];
}

/**
 * One chunk of a full-state exchange. A request (`reply` false) is answered with the receiver's
 * full state, once per exchange: only its `first` chunk asks for an answer. `join` marks the
 * exchanges a joining node starts with its seeds.
 */
export interface PushPull extends Header {
  readonly type: "push-pull";
  readonly reply: boolean;
  readonly join: boolean;
  readonly first: boolean;
  readonly records: readonly MemberRecord[];
}

/** The answer to a node whose `total_shards` differs from the receiver's. */
export interface Refuse extends Header {
  readonly type: "refuse";
  readonly reason: "shard-count-mismatch";
}

export type Message = Ping | PingReq | Ack | Gossip | PushPull | Refuse;

export function describeUpdate(u: Update): string {
  switch (u.kind) {
    case "alive":
      return `alive(${u.meta.id}@${u.incarnation} ${u.meta.rpcAddr})`;
    case "suspect":
    case "dead":
      return `${u.kind}(${u.id}@${u.incarnation} by ${u.from})`;
    case "left":
      return `left(${u.id}@${u.incarnation})`;
  }
}

function describeGossip(gossip: readonly Update[]): string {
  return gossip.length === 0 ? "" : ` +[${gossip.map(describeUpdate).join(", ")}]`;
}

/** A stable one-line description, e.g. `ping n1→n2 seq=7 +[alive(n3@0 …)]`. */
export function describeMessage(m: Message): string {
  switch (m.type) {
    case "ping":
      return `ping ${m.from}→${m.target} seq=${m.seq}${describeGossip(m.gossip)}`;
    case "ping-req":
      return `ping-req ${m.from}→? target=${m.target}@${m.targetAddr} seq=${m.seq}${describeGossip(m.gossip)}`;
    case "ack":
      return `ack ${m.from} seq=${m.seq}${describeGossip(m.gossip)}`;
    case "gossip":
      return `gossip ${m.from}${describeGossip(m.gossip)}`;
    case "push-pull": {
      const flags = [m.reply ? "reply" : "request", m.join ? "join" : "", m.first ? "first" : ""];
      const records = m.records.map((r) => `${r.meta.id}:${r.state}@${r.incarnation}`);
      return `push-pull ${m.from} ${flags.filter((f) => f !== "").join(",")} [${records.join(" ")}]`;
    }
    case "refuse":
      return `refuse ${m.from} ${m.reason} (total_shards=${m.totalShards})`;
  }
}
