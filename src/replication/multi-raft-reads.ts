/**
 * The multi-raft driver's reads: a key's read, the ReadIndex rule every linearizable read
 * waits on (readBarrier: a sole voter's fast path, a follower's read index asked of its leader,
 * a leader's read point confirmed by its peers' terms or by Raft's ReadIndex), and the two
 * questions peers ask of this node's groups for their reads (confirmTerms, readIndexAsLeader).
 */
import { nodeOfReplica } from "../cluster/index.ts";
import { deadlineOn } from "../common/deadline-clock.ts";
import { type NodeId, nodeId, NotLeaderError } from "../raft/index.ts";
import type { Clock } from "./engine.ts";
import {
  type DriverTestingBugs,
  leaderNode,
  type MultiRaftOptions,
  type ShardTable,
} from "./multi-raft-options.ts";
import { REQUEST_OVERHEAD_BYTES, type RequestBudget } from "./request-budget.ts";
import { type ClientCall, ReadCancelledError, ReadPastDeadlineError } from "./request-errors.ts";
import type { PeerReport, ShardReplica } from "./shard.ts";
import type { StoredItem } from "./state-machine.ts";
import { type ReadVoucher, type TermCheck, TermConfirmer } from "./term-confirm.ts";

/**
 * The longest delay a timer takes: Node fires one set past 2^31-1 ms (24.8 days) after 1 ms. A
 * read whose deadline is further off sets no timer for it: what it waits for ends sooner on its
 * own (the read index call's and the term checks' timeouts).
 */
const MAX_TIMER_MS = 0x7fffffff;

/**
 * Whether a serializable read of `shard` may be served from this replica: a voter of its group
 * as this replica knows the group, not being refilled after its directory was lost (refill.ts;
 * its state is older than what it served before). A serializable read may be stale, never
 * made of a state the shard never had as a whole: a move's learner, or a replica created here
 * that has not yet learnt its group's configuration, holds nothing or a part of the log until
 * its snapshot or the log's end arrives (a group promotes a learner only once it has caught
 * up). `cairn backup --serializable` during a move came out "whole" with shards empty or half
 * read from such learners.
 */
export function servesSerializable(shard: ShardReplica): boolean {
  return shard.refill === null && shard.raw.voters.has(shard.raw.id);
}

/**
 * A serializable read of `shard` may be served from this replica (servesSerializable); else
 * the read goes to the leader (NotLeaderError naming it), or a scan asks the next replica.
 */
export function assertServesSerializable(shard: ShardReplica): void {
  if (!servesSerializable(shard)) throw new NotLeaderError(leaderNode(shard.raw.lead));
}

/** What reads need of the driver. */
export interface ReadsHost {
  readonly options: Pick<
    MultiRaftOptions,
    "transport" | "singleVoterReadFastPath" | "remoteReadIndex" | "confirmTerms"
  >;
  readonly shards: ShardTable;
  readonly clock: Clock;
  readonly testingBugs: DriverTestingBugs;
  readonly replicaId: NodeId;
  readonly budget: RequestBudget;
  /** The node is closed (confirmTerms answers no). */
  closed(): boolean;
  assertOpen(): void;
  checkShardId(id: number): void;
  shardOf(key: Uint8Array): number;
  /** The shard open here for a request, opened if this node replicates it (else NotLeaderError). */
  shardForRequest(id: number): Promise<ShardReplica>;
  /** The open shard `id`, opened now if needed. */
  shard(id: number): Promise<ShardReplica>;
  /** Shard `id` is being opened here. */
  opening(id: number): boolean;
  /** The group has input for the next round. */
  markDirty(s: ShardReplica): void;
  /** Hands the group a peer report (multi-raft-peers: a leader down, a commit wanted). */
  report(shard: number, report: PeerReport): void;
}

export class Reads {
  readonly #host: ReadsHost;
  /** Coalesced leadership confirmation of reads (options.confirmTerms); null without it. */
  readonly #confirmer: TermConfirmer | null;
  #readSeq = 0;

