/**
 * Watches the file system of this node's data directory and tells the meta group when it is
 * nearly full (`cluster.disk_full_percent` used, as df's Use% counts: used blocks over used and
 * available ones) and when it has room again (`DISK_ROOM_MARGIN` points below), with a
 * `set-disk` command. While the meta state records a member's disk full, the allocator moves no
 * replica onto it and new shards go elsewhere when enough members have room
 * (src/cluster/allocator.ts, src/node/cluster.ts): a node filling up stops taking more (what
 * CockroachDB does for stores over 92.5 %), instead of failing every snapshot sent to it. It
 * keeps the replicas it holds, and the balancing may move some off it.
 *
 * Only this node's own record is proposed, and only when the record and the disk disagree, so a
 * steady disk costs no meta entry (the used share is the disk reserve's last look: one statfs a
 * second for both, src/node/disk-reserve.ts). A check while the last one's
 * proposal is under way does nothing; a proposal that fails is made again at the next check.
 */
import type { MetaCommand, MetaMember, MetaState } from "../cluster/index.ts";
import type { Logger } from "../ops/index.ts";

/** A full disk counts as having room again this many points below the threshold. */
export const DISK_ROOM_MARGIN = 5;
/** How often the disk's used share is checked against the threshold, at most. */
export const DISK_CHECK_INTERVAL_MS = 10_000;

export interface DiskWatchHost {
  readonly nodeId: string;
  /** `cluster.disk_full_percent`: 100 turns the watch off. */
  readonly fullPercent: number;
  meta(): MetaState | null;
  /** The share of the data directory's file system in use, in percent (0–100). */
  usedPercent(): Promise<number>;
  propose(cmd: MetaCommand): Promise<void>;
  readonly log: Logger;
}

/** df's Use%: used blocks over used plus available ones (the root reserve left out), rounded up. */
export function usedPercentOf(s: {
  readonly blocks: number;
  readonly bfree: number;
  readonly bavail: number;
}): number {
  const used = s.blocks - s.bfree;
  const total = used + s.bavail;
  return total <= 0 ? 0 : Math.min(100, Math.ceil((used * 100) / total));
}

export class DiskWatch {
  readonly #host: DiskWatchHost;
  #busy = false;
  #nextAt = -Infinity;

  constructor(host: DiskWatchHost) {
    this.#host = host;
  }

  /**
   * A check when the last one is at least DISK_CHECK_INTERVAL_MS old (`now`: performance.now())
   * and this node is a member: a node that has just joined reports at its next call, before the
   * allocator places anything on it.
   */
  maybeCheck(now = performance.now()): void {
    if (this.#busy || now < this.#nextAt || this.#member() === undefined) return;
    this.#nextAt = now + DISK_CHECK_INTERVAL_MS;
    void this.check();
  }

  /** This node's record in the meta state, when it is a member that may hold replicas. */
  #member(): MetaMember | undefined {
    const meta = this.#host.meta();
    if (meta === null || meta.clusterId === null) return undefined;
    const me = meta.members.get(this.#host.nodeId);
    return me === undefined || me.state === "removed" || me.state === "decommissioned"
      ? undefined
      : me;
  }

  /**
   * Looks at the disk and proposes this node's `set-disk` when the meta state records
   * otherwise. Resolves to the command proposed and committed, or null (nothing to change, not
   * a member, a check already under way, or a failure: logged, and tried again next time).
   */
  async check(): Promise<MetaCommand | null> {
    const host = this.#host;
    if (this.#busy || host.fullPercent >= 100) return null;
    this.#busy = true;
    try {
      let used: number;
      try {
        used = await host.usedPercent();
      } catch (err) {
        host.log.debug("data directory's disk usage unknown", { error: String(err) });
        return null;
      }
      const me = this.#member();
      if (me === undefined) return null;
      const recorded = me.diskFull === true;
      const full = recorded ? used > host.fullPercent - DISK_ROOM_MARGIN : used >= host.fullPercent;
      if (full === recorded) return null;
      const cmd: MetaCommand = { op: "set-disk", id: host.nodeId, full };
      try {
        await host.propose(cmd);
      } catch (err) {
        host.log.debug("disk report not committed; the next check proposes it again", {
          full,
          error: err instanceof Error ? err.message : String(err),
        });
        return null;
      }
      const fields = { used_percent: used, disk_full_percent: host.fullPercent };
      if (full)
        host.log.warn(
          "data directory's disk nearly full: this node takes no new replica until it has room",
          fields,
        );
      else host.log.info("data directory's disk has room again: this node takes replicas", fields);
      return cmd;
    } finally {
      this.#busy = false;
    }
  }
}
