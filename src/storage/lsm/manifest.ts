/**
 * The manifest: which SSTables form the engine, at which level, and the highest sequence they
 * contain (`flushedSeq`). It is a log of version edits, each framed as
 *     u32 length | u32 crc32c(body) | body (UTF-8 JSON of one VersionEdit)
 * in a file `MANIFEST-<n>`; the file `CURRENT` names the live manifest. On open, and whenever the
 * log outgrows its threshold (`Manifest.append`), it is rolled: a fresh `MANIFEST-<n+1>` holding
 * one edit with the whole state is written, fsynced, its name made durable (a directory fsync),
 * and made live by writing `CURRENT.tmp`, fsyncing it, renaming it over `CURRENT` and fsyncing
 * the directory; only then is the old one removed.
 *
 * A damaged record is read as a torn tail only when it is the file's last and partial: a crash
 * during an append, which leaves a prefix of the record (or zeros), and whose edit was never
 * acknowledged. A last record written in full with a bad checksum was acknowledged (or may have
 * been): its edit may be what made a WAL compaction safe, so it is reported (`tail.kind`
 * "damaged") for the engine to refuse, never dropped. See docs/storage.md, "Manifest recovery".
 */
import { constants } from "node:fs";
import { type FileHandle, open, readdir, readFile, unlink } from "node:fs/promises";
import { join } from "node:path";
import { CairnError } from "../../common/index.ts";
import {
  crc32c,
  CorruptionError,
  ensureDir,
  fsyncDir,
  nodeFileSystem,
  writeFileDurably,
} from "../common/index.ts";

export interface FileMeta {
  readonly level: number;
  readonly number: number;
  readonly size: number;
  /** User keys as binary strings (hex in the manifest's JSON). */
  readonly smallest: string;
  readonly largest: string;
  readonly minSeq: number;
  readonly maxSeq: number;
  readonly entries: number;
}

export interface VersionEdit {
  /** Drop every file first and take `flushedSeq` as is (a snapshot import). */
  readonly reset?: boolean;
  readonly add?: readonly FileMeta[];
  readonly remove?: ReadonlyArray<{ readonly level: number; readonly number: number }>;
  readonly flushedSeq?: number;
  readonly nextFileNumber?: number;
}

export interface ManifestState {
  /** Files per level, L0 newest first, other levels by smallest key. */
  levels: FileMeta[][];
  flushedSeq: number;
  nextFileNumber: number;
}

export const LEVELS = 7;

/**
 * The manifest is rolled once it holds more than MANIFEST_ROLL_FACTOR times the snapshot it
 * started from, and more than this floor (LsmOptions.manifestRollBytes). The factor bounds what
 * an open reads and replays to 4× what the version itself takes, and a roll's rewrite to a third
 * of the edits' own bytes; the floor keeps small engines, whose snapshot is a few hundred bytes,
 * from rolling every few edits (a roll costs four fsyncs, an edit one). 256 KiB is ~950 edits of
 * 16-byte keys, replayed at open in ~9 ms (35 ms a MiB, measured): a node opens 1024 engines,
 * and before, a manifest grew without bound until the next open.
 */
export const MANIFEST_ROLL_BYTES = 256 * 1024;
export const MANIFEST_ROLL_FACTOR = 4;

export function emptyState(): ManifestState {
  // A loop, not Array.from with a mapping function (V8's generic path, several µs: a node's
  // first writes make up to a thousand of these).
  const levels: FileMeta[][] = [];
  for (let level = 0; level < LEVELS; level++) levels.push([]);
  return { levels, flushedSeq: 0, nextFileNumber: 1 };
}

/** A copy of a state that edits to the original leave as it is (files are shared: immutable). */
function cloneState(state: ManifestState): ManifestState {
  return {
    levels: state.levels.map((files) => files.slice()),
    flushedSeq: state.flushedSeq,
    nextFileNumber: state.nextFileNumber,
  };
}

