/**
 * The node-wide write-ahead log: one sequence of segment files shared by every shard.
 * See README.md for the concept, the format and the caveats.
 */
import { dirname, join } from "node:path";
import { CairnError, DenseMap, clearArray } from "../../common/index.ts";
import {
  CorruptionError,
  crc32c,
  ensureDir,
  nodeFileSystem,
  threadRunDelayClock,
  type FileSystem,
  type FsFile,
  type OpenFlags,
  type RunDelayClock,
} from "../common/index.ts";
import {
  FLAG_CHECKPOINT,
  FLAG_HAS_VOTE,
  FRAME_HEADER_BYTES,
  KIND_COMPACT,
  KIND_DROP,
  KIND_DROPPED_LOG,
  KIND_ENTRY,
  KIND_HARD_STATE,
  KIND_SNAPSHOT,
  MAX_BODY_BYTES,
  MAX_PAYLOAD_BYTES,
  decodeRecord,
  encodeRecord,
  encodedSize,
  hasValidRecordAfter,
  type RawRecord,
} from "./record.ts";
import { ShardLog } from "./shard-log.ts";
import type {
  ClampedCommit,
  TornTail,
  WalDroppedLog,
  WalEntry,
  WalHardState,
  WalOptions,
  WalRecord,
  WalSnapshotMeta,
  WalStats,
} from "./types.ts";

const SEGMENT_MAGIC = Buffer.from("CAIRNWAL", "latin1");
const SEGMENT_VERSION = 1;
const SEGMENT_HEADER_BYTES = 16;
const SEGMENT_SUFFIX = ".wal";
/**
 * Segments are written with O_DSYNC: each write returns once its data (and the metadata needed to
 * read it back, such as the file size) is on stable storage, the guarantee of write + fdatasync
 * in one system call. One call means one hop through libuv's thread pool instead of two, so the
 * event loop's work between the hops cannot delay the flush (see BENCHMARKS.md).
 */
const WRITE_FLAGS: OpenFlags = { dsync: true };

const EMPTY = new Uint8Array(0);
const utf8 = new TextEncoder();
const fromUtf8 = new TextDecoder();

interface Segment {
  readonly seq: number;
  readonly path: string;
  /**
   * Highest entry index per shard written into this segment: it is needed until compacted past.
   * Indexed by shard id (a `Map` lookup here per shard and write was ~0.5 % of three nodes' CPU).
   */
  readonly maxIndex: DenseMap<number>;
}

/** A change of a shard's state that becomes durable with the batch that carries it. */
type Change =
  | { readonly kind: "hard-state"; readonly shard: number; readonly state: WalHardState }
  | { readonly kind: "snapshot"; readonly shard: number; readonly meta: WalSnapshotMeta }
  | {
      readonly kind: "compact";
      readonly shard: number;
      readonly index: number;
      readonly term: number;
    }
  /** The shard's replica was deleted: only its term and vote stay, and its log's last entry. */
  | {
      readonly kind: "drop";
      readonly shard: number;
      readonly state: WalHardState;
      readonly droppedLog: WalDroppedLog | null;
    }
  /**
   * The first entries of a dropped shard's replica created again: not dropped any more (its
   * other records do that too), and its dropped log is gone (a snapshot's does that too).
   */
  | { readonly kind: "undrop"; readonly shard: number };

/**
 * What a checkpoint records of a shard: the state on disk, not the in-memory state that may
 * already include appends still waiting for their write.
 */
interface ShardCheckpoint {
  hardState: WalHardState | undefined;
  snapshot: WalSnapshotMeta | undefined;
  compactIndex: number;
  compactTerm: number;
  /** Dropped (Wal.drop): a checkpoint records it as a drop record, the term and vote only. */
  dropped: boolean;
  /**
   * As ShardLog.droppedLog: a checkpoint records it as a dropped-log record after a drop record,
   * followed, when the shard is no longer dropped (a replica created again, its log still
   * empty), by its hard state.
   */
  droppedLog: WalDroppedLog | null | undefined;
}

/** A ShardCheckpoint with nothing in it. */
function emptyCheckpoint(): ShardCheckpoint {
  return {
    hardState: undefined,
    snapshot: undefined,
    compactIndex: 0,
    compactTerm: 0,
    dropped: false,
    droppedLog: undefined,
  };
}

function segmentName(seq: number): string {
  return `${String(seq).padStart(20, "0")}${SEGMENT_SUFFIX}`;
}

function segmentHeader(): Buffer {
  const header = Buffer.alloc(SEGMENT_HEADER_BYTES);
  SEGMENT_MAGIC.copy(header, 0);
  header.writeUInt32LE(SEGMENT_VERSION, 8);
  return header;
}

/** Accumulates framed records in one buffer, growing it as needed. */
class RecordWriter {
  #buf: Buffer;
  #view: DataView;
  #at = 0;

  constructor(capacity: number) {
    this.#buf = Buffer.allocUnsafe(capacity);
    this.#view = new DataView(this.#buf.buffer, this.#buf.byteOffset, this.#buf.length);
  }

  put(
    kind: number,
    entryType: number,
    flags: number,
    shard: number,
    term: number,
    index: number,
    payload: Uint8Array,
  ): void {
    const need = encodedSize(payload.length);
    if (this.#at + need > this.#buf.length) {
      const bigger = Buffer.allocUnsafe(Math.max(this.#buf.length * 2, this.#at + need));
      this.#buf.copy(bigger, 0, 0, this.#at);
      this.#buf = bigger;
      this.#view = new DataView(bigger.buffer, bigger.byteOffset, bigger.length);
    }
    this.#at = encodeRecord(
      this.#buf,
      this.#view,
      this.#at,
      kind,
      entryType,
      flags,
      shard,
      term,
      index,
      payload,
    );
  }

  get length(): number {
    return this.#at;
  }

  finish(): Buffer {
    return this.#buf.subarray(0, this.#at);
  }

  /** Empties the writer, keeping its buffer for reuse. */
  reset(): void {
    this.#at = 0;
  }
}

/** WalOptions.segmentBytes's default. */
const DEFAULT_SEGMENT_BYTES = 64 * 1024 * 1024;

/**
 * The largest segment file recovery reads: it reads a segment whole (FileSystem.readFile), and
 * node's readFile refuses a file over 2 GiB - 1 bytes (ERR_FS_FILE_TOO_LARGE), as its write
 * refuses a longer write (ERR_OUT_OF_RANGE).
 */
export const SEGMENT_FILE_MAX_BYTES = 2 ** 31 - 1;
/**
 * Room kept in a segment for its header and checkpoint (a few hundred bytes a shard: 65,536
 * shards take ~25 MiB), and for the compaction and drop records appended without a check.
 */
export const CHECKPOINT_ROOM_BYTES = 64 * 1024 * 1024;

/** WalOptions.blockingWriteMaxBytes's default. */
const BLOCKING_WRITE_MAX_BYTES = 64 * 1024;
/** WalOptions.blockingWriteSlowMs's default: a disk whose every write takes longer is slow. */
const BLOCKING_WRITE_SLOW_MS = 2;
/** How many blocking writes in a row must all be slow to mark the disk slow (#writesNow). */
const SLOW_WRITES_IN_A_ROW = 8;
const ASYNC_BATCHES_AFTER_SLOW_WRITES = 1000;
/** Distinct votes whose UTF-8 bytes a WAL keeps (#voteBytes). */
const VOTE_CACHE_LIMIT = 64;

export class Wal {
  readonly dir: string;
  /** Set when recovery cut a torn write off the end of the last segment. */
  readonly tornTail: TornTail | undefined;
  /**
   * Shards whose recovered hard state committed entries past the last durable one, and to what
   * their commit was lowered. Nothing after the last durable write was acknowledged by this node,
   * so those entries were never counted towards a quorum from here; the driver logs these.
   */
  readonly clampedCommits: readonly ClampedCommit[];
  /**
   * Set when the WAL was lost (its `createdMarker` exists, its segments do not) and open started
   * a new one because the operator accepted the loss (`acceptLoss`): what it held is gone.
   */
  readonly lost: boolean;

