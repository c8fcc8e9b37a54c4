/**
 * A test host for one Raft member: a RawNode over a MemoryStorage (its "disk"), and a state
 * machine that records every applied entry. handleReady() follows the Ready contract step by
 * step, so golden scripts and the simulation drive the core exactly as a real driver would.
 */
import type { Rng } from "../../../src/common/rng.ts";
import type {
  Entry,
  LogIndex,
  Message,
  NodeId,
  RaftConfig,
  ReadState,
  Ready,
  Snapshot,
  Term,
} from "../../../src/raft/index.ts";
import { logIndex, MemoryStorage, RawNode, term } from "../../../src/raft/index.ts";

export interface HostOptions {
  readonly electionTick?: number;
  readonly heartbeatTick?: number;
  readonly preVote?: boolean;
  readonly checkQuorum?: boolean;
  readonly maxInflightMsgs?: number;
  readonly maxMsgBytes?: number;
  /** RaftConfig.maxUncommittedBytes (default 64 MiB). */
  readonly maxUncommittedBytes?: number;
  /** RaftConfig.quiesceTicks: 0 (the default) never quiesces. */
  readonly quiesceTicks?: number;
  /** RaftConfig.skipHeartbeatsAfterAppends (default false). */
  readonly skipHeartbeatsAfterAppends?: boolean;
  /** RaftConfig.omitRedundantReplies (default false). */
  readonly omitRedundantReplies?: boolean;
  /** RaftConfig.deferCommitBroadcast (default false). */
  readonly deferCommitBroadcast?: boolean;
  readonly testingBugs?: RaftConfig["testingBugs"];
  /** Test-only driver bug: send messages before persisting (acknowledges unpersisted entries). */
  readonly ackBeforePersist?: boolean;
}

export interface AppliedEntry {
  readonly index: LogIndex;
  readonly term: Term;
  readonly data: Uint8Array;
}

/** The replicated state machine: the ordered list of applied non-empty normal entries. */
export class StateMachine {
  appliedIndex: LogIndex = logIndex(0);
  entries: AppliedEntry[] = [];

  apply(e: Entry): void {
    if (e.index !== this.appliedIndex + 1) {
      throw new Error(`state machine applied ${this.appliedIndex}, asked to apply ${e.index}`);
    }
    this.appliedIndex = e.index;
    if (e.type === "normal" && e.data.length > 0)
      this.entries.push({ index: e.index, term: e.term, data: e.data });
  }

  snapshotData(): Uint8Array {
    const rows = this.entries.map((e) => [e.index, e.term, Buffer.from(e.data).toString("base64")]);
    return new TextEncoder().encode(JSON.stringify({ applied: this.appliedIndex, rows }));
  }

  install(s: Snapshot): void {
    const parsed = JSON.parse(new TextDecoder().decode(s.data)) as {
      applied: number;
      rows: [number, number, string][];
    };
    this.appliedIndex = s.meta.index;
    this.entries = parsed.rows.map(([i, t, d]) => ({
      index: logIndex(i),
      term: term(t),
      data: Buffer.from(d, "base64"),
    }));
  }
}

export interface ReadyOutcome {
  readonly ready: Ready;
  readonly applied: readonly Entry[];
  readonly readStates: readonly ReadState[];
}

export class Host {
  readonly id: NodeId;
  storage: MemoryStorage;
  readonly options: HostOptions;
  sm: StateMachine;
  raw: RawNode;
  readonly #rng: Rng;
  /** With ackBeforePersist: the disk as of the last fsync, which a crash rolls back to. */
  #durable: MemoryStorage | null = null;
  /**
   * The last entry of the log this member lost (loseLog), kept on its "disk" as the driver keeps
   * it in its WAL: every later start passes it (RaftConfig.recoveringUntil), and the core tells
   * whether the log is up to date again.
   */
  lostLast: { readonly index: LogIndex; readonly term: Term } | null = null;
  /** The members this host's failure detector declared down (RaftConfig.memberDown). */
  readonly down = new Set<NodeId>();

  constructor(id: NodeId, storage: MemoryStorage, options: HostOptions, rng: Rng) {
    this.id = id;
    this.storage = storage;
    this.options = options;
    this.#rng = rng;
    this.sm = new StateMachine();
    this.raw = this.#newRawNode();
  }