/** Applies an edit to a state (in place). */
export function applyEdit(state: ManifestState, edit: VersionEdit): void {
  if (edit.reset === true) {
    for (const level of state.levels) level.length = 0;
    state.flushedSeq = edit.flushedSeq ?? 0;
  }
  for (const r of edit.remove ?? []) {
    const level = state.levels[r.level] as FileMeta[];
    const at = level.findIndex((f) => f.number === r.number);
    if (at >= 0) level.splice(at, 1);
  }
  for (const f of edit.add ?? []) (state.levels[f.level] as FileMeta[]).push(f);
  const l0 = state.levels[0] as FileMeta[];
  l0.sort((a, b) => b.maxSeq - a.maxSeq || b.number - a.number);
  for (let l = 1; l < LEVELS; l++) {
    (state.levels[l] as FileMeta[]).sort((a, b) => (a.smallest < b.smallest ? -1 : 1));
  }
  if (edit.flushedSeq !== undefined && edit.flushedSeq > state.flushedSeq) {
    state.flushedSeq = edit.flushedSeq;
  }
  if (edit.nextFileNumber !== undefined && edit.nextFileNumber > state.nextFileNumber) {
    state.nextFileNumber = edit.nextFileNumber;
  }
}

function encodeEdit(edit: VersionEdit): Buffer {
  const json = JSON.stringify({
    ...edit,
    add: edit.add?.map((f) => ({
      ...f,
      smallest: Buffer.from(f.smallest, "latin1").toString("hex"),
      largest: Buffer.from(f.largest, "latin1").toString("hex"),
    })),
  });
  const body = Buffer.from(json, "utf8");
  const frame = Buffer.allocUnsafe(8 + body.length);
  frame.writeUInt32LE(body.length, 0);
  frame.writeUInt32LE(crc32c(body), 4);
  body.copy(frame, 8);
  return frame;
}

function decodeEdit(json: string): VersionEdit {
  const raw = JSON.parse(json) as VersionEdit;
  return {
    ...raw,
    ...(raw.add === undefined
      ? {}
      : {
          add: raw.add.map((f) => ({
            ...f,
            smallest: Buffer.from(f.smallest, "hex").toString("latin1"),
            largest: Buffer.from(f.largest, "hex").toString("latin1"),
          })),
        }),
  };
}

/**
 * Checksummed bytes the search for a valid record after a damaged one may spend. A torn write
 * leaves at most the one edit that was in flight, whose JSON text reads as lengths of 512 MiB or
 * more at almost every offset: it costs next to nothing. Only crafted or pathological garbage
 * reaches the cap, and it is reported as corruption rather than stalling the open.
 */
const TAIL_SCAN_BUDGET_BYTES = 16 * 1024 * 1024;

/**
 * What follows a manifest's last valid record, if anything: a `torn` partial record (a crash
 * during the append, never acknowledged: dropped), or a `damaged` one, whole but failing its
 * checksum (written in full, so possibly acknowledged: the engine refuses to open).
 */
export interface ManifestTail {
  readonly kind: "torn" | "damaged";
  /** Where the record starts; the file's bytes from here on are not applied. */
  readonly offset: number;
}

/**
 * Parses a manifest file. A damaged record before a valid one is corruption (thrown); a damaged
 * last record is reported in `tail`, not applied. `scannedBytes` counts the bytes checksummed
 * while looking for a valid record after damage.
 */
export function replayManifest(
  path: string,
  buf: Buffer,
): { state: ManifestState; scannedBytes: number; tail?: ManifestTail } {
  const state = emptyState();
  let at = 0;
  let scannedBytes = 0;
  let tail: ManifestTail | undefined;
  /**
   * Whether a record could start at `p`: its length fits the file and its body looks like the
   * JSON object every edit is ("{" first, "}" last). Cheap; only then is the checksum computed.
   */
  const plausibleAt = (p: number): boolean => {
    if (p + 8 > buf.length) return false;
    const len = buf.readUInt32LE(p);
    return (
      len >= 2 && p + 8 + len <= buf.length && buf[p + 8] === 0x7b && buf[p + 7 + len] === 0x7d
    );
  };
  const checksumOk = (p: number): boolean => {
    const len = buf.readUInt32LE(p);
    return crc32c(buf, 0, p + 8, p + 8 + len) === buf.readUInt32LE(p + 4);
  };
  while (at < buf.length) {
    if (!plausibleAt(at) || !checksumOk(at)) {
      for (let p = at + 1; p + 8 <= buf.length; p++) {
        if (!plausibleAt(p)) continue;
        scannedBytes += buf.readUInt32LE(p);
        if (scannedBytes > TAIL_SCAN_BUDGET_BYTES) {
          throw new CorruptionError(
            path,
            at,
            "manifest record damaged, and the rest of the file too damaged to tell a torn tail",
          );
        }
        if (checksumOk(p)) {
          throw new CorruptionError(path, at, "manifest record checksum mismatch");
        }
      }
      tail = { kind: isWholeRecord(buf, at) ? "damaged" : "torn", offset: at };
      break;
    }
    const len = buf.readUInt32LE(at);
    let edit: VersionEdit;
    try {
      edit = decodeEdit(buf.toString("utf8", at + 8, at + 8 + len));
    } catch (cause) {
      throw new CorruptionError(path, at, "manifest record does not parse", { cause });
    }
    applyEdit(state, edit);
    at += 8 + len;
  }
  if (at === 0) throw new CorruptionError(path, 0, "manifest holds no valid record");
  return { state, scannedBytes, ...(tail === undefined ? {} : { tail }) };
}

