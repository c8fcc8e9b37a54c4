/**
 * The Raft state machine of one group: elections (with PreVote and CheckQuorum), log
 * replication, commitment, ReadIndex, snapshots, leadership transfer and one-at-a-time
 * membership changes. Synchronous and deterministic: time is `tick()`, randomness the injected
 * Rng, and every effect is a message in `msgs` or state the RawNode turns into a Ready.
 *
 * Numbered safety properties this code maintains (checked by the simulation):
 *  S1 at most one leader per term;
 *  S2 log matching: same index and term ⇒ same entry and same prefix;
 *  S3 leader completeness: a committed entry is in the log of every later leader;
 *  S4 state machine safety: no two members apply different entries at one index;
 *  S5 the commit index of a member never decreases.
 *
 * Quiescence (CockroachDB's, in spirit): a leader with nothing to do for `quiesceTicks` ticks
 * (every member holds and knows its whole log, nothing proposed, read, changing or
 * transferring) sends each follower a last heartbeat marked `quiesce` and stops ticking; a
 * follower whose log ends at that heartbeat's commit, in its term, stops its election timer.
 * Quiescence only stops timers: it never changes a term, a vote or a log, so S1–S5 do not
 * depend on it. Liveness does: a quiesced group wakes on any message of the group (but late
 * answers and heartbeats, and a removed member's campaign: see #wakesOn), on any local request,
 * and (a follower) when the driver reports the leader's node down; a follower woken by anything
 * but its leader wakes the leader too (a `wake` message), so it does not campaign against a live
 * leader that merely sleeps.
 *
 * A member that lost its log (RaftConfig.recoveringUntil: its shard's state machine and log
 * were destroyed, its term and vote kept) votes as if it still held that lost log, whose last
 * entry the driver knows, until its log is at least as up to date again; meanwhile it does not
 * campaign, and tells a leader its refusals come from a lost log, so that the leader forgets
 * what the member once acknowledged and refills it (see #handleVote and #maybeEndRecovery).
 */
import type { Rng } from "../common/rng.ts";
import {
  InvalidRaftRequestError,
  NotLeaderError,
  ProposalDroppedError,
  RaftInvariantError,
} from "./errors.ts";
import { RaftLog } from "./log.ts";
import type {
  AppendMessage,
  AppendResponseMessage,
  HeartbeatMessage,
  HeartbeatResponseMessage,
  Message,
  SnapshotMessage,
  VoteMessage,
  VoteResponseMessage,
} from "./message.ts";
import { Progress } from "./progress.ts";
import type { RaftStorage } from "./storage.ts";
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
import { decodeConfChange, encodeConfChange, logIndex, term as toTerm } from "./types.ts";

/**
 * The highest term a message may carry: far beyond any real group (an election a millisecond
 * for over 100,000 years), and leaving 2^52 exact terms after it.
 */
const MAX_TERM = 2 ** 52;

/**
 * The furthest a message's term may be ahead of this member's: a group holds an election at
 * most every few hundred milliseconds, so no real member is ever 2^32 terms behind another
 * (over a thousand years of elections). One message with a term near MAX_TERM, adopted and
 * spread by every answer, left its group with no term to elect a leader in, for good (the term
 * is in the hard state): a review of 2026-12-06. A sender must now raise it 2^20 times.
 */
const MAX_TERM_STEP = 2 ** 32;

/** Raft.msgs and Raft.readStates when empty since the last ready(): never written. */
export const NO_MESSAGES: Message[] = Object.freeze([]) as unknown as Message[];
export const NO_READ_STATES: ReadState[] = Object.freeze([]) as unknown as ReadState[];

export interface RaftConfig {
  /** This member's id; never the empty string. */
  readonly id: NodeId;
  readonly storage: RaftStorage;
  /** Source of the randomized election timeouts. */
  readonly rng: Rng;
  /** Ticks without hearing from a leader before campaigning (randomized in [n, 2n)). Default 10. */
  readonly electionTick?: number;
  /** Ticks between leader heartbeats; must be < electionTick. Default 1. */
  readonly heartbeatTick?: number;
  /** Index the state machine has already applied (after a restart). Default: the snapshot's. */
  readonly applied?: LogIndex;
  /** Ask for votes in a pre-election first, so a rejoining member cannot disrupt. Default true. */
  readonly preVote?: boolean;
  /** A leader that has not heard from a quorum for an election timeout steps down. Default true. */
  readonly checkQuorum?: boolean;
  /** Unacknowledged appends per follower in `replicate`. Default 256. */
  readonly maxInflightMsgs?: number;
  /**
   * Entry bytes of the unacknowledged appends per follower in `replicate` past which no more
   * is sent (the last append may go past it). Default 8 MiB: maxInflightMsgs alone allows 256
   * appends of maxMsgBytes each, 256 MiB to one follower catching up, for every group that
   * catches up at once.
   */
  readonly maxInflightBytes?: number;
  /** Payload bytes per append message (at least one entry is always sent). Default 1 MiB. */
  readonly maxMsgBytes?: number;
  /**
   * Data bytes of the entries this leader proposed and has not committed past which propose()
   * refuses (ProposalDroppedError, retryable); a proposal is always taken when none is
   * uncommitted, whatever its size. Default 256 MiB: twice the node's default budget of requests
   * waiting (`limits.max_pending_bytes`), which refuses first while callers wait, so that only
   * entries that outlived their callers reach it. A proposal whose caller gave up (its deadline
   * passed) leaves its entry in the log: a leader that keeps its quorum but cannot commit (the
   * follower it needs refusing its appends) grew its log at the clients' retry rate (etcd's
   * MaxUncommittedEntriesSize, a review of 2026-12-08).
   */
  readonly maxUncommittedBytes?: number;
  /**
   * Ticks a leader waits with nothing to do before it quiesces its group (see the top of this
   * file); 0 never quiesces. Default 0.
   */
  readonly quiesceTicks?: number;
  /**
   * The driver's failure detector: whether it declared the node of member `id` down (dead or
   * gone, not merely suspected). A leader quiesces its group with such a member lagging
   * (CockroachDB quiesces past non-live followers): a group that wrote while a member was
   * down would otherwise heartbeat it until it came back. The member, back, wakes the group (its
   * campaign, its poke, or the driver's reportMemberUp). Default: no member is down.
   */
  readonly memberDown?: (id: NodeId) => boolean;
  /**
   * A leader skips a follower's tick heartbeat when it sent that follower an append since the
   * previous one and replicates to it without trouble (`replicate`, no read to confirm): the
   * append did all a heartbeat does (it resets the follower's election timer, carries the commit
   * index, and its answer counts for CheckQuorum). Under load, with many groups each carrying a
   * few writes a second, that removes a large share of the messages. Default false.
   */
  readonly skipHeartbeatsAfterAppends?: boolean;
  /**
   * A leader marks the messages whose accepting answer would tell it nothing (`noReply`), and
   * followers answer those only with a refusal: the append that only carries a new commit
   * index to a follower in `replicate` (the entries before it are answered by their own
   * appends), and the tick heartbeat to a follower in `replicate` that holds the whole log, has
   * room in its in-flight window, was heard from since the last CheckQuorum round and has no
   * read to confirm. Under load a replicated write's commit then costs no answers, and most
   * heartbeats none. Default false.
   */
  readonly omitRedundantReplies?: boolean;
  /**
   * A commit index that advances on a follower's answer reaches the followers with the next
   * append, or at the latest with the next heartbeat round (which then goes, as an empty
   * append, to a follower skipHeartbeatsAfterAppends would skip, if it has not had that commit
   * index), instead of an empty append to each follower at once. With many groups each carrying
   * a few writes a second, most commits have no next append soon, so each cost two messages to
   * the followers and a Ready of its own on each; deferred, several commits share one. A
   * follower then applies up to a heartbeat interval later: a driver that serves linearizable
   * reads on followers calls sendCommit for them. The commit of a configuration change still
   * goes at once. Default false.
   */
  readonly deferCommitBroadcast?: boolean;
  /** Payload bytes of committed entries per Ready. Default 16 MiB. */
  readonly maxCommittedBytesPerReady?: number;
  /**
   * The committed conf-change entries up to this index take effect at construction, before the
   * state machine applies them, as etcd's Bootstrap applies a new group's peers: a new group's
   * founding voters, so that its first leader need not wait for their apply
   * (Groups#openShard). They are then no pending change (a member may campaign or lead); the
   * driver still hands them to its state machine, and applying them again changes nothing here.
   * At most the commit index. Default: none beyond `applied`.
   */
  readonly confIndex?: LogIndex;
  /**
   * The state machine's applied index when the log cannot show it (above the commit index): its
   * engine holds what a crash cut from the WAL's hard state or log (a snapshot installed durably
   * whose WAL mark a power cut tore; entries applied past the commit a torn hard state kept).
   * The storage's configuration is the one in force there: no conf change up to `applied` is
   * replayed onto it at construction, and those at or below it, delivered again as the commit
   * advances or the leader re-sends them, are in effect already and are not applied again.
   * (Applied in order onto the later configuration, they made a removed replica a voter, or
   * demoted a voter, until the replay passed them, or for good: driver simulation seeds 2200394
   * on four nodes and 2400019 on five.) Default: none beyond `applied`.
   */
  readonly stateApplied?: LogIndex;
  /**
   * The last entry (index and term) of a log this member lost: its shard's state machine and
   * log were destroyed while its hard state (term, vote) survived, and it restarts with the log
   * it has now (empty, or part of a refill). Everything it ever acknowledged was in that lost
   * log, so it may have counted toward a commit that other members now hold without it. Until
   * its log is at least as up to date as this entry (§5.4.1's order: a later last term, or the
   * same and an index as high) it is *recovering*: it does not campaign, and grants a vote or
   * pre-vote only to a candidate whose log is at least as up to date as the lost one, as it
   * would if it still held that log (see #handleVote for why that is safe). Its refusals of
   * appends are marked `lost`, so that a leader forgets the match it counted from the lost log
   * and refills the member from where its log really ends. A log already that up to date: not
   * recovering. Default: none.
   */
  readonly recoveringUntil?: { readonly index: LogIndex; readonly term: Term };
  /** Test-only: plant known bugs so the simulation can prove it catches them. */
  readonly testingBugs?: TestingBugs;
}

