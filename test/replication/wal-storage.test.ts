/**
 * A shard's Raft state as its WAL gives it back at open (WalRaftStorage): real WALs on an
 * in-memory file system, reopened as a restart reopens them.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { seededRng } from "../../src/common/rng.ts";
import { nodeId, RawNode } from "../../src/raft/index.ts";
import { WalRaftStorage } from "../../src/replication/wal-storage.ts";
import { MemoryFileSystem, Wal, type WalRecord } from "../../src/storage/index.ts";

const [a, b, c] = [nodeId("a"), nodeId("b"), nodeId("c")];
const CONF = { voters: [a, b, c], learners: [] };
const SHARD = 1;

/** A WAL that made `records` durable, reopened as after a restart. */
async function reopened(records: WalRecord[]): Promise<Wal> {
  const fs = new MemoryFileSystem();
  const wal = await Wal.open("/wal", { fs, segmentBytes: 4096 });
  wal.append(records);
  await wal.sync();
  await wal.close();
  return Wal.open("/wal", { fs, segmentBytes: 4096 });
}

describe("WalRaftStorage at open", () => {
  // A round installing a snapshot appends its mark, then its hard state, in one write. A power
  // cut that tore the write between the two kept the mark and an earlier round's hard state:
  // commit 10 under a snapshot at 13, and the replica's Raft core refused to start ("persisted
  // commit 10 outside [13, 13]"): the node could not open its data (driver simulation, seed
  // 990000 of five nodes).
  const mark: WalRecord = {
    kind: "snapshot",
    shard: SHARD,
    meta: { index: 13, term: 5, data: new Uint8Array(0) },
  };

  it("raises a commit index below a durable snapshot's to the snapshot's, keeping term and vote", async () => {
    const wal = await reopened([
      { kind: "hard-state", shard: SHARD, state: { term: 4, vote: "a", commit: 10 } },
      mark,
    ]);
    try {
      const storage = new WalRaftStorage(wal, SHARD, CONF);
      assert.deepEqual(storage.initialState().hardState, { term: 4, vote: "a", commit: 13 });
      const raw = new RawNode({ id: b, storage, rng: seededRng(1) });
      assert.equal(raw.commitIndex, 13);
    } finally {
      await wal.close();
    }
  });

  it("gives the snapshot's index as the commit when no hard state was ever durable", async () => {
    const wal = await reopened([mark]);
    try {
      const storage = new WalRaftStorage(wal, SHARD, CONF);
      assert.deepEqual(storage.initialState().hardState, { term: 0, vote: null, commit: 13 });
      const raw = new RawNode({ id: b, storage, rng: seededRng(1) });
      assert.equal(raw.commitIndex, 13);
    } finally {
      await wal.close();
    }
  });

  it("leaves a commit index at or above the snapshot's as it is", async () => {
    const wal = await reopened([
      mark,
      { kind: "hard-state", shard: SHARD, state: { term: 5, vote: null, commit: 13 } },
    ]);
    try {
      const storage = new WalRaftStorage(wal, SHARD, CONF);
      assert.deepEqual(storage.initialState().hardState, { term: 5, vote: null, commit: 13 });
    } finally {
      await wal.close();
    }
  });
});
