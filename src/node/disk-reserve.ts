/**
 * The disk space a node keeps free (`storage.min_free_bytes`): while the file system of its
 * data directory has less available than that, the node refuses Puts with RESOURCE_EXHAUSTED
 * (`CAIRN_ERR_DISK_FULL`) and keeps serving reads and Deletes (under a quarter of it, Deletes
 * are refused too: a tombstone takes room until compactions drop it), instead of writing on until a WAL
 * write fails with ENOSPC and the node stops (what etcd's NOSPACE alarm and TiKV's reserved
 * space do). The reserve is what lets the node finish what it has accepted: the writes already
 * in its log and its followers' appends, memtable flushes, compactions (which free space, but
 * write their output before deleting their inputs), the meta group's entries. A peer's snapshot
 * is taken only while its file and the tables built from it leave the reserve available
 * (snapshotRefusal): the receiver has no size limit but the disk's.
 *
 * The disk is looked at (statfs: the bytes available to an unprivileged user, as `df` shows
 * them) once a second, and sooner when the WAL has written an eighth of the reserve since the
 * last look (with shard workers, each worker's WAL its share of that eighth), so a fast writer
 * cannot run through the reserve between two looks. Puts are taken
 * again once the available space is an eighth of the reserve above it: a disk on the threshold
 * does not make the node flip at every look.
 *
 * A leader decides for its shard's writes (multi-raft-writes.ts): its own disk, not its
 * followers'. The data of a shard is on every replica, and the allocator keeps the members'
 * replica counts within `cluster.rebalance.tolerance`, so members fill at about the same rate
 * and reach the reserve together. A member whose disk fills for another reason (another
 * program's files) reports its disk full to the meta group as soon as it refuses Puts
 * (disk-watch.ts), and hands the shards it leads to replicas with room
 * (MetaState.leaderWanted), so their Puts are taken; it still reaches ENOSPC as a follower if
 * nobody frees space, and stops then as before.
 */
import type { Logger } from "../ops/index.ts";
import { usedPercentOf } from "./disk-watch.ts";

/** How often the disk is looked at, at most this long apart. */
export const DISK_RESERVE_CHECK_MS = 1000;

const MIB = 1024 * 1024;

export interface DiskReserveOptions {
  /** `storage.min_free_bytes`; 0 turns the reserve off. */
  readonly minFreeBytes: number;
  /**
   * The WALs writing on this disk, each with a reserve of its own that counts only its own
   * writes (the node's shard workers). Each looks after its share of an eighth of the reserve,
   * so that together they write no more than an eighth between looks. Default 1.
   */
  readonly writers?: number;
  /** The data directory (for the refusal's message). */
  readonly dataDir: string;
  /**
   * The data directory's file system now (statfs: sizes in blocks of `bsize` bytes). Also the
   * node's one source of its disk's used share (usedPercent: DiskWatch's).
   */
  statfs(): Promise<DiskStats>;
  /** Told of each look's result (the metrics). */
  readonly onCheck?: (available: number, low: boolean) => void;
  readonly log: Logger;
}

/** What a look reads of statfs. */
export interface DiskStats {
  readonly bsize: number;
  readonly blocks: number;
  readonly bfree: number;
  readonly bavail: number;
}

export class DiskReserve {
  readonly #o: DiskReserveOptions;
  #low = false;
  /** Deletes are refused too: the last look found less than a quarter of the reserve. */
  #deletesRefused = false;
  #available: number | null = null;
  /** The last look's statfs, or null before a look succeeded. */
  #stats: DiskStats | null = null;
  #busy: Promise<void> | null = null;
  /** Bytes the WAL and incoming snapshots wrote since the last look began. */
  #written = 0;
  #timer: NodeJS.Timeout | null = null;
  /** The last look failed (logged once). */
  #failing = false;

  constructor(options: DiskReserveOptions) {
    this.#o = options;
  }

  /** The bytes available at the last look, or null before the first one. */
  get available(): number | null {
    return this.#available;
  }