/** Deliberate bugs, for canary tests of the simulation only. */
export interface TestingBugs {
  /** Commit an entry of an earlier term by counting replicas (violates §5.4.2 / Figure 8). */
  readonly commitPriorTermByCounting?: boolean;
  /** Leave `vote` out of the persisted hard state, so a restart forgets it. */
  readonly forgetVote?: boolean;
  /** Answer ReadIndex at once, without confirming leadership with a quorum. */
  readonly readWithoutQuorum?: boolean;
  /** Count learners' match indexes toward the commit quorum (learners must never count). */
  readonly countLearnersTowardCommit?: boolean;
  /**
   * A follower takes the leader's commit index from every append, up to its own last index,
   * instead of only up to the last entry an append it accepted vouched for (Figure 2, receiver
   * rules 2 and 5): it commits whatever stale suffix it holds. (Capping at the last index only on
   * accepted appends is not observable here: an accepted append always truncates a stale suffix.)
   */
  readonly followerCommitWithoutMatch?: boolean;
  /** A quiesced member sleeps through every message: only local requests wake it. */
  readonly sleepThroughMessages?: boolean;
  /**
   * A recovering member (RaftConfig.recoveringUntil) votes by the log it has, as if it had lost
   * nothing: an empty log is less up to date than any, so it helps elect a candidate that lacks
   * entries it acknowledged before its loss.
   */
  readonly votesWithLostLog?: boolean;
}

interface PendingRead {
  readonly seq: number;
  readonly index: LogIndex;
  readonly context: Uint8Array;
}

type CampaignKind = "pre-election" | "election" | "transfer";

export class Raft {
  readonly id: NodeId;
  term: Term = toTerm(0);
  vote: NodeId | null = null;
  lead: NodeId | null = null;
  role: Role = "follower";
  readonly log: RaftLog;
  /**
   * Outgoing messages, taken by RawNode.ready(), which leaves NO_MESSAGES: the next array is
   * made by the first message after it. An array made at ready() would wait, empty, for the
   * group's next message, long enough on an idle group to reach the old generation; the messages
   * put in it after would then stay alive through young collections until a full one, because
   * that array, dropped by the Ready that took it, still points at them.
   */
  msgs: Message[] = NO_MESSAGES;
  /** Confirmed reads, taken by RawNode.ready() (NO_READ_STATES after it, as for msgs). */
  readStates: ReadState[] = NO_READ_STATES;

  readonly voters = new Set<NodeId>();
  readonly learners = new Set<NodeId>();
  /** Progress of every member (self included); meaningful while leader. */
  readonly prs = new Map<NodeId, Progress>();
  /** #peers()'s answer until `prs` gains or loses a member; null: to be built. */
  #peerList: readonly NodeId[] | null = null;
  /** #maybeCommit's scratch: the members' match indexes, largest first (only its first entries). */
  readonly #matchScratch: number[] = [];
  leadTransferee: NodeId | null = null;
  /** Index of the newest conf-change entry; no other may be proposed until it is applied. */
  pendingConfIndex: LogIndex = logIndex(0);
  /**
   * Leader: the index of an entry of its log that removes this member or demotes it to learner
   * (either takes it out of the voters), 0 when none. Until that entry is applied (and the leader
   * steps down) no proposal is taken: see propose().
   */
  #selfRemovalIndex: LogIndex = logIndex(0);

  readonly #rng: Rng;
  readonly #electionTimeout: number;
  readonly #heartbeatTimeout: number;
  readonly #preVote: boolean;
  readonly #checkQuorum: boolean;
  readonly #maxInflight: number;
  readonly #maxInflightBytes: number;
  readonly #maxUncommittedBytes: number;
  /**
   * The entries this leader proposed and has not committed: their indexes and data bytes, in
   * log order from #uncommittedHead (a queue: a commit takes from its front), and their sum.
   * Emptied whenever the role or term changes (#reset).
   */
  #uncommittedIndexes: number[] = [];
  #uncommittedSizes: number[] = [];
  #uncommittedHead = 0;
  #uncommittedBytes = 0;
  readonly #maxMsgBytes: number;
  readonly #quiesceTicks: number;
  readonly #memberDown: ((id: NodeId) => boolean) | undefined;
  readonly bugs: TestingBugs;

  #votes = new Map<NodeId, boolean>();
  #electionElapsed = 0;
  #heartbeatElapsed = 0;
  #randomizedElectionTimeout = 0;
  #readSeq = 0;
  #pendingReads: PendingRead[] = [];
  /** Reads that arrived before the leader committed an entry of its own term. */
  #readsAwaitingCommit: Uint8Array[] = [];
  /** The commit index is known to be at an entry of the current term (#committedInCurrentTerm). */
  #commitInTerm = false;
  /** No timers run: no heartbeats, no election timeout (see the top of this file). */
  #quiesced = false;
  /** Leader: consecutive ticks with nothing to do (see #maybeQuiesce). */
  #idleTicks = 0;
  readonly #skipHeartbeats: boolean;
  readonly #omitReplies: boolean;
  readonly #deferCommit: boolean;
  /**
   * Conf changes up to here took effect at construction (RaftConfig.confIndex, stateApplied):
   * delivered as committed entries, they are not applied again. A snapshot restored sets it to
   * its own index: its configuration is as of there (#restore).
   */
  #confIndex: LogIndex;
  /** While recovering: the last entry of the log this member lost (RaftConfig.recoveringUntil). */
  #lostLast: { readonly index: LogIndex; readonly term: Term } | null = null;
  /**
   * The term this member was in when it started having lost its log (null: it lost none, or its
   * log was already as up to date again). That term's leader may still count acknowledgements
   * the lost log gave it (see #handleHeartbeat).
   */
  #lostInTerm: Term | null = null;

