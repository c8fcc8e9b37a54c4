/**
 * One shard on this node: its Raft group (RawNode over the WAL), its state machine (LSM), and
 * the client operations waiting on it. Inputs arriving while a Ready is being handled wait in
 * the inbox; the driver feeds them at the start of the next round.
 */
import { CairnError } from "../common/errors.ts";
import { IntMap, clearArray } from "../common/index.ts";
import type {
  ConfChange,
  Entry,
  Message,
  NodeId,
  ReadState,
  Ready,
  Role,
  Term,
  TimeoutNowMessage,
} from "../raft/index.ts";
import { nodeOfReplica } from "../cluster/index.ts";
import {
  confAfter,
  decodeConfChange,
  nodeId,
  NotLeaderError,
  ProposalDroppedError,
  type RawNode,
} from "../raft/index.ts";
import { isMetaEntry } from "./commands.ts";
import {
  type ApplyOutcome,
  type KvStateMachine,
  type MetaApplyOutcome,
  WAIT,
} from "./state-machine.ts";
import { releaseSnapshot } from "./snapshot-pins.ts";
import type { WalRaftStorage } from "./wal-storage.ts";
import type { LostLog } from "./refill.ts";
import {
  NotProposedError,
  ProposalLostError,
  ProposalAbandonedError,
  ProposalOvertakenError,
  type ClientCall,
  ReadCancelledError,
  ReadPastDeadlineError,
  RequestTimeoutError,
} from "./request-errors.ts";

/** A group's configuration: its voters' and learners' replica ids (ShardInfo has them too). */
export interface GroupConfig {
  readonly voters: readonly string[];
  readonly learners: readonly string[];
}

/** Ticks delivered to a group in one round, however many the timer counted meanwhile. */
const MAX_TICKS_PER_ROUND = 2;

/** What a proposal resolves with: a KV command's outcome, or a meta command's. */
export type ProposalOutcome = ApplyOutcome | MetaApplyOutcome;

interface PendingProposal {
  readonly term: Term;
  readonly resolve: (outcome: ProposalOutcome) => void;
  readonly reject: (err: unknown) => void;
  /** When the request arrived (the driver's clock), for its deadline. */
  readonly since: number;
}

interface PendingRead {
  /** Called with the read's index once the state machine has applied it. */
  readonly resolve: (index: number) => void;
  readonly reject: (err: unknown) => void;
  /** Set once the leader confirmed the read: serve once applied reaches it. */
  index: number | null;
  readonly since: number;
  /**
   * Confirmed by another node's leader (a follower's read): the entries up to its index must
   * still arrive from that leader, so the read's deadline still applies.
   */
  readonly remote: boolean;
  /**
   * Its call's deadline (the driver's clock; Infinity: none): its client has gone then, and the
   * read stops waiting whatever it waits for (expire, drainInbox), its share of the request
   * budget given back. A read changes nothing, so dropping it changes nothing either.
   */
  readonly until: number;
  /** Its client's call (null: none): cancelled, the read stops waiting as at `until`. */
  readonly call: ClientCall | null;
}

type InboxItem = (
  | {
      readonly kind: "propose";
      readonly data: Uint8Array;
      readonly done: PendingProposalCallbacks;
      /** Its call's deadline (the driver's clock; Infinity: none): not proposed from then on. */
      readonly until: number;
    }
  | { readonly kind: "read"; readonly id: number; readonly read: PendingRead }
  | {
      readonly kind: "conf";
      readonly cc: ConfChange;
      /** The configuration the change was chosen against (MultiRaft.changeMembership). */
      readonly expected: GroupConfig | undefined;
      readonly done: { resolve: () => void; reject: (err: unknown) => void };
    }
  | {
      readonly kind: "transfer";
      readonly to: NodeId;
      readonly done: { resolve: () => void; reject: (err: unknown) => void };
    }
) & { readonly since: number };

/**
 * What the transport learnt about a peer, for the leader's view of it; what the failure
 * detector suspects of the group's leader (RawNode.reportLeaderDown), or saw of a member's node
 * coming back (RawNode.reportMemberUp); or a follower's read that
 * waits for its replica to apply the leader's commit index (RawNode.sendCommit; `to` null: every
 * follower).
 */