  /**
   * The share of the file system in use at the last look, as df's Use% counts it (usedPercentOf):
   * what DiskWatch reports to the meta group. Throws before a look succeeded.
   */
  usedPercent(): number {
    if (this.#stats === null) throw new Error("the data directory's disk has not been looked at");
    return usedPercentOf(this.#stats);
  }

  /** Puts are refused: the last look found less than the reserve available. */
  get low(): boolean {
    return this.#low;
  }

  /**
   * Why a write (`op`) is refused now, or null when it is not: the message of its
   * CAIRN_ERR_DISK_FULL. Deletes are refused only under a quarter of the reserve.
   */
  refusal(op: "put" | "delete"): string | null {
    if (!this.#low) return null;
    const available = this.#available ?? 0;
    if (op === "delete") {
      if (!this.#deletesRefused) return null;
      return `the disk of data_dir ${this.#o.dataDir} has ${mib(available)} available, under a quarter of storage.min_free_bytes (${mib(this.#o.minFreeBytes)}): Deletes are refused too (their tombstones take room until compactions drop them), until it has ${mib(this.#floor())}; reads are served (free disk space, or add a member)`;
    }
    return `the disk of data_dir ${this.#o.dataDir} has ${mib(available)} available, under storage.min_free_bytes (${mib(this.#o.minFreeBytes)}): Puts are refused until it has ${mib(this.#resumeAt())}; reads and Deletes are served (free disk space, delete keys, or add a member)`;
  }

  /**
   * Why incoming snapshots of `bytes` in all are refused, or null when they fit (SnapshotDisk,
   * src/replication/snapshot-file.ts): their files, and the tables their installs build from
   * them (about as large again, written while the files are still there), must leave the
   * reserve available, counting what was written since the last look. Written on whatever
   * their size (the receiver has no size limit but the disk's), a snapshot took the reserve and
   * then the rest of the disk, and a WAL write meanwhile stopped the node. With the reserve off
   * (or before a look): null.
   */
  snapshotRefusal(bytes: number): string | null {
    const min = this.#o.minFreeBytes;
    if (min === 0 || this.#available === null) return null;
    const available = this.#available - this.#written;
    if (available - bytes >= min) return null;
    return `the disk of data_dir ${this.#o.dataDir} has ${mib(Math.max(0, available))} available: snapshots of ${mib(bytes)} from peers, and the tables built from them (as much again), would leave less than storage.min_free_bytes (${mib(min)})`;
  }

  /**
   * Looks at the disk once now, then every DISK_RESERVE_CHECK_MS until stop() (with the reserve
   * off too: the metric shows the space available). A reserve over half the file system's size
   * is logged at warn: on a small disk the default (512 MiB) would refuse Puts from the start.
   */
  async start(): Promise<void> {
    await this.check();
    this.#warnIfLarge();
    this.#timer = setInterval(() => void this.check(), DISK_RESERVE_CHECK_MS);
    this.#timer.unref();
  }

  stop(): void {
    if (this.#timer !== null) clearInterval(this.#timer);
    this.#timer = null;
  }

  /**
   * The WAL, or a snapshot from a peer, wrote `bytes`: a look now when an eighth of the reserve
   * went by since the last.
   */
  wrote(bytes: number): void {
    if (this.#o.minFreeBytes === 0) return;
    this.#written += bytes;
    if (this.#written >= this.#o.minFreeBytes / 8 / (this.#o.writers ?? 1)) void this.check();
  }

  /** One look at the disk (one at a time: a look asked during another shares it). */
  check(): Promise<void> {
    this.#busy ??= this.#look().finally(() => {
      this.#busy = null;
    });
    return this.#busy;
  }

  async #look(): Promise<void> {
    const o = this.#o;
    this.#written = 0;
    let stats: DiskStats;
    try {
      stats = await o.statfs();
    } catch (err) {
      // Kept as it was: a disk that cannot be looked at is not taken to be full, nor to have
      // room again. Logged once until a look succeeds.
      if (!this.#failing) {
        o.log.warn("data directory's available disk space unknown", {
          data_dir: o.dataDir,
          error: err instanceof Error ? err.message : String(err),
        });
      }
      this.#failing = true;
      return;
    }
    this.#failing = false;
    this.#stats = stats;
    const available = stats.bavail * stats.bsize;
    this.#available = available;
    const low =
      o.minFreeBytes > 0 && (this.#low ? available < this.#resumeAt() : available < o.minFreeBytes);
    const deletesRefused = low && available < this.#floor();
    const fields = {
      available_bytes: available,
      min_free_bytes: o.minFreeBytes,
      data_dir: o.dataDir,
    };
    if (low && !this.#low) {
      o.log.warn(
        "data directory's disk is under storage.min_free_bytes: Puts are refused until it has room; reads and Deletes are served",
        fields,
      );
    } else if (!low && this.#low) {
      o.log.info("data directory's disk has room again: Puts are taken", fields);
    }
    if (deletesRefused && !this.#deletesRefused) {
      o.log.warn(
        "data directory's disk is under a quarter of storage.min_free_bytes: Deletes are refused too",
        fields,
      );
    }
    this.#low = low;
    this.#deletesRefused = deletesRefused;
    o.onCheck?.(available, low);
  }

  #warnIfLarge(): void {
    const { minFreeBytes, dataDir, log } = this.#o;
    const s = this.#stats;
    if (s === null || minFreeBytes === 0) return;
    // The size df shows an unprivileged user: used blocks and those available (no root reserve).
    const size = (s.blocks - s.bfree + s.bavail) * s.bsize;
    if (minFreeBytes * 2 <= size) return;
    log.warn(
      `storage.min_free_bytes (${mib(minFreeBytes)}) is over half the size of data_dir's file system (${mib(size)}): Puts are taken only while more than it is available; on a small disk set it lower (a twentieth of the size, say), or 0 to turn the reserve off`,
      { min_free_bytes: minFreeBytes, file_system_bytes: size, data_dir: dataDir },
    );
  }

  /** Under it, Deletes are refused too: what is left keeps room for compactions and the log. */
  #floor(): number {
    return Math.floor(this.#o.minFreeBytes / 4);
  }

  #resumeAt(): number {
    return this.#o.minFreeBytes + Math.floor(this.#o.minFreeBytes / 8);
  }
}

function mib(bytes: number): string {
  return `${(bytes / MIB).toFixed(1)} MiB`;
}
