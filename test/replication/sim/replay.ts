/** Names of the driver simulation's planted bugs, and the command that replays a seed. */
import type { DriverSimBugs } from "./simulator.ts";

const BUGS: Record<string, DriverSimBugs> = {
  "stale-read-after-restart": { staleReadAfterRestart: true },
  "rotation-checkpoint-includes-batch": { rotationCheckpointIncludesBatch: true },
  "follower-read-without-apply": { followerReadWithoutApply: true },
  "wipe-keeps-replica": { wipeKeepsReplica: true },
  "lead-founding-term-again": { leadFoundingTermAgain: true },
  "founding-appends-before-sync": { foundingAppendsBeforeSync: true },
  "stale-meta-leader": { staleMetaLeader: true },
  "vote-when-recreated": { voteWhenRecreated: true },
};

export function driverBugsByName(name: string): DriverSimBugs | undefined {
  return BUGS[name];
}

export function driverReplayCommand(o: {
  seed: number;
  nodes?: number;
  chaosMs?: number;
  bug?: string;
}): string {
  return [
    `npm run sim -- --driver --seed ${o.seed}`,
    o.nodes === undefined ? "" : ` --nodes ${o.nodes}`,
    o.chaosMs === undefined ? "" : ` --chaos-ms ${o.chaosMs}`,
    o.bug === undefined ? "" : ` --bug ${o.bug}`,
    " --trace",
  ].join("");
}