export type PeerReport =
  | { readonly kind: "unreachable"; readonly to: NodeId }
  | { readonly kind: "snapshot"; readonly to: NodeId; readonly ok: boolean }
  | { readonly kind: "leader-down" }
  | { readonly kind: "member-up"; readonly to: NodeId }
  | { readonly kind: "commit-wanted"; readonly to: NodeId | null };

interface PendingProposalCallbacks {
  readonly resolve: (outcome: ProposalOutcome) => void;
  readonly reject: (err: unknown) => void;
}

/**
 * The term of a new group's founding entries (its voters, committed by every initial voter
 * alike). Every initial voter founds the group having voted, in this term, for its first-ranked
 * replica, which leads the term without an election (ShardReplica.leadsFoundingTerm); no one
 * else can. The first election, if one is needed, is for the term after.
 */
export const FOUNDING_TERM = 1;

export class ShardReplica {
  readonly id: number;
  readonly raw: RawNode;
  readonly sm: KvStateMachine;
  readonly storage: WalRaftStorage;
  /** Campaign as soon as the configuration is applied (single-voter groups start at once). */
  campaignWhenReady: boolean;
  /** Ticks to deliver at the next round (at most MAX_TICKS_PER_ROUND of them count). */
  ticks = 0;
  /** In the driver's list for its next round (MultiRaft#mark). */
  marked = false;
  /** Ticked by the driver: awake, or asleep with requests waiting (MultiRaft #trackSleep). */
  ticking = false;
  /** In the driver's list of ticking groups (which drops those that stopped at its next tick). */
  listedTicking = false;
  /**
   * Taken out of the driver's table for removal (multi-raft-removal.ts): never marked, ticked
   * or collected into a round again (unless put back, the removal not confirmed).
   */
  removed = false;
  /**
   * The commit index found at open: until the state machine has applied it, the replica holds
   * state older than writes it may already have acknowledged, so it neither campaigns nor
   * serves (see MultiRaft#readBarrier).
   */
  readonly replayTo: number;
  /**
   * The apply of this shard's last Ready, or the install of the snapshot it carries, while it
   * runs: no new Ready until it is done.
   */
  applying: Promise<void> | null = null;
  /**
   * A Ready whose snapshot the engine holds now (installed beside the rounds, RoundLoop
   * #installBeside): the next round stages, persists and applies it, asking no new one.
   */
  installed: Ready | null = null;
  /**
   * While this replica is refilled from its peers after its shard's directory was lost
   * (refill.ts): the log it lost. It serves no serializable read meanwhile.
   */
  refill: LostLog | null = null;
  /** When this replica, refilling with no leader, last asked the others to wake theirs. */
  askedToRefillAt = Number.NEGATIVE_INFINITY;
  leaderChanges = 0;
  /*
   * The queues below are drained by swapping in their spare and emptying the drained array
   * after use (clearArray, which keeps its backing store), never by dropping it for a new one.
   * A group's arrays live from one round of it to the next, long enough to reach the old
   * generation, and an old array dropped while it still held a request kept that request (its
   * promise, its callbacks, its decoded message) alive through every young collection until
   * the next full one: promoted with everything it reached.
   */
  #inbox: InboxItem[] = [];
  #spareInbox: InboxItem[] = [];
  /** Messages from peers, delivered at the next round whatever the group's state. */
  #steps: Message[] = [];
  #spareSteps: Message[] = [];
  /** Transport outcomes for the leader's progress tracking, delivered at the next round. */
  #reports: PeerReport[] = [];
  #spareReports: PeerReport[] = [];
  // IntMap, not Map: a Map's churn promotes what its entries reach (src/common/int-map.ts).
  readonly #proposals = new IntMap<PendingProposal>();
  readonly #reads = new IntMap<PendingRead>();
  readonly #confProposals = new Map<
    number,
    {
      readonly term: Term;
      readonly since: number;
      resolve: () => void;
      reject: (err: unknown) => void;
    }
  >();
  #lastLead: NodeId | null = null;
  /** Told of every change of the leader this replica knows (reads waiting on a remote leader). */
  readonly #leadWatchers = new Set<(lead: NodeId | null) => void>();
  /** Ids of reads confirmed locally (negative: never a ReadIndex context). */
  #localReads = 0;
  #role: Role = "follower";

