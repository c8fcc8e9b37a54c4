/**
 * The cluster version's upkeep (docs/operations.md, "Upgrading"; BUILD_VERSION in
 * src/cluster/meta.ts). Two proposals, each made only when the meta state asks for it, so a
 * cluster whose members all run one build proposes nothing:
 *
 * - this node reports its build's highest cluster version (`set-build`) when its member record
 *   says another: once after an upgrade onto a new build, or after a rollback to an older one
 *   (which holds the cluster version back until the member runs the new build again);
 * - the meta group's leader raises the cluster version (`set-version`), one version at a time,
 *   once every member that may serve again runs a build that has the next one
 *   (MetaState.lowestBuild): the new build's rules and formats are used from then on, and a
 *   build without them can no longer join or serve (ClusterState stops it).
 *
 * At most one proposal is under way; one that fails is made again at the next pass.
 */
import type { MetaCommand, MetaState } from "../cluster/index.ts";
import type { Logger } from "../ops/index.ts";

export interface VersionUpkeepHost {
  readonly nodeId: string;
  /** The highest cluster version this node's build runs. */
  readonly build: number;
  meta(): MetaState | null;
  /** Whether this node leads the meta group (shard 0). */
  leadsMeta(): boolean;
  propose(cmd: MetaCommand): Promise<void>;
  readonly log: Logger;
}

export class VersionUpkeep {
  readonly #host: VersionUpkeepHost;
  #busy = false;

  constructor(host: VersionUpkeepHost) {
    this.#host = host;
  }

  /** What the meta state asks of this node now, or null. */
  next(): MetaCommand | null {
    const host = this.#host;
    const meta = host.meta();
    if (meta === null || meta.clusterId === null) return null;
    const me = meta.members.get(host.nodeId);
    // A build older than the cluster's version never reports: the node stops (ClusterState).
    if (
      me !== undefined &&
      me.state !== "removed" &&
      me.state !== "decommissioned" &&
      (me.build ?? 1) !== host.build &&
      host.build >= meta.version
    )
      return { op: "set-build", id: host.nodeId, build: host.build };
    if (host.leadsMeta() && meta.lowestBuild().build > meta.version)
      return { op: "set-version", version: meta.version + 1 };
    return null;
  }

  /** Proposes next(), unless a proposal is under way. Resolves once it has settled. */
  async pass(): Promise<void> {
    if (this.#busy) return;
    const cmd = this.next();
    if (cmd === null) return;
    this.#busy = true;
    try {
      await this.#host.propose(cmd);
      if (cmd.op === "set-build")
        this.#host.log.info("reported this build's cluster version", { build: cmd.build });
    } catch (err) {
      this.#host.log.debug("cluster version upkeep not committed; the next pass tries again", {
        op: cmd.op,
        error: err instanceof Error ? err.message : String(err),
      });
    } finally {
      this.#busy = false;
    }
  }
}
