/**
 * The multi-raft driver's side of its peers: messages that arrive for the groups (receive),
 * held a while for a shard this node does not know yet that it replicates (replicasChanged
 * delivers them), and what the transport reports (a peer unreachable, a snapshot's outcome:
 * report). Messages leave in the round (multi-raft.ts, RaftTransport.send).
 */
import { nodeOfReplica } from "../cluster/index.ts";
import type { Message, NodeId, Snapshot } from "../raft/index.ts";
import { entryDataProblem } from "./commands.ts";
import { snapshotImageSeq, type Wal } from "../storage/index.ts";
import type { Clock } from "./engine.ts";
import type { MultiRaftOptions, ShardTable } from "./multi-raft-options.ts";
import type { ShardMessage } from "./raft-transport.ts";
import type { PeerReport, ShardReplica } from "./shard.ts";
import { releaseSnapshot } from "./snapshot-pins.ts";

/**
 * A message for a shard this node does not know it replicates is held this long (ms), waiting
 * for the meta group here to learn of the shard (see receive), then dropped.
 */
const HELD_MESSAGE_MS = 3_000;
/** At most this many such messages are held, over every shard; more are dropped. */
const HELD_MESSAGES_MAX = 4_096;
/**
 * At most this many bytes of entries (and in-memory snapshot images) are held, over every shard;
 * a message that would take them past it is dropped. The count alone let a caller posing as a
 * member (handshake.ts takes one it does not know) have 4,096 appends of up to 64 MiB held, for
 * 3 s at a time: 200 appends of 1 MiB held 200 MiB. An honest new group's first messages are
 * votes, a timeout-now and its first appends: a Put of the largest value fits.
 */
const HELD_BYTES_MAX = 64 * 1024 * 1024;

/** What the peers' side needs of the driver. */
export interface PeersHost {
  readonly options: Pick<
    MultiRaftOptions,
    "transport" | "acceptsReplica" | "onStaleReplica" | "observer"
  >;
  readonly shards: ShardTable;
  /** Whether a shard's replica here was removed (Wal.isDropped). */
  readonly wal: Pick<Wal, "isDropped">;
  readonly clock: Clock;
  readonly replicaId: NodeId;
  readonly totalShards: number;
  /** The node is closed or failed: messages are dropped. */
  stopped(): boolean;
  /** The node is closed: reports are dropped. */
  closed(): boolean;
  /** The shard's replicas, first-ranked first (MultiRaftOptions.replicasOf). */
  replicasOf(id: number): readonly string[];
  /** The open shard `id`, opened now if needed. */
  shard(id: number): Promise<ShardReplica>;
  /** Whether the shard's replica here is being removed (multi-raft-removal.ts). */
  removing(id: number): boolean;
  /** The group has input for the next round. */
  markDirty(s: ShardReplica): void;
}

export class Peers {
  readonly #host: PeersHost;
  /** Messages for shards not known here to be replicated yet, by shard (see receive). */
  readonly #held = new Map<number, { readonly since: number; readonly messages: Message[] }>();
  #heldCount = 0;
  /** The bytes of the held messages' entries and images (heldBytes). */
  #heldBytes = 0;

  constructor(host: PeersHost) {
    this.#host = host;
  }

