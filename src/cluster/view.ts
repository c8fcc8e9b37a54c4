/**
 * The cluster view: members and, per active shard, its leader, replicas and term. Clients route
 * with it (Meta.WatchCluster streams it); every change bumps `epoch` and is published as a new
 * full view. Changes that arrive together (a burst of elections) are coalesced into one view,
 * and subscribers get at most one view per `minIntervalMs`: a change after a quiet spell at
 * once, the changes within the interval after it in one view at its end. Each view is sent
 * whole to every watching client, so without that bound a node creating its 1,024 shards (or
 * electing after a peer's loss) encoded and sent a view of up to 1,024 shards per event-loop
 * turn with a change, to each client: quadratic in the shards. `current()` is never late.
 */

export interface MemberView {
  readonly id: string;
  readonly rpc_addr: string;
  readonly http_addr: string;
  /** SWIM's: `left` is a member that stopped gracefully (it said so), `dead` one that failed. */
  readonly state: "alive" | "suspect" | "dead" | "left";
  /**
   * Where the member stands in the cluster (design.md §5.2: joining, active, decommissioning,
   * decommissioned, dead); absent while this node does not know its cluster.
   */
  readonly member_state?: string;
  /** Shards the meta group places on the member; absent with member_state. */
  readonly replicas?: number;
  /**
   * The member reported its data directory's disk nearly full (`cluster.disk_full_percent`): no
   * new replica goes to it. Present (true) only then.
   */
  readonly disk_full?: boolean;
  /**
   * The highest cluster version the member's build runs (MetaMember.build); absent with
   * member_state.
   */
  readonly build?: number;
}

export interface ShardView {
  readonly id: number;
  /** Node id of the leader, "" when none is known. */
  readonly leader: string;
  readonly replicas: readonly string[];
  readonly term: number;
}

export interface ClusterView {
  readonly epoch: number;
  readonly nodes: readonly MemberView[];
  readonly shards: readonly ShardView[];
  readonly total_shards: number;
  /** "" until the node learnt its cluster (always "" on a single node). */
  readonly cluster_id: string;
  /** This node's data directory incarnation ("" on a single node). */
  readonly incarnation: string;
  /** The cluster version (MetaState.version); 0 until the node learnt its cluster. */
  readonly cluster_version: number;
  /** This node advertises its own seed_nodes[0]: it founds the cluster when none exists. */
  readonly first_seed: boolean;
}

/**
 * The RPC address of node `id` in `view`, or null when the view does not know it or holds the
 * node dead or left (a request sent there would only wait for a connection that will not come).
 */
export function rpcAddressOf(view: ClusterView, id: string): string | null {
  const member = view.nodes.find((n) => n.id === id);
  if (
    member === undefined ||
    member.state === "dead" ||
    member.state === "left" ||
    member.rpc_addr === ""
  )
    return null;
  return member.rpc_addr;
}

export type ViewListener = (view: ClusterView) => void;

/** The clock of a publisher (tests pass a manual one). */
export interface ViewClock {
  now(): number;
  /** Calls `fn` after `ms`; must not keep the process alive. */
  setTimeout(fn: () => void, ms: number): void;
}

const systemViewClock: ViewClock = {
  now: () => performance.now(),
  setTimeout: (fn, ms) => {
    setTimeout(fn, ms).unref();
  },
};

/** Subscribers get at most one view per this many milliseconds by default. */
export const VIEW_MIN_INTERVAL_MS = 100;

export class ClusterViewPublisher {
  readonly #totalShards: number;
  #epoch = 0;
  #members = new Map<string, MemberView>();
  /** Every shard's view, kept sorted by id: a view is a copy, not a sort (1,024 shards open one by one). */
  readonly #shards: ShardView[] = [];
  readonly #listeners = new Set<ViewListener>();
  #current: ClusterView;
  #publishScheduled = false;
  #clusterId = "";
  #incarnation = "";
  #clusterVersion = 0;
  #firstSeed = false;
  readonly #clock: ViewClock;
  readonly #minIntervalMs: number;
  /** When subscribers last got a view (clock ms), and whether a later one waits for its turn. */
  #notifiedAt = Number.NEGATIVE_INFINITY;
  #notifyScheduled = false;

