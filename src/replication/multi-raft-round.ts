/**
 * The multi-raft driver's round (see multi-raft.ts for the round's steps): what decides whether
 * a round must be durable before its messages leave and its entries apply.
 */
import type { Ready } from "../raft/index.ts";
import type { WalHardState } from "../storage/index.ts";

/** The hard states made durable so far, by shard (the WAL). */
export interface DurableHardStates {
  hardState(shard: number): WalHardState | undefined;
}

/**
 * Whether `rd`, a Ready of group `shard`, needs the round to be durable before its messages
 * leave and its entries apply: new entries, a snapshot, a changed term or vote do. A commit
 * index that moved alone does not (etcd's MustSync): in a group of several voters the entries
 * it covers are already durable on a majority, a linearizable read there goes through
 * ReadIndex (a leader's commit in its own term) and never trusts a restarted node's commit
 * index, and a node that restarts with an older one learns the newer from its leader; entries
 * its engine already holds are skipped when they apply again. Two exceptions keep the commit
 * durable at once: a sole voter (its linearizable reads are served at its own commit index
 * after a restart, multi-raft-reads.ts) and a commit that covers a configuration change (a
 * node restarting without it could wait for votes of members already removed).
 *
 * `durable` and `group` are asked only when the answer depends on them (no object per call).
 */
export function needsSync(
  rd: Pick<Ready, "entries" | "snapshot" | "hardState" | "committedEntries">,
  durable: DurableHardStates,
  shard: number,
  group: { isSoleVoter(): boolean },
): boolean {
  if (rd.entries.length > 0 || rd.snapshot !== null) return true;
  const hs = rd.hardState;
  if (hs === null) return false;
  const before = durable.hardState(shard);
  if (before === undefined || before.term !== hs.term || before.vote !== hs.vote) return true;
  if (group.isSoleVoter()) return true;
  for (const e of rd.committedEntries) if (e.type === "conf-change") return true;
  return false;
}
