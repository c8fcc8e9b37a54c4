/**
 * A follower's linearizable read, across nodes (cairn.v1.Raft ReadIndex; etcd's follower read):
 * the follower asks the shard's leader node for a read index, the leader confirms its
 * leadership (MultiRaft.readIndexAsLeader, by term checks or a heartbeat round) and answers its
 * commit index, and the follower serves the read once it has applied that far.
 *
 * Both sides of the call are here. The follower's (ReadIndexBatcher, GrpcTransport.readIndex)
 * batches reads per leader node with one call in flight: a read asked while a call is in flight
 * waits for the next call, which carries every read asked meanwhile, one entry per shard. A
 * read never takes the answer of a call sent before it was asked: that index may predate a
 * write acknowledged before the read arrived. The leader's (readIndexResults, the service's
 * ReadIndex) answers every shard of a call on its own (a read index, or the shard's refusal as
 * an error code), within READ_INDEX_SHARD_TIMEOUT_MS, so that one stuck shard does not hold
 * back the others.
 */
import { deadlineClock } from "../common/deadline-clock.ts";
import { CairnError } from "../common/errors.ts";
import { ReadPastDeadlineError } from "./request-errors.ts";
import type { ReadIndexRequest__Output } from "../api/generated/cairn/v1/ReadIndexRequest.ts";
import type {
  ReadIndexResult,
  ReadIndexResult__Output,
} from "../api/generated/cairn/v1/ReadIndexResult.ts";
import { nodeOfReplica } from "../cluster/index.ts";
import type { NodeId } from "../raft/index.ts";
import { NotLeaderError, nodeId as toNodeId } from "../raft/index.ts";
import type { ReadVoucher } from "./term-confirm.ts";

/** Shards one ReadIndex call may name: every shard, each once. */
export const MAX_READ_INDEX_SHARDS = 65_536;

/**
 * How long one shard of a ReadIndex call may take to confirm its leadership before it is
 * answered CAIRN_ERR_TIMEOUT (the follower's read is refused, retryably): the call answers all
 * its shards together, so one stuck shard (a leader cut off from its quorum, a transfer) must
 * not hold back the reads of the others. Confirming takes one heartbeat round trip.
 */
export const READ_INDEX_SHARD_TIMEOUT_MS = 2_000;

// ── the follower's side ───────────────────────────────────────────────────────────────────

/**
 * One ReadIndex call to leader node `node` for `shards` (each once), with this node's replica's
 * term in each (0: none): resolves with the call's results, in the shards' order, or rejects
 * with the call's error.
 */
export type ReadIndexCall = (
  node: NodeId,
  shards: number[],
  terms: number[],
  timeoutMs: number,
) => Promise<readonly ReadIndexResult__Output[]>;

/** A follower's read waiting for its ReadIndex answer (GrpcTransport.readIndex). */
interface PendingRead {
  readonly shard: number;
  /** The asking replica's term in the group (0: none given). */
  readonly term: number;
  readonly resolve: (index: number) => void;
  readonly reject: (err: Error) => void;
}

interface ReadBatch {
  /** Reads asked since the call in flight (if any) was sent. */
  waiting: PendingRead[];
  inFlight: boolean;
}

/** Followers' reads, batched per leader node into ReadIndex calls, one in flight per node. */
export class ReadIndexBatcher {
  readonly #call: ReadIndexCall;
  /** The reads waiting, and whether a call is in flight, per leader node. */
  readonly #batches = new Map<NodeId, ReadBatch>();

  constructor(call: ReadIndexCall) {
    this.#call = call;
  }

  /**
   * The index a read of `shard` must wait for, asked of node `to` (a replica id names its
   * node). Rejects with the call's error, or with the shard's own refusal (NotLeaderError with
   * the leader's node when known, or a retryable CairnError). `term`, when given, is this
   * node's replica's term in the group when the read was asked: the call carries the highest
   * asked per shard, a ReadVoucher for the leader.
   */
  read(to: NodeId, shard: number, timeoutMs: number, term?: number): Promise<number> {
    const node = toNodeId(nodeOfReplica(to));
    return new Promise((resolve, reject) => {
      let batch = this.#batches.get(node);
      if (batch === undefined) {
        batch = { waiting: [], inFlight: false };
        this.#batches.set(node, batch);
      }
      batch.waiting.push({ shard, term: term ?? 0, resolve, reject });
      if (!batch.inFlight) this.#send(node, batch, timeoutMs);
    });
  }

