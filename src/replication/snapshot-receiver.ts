/**
 * The receiving end of cairn.v1.Raft InstallSnapshot under grpc-js: each call's chunks go to a
 * SnapshotAssembler (snapshot-transfer.ts, which holds the rules: the header's identity, the
 * length limit, the checksum, the image), which writes the data to a file of the node's
 * snapshot directory as it arrives (`dir`; snapshot-file.ts). The call is paused while a chunk
 * is being written, so memory holds the chunks in flight, not the snapshot. Only once the sender
 * half-closed and the snapshot is whole, verified and written is its message handed to the
 * driver, like a frame's messages, with a stream that reads the file back (removed once the
 * driver installed or dropped it). The call is then answered OK: that acknowledgement is what
 * the sender's group hears as "sent".
 *
 * At most `maxReceives` snapshots are received at once, counted from their header (a peer's,
 * checked): a sender sends one at a time to each peer (snapshot-sender.ts), so more means a
 * peer that does not hold to it, and each would hold a call, a file and its disk space. The next
 * is refused RESOURCE_EXHAUSTED, and its sender's group tries again later. (Calls not past their
 * header are the front end's to bound, and the progress rule below ends them; counted, a client
 * that opened some could have kept the peers' snapshots out.)
 *
 * A call must keep up a pace: one that brings fewer than `minProgressBytes` of data in a
 * `progressWindowMs` (counted in windows from its start, until its trailer, after which it has
 * one more window to half-close) is cut DEADLINE_EXCEEDED. A call that brought a small chunk
 * now and then used to hold its slot for as long as it liked: without peer TLS any client may
 * pass for a member (docs/architecture.md, "Caveats"), and 32 calls of one chunk a minute kept
 * every peer's snapshot out. A floor on the bytes, rather than a cap on slots per sender, because
 * such a client names whichever member it likes, so a cap per node it names binds nothing, and
 * one per address or connection binds nodes that share an address or reconnect. Holding the
 * slots now costs a client that rate on each (32 MiB a minute at the defaults) of valid image
 * data, which the disk's reserve refuses once it has filled it. A sender held to its own rate
 * limits keeps that pace: it streams few enough snapshots at once for each to get four times
 * the floor (snapshotSendConcurrency, snapshot-sender.ts).
 *
 * A refusal, a broken call, or a call cut by that rule ends with its status (logged at warn,
 * within RefusalLog's bound: peer-logger.ts; counted as a failed receive, every one; a refusal
 * of the sender's bytes, a chunk that is no SnapshotChunk among them, INVALID_ARGUMENT with
 * CAIRN_ERR_INVALID_ARGUMENT); a call the sender cancels is counted and logged at debug.
 * Nothing of a refused snapshot reaches Raft, and its file is removed.
 */
import {
  Metadata,
  type ServerReadableStream,
  type sendUnaryData,
  type ServiceError,
  status,
} from "@grpc/grpc-js";
import type { SnapshotAck } from "../api/generated/cairn/v1/SnapshotAck.ts";
import { MALFORMED_REQUEST_CODE, MalformedMessage } from "../api/strict-wire.ts";
import { ERROR_CODE_KEY, PEER_KEY } from "../api/wire.ts";
import type { SnapshotChunk__Output } from "../api/generated/cairn/v1/SnapshotChunk.ts";
import type { PeerCheck, PeerRefusalKind } from "./handshake.ts";
import type { ShardMessage } from "./multi-raft.ts";
import { type LogFields, type PeerLogger, RefusalLog } from "./peer-logger.ts";
import { type SnapshotDisk, SnapshotFile, SnapshotSpace } from "./snapshot-file.ts";
import { SnapshotAssembler, type SnapshotMetrics, SnapshotRefusal } from "./snapshot-transfer.ts";
import type { EndCall } from "./stream-receiver.ts";