  #newRawNode(): RawNode {
    const config: RaftConfig = {
      id: this.id,
      storage: this.storage,
      rng: this.#rng.fork(),
      electionTick: this.options.electionTick ?? 10,
      heartbeatTick: this.options.heartbeatTick ?? 1,
      preVote: this.options.preVote ?? true,
      checkQuorum: this.options.checkQuorum ?? true,
      maxInflightMsgs: this.options.maxInflightMsgs ?? 256,
      maxMsgBytes: this.options.maxMsgBytes ?? 1 << 20,
      ...(this.options.maxUncommittedBytes === undefined
        ? {}
        : { maxUncommittedBytes: this.options.maxUncommittedBytes }),
      quiesceTicks: this.options.quiesceTicks ?? 0,
      memberDown: (id) => this.down.has(id),
      skipHeartbeatsAfterAppends: this.options.skipHeartbeatsAfterAppends ?? false,
      omitRedundantReplies: this.options.omitRedundantReplies ?? false,
      deferCommitBroadcast: this.options.deferCommitBroadcast ?? false,
      ...(this.options.testingBugs === undefined ? {} : { testingBugs: this.options.testingBugs }),
      ...(this.lostLast === null ? {} : { recoveringUntil: this.lostLast }),
    };
    return new RawNode(config);
  }

  /**
   * Crash, and lose the state machine and the log while the hard state survives, as a node
   * whose shard directory was removed (MultiRaft): the log restarts empty, the term and vote
   * stay, the commit is 0, and the member restarts recovering until its log is as up to date
   * as the one it lost (the newest of the logs lost, if it lost one before).
   */
  loseLog(): void {
    if (this.#durable !== null) this.storage = this.#durable;
    this.#durable = null;
    const lost = this.storage;
    const index = lost.lastIndex();
    const t = lost.term(index);
    const prev = this.lostLast;
    if (prev === null || t > prev.term || (t === prev.term && index > prev.index)) {
      this.lostLast = { index, term: t };
    }
    const hs = lost.hardState();
    this.storage = new MemoryStorage();
    this.storage.setHardState({ term: hs.term, vote: hs.vote, commit: logIndex(0) });
    this.sm = new StateMachine();
    this.raw = this.#newRawNode();
  }

  /**
   * Crash and restart: everything not on the "disk" (MemoryStorage) is lost, including the state
   * machine, which is rebuilt from the snapshot and replayed from the log.
   */
  restart(): void {
    // A restarted driver's failure detector starts over.
    this.down.clear();
    if (this.#durable !== null) this.storage = this.#durable;
    this.#durable = null;
    this.sm = new StateMachine();
    const snap = this.storage.snapshot();
    if (snap.meta.index > 0) this.sm.install(snap);
    this.raw = this.#newRawNode();
  }

  /** Handles one Ready in the documented order; `send` receives the outgoing messages. */
  handleReady(send: (m: Message) => void): ReadyOutcome {
    const rd = this.raw.ready();
    if (this.options.ackBeforePersist === true) {
      // Planted bug: the writes reach the page cache but are fsynced only with the next Ready,
      // while the messages (acknowledgements, votes) leave now.
      this.#durable = this.storage.clone();
    }
    this.#persist(rd);
    for (const m of rd.messages) send(m.type === "snapshot" ? this.#snapshotFor(m) : m);
    if (rd.snapshot !== null) this.sm.install(rd.snapshot);
    for (const e of rd.committedEntries) {
      if (e.index > this.sm.appliedIndex) this.sm.apply(e);
    }
    this.raw.advance();
    return { ready: rd, applied: rd.committedEntries, readStates: rd.readStates };
  }

  /**
   * The stored snapshot may predate the recipient's addition, and a member refuses a snapshot
   * whose configuration leaves it out; the driver then sends a fresh one taken at its applied
   * index (as etcd's server always does), which includes every member the core sends to.
   */
  #snapshotFor(m: Extract<Message, { type: "snapshot" }>): Message {
    const conf = m.snapshot.meta.conf;
    if (conf.voters.includes(m.to) || conf.learners.includes(m.to)) return m;
    const snapshot = this.storage.createSnapshot(
      this.sm.appliedIndex,
      this.raw.status().conf,
      this.sm.snapshotData(),
    );
    return { ...m, snapshot };
  }

  #persist(rd: Ready): void {
    if (rd.snapshot !== null) this.storage.applySnapshot(rd.snapshot);
    this.storage.append(rd.entries);
    if (rd.hardState !== null) this.storage.setHardState(rd.hardState);
  }

  /**
   * Snapshot the state machine at its applied index and compact the log up to it. The
   * configuration the core reports is the one in force at that same applied index.
   */
  compact(): Snapshot {
    const index = this.sm.appliedIndex;
    const snap = this.storage.createSnapshot(index, this.raw.status().conf, this.sm.snapshotData());
    this.storage.compact(index);
    return snap;
  }
}
