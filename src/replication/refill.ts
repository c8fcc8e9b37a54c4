/**
 * A shard whose directory is gone on a cluster node (its tables, the state machine, removed or
 * emptied while the node's WAL still holds the shard's hard state, and had dropped entries the
 * tables held) is refilled from its peers instead of refusing to start (issue 51, item 4).
 *
 * Its replica lost the state machine and the log entries the WAL had dropped once the tables
 * held them, so it may have acknowledged entries that are now committed on one other replica
 * only. Voting with what it holds, it would help elect a candidate that lacks them. So, as the
 * shard opens (Groups#openShard, at start), when its engine holds nothing durable while the
 * WAL's log was compacted:
 *
 *  1. The shard's log is reset in the WAL: a snapshot mark at index 0 (the log restarts empty;
 *     the WAL keeps the segments of the entries that follow it, wal.ts #makeDurable) and the
 *     hard state with its term and vote kept, its commit 0. The mark's data is the LostLog
 *     below: the last entry (index, term) of the log the replica held, everything it may have
 *     acknowledged being at or below it, and the commit index it had recorded. Appended and
 *     synced in one batch with the reset, so the reset never survives without it; a crash before
 *     the sync leaves the old log and the missing directory, and the next start does it again.
 *     In the WAL, not in the new shard directory: the directory may be lost again before the
 *     refill ends, the WAL's log then holding only what the refill brought, and the LostLog of
 *     the first loss must outlive that (a second loss keeps the newer of the two: newerLostLog).
 *  2. The replica's Raft core starts recovering (RaftConfig.recoveringUntil, src/raft/raft.ts):
 *     it does not campaign, votes only for candidates at least as up to date as the lost log (as
 *     it would still holding it), and its refusals tell the leader to forget what it counted
 *     from the lost log and refill it, by log or by snapshot. With no leader it asks the shard's
 *     replicas to wake theirs (RoundLoop#askToRefill): an idle group's leader sleeps. It votes,
 *     rather than refusing every vote, so that with the leader gone the two other replicas can
 *     still elect one of them when that one holds what was lost (refusing all would leave a
 *     three-replica group no quorum with one more replica down).
 *  3. It is refilled once its log is at least as up to date as the lost one (the core then votes
 *     and campaigns as any replica: why that is safe is argued at Raft#maybeEndRecovery) and it
 *     has applied the commit index the lost log had recorded (until then its state is older than
 *     what it served before the loss). As up to date, not "holding the leader's entries through
 *     the lost log's last index": the lost log's tail may be entries no leader kept (this replica
 *     led, and stopped before they spread), and an idle shard's leader may never write that far;
 *     a leader of a later term has an entry of its term, which is enough. Until refilled it serves no serializable read (they go to
 *     the leader) and /health lists the shard as degraded on this node. A leader's snapshot
 *     installed meanwhile keeps the LostLog in its WAL mark; once refilled the mark is left as
 *     it is: a start that finds the WAL's log as up to date and its commit as far ignores it.
 *
 * A single node refuses to start instead (LostShardError): its only copy is gone.
 */
import { CairnError } from "../common/errors.ts";

/** The log a replica lost with its shard's directory, as its WAL mark records it. */
export interface LostLog {
  /** The last entry the lost log held: every entry the replica acknowledged is at or below it. */
  readonly index: number;
  readonly term: number;
  /** The commit index its hard state recorded (the refilled replica applies that far first). */
  readonly commit: number;
}

const FORMAT = 1;
const BYTES = 1 + 3 * 8;

/** The WAL snapshot mark's data for `lost`. */
export function encodeLostLog(lost: LostLog): Uint8Array {
  const out = new Uint8Array(BYTES);
  const view = new DataView(out.buffer);
  out[0] = FORMAT;
  view.setFloat64(1, lost.index, true);
  view.setFloat64(9, lost.term, true);
  view.setFloat64(17, lost.commit, true);
  return out;
}

/**
 * The LostLog in a WAL snapshot mark's data, or null for none (the driver's other snapshot
 * marks carry no data). Anything else is refused: a mark this code did not write.
 */
export function decodeLostLog(data: Uint8Array | undefined, shard: number): LostLog | null {
  if (data === undefined || data.length === 0) return null;
  const view = new DataView(data.buffer, data.byteOffset, data.byteLength);
  const lost =
    data.length === BYTES && data[0] === FORMAT
      ? {
          index: view.getFloat64(1, true),
          term: view.getFloat64(9, true),
          commit: view.getFloat64(17, true),
        }
      : null;
  if (
    lost === null ||
    ![lost.index, lost.term, lost.commit].every((n) => Number.isSafeInteger(n) && n >= 0)
  ) {
    throw new CairnError(
      "CAIRN_ERR_CORRUPTION",
      `shard ${shard}: the WAL's snapshot mark carries ${data.length} bytes that are no lost log's record`,
    );
  }
  return lost;
}

/** Whether a log ending at (index, term) is at least as up to date as `lost` (§5.4.1). */
export function holdsLostLog(index: number, term: number, lost: LostLog): boolean {
  return term > lost.term || (term === lost.term && index >= lost.index);
}

/** The LostLog to keep when a replica still refilling loses its directory again. */
export function newerLostLog(before: LostLog | null, now: LostLog): LostLog {
  if (before === null) return now;
  const last = holdsLostLog(now.index, now.term, before) ? now : before;
  return { index: last.index, term: last.term, commit: Math.max(before.commit, now.commit) };
}
