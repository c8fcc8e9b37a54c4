/**
 * Membership changes as chaos faults (design.md §5.2, docs/operations.md "Growing and shrinking
 * a cluster"), driven the way an operator drives them, through the public API only:
 *
 * - join: a new node (a new id, data directory and ports; or, now and then, the id and ports of a
 *   member removed earlier in the run, with an empty data directory) started with the cluster's
 *   seeds; done once a member's view has it `active` and the meta group places replicas on it;
 * - decommission: `Admin.DecommissionNode` of an active member, asked again until it answers
 *   `decommissioned` (a decommissioning member answers its standing; the run's first
 *   decommission is cancelled first, `Admin.RecommissionNode`, and asked anew); then
 *   the node is stopped (SIGTERM) and retired, and `Admin.RemoveNode` retires its id;
 * - remove: once every node is healthy, an active member SIGKILLed for good; once the meta
 *   group's leader has marked it `dead` (after `cluster.dead_after_ms`), its replicas
 *   re-created on the others and no group names it any more, `Admin.RemoveNode`.
 *
 * A change is slow (seconds to minutes) and the other faults go on meanwhile, on any member:
 * the change runs beside the fault schedule, one at a time, and each step that changes a
 * process's life (start, stop) runs under the cluster's `exclusive()`, so that a fault never
 * restarts a node the change has retired. Each change records when it reached each phase
 * (milliseconds from its start) in its fault record's `phases`.
 */
import type { ChaosCluster } from "./cluster.ts";
import { clusterView, type ViewMessage } from "../support/cluster-process.ts";
import { type PlacementView, shardGroups } from "./checks.ts";
import { nodeOfReplica } from "../../src/cluster/index.ts";

/** How long each phase may take before the change fails the run. */
export const MEMBERSHIP_TIMEOUTS_MS = {
  /**
   * Started → active, and active → holding replicas: seconds on a quiet machine, but a crash
   * loop of the joining node at a load average of 35 (a start took 45–80 s) outlasted 90 s.
   */
  join: 180_000,
  /** Asked → decommissioned. */
  decommission: 180_000,
  /**
   * Killed → dead, and dead → re-replicated. Each new leader of the meta group waits a whole
   * `dead_after_ms` before it marks a member dead (src/node/allocator-loop.ts): with the meta
   * group one member down for good, faults on its other members every 10–20 s (kill-flap,
   * kill-leader, pauses) moved its leadership on and on, and n1 was marked dead 131 s after
   * its kill (seed 206).
   */
  dead: 240_000,
  /** Asked → removed. */
  remove: 30_000,
} as const;

const POLL_MS = 250;

/**
 * Whether every running member answers GET /health with `healthy` now: no shard short of a
 * leader or of a voter, no replica being refilled.
 */
export async function everyNodeHealthy(cluster: ChaosCluster): Promise<boolean> {
  const reports = await Promise.all(cluster.members().map((n) => cluster.http(n.id, "/health")));
  return reports.every((h) => (h?.body as { status?: string } | undefined)?.status === "healthy");
}

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, Math.max(0, ms)));

/** `p`, or a rejection after `ms` (the timer cleared either way). */
export function timeout<T>(p: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  return Promise.race([
    p,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(`no answer within ${ms} ms`)), ms);
    }),
  ]).finally(() => clearTimeout(timer));
}

/** A member's view with the fields of an elastic cluster (ViewMessage names the common ones). */
type MemberViewMessage = Omit<ViewMessage, "nodes" | "shards"> & Omit<PlacementView, "node">;

/** The views of every running member that answers within 3 s. */
export async function memberViews(cluster: ChaosCluster): Promise<PlacementView[]> {
  const views = await Promise.all(
    cluster.members().map(async (n): Promise<PlacementView | null> => {
      const c = n.client;
      if (c === null || n.state !== "running") return null;
      try {
        const v = (await timeout(clusterView(c), 3_000)) as unknown as MemberViewMessage;
        return { node: n.id, nodes: v.nodes, shards: v.shards };
      } catch {
        return null;
      }
    }),
  );
  return views.filter((v): v is PlacementView => v !== null);
}

export interface MembershipRecord {
  /** The node the change is about (a join adds it once the node is made). */
  readonly targets: string[];
  detail: string;
  /** Milliseconds from the change's start to each phase it reached. */
  readonly phases: Record<string, number>;
}

export class MembershipChanges {
  readonly #cluster: ChaosCluster;
  readonly #now: () => number;
  /** The node the change under way is about (faults pick it now and then). */
  target: string | null = null;
  #turn = 0;
  /** Whether this run cancelled a decommission already (#cancelledDecommission). */
  #cancelledOne = false;