  constructor(config: RaftConfig) {
    if (config.id.length === 0) throw new InvalidRaftRequestError("raft: id must not be empty");
    this.id = config.id;
    this.#rng = config.rng;
    this.#electionTimeout = config.electionTick ?? 10;
    this.#heartbeatTimeout = config.heartbeatTick ?? 1;
    if (this.#heartbeatTimeout <= 0 || this.#electionTimeout <= this.#heartbeatTimeout) {
      throw new InvalidRaftRequestError("raft: need 0 < heartbeatTick < electionTick");
    }
    this.#preVote = config.preVote ?? true;
    this.#checkQuorum = config.checkQuorum ?? true;
    this.#maxInflight = config.maxInflightMsgs ?? 256;
    this.#maxInflightBytes = config.maxInflightBytes ?? 8 << 20;
    this.#maxMsgBytes = config.maxMsgBytes ?? 1 << 20;
    this.#maxUncommittedBytes = config.maxUncommittedBytes ?? 256 << 20;
    this.#quiesceTicks = config.quiesceTicks ?? 0;
    this.#memberDown = config.memberDown;
    this.#skipHeartbeats = config.skipHeartbeatsAfterAppends ?? false;
    this.#omitReplies = config.omitRedundantReplies ?? false;
    this.#deferCommit = config.deferCommitBroadcast ?? false;
    if (!Number.isInteger(this.#maxInflight) || this.#maxInflight < 1) {
      // 0 would pause every follower in `replicate` for good (its window always full): no entry
      // past a probe's would ever be sent.
      throw new InvalidRaftRequestError("raft: maxInflightMsgs must be an integer ≥ 1");
    }
    if (!Number.isInteger(this.#maxInflightBytes) || this.#maxInflightBytes < 1) {
      throw new InvalidRaftRequestError("raft: maxInflightBytes must be an integer ≥ 1");
    }
    if (!Number.isInteger(this.#maxUncommittedBytes) || this.#maxUncommittedBytes < 1) {
      throw new InvalidRaftRequestError("raft: maxUncommittedBytes must be an integer ≥ 1");
    }
    if (!Number.isInteger(this.#quiesceTicks) || this.#quiesceTicks < 0) {
      throw new InvalidRaftRequestError("raft: quiesceTicks must be an integer ≥ 0");
    }
    this.bugs = config.testingBugs ?? {};
    this.log = new RaftLog(config.storage);

    const { hardState, confState } = config.storage.initialState();
    this.#setConf(confState);
    if (hardState.commit < this.log.committed || hardState.commit > this.log.lastIndex()) {
      throw new RaftInvariantError(
        `persisted commit ${hardState.commit} outside [${this.log.committed}, ${this.log.lastIndex()}]`,
      );
    }
    this.log.commitTo(hardState.commit);
    this.term = hardState.term;
    this.vote = hardState.vote;
    const applied = config.applied ?? this.log.applied;
    const stateApplied = config.stateApplied ?? logIndex(0);
    if (applied > this.log.applied) {
      // Conf changes the state machine already applied are not replayed: re-derive them. Not
      // onto a configuration as of a later index (stateApplied): replayed up to `applied`
      // only, an "add-learner" before the state's "add-voter" demoted that voter for good
      // (driver simulation seed 2400019 on five nodes).
      if (stateApplied <= applied) {
        for (const e of this.log.slice(this.log.firstIndex(), logIndex(applied + 1), Infinity) ??
          []) {
          if (e.type === "conf-change") this.applyConfChange(decodeConfChange(e.data));
        }
      }
      this.log.appliedTo(applied);
    }
    const confIndex = config.confIndex ?? logIndex(0);
    if (confIndex > this.log.committed) {
      throw new InvalidRaftRequestError(
        `raft: confIndex ${confIndex} is past the commit index ${this.log.committed}`,
      );
    }
    if (confIndex > this.log.applied) {
      for (const e of this.log.slice(
        logIndex(this.log.applied + 1),
        logIndex(confIndex + 1),
        Infinity,
      ) ?? []) {
        if (e.type === "conf-change") this.applyConfChange(decodeConfChange(e.data));
      }
    }
    this.#confIndex = logIndex(Math.max(confIndex, stateApplied));
    if (config.recoveringUntil !== undefined) {
      this.#lostLast = config.recoveringUntil;
      this.#maybeEndRecovery();
      if (this.#lostLast !== null) this.#lostInTerm = this.term;
    }
    this.becomeFollower(this.term, null);
  }

  // ── queries ──────────────────────────────────────────────────────────────────────────────────

  hardState(): HardState {
    return {
      term: this.term,
      vote: this.bugs.forgetVote ? null : this.vote,
      commit: this.log.committed,
    };
  }

  /** Whether hardState() would equal `h`, without building it (RawNode.hasReady asks often). */
  hardStateIs(h: HardState): boolean {
    return (
      this.term === h.term &&
      (this.bugs.forgetVote ? null : this.vote) === h.vote &&
      this.log.committed === h.commit
    );
  }

  confState(): ConfState {
    return { voters: [...this.voters].sort(), learners: [...this.learners].sort() };
  }

  /** A voter can campaign; learners and removed members cannot. */
  isPromotable(): boolean {
    return this.voters.has(this.id);
  }

  /**
   * Whether this member lost its log and is not yet refilled: its log is less up to date than
   * the one it lost (RaftConfig.recoveringUntil). It neither campaigns nor votes for a candidate
   * less up to date than the lost log.
   */
  get recovering(): boolean {
    return this.#lostLast !== null;
  }

  quorum(): number {
    return Math.floor(this.voters.size / 2) + 1;
  }

  /** Whether the group sleeps here: ticks do nothing until something wakes it. */
  get quiesced(): boolean {
    return this.#quiesced;
  }

  // ── inputs ───────────────────────────────────────────────────────────────────────────────────

  tick(): void {
    if (this.#quiesced) return;
    if (this.role === "leader") this.#tickLeader();
    else this.#tickElection();
  }

  /** Start an election now (as if the election timeout had elapsed). */
  hup(kind: "normal" | "transfer" = "normal"): void {
    // A recovering member would vote for itself with a log that lacks what it acknowledged.
    if (this.role === "leader" || !this.isPromotable() || this.recovering) return;
    if (this.hasUnappliedConfChange()) return; // our configuration may be stale
    // Its vote requests wake the others.
    if (this.#quiesced) this.#wake();
    if (kind === "transfer") this.#campaign("transfer");
    else this.#campaign(this.#preVote ? "pre-election" : "election");
  }

  /**
   * Leads the current term without an election. Only for a new group's designated first
   * leader: every founding voter's first hard state records its vote, in this term, for the
   * same member, this one (Groups#openShard), so no other member can win this term (S1),
   * and every founding voter's log is the same committed founding entries (S2, S3). The caller
   * must also know this member's founding state durable before it sends anything as leader: a
   * member restarted with that state is the term's follower, never its leader again, so the
   * term's entries have one author. Throws when this member does not hold its own vote in its
   * term, or has met a leader of it.
   */
  leadWithoutElection(): void {
    if (this.role !== "follower" || this.lead !== null || this.vote !== this.id) {
      throw new InvalidRaftRequestError(
        `raft: ${this.id} may lead term ${this.term} only as its founding leader (role ${this.role}, vote ${this.vote ?? "none"}, leader ${this.lead ?? "none"})`,
      );
    }
    if (!this.isPromotable() || this.hasUnappliedConfChange() || this.recovering) {
      throw new InvalidRaftRequestError(
        `raft: ${this.id} may lead only once the founding configuration is applied`,
      );
    }
    this.#becomeLeader(true);
    this.#broadcastAppend();
  }

  propose(data: Uint8Array): { index: LogIndex; term: Term } {
    this.#wakeForRequest();
    this.#requireLeader();
    if (this.leadTransferee !== null) {
      throw new ProposalDroppedError(`leadership transfer to ${this.leadTransferee} in progress`);
    }
    if (this.#selfRemovalIndex > this.log.applied) {
      // This leader steps down once it applies its removal (or demotion: as a learner it still
      // holds its log, and the same holds), and its log must then hold nothing
      // the voters left lack. With two voters, the one left needs the removed member's vote
      // until it learns that the removal committed (a configuration takes effect when applied),
      // and the removed member grants it only to a log at least as up to date as its own: an
      // entry appended after the removal that the other voter lacks (its append lost with the
      // commit's) refuses it that vote for ever, and the group elects no leader again. Without
      // entries after it, the log ends with the removal or this term's empty entry after it,
      // and the commit that lets the leader apply its removal put the whole log on a quorum.
      throw new ProposalDroppedError(
        `removal of ${this.id} from the voters at ${this.#selfRemovalIndex} not yet applied`,
      );
    }
    if (
      this.#uncommittedBytes > 0 &&
      this.#uncommittedBytes + data.length > this.#maxUncommittedBytes
    ) {
      throw new ProposalDroppedError(
        `${this.#uncommittedBytes} bytes of proposals not committed yet (at most ${this.#maxUncommittedBytes}): the group cannot commit as fast as it is written`,
      );
    }
    const index = this.#appendEntries([{ type: "normal", data }]);
    if (data.length > 0) {
      this.#uncommittedIndexes.push(index);
      this.#uncommittedSizes.push(data.length);
      this.#uncommittedBytes += data.length;
    }
    this.#broadcastAppend();
    return { index, term: this.term };
  }

  /** Takes the proposals the commit index now covers off the uncommitted count (propose()). */
  #releaseCommitted(): void {
    const commit = this.log.committed;
    const indexes = this.#uncommittedIndexes;
    let head = this.#uncommittedHead;
    while (head < indexes.length && (indexes[head] as number) <= commit) {
      this.#uncommittedBytes -= this.#uncommittedSizes[head] as number;
      head++;
    }
    if (head === indexes.length) {
      this.#clearUncommitted();
    } else if (head > 1024 && head * 2 > indexes.length) {
      indexes.splice(0, head);
      this.#uncommittedSizes.splice(0, head);
      this.#uncommittedHead = 0;
    } else {
      this.#uncommittedHead = head;
    }
  }

  #clearUncommitted(): void {
    if (this.#uncommittedIndexes.length > 0) {
      this.#uncommittedIndexes = [];
      this.#uncommittedSizes = [];
    }
    this.#uncommittedHead = 0;
    this.#uncommittedBytes = 0;
  }

  proposeConfChange(cc: ConfChange): { index: LogIndex; term: Term } {
    this.#wakeForRequest();
    this.#requireLeader();
    if (this.leadTransferee !== null) {
      throw new ProposalDroppedError(`leadership transfer to ${this.leadTransferee} in progress`);
    }
    if (this.pendingConfIndex > this.log.applied) {
      throw new ProposalDroppedError(
        `configuration change at ${this.pendingConfIndex} not yet applied`,
      );
    }
    this.#validateConfChange(cc);
    const index = this.#appendEntries([{ type: "conf-change", data: encodeConfChange(cc) }]);
    this.pendingConfIndex = index;
    if (leavesVoters(cc, this.id)) this.#selfRemovalIndex = index;
    this.#broadcastAppend();
    return { index, term: this.term };
  }

  /**
   * Ask for a linearizable read point. Once a quorum confirms this leader is still the leader,
   * a ReadState with the commit index as of now is emitted; serve the read after applying it.
   */
  readIndex(context: Uint8Array): void {
    this.#wakeForRequest();
    this.#requireLeader();
    if (!this.#committedInCurrentTerm()) {
      this.#readsAwaitingCommit.push(context);
      return;
    }
    this.#startRead(context);
  }

  transferLeader(to: NodeId): void {
    this.#wakeForRequest();
    this.#requireLeader();
    if (!this.voters.has(to))
      throw new InvalidRaftRequestError(`cannot transfer leadership to ${to}: not a voter`);
    if (this.leadTransferee === to) return;
    // (Refused before a running transfer is touched.)
    const removal = to === this.id ? 0 : this.#unappliedRemovalOf(to);
    if (removal !== 0) {
      // The target would lead only until it applied its own removal (or demotion), and the group
      // would then wait an election timeout for its next leader. Applying the change here aborts
      // a transfer, but its TimeoutNow may be gone already (the target holds the whole log).
      throw new ProposalDroppedError(
        `cannot transfer leadership to ${to}: its removal from the voters at ${removal} not yet applied`,
      );
    }
    if (this.leadTransferee !== null) this.#abortLeaderTransfer();
    if (to === this.id) return;
    // The transfer must finish within an election timeout or it is abandoned.
    this.#electionElapsed = 0;
    this.leadTransferee = to;
    const pr = this.prs.get(to) as Progress;
    if (pr.match === this.log.lastIndex()) this.#sendTimeoutNow(to);
    else this.#sendAppend(to);
  }

  /**
   * Leader: the followers (only `to`, when named) that have not been sent the commit index get
   * it now, in an empty append (RaftConfig.deferCommitBroadcast): a follower's read waits for
   * its replica to apply the leader's commit index. Anywhere else a no-op.
   */
  sendCommit(to: NodeId | null): void {
    if (this.role !== "leader") return;
    for (const id of this.#peers()) {
      if (to !== null && id !== to) continue;
      if ((this.prs.get(id) as Progress).commitSent < this.log.committed)
        this.#maybeSendAppend(id, true, true);
    }
  }

  /** Leader: whether `to` (some follower, when null) has not been sent the commit index. */
  commitOwed(to: NodeId | null): boolean {
    if (this.role !== "leader") return false;
    for (const id of this.#peers()) {
      if (to !== null && id !== to) continue;
      if ((this.prs.get(id) as Progress).commitSent < this.log.committed) return true;
    }
    return false;
  }

  /** The driver could not reach `id`: stop streaming to it optimistically. */
  reportUnreachable(id: NodeId): void {
    const pr = this.prs.get(id);
    if (this.role === "leader" && pr !== undefined && pr.state === "replicate") pr.becomeProbe();
  }

  /** The driver finished (or failed) sending a snapshot to `id`. */
  reportSnapshot(id: NodeId, ok: boolean): void {
    const pr = this.prs.get(id);
    if (this.role !== "leader" || pr === undefined || pr.state !== "snapshot") return;
    if (!ok) pr.pendingSnapshot = logIndex(0);
    // Wait for the follower's answer (or the next heartbeat) before probing again.
    pr.becomeProbe();
    pr.probeSent = true;
  }

  /**
   * The driver's failure detector suspects the node of this group's leader, or declared it
   * dead. A quiesced follower wakes: its election timer runs again, so it campaigns after an
   * election timeout unless the leader shows up. It pokes the leader all the same: a suspicion
   * may be wrong, and a live leader, woken, heartbeats before anyone campaigns.
   */
  reportLeaderDown(): void {
    if (!this.#quiesced || this.role === "leader") return;
    const lead = this.lead;
    this.#wake();
    if (lead !== null) this.#pokeLeader(lead);
  }

  /**
   * The driver's failure detector saw member `id`'s node come back. A quiesced leader wakes if
   * the member lags (it slept past it: memberDown), and brings it up to date.
   */
  reportMemberUp(id: NodeId): void {
    if (!this.#quiesced || this.role !== "leader") return;
    const pr = this.prs.get(id);
    if (pr === undefined || id === this.id || pr.match === this.log.lastIndex()) return;
    this.#wake();
    this.#sendAppend(id);
  }

  step(m: Message): void {
    // A malformed append would be taken by position (its entries' own indexes unchecked):
    // a log whose entries contradict their places, or a commit index past the log (a throw).
    if (m.type === "append" && !appendIsWellFormed(m)) return;
    // A term so high that the ones after it are not exact (term + 1 === term past 2^53, and
    // peers decode no term past it) would end the group's elections once adopted.
    if (m.term > MAX_TERM || m.term - this.term > MAX_TERM_STEP) return;
    if (this.#quiesced && this.bugs.sleepThroughMessages !== true) {
      if (this.#isLateAnswer(m)) return;
      if (this.#wakesOn(m)) {
        const lead = this.lead;
        this.#wake();
        // A message from the leader means the leader is awake; from anyone else, it may not be.
        if (this.role === "follower" && lead !== null && m.from !== lead) this.#pokeLeader(lead);
      }
    }
    if (m.term > this.term) {
      if (m.type === "vote" || m.type === "prevote") {
        const inLease =
          this.#checkQuorum && this.lead !== null && this.#electionElapsed < this.#electionTimeout;
        // A member that heard from a live leader recently refuses to help depose it.
        if (inLease && !m.transfer) return;
      }
      if (m.type === "prevote" || (m.type === "prevote-resp" && !m.reject)) {
        // Pre-votes and their grants speak of a future term; nobody changes term for them.
      } else if (m.type === "append" || m.type === "heartbeat" || m.type === "snapshot") {
        this.becomeFollower(m.term, m.from);
      } else if (m.type === "vote" || m.type === "vote-resp" || m.type === "prevote-resp") {
        // The other member's term, but not a restart of the election timer: that restarts on
        // hearing from a leader or granting a vote (#handleVote), as the Raft paper's Figure 2
        // has it. A candidate whose log is behind would otherwise restart, with every campaign
        // it loses, the timer of the one member that can win, and with PreVote off the two can
        // take turns for ever (the simulation, seed 7104392 with 5 nodes). And the one that can
        // win, refused by that candidate's higher term, would campaign a whole new timeout
        // after each refusal, always after the other, which campaigns a timeout after its
        // last campaign and sends it no vote request to learn from (its configuration is
        // stale): the simulation's seed 7605952, 3 nodes.
        const elapsed = this.#electionElapsed;
        const timeout = this.#randomizedElectionTimeout;
        this.becomeFollower(m.term, null);
        this.#electionElapsed = elapsed;
        this.#randomizedElectionTimeout = timeout;
      } else {
        this.becomeFollower(m.term, null);
      }
    } else if (m.term < this.term) {
      if ((this.#checkQuorum || this.#preVote) && (m.type === "append" || m.type === "heartbeat")) {
        // A stale leader that cannot be told by votes (they are refused during leases) learns
        // our term from this answer and steps down. A refusal, which names no entry: the sender
        // may lead our term by the time it arrives (re-elected), and an acceptance of index 0
        // then ended its probe of us, and it streamed us its whole log from index 1.
        this.#send({
          type: "append-resp",
          from: this.id,
          to: m.from,
          term: this.term,
          index: logIndex(0),
          reject: true,
          hintIndex: logIndex(0),
          hintTerm: toTerm(0),
          lost: false,
        });
      } else if (m.type === "prevote" || m.type === "vote") {
        // A candidate behind in term learns ours from the refusal, and its next campaign can
        // win. Without it, a member that cannot reach this one (it is not among the voters of
        // this member's stale configuration) never learns the terms this member burns, and the
        // two can race for terms forever (seen in the simulation, seed 6500, PreVote off).
        this.#learnCommit(m.commit, m.commitTerm);
        this.#refuseVote(m);
        if (m.type === "vote") this.#yieldToBetterCandidate(m);
      } else if ((m.type === "vote-resp" || m.type === "prevote-resp") && m.reject) {
        // A commit index names committed entries whatever the term of the message carrying it.
        // A member that missed an election refuses a pre-vote in its old term (pre-votes change
        // no one's term): a removed voter that alone knew its removal committed, refusing in
        // the term before the candidate's failed election, would otherwise never be heard, and
        // the candidate never win a pre-vote that would raise the voter's term
        // (confchange_removed_voter_stale_refusal_carries_commit).
        this.#learnCommit(m.commit, m.commitTerm);
      }
      return;
    }

    if (m.type === "vote" || m.type === "prevote") {
      this.#learnCommit(m.commit, m.commitTerm);
      this.#handleVote(m);
      return;
    }
    if ((m.type === "vote-resp" || m.type === "prevote-resp") && m.reject) {
      this.#learnCommit(m.commit, m.commitTerm);
    }
    switch (this.role) {
      case "leader":
        this.#stepLeader(m);
        return;
      case "candidate":
      case "pre-candidate":
        this.#stepCandidate(m);
        return;
      case "follower":
        this.#stepFollower(m);
        return;
    }
  }

  /**
   * Applies a committed conf-change entry as the driver applies it: not one in effect since
   * construction (#confIndex).
   */
  applyCommittedConfChange(e: Entry): void {
    if (e.index > this.#confIndex) this.applyConfChange(decodeConfChange(e.data));
  }

  /** Apply a committed configuration change. */
  applyConfChange(cc: ConfChange): void {
    switch (cc.type) {
      case "add-learner":
        // A voter is demoted: out of the quorum as if removed, but its Progress is kept (a
        // member it is still, that goes on receiving the log where it stood).
        this.voters.delete(cc.node);
        this.learners.add(cc.node);
        break;
      case "add-voter":
        this.learners.delete(cc.node);
        this.voters.add(cc.node);
        break;
      case "remove":
        this.voters.delete(cc.node);
        this.learners.delete(cc.node);
        this.prs.delete(cc.node);
        this.#peerList = null;
        break;
    }
    if (cc.type !== "remove" && !this.prs.has(cc.node)) {
      // New members count as active so CheckQuorum does not depose the leader before they answer.
      this.prs.set(
        cc.node,
        new Progress(
          logIndex(this.log.lastIndex() + 1),
          this.#maxInflight,
          this.#maxInflightBytes,
          true,
        ),
      );
      this.#peerList = null;
    }
    if (this.role !== "leader") return;
    if (!this.voters.has(this.id)) {
      // Removed or demoted ourselves: let the others elect (a learner never campaigns).
      this.becomeFollower(this.term, null);
      return;
    }
    if (this.leadTransferee !== null && !this.voters.has(this.leadTransferee))
      this.#abortLeaderTransfer();
    // The quorum changed: commitment and pending reads may advance.
    if (this.#maybeCommit()) this.#broadcastCommit();
    this.#releaseReads();
  }

  // ── role changes ────────────────────────────────────────────────────────────────────────────

  becomeFollower(term: Term, lead: NodeId | null): void {
    this.#reset(term);
    this.role = "follower";
    this.lead = lead;
  }

  #becomePreCandidate(): void {
    if (this.role === "leader") throw new RaftInvariantError("leader cannot become pre-candidate");
    // Term and vote stay: a pre-election changes nothing until it is won.
    this.#votes = new Map();
    this.role = "pre-candidate";
    this.lead = null;
  }

  #becomeCandidate(): void {
    if (this.role === "leader") throw new RaftInvariantError("leader cannot become candidate");
    this.#reset(toTerm(this.term + 1));
    this.vote = this.id;
    this.role = "candidate";
  }

  /** `withoutElection`: see leadWithoutElection(). */
  #becomeLeader(withoutElection = false): void {
    if (this.role === "follower" && !withoutElection)
      throw new RaftInvariantError("follower cannot become leader directly");
    this.#reset(this.term);
    this.role = "leader";
    this.lead = this.id;
    (this.prs.get(this.id) as Progress).becomeReplicate();
    // Earlier entries may hold an unapplied conf change: allow none until they are applied.
    this.pendingConfIndex = this.log.lastIndex();
    // One of them may remove this member, proposed by an earlier leader: no proposal until it is
    // applied (see propose()).
    this.#selfRemovalIndex = this.#unappliedRemovalOfSelf();
    // An entry of the new term lets the leader learn, by committing it, what is committed (§8).
    this.#appendEntries([{ type: "normal", data: new Uint8Array(0) }]);
  }

  #reset(term: Term): void {
    if (this.term !== term) {
      this.term = term;
      this.vote = null;
      this.#commitInTerm = false;
    }
    this.lead = null;
    this.#quiesced = false;
    this.#idleTicks = 0;
    this.#restartElectionTimer();
    this.#heartbeatElapsed = 0;
    this.leadTransferee = null;
    this.#votes = new Map();
    this.#readSeq = 0;
    this.#pendingReads = [];
    this.#readsAwaitingCommit = [];
    this.#clearUncommitted();
    const next = logIndex(this.log.lastIndex() + 1);
    for (const id of [...this.prs.keys()]) {
      const fresh = new Progress(next, this.#maxInflight, this.#maxInflightBytes, id === this.id);
      if (id === this.id) fresh.match = this.log.lastIndex();
      this.prs.set(id, fresh);
    }
  }

  // ── elections ───────────────────────────────────────────────────────────────────────────────

  #tickElection(): void {
    this.#electionElapsed++;
    if (this.#electionElapsed < this.#randomizedElectionTimeout) return;
    if (this.isPromotable() && !this.recovering) {
      this.#electionElapsed = 0;
      this.hup();
    } else if (
      this.#quiesceTicks > 0 &&
      this.#electionElapsed % this.#randomizedElectionTimeout === 0
    ) {
      // A learner (or a recovering voter) that missed its leader's quiesce heartbeat, or
      // restarted while the group slept, would tick alone for good: it cannot campaign, which
      // is how a voter in its place wakes the leader. It asks instead, once per election
      // timeout: its leader, or every voter when it knows none (only a leader heeds a wake).
      // Its timer is not reset: a member that wrongly believes it is a learner must not hold an
      // endless lease against votes.
      if (this.lead !== null) this.#pokeLeader(this.lead);
      else for (const v of [...this.voters].sort()) this.#pokeLeader(v);
    }
  }

  #tickLeader(): void {
    this.#heartbeatElapsed++;
    this.#electionElapsed++;
    if (this.#electionElapsed >= this.#electionTimeout) {
      this.#electionElapsed = 0;
      if (this.#checkQuorum && !this.#quorumRecentlyActive()) {
        this.becomeFollower(this.term, null);
        return;
      }
      if (this.leadTransferee !== null) this.#abortLeaderTransfer();
    }
    if (this.#maybeQuiesce()) return;
    if (this.#heartbeatElapsed >= this.#heartbeatTimeout) {
      this.#heartbeatElapsed = 0;
      this.#broadcastHeartbeat(this.#skipHeartbeats);
    }
  }

  #campaign(kind: CampaignKind): void {
    let voteTerm: Term;
    let type: "vote" | "prevote";
    if (kind === "pre-election") {
      this.#becomePreCandidate();
      voteTerm = toTerm(this.term + 1);
      type = "prevote";
    } else {
      this.#becomeCandidate();
      voteTerm = this.term;
      type = "vote";
    }
    if (this.#poll(this.id, true) === "won") {
      // A single-voter group wins at once.
      if (kind === "pre-election") this.#campaign("election");
      else this.#becomeLeader();
      return;
    }
    const lastIndex = this.log.lastIndex();
    const lastTerm = this.log.lastTerm();
    const { commit, commitTerm } = this.#commitFor(lastIndex);
    for (const id of [...this.voters].sort()) {
      if (id === this.id) continue;
      this.#send({
        type,
        from: this.id,
        to: id,
        term: voteTerm,
        lastIndex,
        lastTerm,
        transfer: kind === "transfer",
        commit,
        commitTerm,
      });
    }
  }

  #poll(id: NodeId, granted: boolean): "won" | "lost" | "pending" {
    if (!this.#votes.has(id)) this.#votes.set(id, granted);
    let yes = 0;
    let no = 0;
    for (const v of this.voters) {
      const g = this.#votes.get(v);
      if (g === true) yes++;
      else if (g === false) no++;
    }
    const q = this.quorum();
    if (yes >= q) return "won";
    if (no > this.voters.size - q) return "lost";
    return "pending";
  }

  /**
   * A (pre-)vote request. A recovering member also asks that the candidate's log be at least as
   * up to date as the log it lost. Why that is enough (leader completeness, S3): a vote needs
   * the candidate's log to be at least as up to date as the voter's because the voter holds every
   * entry whose commit counted its acknowledgement, and §5.4.3's argument then puts each such
   * entry in the candidate's log. Its steps use only the last entry (index, term) of the voter's
   * log and the fact that the log held the entry, never the entries themselves: that the
   * candidate's last term is above the voter's (then the leader that wrote it held the entry), or
   * equal with an index as high (then log matching, S2, makes the voter's log a prefix of the
   * candidate's). Every entry this member acknowledged before its loss was in the lost log (an
   * acknowledgement follows the write), and every one since is in its log now; the lost log's
   * last entry is what the driver kept. Judged against both, the vote is what a member that lost
   * nothing would give. Pre-votes too: a pre-election won with it would lead to a real one.
   */
  #handleVote(m: VoteMessage): void {
    const respType = m.type === "vote" ? "vote-resp" : "prevote-resp";
    const canVote =
      this.vote === m.from ||
      (this.vote === null && this.lead === null) ||
      (m.type === "prevote" && m.term > this.term);
    if (canVote && this.#holdsLost(m) && this.log.isUpToDate(m.lastIndex, m.lastTerm)) {
      // A granted pre-vote answers with the term it was asked about, so the pre-candidate counts it.
      this.#send({
        type: respType,
        from: this.id,
        to: m.from,
        term: m.term,
        reject: false,
        commit: logIndex(0),
        commitTerm: toTerm(0),
      });
      if (m.type === "vote") {
        this.#electionElapsed = 0;
        this.vote = m.from;
      }
    } else {
      this.#refuseVote(m);
      if (m.type === "vote") this.#yieldToBetterCandidate(m);
    }
  }

