/**
 * The multi-raft driver's writes: client puts and deletes (refused at once by a follower that
 * knows its leader, bounded per shard and node-wide, answered once applied), meta commands,
 * membership changes and leadership transfers. Each hands its request to its group and marks
 * the group for the next round (markDirty); the round proposes it.
 */
import { CairnError } from "../common/errors.ts";
import { deadlineOn } from "../common/deadline-clock.ts";
import { type MetaCommand, type MetaOutcome, nodeOfReplica } from "../cluster/index.ts";
import { type ConfChange, nodeId, NotLeaderError } from "../raft/index.ts";
import type { KvCommand, Version } from "./commands.ts";
import { encodeCommand, encodeMetaEntry } from "./commands.ts";
import type { Clock } from "./engine.ts";
import { leaderNode, type ShardTable } from "./multi-raft-options.ts";
import { REQUEST_OVERHEAD_BYTES, type RequestBudget } from "./request-budget.ts";
import type { GroupConfig, ProposalOutcome, ShardReplica } from "./shard.ts";
import type { ApplyOutcome } from "./state-machine.ts";

/** What writes need of the driver. */
export interface WritesHost {
  readonly shards: ShardTable;
  readonly clock: Clock;
  readonly budget: RequestBudget;
  /** MultiRaftOptions.maxPendingPerShard, its default applied. */
  readonly maxPendingPerShard: number;
  /** MultiRaftOptions.writeRefused: why a write is refused now (the disk's reserve), or null. */
  writeRefused(op: "put" | "delete"): string | null;
  /** The node is closed or failed. */
  stopped(): boolean;
  assertOpen(): void;
  checkShardId(id: number): void;
  shardOf(key: Uint8Array): number;
  /** The shard open here for a request, opened if this node replicates it (else NotLeaderError). */
  shardForRequest(id: number): Promise<ShardReplica>;
  /** The shard's replicas now (Groups.placedOn). */
  placedOn(id: number): readonly string[];
  /** A move took the shard's replica open here off this node (Groups.placedElsewhere). */
  placedElsewhere(id: number): boolean;
  /** The shard is not open here and placed on other nodes only (Groups.placedAway). */
  placedAway(id: number): boolean;
  /** Where a request for a shard this node does not serve goes (Groups.leaderToAsk). */
  leaderToAsk(id: number): string | null;
  /** The open shard `id`, opened now if needed. */
  shard(id: number): Promise<ShardReplica>;
  /** The group has input for the next round. */
  markDirty(s: ShardReplica): void;
}

export class Writes {
  readonly #host: WritesHost;
  constructor(host: WritesHost) {
    this.#host = host;
  }