  constructor(
    totalShards: number,
    options: { readonly clock?: ViewClock; readonly minIntervalMs?: number } = {},
  ) {
    this.#totalShards = totalShards;
    this.#clock = options.clock ?? systemViewClock;
    this.#minIntervalMs = options.minIntervalMs ?? VIEW_MIN_INTERVAL_MS;
    this.#current = this.#build();
  }

  current(): ClusterView {
    return this.#current;
  }

  /** Calls `listener` with the current view now and with every later view; returns unsubscribe. */
  subscribe(listener: ViewListener): () => void {
    this.#listeners.add(listener);
    listener(this.#current);
    return () => this.#listeners.delete(listener);
  }

  setMembers(members: readonly MemberView[]): void {
    this.#members = new Map(members.map((m) => [m.id, m]));
    this.#changed();
  }

  setClusterId(id: string): void {
    if (id === this.#clusterId) return;
    this.#clusterId = id;
    this.#changed();
  }

  setClusterVersion(version: number): void {
    if (version === this.#clusterVersion) return;
    this.#clusterVersion = version;
    this.#changed();
  }

  setFirstSeed(firstSeed: boolean): void {
    if (firstSeed === this.#firstSeed) return;
    this.#firstSeed = firstSeed;
    this.#changed();
  }

  setIncarnation(id: string): void {
    if (id === this.#incarnation) return;
    this.#incarnation = id;
    this.#changed();
  }

  /** Shard `id`'s view as last set (before subscribers get it), or undefined when never set. */
  shard(id: number): ShardView | undefined {
    const s = this.#shards[this.#position(id)];
    return s?.id === id ? s : undefined;
  }

  /** The first position in #shards whose id is not below `id`. */
  #position(id: number): number {
    const shards = this.#shards;
    let lo = 0;
    let hi = shards.length;
    while (lo < hi) {
      const mid = (lo + hi) >>> 1;
      if ((shards[mid] as ShardView).id < id) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  }

  setShard(shard: ShardView): void {
    const shards = this.#shards;
    const lo = this.#position(shard.id);
    const prev = shards[lo];
    if (prev?.id !== shard.id) {
      shards.splice(lo, 0, shard);
    } else if (
      prev.leader === shard.leader &&
      prev.term === shard.term &&
      prev.replicas.join() === shard.replicas.join()
    ) {
      return;
    } else {
      shards[lo] = shard;
    }
    this.#changed();
  }

  #changed(): void {
    if (this.#publishScheduled) return;
    this.#publishScheduled = true;
    queueMicrotask(() => {
      this.#publishScheduled = false;
      this.#epoch++;
      this.#current = this.#build();
      this.#notify();
    });
  }

  /** Hands the current view to the subscribers, or schedules that for the interval's end. */
  #notify(): void {
    if (this.#notifyScheduled) return;
    const wait = this.#notifiedAt + this.#minIntervalMs - this.#clock.now();
    if (wait > 0) {
      this.#notifyScheduled = true;
      this.#clock.setTimeout(() => {
        this.#notifyScheduled = false;
        this.#notify();
      }, wait);
      return;
    }
    this.#notifiedAt = this.#clock.now();
    const view = this.#current;
    for (const l of [...this.#listeners]) l(view);
  }

  #build(): ClusterView {
    return {
      epoch: this.#epoch,
      nodes: [...this.#members.values()].sort((a, b) => a.id.localeCompare(b.id)),
      shards: this.#shards.slice(),
      total_shards: this.#totalShards,
      cluster_id: this.#clusterId,
      incarnation: this.#incarnation,
      cluster_version: this.#clusterVersion,
      first_seed: this.#firstSeed,
    };
  }
}