  /** Refuses a (pre-)vote, in our term, with what the candidate may learn is committed. */
  #refuseVote(m: VoteMessage): void {
    this.#send({
      type: m.type === "vote" ? "vote-resp" : "prevote-resp",
      from: this.id,
      to: m.from,
      term: this.term,
      reject: true,
      ...this.#commitFor(m.lastIndex),
    });
  }

  /**
   * Our commit index, capped at `upTo` (the last index of the log it is for), and our term
   * there, as a (pre-)vote request or refusal carries them; 0 and 0 if that term is gone.
   */
  #commitFor(upTo: LogIndex): { commit: LogIndex; commitTerm: Term } {
    const commit = logIndex(Math.min(this.log.committed, upTo));
    const commitTerm = this.log.term(commit);
    return commitTerm === null
      ? { commit: logIndex(0), commitTerm: toTerm(0) }
      : { commit, commitTerm };
  }

  /**
   * A (pre-)vote request or refusal says its sender's entry at `commit`, of term `commitTerm`,
   * is committed. If ours there has the same term, our log up to it is the sender's (log
   * matching), so it is committed here too: a commit index only ever names committed entries. A
   * leader takes nothing from it (a late refusal of the election it won; a request in its term):
   * its commit index moves only by counting its term's entries (§5.4.2), which the simulation
   * checks.
   *
   * It is how members learn of a configuration change that committed without their knowing,
   * when its leader is gone and the only ones that knew cannot lead. A voter removed by it has
   * applied it, so it never campaigns, and refuses every candidate whose log is shorter; the
   * others, counting it, could never win without it (etcd-io/etcd#10563; the driver simulation's
   * seeds 988640 and 988008, 5 nodes): its refusal tells them. A learner it promoted, its log
   * longer than the candidate's that knows, refuses that candidate and, a learner still, never
   * campaigns: the request tells it (etcd-io/etcd#12359, whose proposed fix, etcd-io/etcd#12435,
   * carried the commit both ways too, and was not merged). A (pre-)candidate that now holds a
   * committed, unapplied change stops campaigning, as it would not start on one
   * (hasUnappliedConfChange): it campaigns again on the configuration it applies.
   */
  #learnCommit(commit: LogIndex, commitTerm: Term): void {
    if (this.role === "leader") return;
    if (commit <= this.log.committed || !this.log.matchTerm(commit, commitTerm)) return;
    this.log.commitTo(commit);
    const campaigning = this.role === "candidate" || this.role === "pre-candidate";
    if (campaigning && this.hasUnappliedConfChange()) {
      this.becomeFollower(this.term, null);
    }
  }

  /** Whether a candidate's log holds what this member lost with its log (if it lost any). */
  #holdsLost(m: VoteMessage): boolean {
    const lost = this.bugs.votesWithLostLog === true ? null : this.#lostLast;
    return (
      lost === null ||
      m.lastTerm > lost.term ||
      (m.lastTerm === lost.term && m.lastIndex >= lost.index)
    );
  }

  /**
   * A vote request this member refused (its term is behind ours, or we voted in it already)
   * came from a candidate whose log is ahead of ours: with no leader to follow, we draw a new
   * election timeout, so that the candidate, which learns our term from the refusal, campaigns
   * again before we do. We cannot get its vote, and its log is the better one to elect. Without
   * it, a member whose configuration is stale (it sends that candidate no vote request, so the
   * candidate hears of our terms only from refusals) campaigns at its own pace, and the two
   * take turns in which we always come first, for as long as the phases of their timers hold
   * (the core simulation's seed 7705622, 3 nodes, PreVote off: 18 refusals in a row). A
   * pre-vote does not: pre-votes change no term.
   */
  #yieldToBetterCandidate(m: VoteMessage): void {
    if (this.lead !== null) return;
    const myTerm = this.log.lastTerm();
    const ahead =
      m.lastTerm > myTerm || (m.lastTerm === myTerm && m.lastIndex > this.log.lastIndex());
    if (!ahead || !this.#holdsLost(m)) return;
    this.#restartElectionTimer();
  }

  /** Election time starts over, against a newly drawn timeout in [timeout, 2 × timeout). */
  #restartElectionTimer(): void {
    this.#electionElapsed = 0;
    this.#randomizedElectionTimeout = this.#electionTimeout + this.#rng.int(this.#electionTimeout);
  }

  /**
   * Whether a committed conf change is not applied yet: the configuration this member acts on
   * may be stale (it neither campaigns nor leads on it).
   */
  hasUnappliedConfChange(): boolean {
    // Those up to #confIndex took effect at construction.
    const from = Math.max(this.log.applied, this.#confIndex) + 1;
    if (this.log.committed < from) return false;
    const ents =
      this.log.slice(
        logIndex(Math.max(from, this.log.firstIndex())),
        logIndex(this.log.committed + 1),
        Infinity,
      ) ?? [];
    return ents.some((e) => e.type === "conf-change");
  }

  /**
   * The index of a committed or uncommitted, unapplied entry removing this member or demoting it
   * to learner, else 0.
   */
  #unappliedRemovalOfSelf(): LogIndex {
    return this.#unappliedRemovalOf(this.id);
  }

  /**
   * The index of the last committed or uncommitted, unapplied entry removing member `id` or
   * demoting it to learner, else 0.
   */
  #unappliedRemovalOf(id: NodeId): LogIndex {
    const from = Math.max(this.log.applied, this.#confIndex, this.log.firstIndex() - 1) + 1;
    const ents = this.log.slice(logIndex(from), logIndex(this.log.lastIndex() + 1), Infinity);
    let found = logIndex(0);
    for (const e of ents ?? []) {
      if (e.type !== "conf-change") continue;
      const cc = decodeConfChange(e.data);
      if (leavesVoters(cc, id)) found = e.index;
    }
    return found;
  }

  // ── per-role message handling ───────────────────────────────────────────────────────────────

  #stepFollower(m: Message): void {
    switch (m.type) {
      case "append":
        this.#electionElapsed = 0;
        this.lead = m.from;
        this.#handleAppend(m);
        return;
      case "heartbeat":
        this.#electionElapsed = 0;
        this.lead = m.from;
        this.#handleHeartbeat(m);
        return;
      case "snapshot":
        this.#electionElapsed = 0;
        this.lead = m.from;
        this.#handleSnapshot(m);
        return;
      case "timeout-now":
        // Leadership transfer: campaign at once, skipping pre-vote and leases.
        this.hup("transfer");
        return;
      default:
        return;
    }
  }

  #stepCandidate(m: Message): void {
    switch (m.type) {
      case "append":
        this.becomeFollower(m.term, m.from);
        this.#handleAppend(m);
        return;
      case "heartbeat":
        this.becomeFollower(m.term, m.from);
        this.#handleHeartbeat(m);
        return;
      case "snapshot":
        this.becomeFollower(m.term, m.from);
        this.#handleSnapshot(m);
        return;
      case "vote-resp":
      case "prevote-resp":
        this.#handleVoteResponse(m);
        return;
      default:
        return;
    }
  }

  #handleVoteResponse(m: VoteResponseMessage): void {
    const expected = this.role === "pre-candidate" ? "prevote-resp" : "vote-resp";
    if (m.type !== expected) return;
    switch (this.#poll(m.from, !m.reject)) {
      case "won":
        if (this.role === "pre-candidate") {
          this.#campaign("election");
        } else {
          this.#becomeLeader();
          this.#broadcastAppend();
        }
        return;
      case "lost":
        this.becomeFollower(this.term, null);
        return;
      case "pending":
        return;
    }
  }

  #stepLeader(m: Message): void {
    switch (m.type) {
      case "append-resp":
        this.#handleAppendResponse(m);
        return;
      case "heartbeat-resp":
        this.#handleHeartbeatResponse(m);
        return;
      default:
        // A wake message has done its work in step().
        return;
    }
  }

  // ── replication: follower side ──────────────────────────────────────────────────────────────

  #handleAppend(m: AppendMessage): void {
    if (m.prevIndex < this.log.committed) {
      if (m.noReply) return;
      this.#replyAppend(m.from, this.log.committed, false, logIndex(0), toTerm(0));
      return;
    }
    const lastNew = this.log.maybeAppend(m.prevIndex, m.prevTerm, m.commit, m.entries);
    if (this.bugs.followerCommitWithoutMatch === true) {
      this.log.commitTo(logIndex(Math.min(m.commit, this.log.lastIndex())));
    }
    if (lastNew !== null) {
      this.#maybeEndRecovery();
      if (m.noReply) return;
      this.#replyAppend(m.from, lastNew, false, logIndex(0), toTerm(0));
      return;
    }
    // Tell the leader where our logs may agree so it can skip a whole term per round trip.
    const probe = logIndex(Math.min(m.prevIndex, this.log.lastIndex()));
    const hint = this.log.findConflictByTerm(probe, m.prevTerm);
    this.#replyAppend(m.from, m.prevIndex, true, hint.index, hint.term);
  }

  /** An append's (or a snapshot's) answer, to `to` (one object literal: no closure, no spread). */
  #replyAppend(
    to: NodeId,
    index: LogIndex,
    reject: boolean,
    hintIndex: LogIndex,
    hintTerm: Term,
  ): void {
    this.#send({
      type: "append-resp",
      from: this.id,
      to,
      term: this.term,
      index,
      reject,
      hintIndex,
      hintTerm,
      // A refusal from a recovering member: what it acknowledged before is gone.
      lost: reject && this.#lostLast !== null,
    });
  }

  /**
   * A recovering member whose log is now at least as up to date as the one it lost holds every
   * entry that log held and any commit counted it for, so it votes and campaigns as any other
   * member again. Why: every such entry e was committed in a term t ≤ the lost log's last term
   * (a leader commits by counting only entries of its own term, §5.4.2, so the acknowledged
   * entry of term t that carried e's commit was in the lost log too). If this log's last term is
   * above the lost log's, the leader that wrote its last entry held e (leader completeness), at
   * an index below that entry's (terms never decrease along a log), and log matching puts e in
   * this log. If it is the same term with an index as high, this log and the lost one both hold
   * entries of that term's one leader, so the lost log is a prefix of this one (log matching).
   * Everything this log holds came from leaders (appends or snapshots), never from the lost log.
   */
  #maybeEndRecovery(): void {
    const lost = this.#lostLast;
    if (lost === null) return;
    const lastTerm = this.log.lastTerm();
    if (lastTerm > lost.term || (lastTerm === lost.term && this.log.lastIndex() >= lost.index)) {
      this.#lostLast = null;
    }
  }

  /** Answers heartbeat `m`, whose commit is past this log, with a refusal marked `lost`. */
  #refuseAsLost(m: HeartbeatMessage): void {
    this.#send({
      type: "append-resp",
      from: this.id,
      to: m.from,
      term: this.term,
      index: m.commit,
      reject: true,
      hintIndex: this.log.lastIndex(),
      hintTerm: this.log.lastTerm(),
      lost: true,
    });
  }

  #handleHeartbeat(m: HeartbeatMessage): void {
    const last = this.log.lastIndex();
    if (m.commit > last && m.term === this.#lostInTerm) {
      // The leader of the term this member lost its log in counts it as holding what it
      // acknowledged then (its match index: a heartbeat's commit is at most that), and, idle,
      // sends it no append to refuse. A refusal marked `lost` tells it to forget that match and
      // refill this member. Since the loss, in this term, this member took entries from that
      // leader alone, so its log is a prefix of the leader's: committing up to its end is safe.
      this.log.commitTo(last);
      this.#refuseAsLost(m);
    } else if (m.commit > last) {
      // A commit past this log from any other leader: it counts this member as holding entries
      // it does not have (its log lost undetected), or the heartbeat is forged. Nothing is
      // committed (the entries here may not be the leader's), and the node does not fail (one
      // forged heartbeat failed it, every shard with it: a review of 2026-12-06): the refusal
      // marked `lost` has a real leader forget the match and refill this member.
      this.#refuseAsLost(m);
      return;
    } else {
      this.log.commitTo(m.commit);
    }
    if (m.quiesce && this.#holdsWholeLog(m)) {
      // No answer: the leader sleeps already, and it has nothing to learn from one.
      this.#quiesced = true;
      return;
    }
    if (m.noReply && !m.quiesce) return;
    this.#send({
      type: "heartbeat-resp",
      from: this.id,
      to: m.from,
      term: this.term,
      readSeq: m.readSeq,
    });
    // The leader sleeps, but this follower cannot: the leader must catch it up.
    if (m.quiesce) this.#pokeLeader(m.from);
  }

  /**
   * Whether this follower's log ends exactly at the commit index of `m`, its leader's quiesce
   * heartbeat, with an entry of the leader's term (so the log is the leader's: the leader only
   * quiesces once its last entry, of its own term, is committed), and knows it committed.
   */
  #holdsWholeLog(m: HeartbeatMessage): boolean {
    return (
      this.log.lastIndex() === m.commit &&
      this.log.committed === m.commit &&
      this.log.lastTerm() === m.term
    );
  }

  #handleSnapshot(m: SnapshotMessage): void {
    const index = this.#restore(m.snapshot) ? this.log.lastIndex() : this.log.committed;
    this.#maybeEndRecovery();
    this.#replyAppend(m.from, index, false, logIndex(0), toTerm(0));
  }

  #restore(s: Snapshot): boolean {
    if (s.meta.index <= this.log.committed) return false;
    // A snapshot whose configuration leaves us out was taken before we were added (or after we
    // were removed). Installing it would make this member believe it is not one: a re-added
    // voter would neither campaign nor count itself until the log caught up. Ignore it, as etcd
    // does; the leader's driver must send a newer snapshot, taken after our addition.
    const conf = s.meta.conf;
    if (!conf.voters.includes(this.id) && !conf.learners.includes(this.id)) return false;
    if (this.log.matchTerm(s.meta.index, s.meta.term)) {
      // We already hold that entry: the snapshot only tells us it is committed.
      this.log.commitTo(s.meta.index);
      return false;
    }
    this.log.restore(s);
    this.#setConf(s.meta.conf);
    // The configuration is the snapshot's now, as of its index: every conf change past it is
    // to apply. A state machine ahead of its log (stateApplied) may be ahead of a snapshot its
    // leader sends too (a new leader whose apply lags its commit): the changes between the
    // snapshot and stateApplied, taken to be in effect, were not applied again, and this core
    // kept the snapshot's configuration while its driver, which applies every entry past the
    // snapshot, moved on.
    this.#confIndex = s.meta.index;
    return true;
  }

  #setConf(conf: ConfState): void {
    this.voters.clear();
    this.learners.clear();
    this.prs.clear();
    this.#peerList = null;
    for (const v of conf.voters) this.voters.add(v);
    for (const l of conf.learners) this.learners.add(l);
    const next = logIndex(this.log.lastIndex() + 1);
    for (const id of [...conf.voters, ...conf.learners]) {
      const pr = new Progress(next, this.#maxInflight, this.#maxInflightBytes, id === this.id);
      if (id === this.id) pr.match = this.log.lastIndex();
      this.prs.set(id, pr);
    }
  }

  // ── replication: leader side ────────────────────────────────────────────────────────────────

  #appendEntries(entries: ReadonlyArray<Pick<Entry, "type" | "data">>): LogIndex {
    let index = this.log.lastIndex();
    const full = entries.map((e): Entry => {
      index = logIndex(index + 1);
      return { term: this.term, index, type: e.type, data: e.data };
    });
    const last = this.log.append(full);
    (this.prs.get(this.id) as Progress).maybeUpdate(last);
    // Alone in the group, the leader commits on its own.
    this.#maybeCommit();
    return last;
  }

  #handleAppendResponse(m: AppendResponseMessage): void {
    const pr = this.prs.get(m.from);
    if (pr === undefined) return;
    // Every answer names an index of this leader's log (its log never shrinks in its term): one
    // beyond it is forged or corrupt, and counted as a match it would commit entries that only
    // this leader holds once they are written.
    if (m.index > this.log.lastIndex()) return;
    pr.recentActive = true;
    if (m.reject) {
      let next = m.hintIndex;
      if (m.hintTerm > 0) next = this.log.findConflictByTerm(m.hintIndex, m.hintTerm).index;
      if (m.lost && pr.match > next && pr.state !== "snapshot") {
        // The follower lost its log (RaftConfig.recoveringUntil): the match counted from what
        // it acknowledged before is wrong, and probing never goes below it. Forget it and
        // probe from the hint; its acknowledgements will raise the match again. (A lower match
        // lowers no commit index: only the next ones count it. A refusal marked `lost` but
        // stale, answering an append older than an acknowledgement, costs a probe.)
        pr.forgetMatch(logIndex(Math.min(m.index, next + 1)));
        this.#sendAppend(m.from);
        return;
      }
      if (pr.maybeDecrTo(m.index, next)) {
        if (pr.state === "replicate") pr.becomeProbe();
        this.#sendAppend(m.from);
      }
      return;
    }
    const wasPaused = pr.isPaused();
    // An answer that only confirms the known match still ends probing (e.g. after the driver
    // reported the follower unreachable while it was idle).
    const confirmsProbe = pr.state === "probe" && pr.match === m.index;
    if (!pr.maybeUpdate(m.index) && !confirmsProbe) return;
    switch (pr.state) {
      case "probe":
        pr.becomeReplicate();
        break;
      case "snapshot":
        if (pr.match + 1 >= this.log.firstIndex()) {
          pr.becomeProbe();
          pr.becomeReplicate();
        }
        break;
      case "replicate":
        pr.inflights.freeLE(m.index);
        break;
    }
    const before = this.log.committed;
    // A configuration change's commit is never deferred: a follower applies it only once it
    // learns it is committed, and should the leader fail meanwhile the followers would elect
    // by the configuration before it, whose voters may be gone for good (a replaced replica).
    if (this.#maybeCommit() && (!this.#deferCommit || this.pendingConfIndex > before)) {
      this.#broadcastCommit();
    } else if (wasPaused) {
      this.#sendAppend(m.from);
    }
    // Fill the in-flight window with whatever else is ready to go.
    while (this.#maybeSendAppend(m.from, false)) {
      // keep sending
    }
    if (m.from === this.leadTransferee && pr.match === this.log.lastIndex())
      this.#sendTimeoutNow(m.from);
  }

  #handleHeartbeatResponse(m: HeartbeatResponseMessage): void {
    const pr = this.prs.get(m.from);
    if (pr === undefined) return;
    pr.recentActive = true;
    pr.probeSent = false;
    if (pr.state === "replicate" && pr.inflights.isFull()) {
      // The window may be full of lost appends: an empty append (outside the window) makes the
      // follower answer, and a rejection sends it back to probing.
      this.#sendEmptyAppend(m.from, pr);
    } else if (pr.match < this.log.lastIndex() || pr.state === "probe") {
      this.#sendAppend(m.from);
    }
    // A round this leader has not started yet (a forged or corrupt answer) confirms nothing: it
    // would count as confirming every later read of the term.
    if (m.readSeq > pr.readAck && m.readSeq <= this.#readSeq) {
      pr.readAck = m.readSeq;
      this.#releaseReads();
    }
  }

  #sendAppend(to: NodeId): void {
    this.#maybeSendAppend(to, true);
  }

  /**
   * Sends `to` what it needs next, unless it is paused; returns whether a message was sent.
   * `commitOnly`: sent because the commit index advanced (see omitRedundantReplies).
   */
  #maybeSendAppend(to: NodeId, sendIfEmpty: boolean, commitOnly = false): boolean {
    const pr = this.prs.get(to);
    if (pr === undefined || pr.isPaused()) return false;
    const prevIndex = logIndex(pr.next - 1);
    const prevTerm = this.log.term(prevIndex);
    const entries =
      prevTerm === null
        ? null
        : this.log.slice(pr.next, logIndex(this.log.lastIndex() + 1), this.#maxMsgBytes);
    if (entries !== null && entries.length === 0 && !sendIfEmpty) return false;
    if (prevTerm === null || entries === null) {
      // The follower needs entries we compacted away.
      if (!pr.recentActive) return false;
      const snapshot = this.log.snapshot();
      pr.becomeSnapshot(snapshot.meta.index);
      this.#send({ type: "snapshot", from: this.id, to, term: this.term, snapshot });
      return true;
    }
    this.#send({
      type: "append",
      from: this.id,
      to,
      term: this.term,
      prevIndex,
      prevTerm,
      entries,
      commit: this.log.committed,
      // In replicate the follower answers the appends that carried the entries before
      // prevIndex; a gap still gets its refusal.
      noReply: commitOnly && this.#omitReplies && entries.length === 0 && pr.state === "replicate",
    });
    // The follower commits no further than the last entry the append ends with.
    pr.sentCommit(Math.min(this.log.committed, prevIndex + entries.length));
    pr.appendedSinceHeartbeat = true;
    const last = entries[entries.length - 1];
    if (pr.state === "replicate" && last !== undefined) {
      pr.next = logIndex(last.index + 1);
      let bytes = 0;
      for (const e of entries) bytes += e.data.length;
      pr.inflights.add(last.index, bytes);
    } else if (pr.state === "probe") {
      pr.probeSent = true;
    }
    return true;
  }

  #sendEmptyAppend(to: NodeId, pr: Progress): void {
    const prevIndex = logIndex(pr.next - 1);
    const prevTerm = this.log.term(prevIndex);
    if (prevTerm === null) {
      // What the follower needs is compacted away: probe, which resolves to a snapshot.
      pr.becomeProbe();
      this.#sendAppend(to);
      return;
    }
    this.#send({
      type: "append",
      from: this.id,
      to,
      term: this.term,
      prevIndex,
      prevTerm,
      entries: [],
      commit: this.log.committed,
      noReply: false,
    });
    pr.sentCommit(Math.min(this.log.committed, prevIndex));
    pr.appendedSinceHeartbeat = true;
  }

  #broadcastAppend(): void {
    for (const id of this.#peers()) this.#sendAppend(id);
  }

  /** The commit index advanced: every follower hears of it, with any entries it still needs. */
  #broadcastCommit(): void {
    for (const id of this.#peers()) this.#maybeSendAppend(id, true, true);
  }

  /** With `skipFresh`, not to followers an append reached since the last tick (see the config). */
  #broadcastHeartbeat(skipFresh = false): void {
    const readSeq = this.#pendingReads.length > 0 ? this.#readSeq : 0;
    for (const id of this.#peers()) {
      const pr = this.prs.get(id) as Progress;
      const fresh = pr.appendedSinceHeartbeat;
      pr.appendedSinceHeartbeat = false;
      if (skipFresh && fresh && readSeq === 0 && pr.state === "replicate") {
        // A deferred commit index has still to reach it: an empty append (with no answer, like
        // the broadcast it stands in for) does, unless its window is full (the heartbeat then).
        if (!this.#deferCommit || pr.commitSent >= this.log.committed) continue;
        if (this.#maybeSendAppend(id, true, true)) continue;
      }
      // Never tell a follower to commit beyond what it is known to hold.
      const commit = logIndex(Math.min(pr.match, this.log.committed));
      pr.sentCommit(commit);
      this.#send({
        type: "heartbeat",
        from: this.id,
        to: id,
        term: this.term,
        commit,
        readSeq,
        quiesce: false,
        // The answer would only tell that the follower is alive, which this CheckQuorum round
        // knows already; a follower behind, probed, or with its window full must answer.
        noReply:
          this.#omitReplies &&
          readSeq === 0 &&
          pr.state === "replicate" &&
          pr.recentActive &&
          pr.match >= this.log.lastIndex() &&
          !pr.inflights.isFull(),
      });
    }
  }

  // ── quiescence ──────────────────────────────────────────────────────────────────────────────

  /**
   * Leader, on a tick: counts the ticks in a row with nothing to do, and after `quiesceTicks`
   * of them puts the group to sleep. Returns whether it did.
   */
  #maybeQuiesce(): boolean {
    if (this.#quiesceTicks === 0 || !this.#idle()) {
      this.#idleTicks = 0;
      return false;
    }
    if (++this.#idleTicks < this.#quiesceTicks) return false;
    this.#quiesced = true;
    // Every member holds the whole log (see #idle), so the commit index is everyone's, but a
    // member whose node is down: probed afresh once it is back (its in-flight appends are lost).
    for (const id of this.#peers()) {
      const pr = this.prs.get(id) as Progress;
      if (pr.match !== this.log.lastIndex()) {
        pr.becomeProbe();
        continue;
      }
      this.#send({
        type: "heartbeat",
        from: this.id,
        to: id,
        term: this.term,
        commit: this.log.committed,
        readSeq: 0,
        quiesce: true,
        noReply: false,
      });
      (this.prs.get(id) as Progress).sentCommit(this.log.committed);
    }
    return true;
  }

  /**
   * Leader: nothing in flight. Its whole log is committed and applied (so no proposal is
   * pending, and no conf change either), no read waits, no transfer runs, and every voter
   * and learner holds the whole log and is in steady replication, but those whose node the
   * driver declared down (memberDown): a quorum holds the log all the same (it is committed).
   */
  #idle(): boolean {
    const last = this.log.lastIndex();
    if (this.log.committed !== last || this.log.applied !== last) return false;
    if (this.leadTransferee !== null) return false;
    if (this.#pendingReads.length > 0 || this.#readsAwaitingCommit.length > 0) return false;
    for (const [id, pr] of this.prs) {
      if (id === this.id || (pr.match === last && pr.state === "replicate")) continue;
      if (this.#memberDown?.(id) !== true) return false;
    }
    return true;
  }

  /** Timers run again. */
  #wake(): void {
    this.#quiesced = false;
    this.#idleTicks = 0;
    if (this.role !== "leader") return;
    // The followers were quiet, not lost: give them a full election timeout to answer before
    // CheckQuorum counts them, and count only what they answer from now on. Marks set before
    // the sleep, which may have lasted any time, say nothing of whether they can be reached
    // now: counted, a leader cut off while asleep would lead on for a second election timeout.
    // Unmarked, they get heartbeats that ask for an answer (see #broadcastHeartbeat's noReply),
    // within a heartbeat interval.
    this.#electionElapsed = 0;
    for (const [id, pr] of this.prs) pr.recentActive = id === this.id;
  }

  /**
   * A local request (proposal, read, conf change, transfer): it postpones quiescence, and wakes
   * a quiesced group. A follower refuses the request (NotLeaderError) but wakes its leader, who
   * serves it once the driver forwards it, and who must not sleep while this follower ticks.
   */
  #wakeForRequest(): void {
    this.#idleTicks = 0;
    if (!this.#quiesced) return;
    const lead = this.lead;
    this.#wake();
    if (this.role !== "leader" && lead !== null) this.#pokeLeader(lead);
  }

  #pokeLeader(lead: NodeId): void {
    this.#send({ type: "wake", from: this.id, to: lead, term: this.term });
  }

  /**
   * Whether a message of the group wakes this quiesced member. Any does, and is then handled as
   * ever, but a wake message to a follower (meant for a leader; unless it comes from the
   * follower's own leader, which then leads no more: it restarted having lost its log, asks to
   * be refilled, and cannot campaign, which is how a restarted leader wakes its sleeping group
   * otherwise) and two kinds that would keep a group from ever sleeping:
   *  - a heartbeat from its leader: a sleeping follower answers it, and sleeps on. The leader
   *    heartbeats only when it is awake for a read or another follower (its appends wake the
   *    followers), and a late heartbeat, sent before the quiesce one and overtaking it, would
   *    otherwise wake the follower against a sleeping leader, and it would campaign;
   *  - a message from outside the configuration: a removed member that does not know it (it was
   *    down when its removal committed) campaigns on and on, and would wake the group each time.
   */
  #wakesOn(m: Message): boolean {
    if (!this.voters.has(m.from) && !this.learners.has(m.from)) return false;
    if (m.type === "wake") return this.role === "leader" || m.from === this.lead;
    return !(m.type === "heartbeat" && m.from === this.lead && m.term === this.term);
  }

  /**
   * A quiesced leader's acknowledgements that arrive late (answers to heartbeats or appends it
   * sent before it slept, delayed or duplicated by the network) tell it nothing it does not
   * know: they are dropped, and do not wake it. Otherwise, whenever answers take longer than a
   * tick, every quiescence would be undone at once, and the group would never sleep.
   */
  #isLateAnswer(m: Message): boolean {
    if (this.role !== "leader" || m.term !== this.term) return false;
    if (m.type === "heartbeat-resp") return true;
    return m.type === "append-resp" && !m.reject && m.index <= (this.prs.get(m.from)?.match ?? 0);
  }

  /** Advances the commit index to what a quorum of voters holds, if that entry is of this term. */
  #maybeCommit(): boolean {
    // Called for every answer a leader steps: the matches go into a scratch array, sorted in
    // place (a handful of voters: insertion sort), so the common path allocates nothing.
    const matches = this.#matchScratch;
    let n = 0;
    for (const v of this.voters) matches[n++] = this.prs.get(v)?.match ?? 0;
    if (this.bugs.countLearnersTowardCommit === true)
      for (const l of this.learners) matches[n++] = this.prs.get(l)?.match ?? 0;
    if (n === 0) return false;
    for (let i = 1; i < n; i++) {
      const x = matches[i] as number;
      let j = i - 1;
      for (; j >= 0 && (matches[j] as number) < x; j--) matches[j + 1] = matches[j] as number;
      matches[j + 1] = x;
    }
    const quorumIndex = logIndex(matches[this.quorum() - 1] as number);
    const wasCommittedInTerm = this.#committedInCurrentTerm();
    const committed = this.log.maybeCommit(
      quorumIndex,
      this.term,
      this.bugs.commitPriorTermByCounting === true,
    );
    if (committed && this.#uncommittedBytes > 0) this.#releaseCommitted();
    if (committed && !wasCommittedInTerm && this.#committedInCurrentTerm()) {
      const waiting = this.#readsAwaitingCommit;
      this.#readsAwaitingCommit = [];
      for (const ctx of waiting) this.#startRead(ctx);
    }
    return committed;
  }

  /**
   * Whether the commit index is at an entry of the current term. Once true it stays true for the
   * term (the commit index only grows, and no entry's term is above the current one), so it is
   * remembered until #reset changes the term: a leader asks at every acknowledgement.
   */
  #committedInCurrentTerm(): boolean {
    if (!this.#commitInTerm) this.#commitInTerm = this.log.term(this.log.committed) === this.term;
    return this.#commitInTerm;
  }

  #quorumRecentlyActive(): boolean {
    let active = 0;
    for (const v of this.voters) {
      const pr = this.prs.get(v);
      if (pr !== undefined && (v === this.id || pr.recentActive)) active++;
    }
    for (const [id, pr] of this.prs) pr.recentActive = id === this.id;
    return active >= this.quorum();
  }

  /**
   * The other members, sorted: built when first asked for after `prs` gained or lost a member
   * (every place that adds or removes one resets it), not on every broadcast. Never changed in
   * place, so a loop over it is not disturbed by a change made meanwhile.
   */
  #peers(): readonly NodeId[] {
    return (this.#peerList ??= [...this.prs.keys()].filter((id) => id !== this.id).sort());
  }

  // ── ReadIndex ───────────────────────────────────────────────────────────────────────────────

  #startRead(context: Uint8Array): void {
    if (
      (this.voters.size === 1 && this.voters.has(this.id)) ||
      this.bugs.readWithoutQuorum === true
    ) {
      this.#readState({ index: this.log.committed, context });
      return;
    }
    this.#readSeq++;
    this.#pendingReads.push({ seq: this.#readSeq, index: this.log.committed, context });
    this.#broadcastHeartbeat();
  }

  /** Emits every pending read whose round a quorum of voters has confirmed. */
  #releaseReads(): void {
    if (this.#pendingReads.length === 0) return;
    const acks: number[] = [];
    for (const v of this.voters)
      acks.push(v === this.id ? this.#readSeq : (this.prs.get(v)?.readAck ?? 0));
    acks.sort((a, b) => b - a);
    const confirmed = acks[this.quorum() - 1] ?? 0;
    while (
      this.#pendingReads.length > 0 &&
      (this.#pendingReads[0] as PendingRead).seq <= confirmed
    ) {
      const r = this.#pendingReads.shift() as PendingRead;
      this.#readState({ index: r.index, context: r.context });
    }
  }

  // ── leadership transfer & configuration ─────────────────────────────────────────────────────

  #sendTimeoutNow(to: NodeId): void {
    this.#send({ type: "timeout-now", from: this.id, to, term: this.term });
  }

  #abortLeaderTransfer(): void {
    this.leadTransferee = null;
  }

  #validateConfChange(cc: ConfChange): void {
    const isVoter = this.voters.has(cc.node);
    const isLearner = this.learners.has(cc.node);
    switch (cc.type) {
      case "add-learner":
        // A voter is demoted. One voter changes, as in a removal: a single-server change, safe
        // without joint consensus (etcd-io/raft allows it in a simple change too).
        if (isVoter && this.voters.size === 1)
          throw new InvalidRaftRequestError(`cannot demote the last voter ${cc.node}`);
        if (isLearner) throw new InvalidRaftRequestError(`${cc.node} is already a learner`);
        return;
      case "add-voter":
        if (isVoter) throw new InvalidRaftRequestError(`${cc.node} is already a voter`);
        return;
      case "remove":
        if (!isVoter && !isLearner) throw new InvalidRaftRequestError(`${cc.node} is not a member`);
        if (isVoter && this.voters.size === 1)
          throw new InvalidRaftRequestError(`cannot remove the last voter ${cc.node}`);
        return;
    }
  }

  #requireLeader(): void {
    if (this.role !== "leader") throw new NotLeaderError(this.lead);
  }

  #send(m: Message): void {
    if (this.msgs === NO_MESSAGES) this.msgs = [m];
    else this.msgs.push(m);
  }

  #readState(rs: ReadState): void {
    if (this.readStates === NO_READ_STATES) this.readStates = [rs];
    else this.readStates.push(rs);
  }
}

