import type { SimOptions } from "./simulator.ts";

const BUGS: Record<string, NonNullable<SimOptions["bugs"]>> = {
  "commit-prior-term": { commitPriorTermByCounting: true },
  "forget-vote": { forgetVote: true },
  "ack-before-persist": { ackBeforePersist: true },
  "read-without-quorum": { readWithoutQuorum: true },
  "count-learners": { countLearnersTowardCommit: true },
  "follower-commit-without-match": { followerCommitWithoutMatch: true },
  "sleep-through-messages": { sleepThroughMessages: true },
  "votes-with-lost-log": { votesWithLostLog: true },
};

export function bugsByName(name: string): SimOptions["bugs"] | undefined {
  return BUGS[name];
}

/** The exact command that replays one simulated run. */
export function replayCommand(opts: SimOptions): string {
  const parts = ["npm run sim --", `--seed ${opts.seed}`];
  if (opts.nodes !== undefined) parts.push(`--nodes ${opts.nodes}`);
  if (opts.chaosTicks !== undefined) parts.push(`--chaos-ticks ${opts.chaosTicks}`);
  const bug = Object.entries(BUGS).find(
    ([, b]) => JSON.stringify(b) === JSON.stringify(opts.bugs),
  )?.[0];
  if (bug !== undefined) parts.push(`--bug ${bug}`);
  if (opts.demote === true) parts.push("--demote");
  return `${parts.join(" ")} --trace`;
}
