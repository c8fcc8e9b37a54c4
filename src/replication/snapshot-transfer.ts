/**
 * Raft snapshots between nodes, over cairn.v1.Raft InstallSnapshot (proto/cairn/v1/raft.proto).
 * A snapshot message carries a whole shard, too much for one frame of the per-peer Stream, so
 * each travels on a call of its own: a header (the Stream's handshake identity, the shard, the
 * message without its data, the data's length if known up front, else 0), the data in chunks,
 * and a trailer with the data's CRC32C (the checksum of the WAL and the SSTables,
 * src/storage/common/crc32c.ts) and length.
 *
 * - sendSnapshot() is the sending end. It reads the image from the snapshot's stream (frames
 *   made from a pinned engine version as they are read, snapshot-pins.ts) or its bytes, and cuts
 *   it into chunks. Before each chunk it waits for the rate limiters (snapshot-sender.ts), then for gRPC to
 *   take the previous chunk: grpc-js calls a write back once HTTP/2 flow control let the chunk
 *   out, so a slow receiver slows the sender and at most one chunk waits in gRPC. It resolves
 *   once the receiver acknowledged the whole snapshot.
 * - SnapshotAssembler holds the receiving end's rules, apart from gRPC: the header's identity
 *   (checked as a Stream handshake), the length against the node's limit and the room on its
 *   disk (snapshot-file.ts, SnapshotSpace), every chunk within the length announced, the
 *   length and checksum at the trailer, and the data an engine's image at the header's index
 *   (decoded as it arrives: an image the driver could not import would fail the whole node at
 *   the install, after Raft took the snapshot, rather than this transfer). The data goes to a
 *   sink as it arrives (snapshot-file.ts: a file, or memory without a directory). Only a
 *   complete, verified and stored snapshot yields its message, which the service then hands
 *   to Raft like any other.
 *
 * Neither end holds a streamed snapshot whole: the sender a frame and a chunk, the receiver the
 * chunks not yet written.
 */
import { type Client, Metadata, type ServiceError, status } from "@grpc/grpc-js";
import { loadRaftProto } from "../api/proto.ts";
import { PEER_KEY, SHARD_WORKER_KEY } from "../api/wire.ts";
import type { RaftHandshake } from "../api/generated/cairn/v1/RaftHandshake.ts";
import type { SnapshotAck } from "../api/generated/cairn/v1/SnapshotAck.ts";
import type {
  SnapshotChunk,
  SnapshotChunk__Output,
} from "../api/generated/cairn/v1/SnapshotChunk.ts";
import type { SnapshotHeader__Output } from "../api/generated/cairn/v1/SnapshotHeader.ts";
import type { SnapshotTrailer__Output } from "../api/generated/cairn/v1/SnapshotTrailer.ts";
import { nodeOfReplica } from "../cluster/index.ts";
import type { Message, NodeId } from "../raft/index.ts";
import { nodeId as toNodeId } from "../raft/index.ts";
import { crc32c, decodeSnapshotStream } from "../storage/index.ts";
import { CodecError, decodeMessage, encodeMessage } from "./codec.ts";
import {
  handshakeRefusal,
  type PeerCheck,
  type PeerRefusalKind,
  senderRefusal,
} from "./handshake.ts";
import type { ShardMessage } from "./multi-raft.ts";
import type { Pacer } from "./rate-limiter.ts";
import { MemorySink, type SnapshotSink } from "./snapshot-file.ts";

export type SnapshotMessage = Extract<Message, { type: "snapshot" }>;

/** What snapshot transfers report to the metrics registry (CairnMetrics.snapshotMetrics). */
export interface SnapshotMetrics {
  /** A snapshot was sent whole and its receiver acknowledged it. */
  sent(): void;
  /** Data bytes gRPC took for a peer, as it takes them (those of failed transfers too). */
  bytesSent(bytes: number): void;
  /** A snapshot arrived whole, verified, and was handed to Raft. */
  received(): void;
  /** A transfer failed: refused, broken, stalled, or cut by a shutdown. */
  failed(direction: "send" | "receive"): void;
}

const EMPTY = new Uint8Array(0);