/**
 * Whether `cc`, proposed while `id` is a voter, takes `id` out of the voters: its removal, or its
 * demotion to learner (a leader is a voter, so an add-learner naming it demotes it).
 */
function leavesVoters(cc: ConfChange, id: NodeId): boolean {
  return cc.node === id && cc.type !== "add-voter";
}

/**
 * Whether an append is one a leader could have sent: its entries follow (prevIndex, prevTerm)
 * one index at a time, with terms that never decrease, from prevTerm up to the leader's term.
 * The follower's log code takes entries by position and trusts their indexes and terms. Its
 * membership changes decode: the core and the driver apply them, and one that does not decode
 * failed the node at its apply and at every restart after (a review of 2026-12-06; the driver
 * checks KV and meta commands the same way before the core sees them: Peers.receive).
 */
function appendIsWellFormed(m: AppendMessage): boolean {
  if (m.prevTerm > m.term) return false;
  let prevTerm = m.prevTerm;
  for (let k = 0; k < m.entries.length; k++) {
    const e = m.entries[k] as Entry;
    if (e.index !== m.prevIndex + 1 + k || e.term < prevTerm || e.term > m.term) return false;
    if (e.type === "conf-change" && !decodesAsConfChange(e.data)) return false;
    prevTerm = e.term;
  }
  return true;
}

function decodesAsConfChange(data: Uint8Array): boolean {
  try {
    decodeConfChange(data);
    return true;
  } catch {
    return false;
  }
}