export interface SnapshotReceiverOptions {
  /** What a header is checked against, as this node knows it when the call arrives. */
  readonly peerCheck: () => PeerCheck;
  readonly refused?: ((kind: PeerRefusalKind) => void) | undefined;
  /** Larger snapshots are refused (RESOURCE_EXHAUSTED). */
  readonly maxBytes: number;
  /**
   * Where incoming snapshots are written as they arrive (snapshot-file.ts); without it they are
   * assembled in memory.
   */
  readonly dir?: string | undefined;
  /**
   * The disk `dir` is on, when the node keeps a reserve of it free: a snapshot that would take
   * it is refused RESOURCE_EXHAUSTED (SnapshotSpace).
   */
  readonly disk?: SnapshotDisk | undefined;
  /**
   * A call that brings fewer than `minProgressBytes` of data in this long fails
   * (DEADLINE_EXCEEDED), ms: see the progress rule above.
   */
  readonly progressWindowMs: number;
  readonly minProgressBytes: number;
  /** Snapshots received at once, past their header; the next is refused RESOURCE_EXHAUSTED. */
  readonly maxReceives: number;
  readonly metrics?: SnapshotMetrics | undefined;
  readonly log: PeerLogger;
  /**
   * Where the refusals are logged, bounded (the service's, shared with its other calls).
   * Default: a RefusalLog of `log`'s, of these calls alone.
   */
  readonly refusals?: RefusalLog | undefined;
  /** The calls open now: each is added while open, and ended by the service's endAll(). */
  readonly open: Set<EndCall>;
}