  constructor(host: ReadsHost) {
    this.#host = host;
    const confirmTerms = host.options.confirmTerms;
    this.#confirmer =
      confirmTerms === undefined
        ? null
        : new TermConfirmer(confirmTerms, {
            confirmByEarlierCall: host.testingBugs.confirmByEarlierCall === true,
          });
  }

  /**
   * Reads a key; linearizable reads first confirm leadership and wait for the apply (ReadIndex),
   * until `deadline` at most: its call's, on deadlineClock(), or until `call` is cancelled
   * (KvStore; readBarrier).
   */
  async get(
    key: Uint8Array,
    linearizable: boolean,
    deadline = Infinity,
    call: ClientCall | null = null,
  ): Promise<StoredItem | null> {
    this.#host.assertOpen();
    const id = this.#host.shardOf(key);
    // On a single node, a shard never opened was never written (writes open it first): the
    // key is absent, and a read must not create the shard. In a cluster the shard may exist on
    // the other replicas only: the read must go through the group.
    if (
      this.#host.options.transport === undefined &&
      !this.#host.shards.has(id) &&
      !this.#host.opening(id)
    ) {
      return null;
    }
    const shard = await this.#host.shardForRequest(id);
    if (linearizable) await this.readBarrier(shard, deadline, call);
    else {
      await this.untilReplayed([shard], deadline, call);
      assertServesSerializable(shard);
    }
    return shard.sm.get(key);
  }

