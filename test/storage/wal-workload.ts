/** The deterministic WAL workload of the crash test, applied to a WAL or to a model. */
import type { WalEntry } from "../../src/storage/wal/index.ts";

export interface WalLike {
  lastIndex(shard: number): number;
  firstIndex(shard: number): number;
  append(
    records: ReadonlyArray<
      | { kind: "entries"; shard: number; entries: WalEntry[] }
      | {
          kind: "hard-state";
          shard: number;
          state: { term: number; vote: string | null; commit: number };
        }
    >,
  ): void;
  compact(shard: number, index: number): void;
}

export function walStep(wal: WalLike, step: number): void {
  const shard = step % 8;
  const last = wal.lastIndex(shard);
  // Every 7th step of a shard overwrites its last two entries (a new leader's conflicting suffix).
  const from = step % 7 === 0 && last - 2 >= wal.firstIndex(shard) ? last - 1 : last + 1;
  const entries: WalEntry[] = [];
  for (let i = from; i <= from + 2; i++) {
    entries.push({
      term: 1 + Math.floor(step / 7),
      index: i,
      type: 0,
      data: Buffer.from(`s${step}i${i}`),
    });
  }
  wal.append([
    { kind: "entries", shard, entries },
    {
      kind: "hard-state",
      shard,
      state: { term: step, vote: step % 3 === 0 ? null : `n${step}`, commit: from },
    },
  ]);
  if (step % 5 === 0) {
    const target = wal.lastIndex(shard) - 4;
    if (target >= wal.firstIndex(shard)) wal.compact(shard, target);
  }
}

/** An in-memory model of the same workload. */
export class WalModel implements WalLike {
  readonly logs = new Map<number, { first: number; entries: Map<number, WalEntry> }>();
  readonly hard = new Map<number, { term: number; vote: string | null; commit: number }>();

  #log(shard: number): { first: number; entries: Map<number, WalEntry> } {
    let log = this.logs.get(shard);
    if (log === undefined) {
      log = { first: 1, entries: new Map() };
      this.logs.set(shard, log);
    }
    return log;
  }

  lastIndex(shard: number): number {
    const log = this.#log(shard);
    return log.entries.size === 0 ? log.first - 1 : Math.max(...log.entries.keys());
  }

  firstIndex(shard: number): number {
    return this.#log(shard).first;
  }

  append(records: Parameters<WalLike["append"]>[0]): void {
    for (const r of records) {
      if (r.kind === "hard-state") {
        this.hard.set(r.shard, r.state);
        continue;
      }
      const log = this.#log(r.shard);
      for (const e of r.entries) {
        for (const i of [...log.entries.keys()]) if (i >= e.index) log.entries.delete(i);
        log.entries.set(e.index, e);
      }
    }
  }

  compact(shard: number, index: number): void {
    const log = this.#log(shard);
    for (const i of [...log.entries.keys()]) if (i <= index) log.entries.delete(i);
    log.first = index + 1;
  }
}