  constructor(
    id: number,
    raw: RawNode,
    sm: KvStateMachine,
    storage: WalRaftStorage,
    campaignWhenReady: boolean,
    replayTo: number,
  ) {
    this.id = id;
    this.replayTo = replayTo;
    this.raw = raw;
    this.sm = sm;
    this.storage = storage;
    this.campaignWhenReady = campaignWhenReady;
  }

  get role(): Role {
    return this.#role;
  }

  get lead(): NodeId | null {
    return this.#lastLead;
  }

  /** Whether everything committed before the shard opened has been applied. */
  isReplayed(): boolean {
    return this.sm.appliedIndex >= this.replayTo;
  }

  /**
   * Once the replay is applied: a new group's founding leader leads its founding term
   * (`leadsFoundingTerm`); a single-voter group campaigns at once (it alone decides), and so does
   * a new group this node created for a client request (`campaignEagerly`, when its founding
   * leader is not alive), rather than make that request wait out an election timeout; a new group
   * created here for another replica to lead asks it to (`askToCampaign`, the message returned).
   * Other groups elect on their timers.
   */
  maybeCampaign(): TimeoutNowMessage | null {
    if (!this.campaignWhenReady || !this.isReplayed()) return null;
    this.campaignWhenReady = false;
    if (this.leadsFoundingTerm) {
      this.leadsFoundingTerm = false;
      // Still the founding term's follower that voted for itself, with no leader heard of: no
      // message of a later term (an election that did not wait for it) has reached it.
      const raw = this.raw;
      if (raw.term === FOUNDING_TERM && raw.lead === null && raw.vote === raw.id) {
        raw.leadWithoutElection();
        return null;
      }
    }
    if (this.raw.isSoleVoter() || this.campaignEagerly) this.raw.campaign();
    const to = this.askToCampaign;
    this.askToCampaign = null;
    // Raft's leadership-transfer message, from a replica that does not lead. It opens the group
    // at `to`: the founding leader there leads the term as it founds it, and drops the message
    // (it leads, or will have). Any other replica it makes start an election now rather than at
    // its election timeout, which is safe whenever it starts. Sent in the founding term only (a
    // member past it has seen an election and drops the message as stale), and not once a
    // leader or an election reached this replica.
    if (to === null || this.raw.term !== FOUNDING_TERM || this.raw.lead !== null) return null;
    return { type: "timeout-now", from: this.raw.id, to, term: this.raw.term };
  }

  /** Set for a new multi-voter group opened here for a client request (see maybeCampaign). */
  campaignEagerly = false;

  /**
   * Set when this replica founds a new multi-voter group as its designated first leader (every
   * founding voter's hard state holds its vote in FOUNDING_TERM): once the founding entries are
   * applied — after the round that made them durable — it leads that term without an election
   * (Raft.leadWithoutElection). Never set for a group with state here already: a replica that
   * restarts after founding is the term's follower.
   */
  leadsFoundingTerm = false;

  /**
   * Set instead of campaignEagerly when another replica should lead the new group
   * (MultiRaftOptions.firstCampaigner): maybeCampaign returns the message that asks it to.
   */
  askToCampaign: NodeId | null = null;
  /**
   * This replica was removed here (replica GC, multi-raft-removal.ts) and created again (a move
   * back onto this node): the last entry (index, term) of the log its removal deleted, while
   * its log is still empty; null otherwise. It is created under the same replica id, its term
   * and vote kept but its log empty, and an empty log grants any candidate a vote: a replica
   * the group removed while it was cut off, not knowing it, still counted this one a voter, won
   * with 2 of its old 3 and overwrote committed entries (the driver simulation, seed 1302779 on
   * five nodes: an acknowledged delete lost). So until its group's leader has given it an entry
   * or a snapshot, it grants a vote or pre-vote only to a candidate whose log is at least as up
   * to date as the one it lost, as it would have with that log (the rule of a member that lost
   * its log, RaftConfig.recoveringUntil). Refusing every vote instead left a group without a
   * leader for good when the survivors had not learnt that this replica's removal committed
   * and counted it among their voters (seed 1600014 on four nodes). The WAL's drop records that
   * entry (Wal.droppedLog), so this holds across restarts of this node, before the replica is
   * created again or after, until its log gets an entry or a snapshot (when it lived only in
   * the driver's memory, a replica created again after a restart refused every vote: 1600014's
   * deadlock again). Not known (a drop written by a build that did not record it):
   * MAX_SAFE_INTEGER, every vote refused. (CockroachDB and TiKV give a replica created again a
   * new replica id instead; ours are `node@incarnation`.)
   */
  recreated: { readonly index: number; readonly term: number } | null = null;