/**
 * The largest data chunk of an InstallSnapshot call: a sender cuts its data into chunks of its
 * `chunkBytes` (GrpcTransport's snapshotChunkBytes, 1 MiB by default), at most this; a receiver
 * refuses a larger one. gRPC takes messages of up to 128 MiB on the peers' port (a Stream frame
 * may carry a 64 MiB value: RAFT_SERVER_OPTIONS), and buffers several for a call paused while
 * its chunk is written: a peer sending chunks of that size (buggy, or hostile past the
 * handshake) is cut at its first instead of held to its whole transfer.
 */
export const MAX_SNAPSHOT_CHUNK_BYTES = 4 * 1024 * 1024;

/**
 * The largest InstallSnapshot message a sender makes after its header: a SnapshotChunk whose
 * `data` is a chunk of MAX_SNAPSHOT_CHUNK_BYTES, its tag (field 2, length-delimited: one byte)
 * and its length (a varint: four bytes from 2^21 to 2^28 - 1) around it. The trailer is under
 * 20 bytes. The front end holds InstallSnapshot's later messages to this, not to the peers' 128
 * MiB (src/api/server.ts, FrontEndLimits.peerSnapshotMaxReceive).
 */
export const MAX_SNAPSHOT_CHUNK_MESSAGE_BYTES = MAX_SNAPSHOT_CHUNK_BYTES + 1 + 4;

/**
 * The pace a receiver holds an InstallSnapshot call to, by default (snapshot-receiver.ts): at
 * least SNAPSHOT_MIN_PROGRESS_BYTES of data in each SNAPSHOT_PROGRESS_WINDOW_MS, or the call is
 * cut. A sender streams few enough snapshots at once for each to keep it, even at the lowest
 * rates the configuration allows (snapshotSendConcurrency, snapshot-sender.ts).
 */
export const SNAPSHOT_PROGRESS_WINDOW_MS = 60_000;
export const SNAPSHOT_MIN_PROGRESS_BYTES = 1024 * 1024;

// ── the sending end ─────────────────────────────────────────────────────────────────────────

export interface SnapshotSendOptions {
  readonly chunkBytes: number;
  /**
   * Paces the data: the node-wide limiter, shared by every transfer (and, for a learner's
   * snapshot, the rebalance limiter before it: snapshot-sender.ts).
   */
  readonly limiter: Pacer;
  /**
   * The transfer fails when gRPC takes longer than this (ms) to take a chunk, or the receiver to
   * answer after the last: a receiver that stopped reading. The limiter's waits do not count.
   */
  readonly stallTimeoutMs: number;
  /** Data bytes gRPC took, as it takes them. */
  readonly onBytes: (bytes: number) => void;
  /** Cancels the transfer (the transport's close()). */
  readonly signal: AbortSignal;
  /**
   * The receiver's shard worker that holds `shard` (`cairn-shard-worker` metadata: the worker
   * that accepts the call proxies it there, src/api/front-end.ts); absent without shard workers.
   */
  readonly shardWorker?: number;
}

export class SnapshotSendError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SnapshotSendError";
  }
}

/**
 * Streams `message`, a snapshot of `shard`, to the node at the other end of `client`, opening
 * with `handshake`. Resolves once the receiver acknowledged it: verified, and handed to its Raft
 * groups. Rejects (the call cancelled) on any refusal, failure, stall or abort.
 */
