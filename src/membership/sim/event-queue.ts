/** A min-heap of timed events; ties run in insertion order, so a simulation replays exactly. */
interface Slot<T> {
  readonly at: number;
  readonly order: number;
  readonly value: T;
}

export class EventQueue<T> {
  readonly #heap: Slot<T>[] = [];
  #order = 0;

  get size(): number {
    return this.#heap.length;
  }

  push(at: number, value: T): void {
    const heap = this.#heap;
    heap.push({ at, order: this.#order++, value });
    let i = heap.length - 1;
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!before(heap, i, parent)) break;
      swap(heap, i, parent);
      i = parent;
    }
  }

  /** The earliest event, removed; undefined when empty. */
  pop(): { at: number; value: T } | undefined {
    const heap = this.#heap;
    const top = heap[0];
    const last = heap.pop();
    if (top === undefined || last === undefined) return undefined;
    if (heap.length > 0) {
      heap[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let m = i;
        if (l < heap.length && before(heap, l, m)) m = l;
        if (r < heap.length && before(heap, r, m)) m = r;
        if (m === i) break;
        swap(heap, i, m);
        i = m;
      }
    }
    return { at: top.at, value: top.value };
  }
}

function before<T>(heap: Slot<T>[], i: number, j: number): boolean {
  const a = heap[i];
  const b = heap[j];
  if (a === undefined || b === undefined) return false;
  return a.at < b.at || (a.at === b.at && a.order < b.order);
}

function swap<T>(heap: Slot<T>[], i: number, j: number): void {
  const a = heap[i];
  const b = heap[j];
  if (a === undefined || b === undefined) return;
  heap[i] = b;
  heap[j] = a;
}
