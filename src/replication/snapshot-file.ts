/**
 * Where an incoming snapshot's data goes as it arrives (SnapshotAssembler, snapshot-transfer.ts):
 * a SnapshotSink. Two kinds:
 *
 * - SnapshotFile writes the chunks, in order, to a temporary file of the node's directory for
 *   incoming snapshots (RaftServiceOptions.snapshotDir), so memory holds the chunks not yet
 *   written, not the shard. Once the snapshot is whole and verified, the file is read back as
 *   the message's SnapshotStream, whose release() removes it: the driver installs it (the
 *   engine builds its own tables from it) or drops it. A refused transfer removes it at once;
 *   what a crash leaves is removed when the node starts again (clearSnapshotDir), never read.
 * - MemorySink keeps the chunks in memory (a service without a directory: tests of the service).
 */
import { randomBytes } from "node:crypto";
import { mkdirSync, rmSync } from "node:fs";
import { type FileHandle, mkdir, open, unlink } from "node:fs/promises";
import { join } from "node:path";
import { CairnError } from "../common/errors.ts";
import type { SnapshotStream } from "../raft/index.ts";
import { SNAPSHOT_BUFFERS } from "../storage/index.ts";

/** The data of a snapshot as it arrives, and what it becomes once whole. */
export interface SnapshotSink {
  /** Takes the next bytes (queued: the sink keeps them until written). */
  write(bytes: Buffer): void;
  /** Resolves once every write so far is done (null if none is pending); rejects on a failure. */
  pending(): Promise<void> | null;
  /** Every write done and the data closed; rejects on a write failure. */
  close(): Promise<void>;
  /** The data, once closed: in memory, or as a stream the caller now owns. */
  result(): { readonly data: Uint8Array; readonly stream?: SnapshotStream };
  /** Discards the data (a refused or broken transfer). Idempotent. */
  discard(): void;
}

const EMPTY = new Uint8Array(0);
/** How much of a snapshot file one read brings back into memory. */
const READ_BYTES = 1 << 20;

/** Removes what a previous run left in `dir` (partial or unread snapshots), and makes it. */
export function clearSnapshotDir(dir: string): void {
  rmSync(dir, { recursive: true, force: true });
  mkdirSync(dir, { recursive: true });
}

export class SnapshotFile implements SnapshotSink {
  readonly path: string;
  #handle: Promise<FileHandle>;
  /** The writes queued, in order; settles when the last is done. */
  #chain: Promise<void>;
  #queued = 0;
  /** Bytes handed to write() so far: the file's size once closed. */
  #size = 0;
  #failure: unknown = undefined;
  #closed = false;
  #discarded = false;

  constructor(dir: string) {
    this.path = join(dir, `${randomBytes(8).toString("hex")}.snapshot-part`);
    this.#handle = mkdir(dir, { recursive: true }).then(() => open(this.path, "wx"));
    this.#chain = this.#handle.then(() => undefined);
    this.#chain.catch((err: unknown) => this.#fail(err));
  }

  write(bytes: Buffer): void {
    if (this.#closed) throw new Error("SnapshotFile: write after close");
    this.#queued++;
    this.#size += bytes.length;
    this.#chain = this.#chain.then(async () => {
      if (this.#failure !== undefined) return;
      const handle = await this.#handle;
      let at = 0;
      while (at < bytes.length) {
        const { bytesWritten } = await handle.write(bytes, at, bytes.length - at);
        at += bytesWritten;
      }
      this.#queued--;
    });
    this.#chain.catch((err: unknown) => this.#fail(err));
  }

  pending(): Promise<void> | null {
    if (this.#failure !== undefined) return Promise.reject(this.#failure as Error);
    return this.#queued === 0 ? null : this.#chain;
  }

  async close(): Promise<void> {
    this.#closed = true;
    await this.#chain;
    if (this.#failure !== undefined) throw this.#failure;
    await (await this.#handle).close();
  }

  result(): { readonly data: Uint8Array; readonly stream: SnapshotStream } {
    let state: "closed" | "reading" | "released" = "closed";
    const path = this.path;
    const size = this.#size;
    const release = (): void => {
      if (state === "released") return;
      state = "released";
      this.discard();
    };
    const gone = (): CairnError =>
      new CairnError("CAIRN_ERR_SNAPSHOT_UNAVAILABLE", `the snapshot file ${path} was released`);
    return {
      data: EMPTY,
      stream: {
        async *chunks(): AsyncGenerator<Uint8Array> {
          if (state !== "closed") throw gone();
          state = "reading";
          if (size === 0) return;
          // Opened now: once open, a release (which unlinks the file) does not cut the read.
          // Every read goes into the same buffer, from the pool the decoder also draws on: a
          // chunk is a view of it, valid until the next is asked for (SnapshotStream.chunks).
          const handle = await open(path, "r");
          const buf = SNAPSHOT_BUFFERS.take(Math.min(READ_BYTES, size));
          try {
            for (let at = 0; at < size;) {
              const want = Math.min(buf.length, size - at);
              const { bytesRead } = await handle.read(buf, 0, want, at);
              if (bytesRead === 0) {
                throw new CairnError(
                  "CAIRN_ERR_SNAPSHOT_UNAVAILABLE",
                  `the snapshot file ${path} ended at ${at} of its ${size} bytes`,
                );
              }
              at += bytesRead;
              yield buf.subarray(0, bytesRead);
            }
          } finally {
            SNAPSHOT_BUFFERS.give(buf);
            await handle.close();
          }
        },
        release,
      },
    };
  }

  discard(): void {
    if (this.#discarded) return;
    this.#discarded = true;
    this.#closed = true;
    void this.#chain
      .catch(() => undefined)
      .then(() => this.#handle)
      .then((h) => h.close())
      .catch(() => undefined)
      .then(() => unlink(this.path))
      .catch(() => undefined);
  }

  #fail(err: unknown): void {
    this.#failure ??= err;
  }
}

/** A snapshot's data in memory, as the chunks it came in. */
export class MemorySink implements SnapshotSink {
  readonly #chunks: Buffer[] = [];

  write(bytes: Buffer): void {
    this.#chunks.push(bytes);
  }

  pending(): null {
    return null;
  }

  close(): Promise<void> {
    return Promise.resolve();
  }

  result(): { readonly data: Uint8Array } {
    const all = Buffer.concat(this.#chunks);
    return { data: new Uint8Array(all.buffer, all.byteOffset, all.length) };
  }

  discard(): void {
    this.#chunks.length = 0;
  }
}