export async function sendSnapshot(
  client: Client,
  handshake: RaftHandshake,
  shard: number,
  message: SnapshotMessage,
  options: SnapshotSendOptions,
): Promise<void> {
  const method = loadRaftProto().cairn.v1.Raft.service.InstallSnapshot;
  options.signal.throwIfAborted();
  // The receiver's answer: null (OK), or why the call ended.
  let answered: (err: ServiceError | null) => void = () => undefined;
  const ended = new Promise<ServiceError | null>((resolve) => {
    answered = resolve;
  });
  const metadata = new Metadata();
  // A node's front end serves the peers' methods only to calls that name a node.
  metadata.set(PEER_KEY, handshake.from_node_id ?? "");
  if (options.shardWorker !== undefined) {
    metadata.set(SHARD_WORKER_KEY, String(options.shardWorker));
  }
  const call = client.makeClientStreamRequest<SnapshotChunk, SnapshotAck>(
    method.path,
    method.requestSerialize,
    method.responseDeserialize,
    metadata,
    {},
    (err) => answered(err),
  );
  // Errors reach the callback above; the listener keeps a late write's error from throwing.
  call.on("error", () => undefined);
  const abort = (): void => call.cancel();
  options.signal.addEventListener("abort", abort);
  // The call ending before the transfer does is its failure, whatever the status says.
  const cut: Promise<never> = ended.then((err) => {
    throw err ?? new SnapshotSendError("the receiver answered before the whole snapshot");
  });
  cut.catch(() => undefined);
  const within = <T>(what: string, work: Promise<T>): Promise<T> =>
    stallGuard(what, work, options.stallTimeoutMs);
  const write = (what: string, chunk: SnapshotChunk): Promise<void> =>
    within(what, Promise.race([new Promise<void>((r) => call.write(chunk, () => r())), cut]));

  const snap = message.snapshot;
  try {
    await write("the header", {
      header: {
        handshake,
        shard_id: shard,
        message: encodeMessage({ ...message, snapshot: { meta: snap.meta, data: EMPTY } }),
        // A stream's length is known at its end only: the trailer says it.
        total_bytes: snap.stream === undefined ? snap.data.length : 0,
        to_replica_id: message.to === handshake.to_node_id ? "" : message.to,
      },
    });
    let crc = 0;
    let total = 0;
    // A stream's frames are made as they are read, from the version its sender pinned.
    for await (const data of snap.stream?.chunks() ?? [snap.data]) {
      for (let at = 0; at < data.length; at += options.chunkBytes) {
        const chunk = data.subarray(at, at + options.chunkBytes);
        await Promise.race([options.limiter.take(chunk.length), cut]);
        crc = crc32c(chunk, crc);
        total += chunk.length;
        await write("a chunk", { data: chunk });
        options.onBytes(chunk.length);
      }
    }
    await write("the trailer", { trailer: { crc32c: crc, total_bytes: total } });
    call.end();
    const err = await within("the answer", ended);
    if (err !== null) throw err;
  } catch (err) {
    call.cancel();
    throw err;
  } finally {
    options.signal.removeEventListener("abort", abort);
  }
}

/** `work`, or a SnapshotSendError if it does not settle within `ms`. */
async function stallGuard<T>(what: string, work: Promise<T>, ms: number): Promise<T> {
  let timer: NodeJS.Timeout | undefined;
  const stalled = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () => reject(new SnapshotSendError(`${what} of the snapshot waited over ${ms} ms`)),
      ms,
    );
  });
  try {
    return await Promise.race([work, stalled]);
  } finally {
    clearTimeout(timer);
  }
}

// ── the receiving end ───────────────────────────────────────────────────────────────────────

/**
 * The `cairn-error-code` a receiver ends a call with when the snapshot does not fit it: over its
 * limit (maxBytes), or its file and the tables its install builds would take the disk's reserve
 * (room). A streamed snapshot announces no length, so this is found only once part of it has
 * arrived; its sender holds back that shard's next snapshot to that peer (snapshot-sender.ts)
 * rather than send that part again at once, for good. A receiver of an earlier build does not
 * say it (its sender then tries again as before), and a sender of one does not read it.
 */
export const SNAPSHOT_TOO_LARGE_CODE = "CAIRN_ERR_SNAPSHOT_TOO_LARGE";

/** Why a snapshot stream is refused, as the gRPC status its call ends with. */
export class SnapshotRefusal extends Error {
  readonly code: status;
  /** The `cairn-error-code` of the call's trailers, if any (SNAPSHOT_TOO_LARGE_CODE). */
  readonly errorCode: string | undefined;

  constructor(code: status, message: string, errorCode?: string) {
    super(message);
    this.name = "SnapshotRefusal";
    this.code = code;
    this.errorCode = errorCode;
  }
}

