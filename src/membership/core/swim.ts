/**
 * The SWIM state machine of one member: a pure, synchronous core. Time enters through tick(),
 * datagrams through handle(), randomness through the injected Rng; everything the driver must do
 * comes out of takeReady(). The same inputs in the same order give the same outputs.
 *
 * Protocol (SWIM with the Lifeguard refinements, as in hashicorp/memberlist):
 * - Every probe period the member probes one other member, chosen in randomized round-robin order,
 *   with a `ping`. Without an `ack` after ackTimeoutTicks it asks `indirectChecks` random alive
 *   members to probe for it (`ping-req`). Without any ack by the end of the period it suspects
 *   the target.
 * - A suspected member refutes by raising its incarnation and gossiping `alive`. Probes of a
 *   suspect member carry the suspicion (Lifeguard's buddy rule), so it learns of it quickly. A
 *   member hearing a claim it knows to be outdated answers the sender with the newer `alive`
 *   (a correction), and open suspicions are gossiped again every two probe periods, so an
 *   observer that missed every copy of a refutation is still repaired before its timeout.
 * - A suspicion times out after max(min, max − (max − min)·log(c + 1)/log(k + 1)) ticks, where c
 *   counts the distinct members that confirmed it and k the confirmations expected; min scales
 *   with log10 of the cluster size. Only gossiped suspicions confirm, never push-pull records.
 *   Then the member is declared `dead`.
 * - Updates ride on every ping, ping-req and ack, each retransmitted about λ·log(n) times.
 * - A full-state `push-pull` runs on join, periodically with a random live member (anti-entropy),
 *   and periodically with a random dead one, so both sides of a healed partition refute and
 *   reconverge; and with any sender this member does not know as live (an introduction). In a
 *   push-pull a remote `dead` only counts as `suspect`: stale state never kills.
 * - Dead and left members stay as tombstones for tombstoneTicks, then are forgotten, but for
 *   their last incarnation (the latest maxMembers of them): an `alive` at or below it is a
 *   recorded datagram sent again, sealed or not, and brings back the tombstone, not the member.
 *
 * Invariants:
 * 1. An observer's incarnation for a member never decreases while it remembers the member.
 * 2. `dead` and `left` are final for an incarnation: only `alive` with a higher one revives.
 * 3. Only the member itself raises its own incarnation above what others said of it.
 * 4. A member raises its incarnation by at most MAX_INCARNATION_STEP every
 *    INCARNATION_STEP_PERIODS probe periods, and an observer's record of a member rises no
 *    faster: no further than MAX_INCARNATION_STEP above what it held when the record's current
 *    step period began (0, or its forgotten incarnation, for a member first seen). An `alive`
 *    further ahead is taken at that bound (a member it does not know, or the same member at the
 *    same addresses); any other update further ahead is ignored. A forged claim at 2^32 − 1, in
 *    one datagram or walked up in many, cannot leave the member nothing to outbid it with
 *    (types.ts).
 * 5. What a datagram makes this member send back is bounded: full-state answers and
 *    introductions by token buckets (per source address and in all), relayed pings by MAX_RELAYS
 *    and to addresses that are IP literals or the target's in the table.
 *
 * Caveats: no local health multiplier (Lifeguard's LHM) and no TCP fallback probe; two live
 * processes sharing one node id will keep refuting each other.
 */
import { type Rng, shuffle } from "../../common/index.ts";
import type {
  Ack,
  AliveUpdate,
  DeadUpdate,
  LeftUpdate,
  Message,
  MemberRecord,
  PushPull,
  SuspectUpdate,
  Update,
} from "./messages.ts";
import type {
  Incarnation,
  MemberEvent,
  MemberEventKind,
  MemberId,
  MemberMeta,
  MemberState,
  MemberView,
  SwimConfig,
  Ticks,
} from "./types.ts";
import { isIpLiteral, isWildcardHost, parseHostPort } from "./address.ts";
import { BroadcastQueue, updateSubject } from "./broadcasts.ts";
import {
  headerBytes,
  isEncodableString,
  MAX_MESSAGE_BYTES,
  recordBytes,
  stringBytes,
  updateBytes,
} from "./codec.ts";
import {
  DEFAULT_SWIM_CONFIG,
  DuplicateNodeIdError,
  incarnation,
  MAX_INCARNATION,
  MAX_INCARNATION_STEP,
  INCARNATION_STEP_PERIODS,
  MembershipConfigError,
  ShardCountMismatchError,
  ticks,
  validateSwimConfig,
} from "./types.ts";

export interface SwimOptions {
  readonly self: MemberMeta;
  readonly rng: Rng;
  readonly config?: Partial<SwimConfig>;
  /** The incarnation to start with; a restarted member refutes older claims anyway. */
  readonly incarnation?: number;
}

/** A datagram for the driver to send to `to` (`host:port`, the receiver's rpcAddr). */
export interface Outgoing {
  readonly to: string;
  readonly message: Message;
}

/** What the driver must do after an input, in order: send `messages`, then report the rest. */
export interface Ready {
  /** Datagrams to send. They may be lost: the protocol tolerates it. */
  readonly messages: readonly Outgoing[];
  /** Membership changes, in the order they happened. */
  readonly events: readonly MemberEvent[];
  /**
   * Refusals on either side of a `total_shards` mismatch, and another live node claiming this
   * one's id; the driver logs them.
   */
  readonly errors: readonly (ShardCountMismatchError | DuplicateNodeIdError)[];
}

interface Suspicion {
  readonly startedAt: Ticks;
  /** Who suspected first; the suspicion is re-announced in its name. */
  readonly origin: MemberId;
  /** When the suspicion was last queued for gossip. */
  announcedAt: Ticks;
  readonly confirmers: Set<MemberId>;
  readonly k: number;
  readonly minTicks: number;
  readonly maxTicks: number;
}

interface Entry {
  meta: MemberMeta;
  state: MemberState;
  incarnation: Incarnation;
  stateChangedAt: Ticks;
  suspicion: Suspicion | null;
  /**
   * The incarnation held when the record's current step period began, and when that was: the
   * record rises no further than MAX_INCARNATION_STEP above stepBase (#tooFarAhead), so a sender
   * walking it up one step a datagram gets one step a period, as the member itself (#refute).
   */
  stepBase: Incarnation;
  stepBaseAt: Ticks;
  /** The RPC address its metadata had before the last change (a duplicate id flips back). */
  formerAddr?: string;
  /** When the RPC address last changed. */
  addrChangedAt?: Ticks;
}

