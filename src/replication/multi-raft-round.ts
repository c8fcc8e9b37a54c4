/**
 * The multi-raft driver's round loop (the round's steps, numbered: multi-raft.ts). markDirty is the one
 * way to say that a group has input; the loop runs one round at a time, from the clock's defer,
 * in phases, each a method of its own: feed each marked group its inputs and collect its Ready
 * (#collect), a Ready carrying a snapshot set aside until its install, beside the rounds, is
 * done (#installBeside); stage their WAL records and sort their messages (#stage); send a
 * leader's appends and heartbeats; persist every group's records in one WAL append and one sync
 * when any Ready needs it (#persist, needsSync); only then send the answers and votes (driver
 * invariant 6, docs/raft.md); apply (#applyAll, multi-raft-apply.ts) and hand the answers to
 * the sockets (#answer).
 */
import { CairnError } from "../common/errors.ts";
import { clearArray } from "../common/index.ts";
import { type Message, type NodeId, nodeId, type Ready } from "../raft/index.ts";
import type { Wal, WalHardState, WalRecord } from "../storage/index.ts";
import type { Clock } from "./engine.ts";
import type { MetaVotersNote } from "./meta-voters.ts";
import {
  type DriverTestingBugs,
  leaderNode,
  type MultiRaftOptions,
  type ReplicationObserver,
  ShuttingDownError,
} from "./multi-raft-options.ts";
import { installSnapshot } from "./multi-raft-snapshots.ts";
import type { ShardMessage } from "./raft-transport.ts";
import { encodeLostLog } from "./refill.ts";
import type { PeerReport, ShardReplica } from "./shard.ts";
import { toWalEntry } from "./wal-storage.ts";

const EMPTY = new Uint8Array(0);

/** What the round loop needs of the driver. */
export interface RoundHost {
  readonly options: Pick<
    MultiRaftOptions,
    "transport" | "tickMs" | "electionTicks" | "flushOutputs" | "replicasNow"
  >;
  readonly observer: ReplicationObserver | undefined;
  /** The record of the meta group's voters (meta-voters.ts); null on a single node. */
  readonly metaVoters: MetaVotersNote | null;
  /** This node's id inside its groups. */
  readonly replicaId: NodeId;
  /** The shard's replicas, first-ranked first (MultiRaftOptions.replicasOf). */
  replicasOf(id: number): readonly string[];
  readonly clock: Clock;
  readonly wal: Pick<Wal, "append" | "sync" | "hardState" | "durableCommit">;
  /** MultiRaftOptions.requestTimeoutMs, its default applied. */
  readonly requestTimeoutMs: number;
  readonly testingBugs: DriverTestingBugs;
  /** The node is closed. */
  closed(): boolean;
  /** The node failed. */
  failed(): boolean;
  /** The node is closed or failed: no more rounds. */
  stopped(): boolean;
  /** Fails the node (a WAL write, an invariant). */
  fail(err: unknown): void;
  /** The ticker (multi-raft-quiesce.ts): keeps its list in step with the group. */
  readonly sleep: { trackSleep(s: ShardReplica): void };
  /** The peers' side (multi-raft-peers.ts): a snapshot's outcome for its group. */
  readonly peers: { report(shard: number, report: PeerReport): void };
  /** The apply (multi-raft-apply.ts). */
  readonly applier: {
    applyReady(s: ShardReplica, rd: Ready): Promise<void> | null;
    /** `s` sits rounds out until `pending` settles, then is marked if it has more to do. */
    applyingUntil(s: ShardReplica, pending: Promise<void>): void;
  };
}

/** The hard states made durable so far, by shard (the WAL). */
export interface DurableHardStates {
  hardState(shard: number): WalHardState | undefined;
  /** The commit index of the shard's hard state on disk (synced), 0 if none. */
  durableCommit(shard: number): number;
}

