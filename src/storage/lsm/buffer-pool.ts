/**
 * Large buffers a compaction worker reuses from job to job: the whole-file reads of a
 * compaction's input tables and the buffers its output tables are built in.
 *
 * Memory that was just allocated is memory the kernel still has to fault in page by page (and
 * in a virtual machine the host as well), and a buffer of megabytes is returned to the system
 * when it is freed, so the next one pays again. On the 2-vCPU VM of BENCHMARKS.md, reading a
 * 4.6 MB table into a new buffer and checksumming its blocks took ~30 ms; into a buffer used
 * before, ~1.4 ms. A compaction reads and writes every byte of its inputs, so this was most of
 * its time ("Compactions reuse their buffers", BENCHMARKS.md).
 *
 * The pool keeps at most `maxBytes` of free buffers; a buffer given back beyond that is left to
 * the garbage collector. `clear()` drops them all (the worker does when it has been idle a
 * while: a node that stopped writing does not keep them). Sizes are rounded up to a whole MiB,
 * so a buffer fits the next table of about the same size.
 *
 * A buffer given back must not be used any more by the giver: its next taker overwrites it.
 *
 * The main thread keeps two more (snapshot-stream.ts, environment.ts): the buffers an incoming
 * snapshot is read back and decoded in, and the shared buffers its tables are encoded in for a
 * worker. A node receiving snapshots allocated three to four times each snapshot's size in new
 * buffers, and V8 counts such external memory allocated since its last full collection against
 * the old generation's limit: at ~20 MB/s a node receiving snapshots ran two to three full
 * collections a second.
 */
const ROUND_BYTES = 1 << 20;

export class BufferPool {
  readonly maxBytes: number;
  readonly #free: Buffer[] = [];
  readonly #allocate: (size: number) => Buffer;
  #freeBytes = 0;

  /** `allocate` makes a new buffer (default: Buffer.allocUnsafeSlow, memory of its own). */
  constructor(
    maxBytes: number,
    allocate: (size: number) => Buffer = (n) => Buffer.allocUnsafeSlow(n),
  ) {
    this.maxBytes = maxBytes;
    this.#allocate = allocate;
  }

  /** Bytes held by free buffers. */
  get freeBytes(): number {
    return this.#freeBytes;
  }

  /** A buffer of at least `size` bytes with arbitrary contents: the smallest free one that fits. */
  take(size: number): Buffer {
    let best = -1;
    for (let i = 0; i < this.#free.length; i++) {
      const length = (this.#free[i] as Buffer).length;
      if (length >= size && (best < 0 || length < (this.#free[best] as Buffer).length)) best = i;
    }
    if (best < 0) return this.#allocate(Math.ceil(size / ROUND_BYTES) * ROUND_BYTES);
    const buf = this.#free[best] as Buffer;
    this.#free[best] = this.#free[this.#free.length - 1] as Buffer;
    this.#free.pop();
    this.#freeBytes -= buf.length;
    return buf;
  }

  /** Gives back a buffer `take` returned, or any other whole buffer; kept if there is room. */
  give(buf: Buffer): void {
    if (this.#freeBytes + buf.length > this.maxBytes) return;
    this.#free.push(buf);
    this.#freeBytes += buf.length;
  }

  clear(): void {
    this.#free.length = 0;
    this.#freeBytes = 0;
  }
}
