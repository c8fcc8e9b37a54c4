/**
 * Client KV calls forwarded to another node over the peer streams (RaftFrame.call, and the
 * answer in a RaftFrame.reply on that node's own stream back; src/api/forward.ts decides what
 * to forward, src/api/peer-calls.ts serves it there): a forwarded Put rides the same long-lived
 * stream as the round's Raft frames, so it costs no call of its own.
 *
 * A call waits for its answer by id. It fails DEADLINE_EXCEEDED at its deadline (checked every
 * CALL_SWEEP_MS while any call waits), CANCELLED when its caller cuts it, and UNAVAILABLE when
 * its stream ends first (peer-links.ts settles the calls of a stream that ended) or the transport
 * closes; an answer that comes after is dropped. Each failure says whether some of its bytes may
 * have reached the peer (`sent`): a write the peer took still applies, whatever the caller heard.
 * The answers this node owes its peers go back the same way (reply), dropped, like frames, when
 * the stream is down or over its budget.
 */
import { randomBytes } from "node:crypto";
import { status } from "@grpc/grpc-js";
import type { CallResult } from "../api/grpc-channel.ts";
import { type CallCut, deadlineClock, IntMap } from "../common/index.ts";
import type { NodeId } from "../raft/index.ts";
import { nodeId as toNodeId } from "../raft/index.ts";
import { type PeerReply } from "./frame-codec.ts";
import { encodeCallFrame, encodeReplyFrame } from "./frame-encode.ts";
import { callFailure, type PeerLinks, type PeerStream, type StreamCall } from "./peer-links.ts";
import type { PeerLogger } from "./peer-logger.ts";

/** How often calls in flight are checked against their deadlines (ms). */
const CALL_SWEEP_MS = 50;

/**
 * A forwarder's first call id: a random point of the lower half of the ids the wire carries
 * exactly (2^53), so that a node's ids are not its predecessor's. A peer answers a call on its
 * stream to the caller's *node*, whichever process runs it by then, and a reply is matched by id
 * and node: a node restarted while a call of the process before it still waited at the peer (a
 * write waiting for its shard's quorum) took that late answer for its own call of the same id,
 * both counted from 1 (chaos seed 800: a Delete answered with the outcome of another key's
 * put-if, seconds later). Two processes' ids now meet only if one's random start falls within
 * the other's calls: about (calls a process makes) / 2^52, under one in a billion.
 */
function firstCallId(): number {
  const bytes = randomBytes(7);
  // 52 random bits: 1 + the first 20 bits × 2^32 + the next 32.
  return 1 + (bytes.readUIntBE(0, 3) >>> 4) * 0x1_0000_0000 + bytes.readUInt32BE(3);
}

/** A forwarded call waiting for its answer. */
interface PendingCall extends StreamCall {
  readonly id: number;
  readonly peer: NodeId;
  /** When the caller stops waiting (deadlineClock()). */
  readonly deadline: number;
  /** The stream it went out on (its end fails the call). */
  readonly stream: PeerStream;
}

/** When a forwarded call gives up: its deadline (deadlineClock()), and what cancels it. */
export interface CallOptions {
  readonly deadline: number;
  readonly cut?: CallCut;
}

export class CallForwarder {
  readonly #links: PeerLinks;
  readonly #maxFrame: number;
  readonly #log: PeerLogger;
  #closed = false;
  /**
   * Forwarded calls not answered yet, by id. An IntMap, not a Map: its churn promotes what the
   * entries reach (src/common/int-map.ts).
   */
  readonly #calls = new IntMap<PendingCall>();
  #nextCallId = firstCallId();
  #sweeper: NodeJS.Timeout | null = null;

  constructor(links: PeerLinks, log: PeerLogger) {
    this.#links = links;
    this.#maxFrame = links.maxFrameBytes;
    this.#log = log;
  }