  /**
   * Set while the first entries of a group created here (its voters) are appended to the WAL
   * but not yet known durable: the group's next round syncs whatever it holds, so nothing the
   * group does (a message, an apply) can rest on them before they are on disk.
   */
  foundingUnsynced = false;

  /**
   * Resolves once the state machine has applied `index` (a read confirmed at that index). With
   * `since` (a read confirmed by another node's leader), the wait has the request deadline;
   * `until` is its call's deadline and `call` its call (PendingRead).
   */
  waitApplied(
    index: number,
    since?: number,
    until = Infinity,
    call: ClientCall | null = null,
  ): Promise<void> {
    if (index <= this.sm.appliedIndex) return Promise.resolve();
    return new Promise((resolve, reject) =>
      this.#reads.set(--this.#localReads, {
        resolve: () => resolve(),
        reject,
        index,
        since: since ?? Number.NaN,
        remote: since !== undefined,
        until,
        call,
      }),
    );
  }

  hasInput(): boolean {
    return (
      this.#inbox.length > 0 || this.ticks > 0 || this.#steps.length > 0 || this.#reports.length > 0
    );
  }

  /** A transport outcome about a peer, or a failure report about the leader (PeerReport). */
  enqueueReport(report: PeerReport): void {
    this.#reports.push(report);
  }

  enqueueStep(m: Message): void {
    if (m.type === "timeout-now" && m.term === FOUNDING_TERM && !this.isReplayed()) {
      // Another replica created this group for a request and asks this one to lead it
      // (maybeCampaign), before this replica applied the founding configuration (the Raft core
      // would ignore it then): it campaigns once that is applied.
      this.campaignEagerly = true;
      return;
    }
    this.#steps.push(m);
  }

  /**
   * A proposal, arrived at `since` (the driver's clock); `until` is its call's deadline on the
   * same clock (Infinity: none), past which it is never proposed (drainInbox).
   */
  enqueuePropose(data: Uint8Array, since: number, until = Infinity): Promise<ProposalOutcome> {
    return new Promise((resolve, reject) =>
      this.#inbox.push({
        kind: "propose",
        data,
        done: { resolve, reject },
        since,
        until,
      }),
    );
  }

  /**
   * A ReadIndex read; resolves with its index once the state machine has applied it. `until` is
   * its call's deadline on the driver's clock (Infinity: none), when it stops waiting, as it
   * does once `call` is cancelled.
   */
  enqueueRead(
    id: number,
    since: number,
    until = Infinity,
    call: ClientCall | null = null,
  ): Promise<number> {
    return new Promise((resolve, reject) =>
      this.#inbox.push({
        kind: "read",
        id,
        read: { resolve, reject, index: null, since, remote: false, until, call },
        since,
      }),
    );
  }

  /** A membership change of this group; resolves once the change is applied here. */
  enqueueConfChange(cc: ConfChange, since: number, expected?: GroupConfig): Promise<void> {
    return new Promise((resolve, reject) =>
      this.#inbox.push({ kind: "conf", cc, expected, done: { resolve, reject }, since }),
    );
  }

  /** Whether the group's configuration, as this replica applied it, is `c`. */
  #configIs(c: GroupConfig): boolean {
    const { voters, learners } = this.raw;
    return (
      c.voters.length === voters.size &&
      c.learners.length === learners.size &&
      c.voters.every((v) => voters.has(v as NodeId)) &&
      c.learners.every((l) => learners.has(l as NodeId))
    );
  }

  enqueueTransfer(to: NodeId, since: number): Promise<void> {
    return new Promise((resolve, reject) =>
      this.#inbox.push({
        kind: "transfer",
        to,
        done: { resolve, reject },
        since,
      }),
    );
  }

  /** Feeds queued inputs to the Raft group (outside ready/advance). */
  drainInbox(now: number, maxWaitMs: number): void {
    // Ticks that piled up while the event loop or the disk was slow are dropped, not delivered
    // in a burst: a burst would expire election timeouts although the leader's heartbeats are
    // only late. Dropping ticks stretches time, which Raft tolerates (no clock-based leases).
    for (let n = Math.min(this.ticks, MAX_TICKS_PER_ROUND); n > 0; n--) this.raw.tick();
    this.ticks = 0;
    const steps = this.#steps;
    this.#steps = this.#spareSteps;
    this.#spareSteps = steps;
    try {
      for (const m of steps) {
        const lost = this.recreated;
        if (lost !== null && (m.type === "vote" || m.type === "prevote")) {
          if (this.storage.lastIndex() > 0) this.recreated = null;
          else if (m.lastTerm < lost.term || (m.lastTerm === lost.term && m.lastIndex < lost.index))
            continue;
        }
        if (m.type !== "snapshot") {
          this.raw.step(m);
          continue;
        }
        const before = this.raw.pendingSnapshot();
        this.raw.step(m);
        const pending = this.raw.pendingSnapshot();
        // A snapshot the core ignored (stale, or leaving this member out) is not installed:
        // what its stream holds (the received file) goes now. So does one pending that a newer
        // one replaced (two leaders' snapshots in one round): its file stayed behind.
        if (pending !== m.snapshot) releaseSnapshot(m);
        if (before !== null && before !== pending) before.stream?.release();
      }
    } finally {
      clearArray(steps);
    }
    const reports = this.#reports;
    this.#reports = this.#spareReports;
    this.#spareReports = reports;
    for (const r of reports) {
      switch (r.kind) {
        case "unreachable":
          this.raw.reportUnreachable(r.to);
          break;
        case "snapshot":
          this.raw.reportSnapshot(r.to, r.ok);
          break;
        case "leader-down":
          this.raw.reportLeaderDown();
          break;
        case "member-up":
          this.raw.reportMemberUp(r.to);
          break;
        case "commit-wanted":
          this.raw.sendCommit(r.to);
          break;
      }
    }
    clearArray(reports);
    const inbox = this.#inbox;
    this.#inbox = this.#spareInbox;
    this.#spareInbox = inbox;
    const electing = this.raw.role !== "leader" && this.raw.lead === null;
    // A leader handing the group over refuses proposals until the transfer ends (Raft's rule:
    // the transferee must catch up). They wait for it here instead: when it succeeds this node
    // follows and refuses them with NotLeaderError naming the new leader (never appended, so the
    // API forwards them there), and when it is abandoned (an election timeout) they are
    // proposed. Moving a leader is then invisible to clients, not a burst of UNAVAILABLE.
    for (const item of inbox) {
      // A write whose client gave up (its call's deadline passed while it waited for a round,
      // an election or a transfer) is never proposed: applied after its client was told
      // DEADLINE_EXCEEDED, a retry applied it twice. Never proposed, it is known not applied.
      if (item.kind === "propose" && now >= item.until) {
        item.done.reject(new NotProposedError(now - item.since));
        continue;
      }
      // A read whose client gave up (or cancelled its call) is not asked for any more.
      if (item.kind === "read" && (now >= item.read.until || item.read.call?.cancelled === true)) {
        item.read.reject(
          now >= item.read.until
            ? new ReadPastDeadlineError(now - item.since)
            : new ReadCancelledError(),
        );
        continue;
      }
      // (A transfer may start at an item of this inbox: asked for each item.)
      const transferring = this.raw.role === "leader" && this.raw.leadTransferee !== null;
      if (electing || (transferring && (item.kind === "propose" || item.kind === "conf"))) {
        // An election or a transfer is under way: wait for it (bounded) rather than fail at once.
        if (now - item.since < maxWaitMs) {
          this.#inbox.push(item);
          continue;
        }
        const err = electing
          ? new NotLeaderError(null)
          : new ProposalDroppedError(
              `leadership transfer to ${this.raw.leadTransferee} still in progress`,
            );
        (item.kind === "read" ? item.read : item.done).reject(err);
        continue;
      }
      try {
        switch (item.kind) {
          case "propose": {
            const { index, term } = this.raw.propose(item.data);
            // A proposal of an earlier term at this index was truncated away with the log
            // suffix this leader replaced: it can never apply.
            this.#proposals.get(index)?.reject(new ProposalLostError(index));
            this.#proposals.delete(index);
            this.#proposals.set(index, {
              term,
              resolve: item.done.resolve,
              reject: item.done.reject,
              since: item.since,
            });
            break;
          }
          case "read":
            this.raw.readIndex(encodeReadId(item.id));
            this.#reads.set(item.id, item.read);
            break;
          case "conf": {
            // Chosen against a configuration the group has left since (a conf change applied
            // between the choice and now): what it would do is no longer what was meant.
            if (item.expected !== undefined && !this.#configIs(item.expected))
              throw new ProposalDroppedError(
                "the group's configuration changed since the change was chosen",
              );
            const { index, term } = this.raw.proposeConfChange(item.cc);
            this.#confProposals.get(index)?.reject(new ProposalLostError(index));
            this.#confProposals.delete(index);
            this.#confProposals.set(index, { term, since: item.since, ...item.done });
            break;
          }
          case "transfer":
            this.raw.transferLeader(item.to);
            item.done.resolve();
            break;
        }
      } catch (err) {
        (item.kind === "read" ? item.read : item.done).reject(toNodeLeader(err));
      }
    }
    clearArray(inbox);
  }

  /** When expire() next scans the requests (clock ms). */
  #nextExpiry = 0;

  /**
   * Fails the requests that have waited `timeoutMs` or more since they arrived. A leader cut off
   * from its quorum keeps its proposals pending (they may still commit if it heals), and a
   * follower's ReadIndex request to an unreachable leader is never answered: without a deadline
   * their callers would wait forever. Reads already confirmed and only waiting for the apply (a
   * local one has no deadline: the apply always comes) are left alone, until their call's
   * deadline (PendingRead.until), or their call cancelled: a read whose client has gone stops
   * waiting whatever for (a cancelled one at this scan: up to 1/64 of a timeout late).
   */
  expire(now: number, timeoutMs: number): void {
    // Scanned at most 64 times a timeout (a request fails at most 1/64 of it late), not every
    // round: a busy group runs hundreds of rounds a second.
    if (now < this.#nextExpiry) return;
    this.#nextExpiry = now + timeoutMs / 64;
    const late = now - timeoutMs;
    if (this.#proposals.size > 0) {
      for (const [index, p] of this.#proposals.entries()) {
        if (p.since > late) continue;
        this.#proposals.delete(index);
        p.reject(new RequestTimeoutError("write", now - p.since));
      }
    }
    for (const [index, c] of this.#confProposals) {
      if (c.since > late) break;
      this.#confProposals.delete(index);
      c.reject(new RequestTimeoutError("membership change", now - c.since));
    }
    if (this.#reads.size > 0) {
      for (const [id, r] of this.#reads.entries()) {
        if (now >= r.until || r.call?.cancelled === true) {
          // (A read index answered for it later finds no read: confirmReads skips it.)
          this.#reads.delete(id);
          r.reject(
            now >= r.until ? new ReadPastDeadlineError(now - r.since) : new ReadCancelledError(),
          );
          continue;
        }
        if (r.since > late) continue;
        if (r.index !== null && !r.remote) continue;
        this.#reads.delete(id);
        r.reject(new RequestTimeoutError("read", now - r.since));
      }
    }
  }

  /** Notes role and leader changes from a Ready; returns whether the leader changed. */
  /** Calls `watcher` with the new leader at every change this replica observes; returns unwatch. */
  watchLead(watcher: (lead: NodeId | null) => void): () => void {
    this.#leadWatchers.add(watcher);
    return () => this.#leadWatchers.delete(watcher);
  }

  observeSoftState(rd: Ready): boolean {
    if (rd.softState === null) return false;
    const wasLeader = this.#role === "leader";
    this.#role = rd.softState.role;
    const changed = rd.softState.lead !== this.#lastLead;
    this.#lastLead = rd.softState.lead;
    if (changed && rd.softState.lead !== null) this.leaderChanges++;
    if (changed) for (const w of [...this.#leadWatchers]) w(rd.softState.lead);
    if (wasLeader && this.#role !== "leader") {
      // Reads not yet confirmed will never be: the new leader must serve them.
      for (const [id, r] of this.#reads.entries()) {
        if (r.index === null) {
          r.reject(
            new NotLeaderError(
              rd.softState.lead === null ? null : nodeId(nodeOfReplica(rd.softState.lead)),
            ),
          );
          this.#reads.delete(id);
        }
      }
    }
    return changed;
  }

  /**
   * Applies committed entries to the state machine, answering the proposals they settle. The
   * common case (KV entries, an engine with no back-pressure) is done before returning, with no
   * promise per entry: null. Otherwise from the first entry that must wait on, in order: the
   * promise of the rest.
   */
  applyCommitted(entries: readonly Entry[]): Promise<void> | null {
    for (let i = 0; i < entries.length; i++) {
      if (!this.#applyNow(entries[i] as Entry)) return this.#applyFrom(entries, i);
    }
    this.#serveReads();
    return null;
  }

  /**
   * Applies `e` before returning and answers its proposal when it need not wait (a KV or empty
   * entry the engine takes at once); false, with nothing done, when it must be awaited.
   */
  #applyNow(e: Entry): boolean {
    if (e.type === "conf-change") return false;
    let outcome: ApplyOutcome | null;
    if (e.data.length === 0) {
      if (!this.sm.skipNow(e)) return false;
      outcome = null;
    } else {
      const now = this.sm.applyCommandNow(e);
      if (now === WAIT) return false;
      outcome = now;
    }
    this.#settle(e, outcome);
    return true;
  }

  /**
   * applyCommitted from `entries[from]` on (which must wait): each entry that must wait awaited,
   * the others done at once as applyCommitted does. A new replica's first batch holds the
   * group's membership changes and then every KV entry of its log; awaiting each of those was
   * the largest item of a receiving node's apply during a rebalance (bench:rebalance).
   */
  async #applyFrom(entries: readonly Entry[], from: number): Promise<void> {
    for (let i = from; i < entries.length; i++) {
      const e = entries[i] as Entry;
      if (i > from && this.#applyNow(e)) continue;
      let outcome: ProposalOutcome | null = null;
      if (e.type === "conf-change") {
        // The core applies the change at advance(); record the resulting configuration now.
        // Not one the engine holds (an engine ahead of its log, re-sent the entries it has
        // applied: RaftConfig.stateApplied): the configuration includes it already.
        if (e.index > this.sm.appliedIndex) {
          const conf = confAfter(this.storage.conf, decodeConfChange(e.data));
          this.storage.conf = conf;
          await this.sm.applyConf(e, conf);
        }
      } else if (e.data.length === 0) {
        await this.sm.skip(e);
      } else {
        outcome = isMetaEntry(e.data) ? await this.sm.applyMeta(e) : await this.sm.applyCommand(e);
      }
      this.#settle(e, outcome);
    }
    this.#serveReads();
  }

  /** Answers the proposal waiting on entry `e`, if any, with what applying it did. */
  #settle(e: Entry, outcome: ProposalOutcome | null): void {
    if (this.#confProposals.size > 0) this.#settleConf(e);
    const p = this.#proposals.get(e.index);
    if (p === undefined) return;
    this.#proposals.delete(e.index);
    if (p.term !== e.term) p.reject(new ProposalLostError(e.index));
    else if (outcome !== null) p.resolve(outcome);
    else
      p.reject(new CairnError("CAIRN_ERR_INTERNAL", `entry ${e.index} applied without an outcome`));
  }

  /**
   * Answers the membership change waiting on entry `e`'s index, if any: applied when `e` is that
   * change (its term), else lost. Whatever kind of entry took the index: a change proposed by a
   * leader that lost its term before it committed is most often replaced by a KV write or the
   * next leader's empty entry, and then only this tells its caller (else it waited out its
   * deadline, and the group's replica steps with it, src/node/replicas.ts: one under way a
   * group; driver simulation seed 3277 on five nodes, a move stalled for that long).
   */
  #settleConf(e: Entry): void {
    const pending = this.#confProposals.get(e.index);
    if (pending === undefined) return;
    this.#confProposals.delete(e.index);
    if (pending.term === e.term) pending.resolve();
    else pending.reject(new ProposalLostError(e.index));
  }

  /**
   * A snapshot from the leader replaced this replica's log through `index` (installed by the
   * round, multi-raft-snapshots.ts): the entries there never apply here one by one, so nothing
   * else answers the proposals waiting on them. Whether each committed is not known here: they
   * fail at once with an unknown outcome rather than at their deadline. A membership change left
   * so, proposed by a leader cut off before it committed, held the group's replica steps
   * (src/node/replicas.ts: one under way a group) until its deadline while the move's old
   * leader refused the shard's reads (driver simulation seed 45904 on five nodes). Reads
   * confirmed at an index the snapshot reaches are served.
   */
  overtakenBySnapshot(index: number): void {
    if (this.#proposals.size > 0) {
      for (const [i, p] of this.#proposals.entries()) {
        if (i > index) continue;
        this.#proposals.delete(i);
        p.reject(new ProposalOvertakenError("write", i, index));
      }
    }
    for (const [i, c] of this.#confProposals) {
      if (i > index) continue;
      this.#confProposals.delete(i);
      c.reject(new ProposalOvertakenError("membership change", i, index));
    }
    this.#serveReads();
  }

  /** ReadIndex answers: each read may be served once the state machine reaches its index. */
  confirmReads(rd: Ready): void {
    // Indexed: a for-of over the (almost always empty) list allocated an iterator and its
    // result at every Ready, ~0.5 KB a replicated Put over three nodes.
    const states = rd.readStates;
    for (let i = 0; i < states.length; i++) {
      const rs = states[i] as ReadState;
      const r = this.#reads.get(decodeReadId(rs.context));
      if (r !== undefined) r.index = rs.index;
    }
    this.#serveReads();
  }

  #serveReads(): void {
    if (this.#reads.size === 0) return;
    for (const [id, r] of this.#reads.entries()) {
      if (r.index !== null && r.index <= this.sm.appliedIndex) {
        this.#reads.delete(id);
        r.resolve(r.index);
      }
    }
  }

  /**
   * Fails everything waiting on this shard (shutdown, a fatal error, or its replica removed),
   * and releases the snapshots queued for its core: no round will take them, and their files
   * stayed behind until the next start.
   */
  failAll(err: unknown): void {
    for (const m of this.#steps) releaseSnapshot(m);
    clearArray(this.#steps);
    for (const item of this.#inbox) (item.kind === "read" ? item.read : item.done).reject(err);
    this.#inbox.length = 0;
    // A write in the log may still commit under the next leader (another replica holds it):
    // its outcome is unknown, not err's (a retryable refusal says it was not applied).
    for (const [index, p] of this.#proposals.entries())
      p.reject(new ProposalAbandonedError(index, err));
    this.#proposals.clear();
    for (const r of this.#reads.values()) r.reject(err);
    this.#reads.clear();
    for (const c of this.#confProposals.values()) c.reject(err);
    this.#confProposals.clear();
  }

  /**
   * Requests waiting on this shard, membership changes included: a sleeping group keeps ticking
   * while any waits, so that its deadline fails it (expire). A membership change proposed by a
   * leader that then lost its term, whose index the log under the next leaders has not reached,
   * is answered by nothing else: uncounted, it hung for as long as the group slept, and the
   * group's replica steps (src/node/replicas.ts: one under way a group) with it (driver
   * simulation with moves, seed 1156 on four nodes).
   */
  get pendingOperations(): number {
    return this.#inbox.length + this.#proposals.size + this.#reads.size + this.#confProposals.size;
  }
}

/**
 * A read's id as the Raft core's read context: 8 bytes, a big-endian float64. Copied through a
 * scratch view byte by byte: an 8-byte Uint8Array keeps its bytes inside the object until its
 * first `.buffer` moves them to an ArrayBuffer of their own, an allocation per read (see
 * keyFromBytes).
 */
const readIdScratch = new DataView(new ArrayBuffer(8));

function encodeReadId(id: number): Uint8Array {
  readIdScratch.setFloat64(0, id);
  const out = new Uint8Array(8);
  for (let i = 0; i < 8; i++) out[i] = readIdScratch.getUint8(i);
  return out;
}

function decodeReadId(ctx: Uint8Array): number {
  for (let i = 0; i < 8; i++) readIdScratch.setUint8(i, ctx[i] ?? 0);
  return readIdScratch.getFloat64(0);
}

/**
 * The Raft core names a leader by its replica id; requests are told its node (where the API
 * forwards them).
 */
function toNodeLeader(err: unknown): unknown {
  if (!(err instanceof NotLeaderError) || err.leader === null) return err;
  const node = nodeOfReplica(err.leader);
  return node === err.leader ? err : new NotLeaderError(nodeId(node));
}