/**
 * Whether `rd`, a Ready of group `shard`, needs the round to be durable before its messages
 * leave and its entries apply: new entries, a snapshot, a changed term or vote do. A commit
 * index that moved alone does not (etcd's MustSync): in a group of several voters the entries
 * it covers are already durable on a majority, a linearizable read there goes through
 * ReadIndex (a leader's commit in its own term) and never trusts a restarted node's commit
 * index, and a node that restarts with an older one learns the newer from its leader; entries
 * its engine already holds are skipped when they apply again. Two exceptions keep the commit
 * durable at once: a sole voter (its linearizable reads are served at its own commit index
 * after a restart, multi-raft-reads.ts) and a commit that covers a configuration change (a
 * node restarting without it could wait for votes of members already removed). The others are
 * made durable by the next round that syncs or, at the latest, the next maintenance pass.
 *
 * `durable` and `group` are asked only when the answer depends on them (no object per call).
 */
export function needsSync(
  rd: Pick<Ready, "entries" | "snapshot" | "hardState" | "committedEntries">,
  durable: DurableHardStates,
  shard: number,
  group: { isSoleVoter(): boolean },
): boolean {
  if (rd.entries.length > 0 || rd.snapshot !== null) return true;
  const hs = rd.hardState;
  if (hs !== null) {
    const before = durable.hardState(shard);
    if (before === undefined || before.term !== hs.term || before.vote !== hs.vote) return true;
    if (group.isSoleVoter()) return true;
  }
  // A configuration change applies only once a synced commit covers it. The Ready that moved
  // the commit past it need not carry it (committed entries come in Readies of bounded size):
  // the one that does may have no hard state of its own, and was not synced.
  for (const e of rd.committedEntries) {
    if (e.type === "conf-change" && e.index > durable.durableCommit(shard)) return true;
  }
  return false;
}

export class RoundLoop {
  readonly #host: RoundHost;
  /**
   * The shards marked for the next round, each once (ShardReplica.marked). An array, not a Set:
   * a Set cleared every round grows its table again, in the old generation, a few times a round.
   */
  #dirty: ShardReplica[] = [];
  /** The array #round swaps in for #dirty, empty between rounds. */
  #spareDirty: ShardReplica[] = [];
  /**
   * A round's groups with a Ready, their Readies and WAL records: arrays of the loop, empty
   * between rounds (clearArray), not new ones grown each round (rounds do not overlap).
   */
  readonly #roundReady: ShardReplica[] = [];
  readonly #roundReadies: Ready[] = [];
  readonly #roundRecords: WalRecord[] = [];
  #roundScheduled = false;
  #inRound: Promise<void> | null = null;
  #rerun = false;
  /** A #flushAnswers is queued (#flushAfterAnswers). */
  #flushQueued = false;

  constructor(host: RoundHost) {
    this.#host = host;
  }

