/**
 * A FileSystem over a MemoryFileSystem that cuts the power at a chosen operation, for exploring
 * every crash point of a workload in process. The process that used it is dead from then on:
 * its operations all reject, so nothing it still has in flight can touch the recovered state
 * (MemoryFileSystem itself cannot tell an old process's path operations from a new one's).
 */
import type {
  CrashOptions,
  FileSystem,
  FsFile,
  MemoryFileSystem,
} from "../../src/storage/common/index.ts";

export class CrashingFileSystem implements FileSystem {
  readonly #inner: MemoryFileSystem;
  readonly #at: number;
  readonly #during: boolean;
  readonly #crash: CrashOptions;
  #ops = 0;
  /** Set once the power was cut. */
  crashed = false;

  /**
   * Cuts the power at operation number `at` (from 1): before it is issued, or with `during`
   * just after (the operation has taken effect in memory but not settled: a write in flight).
   */
  constructor(
    inner: MemoryFileSystem,
    at: number,
    options: { during?: boolean; crash?: CrashOptions } = {},
  ) {
    this.#inner = inner;
    this.#at = at;
    this.#during = options.during ?? false;
    this.#crash = options.crash ?? {};
  }

  /** Operations issued so far (for a run without a crash: how many crash points there are). */
  get operations(): number {
    return this.#ops;
  }

  mkdirp(dir: string): Promise<string | undefined> {
    return this.#run(() => this.#inner.mkdirp(dir));
  }
  readdir(dir: string): Promise<string[]> {
    return this.#run(() => this.#inner.readdir(dir));
  }
  readFile(path: string): Promise<Buffer> {
    return this.#run(() => this.#inner.readFile(path));
  }
  async open(path: string, flags: Parameters<FileSystem["open"]>[1]): Promise<FsFile> {
    const file = await this.#run(() => this.#inner.open(path, flags));
    return {
      write: (...args) => this.#run(() => file.write(...args)),
      truncate: (length) => this.#run(() => file.truncate(length)),
      sync: () => this.#run(() => file.sync()),
      datasync: () => this.#run(() => file.datasync()),
      close: () => this.#run(() => file.close()),
    };
  }
  unlink(path: string): Promise<void> {
    return this.#run(() => this.#inner.unlink(path));
  }
  fsyncDir(dir: string): Promise<void> {
    return this.#run(() => this.#inner.fsyncDir(dir));
  }

  #run<T>(op: () => Promise<T>): Promise<T> {
    if (this.crashed) return Promise.reject(powerCut());
    if (++this.#ops !== this.#at) return op();
    this.crashed = true;
    if (!this.#during) {
      this.#inner.crash(this.#crash);
      return Promise.reject(powerCut());
    }
    const inFlight = op();
    this.#inner.crash(this.#crash);
    return inFlight.then(
      () => Promise.reject(powerCut()),
      () => Promise.reject(powerCut()),
    );
  }
}

function powerCut(): Error {
  return Object.assign(new Error("EIO: power cut (CrashingFileSystem)"), { code: "EIO" });
}
