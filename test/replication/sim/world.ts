/**
 * The simulated world the real multi-raft driver runs in: one virtual clock for every process,
 * timers and deferred callbacks run in a deterministic order, and a file-system view per
 * process incarnation that goes dead with it.
 *
 * Determinism: nothing the driver awaits does real I/O (the WAL runs on a MemoryFileSystem, the
 * shards on MemoryEngine, both settling in microtasks), so between two simulated instants the
 * only work left is microtasks and callbacks deferred through the Clock. `settle()` runs those
 * until none are left; the order depends only on the inputs, and so does the whole run.
 */
import type { Clock } from "../../../src/replication/index.ts";
import type { FileSystem, FsFile, OpenFlags } from "../../../src/storage/index.ts";

/** A simulated process: its timers, deferred callbacks and file operations die with it. */
export class Process {
  readonly name: string;
  alive = true;

  constructor(name: string) {
    this.name = name;
  }
}

interface Timer {
  readonly at: number;
  readonly seq: number;
  readonly owner: Process;
  readonly fn: () => void;
}

/** Rounds of deferred callbacks in one settle() before it is judged a livelock. */
const SETTLE_LIMIT = 100_000;

const macrotask = (): Promise<void> => new Promise((resolve) => setImmediate(resolve));

export class World {
  now = 0;
  #seq = 0;
  /** Pending timers, kept sorted by (at, seq). Small: a few per process. */
  #timers: Timer[] = [];
  #deferred: { owner: Process; fn: () => void }[] = [];

  /** Runs `fn` at simulated time `at` (not before now), if `owner` is still alive then. */
  at(at: number, owner: Process, fn: () => void): void {
    const timer: Timer = { at: Math.max(at, this.now), seq: this.#seq++, owner, fn };
    let i = this.#timers.length;
    while (i > 0 && (this.#timers[i - 1] as Timer).at > timer.at) i--;
    this.#timers.splice(i, 0, timer);
  }

  after(delay: number, owner: Process, fn: () => void): void {
    this.at(this.now + delay, owner, fn);
  }

  /**
   * The driver's clock inside `owner`. With `deferMs` > 0 a deferred callback runs that many
   * simulated milliseconds later (the CPU time of the work before it), so that requests can
   * arrive between the rounds of a long replay, as they do on a real machine.
   */
  clockFor(owner: Process, deferMs = 0): Clock {
    return {
      now: () => this.now,
      every: (ms, fn) => {
        let stopped = false;
        const fire = (): void => {
          if (stopped) return;
          fn();
          this.after(ms, owner, fire);
        };
        this.after(ms, owner, fire);
        return () => {
          stopped = true;
        };
      },
      defer: (fn) => {
        if (deferMs > 0) this.after(deferMs, owner, fn);
        else this.#deferred.push({ owner, fn });
      },
    };
  }

  /** Runs deferred callbacks and microtasks until nothing is left to run at this instant. */
  async settle(): Promise<void> {
    for (let round = 0; round < SETTLE_LIMIT; round++) {
      await macrotask();
      if (this.#deferred.length === 0) {
        await macrotask();
        if (this.#deferred.length === 0) return;
      }
      const batch = this.#deferred;
      this.#deferred = [];
      for (const d of batch) if (d.owner.alive) d.fn();
    }
    throw new Error(`simulation: no quiet point after ${SETTLE_LIMIT} rounds at t=${this.now}`);
  }

  /** Advances to the next timer, runs every timer due then, and settles. False when idle. */
  async step(until: number): Promise<boolean> {
    const next = this.#timers[0];
    if (next === undefined || next.at > until) {
      this.now = until;
      return false;
    }
    this.now = next.at;
    while (this.#timers.length > 0 && (this.#timers[0] as Timer).at === this.now) {
      const t = this.#timers.shift() as Timer;
      if (t.owner.alive) t.fn();
    }
    await this.settle();
    return true;
  }

  async runUntil(until: number): Promise<void> {
    while (await this.step(until));
  }
}

function deadError(path: string): Error {
  return Object.assign(new Error(`EIO: process is dead, '${path}'`), { code: "EIO" });
}

/**
 * A process's view of its node's disk: every operation fails once the process is dead. Writes
 * and syncs first wait `latency()` simulated milliseconds (the device's queue): a crash during
 * that wait means the operation never happened, and other work of the process runs meanwhile.
 */
export function processFs(
  fs: FileSystem,
  owner: Process,
  world: World,
  latency: () => number,
  /** Called before each write or sync; returning true crashes the process right there. */
  crashPoint: () => boolean = () => false,
): FileSystem {
  const guard = <T>(path: string, op: () => Promise<T>): Promise<T> =>
    owner.alive ? op() : Promise.reject(deadError(path));
  const slow = async <T>(path: string, op: () => Promise<T>): Promise<T> => {
    const ms = latency();
    if (ms > 0) await new Promise<void>((resolve) => world.after(ms, owner, resolve));
    if (owner.alive && crashPoint()) owner.alive = false;
    return guard(path, op);
  };
  const file = (inner: FsFile, path: string): FsFile => ({
    write: (buf, offset, length, position) =>
      slow(path, () => inner.write(buf, offset, length, position)),
    truncate: (length) => guard(path, () => inner.truncate(length)),
    sync: () => slow(path, () => inner.sync()),
    datasync: () => slow(path, () => inner.datasync()),
    close: () => guard(path, () => inner.close()),
  });
  return {
    mkdirp: (dir) => guard(dir, () => fs.mkdirp(dir)),
    readdir: (dir) => guard(dir, () => fs.readdir(dir)),
    readFile: (path) => guard(path, () => fs.readFile(path)),
    open: (path: string, flags: OpenFlags) =>
      guard(path, async () => file(await fs.open(path, flags), path)),
    unlink: (path) => guard(path, () => fs.unlink(path)),
    fsyncDir: (dir) => slow(dir, () => fs.fsyncDir(dir)),
  };
}
