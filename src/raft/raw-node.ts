/**
 * RawNode: the driver's handle on one Raft group. Inputs are method calls; outputs come out of
 * ready() as a Ready, which the driver must handle in the order its fields are documented, and
 * then acknowledge with advance(). Between ready() and advance() no other input is allowed.
 */
import { RaftInvariantError } from "./errors.ts";
import type { Message } from "./message.ts";
import type { Progress } from "./progress.ts";
import type { RaftConfig } from "./raft.ts";
import { NO_MESSAGES, NO_READ_STATES, Raft } from "./raft.ts";
import type {
  ConfChange,
  ConfState,
  Entry,
  HardState,
  LogIndex,
  NodeId,
  ReadState,
  Role,
  Snapshot,
  Term,
} from "./types.ts";

export interface SoftState {
  readonly lead: NodeId | null;
  readonly role: Role;
}

/** A Ready's entries when there are none (shared: never written). */
const NO_ENTRIES: readonly Entry[] = Object.freeze([]);

/**
 * Everything the driver must do, in this order:
 *
 * 1. Persist, atomically and durably (fsync) before anything else: `snapshot` (if any) first,
 *    then `entries` (which replace any stored entries at the same and later indexes), then
 *    `hardState` (if any).
 * 2. Send `messages`. Never before step 1 has completed: a message may acknowledge or vote on
 *    the strength of exactly that state. Report the outcome of every `snapshot` message with
 *    reportSnapshot() (the leader sends nothing else to that member until it hears), and a
 *    member found unreachable with reportUnreachable().
 * 3. Install `snapshot` into the state machine (if any), then apply `committedEntries` in order
 *    (calling nothing else on the RawNode for conf-change entries: advance() applies them).
 * 4. Serve `readStates`: each read may be answered once the state machine has applied its index.
 * 5. Call advance().
 */
export interface Ready {
  /** Changed term, vote or commit to persist; null if unchanged since the last Ready. */
  readonly hardState: HardState | null;
  /** New log entries to persist. */
  readonly entries: readonly Entry[];
  /** A snapshot received from the leader, to persist and install; null if none. */
  readonly snapshot: Snapshot | null;
  /** Messages to send once the above is durable. */
  readonly messages: readonly Message[];
  /** Committed entries to apply to the state machine, in order. */
  readonly committedEntries: readonly Entry[];
  /** Confirmed ReadIndex requests. */
  readonly readStates: readonly ReadState[];
  /** Changed leader or role (volatile, for logs and routing); null if unchanged. */
  readonly softState: SoftState | null;
}

/** A group's state as status() reports it, without the leader's per-member progress. */
export interface BasicStatus {
  readonly id: NodeId;
  readonly role: Role;
  readonly lead: NodeId | null;
  readonly term: Term;
  readonly vote: NodeId | null;
  readonly commit: LogIndex;
  readonly applied: LogIndex;
  readonly lastIndex: LogIndex;
  readonly firstIndex: LogIndex;
  readonly conf: ConfState;
  readonly leadTransferee: NodeId | null;
  /** The group sleeps here: ticks do nothing until something wakes it (raft.ts, quiescence). */
  readonly quiesced: boolean;
}

export interface Status extends BasicStatus {
  /** Per member, while leader: `describe()` of its Progress. */
  readonly progress: ReadonlyMap<NodeId, string>;
}

export class RawNode {
  readonly #raft: Raft;
  readonly #maxCommittedBytes: number;
  #prevHard: HardState;
  #prevSoft: SoftState;
  #outstanding: Ready | null = null;

  constructor(config: RaftConfig) {
    this.#raft = new Raft(config);
    this.#maxCommittedBytes = config.maxCommittedBytesPerReady ?? 16 << 20;
    this.#prevHard = this.#raft.hardState();
    this.#prevSoft = this.#softState();
  }

  get id(): NodeId {
    return this.#raft.id;
  }

  /** Cheap views of the volatile state, for hot paths (status() allocates). */
  get role(): Role {
    return this.#raft.role;
  }

  get lead(): NodeId | null {
    return this.#raft.lead;
  }

  get term(): Term {
    return this.#raft.term;
  }

  /** The member this one voted for in its current term, or null. */
  get vote(): NodeId | null {
    return this.#raft.vote;
  }

  /** While leader: the member leadership is being handed to, else null. */
  get leadTransferee(): NodeId | null {
    return this.#raft.leadTransferee;
  }

  get commitIndex(): LogIndex {
    return this.#raft.log.committed;
  }

  get appliedIndex(): LogIndex {
    return this.#raft.log.applied;
  }