  readonly #fs: FileSystem;
  readonly #segmentBytes: number;
  /**
   * The most one write may carry (everything appended between two flushes): a write goes whole
   * into the current segment, which holds less than segmentBytes before it (or only its header
   * and checkpoint, after a rotation), and the segment must stay readable
   * (SEGMENT_FILE_MAX_BYTES). A write past it made the WAL unreadable at the next open (every
   * shard's log in it), or, past 2 GiB itself, failed the WAL. append() refuses more.
   */
  readonly #maxWriteBytes: number;
  readonly #preallocate: boolean;
  readonly #memoryBudgetBytes: number;
  readonly #blockingWriteMaxBytes: number;
  readonly #blockingWriteSlowMs: number;
  readonly #beforeBlockingWrite: (() => void) | undefined;
  readonly #onBatchWritten: ((ms: number, bytes: number) => void) | undefined;
  /** WalOptions.runDelay; undefined until the first blocking write makes the default. */
  #runDelay: RunDelayClock | null | undefined;
  /** Batches still to write asynchronously after a blocking write was slow (see #flush). */
  #asyncAfterSlowWrites = 0;
  /** The latest blocking writes, in a row, that took longer than #blockingWriteSlowMs. */
  #slowWritesInARow = 0;
  #blockingWrites = 0;
  readonly #testingBugs: NonNullable<WalOptions["testingBugs"]>;
  /** By shard id: looked up several times per Raft message (terms, first and last indexes). */
  readonly #shards = new DenseMap<ShardLog>();
  readonly #segments: Segment[];
  #handle: FsFile;
  #segmentSize: number;

  /**
   * Records appended since the last flush started, encoded in place. Two writers alternate: one
   * takes appends while the other's bytes are being written (one write is in flight at a time).
   */
  #writer = new RecordWriter(1024 * 1024);
  #spare = new RecordWriter(1024 * 1024);
  /**
   * The entries in #writer as (shard, highest index) pairs, flat, a pair per record: what the
   * segment they land in records (Segment.maxIndex). Like the changes below, two arrays
   * alternate, each emptied in place when its write is done: no allocation per write.
   */
  #pendingMax: number[] = [];
  #spareMax: number[] = [];
  /** State changes in #writer, in append order: durable once its write completes. */
  #pendingChanges: Change[] = [];
  #spareChanges: Change[] = [];
  /** Bytes handed to append() so far, and how many of them are durable. */
  #appendedBytes = 0;
  #durableBytes = 0;
  /** The running flush loop, if any; at most one write is in flight. */
  #flushing: Promise<void> | null = null;
  /** The batch being written, and the promise of the sync() calls it satisfies. */
  #inflight: { upTo: number; done: PromiseWithResolvers<undefined> } | null = null;
  /** The promise of sync() calls waiting for the next batch. */
  #next: PromiseWithResolvers<undefined> | null = null;
  #failure: unknown = undefined;
  #closed = false;
  /**
   * close() has begun: records are refused from then on. Taken meanwhile, one was written after
   * close() began, or, when its write started a segment, failed on the closed file.
   */
  #closing = false;
  /** close()'s one run, shared by every caller. */
  #closePromise: Promise<void> | null = null;
  /** Per shard, the highest index below which no entry is needed any more, as made durable. */
  readonly #durableCompact = new DenseMap<number>();
  /** #checkBatch's scratch: a batch's shards' last and compaction indexes as it goes. */
  readonly #batchLast = new DenseMap<number>();
  readonly #batchCompact = new DenseMap<number>();
  readonly #batchTouched: number[] = [];
  /** Per shard, its state as on disk: what a new segment's checkpoint may record. */
  readonly #durable = new DenseMap<ShardCheckpoint>();
  #memoryBytes = 0;

  #recordsAppended = 0;
  #syncs = 0;
  #bytesWritten = 0;
  #segmentsDeleted = 0;
  #segmentDeleteFailures = 0;
  /**
   * Obsolete segments still to unlink, oldest first: an unlink that fails is retried at the next
   * flush, and holds back every newer one (#unlinkQueued). A leftover segment must not fail the
   * WAL: recovery replays it and the newer segments supersede it, all of them being there.
   */
  readonly #toDelete: Segment[] = [];

  private constructor(
    dir: string,
    options: WalOptions,
    segments: Segment[],
    handle: FsFile,
    segmentSize: number,
    tornTail: TornTail | undefined,
    clampedCommits: readonly ClampedCommit[],
    lost: boolean,
  ) {
    this.dir = dir;
    this.lost = lost;
    this.#fs = options.fs ?? nodeFileSystem;
    this.#segmentBytes = options.segmentBytes ?? DEFAULT_SEGMENT_BYTES;
    this.#maxWriteBytes = SEGMENT_FILE_MAX_BYTES - this.#segmentBytes - CHECKPOINT_ROOM_BYTES;
    this.#preallocate = options.preallocate ?? true;
    this.#memoryBudgetBytes = options.memoryBudgetBytes ?? 512 * 1024 * 1024;
    this.#blockingWriteMaxBytes = options.blockingWriteMaxBytes ?? BLOCKING_WRITE_MAX_BYTES;
    this.#blockingWriteSlowMs = options.blockingWriteSlowMs ?? BLOCKING_WRITE_SLOW_MS;
    this.#beforeBlockingWrite = options.beforeBlockingWrite;
    this.#onBatchWritten = options.onBatchWritten;
    this.#runDelay = options.runDelay;
    this.#segments = segments;
    this.#handle = handle;
    this.#segmentSize = segmentSize;
    this.tornTail = tornTail;
    this.clampedCommits = clampedCommits;
    this.#testingBugs = options.testingBugs ?? {};
  }