  /**
   * Waits until each of `shards` has applied what was committed before it opened here (its
   * replay, from its own log), until `deadline` at most or `call` is cancelled: a serializable
   * read then sees at least what the replica served before a restart, and its group's
   * configuration, which a replica learns from that log unless its tables hold it
   * (servesSerializable). A replica being refilled has no such log; it is refused anyway. Most
   * have replayed: a scan's thousand shards cost a pass over them, no promise each.
   */
  async untilReplayed(
    shards: Iterable<ShardReplica>,
    deadline: number,
    call: ClientCall | null = null,
  ): Promise<void> {
    this.#host.assertOpen();
    const replaying: ShardReplica[] = [];
    for (const s of shards) if (!s.isReplayed() && s.refill === null) replaying.push(s);
    if (replaying.length === 0) return;
    const until = deadlineOn(this.#host.clock.now(), deadline);
    if (call?.cancelled === true) throw new ReadCancelledError();
    this.#host.budget.reserve(REQUEST_OVERHEAD_BYTES);
    try {
      for (const s of replaying) this.#host.markDirty(s);
      await Promise.all(replaying.map((s) => s.waitApplied(s.replayTo, undefined, until, call)));
    } finally {
      this.#host.budget.unreserve(REQUEST_OVERHEAD_BYTES);
    }
  }

  /**
   * Waits until the meta group's state here is as recent as any acknowledged meta command
   * (a ReadIndex barrier on shard 0), until `deadline` at most or `call` is cancelled
   * (readBarrier).
   */
  async syncMeta(deadline = Infinity, call: ClientCall | null = null): Promise<void> {
    this.#host.assertOpen();
    await this.readBarrier(await this.#host.shard(0), deadline, call);
  }

  /**
   * Waits until a linearizable read of `shard` may be served from its state machine: once it has
   * applied everything committed when the read arrived (the ReadIndex rule). A group whose only
   * voter is this node, leading, knows its commit index covers every acknowledged write (a
   * write is acknowledged after its commit is persisted and it is applied; no other member can
   * lead without a configuration change), so it needs no round trip, only that wait: right
   * after a restart the replay may still be applying entries below that index. Other groups
   * confirm leadership with ReadIndex.
   *
   * A read with a `deadline` (its call's, on deadlineClock(); Infinity: none) stops waiting then
   * (ReadPastDeadlineError, retryable), whatever it waits for, and gives its share of the request
   * budget back: its client has gone, and reads whose calls had tiny deadlines otherwise held
   * the budget for the driver's whole request timeout, every other request refused meanwhile.
   * So does a read whose client's `call` is cancelled (the client cancelled it, or its
   * connection closed; ReadCancelledError): a client sending no deadline and cancelling at once
   * otherwise held the budget for that whole timeout too. Only reads: a write proposed is in
   * the log whether its client waits or not.
   */
  async readBarrier(
    shard: ShardReplica,
    deadline = Infinity,
    call: ClientCall | null = null,
  ): Promise<void> {
    this.#host.assertOpen();
    // The deadline on the driver's clock, which need not be deadlineClock().
    const arrived = this.#host.clock.now();
    const until = deadlineOn(arrived, deadline);
    if (
      this.#host.options.singleVoterReadFastPath !== false &&
      shard.raw.role === "leader" &&
      shard.raw.isSoleVoter()
    ) {
      const index = this.#host.testingBugs.staleReadAfterRestart ? 0 : shard.raw.commitIndex;
      if (index <= shard.sm.appliedIndex) return;
      if (arrived >= until) throw new ReadPastDeadlineError(0);
      if (call?.cancelled === true) throw new ReadCancelledError();
      this.#host.budget.reserve(REQUEST_OVERHEAD_BYTES);
      try {
        await shard.waitApplied(index, undefined, until, call);
      } finally {
        this.#host.budget.unreserve(REQUEST_OVERHEAD_BYTES);
      }
      return;
    }
    const remote = this.#host.options.remoteReadIndex;
    if (arrived >= until) throw new ReadPastDeadlineError(0);
    if (call?.cancelled === true) throw new ReadCancelledError();
    this.#host.budget.reserve(REQUEST_OVERHEAD_BYTES);
    try {
      if (remote !== undefined && shard.raw.role !== "leader") {
        // A follower's read: the leader confirms its leadership and names its commit index;
        // the read is served here once this replica has applied that far.
        const lead = shard.raw.lead;
        if (lead === null) throw new NotLeaderError(null);
        const since = this.#host.clock.now();
        const asked = remote(nodeOfReplica(lead), shard.id, shard.raw.term);
        // The leader asked may never answer (paused, cut off) while its partners elect another:
        // the read then goes to the new leader at once instead of waiting out its deadline.
        // Nor past the call's deadline: the batched call to the leader is shared with other
        // reads and keeps its own bound, so this read stops waiting for it on a timer.
        // Nor once its client cancels the call: this wait is in none of the shard's tables, where
        // the expiry scan finds the reads of cancelled calls.
        let waiting = true;
        const answered = asked.then(
          (index) => ({ index }),
          (err: unknown) => {
            // The leader this sleeping follower knows did not answer for the group (it died,
            // or its node is now another replica): wake the group, which elects again unless
            // that leader shows up. Writes wake a group on their own; reads never reach its
            // Raft core. (Not once the read stopped waiting for it.)
            if (waiting) this.#host.report(shard.id, { kind: "leader-down" });
            throw err;
          },
        );
        let unwatch = (): void => {};
        const moved = new Promise<{ moved: NodeId }>((resolve) => {
          unwatch = shard.watchLead((now) => {
            if (now !== null && now !== lead) resolve({ moved: now });
          });
        });
        let answer: { index: number } | { moved: NodeId };
        try {
          answer = await this.#untilDone(Promise.race([answered, moved]), since, until, call);
        } finally {
          waiting = false;
          unwatch();
        }
        if ("moved" in answer) {
          // Another replica leads now: the read is refused with it as the hint (the KV layer
          // forwards it there), or, when this replica is the one elected, confirmed here below.
          if (shard.role !== "leader") throw new NotLeaderError(leaderNode(answer.moved));
        } else {
          if (this.#host.testingBugs.followerReadWithoutApply !== true) {
            await shard.waitApplied(answer.index, since, until, call);
          }
          return;
        }
      }
      const since = this.#host.clock.now();
      await shard.waitApplied(
        await this.#leaderReadIndex(shard, since, undefined, until, call),
        since,
        until,
        call,
      );
    } finally {
      this.#host.budget.unreserve(REQUEST_OVERHEAD_BYTES);
    }
  }

  /**
   * A leader's read index for a read that arrived at `since`: confirmed by its peers' terms
   * (#confirmLeadership), else by Raft's ReadIndex (which answers once it is applied here), the
   * read waiting for it until `until` at most (its call's deadline on the driver's clock), or
   * until its client's `call` is cancelled.
   */
  async #leaderReadIndex(
    shard: ShardReplica,
    since: number,
    voucher?: ReadVoucher,
    until = Infinity,
    call: ClientCall | null = null,
  ): Promise<number> {
    // The peers asked may never answer (paused, cut off): their calls end at their own timeout
    // (2 s in a node), and the read stops waiting before that at its deadline or its client's
    // cancel, as it does below for Raft's ReadIndex (the shard's tables, which the expiry scan
    // reads). The calls go on; their answers are then for nobody.
    const index = await this.#untilDone(
      this.#confirmLeadership(shard, voucher),
      since,
      until,
      call,
    );
    if (index !== null) return index;
    const done = shard.enqueueRead(++this.#readSeq, since, until, call);
    this.#host.markDirty(shard);
    return done;
  }

  /**
   * `wait`'s outcome, unless the read's deadline `until` (on the driver's clock) comes first
   * (ReadPastDeadlineError, `since` the read's arrival) or its client's `call` is cancelled
   * (ReadCancelledError): for what a read waits for outside the shard's tables.
   */
  #untilDone<T>(
    wait: Promise<T>,
    since: number,
    until: number,
    call: ClientCall | null,
  ): Promise<T> {
    if (until === Infinity && call === null) return wait;
    if (call?.cancelled === true) return Promise.reject(new ReadCancelledError());
    const clock = this.#host.clock;
    if (clock.now() >= until) return Promise.reject(new ReadPastDeadlineError(clock.now() - since));
    return new Promise<T>((resolve, reject) => {
      let timer: NodeJS.Timeout | undefined;
      const settle = (): void => {
        clearTimeout(timer);
        call?.removeListener("cancelled", gone);
      };
      const gone = (): void => {
        settle();
        reject(new ReadCancelledError());
      };
      call?.once("cancelled", gone);
      if (until - clock.now() <= MAX_TIMER_MS) {
        timer = setTimeout(
          () => {
            settle();
            reject(new ReadPastDeadlineError(clock.now() - since));
          },
          Math.max(0, until - clock.now()),
        );
        timer.unref();
      }
      wait.then(
        (value) => {
          settle();
          resolve(value);
        },
        (err: unknown) => {
          settle();
          reject(err as Error);
        },
      );
    });
  }

