/** The deterministic WAL workload of the crash test, applied to a WAL or to a model. */
import type { Wal, WalEntry } from "../../src/storage/wal/index.ts";

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
  /** Wal.drop: the shard's replica deleted, its term and vote kept, and its log's last entry. */
  drop(shard: number): void;
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
  // Now and then a shard's replica is deleted (replica GC), in the batch of its last writes; the
  // shard's next step writes its log again from index 1 (a replica created again).
  if (step % 13 === 0) wal.drop(shard);
}

/** An in-memory model of the same workload. */
export class WalModel implements WalLike {
  readonly logs = new Map<number, { first: number; entries: Map<number, WalEntry> }>();
  readonly hard = new Map<number, { term: number; vote: string | null; commit: number }>();
  /** Wal.droppedLog: null while a drop's dropped-log record is not written yet (torn). */
  readonly droppedLogs = new Map<number, { index: number; term: number } | null>();

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
      if (r.entries.length > 0) this.droppedLogs.delete(r.shard);
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

  drop(shard: number): void {
    const last = this.lastEntry(shard);
    this.dropRecord(shard);
    this.droppedLogRecord(shard, last);
  }

  /** The drop record alone (a write torn right after it): the dropped log unknown. */
  dropRecord(shard: number): void {
    const hard = this.hard.get(shard);
    this.logs.set(shard, { first: 1, entries: new Map() });
    this.hard.set(shard, { term: hard?.term ?? 0, vote: hard?.vote ?? null, commit: 0 });
    this.droppedLogs.set(shard, null);
  }

  /** The dropped-log record written after the drop record. */
  droppedLogRecord(shard: number, last: { index: number; term: number }): void {
    this.droppedLogs.set(shard, last);
  }

  /**
   * What a drop of `shard` now records of its log: its last entry (the workload's drops follow
   * entries of theirs), or, its log empty since a drop, that drop's.
   */
  lastEntry(shard: number): { index: number; term: number } {
    const last = this.lastIndex(shard);
    const entry = this.#log(shard).entries.get(last);
    return entry === undefined
      ? (this.droppedLogs.get(shard) ?? { index: last, term: 0 })
      : { index: last, term: entry.term };
  }
}

// --- comparing a recovered WAL with the model ---

function signature(w: WalLike, read: (shard: number) => unknown): string {
  const shards: unknown[] = [];
  for (let shard = 0; shard < 8; shard++) {
    shards.push([w.firstIndex(shard), w.lastIndex(shard), read(shard)]);
  }
  return JSON.stringify(shards);
}

function hardTuple(h: { term: number; vote: string | null; commit: number } | undefined): unknown {
  return h === undefined ? null : [h.term, h.vote, h.commit];
}

function droppedTuple(d: { index: number; term: number } | null | undefined): unknown {
  return d === undefined ? "none" : d === null ? "unknown" : [d.index, d.term];
}

/** What a WAL holds of the workload's shards, comparable with modelSignature. */
export function walSignature(wal: Wal): string {
  return signature(wal, (shard) => [
    hardTuple(wal.hardState(shard)),
    droppedTuple(wal.droppedLog(shard)),
    wal
      .entries(shard, wal.firstIndex(shard), wal.lastIndex(shard) + 1)
      .map((e) => [e.index, e.term, Buffer.from(e.data).toString()]),
  ]);
}

/**
 * The model after `steps` steps and, with `records`, the first `records` records of the next
 * step as they lie on disk (each entry, then the hard state, then the compaction mark): what a
 * write torn inside that step's batch leaves.
 */
export function modelSignature(steps: number, records?: number): string {
  const model = new WalModel();
  for (let step = 1; step <= steps; step++) walStep(model, step);
  if (records !== undefined) {
    // Run the next step on a second model, noting its records one by one for this one.
    const ahead = new WalModel();
    for (let step = 1; step <= steps; step++) walStep(ahead, step);
    const parts: Array<() => void> = [];
    walStep(
      {
        lastIndex: (shard) => ahead.lastIndex(shard),
        firstIndex: (shard) => ahead.firstIndex(shard),
        append(batch) {
          ahead.append(batch);
          for (const r of batch) {
            if (r.kind === "hard-state") parts.push(() => model.append([r]));
            else
              for (const e of r.entries) parts.push(() => model.append([{ ...r, entries: [e] }]));
          }
        },
        compact(shard, index) {
          ahead.compact(shard, index);
          parts.push(() => model.compact(shard, index));
        },
        drop(shard) {
          const last = ahead.lastEntry(shard);
          ahead.drop(shard);
          // Two records: the drop, then its dropped log.
          parts.push(() => model.dropRecord(shard));
          parts.push(() => model.droppedLogRecord(shard, last));
        },
      },
      steps + 1,
    );
    for (const part of parts.slice(0, records)) part();
  }
  return signature(model, (shard) => {
    const log = model.logs.get(shard);
    return [
      hardTuple(model.hard.get(shard)),
      droppedTuple(model.droppedLogs.get(shard)),
      [...(log?.entries.values() ?? [])]
        .sort((a, b) => a.index - b.index)
        .map((e) => [e.index, e.term, Buffer.from(e.data).toString()]),
    ];
  });
}