/** A snapshot that does not fit this node (SNAPSHOT_TOO_LARGE_CODE). */
function tooLarge(message: string): SnapshotRefusal {
  return new SnapshotRefusal(status.RESOURCE_EXHAUSTED, message, SNAPSHOT_TOO_LARGE_CODE);
}

export interface SnapshotAssemblerOptions {
  /** Who may send this node a snapshot, as this node knew it when the call arrived. */
  readonly peers: PeerCheck;
  /**
   * The node the call's `cairn-peer` metadata names (the one its connection's certificate was
   * checked against, with peer TLS): the header's sender must be it. "" or absent: not checked.
   */
  readonly sender?: string;
  /** A header was refused by peerRefusal's rules, by kind: for a counter. */
  readonly refused?: (kind: PeerRefusalKind) => void;
  /**
   * Larger snapshots are refused (RESOURCE_EXHAUSTED): at the header when it announces its
   * length, else as soon as more arrived.
   */
  readonly maxBytes: number;
  /** Where the data goes as it arrives (snapshot-file.ts); default: in memory. */
  readonly sink?: () => SnapshotSink;
  /**
   * Why `bytes` more of the snapshot may not be written (the disk's reserve of free space:
   * SnapshotSpace.refusal), or null: asked at the header, for the length it announces (0 for
   * a stream), and before each data chunk. A refusal is RESOURCE_EXHAUSTED.
   */
  readonly room?: (bytes: number) => string | null;
}

interface Header {
  readonly from: NodeId;
  readonly shard: number;
  readonly message: SnapshotMessage;
  /** The announced length, or null: streamed, the trailer says it. */
  readonly announced: number | null;
  readonly sink: SnapshotSink;
  readonly image: ImageCheck;
}

/**
 * The data decoded as it arrives, as importSnapshot will decode it (docs/storage.md, "Snapshot
 * stream": frames, checksums, ascending keys, the end frame): done() is the image's sequence,
 * or rejects with what is wrong. Nothing is kept but the chunks not decoded yet: the decoder
 * takes each as soon as it is pushed (it runs in the microtasks after the push).
 */
class ImageCheck {
  readonly #chunks: Uint8Array[] = [];
  #ended = false;
  #wake: (() => void) | null = null;
  readonly #done: Promise<number>;
  /** What is wrong with the image, once the decoder found it (before the data ended). */
  failure: unknown = undefined;

  constructor() {
    this.#done = this.#decode();
    // A damaged image stops the decoder: what arrives after it is not kept.
    this.#done.catch((err: unknown) => {
      this.failure = err;
      this.#stop();
    });
  }

  push(bytes: Uint8Array): void {
    if (this.#ended) return;
    this.#chunks.push(bytes);
    this.#wake?.();
  }

  /** The data ended: the image's sequence, once decoded whole. */
  done(): Promise<number> {
    this.#ended = true;
    this.#wake?.();
    return this.#done;
  }

  /** The transfer is dropped: nothing more is decoded. */
  stop(): void {
    this.#stop();
    this.#done.catch(() => undefined);
  }

  #stop(): void {
    this.#chunks.length = 0;
    this.#ended = true;
    this.#wake?.();
  }

  async #decode(): Promise<number> {
    let seq = -1;
    for await (const item of decodeSnapshotStream(this.#source())) {
      if (item.kind === "header") seq = item.seq;
    }
    return seq;
  }

  async *#source(): AsyncGenerator<Uint8Array> {
    for (;;) {
      const chunk = this.#chunks.shift();
      if (chunk !== undefined) {
        yield chunk;
      } else if (this.#ended) {
        return;
      } else {
        await new Promise<void>((resolve) => (this.#wake = resolve));
        this.#wake = null;
      }
    }
  }
}

/**
 * One InstallSnapshot call's chunks, checked as they arrive; push() throws SnapshotRefusal.
 * The data goes to the sink as it arrives; the caller waits for the sink's pending() writes
 * before it takes more, close()s the sink once the trailer verified the data (which also
 * checks that the data is an engine's image at the header's index), and then takes the message
 * (finish()); on any refusal it discard()s what arrived.
 */
