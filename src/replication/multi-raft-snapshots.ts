/**
 * The multi-raft driver's snapshots of a group's state machine: built by a leader for a follower
 * too far behind for its log, installed by that follower (docs/raft.md, driver invariant 7: a
 * snapshot is the state machine at its applied index with the configuration in force there,
 * and the engine holds it durably before the WAL records it).
 */
import { CairnError } from "../common/errors.ts";
import { logIndex, type Snapshot, term } from "../raft/index.ts";
import { encodeSnapshotFrames, expectImageSeq } from "../storage/index.ts";
import { type ConfListeners, confChanged } from "./meta-voters.ts";
import { type DriverTestingBugs, ShuttingDownError } from "./multi-raft-options.ts";
import { installSnapshotNotDurably } from "./planted-bugs.ts";
import type { ShardReplica } from "./shard.ts";
import type { SnapshotPins } from "./snapshot-pins.ts";

const EMPTY = new Uint8Array(0);

/** What a snapshot reads and replaces of a shard: its state machine and its configuration. */
export type SnapshotGroup = Pick<ShardReplica, "id" | "sm" | "storage">;

/** The terms of a shard's log entries (the WAL). */
export interface LogTerms {
  term(shard: number, index: number): number | undefined;
}

/**
 * Replaces a follower's state with a snapshot from its leader, and releases its stream; the
 * proposals waiting on the entries it replaced are answered (ShardReplica.overtakenBySnapshot).
 *
 * The image must be the state at the snapshot's index: the import is refused at its header
 * otherwise, the engine left as it was (expectImageSeq). Installed, an image above the index
 * made the engine skip the log entries between after a restart (the replica diverged), one
 * below it kept the node from starting, and the next entry's apply failed the node. Such a
 * snapshot never gets here from a peer (the receiver checks a streamed image, the driver an
 * inline one: Peers.receive), and a refused install fails the node, as every failed install
 * does: the Raft core has taken the snapshot already.
 *
 * Once `closing` says the node is closing, the install stops at the image's next chunk with a
 * ShuttingDownError, the engine left as it was (an import stopped before its end changes
 * nothing), and the WAL never records the snapshot: its leader sends it again once the node is
 * back. The node's close() waits for the installs under way, and would otherwise have waited
 * for the whole image (a gigabyte is read and built into tables for tens of seconds).
 */
export async function installSnapshot(
  s: SnapshotGroup & Pick<ShardReplica, "overtakenBySnapshot">,
  snap: Snapshot,
  listeners: ConfListeners,
  bugs: DriverTestingBugs,
  closing: () => boolean,
): Promise<void> {
  let bytes = 0;
  async function* frames(): AsyncGenerator<Uint8Array> {
    if (snap.stream === undefined) {
      bytes = snap.data.length;
      yield snap.data;
      return;
    }
    for await (const chunk of snap.stream.chunks()) {
      if (closing()) throw new ShuttingDownError();
      bytes += chunk.length;
      yield chunk;
    }
  }
  try {
    const image = expectImageSeq(frames(), snap.meta.index);
    if (bugs.snapshotInstallNotDurable === true) {
      await installSnapshotNotDurably(s.sm.lsm, image, snap.meta.index);
    } else {
      await s.sm.lsm.importSnapshot(image);
    }
  } finally {
    snap.stream?.release();
  }
  s.sm.appliedIndex = snap.meta.index;
  s.storage.conf = snap.meta.conf;
  confChanged(listeners, s.id, snap.meta.conf);
  listeners.observer?.snapshotInstalled?.(s.id, snap.meta.index, bytes);
  // The meta group's state came with the snapshot.
  if (s.id === 0) s.sm.reportMeta();
  s.overtakenBySnapshot(snap.meta.index);
}

/**
 * The shard's state machine at its applied index, with the configuration in force there.
 * Called by the Raft core (synchronously) when a follower needs entries already compacted;
 * between rounds, so no apply is in flight. With `pins` (a transport that streams snapshots:
 * RaftTransport.streamsSnapshots), a stream over the engine's version pinned now
 * (snapshot-pins.ts), which the transport reads and releases; without, the whole image in one
 * buffer (the simulation and the in-process transports of tests).
 */
export function buildSnapshot(
  s: SnapshotGroup,
  wal: LogTerms,
  pins: SnapshotPins | null,
): Snapshot {
  const pin = s.sm.lsm.snapshot();
  let pinned = false;
  try {
    const index = pin.seq;
    const t = wal.term(s.id, index);
    if (t === undefined) {
      throw new CairnError(
        "CAIRN_ERR_SNAPSHOT_UNAVAILABLE",
        `shard ${s.id}: no term for the applied index ${index}`,
      );
    }
    const meta = { index: logIndex(index), term: term(t), conf: s.storage.conf };
    if (pins !== null) {
      pinned = true;
      return { meta, data: EMPTY, stream: pins.stream(s.sm.lsm, pin) };
    }
    const chunks = [...encodeSnapshotFrames(index, s.sm.lsm.scan({ snapshot: pin }))];
    return { meta, data: Buffer.concat(chunks) };
  } finally {
    // A stream took the pin over (and releases it, also when it could not start).
    if (!pinned) pin.release();
  }
}
