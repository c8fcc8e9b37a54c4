/**
 * The multi-raft driver's maintenance: how far a group's log may be compacted.
 */
import type { ConfState, LogIndex, NodeId, Role } from "../raft/index.ts";

/**
 * Log entries a leader keeps, beyond what its engine holds, for members behind it (see
 * retainedFrom); further behind, a member catches up by snapshot.
 */
export const RETAINED_ENTRIES = 10_000;

/** What retainedFrom reads of a group's Raft core. */
export interface RetentionView {
  readonly role: Role;
  matchOf(id: NodeId): LogIndex | null;
}

/**
 * How far a leader may compact its log, given `flushed` (what its engine holds durably): not
 * past what its slowest member (other than `self`) still needs, so a follower a little behind
 * (restarted, slow) catches up from the log rather than by a whole snapshot; but never keeping
 * more than RETAINED_ENTRIES beyond `flushed`'s reach, past which that member gets a snapshot.
 * Followers send no entries, so they compact to `flushed`.
 */
export function retainedFrom(
  raw: RetentionView,
  conf: ConfState,
  self: NodeId,
  flushed: number,
): number {
  if (raw.role !== "leader") return flushed;
  let needed = flushed;
  for (const member of [...conf.voters, ...conf.learners]) {
    if (member === self) continue;
    const match = raw.matchOf(member);
    if (match !== null) needed = Math.min(needed, match);
  }
  return Math.max(needed, flushed - RETAINED_ENTRIES);
}