  /**
   * Opens the WAL in `dir` (created if missing) and replays its segments, but for those older
   * than a gap in their sequence, which are deleted (splitAtNewestGap). A torn record at the end
   * of the last segment is cut off and reported in `tornTail`; any other damage throws a
   * CorruptionError naming the file and offset. A hard state committing past its shard's last
   * durable entry is lowered to that entry and reported in `clampedCommits`.
   */
  static async open(dir: string, options: WalOptions = {}): Promise<Wal> {
    const fs = options.fs ?? nodeFileSystem;
    await ensureDir(fs, dir);
    const names = (await fs.readdir(dir)).filter((n) => n.endsWith(SEGMENT_SUFFIX)).sort();
    const { segments, belowGap, missing } = splitAtNewestGap(
      names.map((name) => ({
        seq: Number(name.slice(0, -SEGMENT_SUFFIX.length)),
        path: join(dir, name),
        maxIndex: new DenseMap<number>(),
      })),
    );
    const shards = new Map<number, ShardLog>();
    const shardLog = (id: number): ShardLog => {
      let log = shards.get(id);
      if (log === undefined) {
        log = new ShardLog();
        shards.set(id, log);
      }
      return log;
    };
    let tornTail: TornTail | undefined;
    let lastSize = 0;
    for (let i = 0; i < segments.length; i++) {
      const segment = segments[i] as Segment;
      const isLast = i === segments.length - 1;
      const buf = await readSegment(fs, segment.path);
      const { valid, torn } = replaySegment(segment, buf, isLast, shardLog, (shard) => {
        // A drop voids the shard's entries in every segment up to here: no longer needed.
        for (let j = 0; j <= i; j++) (segments[j] as Segment).maxIndex.delete(shard);
      });
      if (torn) {
        tornTail = { file: segment.path, offset: valid, droppedBytes: nonZeroEnd(buf) - valid };
        const handle = await fs.open(segment.path, {});
        try {
          await handle.truncate(valid);
          await handle.sync();
        } finally {
          await handle.close();
        }
      }
      if (isLast) lastSize = valid;
    }
    // No segment with a header: a new WAL, or a lost one if it was created before.
    const lost =
      (segments.length === 0 || (segments.length === 1 && lastSize < SEGMENT_HEADER_BYTES)) &&
      (await markerExists(fs, options.createdMarker));
    if (lost && options.acceptLoss !== true) throw new LostWalError(dir, options.createdMarker);
    for (const [id, log] of shards) {
      if (log.holeBelow !== 0) {
        throw new CorruptionError(
          segments[0]?.path ?? dir,
          0,
          `shard ${id} misses the entries below ${log.holeBelow} (a segment holding them was lost${missing === undefined ? "" : `: ${missing}`})`,
        );
      }
      // Below a gap: the segments after it must hold every entry their hard states commit, or
      // the gap was a lost live segment, not an older version's deletion (splitAtNewestGap).
      const commit = log.hardState?.commit ?? 0;
      if (missing !== undefined && commit > log.lastIndex) {
        throw new CorruptionError(
          (segments[0] as Segment).path,
          0,
          `shard ${id} commits entries up to ${commit} but the segments from here hold them up to ${log.lastIndex} only (a segment holding them was lost: ${missing})`,
        );
      }
    }
    const clampedCommits: ClampedCommit[] = [];
    // A crash can keep a hard state and lose entries it commits: written by an older version
    // whose rotation checkpoint ran ahead of its batch, or by a driver that synced a commit
    // before its entries. Raft's core refuses commit > lastIndex; nothing past the last durable
    // entry was acknowledged by this node, so lowering the commit loses nothing. (lastIndex is
    // never below the compaction point, so a commit covered by a snapshot is kept.)
    if (options.testingBugs?.rotationCheckpointIncludesBatch !== true) {
      for (const [shard, log] of shards) {
        const state = log.hardState;
        if (state !== undefined && state.commit > log.lastIndex) {
          clampedCommits.push({ shard, commit: state.commit, clampedTo: log.lastIndex });
          log.hardState = { ...state, commit: log.lastIndex };
        }
      }
    }
    let handle: FsFile;
    const last = segments.at(-1);
    const fresh = last === undefined || lastSize < SEGMENT_HEADER_BYTES;
    if (fresh) {
      // No segment yet, or a last segment whose header itself was torn (a rotation cut short):
      // start it afresh, with the checkpoint the rotation would have written.
      const seq = last === undefined ? 1 : last.seq;
      const path = join(dir, segmentName(seq));
      handle = await fs.open(path, { ...WRITE_FLAGS, create: true, truncate: true });
      if (last === undefined) segments.push({ seq, path, maxIndex: new DenseMap<number>() });
    } else {
      handle = await fs.open((last as Segment).path, WRITE_FLAGS);
    }
    const wal = new Wal(dir, options, segments, handle, lastSize, tornTail, clampedCommits, lost);
    for (const [id, log] of shards) {
      wal.#shards.set(id, log);
      wal.#memoryBytes += log.bytes;
      wal.#durableCompact.set(id, log.compactIndex);
      wal.#durable.set(id, {
        hardState: log.hardState,
        snapshot: log.snapshot,
        compactIndex: log.compactIndex,
        compactTerm: log.compactTerm,
        dropped: log.dropped,
        droppedLog: log.droppedLog,
      });
    }
    if (fresh) {
      const head = Buffer.concat([segmentHeader(), wal.#checkpoint()]);
      await writeWhole(handle, head, 0);
      await wal.#preallocateSegment(handle, head.length);
      await fs.fsyncDir(dir);
      wal.#segmentSize = head.length;
    } else if (tornTail !== undefined && tornTail.file === (last as Segment).path) {
      // A write torn at the end of the last segment may have been its rotation's, cut inside
      // the checkpoint: the segment's checkpoint then lacks shards whose state only older
      // segments hold, and those are deleted once no entry pins them (a shard with a vote and
      // no entries lost its vote). The records go on in a new segment, whose checkpoint holds
      // every shard's state as recovered.
      await wal.#rotate();
      await wal.#handle.sync();
      await fs.fsyncDir(dir);
    }
    // Never replayed, and deleted like any obsolete segment (a failure is retried later).
    wal.#toDelete.push(...belowGap);
    await wal.#unlinkQueued();
    if (options.createdMarker !== undefined) await writeMarker(fs, options.createdMarker);
    return wal;
  }

  /**
   * Adds records to the log, in order. They are visible to reads at once and durable once a
   * later `sync()` resolves: the caller must not act on them (send, acknowledge) before that.
   * Entries' `data` is copied (into the shard's in-memory log) before this returns: the caller
   * may reuse its buffers. A batch holding an entry that does not follow its shard's log
   * (CAIRN_ERR_WAL_GAP), or a record larger than recovery reads back, or one that would make the
   * next write (with what was appended before it and not yet written) larger than a segment
   * recovery reads can take (CAIRN_ERR_WAL_TOO_LARGE), is refused whole, before anything of it is
   * appended.
   */
  append(records: readonly WalRecord[]): void {
    this.#assertWritable();
    this.#checkBatch(records);
    const writer = this.#writer;
    const before = writer.length;
    for (const r of records) {
      const log = this.#shardLog(r.shard);
      switch (r.kind) {
        case "entries": {
          let max = 0;
          for (const e of r.entries) {
            if (log.dropped || log.droppedLog !== undefined) {
              // A replica created again after a drop: its checkpoints stop recording the drop
              // and the dropped log once this is durable (other records' changes do that for
              // the drop, a snapshot's for the dropped log).
              this.#pendingChanges.push({ kind: "undrop", shard: r.shard });
            }
            writer.put(KIND_ENTRY, e.type, 0, r.shard, e.term, e.index, e.data);
            this.#memoryBytes -= log.bytes;
            log.append(e, false);
            this.#memoryBytes += log.bytes;
            if (e.index > max) max = e.index;
          }
          if (max > 0) this.#pendingMax.push(r.shard, max);
          break;
        }
        case "hard-state":
          this.#putHardState(writer, r.shard, r.state);
          log.hardState = r.state;
          log.dropped = false;
          // The record itself (records are never changed once appended).
          this.#pendingChanges.push(r);
          break;
        case "snapshot":
          writer.put(KIND_SNAPSHOT, 0, 0, r.shard, r.meta.term, r.meta.index, r.meta.data);
          this.#memoryBytes -= log.bytes;
          log.applySnapshot(r.meta);
          this.#pendingChanges.push(r);
          break;
      }
      this.#recordsAppended++;
    }
    this.#appendedBytes += writer.length - before;
  }

  /**
   * Throws CAIRN_ERR_WAL_GAP if an entry of `records` would not follow its shard's log as the
   * records before it in the batch leave it, before any is applied: refused part-way, the
   * records before the bad one were applied and visible but neither counted nor marked for the
   * next sync(), which then resolved without writing them. Throws CAIRN_ERR_WAL_TOO_LARGE if a
   * record would carry more than MAX_PAYLOAD_BYTES: written, recovery would read it back as
   * damage and, at the end of the log, cut it off as a torn write with everything after it,
   * acknowledged records lost without a word. Throws it too if the batch would make the next
   * write larger than #maxWriteBytes.
   */
  #checkBatch(records: readonly WalRecord[]): void {
    // What the batch's records before leave of a shard's log, for the shards they touched: the
    // maps and list are this WAL's own, emptied again before this returns (no garbage per call).
    const last = this.#batchLast;
    const compact = this.#batchCompact;
    const touched = this.#batchTouched;
    /** The batch's encoded size (a vote counted at three bytes a UTF-16 unit, its most). */
    let bytes = 0;
    try {
      for (const r of records) {
        if (r.kind === "hard-state") {
          const vote = r.state.vote;
          const most = vote === null ? 0 : vote.length * 3;
          // Its exact UTF-8 length only when its most is over.
          if (most > MAX_PAYLOAD_BYTES) {
            checkPayload(r.shard, "hard state's vote", Buffer.byteLength(vote as string));
          }
          bytes += encodedSize(most);
          continue;
        }
        let lastIndex = last.get(r.shard);
        let compactIndex = compact.get(r.shard) ?? 0;
        if (lastIndex === undefined) {
          const log = this.#shards.get(r.shard);
          lastIndex = log?.lastIndex ?? 0;
          compactIndex = log?.compactIndex ?? 0;
          touched.push(r.shard);
        }
        if (r.kind === "snapshot") {
          checkPayload(r.shard, `snapshot ${r.meta.index}'s metadata`, r.meta.data.length);
          bytes += encodedSize(r.meta.data.length);
          // As ShardLog.applySnapshot: the log starts after the snapshot.
          lastIndex = r.meta.index;
          compactIndex = r.meta.index;
        } else {
          for (const e of r.entries) {
            checkPayload(r.shard, `entry ${e.index}`, e.data.length);
            bytes += encodedSize(e.data.length);
            if (e.index > lastIndex + 1 || e.index <= compactIndex) {
              throw new CairnError(
                "CAIRN_ERR_WAL_GAP",
                `WAL append: shard ${r.shard} entry ${e.index} does not follow [${compactIndex + 1}, ${lastIndex}]`,
              );
            }
            // An entry at an existing index replaces it and every later one.
            lastIndex = e.index;
          }
        }
        last.set(r.shard, lastIndex);
        compact.set(r.shard, compactIndex);
      }
    } finally {
      for (const shard of touched) {
        last.delete(shard);
        compact.delete(shard);
      }
      touched.length = 0;
    }
    const pending = this.#writer.length;
    if (pending + bytes > this.#maxWriteBytes) {
      throw new CairnError(
        "CAIRN_ERR_WAL_TOO_LARGE",
        `WAL append: a batch of ${bytes} bytes, after ${pending} appended and not yet written, would make a write of more than ${this.#maxWriteBytes} bytes, and its segment more than recovery reads (${SEGMENT_FILE_MAX_BYTES}); the batch is refused, nothing of it appended`,
      );
    }
  }