  /**
   * Forwards a client's unary KV call to node `to` on the stream to it (RaftFrame.call) and
   * resolves with its answer, which `to` sends on its own stream back (receiveReply). Never
   * rejects. `sent` in the result is false only when no byte of the call can have reached `to`:
   * the stream was down, the frame over a limit, or the stream ended before the bytes left.
   * The call fails DEADLINE_EXCEEDED at `deadline` (deadlineClock(), checked every 50 ms),
   * CANCELLED when `cut` is cut, and UNAVAILABLE when the stream ends first; an answer that
   * comes after is dropped. `to` never hears of a cancellation: a write it took still applies.
   */
  call(to: string, method: string, request: Uint8Array, options: CallOptions): Promise<CallResult> {
    if (this.#closed) {
      return Promise.resolve(callFailure(status.UNAVAILABLE, "the peer transport closed", false));
    }
    const { deadline, cut } = options;
    if (cut?.isCut === true) {
      return Promise.resolve(callFailure(status.CANCELLED, "cancelled before it was sent", false));
    }
    const timeoutMs = Math.min(0xffffffff, Math.ceil(deadline - deadlineClock()));
    if (timeoutMs <= 0) {
      return Promise.resolve(
        callFailure(status.DEADLINE_EXCEEDED, "deadline exceeded before it was sent", false),
      );
    }
    const links = this.#links;
    const peer = links.link(toNodeId(to));
    const stream = links.stream(peer);
    if (stream === null) {
      return Promise.resolve(
        callFailure(status.UNAVAILABLE, `no stream to ${peer.id} (down or backing off)`, false),
      );
    }
    const id = this.#nextCallId++;
    const frame = encodeCallFrame({ id, method, timeoutMs, request });
    if (frame.length > this.#maxFrame || links.overBudget(stream, frame.length)) {
      links.countDropped(peer, frame.length);
      return Promise.resolve(
        callFailure(status.UNAVAILABLE, `the stream to ${peer.id} is over its budget`, false),
      );
    }
    return new Promise<CallResult>((resolve) => {
      // Cut, past its deadline or closed, the call's frame is on the stream already (written
      // below, at once) and is never withdrawn: unless the stream ends first, its bytes leave
      // when the peer reads again (a half-close at close() flushes them too), so the call may
      // still apply there, whatever `left` says yet. Only the stream's end (peer-links.ts
      // #ended, `left`) or a write that failed proves them unsent.
      const onAbort = (): void => pending.settle(callFailure(status.CANCELLED, "cancelled", true));
      const pending: PendingCall = {
        id,
        peer: peer.id,
        deadline,
        stream,
        left: false,
        settle: (result) => {
          if (!this.#calls.delete(id)) return;
          pending.stream.calls.delete(id);
          cut?.listen(null);
          resolve(result);
        },
      };
      this.#calls.set(id, pending);
      stream.calls.set(id, pending);
      cut?.listen(onAbort);
      this.#sweep();
      links.write(peer, stream, frame, (delivered) => {
        if (delivered) pending.left = true;
        else {
          pending.settle(
            callFailure(status.UNAVAILABLE, `the stream to ${peer.id} ended first`, false),
          );
        }
      });
    });
  }

  /**
   * Sends the answer to call `reply.id` of node `to` on the stream to it. Dropped (logged at
   * debug) when that stream is down or over its budget: the caller then fails the call at its
   * deadline or when its own stream to this node ends.
   */
  reply(to: string, reply: PeerReply): void {
    if (this.#closed) return;
    const links = this.#links;
    const peer = links.link(toNodeId(to));
    const stream = links.stream(peer);
    let frame: Buffer | null = null;
    if (stream !== null) {
      frame = encodeReplyFrame(reply);
      if (frame.length <= this.#maxFrame && !links.overBudget(stream, frame.length)) {
        links.write(peer, stream, frame);
        return;
      }
    }
    links.countDropped(peer, frame?.length ?? 0);
    this.#log.debug("answer to a forwarded call dropped", { peer: peer.id, call: reply.id });
  }

  /** The answer node `from` sent to a call this node forwarded there (RaftFrame.reply). */
  receiveReply(from: string, reply: PeerReply): void {
    const pending = this.#calls.get(reply.id);
    if (pending === undefined || pending.peer !== from) return;
    const ok = reply.code === status.OK;
    pending.settle({
      code: reply.code,
      details: reply.details,
      message: ok
        ? Buffer.from(reply.response.buffer, reply.response.byteOffset, reply.response.length)
        : null,
      trailers: reply.trailers as [string, string][],
      sent: true,
    });
  }

  /** Fails every call waiting (UNAVAILABLE) and refuses those after: the transport closes. */
  close(): void {
    this.#closed = true;
    for (const c of this.#calls.values()) {
      c.settle(callFailure(status.UNAVAILABLE, "the peer transport closed", true)); // see call()
    }
  }

  /** Fails the calls past their deadline, every CALL_SWEEP_MS while any is in flight. */
  #sweep(): void {
    if (this.#sweeper !== null) return;
    this.#sweeper = setInterval(() => {
      const now = deadlineClock();
      for (const c of this.#calls.values()) {
        if (c.deadline <= now) {
          c.settle(callFailure(status.DEADLINE_EXCEEDED, "deadline exceeded", true)); // see call()
        }
      }
      if (this.#calls.size === 0 && this.#sweeper !== null) {
        clearInterval(this.#sweeper);
        this.#sweeper = null;
      }
    }, CALL_SWEEP_MS);
    this.#sweeper.unref();
  }
}
