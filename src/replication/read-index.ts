/**
 * A follower's linearizable read, across nodes (cairn.v1.Raft ReadIndex; etcd's follower read):
 * the follower asks the shard's leader node for a read index, the leader confirms its
 * leadership (MultiRaft.readIndexAsLeader, by term checks or a heartbeat round) and answers its
 * commit index, and the follower serves the read once it has applied that far.
 *
 * This file holds the leader's side of the call: every shard of a call is answered on its own
 * (a read index, or the shard's refusal as an error code), within READ_INDEX_SHARD_TIMEOUT_MS,
 * so that one stuck shard does not hold back the others.
 */
import { CairnError } from "../common/errors.ts";
import type { ReadIndexRequest__Output } from "../api/generated/cairn/v1/ReadIndexRequest.ts";
import type { ReadIndexResult } from "../api/generated/cairn/v1/ReadIndexResult.ts";
import { NotLeaderError } from "../raft/index.ts";
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

/**
 * The leader's answers to a ReadIndex call, one per shard in order, never a rejection. The
 * sender's vouchers (its replica and, per shard, its term) are passed on when the call carries
 * both, and a term above 0 (ReadVoucher; docs/raft.md invariant 15).
 */
export function readIndexResults(
  readIndex: (shard: number, voucher?: ReadVoucher) => Promise<number>,
  request: ReadIndexRequest__Output,
): Promise<ReadIndexResult[]> {
  const { shard_ids: shards, replica, terms } = request;
  const vouched = replica !== "" && terms.length === shards.length;
  return Promise.all(
    shards.map((shard, i) => {
      const term = vouched ? (terms[i] as number) : 0;
      return readIndexResult(
        term > 0 ? (s) => readIndex(s, { replica, term }) : (s) => readIndex(s),
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
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new CairnError(
            "CAIRN_ERR_TIMEOUT",
            `shard ${shard}'s leadership was not confirmed within ${READ_INDEX_SHARD_TIMEOUT_MS} ms`,
            { retryable: true },
          ),
        ),
      READ_INDEX_SHARD_TIMEOUT_MS,
    );
  });
  try {
    return { index: await Promise.race([readIndex(shard), timeout]) };
  } catch (err) {
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
