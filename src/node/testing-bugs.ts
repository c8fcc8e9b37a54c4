/**
 * Planted bugs for the chaos harness (test/chaos/, `npm run chaos -- --bug NAME`): known ways to
 * lose acknowledged data that the harness must catch on real processes. Read from the
 * environment variable CAIRN_TESTING_BUGS (a comma-separated list) and from nowhere else; it is
 * not a configuration key, no documented setting reaches it, and a node started with it logs a
 * warning naming each bug. Never set it outside tests.
 */
import { CairnError } from "../common/index.ts";
import type { DriverTestingBugs } from "../replication/index.ts";

export const TESTING_BUGS_ENV = "CAIRN_TESTING_BUGS";

const BUGS: Readonly<Record<string, keyof DriverTestingBugs>> = {
  // A follower serves a linearizable read once the leader answered its read index, without
  // waiting to apply up to it.
  "follower-read-without-apply": "followerReadWithoutApply",
  // Messages (acknowledgements, votes) go out and writes are applied and answered before the
  // round's WAL records are written and synced.
  "ack-before-wal-sync": "ackBeforeWalSync",
  // A follower's snapshot install is not made durable before the WAL records the snapshot.
  "snapshot-install-not-durable": "snapshotInstallNotDurable",
};

/** The planted bugs named in `env`, or null when none is. Throws on an unknown name. */
export function plantedBugs(
  env: Readonly<Record<string, string | undefined>>,
): { names: string[]; bugs: DriverTestingBugs } | null {
  const raw = env[TESTING_BUGS_ENV];
  if (raw === undefined || raw.trim() === "") return null;
  const names = raw
    .split(",")
    .map((s) => s.trim())
    .filter((s) => s !== "");
  const bugs: Record<string, boolean> = {};
  for (const name of names) {
    const field = BUGS[name];
    if (field === undefined) {
      throw new CairnError(
        "CAIRN_ERR_CONFIG",
        `${TESTING_BUGS_ENV}: unknown planted bug ${JSON.stringify(name)}; known: ${Object.keys(BUGS).join(", ")}`,
      );
    }
    bugs[field] = true;
  }
  return { names, bugs: bugs as DriverTestingBugs };
}
