/** A `Map` model of an LSM engine driven by numbered write batches, for model-based tests. */
import type { WriteOp } from "../../src/storage/lsm/index.ts";

export type Batch = readonly WriteOp[];

export function hex(b: Uint8Array): string {
  return Buffer.from(b).toString("hex");
}

/** The state after applying `batches[0..upTo)` (batch i carries sequence i + 1). */
export function modelAt(batches: readonly Batch[], upTo: number): Map<string, string> {
  const m = new Map<string, string>();
  for (let i = 0; i < upTo; i++) {
    for (const op of batches[i] as Batch) {
      if (op.type === "put") m.set(hex(op.key), hex(op.value));
      else m.delete(hex(op.key));
    }
  }
  return m;
}

/** The model's content as sorted [key, value] hex pairs (hex order is byte order). */
export function sortedPairs(m: Map<string, string>): Array<[string, string]> {
  return [...m].sort((a, b) => (a[0] < b[0] ? -1 : a[0] > b[0] ? 1 : 0));
}

export function scanPairs(it: Iterable<[Uint8Array, Uint8Array]>): Array<[string, string]> {
  return [...it].map(([k, v]) => [hex(k), hex(v)]);
}

/** A deterministic workload for crash tests: `n` batches over a small key space. */
export function workload(seed: number, n: number): Batch[] {
  let s = seed >>> 0 || 1;
  const next = (): number => {
    s ^= s << 13;
    s ^= s >>> 17;
    s ^= s << 5;
    return (s >>> 0) / 0x1_0000_0000;
  };
  const batches: Batch[] = [];
  for (let i = 0; i < n; i++) {
    const ops: WriteOp[] = [];
    const count = 1 + Math.floor(next() * 4);
    for (let j = 0; j < count; j++) {
      const key = Buffer.from(`k${Math.floor(next() * 400)}`);
      if (next() < 0.2) ops.push({ type: "delete", key });
      else
        ops.push({ type: "put", key, value: Buffer.alloc(20 + Math.floor(next() * 80), i % 251) });
    }
    batches.push(ops);
  }
  return batches;
}

/**
 * Options of the crash-during-recovery test and its child: small tables, and an L0 trigger the
 * prepared engine is above, so that the open also starts a compaction.
 */
export const REOPEN_OPTIONS = {
  memtableBytes: 4096,
  l0CompactionTrigger: 4,
  levelBaseBytes: 16384,
  targetFileBytes: 4096,
} as const;
