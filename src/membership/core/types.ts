/**
 * Vocabulary of the SWIM core: branded ids and counters, member metadata, member states, the
 * protocol's tuning and the events the core reports. Plain data only; behaviour lives in swim.ts.
 */
import { CairnError } from "../../common/index.ts";

/** A member of the cluster: the Cairn node id (`node_id` in the configuration). */
export type MemberId = string & { readonly __brand: "MemberId" };
/**
 * A member's incarnation number. Only the member itself raises it (to refute a suspicion); every
 * observer's record of a member never sees it decrease.
 */
export type Incarnation = number & { readonly __brand: "Incarnation" };
/** Logical time of the core: the number of tick() calls so far. */
export type Ticks = number & { readonly __brand: "Ticks" };

export const memberId = (id: string): MemberId => id as MemberId;
export const incarnation = (n: number): Incarnation => n as Incarnation;
export const ticks = (n: number): Ticks => n as Ticks;

/** The largest incarnation the wire format can carry (u32). */
export const MAX_INCARNATION = 0xffff_ffff;

/**
 * How far a member's incarnation may move: a member raises its own by at most this much in
 * INCARNATION_STEP_PERIODS probe periods, and an observer's record of it rises no faster: no
 * further than this above the incarnation the record held when its step period began (0, or the
 * incarnation it was forgotten at, for a member first seen). An `alive` naming more is taken at
 * that bound (a member not known yet, or the same member at the same addresses); any other
 * update naming more is ignored. Only the member raises its incarnation, by one a refutation
 * (or, in a new life, to just above what the cluster remembers), so an honest update is at most
 * as far ahead of an observer as the refutations it missed: far below this. Without the bound,
 * a forged claim at 2^32 − 1 drove the member to MAX_INCARNATION in one datagram, where it could
 * no longer outbid a suspicion or death at MAX_INCARNATION; bounded against the incarnation held
 * now (not at the period's start), ~550 datagrams a step each walked an observer's record there.
 */
export const MAX_INCARNATION_STEP = 0x1_0000;
/** The probe periods in which a member raises its incarnation by MAX_INCARNATION_STEP at most. */
export const INCARNATION_STEP_PERIODS = 10;

/**
 * What a member announces about itself. `rpcAddr` is routable (`host:port`, never a wildcard
 * address) and is also where the member listens for SWIM datagrams: UDP on the RPC port number.
 */
export interface MemberMeta {
  readonly id: MemberId;
  readonly rpcAddr: string;
  readonly httpAddr: string;
  readonly totalShards: number;
}

/**
 * `alive` answers probes; `suspect` missed a probe and may refute; `dead` was declared failed;
 * `left` announced a graceful leave. Dead and left members are kept as tombstones for a while.
 */
export type MemberState = "alive" | "suspect" | "dead" | "left";

/** One member as an observer sees it; what events and members() hand to the rest of the node. */
export interface MemberView {
  readonly meta: MemberMeta;
  readonly state: MemberState;
  readonly incarnation: Incarnation;
}

/**
 * Reports to the rest of the node. `joined`: first heard of; `suspect`: missed probes; `alive`:
 * alive again after suspect, dead or left; `dead`: declared failed; `left`: left gracefully;
 * `updated`: metadata changed (a restart with new addresses).
 */
export type MemberEventKind = "joined" | "suspect" | "alive" | "dead" | "left" | "updated";

export interface MemberEvent {
  readonly kind: MemberEventKind;
  readonly member: MemberView;
}

/** Protocol tuning, in ticks of the core. Defaults assume a 100 ms tick (see DEFAULT_TICK_MS). */
export interface SwimConfig {
  /** Ticks between two probes started by this member (the SWIM protocol period). */
  readonly probeIntervalTicks: number;
  /** Ticks to wait for a direct ack before asking `indirectChecks` members to probe. */
  readonly ackTimeoutTicks: number;
  /** Members asked to probe indirectly (`ping-req`), the k of SWIM. */
  readonly indirectChecks: number;
  /** Ticks between two gossip rounds; a round sends queued updates to gossipFanout members. */
  readonly gossipIntervalTicks: number;
  /** Members a gossip round sends to, chosen at random among the live ones. */
  readonly gossipFanout: number;
  /** Minimum suspicion timeout = suspicionMult · max(1, log10 n) probe periods (Lifeguard). */
  readonly suspicionMult: number;
  /** Maximum suspicion timeout = suspicionMaxMult · minimum; shrinks with confirmations. */
  readonly suspicionMaxMult: number;
  /** An update is piggybacked retransmitMult · ceil(log10(n + 1)) times. */
  readonly retransmitMult: number;
  /** Ticks between two full-state exchanges with a random live member (anti-entropy). */
  readonly pushPullIntervalTicks: number;
  /** Ticks between two full-state exchanges with a random dead member (heals partitions). */
  readonly reconnectIntervalTicks: number;
  /** Ticks a dead or left member is remembered before it is forgotten. */
  readonly tombstoneTicks: number;
  /**
   * Other members remembered at most (any state): an update naming a new member past it is
   * ignored. Gossip is unauthenticated UDP, and a host flooding the port with made-up members
   * must not grow the table (and the probe order, which every member waits its turn in) without
   * end. Far above any cluster's size (a cluster records at most 1,024 members).
   */
  readonly maxMembers: number;
}