  /**
   * Messages from node `from`, delivered to their groups at the next round. A message for a
   * shard not open here opens it if this node is one of its replicas (a new group's first
   * messages reach a replica before any client request does). One for a shard this node does
   * not know it replicates is held (bounded: HELD_MESSAGES_MAX, HELD_BYTES_MAX, HELD_MESSAGE_MS) until
   * replicasChanged() finds that it does, then delivered, else dropped: a new shard's first
   * messages (its creator's timeout-now, a candidate's votes) often outrun the create-shard
   * entry's commit at this node's replica of the meta group. Dropped, each cost an election
   * timeout; a three-node fill saw ~250 of them over 1,024 new shards.
   */
  receive(from: string, messages: readonly ShardMessage[]): void {
    if (this.#host.stopped()) {
      for (const m of messages) releaseSnapshot(m.message);
      return;
    }
    let stale: string | null = null;
    for (const { shard: id, message } of messages) {
      if (message.to !== this.#host.replicaId) {
        // Addressed to another incarnation of this node: taking it would let this replica vote
        // and acknowledge as one whose promises are lost.
        stale = message.to;
        releaseSnapshot(message);
        continue;
      }
      if (message.type === "append" && !this.#entriesDecode(from, id, message)) continue;
      if (message.type === "snapshot" && !isImageAtIndex(message.snapshot)) {
        // Dropped before the Raft core takes it (and acknowledges it): see isImageAtIndex.
        releaseSnapshot(message);
        continue;
      }
      const s = this.#host.shards.get(id);
      if (s !== undefined) {
        s.enqueueStep(message);
        this.#host.markDirty(s);
        continue;
      }
      if (
        !Number.isInteger(id) ||
        id < 0 ||
        id >= this.#host.totalShards ||
        // For the replica being removed (lost, as on a network blip, if it stays).
        this.#host.removing(id)
      ) {
        releaseSnapshot(message);
        continue;
      }
      if (this.#replicatesHere(id)) this.#deliver(id, message);
      else this.#hold(from, id, message);
    }
    if (stale !== null) this.#host.options.onStaleReplica?.(from, stale);
  }

  /**
   * Whether every entry of `append` holds a command this build applies (entryDataProblem);
   * otherwise the append is dropped before the Raft core takes it in, and the observer hears
   * of it. A real leader of this build never sends one: a caller posing as a member does (the
   * peers' service takes a node it does not know: handshake.ts), or a member on a build that
   * writes what this one cannot read (docs/operations.md, "Upgrading"); its group stalls here
   * rather than this node stopping at the entry for good (a review of 2026-12-06: one append
   * of eight bytes did that). Membership changes are the core's to check (Raft.step).
   */
  #entriesDecode(
    from: string,
    shard: number,
    append: Extract<Message, { type: "append" }>,
  ): boolean {
    for (const e of append.entries) {
      if (e.type !== "normal") continue;
      const problem = entryDataProblem(e.data);
      if (problem === null) continue;
      this.#host.options.observer?.malformedAppend?.(from, shard, e.index, problem);
      return false;
    }
    return true;
  }

  /**
   * The shards' replicas may have changed (`replicasOf`, `acceptsReplica`): the messages held
   * for shards this node now replicates are delivered, in the order they came. The driver calls
   * it after each meta command it applies; an embedder whose replicas change otherwise calls it.
   */
  replicasChanged(): void {
    if (this.#held.size === 0 || this.#host.stopped()) return;
    const now = this.#host.clock.now();
    for (const [id, held] of this.#held) {
      const replica = this.#replicatesHere(id);
      if (!replica && now - held.since < HELD_MESSAGE_MS) continue;
      this.#held.delete(id);
      this.#heldCount -= held.messages.length;
      for (const m of held.messages) {
        this.#heldBytes -= heldBytes(m);
        if (replica) this.#deliver(id, m);
        else releaseSnapshot(m);
      }
    }
  }

  #replicatesHere(id: number): boolean {
    // A replica removed here (multi-raft-removal.ts) is created again only where the meta
    // state places the shard now: the initial voters say nothing after a move, and a stray
    // message of the old group must not bring back what was deleted.
    if (this.#host.wal.isDropped(id)) return this.#host.options.acceptsReplica?.(id) === true;
    return (
      this.#host.replicasOf(id).includes(this.#host.replicaId) ||
      this.#host.options.acceptsReplica?.(id) === true
    );
  }

  /** Delivers `message` to shard `id` (a replica here), opening it if needed. */
  #deliver(id: number, message: Message): void {
    const s = this.#host.shards.get(id);
    if (s !== undefined) {
      s.enqueueStep(message);
      this.#host.markDirty(s);
      return;
    }
    // Several messages for a shard being opened wait on the same promise: delivered in order.
    this.#host.shard(id).then(
      (opened) => {
        opened.enqueueStep(message);
        this.#host.markDirty(opened);
      },
      () => releaseSnapshot(message),
    );
  }