  constructor(cluster: ChaosCluster, now: () => number) {
    this.#cluster = cluster;
    this.#now = now;
  }

  /**
   * Starts a new node with the cluster's seeds, under a new id or, with `reuse`, under the id of
   * a member removed earlier in the run (an empty data directory: a new member under the old
   * id, as a StatefulSet scaled down and up again makes); resolves once it is active and holds
   * replicas.
   */
  async join(r: MembershipRecord, reuse: string | null = null): Promise<void> {
    const cluster = this.#cluster;
    const t0 = this.#now();
    const id = await cluster.exclusive(async () => {
      let added: string;
      if (reuse === null) {
        added = await cluster.addNode();
        r.detail = `${added} started with the cluster's seeds and an empty data directory`;
      } else {
        await cluster.reuseNode(reuse);
        added = reuse;
        r.detail = `${added}, a removed member's id, started again with an empty data directory`;
      }
      this.target = added;
      r.targets.push(added);
      await cluster.start(added);
      return added;
    });
    r.phases["started"] = Math.round(this.#now() - t0);
    await this.#until(`${id} active`, MEMBERSHIP_TIMEOUTS_MS.join, () =>
      this.#seen(id, (m) => m.member_state === "active"),
    );
    r.phases["active"] = Math.round(this.#now() - t0);
    await this.#until(`replicas placed on ${id}`, MEMBERSHIP_TIMEOUTS_MS.join, () =>
      this.#seen(id, (m) => m.replicas > 0),
    );
    r.phases["replicas"] = Math.round(this.#now() - t0);
  }

  /** Decommissions `id`, stops it once decommissioned, and removes it. */
  async decommission(id: string, r: MembershipRecord): Promise<void> {
    this.target = id;
    const t0 = this.#now();
    r.targets.push(id);
    r.detail = `Admin.DecommissionNode ${id}, cancelled (Admin.RecommissionNode) and asked again; stop it once decommissioned, remove it`;
    // The run's first decommission is cancelled first (one a run: each costs seconds).
    if (!this.#cancelledOne) {
      this.#cancelledOne = true;
      await this.#cancelledDecommission(id, r, t0);
    } else r.detail = `Admin.DecommissionNode ${id}, stop it once decommissioned, remove it`;
    const answers = new Set<string>();
    const standing = await this.#until(
      `${id} decommissioned`,
      MEMBERSHIP_TIMEOUTS_MS.decommission,
      async () => {
        const s = await this.#admin("DecommissionNode", id);
        answers.add(s.state);
        if (s.state === "decommissioning" && r.phases["decommissioning"] === undefined)
          r.phases["decommissioning"] = Math.round(this.#now() - t0);
        return s.state === "decommissioned" ? s : undefined;
      },
      1_000,
    );
    r.phases["decommissioned"] = Math.round(this.#now() - t0);
    if (standing.replicas !== 0)
      throw new Error(`${id} is decommissioned with ${standing.replicas} replica(s) left`);
    if (answers.has("active") || answers.has("dead"))
      r.detail += ` (seen ${[...answers].join(", ")} on the way)`;
    await this.#cluster.exclusive(() => this.#cluster.retire(id, "SIGTERM"));
    r.phases["stopped"] = Math.round(this.#now() - t0);
    await this.#remove(id);
    r.phases["removed"] = Math.round(this.#now() - t0);
  }

  /**
   * A decommission of `id` cancelled (`cairn node recommission`) once a replica has left it (or
   * after 5 s): it is active again, the moves under way finish and the allocator evens replicas
   * back onto it, all beside the other faults. Too late when it is decommissioned already
   * (a fast drain): the change goes on from there.
   */
  async #cancelledDecommission(id: string, r: MembershipRecord, t0: number): Promise<void> {
    const first = await this.#until(
      `${id} decommissioning`,
      MEMBERSHIP_TIMEOUTS_MS.decommission,
      async () => {
        const s = await this.#admin("DecommissionNode", id);
        return s.state === "decommissioning" || s.state === "decommissioned" ? s : undefined;
      },
    );
    if (first.state !== "decommissioning") return;
    try {
      await this.#until(`a replica leaves ${id}`, 5_000, async () => {
        const s = await this.#admin("GetNode", id);
        return s.replicas < first.replicas || s.state !== "decommissioning" ? s : undefined;
      });
    } catch {
      // None left within 5 s (the moves held up by the faults): recommissioned all the same.
    }
    const back = await this.#until(
      `${id} recommissioned`,
      MEMBERSHIP_TIMEOUTS_MS.remove,
      async () => {
        const now = await this.#admin("GetNode", id);
        if (now.state !== "decommissioning") return now;
        return this.#admin("RecommissionNode", id);
      },
    );
    if (back.state === "active") r.phases["recommissioned"] = Math.round(this.#now() - t0);
    else r.detail += ` (${back.state} before the recommission)`;
  }

