/**
 * The leveled compaction planner: a pure function of the level shapes (no I/O, no clock).
 * L0 files overlap and are all compacted into L1 once there are `l0Trigger` of them. Levels
 * L1..L5 hold non-overlapping files; level n may hold levelBaseBytes × sizeRatio^(n-1) bytes
 * before one of its files (round-robin through the key space) is merged into level n+1. L6 is the
 * bottom and never compacts further.
 */

export interface PlannerConfig {
  readonly l0Trigger: number;
  readonly levelBaseBytes: number;
  readonly sizeRatio: number;
  readonly levels: number;
}

export interface PlannedFile {
  readonly number: number;
  readonly size: number;
  readonly smallest: string;
  readonly largest: string;
}

export interface Compaction<F extends PlannedFile> {
  readonly level: number;
  /** Files of `level` being compacted. */
  readonly inputs: readonly F[];
  /** Files of `level + 1` they overlap. */
  readonly overlaps: readonly F[];
  /** Largest key of the inputs: where the next compaction of this level starts. */
  readonly pointer: string;
  readonly score: number;
}

export function maxBytesForLevel(config: PlannerConfig, level: number): number {
  return config.levelBaseBytes * config.sizeRatio ** (level - 1);
}

export function overlapping<F extends PlannedFile>(
  files: readonly F[],
  smallest: string,
  largest: string,
): F[] {
  return files.filter((f) => !(f.largest < smallest || f.smallest > largest));
}

function keyRange(files: readonly PlannedFile[]): [string, string] {
  let smallest = (files[0] as PlannedFile).smallest;
  let largest = (files[0] as PlannedFile).largest;
  for (const f of files) {
    if (f.smallest < smallest) smallest = f.smallest;
    if (f.largest > largest) largest = f.largest;
  }
  return [smallest, largest];
}

/** The most urgent compaction, or null when every level is within its budget. */
export function pickCompaction<F extends PlannedFile>(
  levels: ReadonlyArray<readonly F[]>,
  pointers: ReadonlyArray<string | undefined>,
  config: PlannerConfig,
): Compaction<F> | null {
  let bestLevel = -1;
  let bestScore = 1;
  for (let level = 0; level < config.levels - 1; level++) {
    const files = levels[level] ?? [];
    const score =
      level === 0
        ? files.length / config.l0Trigger
        : files.reduce((a, f) => a + f.size, 0) / maxBytesForLevel(config, level);
    if (score >= bestScore) {
      bestScore = score;
      bestLevel = level;
    }
  }
  if (bestLevel < 0) return null;
  const files = levels[bestLevel] ?? [];
  let inputs: F[];
  if (bestLevel === 0) {
    inputs = [...files];
  } else {
    const pointer = pointers[bestLevel];
    const next = pointer === undefined ? undefined : files.find((f) => f.smallest > pointer);
    inputs = [next ?? (files[0] as F)];
  }
  const [smallest, largest] = keyRange(inputs);
  return {
    level: bestLevel,
    inputs,
    overlaps: overlapping(levels[bestLevel + 1] ?? [], smallest, largest),
    pointer: largest,
    score: bestScore,
  };
}

/**
 * Every file of `level` with the files of `level + 1` they overlap: one step of a manual full
 * compaction (the engine's `compactFully`). Null when the level holds no file.
 */
export function pickWholeLevel<F extends PlannedFile>(
  levels: ReadonlyArray<readonly F[]>,
  level: number,
): Compaction<F> | null {
  const inputs = [...(levels[level] ?? [])];
  if (inputs.length === 0) return null;
  const [smallest, largest] = keyRange(inputs);
  return {
    level,
    inputs,
    overlaps: overlapping(levels[level + 1] ?? [], smallest, largest),
    pointer: largest,
    score: 1,
  };
}