/** The InstallSnapshot handler: hands each whole, verified snapshot to `handler`. */
export function snapshotReceiver(
  handler: (from: string, messages: ShardMessage[]) => void,
  options: SnapshotReceiverOptions,
): (
  call: ServerReadableStream<SnapshotChunk__Output, SnapshotAck>,
  callback: sendUnaryData<SnapshotAck>,
) => void {
  const { progressWindowMs, minProgressBytes, log, open } = options;
  // A caller makes a refusal at will (a stranger, a damaged chunk): its lines are bounded.
  const refusals = options.refusals ?? new RefusalLog(log);
  /** Calls past their header, not yet finished. */
  let receiving = 0;
  // The room every call's file takes, with the tables its install builds, until it is removed.
  const disk = options.disk;
  const space = disk === undefined || options.dir === undefined ? null : new SnapshotSpace(disk);
  return (call, callback) => {
    const dir = options.dir;
    const assembler = new SnapshotAssembler({
      peers: options.peerCheck(),
      sender: String(call.metadata.get(PEER_KEY)[0] ?? ""),
      ...(options.refused === undefined ? {} : { refused: options.refused }),
      maxBytes: options.maxBytes,
      ...(dir === undefined ? {} : { sink: () => new SnapshotFile(dir, space) }),
      ...(space === null ? {} : { room: (bytes: number) => space.refusal(bytes) }),
    });
    let done = false;
    /** This call counts in `receiving`. */
    let counted = false;
    const uncount = (): void => {
      if (counted) receiving--;
      counted = false;
    };
    const fields = (): LogFields => ({
      peer: assembler.from ?? "",
      peer_addr: call.getPeer(),
      shard_id: assembler.shard ?? -1,
      bytes: assembler.totalBytes ?? 0,
    });
    const finish = (err: SnapshotRefusal | null): void => {
      if (done) return;
      done = true;
      uncount();
      open.delete(end);
      clearTimeout(idle);
      if (err === null) {
        callback(null, {});
        return;
      }
      assembler.discard();
      options.metrics?.failed("receive");
      refusals.warn("raft snapshot refused", {
        ...fields(),
        code: status[err.code],
        details: err.message,
      });
      // The sender's bytes refused (a chunk that is no message, a damaged header or image):
      // its mistake, with the code a client's malformed request carries.
      const metadata = new Metadata();
      if (err.code === status.INVALID_ARGUMENT)
        metadata.set(ERROR_CODE_KEY, MALFORMED_REQUEST_CODE);
      // A snapshot too large for this node: its sender holds back that shard's next one.
      if (err.errorCode !== undefined) metadata.set(ERROR_CODE_KEY, err.errorCode);
      callback({ code: err.code, details: err.message, metadata });
    };
    const end = (err: Partial<ServiceError> | null): void =>
      finish(new SnapshotRefusal(err?.code ?? status.UNAVAILABLE, err?.details ?? "ended"));
    open.add(end);
    /** Data bytes that arrived in the current window. */
    let windowBytes = 0;
    /** The sender half-closed: what is left is this node's work, not timed. */
    let ended = false;
    const check = (): void => {
      if (done || ended) return;
      if (windowBytes < minProgressBytes) {
        finish(
          new SnapshotRefusal(
            status.DEADLINE_EXCEEDED,
            `${windowBytes} bytes in the last ${progressWindowMs} ms, under the ${minProgressBytes} this node requires`,
          ),
        );
        return;
      }
      windowBytes = 0;
      idle = setTimeout(check, progressWindowMs);
    };
    let idle = setTimeout(check, progressWindowMs);
    const refuse = (err: unknown): void =>
      finish(
        err instanceof SnapshotRefusal ? err : new SnapshotRefusal(status.INTERNAL, String(err)),
      );
    call.on("data", (chunk: SnapshotChunk__Output | MalformedMessage) => {
      if (done) return;
      if (chunk instanceof MalformedMessage) {
        refuse(new SnapshotRefusal(status.INVALID_ARGUMENT, chunk.details));
        return;
      }
      try {
        assembler.push(chunk);
      } catch (err) {
        refuse(err);
        return;
      }
      // The trailer completes its window's share: the sender has only to half-close, within
      // the next window.
      windowBytes += assembler.complete ? minProgressBytes : (chunk.data?.length ?? 0);
      if (!counted && assembler.from !== null) {
        if (receiving >= options.maxReceives) {
          refuse(
            new SnapshotRefusal(
              status.RESOURCE_EXHAUSTED,
              `${options.maxReceives} snapshots are being received already`,
            ),
          );
          return;
        }
        receiving++;
        counted = true;
      }
      // Bounded memory: no more chunks are taken until this one is written.
      const writing = assembler.pending();
      if (writing === null) return;
      call.pause();
      writing.then(
        () => {
          if (!done) call.resume();
        },
        (err: unknown) => refuse(storeFailure(err)),
      );
    });
    // The sender half-closed: only now, complete, verified and stored, does it reach Raft.
    call.on("end", () => {
      if (done) return;
      ended = true;
      clearTimeout(idle);
      void assembler.close().then(() => {
        if (!done) handOver();
      }, refuse);
    });
    const handOver = (): void => {
      let snapshot: ShardMessage;
      try {
        snapshot = assembler.finish();
      } catch (err) {
        refuse(err);
        return;
      }
      const from = assembler.from ?? "";
      try {
        handler(from, [snapshot]);
      } catch (err) {
        log.error("raft snapshot handler failed", { ...fields(), error: String(err) });
        refuse(err);
        return;
      }
      options.metrics?.received();
      log.info("raft snapshot received", fields());
      finish(null);
    };
    call.on("cancelled", () => {
      if (done) return;
      done = true;
      uncount();
      open.delete(end);
      clearTimeout(idle);
      assembler.discard();
      options.metrics?.failed("receive");
      log.debug("raft snapshot call cancelled by the sender", fields());
    });
    call.on("error", () => refuse(new SnapshotRefusal(status.CANCELLED, "stream error")));
  };
}

function storeFailure(err: unknown): SnapshotRefusal {
  return new SnapshotRefusal(status.INTERNAL, `the snapshot could not be stored: ${String(err)}`);
}
