/**
 * What `cairn bench` sends, as a pure function of a seeded RNG: which operation, which key. No
 * clock or I/O here, so a workload is reproducible from its seed and testable on its own.
 */

export type Distribution = "uniform" | "zipfian";

export interface WorkloadSpec {
  /** Fraction of operations that are Gets (put: 0, get: 1, mixed: --read-ratio). */
  readonly readRatio: number;
  readonly keyspace: number;
  readonly keySize: number;
  readonly distribution: Distribution;
}

/** A small, fast, seeded PRNG (mulberry32) returning floats in [0, 1). */
export function seededRandom(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * YCSB's Zipfian generator (Gray et al., "Quickly generating billion-record synthetic databases"),
 * constant 0.99: item 0 is the most popular. Set-up is O(n) (the zeta sum); each draw is O(1).
 */
export function zipfian(n: number, random: () => number, theta = 0.99): () => number {
  let zetan = 0;
  for (let i = 1; i <= n; i++) zetan += 1 / i ** theta;
  const zeta2 = 1 + 1 / 2 ** theta;
  const alpha = 1 / (1 - theta);
  const eta = (1 - (2 / n) ** (1 - theta)) / (1 - zeta2 / zetan);
  return () => {
    const u = random();
    const uz = u * zetan;
    if (uz < 1) return 0;
    if (uz < zeta2) return Math.min(1, n - 1);
    return Math.min(n - 1, Math.floor(n * (eta * u - eta + 1) ** alpha));
  };
}

/** The key of item `i`: "k" and the zero-padded number, padded with "x" to `size` bytes. */
export function keyOf(i: number, size: number): string {
  const digits = String(i).padStart(10, "0");
  const base = `k${digits}`;
  return base.length >= size ? base : base.padEnd(size, "x");
}

/** The smallest key size `keyOf` can honour (keys stay unique and of one length). */
export const MIN_KEY_SIZE = 11;

export interface Operation {
  readonly kind: "put" | "get";
  readonly item: number;
}

/** The stream of operations of a workload. */
export function operations(spec: WorkloadSpec, random: () => number): () => Operation {
  const pick =
    spec.distribution === "zipfian"
      ? zipfian(spec.keyspace, random)
      : () => Math.floor(random() * spec.keyspace);
  return () => ({ kind: random() < spec.readRatio ? "get" : "put", item: pick() });
}