interface Probe {
  readonly seq: number;
  readonly target: MemberId;
  readonly startedAt: Ticks;
  indirectSent: boolean;
  acked: boolean;
}

/** A ping sent on behalf of a ping-req: its ack goes back to `to` under `seq`. */
interface Relay {
  readonly to: string;
  readonly seq: number;
  readonly expiresAt: Ticks;
  readonly target: MemberId;
}

const isLive = (s: MemberState): boolean => s === "alive" || s === "suspect";

/** Ping-reqs relayed at once (#relays): past it, a ping-req is not relayed. */
export const MAX_RELAYS = 256;
/**
 * Probe periods within which a member's address going back to the one it had before is taken
 * for two live nodes sharing its id (#handleAlive); later, it is a member that moved back.
 */
export const DUPLICATE_FLIP_PERIODS = 10;
/** Other addresses claiming this node's id that are counted (#claims). */
export const MAX_CLAIMS = 64;
/** Source addresses introduced recently (#introduced); past it, the oldest is forgotten. */
export const MAX_INTRODUCED = 64;
/**
 * Full-state sends a datagram asks for (a push-pull answer, an introduction, the state sent back
 * after a refutation), in all: STATE_DATAGRAMS_PER_PERIOD datagrams a probe period on average
 * (~87 KB/s at 1 s), bursts of up to STATE_DATAGRAMS_BURST. A 10-byte request used to be answered
 * with up to ~330 KiB each time (2,048 members of long names), at any rate: a reflector.
 */
export const STATE_DATAGRAMS_PER_PERIOD = 64;
export const STATE_DATAGRAMS_BURST = 256;
/** Full-state sends to one address: bursts of STATE_SENDS_PER_SOURCE, one a probe period after. */
export const STATE_SENDS_PER_SOURCE = 2;
/** Addresses whose full-state sends are counted (#stateSources); past it, the oldest is forgotten. */
export const MAX_STATE_SOURCES = 256;

export class Swim {
  readonly #self: MemberMeta;
  readonly #rng: Rng;
  readonly #config: SwimConfig;
  #now: Ticks = ticks(0);
  #incarnation: Incarnation;
  /** Our incarnation when the current step period began (#refute), and when that was. */
  #stepBase: Incarnation;
  #stepBaseAt: Ticks = ticks(0);
  #leaving = false;

  readonly #members = new Map<MemberId, Entry>();
  /** Members other than self that are alive or suspect. */
  #liveOthers = 0;
  readonly #suspects = new Set<MemberId>();
  readonly #tombstones = new Set<MemberId>();
  /**
   * Members whose tombstone was forgotten: their last state and incarnation, the latest
   * maxMembers of them. An `alive` at or below that incarnation is old news (a recorded datagram
   * sent again: a seal authenticates but has no freshness), not a member come back.
   */
  readonly #forgotten = new Map<MemberId, { state: MemberState; incarnation: Incarnation }>();
  readonly #broadcasts = new BroadcastQueue();

  #probeOrder: MemberId[] = [];
  #probeIndex = 0;
  #probe: Probe | null = null;
  #nextProbeAt: Ticks;
  #nextGossipAt: Ticks;
  #nextPushPullAt: Ticks;
  #nextReconnectAt: Ticks;
  #seq = 0;
  /** Probes asked for by ping-reqs, awaiting the target's ack (at most MAX_RELAYS). */
  readonly #relays = new Map<number, Relay>();
  #pushPullReplies = 0;
  /**
   * Source addresses recently sent a push-pull because their sender was not known as live, and
   * until when (at most MAX_INTRODUCED, the oldest forgotten). By address, not by the `from` a
   * datagram claims: 64 made-up ids from one host filled the table and switched introductions off.
   */
  readonly #introduced = new Map<string, Ticks>();
  /** Full-state datagrams that may be sent now for a datagram's asking (may go below 0). */
  #stateTokens: number = STATE_DATAGRAMS_BURST;
  #stateTokensAt: Ticks = ticks(0);
  /** Per source address: full-state sends it may ask for now, and when last counted. */
  readonly #stateSources = new Map<string, { tokens: number; at: Ticks }>();
  /**
   * While a datagram is handled: what its sender believes that we know to be outdated (a
   * suspicion or death of a member, this one included, that has since refuted it). The sender
   * gets our newer `alive` back directly, since the refutation's own retransmissions may be spent.
   */
  #corrections = new Map<MemberId, AliveUpdate>();

  #messages: Outgoing[] = [];
  #events: MemberEvent[] = [];
  #errors: (ShardCountMismatchError | DuplicateNodeIdError)[] = [];
  /**
   * Per other address claiming this node's id: how often this node refuted it. A second refute
   * means the claimant answered the first (a live duplicate), reported once (#errors).
   */
  readonly #claims = new Map<string, number>();
  /** Updates naming a new member ignored because the table was full (SwimConfig.maxMembers). */
  #refusedMembers = 0;
  /** Ids a full table makes room for (reserve()): the cluster's members. */
  #reserved: ReadonlySet<string> = new Set();
  /** Other ids found claimed by two live nodes, reported once each while remembered. */
  readonly #duplicates = new Set<MemberId>();

  constructor(options: SwimOptions) {
    const config = { ...DEFAULT_SWIM_CONFIG, ...options.config };
    validateSwimConfig(config);
    validateMeta(options.self);
    this.#self = options.self;
    this.#rng = options.rng;
    this.#config = config;
    this.#incarnation = incarnation(options.incarnation ?? 0);
    this.#stepBase = this.#incarnation;
    // Random phases keep members from probing and exchanging state in lockstep.
    this.#nextProbeAt = ticks(1 + this.#rng.int(config.probeIntervalTicks));
    this.#nextGossipAt = ticks(1 + this.#rng.int(config.gossipIntervalTicks));
    this.#nextPushPullAt = ticks(1 + this.#rng.int(config.pushPullIntervalTicks));
    this.#nextReconnectAt = ticks(1 + this.#rng.int(config.reconnectIntervalTicks));
  }

  get self(): MemberMeta {
    return this.#self;
  }
  get incarnation(): Incarnation {
    return this.#incarnation;
  }
  get now(): Ticks {
    return this.#now;
  }
  get isLeaving(): boolean {
    return this.#leaving;
  }
  /** Push-pull replies received so far: a joining driver waits for this to grow. */
  get pushPullReplies(): number {
    return this.#pushPullReplies;
  }
  /**
   * Updates naming a new member ignored so far because maxMembers were remembered already: a
   * host flooding the gossip port with made-up members (the driver reports when it grows).
   */
  get refusedMembers(): number {
    return this.#refusedMembers;
  }
  /**
   * The ids of the cluster's members, as the node's meta state records them: when the table is
   * full (a flood of made-up members), an update naming one of them takes the place of a member
   * that is not one (the longest dead, else suspect, else alive), so a flood cannot keep a real
   * member out of this member's gossip. Replaces the ids given before.
   */
  reserve(ids: ReadonlySet<string>): void {
    this.#reserved = ids;
  }

