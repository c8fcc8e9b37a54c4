/**
 * Iterates one non-overlapping level (L1..L6) as if it were one table: seeks binary-search the
 * file, and only one file's blocks are read at a time.
 */
import { TableIterator, type InternalIterator } from "./iterators.ts";
import type { Table } from "./table.ts";

export class LevelIterator implements InternalIterator {
  valid = false;
  key = "";
  seq = 0;
  kind = 0;
  readonly #files: readonly Table[];
  #file = 0;
  #it: TableIterator | null = null;

  constructor(files: readonly Table[]) {
    this.#files = files;
  }

  value(): Uint8Array {
    return (this.#it as TableIterator).value();
  }

  #sync(): void {
    for (;;) {
      const it = this.#it;
      if (it === null) {
        this.valid = false;
        return;
      }
      if (it.valid) {
        this.valid = true;
        this.key = it.key;
        this.seq = it.seq;
        this.kind = it.kind;
        return;
      }
      this.#open(this.#file + 1);
      this.#it?.seek(undefined, 0);
    }
  }

  #open(n: number): void {
    this.#file = n;
    const t = this.#files[n];
    this.#it = t === undefined ? null : new TableIterator(t);
  }

  next(): void {
    (this.#it as TableIterator).next();
    this.#sync();
  }

  seek(key: string | undefined, seq: number): void {
    let lo = 0;
    if (key !== undefined) {
      let hi = this.#files.length;
      while (lo < hi) {
        const mid = (lo + hi) >>> 1;
        if ((this.#files[mid] as Table).props.largest < key) lo = mid + 1;
        else hi = mid;
      }
    }
    this.#open(lo);
    this.#it?.seek(key, seq);
    this.#sync();
  }
}