  /** Sends one ReadIndex call for every read waiting in `batch`; the next when it returns. */
  #send(node: NodeId, batch: ReadBatch, timeoutMs: number): void {
    const reads = batch.waiting;
    batch.waiting = [];
    batch.inFlight = true;
    const terms = new Map<number, number>();
    for (const r of reads) terms.set(r.shard, Math.max(terms.get(r.shard) ?? 0, r.term));
    const shards = [...terms.keys()];
    this.#call(
      node,
      shards,
      shards.map((s) => terms.get(s) ?? 0),
      timeoutMs,
    )
      .then(
        (answers) => {
          const results = new Map(shards.map((shard, i) => [shard, answers[i]]));
          for (const read of reads) {
            const result = results.get(read.shard);
            if (result === undefined) {
              read.reject(new Error(`no read index answered for shard ${read.shard}`));
            } else if (result.error_code === "") read.resolve(Number(result.index));
            else read.reject(readIndexRefusal(result));
          }
        },
        (err: unknown) => {
          for (const read of reads) read.reject(err as Error);
        },
      )
      .finally(() => {
        batch.inFlight = false;
        if (batch.waiting.length > 0) this.#send(node, batch, timeoutMs);
        else this.#batches.delete(node);
      });
  }
}

/** The error a follower's read gets for its shard's refusal in a ReadIndex reply. */
function readIndexRefusal(result: ReadIndexResult__Output): Error {
  if (result.error_code === "CAIRN_ERR_NOT_LEADER") {
    return new NotLeaderError(result.leader === "" ? null : toNodeId(result.leader));
  }
  return new CairnError(result.error_code, result.error, { retryable: true });
}

// ── the leader's side ─────────────────────────────────────────────────────────────────────

/**
 * The leader's answers to a ReadIndex call, one per shard in order, never a rejection. The
 * sender's vouchers (its replica and, per shard, its term) are passed on when the call carries
 * both, and a term above 0 (ReadVoucher; docs/raft.md invariant 15).
 */
export function readIndexResults(
  readIndex: (shard: number, voucher: ReadVoucher | undefined, deadline: number) => Promise<number>,
  request: ReadIndexRequest__Output,
): Promise<ReadIndexResult[]> {
  const { shard_ids: shards, replica, terms } = request;
  const vouched = replica !== "" && terms.length === shards.length;
  // Each shard's read stops waiting when its answer is given up on (readIndexResult), and gives
  // its share of the request budget back then, not at the driver's request timeout.
  const deadline = deadlineClock() + READ_INDEX_SHARD_TIMEOUT_MS;
  return Promise.all(
    shards.map((shard, i) => {
      const term = vouched ? (terms[i] as number) : 0;
      return readIndexResult(
        term > 0
          ? (s) => readIndex(s, { replica, term }, deadline)
          : (s) => readIndex(s, undefined, deadline),
        shard,
      );
    }),
  );
}

/** One shard's answer to a ReadIndex call: its read index, or why not, never a throw. */
async function readIndexResult(
  readIndex: (shard: number) => Promise<number>,
  shard: number,
): Promise<ReadIndexResult> {
  const notConfirmed = (): CairnError =>
    new CairnError(
      "CAIRN_ERR_TIMEOUT",
      `shard ${shard}'s leadership was not confirmed within ${READ_INDEX_SHARD_TIMEOUT_MS} ms`,
      { retryable: true },
    );
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(() => reject(notConfirmed()), READ_INDEX_SHARD_TIMEOUT_MS);
  });
  try {
    return { index: await Promise.race([readIndex(shard), timeout]) };
  } catch (caught) {
    // The read's own deadline is this answer's (readIndexResults): whichever of the two fires
    // first, the follower hears the same, not that its client's deadline passed.
    const err = caught instanceof ReadPastDeadlineError ? notConfirmed() : caught;
    if (err instanceof NotLeaderError) {
      return { error_code: err.code, error: err.message, leader: err.leader ?? "" };
    }
    return {
      error_code: err instanceof CairnError ? err.code : "CAIRN_ERR_INTERNAL",
      error: err instanceof Error ? err.message : String(err),
    };
  } finally {
    clearTimeout(timer);
  }
}