export class SnapshotAssembler {
  readonly #options: SnapshotAssemblerOptions;
  #header: Header | null = null;
  #received = 0;
  #crc = 0;
  #verified = false;
  /** close() found the data stored and an image at the header's index. */
  #stored = false;

  constructor(options: SnapshotAssemblerOptions) {
    this.#options = options;
  }

  /** The sender, once its header was accepted. */
  get from(): NodeId | null {
    return this.#header?.from ?? null;
  }

  get shard(): number | null {
    return this.#header?.shard ?? null;
  }

  /** The trailer arrived and verified the data: nothing more may come. */
  get complete(): boolean {
    return this.#verified;
  }

  /** The length announced, else what arrived so far (null before the header). */
  get totalBytes(): number | null {
    if (this.#header === null) return null;
    return this.#header.announced ?? this.#received;
  }

  /** The sink's writes not done yet (null: none); rejects if one failed. */
  pending(): Promise<void> | null {
    return this.#header?.sink.pending() ?? null;
  }

  push(chunk: SnapshotChunk__Output): void {
    if (this.#header === null) {
      if (chunk.chunk !== "header" || chunk.header === undefined || chunk.header === null) {
        throw new SnapshotRefusal(status.FAILED_PRECONDITION, "the first chunk must be a header");
      }
      this.#header = this.#readHeader(chunk.header);
    } else if (this.#verified) {
      throw new SnapshotRefusal(status.INVALID_ARGUMENT, "a chunk after the trailer");
    } else if (chunk.chunk === "data" && chunk.data !== undefined) {
      this.#append(this.#header, chunk.data);
    } else if (chunk.chunk === "trailer" && chunk.trailer !== undefined && chunk.trailer !== null) {
      this.#verify(this.#header, chunk.trailer);
    } else {
      throw new SnapshotRefusal(status.INVALID_ARGUMENT, "a second header, or an empty chunk");
    }
  }

  /**
   * Once verified: every write done and the sink closed (a write failure refuses it), and the
   * data an engine's image at the header's index (else refused, INVALID_ARGUMENT).
   */
  async close(): Promise<void> {
    const h = this.#whole();
    try {
      await h.sink.close();
    } catch (err) {
      throw new SnapshotRefusal(
        status.INTERNAL,
        `the snapshot could not be stored: ${String(err)}`,
      );
    }
    let seq: number;
    try {
      seq = await h.image.done();
    } catch (err) {
      throw new SnapshotRefusal(status.INVALID_ARGUMENT, `not a snapshot image: ${String(err)}`);
    }
    const index = h.message.snapshot.meta.index;
    if (seq !== index) {
      throw new SnapshotRefusal(
        status.INVALID_ARGUMENT,
        `the image is of index ${seq}, the header says ${index}`,
      );
    }
    this.#stored = true;
  }

  /** The sender half-closed: the whole snapshot message, verified (close() done). */
  finish(): ShardMessage {
    const h = this.#whole();
    if (!this.#stored) {
      throw new SnapshotRefusal(status.INTERNAL, "the snapshot was not stored and checked");
    }
    const snapshot = { meta: h.message.snapshot.meta, ...h.sink.result() };
    return { shard: h.shard, message: { ...h.message, snapshot } };
  }

  /** Drops what arrived (a refused, broken or cancelled call). */
  discard(): void {
    this.#header?.image.stop();
    this.#header?.sink.discard();
  }

  #whole(): Header {
    const h = this.#header;
    if (h === null || !this.#verified) {
      throw new SnapshotRefusal(
        status.INVALID_ARGUMENT,
        `the stream ended before its trailer (${this.#received} of ${h?.announced ?? "?"} bytes)`,
      );
    }
    return h;
  }