/** The tick length the default configuration is written for. */
export const DEFAULT_TICK_MS = 100;

export const DEFAULT_SWIM_CONFIG: SwimConfig = {
  probeIntervalTicks: 10,
  ackTimeoutTicks: 5,
  indirectChecks: 3,
  gossipIntervalTicks: 2,
  gossipFanout: 3,
  suspicionMult: 4,
  suspicionMaxMult: 6,
  retransmitMult: 4,
  pushPullIntervalTicks: 300,
  reconnectIntervalTicks: 20,
  tombstoneTicks: 3000,
  maxMembers: 2048,
};

export class MembershipConfigError extends CairnError {
  constructor(message: string) {
    super("CAIRN_ERR_MEMBERSHIP_CONFIG", message);
    this.name = "MembershipConfigError";
  }
}

/** A joining node and the cluster disagree on `total_shards`; refused on both sides. */
export class ShardCountMismatchError extends CairnError {
  readonly ours: number;
  readonly theirs: number;
  readonly peer: string;
  /** The address (`host:port`) the refusing datagram came from, when one did. */
  readonly addr: string | null;
  /**
   * True when the datagram was a `refuse`: the peer refused what this node sent it (a joining
   * node's join ends only on such a refusal from a seed it asked, membership.ts); false when this
   * node refused the peer's datagram.
   */
  readonly refusal: boolean;

  constructor(
    ours: number,
    theirs: number,
    peer: string,
    addr: string | null = null,
    refusal = false,
  ) {
    super(
      "CAIRN_ERR_SHARD_COUNT_MISMATCH",
      `cluster.total_shards mismatch: this node has ${ours}, ${peer} has ${theirs}; ` +
        "every node of a cluster must use the same total_shards",
    );
    this.name = "ShardCountMismatchError";
    this.ours = ours;
    this.theirs = theirs;
    this.peer = peer;
    this.addr = addr;
    this.refusal = refusal;
  }
}

/**
 * Two live nodes claim one node id: this node sees another address claim its own id again after
 * it refuted the claim (a stale record of its previous address is refuted once and never comes
 * back), or sees another member's address flip back to the one it had before within ten probe
 * periods (swim.ts, DUPLICATE_FLIP_PERIODS; later, the member moved back). Reported (logged
 * at ERROR), never thrown: which of the two is the real member is the meta group's to say
 * (src/node/cluster.ts, checkRejoin).
 */
export class DuplicateNodeIdError extends CairnError {
  readonly peer: string;

  /** `self`: "this one" when the id is this node's own, else null. */
  constructor(id: string, self: "this one" | null, first: string, second: string) {
    super(
      "CAIRN_ERR_DUPLICATE_NODE_ID",
      `node id ${id} is used by two live nodes, ${self === null ? "one" : self} at ${first} and another at ${second}: node ids must be unique; stop one of them or start it with another --node-id`,
    );
    this.name = "DuplicateNodeIdError";
    this.peer = second;
  }
}

/** Throws MembershipConfigError unless every field is a sane positive integer. */
export function validateSwimConfig(config: SwimConfig): void {
  for (const [key, value] of Object.entries(config)) {
    if (!Number.isSafeInteger(value) || (value as number) < 1) {
      throw new MembershipConfigError(`swim.${key} must be a positive integer, got ${value}`);
    }
  }
  if (config.ackTimeoutTicks >= config.probeIntervalTicks) {
    throw new MembershipConfigError(
      "swim.ackTimeoutTicks must be shorter than swim.probeIntervalTicks: the indirect probe " +
        "needs the rest of the period",
    );
  }
}