  /** While leader: member `id`'s match index (null when not leading or not a member). */
  matchOf(id: NodeId): LogIndex | null {
    if (this.#raft.role !== "leader") return null;
    return this.#raft.prs.get(id)?.match ?? null;
  }

  /**
   * Whether the group sleeps here: ticks do nothing, and the driver need not deliver them. Any
   * message, request or campaign wakes it, as does reportLeaderDown() on a follower.
   */
  get quiesced(): boolean {
    return this.#raft.quiesced;
  }

  /**
   * Whether this member lost its log and is not yet refilled (RaftConfig.recoveringUntil): it
   * neither campaigns nor votes for a candidate less up to date than the log it lost.
   */
  get recovering(): boolean {
    return this.#raft.recovering;
  }

  /** The voters of the group's configuration as this member knows it (do not modify). */
  get voters(): ReadonlySet<NodeId> {
    return this.#raft.voters;
  }

  /**
   * While leader: whether an entry of its own term is committed, so its commit index covers
   * every entry committed by earlier leaders (§6.4; until then ReadIndex waits for it).
   */
  committedInCurrentTerm(): boolean {
    const log = this.#raft.log;
    return log.term(log.committed) === this.#raft.term;
  }

  /** The learners of the group's configuration as this member knows it (do not modify). */
  get learners(): ReadonlySet<NodeId> {
    return this.#raft.learners;
  }

  /** Whether this member is the group's only voter. */
  isSoleVoter(): boolean {
    const voters = this.#raft.voters;
    return voters.size === 1 && voters.has(this.#raft.id);
  }

  /**
   * Whether a committed conf change is not applied yet, so the configuration (voters, learners,
   * isSoleVoter) may be stale: a replica replaying after a restart knows its group only as far
   * as it has applied. It does not campaign until the change is applied.
   */
  hasUnappliedConfChange(): boolean {
    return this.#raft.hasUnappliedConfChange();
  }

  /** Advance logical time by one tick (the driver's timer; e.g. every 100 ms). Quiesced: no-op. */
  tick(): void {
    this.#assertNoOutstanding("tick");
    this.#raft.tick();
  }

  /** Start an election now, without waiting for the election timeout. */
  campaign(): void {
    this.#assertNoOutstanding("campaign");
    this.#raft.hup();
  }

  /**
   * Lead the current term without an election: only for a new group's designated first leader,
   * whose every founding voter voted for it in that term (Raft.leadWithoutElection).
   */
  leadWithoutElection(): void {
    this.#assertNoOutstanding("leadWithoutElection");
    this.#raft.leadWithoutElection();
  }

  /** Deliver a message received from a peer. Messages for another member are ignored. */
  step(m: Message): void {
    this.#assertNoOutstanding("step");
    if (m.to !== this.#raft.id) return;
    this.#raft.step(m);
  }

  /**
   * Propose `data` for the log (leader only). Returns the index and term the entry got; it is
   * committed if an entry at that index with that term is later applied.
   */
  propose(data: Uint8Array): { index: LogIndex; term: Term } {
    this.#assertNoOutstanding("propose");
    return this.#raft.propose(data);
  }

  proposeConfChange(cc: ConfChange): { index: LogIndex; term: Term } {
    this.#assertNoOutstanding("proposeConfChange");
    return this.#raft.proposeConfChange(cc);
  }

  /** Request a linearizable read point; answered by a ReadState carrying `context`. */
  readIndex(context: Uint8Array): void {
    this.#assertNoOutstanding("readIndex");
    this.#raft.readIndex(context);
  }

  transferLeader(to: NodeId): void {
    this.#assertNoOutstanding("transferLeader");
    this.#raft.transferLeader(to);
  }

  reportUnreachable(id: NodeId): void {
    this.#raft.reportUnreachable(id);
  }

  /**
   * Leader: `to` (every follower, when null) gets the commit index now if it has not had it
   * (RaftConfig.deferCommitBroadcast). Anywhere else a no-op.
   */
  sendCommit(to: NodeId | null): void {
    this.#assertNoOutstanding("sendCommit");
    this.#raft.sendCommit(to);
  }

  /** Leader: whether `to` (some follower, when null) has not been sent the commit index. */
  commitOwed(to: NodeId | null): boolean {
    return this.#raft.commitOwed(to);
  }

  /**
   * The driver's failure detector suspects the node of this group's leader (or declared it
   * dead): a quiesced follower wakes, pokes the leader, and campaigns after an election timeout
   * unless the leader answers. Anywhere else a no-op.
   */
  reportLeaderDown(): void {
    this.#assertNoOutstanding("reportLeaderDown");
    this.#raft.reportLeaderDown();
  }

  /**
   * The driver's failure detector saw member `id`'s node come back (RaftConfig.memberDown): a
   * quiesced leader the member lags behind wakes and brings it up to date. Anywhere else a
   * no-op.
   */
  reportMemberUp(id: NodeId): void {
    this.#assertNoOutstanding("reportMemberUp");
    this.#raft.reportMemberUp(id);
  }

  reportSnapshot(id: NodeId, ok: boolean): void {
    this.#raft.reportSnapshot(id, ok);
  }

  /** Allocates nothing: the driver asks it of every group each round visits, ticks included. */
  hasReady(): boolean {
    const r = this.#raft;
    return (
      r.msgs.length > 0 ||
      r.readStates.length > 0 ||
      r.log.hasUnstableEntries() ||
      r.log.unstableSnapshot() !== null ||
      r.log.hasNextCommittedEntries() ||
      !r.hardStateIs(this.#prevHard) ||
      r.lead !== this.#prevSoft.lead ||
      r.role !== this.#prevSoft.role
    );
  }

  ready(): Ready {
    this.#assertNoOutstanding("ready");
    const r = this.#raft;
    // What did not change is not built (a group's Ready is asked for several times a write).
    const rd: Ready = {
      hardState: r.hardStateIs(this.#prevHard) ? null : r.hardState(),
      entries: r.log.hasUnstableEntries() ? r.log.unstableEntries() : NO_ENTRIES,
      snapshot: r.log.unstableSnapshot(),
      messages: r.msgs,
      committedEntries: r.log.hasNextCommittedEntries()
        ? r.log.nextCommittedEntries(this.#maxCommittedBytes)
        : NO_ENTRIES,
      readStates: r.readStates,
      softState:
        r.lead === this.#prevSoft.lead && r.role === this.#prevSoft.role ? null : this.#softState(),
    };
    r.msgs = NO_MESSAGES;
    r.readStates = NO_READ_STATES;
    if (rd.hardState !== null) this.#prevHard = rd.hardState;
    if (rd.softState !== null) this.#prevSoft = rd.softState;
    this.#outstanding = rd;
    return rd;
  }

  /** The driver has done everything `ready()` asked. */
  advance(): void {
    const rd = this.#outstanding;
    if (rd === null) throw new RaftInvariantError("advance() without an outstanding ready()");
    this.#outstanding = null;
    const r = this.#raft;
    if (rd.snapshot !== null) {
      r.log.stableSnapTo(rd.snapshot.meta.index);
      r.log.appliedTo(rd.snapshot.meta.index);
    }
    const lastEntry = rd.entries[rd.entries.length - 1];
    if (lastEntry !== undefined) r.log.stableTo(lastEntry.index, lastEntry.term);
    const lastApplied = rd.committedEntries[rd.committedEntries.length - 1];
    if (lastApplied !== undefined) {
      r.log.appliedTo(lastApplied.index);
      for (const e of rd.committedEntries) {
        if (e.type === "conf-change") r.applyCommittedConfChange(e);
      }
    }
  }

  /** The group's state and, while leader, each member's progress (for tests and tools). */
  status(): Status {
    const r = this.#raft;
    const progress = new Map<NodeId, string>();
    if (r.role === "leader")
      for (const [id, pr] of r.prs) progress.set(id, (pr as Progress).describe());
    return { ...this.basicStatus(), progress };
  }

  /**
   * The snapshot received from the leader that the next Ready will hand over to install, or
   * null: a driver releases what a snapshot message it stepped holds when it is not this one
   * (the core ignored it: stale, or leaving this member out).
   */
  pendingSnapshot(): Snapshot | null {
    return this.#raft.log.unstableSnapshot();
  }

  /**
   * status() without the progress: what the driver's passes over every group read (health,
   * the cluster view, replica changes), for which describing each member's progress as a
   * string was most of the cost.
   */
  basicStatus(): BasicStatus {
    const r = this.#raft;
    return {
      id: r.id,
      role: r.role,
      lead: r.lead,
      term: r.term,
      vote: r.vote,
      commit: r.log.committed,
      applied: r.log.applied,
      lastIndex: r.log.lastIndex(),
      firstIndex: r.log.firstIndex(),
      conf: r.confState(),
      leadTransferee: r.leadTransferee,
      quiesced: r.quiesced,
    };
  }

  /** The entries [lo, hi) as the core sees them (stable and unstable); for tests and tools. */
  entries(lo: LogIndex, hi: LogIndex): Entry[] | null {
    return this.#raft.log.slice(lo, hi, Infinity);
  }

  #softState(): SoftState {
    return { lead: this.#raft.lead, role: this.#raft.role };
  }

  #assertNoOutstanding(op: string): void {
    if (this.#outstanding !== null) {
      throw new RaftInvariantError(`${op}() between ready() and advance()`);
    }
  }
}