  /**
   * A leader's read point confirmed by its peers' terms (term-confirm.ts): the commit index as
   * of now, once a quorum of the group's voters (this one included) answered that they are at a
   * term ≤ this leader's, in calls sent after now, and this replica still leads in that term.
   * Null when that is not to be had (no confirmTerms, not leader, no entry of this term
   * committed yet, refusals or silence from too many voters): the read then takes Raft's
   * ReadIndex, which also settles who leads.
   */
  #confirmLeadership(shard: ShardReplica, voucher?: ReadVoucher): Promise<number | null> {
    const confirmer = this.#confirmer;
    const raw = shard.raw;
    if (
      confirmer === null ||
      raw.role !== "leader" ||
      !raw.voters.has(raw.id) ||
      !raw.committedInCurrentTerm()
    ) {
      return Promise.resolve(null);
    }
    const term = raw.term;
    const index = raw.commitIndex;
    // A follower asking for its own read vouches for itself when its term was no higher.
    const vouched =
      voucher !== undefined &&
      voucher.replica !== raw.id &&
      voucher.term <= term &&
      raw.voters.has(nodeId(voucher.replica))
        ? voucher.replica
        : null;
    const peers: NodeId[] = [];
    for (const v of raw.voters) if (v !== raw.id && v !== vouched) peers.push(v);
    // A quorum, less this voter and the one that vouched.
    const needed = Math.floor(raw.voters.size / 2) - (vouched === null ? 0 : 1);
    const stillLeads = (): boolean =>
      shard.raw === raw && raw.role === "leader" && raw.term === term;
    if (needed <= 0) return Promise.resolve(stillLeads() ? index : null);
    return new Promise((resolve) => {
      let confirmed = 0;
      let refused = 0;
      let settled = false;
      for (const replica of peers) {
        const check = { shard: shard.id, term, replica };
        confirmer.ask(nodeOfReplica(replica), check, (ok) => {
          if (settled) return;
          if (ok) confirmed++;
          else refused++;
          if (confirmed >= needed) {
            settled = true;
            resolve(stillLeads() ? index : null);
          } else if (refused > peers.length - needed) {
            settled = true;
            resolve(null);
          }
        });
      }
    });
  }

  /**
   * A peer leader's term checks (term-confirm.ts): for each, whether this node's replica
   * `replica` of the shard exists here and is at a term ≤ the one named. Read from the groups'
   * current terms (never below their durable ones), without stepping them.
   */
  confirmTerms(checks: readonly TermCheck[]): boolean[] {
    const anyTerm = this.#host.testingBugs.confirmAnyTerm === true;
    return checks.map((c) => {
      if (this.#host.closed() || c.replica !== this.#host.replicaId) return false;
      const shard = this.#host.shards.get(c.shard);
      if (shard === undefined || shard.raw.id !== this.#host.replicaId) return false;
      return anyTerm || shard.raw.term <= c.term;
    });
  }

  /**
   * For a follower's read on another node: confirms this node's leadership of `id` (ReadIndex)
   * and answers the index the read must wait for (the commit index when the read arrived).
   * With the follower's `voucher` (its replica and term when the read was asked), a voter at a
   * term no higher than this leader's counts toward the quorum without being asked.
   * Throws NotLeaderError when this node does not lead the shard. Stops waiting at `deadline`
   * (on deadlineClock(); ReadPastDeadlineError), when the follower's call gives the read up
   * (read-index.ts, READ_INDEX_SHARD_TIMEOUT_MS), and gives its share of the budget back then.
   */
  async readIndexAsLeader(
    id: number,
    voucher: ReadVoucher | undefined,
    deadline: number,
  ): Promise<number> {
    this.#host.assertOpen();
    this.#host.checkShardId(id);
    const shard = this.#host.shards.get(id);
    if (shard === undefined || shard.raw.role !== "leader") {
      throw new NotLeaderError(leaderNode(shard?.raw.lead));
    }
    this.#host.budget.reserve(REQUEST_OVERHEAD_BYTES);
    try {
      const now = this.#host.clock.now();
      // The deadline on the driver's clock, which need not be deadlineClock().
      const until = deadlineOn(now, deadline);
      const index = await this.#leaderReadIndex(shard, now, voucher, until);
      // The read waits there for its replica to apply `index`: with the commit broadcast
      // deferred (RaftConfig.deferCommitBroadcast) it could wait a heartbeat interval to learn it.
      // (Asked only when owed: under reads alone it never is, and the group is not visited.)
      const to = voucher === undefined ? null : nodeId(voucher.replica);
      if (this.#host.shards.get(id)?.raw.commitOwed(to) === true)
        this.#host.report(id, { kind: "commit-wanted", to });
      return index;
    } finally {
      this.#host.budget.unreserve(REQUEST_OVERHEAD_BYTES);
    }
  }
}