  #readHeader(h: SnapshotHeader__Output): Header {
    const { peers, maxBytes } = this.#options;
    const self = peers.self;
    if (h.handshake === null) {
      throw new SnapshotRefusal(status.FAILED_PRECONDITION, "the header carries no handshake");
    }
    const refusal =
      senderRefusal(h.handshake.from_node_id, this.#options.sender ?? "") ??
      handshakeRefusal(h.handshake, peers);
    if (refusal !== null) {
      this.#options.refused?.(refusal.kind);
      throw new SnapshotRefusal(refusal.code, refusal.reason);
    }
    const from = toNodeId(h.handshake.from_node_id);
    const fromReplica =
      h.handshake.from_replica_id === "" ? from : toNodeId(h.handshake.from_replica_id);
    const to = h.to_replica_id === "" ? self : toNodeId(h.to_replica_id);
    if (nodeOfReplica(to) !== self) {
      throw new SnapshotRefusal(
        status.FAILED_PRECONDITION,
        `addressed to replica ${to}, not of this node`,
      );
    }
    if (h.message === null) {
      throw new SnapshotRefusal(status.INVALID_ARGUMENT, "the header carries no message");
    }
    let message: Message;
    try {
      message = decodeMessage(h.message, fromReplica, to);
    } catch (err) {
      if (!(err instanceof CodecError)) throw err;
      throw new SnapshotRefusal(status.INVALID_ARGUMENT, `malformed header: ${err.message}`);
    }
    if (message.type !== "snapshot" || message.snapshot.data.length > 0) {
      throw new SnapshotRefusal(
        status.INVALID_ARGUMENT,
        "the header's message must be a snapshot without its data",
      );
    }
    const total = h.total_bytes;
    if (!Number.isSafeInteger(total) || total < 0) {
      throw new SnapshotRefusal(status.INVALID_ARGUMENT, `invalid length ${total}`);
    }
    if (total > maxBytes) {
      throw tooLarge(`a snapshot of ${total} bytes is over this node's limit of ${maxBytes}`);
    }
    // A streamed snapshot's length is known at its end: refused now only if the disk has no
    // room left at all.
    const full = this.#options.room?.(total) ?? null;
    if (full !== null) throw tooLarge(full);
    const sink = this.#options.sink?.() ?? new MemorySink();
    const image = new ImageCheck();
    return { from, shard: h.shard_id, message, announced: total === 0 ? null : total, sink, image };
  }

  #append(h: Header, bytes: Buffer): void {
    // The image found damaged already (the decoder runs as chunks arrive): refused now rather
    // than at the trailer, so that the rest of a bad stream is neither stored nor waited for.
    if (h.image.failure !== undefined) {
      throw new SnapshotRefusal(
        status.INVALID_ARGUMENT,
        `not a snapshot image: ${String(h.image.failure)}`,
      );
    }
    if (bytes.length > MAX_SNAPSHOT_CHUNK_BYTES) {
      throw new SnapshotRefusal(
        status.INVALID_ARGUMENT,
        `a data chunk of ${bytes.length} bytes, over the ${MAX_SNAPSHOT_CHUNK_BYTES} a sender sends`,
      );
    }
    const limit = h.announced ?? this.#options.maxBytes;
    if (bytes.length > limit - this.#received) {
      throw h.announced === null
        ? tooLarge(`snapshot of over ${limit} bytes, beyond this node's limit`)
        : new SnapshotRefusal(
            status.INVALID_ARGUMENT,
            `more data than the ${limit} bytes announced`,
          );
    }
    // Refused before the disk is full, where a WAL write would stop the node.
    const full = this.#options.room?.(bytes.length) ?? null;
    if (full !== null) throw tooLarge(full);
    h.sink.write(bytes);
    h.image.push(bytes);
    this.#crc = crc32c(bytes, this.#crc);
    this.#received += bytes.length;
  }

  #verify(h: Header, trailer: SnapshotTrailer__Output): void {
    // An old sender announces the length in the header only (the trailer's is then 0).
    const expected = h.announced ?? trailer.total_bytes;
    if (
      this.#received !== expected ||
      (trailer.total_bytes !== 0 && trailer.total_bytes !== expected)
    ) {
      throw new SnapshotRefusal(
        status.INVALID_ARGUMENT,
        `the trailer came after ${this.#received} of the ${expected} bytes announced`,
      );
    }
    if (trailer.crc32c >>> 0 !== this.#crc) {
      throw new SnapshotRefusal(
        status.DATA_LOSS,
        `checksum mismatch: the data's CRC32C is ${this.#crc}, the trailer says ${trailer.crc32c}`,
      );
    }
    this.#verified = true;
  }
}
