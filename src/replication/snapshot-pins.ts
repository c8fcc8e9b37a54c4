/**
 * Snapshots streamed from a pinned engine version (issue 53): what the Raft core asks for, when
 * a follower needs entries already compacted, is the metadata and a SnapshotStream over the
 * shard's engine as of its applied index, not the bytes. The stream's frames
 * (encodeSnapshotFrames, ~1 MiB each) are made as the transport reads them, so a transfer holds
 * a frame and the chunk window in memory, whatever the shard's size.
 *
 * The version is pinned at once: the engine's sequence (compactions keep what it sees) and a
 * scan of it started (its tables and memtables stay alive until the scan ends, whatever
 * compactions do). A pinned version keeps table files on disk, so every pin ends:
 * - when its reader reaches the end, stops (a failed or aborted transfer), or releases it;
 * - when nobody started reading it within `unreadTimeoutMs` (a message the transport dropped,
 *   or that waited too long behind others): a read after that fails, and Raft sends another;
 * - when the driver closes (releaseAll, before the engines close).
 */
import { CairnError } from "../common/errors.ts";
import type { Message, SnapshotStream } from "../raft/index.ts";
import { encodeSnapshotFrames, type LsmSnapshot } from "../storage/index.ts";
import type { ShardEngine } from "./engine.ts";

/** The default time a pinned snapshot may wait for its reader (ms). */
export const DEFAULT_SNAPSHOT_PIN_TIMEOUT_MS = 120_000;

export class SnapshotPins {
  readonly #unreadTimeoutMs: number;
  /** The pins not released yet, each release() with the engine it pins. */
  readonly #live = new Map<() => void, ShardEngine>();

  constructor(unreadTimeoutMs = DEFAULT_SNAPSHOT_PIN_TIMEOUT_MS) {
    this.#unreadTimeoutMs = unreadTimeoutMs;
  }

  /** Pins not released yet (tests: none may be left once transfers ended). */
  get size(): number {
    return this.#live.size;
  }

  /**
   * A stream of `engine`'s image as of `pin` (which it takes over: released with the stream),
   * in snapshot frames. Throws, with the pin released, if the engine cannot be read.
   */
  stream(engine: ShardEngine, pin: LsmSnapshot): SnapshotStream {
    let state: "pinned" | "reading" | "released" = "pinned";
    let scan: Iterator<[Uint8Array, Uint8Array]>;
    let first: IteratorResult<[Uint8Array, Uint8Array]>;
    try {
      scan = engine.scan({ snapshot: pin })[Symbol.iterator]();
      // The scan's first step pins the version's tables and memtables.
      first = scan.next();
    } catch (err) {
      pin.release();
      throw err;
    }
    const release = (): void => {
      if (state === "released") return;
      state = "released";
      clearTimeout(timer);
      this.#live.delete(release);
      scan.return?.();
      pin.release();
    };
    const timer = setTimeout(() => {
      if (state === "pinned") release();
    }, this.#unreadTimeoutMs);
    timer.unref();
    this.#live.set(release, engine);

    // A function, not a comparison: release() changes the state between the reader's steps.
    const isReleased = (): boolean => state === "released";
    const released = (): CairnError =>
      new CairnError(
        "CAIRN_ERR_SNAPSHOT_UNAVAILABLE",
        `the snapshot at ${pin.seq} was released before it was read whole`,
      );
    function* entries(): Generator<[Uint8Array, Uint8Array]> {
      for (let r = first; r.done !== true; r = scan.next()) {
        yield r.value;
        // A release ends the scan early: what follows must not look like the end.
        if (isReleased()) throw released();
      }
    }
    return {
      async *chunks(): AsyncGenerator<Uint8Array> {
        if (state !== "pinned") {
          throw state === "released"
            ? released()
            : new CairnError("CAIRN_ERR_SNAPSHOT_UNAVAILABLE", "a snapshot stream is read once");
        }
        state = "reading";
        try {
          for (const frame of encodeSnapshotFrames(pin.seq, entries())) {
            if (isReleased()) throw released();
            yield frame;
          }
          if (isReleased()) throw released();
        } finally {
          release();
        }
      },
      release,
    };
  }

  /** Releases every pin (the driver closing, before its engines do). */
  releaseAll(): void {
    for (const release of [...this.#live.keys()]) release();
  }

  /** Releases the pins of `engine` (its replica removed, before the engine closes). */
  releaseEngine(engine: ShardEngine): void {
    for (const [release, pinned] of [...this.#live]) if (pinned === engine) release();
  }
}

/** Releases what a snapshot message holds, if it carries a stream: it is dropped. */
export function releaseSnapshot(m: Message): void {
  if (m.type === "snapshot") m.snapshot.stream?.release();
}
