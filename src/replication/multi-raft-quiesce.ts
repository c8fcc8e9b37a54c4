/**
 * The multi-raft driver's sleeping groups (Raft quiescence, docs/raft.md): the ticker ticks
 * only the groups awake here (and sleeping ones with requests waiting), keeps that list in step
 * with each group after its round (trackSleep), and wakes the groups led by a node the failure
 * detector suspects.
 */
import { nodeOfReplica } from "../cluster/index.ts";
import type { NodeId } from "../raft/index.ts";
import type { ReplicationObserver, ShardTable } from "./multi-raft-options.ts";
import type { ShardReplica } from "./shard.ts";

/** What the ticker needs of the driver. */
export interface QuiesceHost {
  readonly shards: ShardTable;
  readonly nodeId: NodeId;
  readonly observer: ReplicationObserver | undefined;
  /** The node is closed or failed. */
  stopped(): boolean;
  /** The group has input for the next round. */
  markDirty(s: ShardReplica): void;
  /**
   * A tick's two halves of markDirty: each awake group is marked, then one round is scheduled
   * for them all (the round loop's mark and scheduleRound).
   */
  mark(s: ShardReplica): void;
  scheduleRound(): void;
  /** Held peer messages past their time are dropped (multi-raft-peers.ts). */
  dropExpiredHeld(): void;
}

export class Quiesce {
  readonly #host: QuiesceHost;
  /**
   * The shards the ticker ticks (ShardReplica.ticking): groups awake here, and sleeping ones
   * with requests waiting (the rounds that ticks cause check their deadlines). See trackSleep.
   * A list with a flag, not a Set: trackSleep runs for every group a round visits, and the
   * next tick drops those that stopped ticking.
   */
  #ticking: ShardReplica[] = [];
  #tickingCount = 0;
  /** What observer.awakeGroups last heard. */
  #reportedAwake = -1;

  constructor(host: QuiesceHost) {
    this.#host = host;
  }

  /** Ticks the awake groups only: a sleeping group costs nothing per tick. */
  tick(): void {
    // Held messages past their time are dropped (their shards' replicas are checked again).
    this.#host.dropExpiredHeld();
    const list = this.#ticking;
    let kept = 0;
    for (let i = 0; i < list.length; i++) {
      const s = list[i] as ShardReplica;
      if (!s.ticking) {
        s.listedTicking = false;
        continue;
      }
      list[kept++] = s;
      s.ticks++;
      this.#host.mark(s);
    }
    list.length = kept;
    if (this.#tickingCount > 0) this.#host.scheduleRound();
    if (this.#tickingCount !== this.#reportedAwake) {
      this.#reportedAwake = this.#tickingCount;
      this.#host.observer?.awakeGroups?.(this.#reportedAwake);
    }
  }

  /**
   * Keeps #ticking in step with the group after anything that may put it to sleep or wake it
   * (feeding its inputs, advancing it). A sleeping group with requests waiting stays ticked
   * (ticks do nothing to it, but the rounds they cause expire requests past their deadline).
   */
  trackSleep(s: ShardReplica): void {
    this.setTicking(s, !s.raw.quiesced || s.pendingOperations > 0);
  }

  setTicking(s: ShardReplica, ticking: boolean): void {
    // A replica being removed ticks no more (multi-raft-removal.ts).
    if (s.ticking === ticking || (ticking && s.removed)) return;
    s.ticking = ticking;
    if (!ticking) {
      this.#tickingCount--;
      return;
    }
    this.#tickingCount++;
    if (!s.listedTicking) {
      s.listedTicking = true;
      this.#ticking.push(s);
    }
  }

  /**
   * The failure detector (SWIM) suspects node `node`, or declared it dead: the groups here it
   * leads wake if they sleep (RawNode.reportLeaderDown), so that they elect another leader
   * after an election timeout if the node is really gone, instead of waiting for it forever.
   * Whether a group sleeps is read when its round delivers the news, not here: a round under
   * way may be putting it to sleep right now.
   */
  wakeGroupsLedBy(node: string): void {
    if (this.#host.stopped() || node === this.#host.nodeId) return;
    for (const s of this.#host.shards.values()) {
      const lead = s.raw.lead;
      if (lead === null || nodeOfReplica(lead) !== node) continue;
      s.enqueueReport({ kind: "leader-down" });
      this.#host.markDirty(s);
    }
  }

  /**
   * Node `node` is back (the failure detector had declared it down, MultiRaftOptions.nodeDown):
   * each group led here with a replica there is told (RawNode.reportMemberUp), and a sleeping
   * one that slept past that replica lagging wakes to bring it up to date.
   */
  wakeGroupsFor(node: string): void {
    if (this.#host.stopped() || node === this.#host.nodeId) return;
    for (const s of this.#host.shards.values()) {
      if (s.raw.role !== "leader") continue;
      for (const members of [s.raw.voters, s.raw.learners]) {
        for (const id of members) {
          if (nodeOfReplica(id) !== node) continue;
          s.enqueueReport({ kind: "member-up", to: id });
          this.#host.markDirty(s);
        }
      }
    }
  }

  /** Groups of this node that are awake (ticking). */
  awakeGroups(): number {
    return this.#tickingCount;
  }
}
