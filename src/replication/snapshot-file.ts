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

/**
 * The disk incoming snapshots are written to, as the node's reserve of free space on it sees it
 * (`storage.min_free_bytes`: src/node/disk-reserve.ts, DiskReserve).
 */
export interface SnapshotDisk {
  /**
   * Why snapshot files of `bytes` in all, and the tables their installs build from them (about
   * as large again, while the files are still there), would take the reserve, or null when
   * they leave it free. What was written already counts as written.
   */
  snapshotRefusal(bytes: number): string | null;
  /** `bytes` more of a snapshot were written: the reserve looks at the disk sooner. */
  wrote(bytes: number): void;
}

/**
 * The room a directory's snapshot files take on a disk that keeps a reserve: the bytes of the
 * files not removed yet (being received, or waiting for their install), each of which an
 * install builds into tables about as large while the file is still there. A snapshot is
 * refused (SnapshotAssemblerOptions.room) when it would take the reserve: written on whatever
 * its size, it took the reserve and then the rest of the disk, and a WAL write that met the
 * full disk stopped the node.
 */
export class SnapshotSpace {
  readonly #disk: SnapshotDisk;
  /** Bytes of the files written or queued, and not removed. */
  #bytes = 0;

  constructor(disk: SnapshotDisk) {
    this.#disk = disk;
  }

  /** Why `bytes` more of a snapshot may not be written, or null. */
  refusal(bytes: number): string | null {
    return this.#disk.snapshotRefusal(this.#bytes + bytes);
  }

  wrote(bytes: number): void {
    this.#bytes += bytes;
    this.#disk.wrote(bytes);
  }

  removed(bytes: number): void {
    this.#bytes -= bytes;
  }
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
  /** Where the file's bytes are counted until it is removed (null: nowhere). */
  readonly #space: SnapshotSpace | null;

  constructor(dir: string, space: SnapshotSpace | null = null) {
    this.#space = space;
    this.path = join(dir, `${randomBytes(8).toString("hex")}.snapshot-part`);
    this.#handle = mkdir(dir, { recursive: true }).then(() => open(this.path, "wx"));
    this.#chain = this.#handle.then(() => undefined);
    this.#chain.catch((err: unknown) => this.#fail(err));
  }

  write(bytes: Buffer): void {
    if (this.#closed) throw new Error("SnapshotFile: write after close");
    this.#queued++;
    this.#size += bytes.length;
    this.#space?.wrote(bytes.length);
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
    this.#space?.removed(this.#size);
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