  /** Resolves once no round runs (for close(), which schedules none after). */
  async whenIdle(): Promise<void> {
    while (this.#inRound !== null) await this.#inRound;
  }

  markDirty(s: ShardReplica): void {
    this.mark(s);
    this.scheduleRound();
  }

  mark(s: ShardReplica): void {
    if (s.marked || s.removed) return;
    s.marked = true;
    this.#dirty.push(s);
  }

  scheduleRound(): void {
    // A failed node runs no more rounds (it would spin on shards it can never advance).
    if (this.#roundScheduled || this.#host.stopped()) return;
    this.#roundScheduled = true;
    this.#host.clock.defer(this.#startRound);
  }

  /** A scheduled round's start (one function for every round, not a closure each). */
  readonly #startRound = (): void => {
    this.#roundScheduled = false;
    if (this.#host.closed()) return;
    if (this.#inRound !== null) {
      this.#rerun = true;
      return;
    }
    this.#inRound = this.#round().finally(this.#roundEnded);
  };

  readonly #roundEnded = (): void => {
    this.#inRound = null;
    if (this.#rerun || this.#dirty.length > 0) {
      this.#rerun = false;
      this.scheduleRound();
    }
  };

  /**
   * One round, in phases: collect the marked groups' Readies (#collect), those carrying a
   * snapshot only once it is installed (#installBeside); stage their WAL records and sort their
   * messages (#stage); send the leaders' appends and heartbeats; persist (#persist: one WAL
   * append, one sync if any Ready needs it); send everything else; apply (#applyAll); hand the
   * answers to the sockets (#answer).
   */
  async #round(): Promise<void> {
    if (this.#host.failed()) {
      for (const s of this.#dirty) s.marked = false;
      this.#dirty.length = 0;
      return;
    }
    try {
      const asks = this.#collect(this.#host.clock.now());
      // Asks to campaign promise nothing about this node's state: they leave at once.
      if (asks !== null) this.#send(asks);
      if (this.#roundReady.length === 0) return;
      // A leader's appends and heartbeats leave before this round's WAL write, everything else
      // (acknowledgements, votes, snapshots) once the round is durable: see #stage.
      const early = new Map<NodeId, ShardMessage[]>();
      const outbox = new Map<NodeId, ShardMessage[]>();
      const mustSync = this.#stage(early, outbox);
      if (early.size > 0) {
        // Raft thesis §10.2.1: a leader replicates in parallel with its own disk write. Its
        // appends (and heartbeats) carry nothing it must hold durably first: it counts its own
        // copy toward a commit only when it steps the followers' answers, in a later round,
        // after this round's sync; only those answers and votes promise durability. They leave
        // now (#send), before the write, whether it blocks the thread or not.
        this.#send(early);
      }
      const syncing = this.#persist(mustSync);
      if (syncing !== null) await syncing;
      // Only now, with the round durable: a message may acknowledge or vote on what it holds.
      // An acknowledgement is on the path of every write of the groups this node follows: it
      // leaves now (#send), not after this round's applies.
      this.#send(outbox);
      this.#answer(this.#applyAll());
    } catch (err) {
      this.#host.fail(err);
    } finally {
      clearArray(this.#roundReady);
      clearArray(this.#roundReadies);
      clearArray(this.#roundRecords);
    }
  }

  /**
   * The round's first phase: feeds each marked group its inputs (a campaign it owes, asks to be
   * refilled, expired requests, its inbox) and collects its Ready into the round's arrays
   * (#roundReady, #roundReadies: two arrays, no pair per shard). Returns the messages that
   * leave at once (asks to campaign, asks to be refilled), or null.
   */
  #collect(now: number): Map<NodeId, ShardMessage[]> | null {
    const ready = this.#roundReady;
    const readies = this.#roundReadies;
    // The marked list is taken whole and an empty one put in its place (no copy per round);
    // shards marked from here on wait for the next round. Every shard taken is unmarked
    // first, so one marked again during this round, before or after its turn, goes into the
    // new list.
    const dirty = this.#dirty;
    this.#dirty = this.#spareDirty;
    this.#spareDirty = dirty;
    let asks: Map<NodeId, ShardMessage[]> | null = null;
    for (const s of dirty) s.marked = false;
    for (const s of dirty) {
      // A shard still applying its last Ready, or installing the snapshot of its next, sits
      // this round out (marked dirty again when done): one slow engine must not hold every
      // other shard's round.
      if (s.applying !== null || s.removed) continue;
      // Its snapshot installed, the Ready set aside goes on with this round; the group takes
      // no input before its advance (RawNode: nothing between ready() and advance()).
      const installed = s.installed;
      if (installed !== null) {
        s.installed = null;
        ready.push(s);
        readies.push(installed);
        continue;
      }
      const ask = s.maybeCampaign();
      if (ask !== null) addTo((asks ??= new Map()), s.id, ask);
      if (s.refill !== null) asks = this.#askToRefill(s, now, asks);
      s.expire(now, this.#host.requestTimeoutMs);
      s.drainInbox(now, this.#host.options.tickMs * this.#host.options.electionTicks * 3);
      this.#host.sleep.trackSleep(s);
      if (s.raw.hasReady()) {
        const rd = s.raw.ready();
        if (rd.snapshot !== null) {
          this.#installBeside(s, rd);
          continue;
        }
        ready.push(s);
        readies.push(rd);
      }
    }
    clearArray(dirty);
    return asks;
  }

  /**
   * Installs the snapshot `rd` carries in `s`'s engine beside the rounds, and sets `rd` aside
   * for the first round after it (ShardReplica.installed). The engine takes the snapshot
   * durably first: once the WAL records it (#stage), the log below is gone and only the engine
   * holds that state. An install writes the shard's whole state (a gigabyte, seconds): awaited
   * in the round, it held every other group's appends, acknowledgements and applies for as
   * long. A failed install fails the node, as a failed apply does; one that close() stopped
   * does not (installSnapshot).
   */
  #installBeside(s: ShardReplica, rd: Ready): void {
    const snap = rd.snapshot;
    if (snap === null) return;
    const closing = (): boolean => this.#host.closed();
    const pending = installSnapshot(s, snap, this.#host, this.#host.testingBugs, closing).then(
      () => {
        s.installed = rd;
      },
      (err: unknown) => {
        if (!(err instanceof ShuttingDownError && closing())) this.#host.fail(err);
      },
    );
    this.#host.applier.applyingUntil(s, pending);
  }

  /**
   * Stages the round's Readies, their snapshots installed: each one's WAL records (a snapshot's
   * mark, its entries, its hard state) into #roundRecords, and its messages into `early` (a
   * leader's appends and heartbeats, sent before the WAL write) or `outbox` (the rest, sent
   * once the round is durable). Returns whether the round must sync (needsSync).
   */
  #stage(early: Map<NodeId, ShardMessage[]>, outbox: Map<NodeId, ShardMessage[]>): boolean {
    const ready = this.#roundReady;
    const readies = this.#roundReadies;
    const records = this.#roundRecords;
    const allEarly = this.#host.testingBugs.everyMessageBeforeWalWrite === true;
    // Whether the round must be durable before it goes on (see needsSync).
    let mustSync = false;
    for (let w = 0; w < ready.length; w++) {
      const s = ready[w] as ShardReplica;
      const rd = readies[w] as Ready;
      // A group founded since the last sync: its founding records are not durable yet, so
      // none of its messages leaves before this round's sync, not even a leader's appends. A
      // founding leader that sent before its vote was on disk could restart with no state,
      // found the group again and lead its founding term a second time (driver invariant 16).
      const founding =
        s.foundingUnsynced && this.#host.testingBugs.foundingAppendsBeforeSync !== true;
      if (s.foundingUnsynced) {
        mustSync = true;
        s.foundingUnsynced = false;
      }
      if (!mustSync && needsSync(rd, this.#host.wal, s.id, s.raw)) mustSync = true;
      if (rd.snapshot !== null) {
        // A replica still refilling after the snapshot keeps the log it lost in the mark.
        const lost = s.refill;
        const keep = lost !== null && (s.raw.recovering || rd.snapshot.meta.index < lost.commit);
        records.push({
          kind: "snapshot",
          shard: s.id,
          meta: {
            index: rd.snapshot.meta.index,
            term: rd.snapshot.meta.term,
            data: keep ? encodeLostLog(lost) : EMPTY,
          },
        });
      }
      if (rd.messages.length > 0) {
        if (
          this.#host.options.transport === undefined ||
          (s.raw.isSoleVoter() &&
            !s.raw.hasUnappliedConfChange() &&
            rd.messages.some((m) => !s.raw.learners.has(m.to) && !isAnswer(m)))
        ) {
          // A sole voter talks only to its learners (a replica moving with replication_factor
          // 1, the meta group of a one-node cluster adding a member): a message to anyone else
          // means the group's configuration is not what this driver believes. Not while a
          // committed conf change is unapplied: a replica replaying after a restart knows only
          // the voters it has applied (the first founding voter, itself, when its engine kept
          // the first of the founding conf changes), and answers its leader meanwhile (driver
          // simulation seed 63342). Nor an answer, to whoever sent what it answers: a stale
          // term's heartbeat from a node the group never had (any caller naming the cluster's
          // id can send one: handshake.ts) got its refusal, and this check stopped the node
          // (a review of 2026-12-06).
          throw new CairnError(
            "CAIRN_ERR_INVARIANT",
            `shard ${s.id}: a single-voter group emitted ${rd.messages.length} messages`,
          );
        }
        for (const message of rd.messages) {
          const box =
            ((message.type === "append" || message.type === "heartbeat") && !founding) || allEarly
              ? early
              : outbox;
          addTo(box, s.id, message);
        }
      }
      if (rd.entries.length > 0)
        records.push({ kind: "entries", shard: s.id, entries: rd.entries.map(toWalEntry) });
      // (The Ready's hard state is a new object, never written: the WAL may keep it.)
      if (rd.hardState !== null)
        records.push({ kind: "hard-state", shard: s.id, state: rd.hardState });
    }
    return mustSync;
  }

  /**
   * Persists the round: its records in one WAL append and, when `mustSync`, one sync, whose
   * promise the round awaits before any message that promises durability leaves; null when
   * there is nothing to wait for.
   */
  #persist(mustSync: boolean): Promise<void> | null {
    const records = this.#roundRecords;
    // Without mustSync only commit indexes moved: durable with the next round that syncs, or
    // the next maintenance pass (multi-raft-maintenance.ts), whichever comes first.
    if (records.length > 0) this.#host.wal.append(records);
    // With no record of its own a round may still have to sync: a new group's founding
    // entries, appended at open and applied by this round (foundingUnsynced). Skipping that
    // sync let an engine flush the first of them while the WAL lost them all to a power cut:
    // the replica came back with one voter, itself (driver simulation, seeds 145 and 263).
    if (mustSync && this.#host.testingBugs.ackBeforeWalSync === true) {
      this.#host.wal.sync().catch((err: unknown) => this.#host.fail(err));
      return null;
    }
    return mustSync ? this.#host.wal.sync() : null;
  }

  /**
   * Applies the round's Readies (multi-raft-apply.ts): in place, or beside the next rounds when
   * the engine cannot take them at once. Returns the groups applied in place, or null.
   */
  #applyAll(): ShardReplica[] | null {
    const ready = this.#roundReady;
    const readies = this.#roundReadies;
    let applied: ShardReplica[] | null = null;
    const observer = this.#host.observer;
    for (let w = 0; w < ready.length; w++) {
      const s = ready[w] as ShardReplica;
      const rd = readies[w] as Ready;
      if (s.observeSoftState(rd)) observer?.leaderChanged?.(s.id, leaderNode(s.lead), s.raw.term);
      const pending = this.#host.applier.applyReady(s, rd);
      if (pending === null) {
        (applied ??= []).push(s);
        continue;
      }
      this.#host.applier.applyingUntil(s, pending);
    }
    return applied;
  }

  /**
   * The round's last phase: the answers its applies settled leave for the sockets, and the
   * groups `applied` in place are marked for another round if they have more to do.
   */
  #answer(applied: ShardReplica[] | null): void {
    // The answers this round's applies settle are framed by their promises' continuations:
    // they leave once those have run, not after another turn of the event loop.
    this.#flushAfterAnswers();
    // Groups applied in place are marked for another round from a microtask, after those the
    // answers just settled queued, as an awaited apply marked them: marked at once, a lone Put
    // through three nodes ran ~10% slower (alternating runs; the cause was not pinned down).
    if (applied !== null) {
      const done = applied;
      queueMicrotask(() => {
        for (const s of done) {
          if (s.raw.hasReady() || s.hasInput() || s.campaignWhenReady) this.markDirty(s);
        }
      });
    }
  }

  /**
   * Hands what this turn framed to the sockets once the microtasks queued so far have run (a
   * tick queued from a microtask runs when the microtask queue is empty): the answers of the
   * proposals and reads a round settles, the forwarded calls' answers among them. Framed in a
   * round, which runs from setImmediate, they would otherwise leave in the next turn's check
   * phase, after its timers and its poll for I/O (with what that poll brings in): every write
   * waited for that on its leader, a forwarded one before its answer went back.
   */
  #flushAfterAnswers(): void {
    if (this.#flushQueued) return;
    const transport = this.#host.options.transport;
    const flushOutputs = this.#host.options.flushOutputs;
    if (transport === undefined && flushOutputs === undefined) return;
    this.#flushQueued = true;
    queueMicrotask(() => process.nextTick(this.#flushAnswers));
  }

  readonly #flushAnswers = (): void => {
    this.#flushQueued = false;
    this.#host.options.transport?.flush();
    this.#host.options.flushOutputs?.();
  };

  /**
   * A replica being refilled (refill.ts) that has no leader to refill it asks the shard's other
   * replicas to wake theirs, once per election timeout: an idle group's leader sleeps (Raft
   * quiescence), and this replica, which does not campaign, would never wake it. A `wake` wakes
   * a leader, and a follower whose own leader sends it (this replica led, and restarted having
   * lost its log); it changes no term. (Once it follows a leader, its Raft core pokes that
   * leader itself, as a learner does.)
   */
  #askToRefill(
    s: ShardReplica,
    now: number,
    asks: Map<NodeId, ShardMessage[]> | null,
  ): Map<NodeId, ShardMessage[]> | null {
    const o = this.#host.options;
    if (!s.raw.recovering || s.raw.lead !== null || o.transport === undefined) return asks;
    if (now - s.askedToRefillAt < o.tickMs * o.electionTicks) return asks;
    s.askedToRefillAt = now;
    const self = this.#host.replicaId;
    for (const replica of o.replicasNow?.(s.id) ?? this.#host.replicasOf(s.id)) {
      if (replica === self) continue;
      const wake: Message = { type: "wake", from: self, to: nodeId(replica), term: s.raw.term };
      addTo((asks ??= new Map()), s.id, wake);
    }
    return asks;
  }

  /**
   * Hands `outbox` to the transport and flushes it: a round runs from setImmediate, so the
   * connections' own end-of-turn write would come in the next turn's check phase, after that
   * turn's timers and its poll for I/O (and whatever the poll brings in).
   */
  #send(outbox: Map<NodeId, ShardMessage[]>): void {
    const transport = this.#host.options.transport;
    if (transport === undefined || outbox.size === 0) return;
    for (const [to, messages] of outbox) {
      const snapshots = messages.filter((m) => m.message.type === "snapshot").map((m) => m.shard);
      if (snapshots.length === 0) {
        transport.send(to, messages);
        continue;
      }
      // The leader sends nothing more to a member it sends a snapshot to until it hears how
      // that went: a snapshot dropped and reported sent would leave the follower behind until
      // it spoke up; reported lost, the leader retries at once.
      transport.send(to, messages, (delivered) => {
        for (const id of snapshots)
          this.#host.peers.report(id, { kind: "snapshot", to, ok: delivered });
      });
    }
    transport.flush();
  }
}

/** Queues `message` of group `shard` for its destination node in `box` (a round's outgoing). */
function addTo(box: Map<NodeId, ShardMessage[]>, shard: number, message: Message): void {
  let list = box.get(message.to);
  if (list === undefined) box.set(message.to, (list = []));
  list.push({ shard, message });
}

/** A message that answers one the group received (sent to its sender, member or not). */
function isAnswer(m: Message): boolean {
  return (
    m.type === "append-resp" ||
    m.type === "heartbeat-resp" ||
    m.type === "vote-resp" ||
    m.type === "prevote-resp"
  );
}
