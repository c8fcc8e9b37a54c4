/**
 * Planted bugs for the chaos harness (test/chaos/, `npm run chaos -- --bug NAME`): known ways to
 * lose acknowledged data that the harness must catch on real processes. Read from the
 * environment variable CAIRN_TESTING_BUGS (a comma-separated list) and from nowhere else; it is
 * not a configuration key, no documented setting reaches it, and a node started with it logs a
 * warning naming each bug. Never set it outside tests.
 */
import { readFile } from "node:fs/promises";
import { CairnError } from "../common/index.ts";
import type { DriverTestingBugs } from "../replication/index.ts";
import { type FileSystem, type FsFile, nodeFileSystem } from "../storage/index.ts";

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

/** How long a write takes to reach the OS on the slow disk of `ack-before-wal-sync`. */
export const SLOW_WRITE_MS = 200;

/**
 * A disk whose writes reach the OS only after `ms`: the WAL's records then sit in the process
 * for that long after their round, as on a slow or saturated disk. Harmless to a correct node
 * (it waits for the sync); with `ack-before-wal-sync` it is the window in which a SIGKILL loses
 * records the node already acknowledged. Page-cache durability makes the bug invisible to a
 * SIGKILL otherwise: the WAL writes each batch within a millisecond.
 */
export function slowWriteFileSystem(inner: FileSystem, ms: number): FileSystem {
  const delay = (): Promise<void> => new Promise((r) => setTimeout(r, ms));
  return {
    mkdirp: (dir) => inner.mkdirp(dir),
    readdir: (dir) => inner.readdir(dir),
    readFile: (path) => inner.readFile(path),
    unlink: (path) => inner.unlink(path),
    fsyncDir: (dir) => inner.fsyncDir(dir),
    async open(path, flags): Promise<FsFile> {
      const file = await inner.open(path, flags);
      return {
        async write(buf, offset, length, position) {
          await delay();
          return file.write(buf, offset, length, position);
        },
        truncate: (length) => file.truncate(length),
        sync: () => file.sync(),
        datasync: () => file.datasync(),
        close: () => file.close(),
      };
    },
  };
}

/** The planted bugs named in `env`, or null when none is. Throws on an unknown name. */
export function plantedBugs(
  env: Readonly<Record<string, string | undefined>>,
): { names: string[]; bugs: DriverTestingBugs; fs: FileSystem | null } | null {
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
  return {
    names,
    bugs: bugs as DriverTestingBugs,
    // The ack-before-wal-sync bug runs on a slow disk, where its window is wide enough to see.
    fs:
      bugs["ackBeforeWalSync"] === true ? slowWriteFileSystem(nodeFileSystem, SLOW_WRITE_MS) : null,
  };
}

/**
 * Tests only: a group's leader waits this long after each step of a move before the next one
 * (ReplicaEffects.holdAfterStepMs), so that a test can SIGKILL a node at a chosen step
 * (test/e2e/cluster-move-crash.test.ts). Read from the environment only, like the planted bugs;
 * a node started with it logs a warning.
 */
export const MOVE_STEP_HOLD_ENV = "CAIRN_TESTING_MOVE_STEP_HOLD_MS";

/** The hold CAIRN_TESTING_MOVE_STEP_HOLD_MS asks for (ms), or 0. Throws on a bad value. */
export function moveStepHoldMs(env: Readonly<Record<string, string | undefined>>): number {
  return envMs(env, MOVE_STEP_HOLD_ENV) ?? 0;
}

/** Whole milliseconds from 0 to 600000 in `env[name]`, or null when unset. Throws on a bad value. */
function envMs(env: Readonly<Record<string, string | undefined>>, name: string): number | null {
  const raw = env[name];
  if (raw === undefined || raw.trim() === "") return null;
  const ms = Number(raw);
  if (!Number.isInteger(ms) || ms < 0 || ms > 600_000) {
    throw new CairnError(
      "CAIRN_ERR_CONFIG",
      `${name}: expected whole milliseconds from 0 to 600000, got ${JSON.stringify(raw)}`,
    );
  }
  return ms;
}

/**
 * Tests only: how long the first seed listens for a running cluster's members before it founds
 * one on itself alone, instead of FOUNDING_LISTEN_MS (src/node/cluster.ts), so that the
 * end-to-end tests that found a cluster on one node do not each wait 35 s
 * (test/support/server-process.ts sets 0). Read from the environment only, like the planted
 * bugs; a node started with it logs a warning.
 */
export const FOUNDING_LISTEN_ENV = "CAIRN_TESTING_FOUNDING_LISTEN_MS";

/** The wait CAIRN_TESTING_FOUNDING_LISTEN_MS asks for (ms), or null. Throws on a bad value. */
export function testingFoundingListenMs(
  env: Readonly<Record<string, string | undefined>>,
): number | null {
  return envMs(env, FOUNDING_LISTEN_ENV);
}

/**
 * Tests only: the highest cluster version this node's build claims to run, instead of
 * BUILD_VERSION (src/cluster/meta.ts), so that a test can run a cluster of "builds" of several
 * versions (test/e2e/cluster-version.test.ts). Read from the environment only, like the planted
 * bugs; a node started with it logs a warning.
 */
export const BUILD_VERSION_ENV = "CAIRN_TESTING_BUILD_VERSION";

/** The version CAIRN_TESTING_BUILD_VERSION claims, or null. Throws on a bad value. */
export function testingBuildVersion(
  env: Readonly<Record<string, string | undefined>>,
): number | null {
  const raw = env[BUILD_VERSION_ENV];
  if (raw === undefined || raw.trim() === "") return null;
  const version = Number(raw);
  if (!Number.isInteger(version) || version < 1 || version > 1000) {
    throw new CairnError(
      "CAIRN_ERR_CONFIG",
      `${BUILD_VERSION_ENV}: expected a whole number from 1 to 1000, got ${JSON.stringify(raw)}`,
    );
  }
  return version;
}

/**
 * Tests only: the share of the data directory's file system in use is read from this file (a
 * whole percent, 0 to 100) instead of the file system (DiskWatch, src/node/disk-watch.ts), so
 * that a test can make a node's disk look full and then roomy again
 * (test/e2e/cluster-elastic.test.ts). Read from the environment only, like the planted bugs;
 * a node started with it logs a warning.
 */
export const DISK_USED_FILE_ENV = "CAIRN_TESTING_DISK_USED_PERCENT_FILE";

/** The file CAIRN_TESTING_DISK_USED_PERCENT_FILE names, or null. */
export function diskUsedFile(env: Readonly<Record<string, string | undefined>>): string | null {
  const raw = env[DISK_USED_FILE_ENV];
  return raw === undefined || raw.trim() === "" ? null : raw;
}

/** The percent written in `file` (DISK_USED_FILE_ENV); throws on anything but 0 to 100. */
export async function readDiskUsedFile(file: string): Promise<number> {
  const text = (await readFile(file, "utf8")).trim();
  const percent = Number(text);
  if (!/^\d{1,3}$/.test(text) || percent > 100)
    throw new Error(
      `${DISK_USED_FILE_ENV} ${file}: expected a percent 0-100, got ${JSON.stringify(text)}`,
    );
  return percent;
}
