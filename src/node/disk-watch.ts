/**
 * Watches the file system of this node's data directory and tells the meta group when it is
 * nearly full (`cluster.disk_full_percent` used, as df's Use% counts: used blocks over used and
 * available ones, or less than `storage.min_free_bytes` available: this node refuses Puts,
 * src/node/disk-reserve.ts) and when it has room again (taking Puts, and `DISK_ROOM_MARGIN`
 * points below the percentage), with a `set-disk` command. While the meta state records a
 * member's disk full, the allocator moves no replica onto it and new shards go elsewhere when
 * enough members have room (src/cluster/allocator.ts, src/node/cluster.ts): a node filling up
 * stops taking more (what CockroachDB does for stores over 92.5 %), instead of failing every
 * snapshot sent to it. It keeps the replicas it holds, and the balancing may move some off it;
 * it hands its leaderships to replicas with room (MetaState.leaderWanted), so that a member
 * whose disk fills by itself does not make the shards it leads refuse Puts.
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
  /** `cluster.disk_full_percent`: 100 leaves the disk full only while Puts are refused. */
  readonly fullPercent: number;
  /** Whether this node refuses Puts for its disk now (DiskReserve.low). */
  putsRefused(): boolean;
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
  /** putsRefused() at the last check's start. */
  #refused = false;

  constructor(host: DiskWatchHost) {
    this.#host = host;
  }

  /**
   * A check when the last one is at least DISK_CHECK_INTERVAL_MS old (`now`: performance.now()),
   * or whether Puts are refused changed since it, and this node is a member: a node that has
   * just joined reports at its next call, before the allocator places anything on it, and one
   * that starts refusing Puts at once, before its leaderships refuse many.
   */
  maybeCheck(now = performance.now()): void {
    if (this.#busy || this.#member() === undefined) return;
    if (now < this.#nextAt && this.#host.putsRefused() === this.#refused) return;
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
    if (this.#busy) return null;
    this.#busy = true;
    try {
      const refused = host.putsRefused();
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
      const over =
        host.fullPercent < 100 &&
        (recorded ? used > host.fullPercent - DISK_ROOM_MARGIN : used >= host.fullPercent);
      const full = refused || over;
      if (full === recorded) {
        this.#refused = refused;
        return null;
      }
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
      this.#refused = refused;
      const fields = {
        used_percent: used,
        disk_full_percent: host.fullPercent,
        puts_refused: refused,
      };
      if (full)
        host.log.warn(
          "data directory's disk nearly full: this node takes no new replica and hands its leaderships to replicas with room until it has room",
          fields,
        );
      else host.log.info("data directory's disk has room again: this node takes replicas", fields);
      return cmd;
    } finally {
      this.#busy = false;
    }
  }
}