  /**
   * A client's put; `deadline` is its call's, on deadlineClock() (KvStore), past which the write
   * is not proposed (shard.ts drainInbox).
   */
  put(
    key: Uint8Array,
    value: Uint8Array,
    expected?: Version,
    deadline = Infinity,
  ): Promise<ApplyOutcome> {
    return this.#write(
      expected === undefined ? { op: "put", key, value } : { op: "put", key, value, expected },
      deadline,
    );
  }

  delete(key: Uint8Array, expected?: Version, deadline = Infinity): Promise<ApplyOutcome> {
    return this.#write(
      expected === undefined ? { op: "delete", key } : { op: "delete", key, expected },
      deadline,
    );
  }

  /**
   * The node a write of `key` goes to when #write would refuse it naming another node: the
   * leader of the shard when this node's replica follows it and knows it (and, as the refusal
   * does, a sleeping follower is woken to check on its leader); for a shard this node does not
   * serve (placed on other nodes only, or a move took its replica here off this node), the
   * node the refusal names (Groups.leaderToAsk). null otherwise: this node leads, an election
   * is under way, the shard is not recorded yet, or the node is closed or failed.
   */
  leaderElsewhere(key: Uint8Array): string | null {
    if (this.#host.stopped()) return null;
    const id = this.#host.shardOf(key);
    const shard = this.#host.shards.get(id);
    if (shard === undefined) return this.#host.placedAway(id) ? this.#host.leaderToAsk(id) : null;
    if (this.#host.placedElsewhere(id)) return this.#host.leaderToAsk(id);
    const raw = shard.raw;
    if (raw.role !== "follower" || raw.lead === null) return null;
    if (raw.quiesced) {
      shard.enqueueReport({ kind: "leader-down" });
      this.#host.markDirty(shard);
    }
    return leaderNode(raw.lead);
  }

  /**
   * Proposes a client write to its shard. An open shard takes it before this returns, without
   * an `await` (the common case: a promise and a microtask hop less per write); a shard still to
   * be opened or created here is reached through shardForRequest first.
   */
  #write(cmd: KvCommand, deadline: number): Promise<ApplyOutcome> {
    const id = this.#host.shardOf(cmd.key);
    const open = this.#host.shards.get(id);
    if (open !== undefined && this.#host.placedElsewhere(id)) {
      const leader = this.#host.leaderToAsk(id);
      return Promise.reject(new NotLeaderError(leader === null ? null : nodeId(leader)));
    }
    if (open === undefined) {
      // No shard is created here for a write the disk has no room for (nor opened: the leader,
      // when it is elsewhere, decides).
      const refusal = this.#host.placedAway(id) ? null : this.#refusal(cmd);
      if (refusal !== null) return Promise.reject(refusal);
      return this.#host.shardForRequest(id).then((s) => this.#proposeWrite(s, cmd, deadline));
    }
    try {
      return this.#proposeWrite(open, cmd, deadline);
    } catch (err) {
      return Promise.reject(err as Error);
    }
  }

  /** The error a write is refused with for want of disk, or null. */
  #refusal(cmd: KvCommand): CairnError | null {
    const why = this.#host.writeRefused(cmd.op);
    return why === null ? null : new CairnError("CAIRN_ERR_DISK_FULL", why);
  }

  /** #write on its open shard: refuses synchronously (throws), or proposes and returns the outcome. */
  #proposeWrite(shard: ShardReplica, cmd: KvCommand, deadline: number): Promise<ApplyOutcome> {
    this.#host.assertOpen();
    // A follower that knows its leader would refuse the proposal at its next round: it refuses
    // now, and the API forwards the write without waiting for a round (two writes in three
    // reach a follower when clients do not route). A sleeping one still wakes, in a round of
    // its own, as the proposal would have woken it: it ticks again and pokes its leader
    // (RawNode.reportLeaderDown), so a group whose leader is gone elects another.
    const raw = shard.raw;
    if (raw.role === "follower" && raw.lead !== null) {
      if (raw.quiesced) {
        shard.enqueueReport({ kind: "leader-down" });
        this.#host.markDirty(shard);
      }
      throw new NotLeaderError(leaderNode(raw.lead));
    }
    const refusal = this.#refusal(cmd);
    if (refusal !== null) throw refusal;
    const storage = shard.sm.lsm.backpressure();
    // A throttled engine still takes writes, but fewer wait on it: its queue drains slowly.
    const limit =
      storage === "throttle" ? this.#host.maxPendingPerShard >> 4 : this.#host.maxPendingPerShard;
    if (shard.pendingOperations >= limit || storage === "stall") {
      throw new CairnError(
        "CAIRN_ERR_BACKPRESSURE",
        `shard ${shard.id} is overloaded (${shard.pendingOperations} operations waiting, storage ${storage}); retry later`,
        { retryable: true },
      );
    }
    const data = encodeCommand(cmd);
    const reserved = data.length + REQUEST_OVERHEAD_BYTES;
    this.#host.budget.reserve(reserved);
    let done: Promise<ProposalOutcome>;
    try {
      // The call's deadline on the driver's clock, which need not be deadlineClock().
      const now = this.#host.clock.now();
      const until = deadlineOn(now, deadline);
      done = shard.enqueuePropose(data, now, until);
      this.#host.markDirty(shard);
    } catch (err) {
      this.#host.budget.unreserve(reserved);
      throw err;
    }
    return done.then(
      (outcome) => {
        this.#host.budget.unreserve(reserved);
        if (outcome.type === "meta") {
          throw new CairnError("CAIRN_ERR_INTERNAL", "a KV command applied as a meta command");
        }
        return outcome;
      },
      (err: unknown) => {
        this.#host.budget.unreserve(reserved);
        throw err;
      },
    );
  }

  /**
   * Proposes a command to the meta group (shard 0), which this node must lead (else
   * NotLeaderError naming the leader); resolves with its outcome once applied here.
   */
  async proposeMeta(cmd: MetaCommand): Promise<MetaOutcome> {
    this.#host.assertOpen();
    const shard = this.#host.shards.get(0);
    if (shard === undefined || shard.raw.role !== "leader") {
      throw new NotLeaderError(leaderNode(shard?.raw.lead));
    }
    const done = shard.enqueuePropose(encodeMetaEntry(cmd), this.#host.clock.now());
    this.#host.markDirty(shard);
    const outcome = await done;
    if (outcome.type !== "meta") {
      throw new CairnError("CAIRN_ERR_INTERNAL", "a meta command applied as a KV command");
    }
    return outcome.outcome;
  }

  /**
   * Proposes a change of a shard's group (add a learner, add or promote a voter, remove a
   * member), one at a time; resolves once the change is applied on this node, the leader.
   */
  async changeMembership(id: number, cc: ConfChange, expected?: GroupConfig): Promise<void> {
    this.#host.checkShardId(id);
    const shard = await this.#host.shard(id);
    this.#host.assertOpen();
    const done = shard.enqueueConfChange(cc, this.#host.clock.now(), expected);
    this.#host.markDirty(shard);
    await done;
  }

  /** Hands leadership of `id` to `to`: a member's replica id, or a node (its replica there). */
  async transferLeader(id: number, to: string): Promise<void> {
    this.#host.checkShardId(id);
    // An open shard takes the request before this returns, as #write takes a write: of a
    // transfer and a write asked in one turn, the first asked is the first the group sees.
    const shard = this.#host.shards.get(id) ?? (await this.#host.shard(id));
    const conf = shard.storage.conf;
    const target =
      [...conf.voters, ...conf.learners].find((m) => m === to) ??
      conf.voters.find((m) => nodeOfReplica(m) === to) ??
      to;
    const done = shard.enqueueTransfer(nodeId(target), this.#host.clock.now());
    this.#host.markDirty(shard);
    await done;
  }
}
