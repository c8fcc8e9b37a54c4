/**
 * Which versions a flush or a compaction may drop (LevelDB's rule). Versions of one key arrive
 * newest first. A version is dropped when a newer version of the same key is visible to every
 * reader (its seq ≤ the smallest pinned snapshot): no reader can see past it. A tombstone is
 * dropped when the output is the bottom of the tree for its key range and every reader sees it:
 * then "deleted" and "absent" read the same.
 */
import { KIND_DELETE } from "./format.ts";

export class VersionFilter {
  readonly #smallestSnapshot: number;
  readonly #bottom: boolean;
  #lastKey: string | undefined = undefined;
  #lastSeqForKey = Number.MAX_SAFE_INTEGER;

  /**
   * @param smallestSnapshot the oldest sequence any reader can read at
   * @param bottom whether no older data for these keys exists below the output
   */
  constructor(smallestSnapshot: number, bottom: boolean) {
    this.#smallestSnapshot = smallestSnapshot;
    this.#bottom = bottom;
  }

  /** True when the version must be kept. Call for every version, in internal order. */
  keep(key: string, seq: number, kind: number): boolean {
    if (key !== this.#lastKey) {
      this.#lastKey = key;
      this.#lastSeqForKey = Number.MAX_SAFE_INTEGER;
    }
    let keep = true;
    if (this.#lastSeqForKey <= this.#smallestSnapshot) keep = false;
    else if (kind === KIND_DELETE && seq <= this.#smallestSnapshot && this.#bottom) keep = false;
    this.#lastSeqForKey = seq;
    return keep;
  }
}