  /** SIGKILLs `id` for good; once dead and re-replicated, removes it. */
  async remove(id: string, r: MembershipRecord): Promise<void> {
    this.target = id;
    const t0 = this.#now();
    r.targets.push(id);
    r.detail = `SIGKILL of ${id} for good; once dead and re-replicated, remove it`;
    // A member lost for good while a replica of another is still refilled (after a wipe) or
    // replaced leaves some shard two voters short, as in any three-replica system (seed 3201:
    // n2, the leader of four shards whose wiped n1 was a learner again, was killed 5 s after
    // the wipe, and those shards never had a quorum again). As a wipe does, the kill waits
    // for every node to be healthy.
    await this.#until(
      "every node healthy before the kill",
      MEMBERSHIP_TIMEOUTS_MS.dead,
      async () => ((await everyNodeHealthy(this.#cluster)) ? true : undefined),
    );
    r.phases["healthy"] = Math.round(this.#now() - t0);
    await this.#cluster.exclusive(() => this.#cluster.retire(id, "SIGKILL"));
    r.phases["killed"] = Math.round(this.#now() - t0);
    await this.#until(`${id} dead`, MEMBERSHIP_TIMEOUTS_MS.dead, () =>
      this.#seen(id, (m) => m.member_state === "dead"),
    );
    r.phases["dead"] = Math.round(this.#now() - t0);
    await this.#until(`${id}'s replicas re-created`, MEMBERSHIP_TIMEOUTS_MS.dead, async () => {
      const views = await memberViews(this.#cluster);
      const counted = views.flatMap((v) => v.nodes.filter((n) => n.id === id));
      if (counted.length === 0 || counted.some((n) => n.replicas !== 0)) return undefined;
      for (const g of shardGroups(views).values()) {
        if (g.replicas.map(nodeOfReplica).includes(id)) return undefined;
      }
      return true;
    });
    r.phases["re-replicated"] = Math.round(this.#now() - t0);
    await this.#remove(id);
    r.phases["removed"] = Math.round(this.#now() - t0);
  }

  async #remove(id: string): Promise<void> {
    await this.#until(`${id} removed`, MEMBERSHIP_TIMEOUTS_MS.remove, async () => {
      const s = await this.#admin("RemoveNode", id);
      return s.state === "removed" ? true : undefined;
    });
  }

  /**
   * Whether some running member's view has member `id` as `holds` wants. A view's member
   * states and replica counts are of the meta state its node applied, so what one view shows
   * is committed; a view behind (a node cut off) only shows it later.
   */
  async #seen(
    id: string,
    holds: (m: PlacementView["nodes"][number]) => boolean,
  ): Promise<true | undefined> {
    for (const v of await memberViews(this.#cluster)) {
      const m = v.nodes.find((n) => n.id === id);
      if (m !== undefined && holds(m)) return true;
    }
    return undefined;
  }

  /** An Admin call about member `id` through a running member other than it, if there is one. */
  async #admin(method: string, id: string): Promise<{ state: string; replicas: number }> {
    const running = this.#cluster
      .members()
      .filter((n) => n.client !== null && n.state === "running");
    const others = running.filter((n) => n.id !== id);
    // Each call through the next one: a member cut off or paused does not hold the change.
    const pool = others.length > 0 ? others : running;
    const via = pool[this.#turn++ % Math.max(1, pool.length)];
    const c = via?.client;
    if (c === null || c === undefined) throw new Error("no running member");
    const res = await c.call(c.admin, method, { node_id: id }, 12_000);
    return { state: String(res["state"]), replicas: Number(res["replicas"] ?? 0) };
  }

  /** Polls `probe` (errors are retried) until it returns a value, or throws after `ms`. */
  async #until<T>(
    what: string,
    ms: number,
    probe: () => Promise<T | undefined>,
    everyMs = POLL_MS,
  ): Promise<T> {
    const deadline = performance.now() + ms;
    let last = "";
    for (;;) {
      try {
        const v = await probe();
        if (v !== undefined) return v;
      } catch (err) {
        last = `; last error: ${String(err).slice(0, 300)}`;
      }
      if (performance.now() > deadline) throw new Error(`${what}: not within ${ms} ms${last}`);
      await sleep(everyMs);
    }
  }
}