  /** Live members (alive or suspect), this one included. */
  get liveCount(): number {
    return this.#liveOthers + (this.#leaving ? 0 : 1);
  }

  /** This member first, then every remembered member in insertion order. */
  members(): MemberView[] {
    const self: MemberView = {
      meta: this.#self,
      state: this.#leaving ? "left" : "alive",
      incarnation: this.#incarnation,
    };
    const out = [self];
    for (const e of this.#members.values()) {
      out.push({ meta: e.meta, state: e.state, incarnation: e.incarnation });
    }
    return out;
  }

  member(id: MemberId): MemberView | undefined {
    const e = this.#members.get(id);
    return e === undefined
      ? undefined
      : { meta: e.meta, state: e.state, incarnation: e.incarnation };
  }

  /** Drains what the driver must do. */
  takeReady(): Ready {
    const ready = { messages: this.#messages, events: this.#events, errors: this.#errors };
    this.#messages = [];
    this.#events = [];
    this.#errors = [];
    return ready;
  }

  /** Starts a full-state exchange with every seed address (other than this member's own). */
  join(seedAddrs: readonly string[]): void {
    if (this.#leaving) return;
    for (const addr of seedAddrs) {
      if (addr !== this.#self.rpcAddr) this.#sendPushPull(addr, { reply: false, join: true });
    }
  }

  /** Starts a full-state exchange with `addr` (the driver's periodic retry of its seeds). */
  pushPull(addr: string): void {
    if (!this.#leaving && addr !== this.#self.rpcAddr) {
      this.#sendPushPull(addr, { reply: false, join: false });
    }
  }

  /**
   * Announces a graceful leave to every live member and stops probing. The driver sends the
   * resulting datagrams, then closes; this member no longer answers anything.
   */
  leave(): void {
    if (this.#leaving) return;
    this.#leaving = true;
    const left: Update = { kind: "left", id: this.#self.id, incarnation: this.#incarnation };
    for (const e of this.#members.values()) {
      if (!isLive(e.state)) continue;
      this.#send(
        e.meta.rpcAddr,
        {
          type: "ping",
          ...this.#header(),
          seq: this.#nextSeq(),
          target: e.meta.id,
          gossip: [left],
        },
        e.meta.id,
      );
    }
  }

  /** Advances logical time by one tick. */
  tick(): void {
    this.#now = ticks(this.#now + 1);
    for (const [seq, relay] of this.#relays) {
      if (relay.expiresAt <= this.#now) this.#relays.delete(seq);
    }
    for (const [addr, until] of this.#introduced) {
      if (until <= this.#now) this.#introduced.delete(addr);
    }
    if (this.#leaving) return;
    this.#maybeProbe();
    this.#maybeGossip();
    this.#maybeTimeOutSuspicions();
    this.#maybeForgetTombstones();
    this.#maybeExchangeState();
  }

  /** Handles one decoded datagram that arrived from `fromAddr`. */
  handle(fromAddr: string, m: Message): void {
    if (this.#leaving || m.from === this.#self.id) return;
    this.#corrections.clear();
    this.#dispatch(fromAddr, m);
    // A ping's ack already carried the corrections; a push-pull answer carries full state.
    if (this.#corrections.size > 0 && m.type !== "ping" && m.type !== "push-pull") {
      const gossip = fitting(
        [...this.#corrections.values()],
        MAX_MESSAGE_BYTES - headerBytes(this.#self.id) - 1,
      );
      this.#send(fromAddr, { type: "gossip", ...this.#header(), gossip }, m.from);
    }
    this.#corrections.clear();
  }

  /**
   * A member we do not know as live is talking to us: we missed its join (or its refutation).
   * A full-state exchange fixes both views at once instead of waiting for anti-entropy. At most
   * once per source address every five probe periods, within the full-state budget (#reflectState).
   */
  #maybeIntroduce(fromAddr: string, from: MemberId): void {
    const e = this.#members.get(from);
    if ((e !== undefined && isLive(e.state)) || this.#introduced.has(fromAddr)) return;
    // Full: the oldest goes (a flood of addresses must not switch introductions off).
    if (this.#introduced.size >= MAX_INTRODUCED) {
      const oldest = this.#introduced.keys().next();
      if (oldest.done !== true) this.#introduced.delete(oldest.value);
    }
    this.#introduced.set(fromAddr, ticks(this.#now + 5 * this.#config.probeIntervalTicks));
    this.#reflectState(fromAddr, { reply: false, join: false });
  }

  /**
   * Sends the full state to `to` because a datagram from there asked for it (an answer, an
   * introduction), if the budgets allow: STATE_SENDS_PER_SOURCE to one address, then one a probe
   * period, and STATE_DATAGRAMS_PER_PERIOD datagrams a period in all. Past them nothing is sent;
   * the asker tries again (a join with backoff, anti-entropy at its next round), and what its
   * request carried was merged all the same.
   */
  #reflectState(to: string, flags: { reply: boolean; join: boolean }): void {
    const period = this.#config.probeIntervalTicks;
    this.#stateTokens = Math.min(
      STATE_DATAGRAMS_BURST,
      this.#stateTokens + ((this.#now - this.#stateTokensAt) * STATE_DATAGRAMS_PER_PERIOD) / period,
    );
    this.#stateTokensAt = this.#now;
    let source = this.#stateSources.get(to);
    if (source === undefined) {
      if (this.#stateSources.size >= MAX_STATE_SOURCES) {
        const oldest = this.#stateSources.keys().next();
        if (oldest.done !== true) this.#stateSources.delete(oldest.value);
      }
      source = { tokens: STATE_SENDS_PER_SOURCE, at: this.#now };
    } else {
      source.tokens = Math.min(
        STATE_SENDS_PER_SOURCE,
        source.tokens + (this.#now - source.at) / period,
      );
      source.at = this.#now;
    }
    // Re-inserted at the end: the map is in the order addresses last asked.
    this.#stateSources.delete(to);
    this.#stateSources.set(to, source);
    if (source.tokens < 1 || this.#stateTokens < 1) return;
    source.tokens -= 1;
    // The whole state goes, however many datagrams: the budget is paid back over time.
    this.#stateTokens -= this.#sendPushPull(to, flags);
  }

  #aliveSelf(): AliveUpdate {
    return { kind: "alive", incarnation: this.#incarnation, meta: this.#self };
  }

  #dispatch(fromAddr: string, m: Message): void {
    if (m.type === "refuse") {
      // A refusal naming this member's own total_shards refuses nothing it sent: forged, or a
      // bug; it used to end a joining node's join (and the node) like a real one.
      if (m.totalShards !== this.#self.totalShards) {
        this.#errors.push(this.#mismatch(m.totalShards, m.from, fromAddr, true));
      }
      return;
    }
    if (m.totalShards !== this.#self.totalShards) {
      this.#errors.push(this.#mismatch(m.totalShards, m.from, fromAddr));
      if (m.type === "ping" || (m.type === "push-pull" && !m.reply)) {
        this.#send(fromAddr, { type: "refuse", ...this.#header(), reason: "shard-count-mismatch" });
      }
      return;
    }
    if (m.type !== "push-pull") this.#maybeIntroduce(fromAddr, m.from);
    switch (m.type) {
      case "ping": {
        this.#handleGossip(m.gossip);
        if (m.target !== this.#self.id) return; // meant for a previous owner of this address
        const ack: Ack = { type: "ack", ...this.#header(), seq: m.seq, gossip: [] };
        const room = MAX_MESSAGE_BYTES - messageBytesWithoutGossip(ack);
        this.#send(
          fromAddr,
          { ...ack, gossip: fitting([...this.#corrections.values()], room) },
          m.from,
        );
        return;
      }
      case "ping-req": {
        this.#handleGossip(m.gossip);
        // Each relay is a ping sent for someone else: a flood of ping-reqs must not make this
        // member keep (and send) one for every one of them.
        if (this.#relays.size >= MAX_RELAYS) return;
        const targetAddr = this.#relayAddr(m.target, m.targetAddr);
        if (targetAddr === null) return;
        const seq = this.#nextSeq();
        const expiresAt = ticks(this.#now + this.#config.probeIntervalTicks);
        this.#relays.set(seq, { to: fromAddr, seq: m.seq, expiresAt, target: m.target });
        // Pass a suspicion of the target on with the ping, so it can refute (buddy rule).
        const buddy = m.gossip.filter((u) => u.kind === "suspect" && u.id === m.target);
        this.#send(
          targetAddr,
          { type: "ping", ...this.#header(), seq, target: m.target, gossip: buddy.slice(0, 1) },
          m.target,
        );
        return;
      }
      case "ack": {
        this.#handleGossip(m.gossip);
        if (this.#probe !== null && this.#probe.seq === m.seq) {
          this.#probe.acked = true;
          return;
        }
        const relay = this.#relays.get(m.seq);
        if (relay !== undefined) {
          this.#relays.delete(m.seq);
          // Our record of the target rides along: if the requester suspects it at an older
          // incarnation, this clears the suspicion now.
          const target = this.#members.get(relay.target);
          const gossip: Update[] =
            target?.state === "alive"
              ? [{ kind: "alive", incarnation: target.incarnation, meta: target.meta }]
              : [];
          this.#send(relay.to, { type: "ack", ...this.#header(), seq: relay.seq, gossip });
        }
        return;
      }
      case "gossip":
        this.#handleGossip(m.gossip);
        return;
      case "push-pull":
        this.#handlePushPull(fromAddr, m);
        return;
    }
  }

  /**
   * Where to ping `target` for a ping-req naming `targetAddr`: there if it is an IP literal, else
   * (a host name) the address the table holds for the target, else nowhere. A host name in a
   * datagram is a lookup the driver would start for anyone who sends one: a few made-up names
   * held every thread of libuv's pool (which file I/O shares) for minutes behind a silent DNS.
   */
  #relayAddr(target: MemberId, targetAddr: string): string | null {
    const parsed = parseHostPort(targetAddr);
    if (parsed === null) return null;
    if (isIpLiteral(parsed.host)) return targetAddr;
    return this.#members.get(target)?.meta.rpcAddr ?? null;
  }

  // ---- probing ------------------------------------------------------------------------------

  #maybeProbe(): void {
    const probe = this.#probe;
    if (
      probe !== null &&
      !probe.acked &&
      !probe.indirectSent &&
      this.#now - probe.startedAt >= this.#config.ackTimeoutTicks
    ) {
      probe.indirectSent = true;
      this.#sendIndirectProbes(probe);
    }
    if (this.#now < this.#nextProbeAt) return;
    this.#nextProbeAt = ticks(this.#now + this.#config.probeIntervalTicks);
    if (probe !== null && !probe.acked) {
      const e = this.#members.get(probe.target);
      if (e !== undefined && isLive(e.state)) {
        this.#handleSuspect({
          kind: "suspect",
          id: probe.target,
          incarnation: e.incarnation,
          from: this.#self.id,
        });
      }
    }
    this.#probe = null;
    this.#startProbe();
  }

  #startProbe(): void {
    const target = this.#nextProbeTarget();
    if (target === null) return;
    const seq = this.#nextSeq();
    this.#probe = {
      seq,
      target: target.meta.id,
      startedAt: this.#now,
      indirectSent: false,
      acked: false,
    };
    // Buddy rule: a suspect member hears of its suspicion from whoever probes it.
    const buddy = this.#buddyFor(target);
    this.#send(
      target.meta.rpcAddr,
      { type: "ping", ...this.#header(), seq, target: target.meta.id, gossip: buddy },
      target.meta.id,
    );
  }

  /** The suspicion of `target` to hand it with a probe, if this member suspects it. */
  #buddyFor(target: Entry): Update[] {
    if (target.state !== "suspect") return [];
    const id = target.meta.id;
    return [{ kind: "suspect", id, incarnation: target.incarnation, from: this.#self.id }];
  }

  /** Randomized round-robin: every live member once per round, in a fresh random order. */
  #nextProbeTarget(): Entry | null {
    for (let attempts = 0; attempts <= this.#probeOrder.length + 1; attempts++) {
      if (this.#probeIndex >= this.#probeOrder.length) {
        this.#probeOrder = [];
        for (const e of this.#members.values())
          if (isLive(e.state)) this.#probeOrder.push(e.meta.id);
        shuffle(this.#probeOrder, this.#rng);
        this.#probeIndex = 0;
        if (this.#probeOrder.length === 0) return null;
      }
      const id = this.#probeOrder[this.#probeIndex++];
      const e = id === undefined ? undefined : this.#members.get(id);
      if (e !== undefined && isLive(e.state)) return e;
    }
    return null;
  }

  /**
   * A member that (re)appears is probed in this round too, at a random later position, unless
   * its turn in this round is still to come. Added at each revival, a member declared dead and
   * alive again in datagram after datagram took a turn each time: the order grew with every
   * datagram, and the other members waited behind thousands of its turns, a crash of theirs
   * unseen by this member.
   */
  #addToProbeOrder(id: MemberId): void {
    if (this.#probeOrder.indexOf(id, this.#probeIndex) !== -1) return;
    const from = this.#probeIndex;
    const at = from + this.#rng.int(this.#probeOrder.length - from + 1);
    this.#probeOrder.splice(at, 0, id);
  }

  #sendIndirectProbes(probe: Probe): void {
    const target = this.#members.get(probe.target);
    if (target === undefined) return;
    const helpers: Entry[] = [];
    for (const e of this.#members.values()) {
      if (e.state === "alive" && e.meta.id !== probe.target) helpers.push(e);
    }
    const buddy = this.#buddyFor(target);
    for (const helper of pickRandom(helpers, this.#config.indirectChecks, this.#rng)) {
      this.#send(
        helper.meta.rpcAddr,
        {
          type: "ping-req",
          ...this.#header(),
          seq: probe.seq,
          target: probe.target,
          targetAddr: target.meta.rpcAddr,
          gossip: buddy,
        },
        helper.meta.id,
      );
    }
  }

  /** Spreads queued updates faster than probes alone would (memberlist's gossip timer). */
  #maybeGossip(): void {
    if (this.#now < this.#nextGossipAt) return;
    this.#nextGossipAt = ticks(this.#now + this.#config.gossipIntervalTicks);
    if (this.#broadcasts.size === 0) return;
    const peers: Entry[] = [];
    for (const e of this.#members.values()) if (isLive(e.state)) peers.push(e);
    for (const peer of pickRandom(peers, this.#config.gossipFanout, this.#rng)) {
      this.#send(
        peer.meta.rpcAddr,
        { type: "gossip", ...this.#header(), gossip: [] },
        peer.meta.id,
      );
    }
  }

  // ---- suspicion, death, tombstones -----------------------------------------------------------

  #suspicionFor(from: MemberId): Suspicion {
    const n = this.liveCount;
    const period = this.#config.probeIntervalTicks;
    const minTicks = Math.ceil(this.#config.suspicionMult * Math.max(1, Math.log10(n)) * period);
    const expected = this.#config.suspicionMult - 2;
    return {
      startedAt: this.#now,
      origin: from,
      announcedAt: this.#now,
      confirmers: new Set([from]),
      k: n - 2 < expected ? 0 : expected,
      minTicks,
      maxTicks: this.#config.suspicionMaxMult * minTicks,
    };
  }

  /**
   * Declares dead the suspects whose time is up. A suspicion still open after two probe periods
   * is gossiped again: whoever has since seen the member refute answers with a correction, which
   * repairs an observer that missed every retransmission of the refutation.
   */
  #maybeTimeOutSuspicions(): void {
    for (const id of [...this.#suspects]) {
      const e = this.#members.get(id);
      if (e === undefined || e.suspicion === null) continue;
      const s = e.suspicion;
      if (this.#now - s.startedAt >= suspicionTimeout(s)) {
        this.#handleDead({ kind: "dead", id, incarnation: e.incarnation, from: this.#self.id });
      } else if (this.#now - s.announcedAt >= 2 * this.#config.probeIntervalTicks) {
        s.announcedAt = this.#now;
        this.#broadcasts.enqueue({
          kind: "suspect",
          id,
          incarnation: e.incarnation,
          from: s.origin,
        });
      }
    }
  }

  #maybeForgetTombstones(): void {
    for (const id of [...this.#tombstones]) {
      const e = this.#members.get(id);
      if (e !== undefined && this.#now - e.stateChangedAt < this.#config.tombstoneTicks) continue;
      this.#tombstones.delete(id);
      this.#members.delete(id);
      // Its incarnation is remembered: a recorded datagram announcing it alive, sent again now
      // (sealed gossip included), must not make it a live member again.
      if (e !== undefined) this.#rememberForgotten(id, e);
      // Its last update goes too (as in #makeRoomFor): the queue holds at most one update per
      // member remembered, even on a node that has had no live peer to send them to.
      this.#broadcasts.forget(id);
      // And whether it was reported as a duplicate: a member met again is new, and the set
      // stays within the table (made-up ids, flipped and forgotten, no longer pile up in it).
      this.#duplicates.delete(id);
    }
  }

  /** Keeps `e`'s last state and incarnation, the oldest of maxMembers dropped. */
  #rememberForgotten(id: MemberId, e: Entry): void {
    this.#forgotten.delete(id);
    if (this.#forgotten.size >= this.#config.maxMembers) {
      const oldest = this.#forgotten.keys().next();
      if (oldest.done !== true) this.#forgotten.delete(oldest.value);
    }
    this.#forgotten.set(id, { state: e.state, incarnation: e.incarnation });
  }

  // ---- push-pull ----------------------------------------------------------------------------

  #maybeExchangeState(): void {
    if (this.#now >= this.#nextPushPullAt) {
      this.#nextPushPullAt = ticks(this.#now + this.#config.pushPullIntervalTicks);
      const peer = this.#randomMember((e) => isLive(e.state));
      if (peer !== null) this.#sendPushPull(peer.meta.rpcAddr, { reply: false, join: false });
    }
    if (this.#now >= this.#nextReconnectAt) {
      this.#nextReconnectAt = ticks(this.#now + this.#config.reconnectIntervalTicks);
      const peer = this.#randomMember((e) => e.state === "dead");
      if (peer !== null) this.#sendPushPull(peer.meta.rpcAddr, { reply: false, join: false });
    }
  }

  #randomMember(accept: (e: Entry) => boolean): Entry | null {
    const candidates: Entry[] = [];
    for (const e of this.#members.values()) if (accept(e)) candidates.push(e);
    return candidates.length === 0 ? null : (candidates[this.#rng.int(candidates.length)] ?? null);
  }

  #handlePushPull(fromAddr: string, m: PushPull): void {
    const before = this.#incarnation;
    for (const r of m.records) this.#mergeRecord(r, m.from);
    const refuted = this.#incarnation !== before;
    if (m.reply) {
      this.#pushPullReplies += 1;
      // The sender still believes something false about us: tell it our new incarnation now,
      // or a healed partition would wait for gossip that cannot cross it.
      if (refuted) this.#reflectState(fromAddr, { reply: false, join: false });
    } else if (m.first) {
      this.#reflectState(fromAddr, { reply: true, join: m.join });
    }
  }

  #mergeRecord(r: MemberRecord, sender: MemberId): void {
    const id = r.meta.id;
    switch (r.state) {
      case "alive":
        this.#handleAlive({ kind: "alive", incarnation: r.incarnation, meta: r.meta });
        return;
      case "suspect":
      case "dead":
        // A record says what the sender believes, not that it probed: no confirmation.
        this.#handleSuspect(
          { kind: "suspect", id, incarnation: r.incarnation, from: sender },
          false,
        );
        return;
      case "left":
        this.#handleLeft({ kind: "left", id, incarnation: r.incarnation });
        return;
    }
  }

  /** Sends the full state to `to`; returns the number of datagrams. */
  #sendPushPull(to: string, flags: { reply: boolean; join: boolean }): number {
    const records: MemberRecord[] = [
      { meta: this.#self, state: "alive", incarnation: this.#incarnation },
    ];
    for (const e of this.#members.values()) {
      records.push({ meta: e.meta, state: e.state, incarnation: e.incarnation });
    }
    const budget = MAX_MESSAGE_BYTES - headerBytes(this.#self.id) - 2;
    let chunk: MemberRecord[] = [];
    let used = 0;
    let first = true;
    let datagrams = 0;
    const flush = (): void => {
      this.#send(to, { type: "push-pull", ...this.#header(), ...flags, first, records: chunk });
      first = false;
      chunk = [];
      used = 0;
      datagrams += 1;
    };
    for (const r of records) {
      const bytes = recordBytes(r);
      if (chunk.length > 0 && (used + bytes > budget || chunk.length === 255)) flush();
      chunk.push(r);
      used += bytes;
    }
    flush();
    return datagrams;
  }

  // ---- updates --------------------------------------------------------------------------------

  #handleGossip(gossip: readonly Update[]): void {
    for (const u of gossip) {
      switch (u.kind) {
        case "alive":
          this.#handleAlive(u);
          break;
        case "suspect":
          this.#handleSuspect(u);
          break;
        case "dead":
          this.#handleDead(u);
          break;
        case "left":
          this.#handleLeft(u);
          break;
      }
    }
  }

  #handleAlive(u: AliveUpdate): void {
    const id = u.meta.id;
    if (id === this.#self.id) {
      if (
        u.incarnation > this.#incarnation ||
        (u.incarnation === this.#incarnation && !sameMeta(u.meta, this.#self))
      ) {
        if (u.meta.rpcAddr !== this.#self.rpcAddr) this.#noticeClaim(u.meta.rpcAddr);
        this.#refute(u.incarnation);
      }
      return;
    }
    if (u.meta.totalShards !== this.#self.totalShards) return;
    const e = this.#members.get(id);
    if (e === undefined) {
      if (this.#members.size >= this.#config.maxMembers && !this.#makeRoomFor(id)) {
        this.#refusedMembers++;
        return;
      }
      const last = this.#forgotten.get(id);
      this.#forgotten.delete(id);
      if (last !== undefined && u.incarnation <= last.incarnation) {
        // Its tombstone comes back instead (no event): pushed-pulled to whoever sent it, a live
        // member of that name (a new life at 0, or one across a partition healed late) hears
        // of it and outbids it, as it would have the tombstone's first time.
        this.#members.set(id, {
          meta: u.meta,
          state: last.state,
          incarnation: last.incarnation,
          stateChangedAt: this.#now,
          suspicion: null,
          stepBase: last.incarnation,
          stepBaseAt: this.#now,
        });
        this.#tombstones.add(id);
        return;
      }
      // A first sighting rises a step at most, like any record: from 0, or from the incarnation
      // it was forgotten at. One forged alive(m@2^32 − 1) to a node that had not heard of m yet
      // (one just started) made it keep m at the top for good, where m could never outbid it.
      // Taken at the step, an honest member further ahead (one a forger walked up, or that
      // refuted for days) is still learnt, and its record climbs a step a period (below).
      const base = last?.incarnation ?? incarnation(0);
      const top = Math.min(base + MAX_INCARNATION_STEP, MAX_INCARNATION);
      if (u.incarnation > top) u = { ...u, incarnation: incarnation(top) };
      this.#members.set(id, {
        meta: u.meta,
        state: "alive",
        incarnation: u.incarnation,
        stateChangedAt: this.#now,
        suspicion: null,
        stepBase: base,
        stepBaseAt: this.#now,
      });
      this.#liveOthers += 1;
      this.#addToProbeOrder(id);
      this.#broadcasts.enqueue(u);
      this.#emit("joined", id);
      return;
    }
    if (u.incarnation <= e.incarnation) return;
    if (this.#tooFarAhead(u.incarnation, e)) {
      // The same member where it was, further ahead than a step (this record lags: a first
      // sighting taken at a step, refutations missed): taken at the step, so the record catches
      // up a step a period. At another address, ignored: that would be a step more than the one
      // a datagram may move a record by.
      const top = Math.min(e.stepBase + MAX_INCARNATION_STEP, MAX_INCARNATION);
      if (!sameMeta(u.meta, e.meta) || top <= e.incarnation) return;
      u = { ...u, incarnation: incarnation(top) };
    }
    const previous = e.state;
    const metaChanged = !sameMeta(u.meta, e.meta);
    if (u.meta.rpcAddr !== e.meta.rpcAddr) {
      // Back to the address it had before the last change, within DUPLICATE_FLIP_PERIODS of
      // that change: two live nodes share this id, each outbidding the other as soon as it
      // hears of it. A node that moved can come back to an address later (a pod given its
      // former IP at a restart, a member moved back after maintenance): not a duplicate, and
      // reported as one at any distance, it had every member log an ERROR telling to stop one.
      if (
        u.meta.rpcAddr === e.formerAddr &&
        e.addrChangedAt !== undefined &&
        this.#now - e.addrChangedAt < DUPLICATE_FLIP_PERIODS * this.#config.probeIntervalTicks &&
        !this.#duplicates.has(id)
      ) {
        this.#duplicates.add(id);
        this.#errors.push(new DuplicateNodeIdError(id, null, e.meta.rpcAddr, u.meta.rpcAddr));
      }
      e.formerAddr = e.meta.rpcAddr;
      e.addrChangedAt = this.#now;
    }
    e.meta = u.meta;
    e.incarnation = u.incarnation;
    this.#setState(id, e, "alive");
    this.#broadcasts.enqueue(u);
    if (previous !== "alive") {
      if (!isLive(previous)) this.#addToProbeOrder(id);
      this.#emit("alive", id);
    } else if (metaChanged) {
      this.#emit("updated", id);
    }
  }

  /**
   * `confirms`: whether `u.from` vouches for the suspicion (it probed, or it is gossip of such a
   * verdict). Lifeguard counts only independent confirmations; a push-pull record is not one.
   */
  #handleSuspect(u: SuspectUpdate, confirms = true): void {
    if (u.id === this.#self.id) {
      this.#refute(u.incarnation);
      return;
    }
    const e = this.#members.get(u.id);
    if (e === undefined || this.#tooFarAhead(u.incarnation, e)) return;
    this.#maybeCorrect(e, u.incarnation);
    if (u.incarnation < e.incarnation || !isLive(e.state)) return;
    if (e.state === "suspect" && e.suspicion !== null && u.incarnation === e.incarnation) {
      const s = e.suspicion;
      // The suspecter and k confirmations bring the timeout to its minimum: more count for
      // nothing, and each was a made-up `from` kept for the suspicion's life (unbounded).
      if (!confirms || s.confirmers.size > s.k || s.confirmers.has(u.from)) return;
      s.confirmers.add(u.from);
      this.#broadcasts.enqueue(u);
      return;
    }
    e.incarnation = u.incarnation;
    const wasSuspect = e.state === "suspect";
    this.#setState(u.id, e, "suspect");
    e.suspicion = this.#suspicionFor(u.from);
    this.#broadcasts.enqueue(u);
    if (!wasSuspect) this.#emit("suspect", u.id);
  }

  #handleDead(u: DeadUpdate): void {
    if (u.id === this.#self.id) {
      this.#refute(u.incarnation);
      return;
    }
    const e = this.#members.get(u.id);
    if (e === undefined || this.#tooFarAhead(u.incarnation, e)) return;
    this.#maybeCorrect(e, u.incarnation);
    if (u.incarnation < e.incarnation || !isLive(e.state)) return;
    e.incarnation = u.incarnation;
    this.#setState(u.id, e, "dead");
    this.#broadcasts.enqueue(u);
    this.#emit("dead", u.id);
  }

  #handleLeft(u: LeftUpdate): void {
    if (u.id === this.#self.id) {
      this.#refute(u.incarnation);
      return;
    }
    const e = this.#members.get(u.id);
    if (e === undefined || u.incarnation < e.incarnation || !isLive(e.state)) return;
    if (this.#tooFarAhead(u.incarnation, e)) return;
    e.incarnation = u.incarnation;
    this.#setState(u.id, e, "left");
    this.#broadcasts.enqueue(u);
    this.#emit("left", u.id);
  }

  /**
   * Forgets a member that is not reserved to make room for `id` when `id` is (reserve()): the
   * dead or left one longest in that state, else the suspect, else the alive one. False when
   * `id` is not reserved or every member is.
   */
  #makeRoomFor(id: MemberId): boolean {
    if (!this.#reserved.has(id)) return false;
    const rank = (e: Entry): number => (!isLive(e.state) ? 0 : e.state === "suspect" ? 1 : 2);
    let victim: Entry | null = null;
    for (const e of this.#members.values()) {
      if (this.#reserved.has(e.meta.id)) continue;
      if (
        victim === null ||
        rank(e) < rank(victim) ||
        (rank(e) === rank(victim) && e.stateChangedAt < victim.stateChangedAt)
      )
        victim = e;
    }
    if (victim === null) return false;
    const gone = victim.meta.id;
    if (isLive(victim.state)) {
      this.#setState(gone, victim, "dead");
      this.#emit("dead", gone);
    }
    this.#tombstones.delete(gone);
    this.#members.delete(gone);
    this.#broadcasts.forget(gone);
    this.#duplicates.delete(gone);
    return true;
  }

  /**
   * Whether an update about `e` names an incarnation more than MAX_INCARNATION_STEP above the one
   * held when the record's step period began (a new period begins, from the one held now, every
   * INCARNATION_STEP_PERIODS probe periods): the member itself never rises faster (#refute), so
   * no honest peer heard it. Bounding each update against the incarnation held now let a sender
   * walk the record to 2^32 − 1 a step a datagram (~550 datagrams), then declare it dead there.
   */
  #tooFarAhead(heard: Incarnation, e: Entry): boolean {
    if (this.#now - e.stepBaseAt >= INCARNATION_STEP_PERIODS * this.#config.probeIntervalTicks) {
      e.stepBase = e.incarnation;
      e.stepBaseAt = this.#now;
    }
    return heard - e.stepBase > MAX_INCARNATION_STEP;
  }

  /** A claim against `e` at incarnation `heard` is outdated if we know `e` alive since. */
  #maybeCorrect(e: Entry, heard: Incarnation): void {
    if (e.state === "alive" && heard < e.incarnation) {
      this.#corrections.set(e.meta.id, { kind: "alive", incarnation: e.incarnation, meta: e.meta });
    }
  }

  /**
   * Someone said something about us that is false: outbid it. A claim about an older incarnation
   * was already refuted; its sender only needs to hear our current one (see handle()).
   * We rise by at most MAX_INCARNATION_STEP every INCARNATION_STEP_PERIODS probe periods: a claim
   * further above names an incarnation no peer heard from us (a forgery, or a previous life's far
   * back), and following it to 2^32 − 1 would leave us nothing to outbid the next claim with, nor
   * would observers, who ignore updates that far ahead, take our refutation. A true claim (a
   * previous life's) is outbid a step a period, each time we hear it again.
   */
  #refute(heard: Incarnation): void {
    if (heard < this.#incarnation) {
      this.#corrections.set(this.#self.id, this.#aliveSelf());
      return;
    }
    if (
      this.#now - this.#stepBaseAt >=
      INCARNATION_STEP_PERIODS * this.#config.probeIntervalTicks
    ) {
      this.#stepBase = this.#incarnation;
      this.#stepBaseAt = this.#now;
    }
    const next = Math.min(
      Math.max(this.#incarnation, heard) + 1,
      this.#stepBase + MAX_INCARNATION_STEP,
      MAX_INCARNATION,
    );
    if (next <= this.#incarnation) return; // this period's step is spent: heard again, later
    this.#incarnation = incarnation(next);
    this.#broadcasts.enqueue(this.#aliveSelf());
  }

  /** Another address claims this node's id at an incarnation this node must outbid. */
  #noticeClaim(addr: string): void {
    const refuted = (this.#claims.get(addr) ?? 0) + 1;
    // Bounded like #introduced: past it, a new address is refuted but not counted.
    if (refuted === 1 && this.#claims.size >= MAX_CLAIMS) return;
    this.#claims.set(addr, refuted);
    if (refuted === 2) {
      this.#errors.push(
        new DuplicateNodeIdError(this.#self.id, "this one", this.#self.rpcAddr, addr),
      );
    }
  }

  #setState(id: MemberId, e: Entry, state: MemberState): void {
    if (isLive(e.state) !== isLive(state)) this.#liveOthers += isLive(state) ? 1 : -1;
    e.state = state;
    e.stateChangedAt = this.#now;
    if (state !== "suspect") e.suspicion = null;
    if (state === "suspect") this.#suspects.add(id);
    else this.#suspects.delete(id);
    if (state === "dead" || state === "left") this.#tombstones.add(id);
    else this.#tombstones.delete(id);
  }

  // ---- output ---------------------------------------------------------------------------------

  #header(): { from: MemberId; totalShards: number } {
    return { from: this.#self.id, totalShards: this.#self.totalShards };
  }

  #nextSeq(): number {
    this.#seq = (this.#seq + 1) >>> 0;
    return this.#seq;
  }

  /**
   * Queues a datagram, filling the room left in it with piggybacked updates. `receiver` is the
   * member the datagram goes to, if known: telling a member that it is alive is a wasted send
   * (suspicions about it are not: they make it refute).
   */
  #send(to: string, m: Message, receiver: MemberId | null = null): void {
    if (m.type === "ping" || m.type === "ping-req" || m.type === "ack" || m.type === "gossip") {
      const carried = m.gossip.reduce((sum, u) => sum + updateBytes(u), 0);
      const present = new Set(m.gossip.map(updateSubject));
      const budget = MAX_MESSAGE_BYTES - messageBytesWithoutGossip(m) - carried;
      const limit = this.#config.retransmitMult * Math.ceil(Math.log10(this.liveCount + 1));
      const extra = this.#broadcasts.take(
        budget,
        limit,
        (u) => present.has(updateSubject(u)) || (u.kind === "alive" && u.meta.id === receiver),
      );
      if (extra.length > 0) m = { ...m, gossip: [...m.gossip, ...extra] };
      else if (m.type === "gossip" && m.gossip.length === 0) return;
    }
    this.#messages.push({ to, message: m });
  }

  #emit(kind: MemberEventKind, id: MemberId): void {
    const e = this.#members.get(id);
    if (e === undefined) return;
    this.#events.push({
      kind,
      member: { meta: e.meta, state: e.state, incarnation: e.incarnation },
    });
  }

  #mismatch(
    theirs: number,
    from: MemberId,
    addr: string,
    refusal = false,
  ): ShardCountMismatchError {
    return new ShardCountMismatchError(
      this.#self.totalShards,
      theirs,
      `${from} at ${addr}`,
      addr,
      refusal,
    );
  }
}

function suspicionTimeout(s: Suspicion): number {
  const confirmations = s.confirmers.size - 1;
  if (s.k < 1) return s.minTicks;
  const frac = Math.log(confirmations + 1) / Math.log(s.k + 1);
  return Math.max(s.minTicks, Math.floor(s.maxTicks - (s.maxTicks - s.minTicks) * frac));
}

function sameMeta(a: MemberMeta, b: MemberMeta): boolean {
  return (
    a.id === b.id &&
    a.rpcAddr === b.rpcAddr &&
    a.httpAddr === b.httpAddr &&
    a.totalShards === b.totalShards
  );
}

/** The longest prefix of `updates` that fits in `budget` bytes. */
function fitting(updates: readonly Update[], budget: number): Update[] {
  const out: Update[] = [];
  let left = budget;
  for (const u of updates) {
    const bytes = updateBytes(u);
    if (bytes > left || out.length === 255) break;
    out.push(u);
    left -= bytes;
  }
  return out;
}

/** Up to `k` distinct items chosen uniformly (a partial Fisher–Yates; reorders `items`). */
function pickRandom<T>(items: T[], k: number, rng: Rng): T[] {
  const n = Math.min(k, items.length);
  for (let i = 0; i < n; i++) {
    const j = i + rng.int(items.length - i);
    const a = items[i];
    const b = items[j];
    if (a === undefined || b === undefined) break;
    items[i] = b;
    items[j] = a;
  }
  return items.slice(0, n);
}

/** Encoded size of a probe message without its gossip items (the gossip count byte included). */
function messageBytesWithoutGossip(m: Message): number {
  const header = headerBytes(m.from);
  switch (m.type) {
    case "ping":
      return header + 4 + stringBytes(m.target) + 1;
    case "ping-req":
      return header + 4 + stringBytes(m.target) + stringBytes(m.targetAddr) + 1;
    case "ack":
      return header + 4 + 1;
    case "gossip":
      return header + 1;
    case "push-pull":
    case "refuse":
      return MAX_MESSAGE_BYTES;
  }
}

/** Throws MembershipConfigError unless `meta` can be announced. */
export function validateMeta(meta: MemberMeta): void {
  if (!isEncodableString(meta.id)) {
    throw new MembershipConfigError(`node id must be 1..255 bytes of UTF-8, got "${meta.id}"`);
  }
  for (const [key, addr] of [
    ["advertise_rpc_addr", meta.rpcAddr],
    ["advertise_http_addr", meta.httpAddr],
  ] as const) {
    if (!isEncodableString(addr)) {
      throw new MembershipConfigError(`${key} must be 1..255 bytes, got "${addr}"`);
    }
    const parsed = parseHostPort(addr);
    if (parsed === null) {
      throw new MembershipConfigError(
        `${key} must be <host>:<port>, the host an IP address or a host name, got "${addr}"`,
      );
    }
    if (isWildcardHost(parsed.host)) {
      throw new MembershipConfigError(
        `${key} must be routable, got "${addr}": other nodes cannot reach a wildcard address; ` +
          `set ${key} to this node's reachable host`,
      );
    }
  }
  if (
    !Number.isSafeInteger(meta.totalShards) ||
    meta.totalShards < 1 ||
    meta.totalShards > 0xffff_ffff
  ) {
    throw new MembershipConfigError(
      `cluster.total_shards must be a positive integer, got ${meta.totalShards}`,
    );
  }
}
