/**
 * Merging a scan's sources into one page, in key order, bounded in items and in bytes.
 *
 * A scan reads every shard, each a key-ordered source. Two kinds of source:
 *
 * - **cursors** (the shards open here): read lazily. `mergeCursors` takes the smallest head of
 *   a heap of them until the page is full, so a page reads its `limit` items and one head per
 *   shard, not `limit` items of every shard (1,024 shards × 1,000 items, the whole keyspace of a
 *   store of a million keys, for a first page of 1,000).
 * - **pages** (another node's or another worker's share, already cut): `mergePages`. A page
 *   that was cut (`more`) may hold keys past its last one, so the merge gives no key above the
 *   lowest last key of the pages that were cut: that key is the point up to which every source
 *   is known.
 *
 * Both stop at `limit` items or before the item that would take the page past `maxBytes`
 * (its keys and values, plus ITEM_OVERHEAD_BYTES each for the message's framing), whichever
 * comes first; a page holds at least one item when one is left, however large, so a scan always
 * moves on (a node's message limit leaves room for one largest key and value). `more` says
 * whether keys may remain after the page's last one.
 */
import type { StoredItem } from "./state-machine.ts";

/**
 * A key-ordered run of items, and whether keys may follow its last one; `skipped`, the shards
 * left out of it (ScanRequest.skipUnavailable), when there are any.
 */
export interface ScanPage {
  readonly items: StoredItem[];
  readonly more: boolean;
  readonly skipped?: readonly number[];
}

/**
 * A bound on the bytes a ScannedItem or KeyValue message adds around its key and value: tags,
 * length prefixes, the version's two varints and the item's own framing (~40 bytes at most).
 */
export const ITEM_OVERHEAD_BYTES = 48;

/** What an item costs a page. */
export function itemBytes(item: StoredItem): number {
  return item.key.length + item.value.length + ITEM_OVERHEAD_BYTES;
}

/**
 * The first items of the key-ordered `cursors` merged: at most `limit`, within `maxBytes`.
 * Reads each cursor only as far as the page needs (its head), and ends every cursor (`return`)
 * before it returns, so the tables a cursor pins are released.
 */
export function mergeCursors(
  cursors: readonly Iterator<StoredItem>[],
  limit: number,
  maxBytes: number,
): ScanPage {
  const heap = new HeadHeap();
  try {
    for (const c of cursors) heap.add(c);
    const items: StoredItem[] = [];
    let bytes = 0;
    while (items.length < limit) {
      const head = heap.peek();
      if (head === undefined) return { items, more: false };
      const cost = itemBytes(head.item);
      if (items.length > 0 && bytes + cost > maxBytes) break;
      items.push(head.item);
      bytes += cost;
      heap.advance();
    }
    return { items, more: heap.peek() !== undefined };
  } finally {
    for (const c of cursors) c.return?.();
  }
}

/**
 * The sources' pages merged: items up to the lowest last key of the pages that were cut, at
 * most `limit` of them, within `maxBytes`. `more` when the merge cut anything or a page was cut;
 * `skipped`, every page's, ascending.
 */
export function mergePages(pages: readonly ScanPage[], limit: number, maxBytes: number): ScanPage {
  const skipped = skippedOf(pages);
  let bound: Uint8Array | null = null;
  let cut = false;
  for (const p of pages) {
    if (!p.more) continue;
    cut = true;
    const last = p.items[p.items.length - 1];
    // A page cut before its first item: nothing past the start is known.
    if (last === undefined) return { items: [], more: true, ...skipped };
    if (bound === null || Buffer.compare(last.key, bound) < 0) bound = last.key;
  }
  const merged = mergeCursors(
    pages.map((p) => upTo(p.items[Symbol.iterator](), bound)),
    limit,
    maxBytes,
  );
  return { items: merged.items, more: merged.more || cut, ...skipped };
}

/** The shards the pages left out, ascending, as a ScanPage's `skipped` (absent when none). */
function skippedOf(pages: readonly ScanPage[]): { skipped?: readonly number[] } {
  if (pages.every((p) => p.skipped === undefined || p.skipped.length === 0)) return {};
  const ids = new Set<number>();
  for (const p of pages) for (const id of p.skipped ?? []) ids.add(id);
  return { skipped: [...ids].sort((a, b) => a - b) };
}

/** The items of `c` up to and including `bound` (all of them when null). */
function* upTo(c: Iterator<StoredItem>, bound: Uint8Array | null): Generator<StoredItem> {
  for (let r = c.next(); r.done !== true; r = c.next()) {
    if (bound !== null && Buffer.compare(r.value.key, bound) > 0) return;
    yield r.value;
  }
}

/** A cursor and its next item; the heap moves the item on in place (no object an item). */
interface Head {
  item: StoredItem;
  readonly cursor: Iterator<StoredItem>;
}

/** A binary min-heap of the cursors' heads by key. */
class HeadHeap {
  readonly #heads: Head[] = [];

  /** Adds the cursor by its first item (none: it is left out). */
  add(cursor: Iterator<StoredItem>): void {
    const r = cursor.next();
    if (r.done === true) return;
    this.#heads.push({ item: r.value, cursor });
    this.#up(this.#heads.length - 1);
  }

  peek(): Head | undefined {
    return this.#heads[0];
  }

  /** Replaces the smallest head by its cursor's next item (or drops the cursor when done). */
  advance(): void {
    const top = this.#heads[0];
    if (top === undefined) return;
    const r = top.cursor.next();
    if (r.done === true) {
      const last = this.#heads.pop() as Head;
      if (this.#heads.length === 0) return;
      this.#heads[0] = last;
    } else {
      top.item = r.value;
    }
    this.#down(0);
  }

  #less(a: number, b: number): boolean {
    return Buffer.compare((this.#heads[a] as Head).item.key, (this.#heads[b] as Head).item.key) < 0;
  }

  #swap(a: number, b: number): void {
    const h = this.#heads;
    [h[a], h[b]] = [h[b] as Head, h[a] as Head];
  }

  #up(i: number): void {
    while (i > 0) {
      const parent = (i - 1) >> 1;
      if (!this.#less(i, parent)) return;
      this.#swap(i, parent);
      i = parent;
    }
  }

  #down(i: number): void {
    const n = this.#heads.length;
    for (;;) {
      const l = 2 * i + 1;
      const r = l + 1;
      let min = i;
      if (l < n && this.#less(l, min)) min = l;
      if (r < n && this.#less(r, min)) min = r;
      if (min === i) return;
      this.#swap(i, min);
      i = min;
    }
  }
}