/**
 * Whether the damaged record at `at`, the file's last, was written in full: its length fits the
 * file and its body is framed as an edit ("{" … "}") or ends exactly at the end of the file, or
 * the rest of the file matches its checksum (a damaged length). An append cut by a crash leaves
 * a prefix of its record, whose length runs past the end of the file, or zeros where the file
 * grew but the data never landed: neither is whole.
 */
function isWholeRecord(buf: Buffer, at: number): boolean {
  if (at + 8 > buf.length) return false;
  const len = buf.readUInt32LE(at);
  const end = at + 8 + len;
  if (len >= 2 && end <= buf.length) {
    if (end === buf.length) return true;
    if (buf[at + 8] === 0x7b && buf[end - 1] === 0x7d) return true;
  }
  const rest = buf.length - at - 8;
  return rest >= 2 && crc32c(buf, 0, at + 8, buf.length) === buf.readUInt32LE(at + 4);
}

/**
 * The live manifest of an engine. Its file is open only while an edit is appended: 1024 engines
 * would otherwise hold 1024 descriptors outside the node's file cache, for files written a few
 * times a minute at most (the open is cheap next to the fdatasync that follows).
 */
export class Manifest {
  readonly dir: string;
  #fileName: string;
  #size: number;
  /** Size of the snapshot the file started with: the roll threshold scales with it. */
  #snapshotBytes: number;
  readonly #rollBytes: number;
  /**
   * The version the file holds, every appended edit applied: what a roll writes. The engine's
   * own state lags behind it (an edit is installed after its append resolves, and others may be
   * queued by then), so the manifest keeps its own.
   */
  readonly #state: ManifestState;
  #rolls = 0;
  /** Serializes appends and rolls: edits reach the file in the order they were made. */
  #tail: Promise<void> = Promise.resolve();
  /** The first append or roll error; every later append is refused (see append). */
  #failure: unknown = undefined;

  private constructor(
    dir: string,
    fileName: string,
    size: number,
    state: ManifestState,
    rollBytes: number,
  ) {
    this.dir = dir;
    this.#fileName = fileName;
    this.#size = size;
    this.#snapshotBytes = size;
    this.#state = state;
    this.#rollBytes = rollBytes;
  }