  #hold(from: string, id: number, message: Message): void {
    if (this.#host.options.transport === undefined) {
      releaseSnapshot(message);
      return;
    }
    const bytes = heldBytes(message);
    if (this.#heldCount >= HELD_MESSAGES_MAX || this.#heldBytes + bytes > HELD_BYTES_MAX) {
      this.#host.options.observer?.heldMessageDropped?.(from, id);
      releaseSnapshot(message);
      return;
    }
    let held = this.#held.get(id);
    if (held === undefined) {
      held = { since: this.#host.clock.now(), messages: [] };
      this.#held.set(id, held);
    }
    held.messages.push(ownEntries(message));
    this.#heldCount++;
    this.#heldBytes += bytes;
  }

  /**
   * The transport could not deliver to `to` (its stream is down, or frames were dropped): the
   * groups this node leads stop pipelining to it and probe it instead (RawNode.reportUnreachable).
   */
  reportUnreachable(to: string): void {
    if (this.#host.stopped()) return;
    for (const s of this.#host.shards.values()) {
      if (s.role !== "leader") continue;
      const conf = s.storage.conf;
      for (const member of [...conf.voters, ...conf.learners]) {
        if (nodeOfReplica(member) === to) this.report(s.id, { kind: "unreachable", to: member });
      }
    }
  }

  report(shard: number, report: PeerReport): void {
    const s = this.#host.shards.get(shard);
    if (s === undefined || this.#host.closed()) return;
    s.enqueueReport(report);
    this.#host.markDirty(s);
  }

  /** Held messages past their time are dropped (their shards' replicas are checked again). */
  dropExpiredHeld(): void {
    if (this.#held.size > 0) this.replicasChanged();
  }
}

/** What a held message counts against HELD_BYTES_MAX: its entries' data, its image in memory. */
function heldBytes(m: Message): number {
  if (m.type === "snapshot") return m.snapshot.data.length;
  if (m.type !== "append") return 0;
  let bytes = 0;
  for (const e of m.entries) bytes += e.data.length;
  return bytes;
}

/**
 * `m` with its entries' data copied: a decoded entry is a view of the frame it came in
 * (frame-decode.ts), and a held one kept that whole frame (up to 128 MiB) alive for as long
 * as it was held, whatever its own size.
 */
function ownEntries(m: Message): Message {
  if (m.type !== "append" || m.entries.length === 0) return m;
  return { ...m, entries: m.entries.map((e) => ({ ...e, data: new Uint8Array(e.data) })) };
}

/**
 * Whether a snapshot's image is the state at the index its metadata names, as far as can be
 * told before the Raft core takes it: an image in the message's data starts with its header,
 * whose sequence must be that index. (One streamed from a file was checked whole, that index
 * included, by its receiver: SnapshotAssembler.) A correct leader never sends another, but a
 * buggy or hostile peer's (a snapshot in a Stream frame, which the receiver now drops, or a
 * transport in this process) was acknowledged and installed: an image above the index made the
 * replica skip the log entries between after a restart, one below it the node refuse to start,
 * and the next entry's apply failed the node. The install refuses such an image too
 * (expectImageSeq), but by then the Raft core has replaced its log, and only failing the node
 * undoes that; dropped here, the snapshot is as if lost on the way.
 */
function isImageAtIndex(snapshot: Snapshot): boolean {
  return snapshot.stream !== undefined || snapshotImageSeq(snapshot.data) === snapshot.meta.index;
}