  /**
   * Drops `shard`'s entries up to and including `index` from memory and, once durable, lets the
   * segments holding only such entries be deleted. Call it once those entries are applied and
   * flushed to the shard's SSTables. Durable with the next `sync()`.
   */
  compact(shard: number, index: number): void {
    this.#assertWritable();
    const log = this.#shards.get(shard);
    if (log === undefined || index <= log.compactIndex) return;
    if (index > log.lastIndex) {
      throw new CairnError(
        "CAIRN_ERR_WAL_COMPACT_BEYOND_LOG",
        `WAL compact: shard ${shard} index ${index} is beyond its last index ${log.lastIndex}`,
      );
    }
    const term = log.term(index) as number;
    const before = this.#writer.length;
    this.#writer.put(KIND_COMPACT, 0, 0, shard, term, index, EMPTY);
    this.#appendedBytes += this.#writer.length - before;
    this.#memoryBytes -= log.bytes;
    log.compact(index, term);
    this.#memoryBytes += log.bytes;
    this.#pendingChanges.push({ kind: "compact", shard, index, term });
    this.#recordsAppended++;
  }

  /**
   * Drops every record of `shard` but its term and vote (a drop record, KIND_DROP) and its log's
   * last entry (a dropped-log record right after it, KIND_DROPPED_LOG): its replica here is
   * being deleted (replica GC, docs/architecture.md "An elastic cluster"). Its entries,
   * snapshot and compaction mark are gone from memory at once; once durable, no segment is kept
   * for its entries any more, and checkpoints carry the drop. Its hard state keeps the term and
   * vote (commit 0): a replica created here again starts from them (Raft must never forget a
   * vote), and votes as the deleted log would (droppedLog()). Durable with the next `sync()`:
   * the caller deletes the replica's files only after. Records of the shard appended later
   * belong to a replica created again.
   */
  drop(shard: number): void {
    this.#assertWritable();
    const log = this.#shardLog(shard);
    const hs = log.hardState;
    // The term never goes back: a snapshot's or an entry's term is at most the hard state's in
    // Raft, but the hard state may be missing (a log written before any vote).
    const term = Math.max(hs?.term ?? 0, log.compactTerm, log.term(log.lastIndex) ?? 0);
    const vote = hs !== undefined && hs.term === term ? hs.vote : null;
    // The log's last entry; a log empty since an earlier drop (a replica created again that got
    // no entry) lost what that drop deleted (null: unknown, and so it stays).
    const last = log.lastIndex;
    const droppedLog: WalDroppedLog | null =
      last > 0 || log.droppedLog === undefined
        ? { index: last, term: log.term(last) ?? 0 }
        : log.droppedLog;
    const before = this.#writer.length;
    this.#putDrop(this.#writer, shard, term, vote, droppedLog);
    this.#appendedBytes += this.#writer.length - before;
    this.#memoryBytes -= log.bytes;
    log.drop(term, vote, droppedLog);
    // The segments' marks of the shard go when the write starts (#flush): -1 marks the drop.
    this.#pendingMax.push(shard, -1);
    this.#pendingChanges.push({
      kind: "drop",
      shard,
      state: { term, vote, commit: 0 },
      droppedLog,
    });
    this.#recordsAppended++;
  }

  /** Whether `shard`'s replica here was dropped (drop()) and not created again since. */
  isDropped(shard: number): boolean {
    return this.#shards.get(shard)?.dropped === true;
  }

  /**
   * The last entry (index, term) of the log that `shard`'s last drop here deleted (drop()),
   * while the shard's log has held no entry and no snapshot since, across restarts: a replica
   * created again votes as that log would until its own log holds something. Kept through hard
   * states (a replica created again whose term moved before its first entry). null: dropped
   * by a version that did not record it (a drop record without a dropped-log record), so
   * unknown. undefined: no such drop.
   */
  droppedLog(shard: number): WalDroppedLog | null | undefined {
    return this.#shards.get(shard)?.droppedLog;
  }

  /**
   * Resolves once everything appended before the call is on stable storage. Concurrent calls
   * share writes: one write and one fdatasync cover every record appended while the previous
   * fdatasync was in flight (group commit). After an I/O failure every call rejects: whether the
   * failed bytes reached the disk is unknown, so the process must restart and recover. After
   * destroy() a call rejects (CAIRN_ERR_WAL_CLOSED) if records it dropped were not written.
   */
  sync(): Promise<void> {
    if (this.#failure !== undefined) return Promise.reject(this.#failureError());
    if (this.#durableBytes >= this.#appendedBytes) return Promise.resolve();
    if (this.#inflight !== null && this.#appendedBytes <= this.#inflight.upTo) {
      return this.#inflight.done.promise;
    }
    // Destroyed with records unwritten (close() leaves none): no write will come for them, and a
    // flush started for them finds nothing to write and settles nobody.
    if (this.#closed) {
      return Promise.reject(
        new CairnError("CAIRN_ERR_WAL_CLOSED", "WAL destroyed before the sync completed"),
      );
    }
    // Every caller until the next flush starts shares one promise: the flush takes all of them.
    this.#next ??= Promise.withResolvers<undefined>();
    const { promise } = this.#next;
    this.#flushing ??= this.#flushLoop();
    return promise;
  }

  /**
   * Syncs what is pending and closes the current segment. Records are refused
   * (CAIRN_ERR_WAL_CLOSED) from the call on.
   */
  close(): Promise<void> {
    // One close for every caller: two at once each closed the file, the second failing EBADF.
    return (this.#closePromise ??= this.#close());
  }

  async #close(): Promise<void> {
    if (this.#closed) return;
    this.#closing = true;
    try {
      if (this.#failure === undefined) await this.sync();
    } finally {
      // Closed also when the last sync failed (it rejects with that failure): the file was left
      // open, its descriptor held until the process ended.
      this.#closed = true;
      await this.#handle.close();
    }
  }

  /**
   * Closes without syncing: records appended since the last `sync()` are lost, exactly as in a
   * crash. For shutting down after a failure, and for crash tests.
   */
  async destroy(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    this.#writer.reset();
    if (this.#flushing !== null) await this.#flushing;
    const err = new CairnError("CAIRN_ERR_WAL_CLOSED", "WAL destroyed before the sync completed");
    this.#next?.reject(err);
    this.#next = null;
    await this.#handle.close();
  }

  // --- reads (synchronous, from memory) ---

  /** Shards that have any state in the log. */
  shards(): number[] {
    return [...this.#shards.keys()].sort((a, b) => a - b);
  }

  hardState(shard: number): WalHardState | undefined {
    return this.#shards.get(shard)?.hardState;
  }

  /** The commit index of `shard`'s hard state as synced to disk (not only appended), or 0. */
  durableCommit(shard: number): number {
    return this.#durable.get(shard)?.hardState?.commit ?? 0;
  }

  snapshot(shard: number): WalSnapshotMeta | undefined {
    return this.#shards.get(shard)?.snapshot;
  }

  /** Index of the first entry still readable (compaction point + 1). */
  firstIndex(shard: number): number {
    return (this.#shards.get(shard)?.compactIndex ?? 0) + 1;
  }

  lastIndex(shard: number): number {
    return this.#shards.get(shard)?.lastIndex ?? 0;
  }

  /** Term of the entry at `index`; at the compaction point, its recorded term; else undefined. */
  term(shard: number, index: number): number | undefined {
    const log = this.#shards.get(shard);
    if (log === undefined) return index === 0 ? 0 : undefined;
    return log.term(index);
  }

  /**
   * Entries in [lo, hi), stopping early once `maxBytes` of payload is reached (at least one entry
   * is returned). Throws CAIRN_ERR_WAL_COMPACTED below firstIndex and CAIRN_ERR_WAL_UNAVAILABLE
   * past lastIndex + 1.
   */
  entries(shard: number, lo: number, hi: number, maxBytes = Infinity): WalEntry[] {
    const log = this.#shards.get(shard);
    const compactIndex = log?.compactIndex ?? 0;
    const last = log?.lastIndex ?? 0;
    if (lo <= compactIndex) {
      throw new CairnError(
        "CAIRN_ERR_WAL_COMPACTED",
        `WAL read: shard ${shard} entry ${lo} is compacted (first index ${compactIndex + 1})`,
      );
    }
    if (hi > last + 1) {
      throw new CairnError(
        "CAIRN_ERR_WAL_UNAVAILABLE",
        `WAL read: shard ${shard} has entries up to ${last}, asked up to ${hi - 1}`,
      );
    }
    if (log === undefined || lo >= hi) return [];
    const out: WalEntry[] = [];
    let bytes = 0;
    for (let i = lo; i < hi; i++) {
      bytes += log.dataLength(i);
      if (out.length > 0 && bytes > maxBytes) break;
      out.push(log.entry(i));
    }
    return out;
  }

  // --- memory budget and statistics ---

  /** Bytes of uncompacted entries held in memory (payloads plus an estimated overhead). */
  get memoryBytes(): number {
    return this.#memoryBytes;
  }

  /** The in-memory log's budget (`memoryBudgetBytes`). */
  get memoryBudgetBytes(): number {
    return this.#memoryBudgetBytes;
  }

  isOverMemoryBudget(): boolean {
    return this.#memoryBytes > this.#memoryBudgetBytes;
  }

  /** Up to `n` shards holding the most entry bytes in memory, largest first. */
  largestShards(n: number): Array<{ shard: number; bytes: number }> {
    return [...this.#shards]
      .map(([shard, log]) => ({ shard, bytes: log.bytes }))
      .sort((a, b) => b.bytes - a.bytes)
      .slice(0, n);
  }

  stats(): WalStats {
    return {
      recordsAppended: this.#recordsAppended,
      syncs: this.#syncs,
      blockingWrites: this.#blockingWrites,
      bytesWritten: this.#bytesWritten,
      segments: this.#segments.length,
      segmentsDeleted: this.#segmentsDeleted,
      segmentDeleteFailures: this.#segmentDeleteFailures,
      memoryBytes: this.#memoryBytes,
      unwrittenBytes: this.#appendedBytes - this.#durableBytes,
    };
  }

  // --- internals ---

  #shardLog(id: number): ShardLog {
    let log = this.#shards.get(id);
    if (log === undefined) {
      log = new ShardLog();
      this.#shards.set(id, log);
    }
    return log;
  }

  /**
   * Votes as UTF-8, by replica id: a node's groups vote for a handful of replicas, and encoding
   * the vote of every hard-state record (one per group per round) was ~0.75% of three nodes'
   * main threads under Put c=256. Cleared past VOTE_CACHE_LIMIT ids (replicas come and go).
   */
  readonly #voteBytes = new Map<string, Uint8Array>();

  #putHardState(writer: RecordWriter, shard: number, state: WalHardState): void {
    this.#putRecordWithVote(writer, KIND_HARD_STATE, shard, state.term, state.commit, state.vote);
  }

  /**
   * A drop record, then, unless `droppedLog` is null (unknown), the dropped-log record holding
   * it: always in this order, and in one write (a torn write may keep the drop without it,
   * which leaves the dropped log unknown, never a dropped log without its drop).
   */
  #putDrop(
    writer: RecordWriter,
    shard: number,
    term: number,
    vote: string | null,
    droppedLog: WalDroppedLog | null,
  ): void {
    this.#putRecordWithVote(writer, KIND_DROP, shard, term, 0, vote);
    if (droppedLog !== null) {
      writer.put(KIND_DROPPED_LOG, 0, 0, shard, droppedLog.term, droppedLog.index, EMPTY);
    }
  }

  /** A hard state or a drop record: `vote` as its payload (flag FLAG_HAS_VOTE) when not null. */
  #putRecordWithVote(
    writer: RecordWriter,
    kind: number,
    shard: number,
    term: number,
    index: number,
    vote: string | null,
  ): void {
    let bytes: Uint8Array = EMPTY;
    if (vote !== null) {
      const cached = this.#voteBytes.get(vote);
      if (cached !== undefined) {
        bytes = cached;
      } else {
        if (this.#voteBytes.size >= VOTE_CACHE_LIMIT) this.#voteBytes.clear();
        bytes = utf8.encode(vote);
        this.#voteBytes.set(vote, bytes);
      }
    }
    writer.put(kind, 0, vote === null ? 0 : FLAG_HAS_VOTE, shard, term, index, bytes);
  }

  #assertWritable(): void {
    if (this.#closed || this.#closing) {
      throw new CairnError("CAIRN_ERR_WAL_CLOSED", "WAL is closed, or closing");
    }
    if (this.#failure !== undefined) throw this.#failureError();
  }

  #failureError(): CairnError {
    const cause = this.#failure as { code?: unknown; message?: unknown } | undefined;
    const what =
      cause?.code === "ENOSPC"
        ? "no space left on device (the disk is full)"
        : typeof cause?.message === "string"
          ? cause.message
          : String(cause);
    const file = this.#segments.at(-1)?.path ?? this.dir;
    return new CairnError(
      "CAIRN_ERR_WAL_FAILED",
      `WAL write or sync to ${file} failed: ${what}; the node must restart to recover from disk`,
      { cause: this.#failure },
    );
  }

  /**
   * The durable state of every shard, written first into a new segment so older ones can be
   * deleted. Only what is already on disk: the checkpoint may be all that survives a crash, and
   * a hard state from a batch still being written could commit entries that never land. The
   * batch itself follows the checkpoint in the new segment.
   */
  #checkpoint(): Buffer {
    const writer = new RecordWriter(64 * 1024);
    // The planted bug of the deterministic simulation: the in-memory state, batch included.
    const source =
      this.#testingBugs.rotationCheckpointIncludesBatch === true ? this.#shards : this.#durable;
    for (const [shard, state] of source) {
      if (state.dropped || state.droppedLog !== undefined) {
        // Nothing else is left of it (Wal.drop) but its dropped log, or, created again since,
        // its hard state, which follows (no entry, no snapshot, no compaction mark yet).
        const hs = state.hardState;
        const droppedLog = state.droppedLog ?? null;
        this.#putDrop(writer, shard, hs?.term ?? 0, hs?.vote ?? null, droppedLog);
        if (state.dropped) continue;
      }
      if (state.snapshot !== undefined) {
        const m = state.snapshot;
        writer.put(KIND_SNAPSHOT, 0, FLAG_CHECKPOINT, shard, m.term, m.index, m.data);
      }
      if (state.compactIndex > 0) {
        writer.put(KIND_COMPACT, 0, 0, shard, state.compactTerm, state.compactIndex, EMPTY);
      }
      if (state.hardState !== undefined) this.#putHardState(writer, shard, state.hardState);
    }
    return writer.finish();
  }

  /** Records that `changes` are on disk, as replaying them would. */
  #makeDurable(changes: readonly Change[]): void {
    for (const c of changes) {
      let state = this.#durable.get(c.shard);
      if (state === undefined) {
        state = emptyCheckpoint();
        this.#durable.set(c.shard, state);
      }
      let index: number;
      switch (c.kind) {
        case "hard-state":
          // (The dropped log stays: ShardLog.droppedLog.)
          state.hardState = c.state;
          state.dropped = false;
          continue;
        case "drop":
          // As ShardLog.drop (the segments' marks went when the write started: #flush). So
          // does the compaction point, again here: a compaction of the old replica earlier in
          // this batch has just set it back (it then marked the new replica's segments as
          // compacted past, and they were deleted while their entries were still needed).
          state.hardState = c.state;
          state.snapshot = undefined;
          state.compactIndex = 0;
          state.compactTerm = 0;
          state.dropped = true;
          state.droppedLog = c.droppedLog;
          this.#durableCompact.delete(c.shard);
          continue;
        case "undrop":
          state.dropped = false;
          state.droppedLog = undefined;
          continue;
        case "snapshot":
          // As ShardLog.applySnapshot: the log now starts after the snapshot. Below the
          // compaction point too (a log reset: the driver's refill of a shard that lost its
          // directory): the entries that follow it are needed again, so the segments holding
          // them must stay until a compaction passes them.
          state.snapshot = c.meta;
          state.compactIndex = c.meta.index;
          state.compactTerm = c.meta.term;
          state.dropped = false;
          state.droppedLog = undefined;
          this.#durableCompact.set(c.shard, c.meta.index);
          continue;
        case "compact":
          // As ShardLog.compact: a compaction mark never moves back.
          state.dropped = false;
          if (c.index > state.compactIndex) {
            state.compactIndex = c.index;
            state.compactTerm = c.term;
          }
          index = c.index;
          break;
      }
      if ((this.#durableCompact.get(c.shard) ?? 0) < index)
        this.#durableCompact.set(c.shard, index);
    }
  }

  /**
   * Writes batches until nothing is pending. Waiters are resolved right after their batch's
   * fdatasync, and the next batch's write is issued before their continuations run: the disk is
   * never idle while the event loop prepares more records.
   */
  async #flushLoop(): Promise<void> {
    try {
      while (this.#writer.length > 0 && this.#failure === undefined) {
        let done = this.#next;
        if (done === null) {
          // Records appended without a sync() call yet: nobody may ever wait on this batch, so
          // its failure must not surface as an unhandled rejection (it is kept in #failure and
          // every later call reports it).
          done = Promise.withResolvers<undefined>();
          done.promise.catch(() => undefined);
        }
        this.#next = null;
        this.#inflight = { upTo: this.#appendedBytes, done };
        try {
          await this.#flush();
          // Rare (once per segment) and cheap to check; done before acknowledging so a caller
          // that awaited sync() after compact() sees the segments gone. Never fails the batch.
          await this.#deleteObsoleteSegments();
          done.resolve(undefined);
        } catch (err) {
          this.#failure ??= err;
          done.reject(this.#failureError());
        }
        this.#inflight = null;
      }
    } finally {
      this.#flushing = null;
      if (this.#failure !== undefined && this.#next !== null) {
        this.#next.reject(this.#failureError());
        this.#next = null;
      }
    }
  }

  /**
   * Whether to write a batch of `bytes` with a blocking write. On a fast disk a small batch is
   * cheaper written in place than through the thread pool: no hop to another thread and back,
   * no promise per write, and while the write blocks, requests queue up in the sockets and make
   * the next batch larger (the group commit goes on). Measured on the 2-vCPU machine of
   * BENCHMARKS.md (an O_DSYNC write ~0.3 ms): a lone Put 0.55–0.62 ms at p50 instead of
   * 0.68–0.70, and more Puts at every concurrency from 2 to 64 with less CPU. A blocking write
   * stops the event loop, so a slow disk turns them off for the next
   * ASYNC_BATCHES_AFTER_SLOW_WRITES batches, then they are tried again. The disk is slow when
   * SLOW_WRITES_IN_A_ROW blocking writes in a row each took longer than blockingWriteSlowMs,
   * less what their thread waited for a core (#judgeBlockingWrite): a slow disk is slow on every
   * write, while a fast one has tails (one write of 20 ms among writes of 0.3), and on a loaded
   * machine a write's thread waits for a core after the disk is done. (A moving average did not:
   * one write of 20 ms sent the next 1,000 batches to the thread pool, a node's two seconds of
   * lone Puts, each then costing a hop to a pool thread and back; BENCHMARKS.md, three-node
   * cluster, 2026-11-29.)
   */
  #writesNow(bytes: number): boolean {
    if (bytes > this.#blockingWriteMaxBytes) return false;
    if (this.#asyncAfterSlowWrites > 0) {
      this.#asyncAfterSlowWrites--;
      return false;
    }
    return true;
  }

  /**
   * Counts a blocking write that took `ms` of wall time toward the slow-disk rule (#writesNow).
   * What its thread spent waiting for a core meanwhile (runDelay's growth since `waitedBefore`)
   * is not the disk's: with four nodes on two cores, a write the disk served in 0.3 ms returned
   * after 2 ms often enough, eight in a row, to send a node's WAL to the thread pool, whose hops
   * cost more CPU on the same cores (bench:cluster --nodes 4: 7 % fewer Puts, three pairs;
   * docs/perf-log/elastic.md, 2026-12-01 eleventh).
   */
  #judgeBlockingWrite(ms: number, waitedBefore: number): void {
    const runDelay = this.#runDelay;
    let disk = ms;
    if (ms > this.#blockingWriteSlowMs && runDelay !== null && runDelay !== undefined) {
      disk -= runDelay() - waitedBefore;
    }
    if (disk <= this.#blockingWriteSlowMs) {
      this.#slowWritesInARow = 0;
    } else if (++this.#slowWritesInARow >= SLOW_WRITES_IN_A_ROW) {
      this.#asyncAfterSlowWrites = ASYNC_BATCHES_AFTER_SLOW_WRITES;
      this.#slowWritesInARow = 0;
    }
  }

  async #flush(): Promise<void> {
    // Everything below up to the first await runs synchronously, so the batch, its marks and the
    // checkpoint of a new segment all describe the same instant.
    const writer = this.#writer;
    this.#writer = this.#spare;
    const upTo = this.#appendedBytes;
    const changes = this.#pendingChanges;
    const maxIndex = this.#pendingMax;
    this.#pendingChanges = this.#spareChanges;
    this.#pendingMax = this.#spareMax;
    // Handed back, emptied, when this write is done (a failed one hands back nothing).
    this.#spareChanges = [];
    this.#spareMax = [];
    try {
      let rotated = false;
      if (this.#segmentSize >= this.#segmentBytes) {
        await this.#rotate();
        rotated = true;
      }
      const segment = this.#segments.at(-1) as Segment;
      for (let i = 0; i < maxIndex.length; i += 2) {
        const shard = maxIndex[i] as number;
        const index = maxIndex[i + 1] as number;
        if (index < 0) {
          // A drop (Wal.drop): the shard's entries written so far, in any segment, are void.
          // Safe before the write: segments are deleted only after a write succeeds, and a
          // failed one fails the WAL. Entries after the drop in this batch mark it again.
          for (const s of this.#segments) s.maxIndex.delete(shard);
          this.#durableCompact.delete(shard);
          continue;
        }
        if ((segment.maxIndex.get(shard) ?? 0) < index) segment.maxIndex.set(shard, index);
      }
      const data = writer.finish();
      let written = 0;
      const handle = this.#handle;
      let start: number;
      if (handle.writeNow !== undefined && this.#writesNow(data.length)) {
        this.#beforeBlockingWrite?.();
        // Made on the thread that writes (the WAL's), which is the thread it reads.
        if (this.#runDelay === undefined) this.#runDelay = threadRunDelayClock();
        const waitedBefore = this.#runDelay?.() ?? 0;
        start = performance.now();
        while (written < data.length) {
          written += handle.writeNow(
            data,
            written,
            data.length - written,
            this.#segmentSize + written,
          );
        }
        this.#blockingWrites++;
        this.#judgeBlockingWrite(performance.now() - start, waitedBefore);
      } else {
        start = performance.now();
      }
      // The blocking write above took it all, or it goes on the thread pool (no await else).
      if (written < data.length) await writeWhole(this.#handle, data, this.#segmentSize, written);
      this.#onBatchWritten?.(performance.now() - start, data.length);
      if (rotated) await this.#fs.fsyncDir(this.dir);
      this.#segmentSize += data.length;
      this.#bytesWritten += data.length;
      this.#syncs++;
      this.#durableBytes = upTo;
      this.#makeDurable(changes);
      writer.reset();
      this.#spare = writer;
      clearArray(changes);
      clearArray(maxIndex);
      this.#spareChanges = changes;
      this.#spareMax = maxIndex;
    } catch (err) {
      this.#failure ??= err;
      throw err;
    }
  }

  /** Starts a new segment whose first records are the checkpoint of every shard. */
  async #rotate(): Promise<void> {
    const checkpoint = this.#checkpoint();
    // The segment being closed loses any zeros after its records first (preallocated now, or by
    // an earlier run): only the last segment may end in zeros, so damage at the end of any other
    // is still reported as corruption.
    await this.#handle.truncate(this.#segmentSize);
    await this.#handle.sync();
    const seq = (this.#segments.at(-1) as Segment).seq + 1;
    const path = join(this.dir, segmentName(seq));
    const handle = await this.#fs.open(path, { ...WRITE_FLAGS, create: true, exclusive: true });
    const head = Buffer.concat([segmentHeader(), checkpoint]);
    try {
      // The header and checkpoint are written before the file is extended: a crash in between
      // leaves a prefix of that write (a torn header, which recovery rewrites), never a
      // preallocated file without a header.
      await writeWhole(handle, head, 0);
      await this.#preallocateSegment(handle, head.length);
    } catch (err) {
      // The WAL fails with this error, and close() closes the current segment only: this one's
      // descriptor was left open for good. Its file stays: empty or a prefix of the header and
      // checkpoint, which the next open reads as a torn write and rewrites, or all of them (a
      // failed preallocation), which it reads as the last segment and writes on.
      await handle.close().catch(() => undefined);
      throw err;
    }
    const old = this.#handle;
    this.#handle = handle;
    this.#segmentSize = head.length;
    this.#bytesWritten += head.length;
    this.#segments.push({ seq, path, maxIndex: new DenseMap<number>() });
    await old.close();
  }

  /**
   * Extends a new segment holding `written` bytes to segmentBytes (see WalOptions.preallocate);
   * synced so that the size is durable before any record relies on it.
   */
  async #preallocateSegment(handle: FsFile, written: number): Promise<void> {
    if (!this.#preallocate || written >= this.#segmentBytes) return;
    await handle.truncate(this.#segmentBytes);
    await handle.sync();
  }

  /**
   * Deletes the segments no shard needs any more, oldest first, before sync() resolves. Never
   * throws: failures are counted and retried at the next flush.
   */
  async #deleteObsoleteSegments(): Promise<void> {
    outer: while (this.#segments.length > 1) {
      const oldest = this.#segments[0] as Segment;
      for (const [shard, index] of oldest.maxIndex) {
        if ((this.#durableCompact.get(shard) ?? 0) < index) break outer;
      }
      this.#segments.shift();
      this.#toDelete.push(oldest);
    }
    await this.#unlinkQueued();
  }

  /**
   * Unlinks the queued segments oldest first, each made durable (a directory fsync) before the
   * next is touched, and stops at the first failure, which keeps that segment and every newer
   * one queued. So the segments on disk always run without a gap, whatever a power cut keeps:
   * an older obsolete segment that outlived a newer one was replayed without it, and the newer
   * one may have held what voids the older's entries with no compaction mark (a drop, or a log
   * reset's snapshot), which brought a removed replica's entries back or made start-up fail
   * ("misses the entries below"). A directory fsync a deletion costs little: about one a segment.
   */
  async #unlinkQueued(): Promise<void> {
    for (let segment = this.#toDelete[0]; segment !== undefined; segment = this.#toDelete[0]) {
      try {
        await this.#fs.unlink(segment.path);
      } catch (err) {
        // Gone already (an earlier attempt that reported an error, or whose fsync failed).
        if ((err as { code?: unknown }).code !== "ENOENT") {
          this.#segmentDeleteFailures++;
          return;
        }
      }
      try {
        await this.#fs.fsyncDir(this.dir);
      } catch {
        // The unlink may not be durable: the next attempt finds the segment gone and fsyncs again.
        this.#segmentDeleteFailures++;
        return;
      }
      this.#toDelete.shift();
      this.#segmentsDeleted++;
    }
  }
}

/**
 * Writes all of `data` at `position` (its bytes from `from` on: those before are written). A
 * write may take fewer bytes than asked (a disk filling up takes what fits, without an error): a
 * segment's header and checkpoint taken on trust left the rest of the checkpoint zeros, with the
 * records synced after it past them, and the next open refused the whole WAL as corrupt; a write
 * that takes no byte would loop for ever.
 */
async function writeWhole(
  handle: FsFile,
  data: Uint8Array,
  position: number,
  from = 0,
): Promise<void> {
  for (let written = from; written < data.length;) {
    const n = await handle.write(data, written, data.length - written, position + written);
    if (n <= 0) throw new Error(`a write of the WAL took no bytes at ${position + written}`);
    written += n;
  }
}

/**
 * Throws CAIRN_ERR_WAL_TOO_LARGE if a record of `shard` carrying `bytes` (`what`: which record)
 * would be larger than recovery reads back (MAX_PAYLOAD_BYTES, record.ts).
 */
function checkPayload(shard: number, what: string, bytes: number): void {
  if (bytes <= MAX_PAYLOAD_BYTES) return;
  throw new CairnError(
    "CAIRN_ERR_WAL_TOO_LARGE",
    `WAL append: shard ${shard} ${what} is ${bytes} bytes, more than a WAL record holds (${MAX_PAYLOAD_BYTES}); the batch is refused, nothing of it appended`,
  );
}

/** The WAL it should find is gone: its directory holds no segment with a header. */
export class LostWalError extends CairnError {
  constructor(dir: string, marker: string | undefined) {
    super(
      "CAIRN_ERR_LOST_STATE",
      `the WAL in ${dir} is missing or empty, but this data directory had one (${marker ?? "its marker"} exists): the writes it held, acknowledged to clients, are lost, and the node does not start: restore the WAL, or (a single node) accept the loss with recovery.unsafe_accept_lost_wal, or (a cluster member) empty the data directory and start again, to rejoin and be refilled by its peers (docs/operations.md, "A lost WAL")`,
    );
    this.name = "LostWalError";
  }
}

/** Whether the WAL's created marker exists (false without one). */
async function markerExists(fs: FileSystem, marker: string | undefined): Promise<boolean> {
  if (marker === undefined) return false;
  try {
    await fs.readFile(marker);
    return true;
  } catch (err) {
    if ((err as { code?: unknown }).code === "ENOENT") return false;
    throw err;
  }
}

/** Writes the WAL's created marker durably, if it is not there yet. */
async function writeMarker(fs: FileSystem, marker: string): Promise<void> {
  if (await markerExists(fs, marker)) return;
  const handle = await fs.open(marker, { create: true, truncate: true });
  try {
    const text = Buffer.from("this WAL was created; if it is missing, it was lost\n");
    await handle.write(text, 0, text.length, 0);
    await handle.sync();
  } finally {
    await handle.close();
  }
  await fs.fsyncDir(dirname(marker));
}

const ZEROS = Buffer.alloc(64 * 1024);

/** Whether `buf` holds only zero bytes from `from` on (up to `to`). */
function isZero(buf: Buffer, from: number, to = buf.length): boolean {
  for (let at = from; at < to; at += ZEROS.length) {
    const end = Math.min(to, at + ZEROS.length);
    if (buf.compare(ZEROS, 0, end - at, at, end) !== 0) return false;
  }
  return true;
}

/** The length of `buf` without its trailing zero bytes. */
function nonZeroEnd(buf: Buffer): number {
  let end = buf.length;
  while (end > 0 && buf[end - 1] === 0) end--;
  return end;
}

/**
 * Splits the segments found at open, oldest first, at the newest gap in their sequence numbers:
 * `segments` from it on are replayed; `belowGap`, older, are not, and are deleted. This version
 * never leaves a gap (#unlinkQueued). An older one did: past a failed unlink it went on to delete
 * newer obsolete segments, and one directory fsync for all let a power cut keep a later unlink
 * and lose an earlier one. Deletion ran oldest first, so a segment below such a gap was already
 * obsolete, and it may hold entries that only the deleted segment voided (a drop, a log reset):
 * replayed, they came back. A gap may instead be a lost segment still needed; then the segments
 * after it do not stand on their own, and open refuses to start (CAIRN_ERR_CORRUPTION, `missing`
 * naming the gap) and deletes nothing: a shard's entries there miss entries below (a hole), or a
 * shard's hard state commits entries they do not hold. What neither shows (a lost segment whose
 * entries were never committed and were followed by no entry of their shard) is taken as
 * obsolete: the format records no shard's last index, the same limit as a lost oldest segment.
 */
function splitAtNewestGap(found: Segment[]): {
  readonly segments: Segment[];
  readonly belowGap: Segment[];
  readonly missing: string | undefined;
} {
  for (let i = found.length - 1; i > 0; i--) {
    const after = (found[i] as Segment).seq;
    const before = (found[i - 1] as Segment).seq;
    if (after === before + 1) continue;
    const missing =
      after === before + 2
        ? `segment ${before + 1} is missing`
        : `segments ${before + 1} to ${after - 1} are missing`;
    return { segments: found.slice(i), belowGap: found.slice(0, i), missing };
  }
  return { segments: found, belowGap: [], missing: undefined };
}

/**
 * A segment's bytes. A directory in its place is damage to the WAL, reported as such
 * (CorruptionError naming it): node's "EISDIR: illegal operation on a directory, read" named no
 * file.
 */
async function readSegment(fs: FileSystem, path: string): Promise<Buffer> {
  try {
    return await fs.readFile(path);
  } catch (err) {
    if ((err as { code?: unknown }).code !== "EISDIR") throw err;
    throw new CorruptionError(path, 0, "segment is not a regular file", { cause: err });
  }
}

/**
 * Replays one segment into the shard logs; returns the length of its valid prefix, and whether
 * damage follows it (`torn`: the last segment only, and only when no valid record follows the
 * damage and the damaged record was not written in full: writtenInFull). Zeros after the last
 * record of the last segment are not damage: its preallocated space, never written (a record
 * never starts with a zero length).
 */
function replaySegment(
  segment: Segment,
  buf: Buffer,
  isLast: boolean,
  shardLog: (id: number) => ShardLog,
  onDrop: (shard: number) => void,
): { readonly valid: number; readonly torn: boolean } {
  if (buf.length < SEGMENT_HEADER_BYTES) {
    if (isLast) return { valid: 0, torn: buf.length > 0 };
    throw new CorruptionError(segment.path, 0, "segment shorter than its header");
  }
  if (!buf.subarray(0, 8).equals(SEGMENT_MAGIC) || buf.readUInt32LE(8) !== SEGMENT_VERSION) {
    throw new CorruptionError(segment.path, 0, "bad segment magic or version");
  }
  const view = new DataView(buf.buffer, buf.byteOffset, buf.length);
  let at = SEGMENT_HEADER_BYTES;
  while (at < buf.length) {
    const result = decodeRecord(buf, view, at);
    if (!result.ok) {
      if (isLast && isZero(buf, at)) return { valid: at, torn: false };
      if (isLast && !hasValidRecordAfter(buf, view, at)) {
        if (!writtenInFull(buf, view, at)) return { valid: at, torn: true };
        throw new CorruptionError(
          segment.path,
          at,
          `WAL record ${result.failure}: the log's last record, but written in full (a crash ` +
            `leaves a prefix of a record, whose last byte is never written), so it may have been ` +
            `acknowledged; refusing to cut it off as a torn write`,
        );
      }
      throw new CorruptionError(segment.path, at, `WAL record ${result.failure}`);
    }
    applyRecord(segment, result.record, shardLog(result.record.shard));
    if (result.record.kind === KIND_DROP) onDrop(result.record.shard);
    at = result.next;
  }
  return { valid: at, torn: false };
}

/** The unit a file system allocates and writes a file's data in, at least (4 KiB pages). */
const DATA_BLOCK_BYTES = 4096;

/**
 * Whether the damaged record at `at`, the last segment's last, was written in full: its frame
 * lies within the data, its last byte is not zero and zeros follow it to the end of its 4 KiB
 * block (the next block's end if it ends one, the file's if sooner), or the data up to its
 * trailing zeros matches its checksum (a damaged length). A crash leaves a prefix of a write
 * (sectors persist in order, or the rest is zero-filled: README's caveat), so the last byte of
 * a torn record is never written: zero in preallocated space, or past the end of the file. A
 * file system that shows the old contents of blocks a crash left unwritten (ext4's
 * data=writeback) fills a torn record's tail, and the rest of its block, with stale bytes: not
 * zeros after it either, so still torn. A record written in full that fails its checks was
 * damaged since (a bad sector, a stray write), and may have been acknowledged: cut off as a torn
 * write, it was lost and logged as never acknowledged. (A record whose own last byte is zero, as
 * a hard state without a vote, or that ends the file, still reads as torn; so does one holding
 * an aligned sector of zeros, hasZeroSector: a power loss may persist a write's sectors out of
 * order.)
 */
function writtenInFull(buf: Buffer, view: DataView, at: number): boolean {
  if (at + FRAME_HEADER_BYTES > buf.length) return false;
  const body = at + FRAME_HEADER_BYTES;
  const end = body + view.getUint32(at, true);
  if (end > body && end <= buf.length) {
    const blockEnd = Math.min(
      buf.length,
      (Math.floor(end / DATA_BLOCK_BYTES) + 1) * DATA_BLOCK_BYTES,
    );
    return (
      buf[end - 1] !== 0 &&
      blockEnd > end &&
      isZero(buf, end, blockEnd) &&
      !hasZeroSector(buf, body, end)
    );
  }
  const dataEnd = nonZeroEnd(buf);
  return (
    dataEnd > body &&
    dataEnd < buf.length &&
    dataEnd - body <= MAX_BODY_BYTES &&
    crc32c(buf, 0, body, dataEnd) === view.getUint32(at + 4, true)
  );
}

/** The unit a disk persists atomically: a write's sectors may persist in any order. */
const SECTOR_BYTES = 512;

/**
 * Whether an aligned sector lying wholly in [from, to) is all zeros: a torn write whose later
 * sectors persisted before an earlier one (a power loss; etcd's WAL reads a record so as torn).
 * Damage to a record synced in full (a bad sector, a stray write) rarely zeros a whole sector.
 */
function hasZeroSector(buf: Buffer, from: number, to: number): boolean {
  for (let at = Math.ceil(from / SECTOR_BYTES) * SECTOR_BYTES; at + SECTOR_BYTES <= to;) {
    if (isZero(buf, at, at + SECTOR_BYTES)) return true;
    at += SECTOR_BYTES;
  }
  return false;
}

function applyRecord(segment: Segment, r: RawRecord, log: ShardLog): void {
  switch (r.kind) {
    case KIND_ENTRY:
      // The log copies the payload (a view would keep the whole segment buffer alive).
      log.append({ term: r.term, index: r.index, type: r.entryType, data: r.payload }, true);
      if ((segment.maxIndex.get(r.shard) ?? 0) < r.index) segment.maxIndex.set(r.shard, r.index);
      break;
    case KIND_HARD_STATE:
      log.hardState = {
        term: r.term,
        commit: r.index,
        vote: (r.flags & FLAG_HAS_VOTE) !== 0 ? fromUtf8.decode(r.payload) : null,
      };
      // (A dropped log stays: ShardLog.droppedLog.)
      log.dropped = false;
      break;
    case KIND_DROP:
      // Its dropped log, if recorded, is the record that follows (KIND_DROPPED_LOG).
      log.drop(r.term, (r.flags & FLAG_HAS_VOTE) !== 0 ? fromUtf8.decode(r.payload) : null, null);
      break;
    case KIND_DROPPED_LOG:
      // Written right after its shard's drop record, which it completes.
      if (log.dropped) log.droppedLog = { index: r.index, term: r.term };
      break;
    case KIND_SNAPSHOT: {
      const meta = { term: r.term, index: r.index, data: new Uint8Array(r.payload) };
      log.dropped = false;
      log.droppedLog = undefined;
      if ((r.flags & FLAG_CHECKPOINT) !== 0) log.snapshot = meta;
      else log.applySnapshot(meta);
      break;
    }
    case KIND_COMPACT:
      log.compact(r.index, r.term);
      break;
  }
}
