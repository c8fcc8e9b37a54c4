/**
 * Seeded, deterministic pseudo-random numbers (xoshiro128**, seeded through splitmix32).
 *
 * Pure cores (Raft, SWIM, the compaction planner) never call `Math.random()`: they take an `Rng`
 * from their driver, so a simulation seed replays a run exactly. Not for cryptography.
 */
export interface Rng {
  /** Uniform 32-bit unsigned integer. */
  nextU32(): number;
  /** Uniform integer in [0, n); `n` must be a positive integer ≤ 2^32. */
  int(n: number): number;
  /** Uniform float in [0, 1). */
  float(): number;
  /** An independent generator derived from this one (advances this one). */
  fork(): Rng;
}

function splitmix32(seed: number): () => number {
  let s = seed >>> 0;
  return () => {
    s = (s + 0x9e3779b9) >>> 0;
    let z = s;
    z = Math.imul(z ^ (z >>> 16), 0x85ebca6b) >>> 0;
    z = Math.imul(z ^ (z >>> 13), 0xc2b2ae35) >>> 0;
    return (z ^ (z >>> 16)) >>> 0;
  };
}

class Xoshiro128 implements Rng {
  #a: number;
  #b: number;
  #c: number;
  #d: number;

  constructor(seed: number) {
    const next = splitmix32(seed);
    this.#a = next();
    this.#b = next();
    this.#c = next();
    this.#d = next();
    if ((this.#a | this.#b | this.#c | this.#d) === 0) this.#d = 1;
  }

  nextU32(): number {
    const result = Math.imul(rotl(Math.imul(this.#b, 5) >>> 0, 7), 9) >>> 0;
    const t = (this.#b << 9) >>> 0;
    this.#c = (this.#c ^ this.#a) >>> 0;
    this.#d = (this.#d ^ this.#b) >>> 0;
    this.#b = (this.#b ^ this.#c) >>> 0;
    this.#a = (this.#a ^ this.#d) >>> 0;
    this.#c = (this.#c ^ t) >>> 0;
    this.#d = rotl(this.#d, 11);
    return result;
  }

  int(n: number): number {
    if (!Number.isInteger(n) || n <= 0 || n > 0x1_0000_0000) {
      throw new RangeError(`Rng.int: bound must be an integer in [1, 2^32], got ${n}`);
    }
    // Rejection sampling keeps the distribution exactly uniform.
    const limit = 0x1_0000_0000 - (0x1_0000_0000 % n);
    for (;;) {
      const x = this.nextU32();
      if (x < limit) return x % n;
    }
  }

  float(): number {
    return this.nextU32() / 0x1_0000_0000;
  }

  fork(): Rng {
    return new Xoshiro128(this.nextU32() ^ 0x5bd1e995);
  }
}

function rotl(x: number, k: number): number {
  return ((x << k) | (x >>> (32 - k))) >>> 0;
}

/** A generator for `seed` (any integer; only its low 32 bits are used). */
export function seededRng(seed: number): Rng {
  return new Xoshiro128(seed);
}

/**
 * Puts `items` in an order drawn from `rng` (Fisher–Yates, in place): one `rng.int(i + 1)` for
 * each i from the last index down to 1, so a seed replays the same order.
 */
export function shuffle<T>(items: T[], rng: Rng): void {
  for (let i = items.length - 1; i > 0; i--) {
    const j = rng.int(i + 1);
    const a = items[i] as T;
    items[i] = items[j] as T;
    items[j] = a;
  }
}