  /** Reads the live manifest of `dir` (an empty state when there is none). */
  static async load(
    dir: string,
  ): Promise<{ state: ManifestState; current: string | undefined; tail?: ManifestTail }> {
    let current: string;
    try {
      current = (await readFile(join(dir, "CURRENT"), "utf8")).trim();
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === "ENOENT") {
        await checkNoCurrentWasLost(dir);
        return { state: emptyState(), current: undefined };
      }
      if ((err as NodeJS.ErrnoException).code === "EISDIR") {
        // Node's error names no file, and is no corruption to corrupt-shard.ts.
        throw new CorruptionError(join(dir, "CURRENT"), 0, "CURRENT is not a regular file", {
          cause: err,
        });
      }
      throw err;
    }
    if (!/^MANIFEST-\d+$/.test(current)) {
      throw new CorruptionError(join(dir, "CURRENT"), 0, "CURRENT does not name a manifest");
    }
    const path = join(dir, current);
    let buf: Buffer;
    try {
      buf = await readFile(path);
    } catch (cause) {
      const code = (cause as NodeJS.ErrnoException).code;
      const what =
        code === "ENOENT"
          ? "is missing"
          : code === "EISDIR"
            ? "is not a regular file"
            : `cannot be read (${(cause as Error).message})`;
      throw new CorruptionError(path, 0, `manifest named by CURRENT ${what}`, { cause });
    }
    const { state, tail } = replayManifest(path, buf);
    return { state, current, ...(tail === undefined ? {} : { tail }) };
  }

  /**
   * Writes a new manifest holding `state` and makes it live (CURRENT switched atomically). The
   * name of `dir` and of its parents is made durable first (once per process): the engine's
   * directory, made at its open, must survive a power cut once a manifest inside it counts.
   * `dirDurable` skips that when a live manifest is already in `dir` (a reopen): whoever made
   * the first one made the directory durable before it. `rollBytes`: see MANIFEST_ROLL_BYTES.
   */
  static async create(
    dir: string,
    state: ManifestState,
    number: number,
    dirDurable = false,
    rollBytes = MANIFEST_ROLL_BYTES,
  ): Promise<Manifest> {
    // Copied now: the caller goes on applying edits to its state after they are appended.
    const own = cloneState(state);
    if (!dirDurable) await ensureDir(nodeFileSystem, dir);
    const { fileName, size } = await writeSnapshot(dir, own, number);
    return new Manifest(dir, fileName, size, own, rollBytes);
  }

  /**
   * Appends an edit and makes it durable; edits apply in call order. After a failed write or
   * fdatasync the manifest fails for good: whether the failed bytes reached the disk is unknown,
   * so a later edit could neither be placed after them nor over them, and one installed on top of
   * an edit the caller has given up on could delete tables still needed. Every later append
   * (queued or new) rejects; only a reopen, which replays what is on disk, goes on.
   *
   * `writing`, when given, is called once the file is open, just before the edit's first write:
   * from then on bytes of it may be in the file, and a reopen may replay it. An append that
   * rejects without having called it left the file as it was (refused, or the open failed).
   *
   * An edit that takes the file past its threshold (MANIFEST_ROLL_BYTES) is followed by a roll
   * (see #roll), in the same queue: the append resolves first, and later appends wait for it.
   */
  append(edit: VersionEdit, writing?: () => void): Promise<void> {
    if (this.#failure !== undefined) return Promise.reject(this.#failedError());
    const frame = encodeEdit(edit);
    const run = async (): Promise<void> => {
      if (this.#failure !== undefined) throw this.#failedError();
      try {
        const handle = await open(join(this.dir, this.#fileName), constants.O_WRONLY);
        try {
          writing?.();
          await writeFully(handle, frame, this.#size);
          await handle.datasync();
        } finally {
          await handle.close();
        }
      } catch (err) {
        this.#failure = err;
        throw err;
      }
      this.#size += frame.length;
      applyEdit(this.#state, edit);
    };
    const next = this.#tail.then(run);
    this.#tail = next.then(() => this.#maybeRoll()).catch(() => undefined);
    return next;
  }

  /** The size past which an append is followed by a roll. */
  get rollThreshold(): number {
    return Math.max(this.#rollBytes, MANIFEST_ROLL_FACTOR * this.#snapshotBytes);
  }

  async #maybeRoll(): Promise<void> {
    if (this.#failure !== undefined || this.#size <= this.rollThreshold) return;
    try {
      await this.#roll();
    } catch (err) {
      this.#failure = err;
      throw err;
    }
  }

  /**
   * Replaces the file by a snapshot of the version it holds, as an open does (writeSnapshot):
   * the new file is written, fsynced and its name made durable before CURRENT is switched to it
   * (durably), and the old one is removed only then. Both files describe the same version at
   * every step, so a crash anywhere reopens to it through whichever CURRENT names; the next open
   * removes the one it does not name. Runs in the append queue: no edit is written to either
   * file meanwhile, and none to the new one before CURRENT naming it is durable (a crash could
   * otherwise bring back the old CURRENT, without the edit).
   *
   * A failure fails the manifest for good, as a failed append does: past the rename, which file
   * a reopen reads is unknown. The edits already appended are durable either way.
   */
  async #roll(): Promise<void> {
    const old = this.#fileName;
    const { fileName, size } = await writeSnapshot(
      this.dir,
      this.#state,
      Number(old.slice("MANIFEST-".length)) + 1,
    );
    this.#fileName = fileName;
    this.#size = size;
    this.#snapshotBytes = size;
    this.#rolls++;
    await unlink(join(this.dir, old)).catch(() => {
      // Removed as an old manifest on the next open: CURRENT no longer names it.
    });
  }

  #failedError(): CairnError {
    return new CairnError(
      "CAIRN_ERR_LSM_FAILED",
      `manifest ${join(this.dir, this.#fileName)} failed earlier; reopen the engine`,
      { cause: this.#failure },
    );
  }

  /** The live manifest's file name (it changes when the manifest rolls). */
  get fileName(): string {
    return this.#fileName;
  }

  get size(): number {
    return this.#size;
  }

  /** Rolls since this manifest was created (not counting the one its creation was). */
  get rolls(): number {
    return this.#rolls;
  }

  /** Waits for the appends (and a roll) in flight (the file is not held open between them). */
  async close(): Promise<void> {
    await this.#tail;
  }
}

/** The name of an engine's first manifest, made at its first edit (LsmEngine#appendEdit). */
const FIRST_MANIFEST = "MANIFEST-000001";

/**
 * Throws CorruptionError naming `dir`'s CURRENT, which is missing, if a manifest there shows
 * that CURRENT had been written: any manifest but the first, or the first holding more than the
 * snapshot it starts with. CURRENT is written once the first manifest holds that snapshot (the
 * empty version) and before any edit is appended to it, and from then on is only ever replaced
 * by a rename; so without it, a crash cut the first manifest's making and nothing of the engine
 * was acknowledged, unless CURRENT was lost since (a damaged disk, a stray deletion). Opened as
 * new, the engine then removed every table and manifest as orphans: the shard's data deleted by
 * the node itself, for want of one small file.
 */
async function checkNoCurrentWasLost(dir: string): Promise<void> {
  const current = join(dir, "CURRENT");
  for (const name of (await readdir(dir)).filter((n) => /^MANIFEST-\d+$/.test(n)).sort()) {
    let wasLive = name !== FIRST_MANIFEST;
    if (!wasLive) {
      const buf = await readFile(join(dir, name));
      wasLive = buf.length >= 8 && 8 + buf.readUInt32LE(0) < buf.length;
    }
    if (wasLive) {
      throw new CorruptionError(
        current,
        0,
        `CURRENT is missing while ${name} shows it had been written (a first manifest holds ` +
          `nothing else before CURRENT names it): refusing to open the engine as new and delete ` +
          `its tables`,
      );
    }
  }
}

/**
 * Writes `MANIFEST-<number>` holding `state` as one edit and makes it live: the file is fsynced,
 * its name made durable, then CURRENT switched to it durably. The caller removes the manifest
 * it replaces. Returns the new file's name and size.
 */
async function writeSnapshot(
  dir: string,
  state: ManifestState,
  number: number,
): Promise<{ fileName: string; size: number }> {
  const fileName = `MANIFEST-${String(number).padStart(6, "0")}`;
  const handle = await open(
    join(dir, fileName),
    constants.O_RDWR | constants.O_CREAT | constants.O_TRUNC,
  );
  const frame = encodeEdit({
    add: state.levels.flat(),
    flushedSeq: state.flushedSeq,
    nextFileNumber: state.nextFileNumber,
  });
  try {
    await writeFully(handle, frame, 0);
    await handle.sync();
  } finally {
    await handle.close();
  }
  // The manifest's name is made durable before CURRENT names it. POSIX does not order the
  // rename below after this file's creation until the directory is synced, and a power cut
  // between them could keep CURRENT and lose the manifest (LevelDB syncs the directory of a
  // manifest for the same reason). ext4 and xfs journal both in order; others need not.
  await fsyncDir(dir);
  await writeFileDurably(join(dir, "CURRENT"), `${fileName}\n`);
  return { fileName, size: frame.length };
}

/**
 * Writes all of `data` at `position`: a write(2) may take fewer bytes than asked (near a full
 * disk), and the rest must follow it, or the edit is torn while its size counts as written and
 * the next one lands past a gap.
 */
async function writeFully(handle: FileHandle, data: Uint8Array, position: number): Promise<void> {
  let written = 0;
  while (written < data.length) {
    const { bytesWritten } = await handle.write(
      data,
      written,
      data.length - written,
      position + written,
    );
    if (bytesWritten <= 0)
      throw new Error(`a write of the manifest took no bytes at ${position + written}`);
    written += bytesWritten;
  }
}
