/**
 * A received snapshot's file goes once no install will take it (docs/raft.md, invariant 7): here
 * the two cases an audit (2026-12-05) found leaking it until the next start. Real RawNodes,
 * ShardReplicas, WALs and SnapshotFiles (files in a temp directory).
 */
import assert from "node:assert/strict";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, describe, it } from "node:test";
import { seededRng } from "../../src/common/rng.ts";
import {
  logIndex,
  MemoryStorage,
  type Message,
  nodeId,
  RawNode,
  term,
} from "../../src/raft/index.ts";
import { MemoryEngine } from "../../src/replication/memory-engine.ts";
import { Removal } from "../../src/replication/multi-raft-removal.ts";
import { ShardReplica } from "../../src/replication/shard.ts";
import { SnapshotFile } from "../../src/replication/snapshot-file.ts";
import { KvStateMachine } from "../../src/replication/state-machine.ts";
import { WalRaftStorage } from "../../src/replication/wal-storage.ts";
import { MemoryFileSystem, Wal } from "../../src/storage/index.ts";
import { eventually } from "./peer-support.ts";

const [a, b, c] = [nodeId("a"), nodeId("b"), nodeId("c")];

/** Node b's replica of shard 1, a follower of a, b and c. */
async function follower(): Promise<{
  raw: RawNode;
  shard: ShardReplica;
  wal: Wal;
  fs: MemoryFileSystem;
}> {
  const fs = new MemoryFileSystem();
  const raw = new RawNode({
    id: b,
    storage: MemoryStorage.bootstrap([a, b, c]),
    rng: seededRng(1),
  });
  const wal = await Wal.open("/wal", { fs, segmentBytes: 4096 });
  const sm = new KvStateMachine(await MemoryEngine.open(fs, "/data/shards/1"));
  const shard = new ShardReplica(1, raw, sm, new WalRaftStorage(wal, 1), false, 0);
  return { raw, shard, wal, fs };
}

/** A snapshot as the receiver hands it over: its data in a file of `dir`. */
async function received(
  dir: string,
  from: string,
  t: number,
  index: number,
): Promise<{ path: string; message: Message }> {
  const file = new SnapshotFile(dir);
  file.write(Buffer.from(`image at ${index}`));
  await file.close();
  const { data, stream } = file.result();
  const message: Message = {
    type: "snapshot",
    from: nodeId(from),
    to: b,
    term: term(t),
    snapshot: {
      meta: { index: logIndex(index), term: term(t), conf: { voters: [a, b, c], learners: [] } },
      data,
      stream,
    },
  };
  return { path: file.path, message };
}

describe("a received snapshot's file", () => {
  // Each test's snapshot directory, removed at the end (two were left in /tmp at every run).
  const dirs: string[] = [];
  const tempDir = (): string => {
    const dir = mkdtempSync(join(tmpdir(), "cairn-snap-release-"));
    dirs.push(dir);
    return dir;
  };
  after(() => {
    for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
  });

  it("goes when a newer snapshot in the same round replaces it in the core", async () => {
    // The old leader's (term 2) and the new leader's (term 3): the core installs only the
    // newer; the older, pending until then, was neither installed nor released.
    const dir = tempDir();
    const { raw, shard } = await follower();
    const older = await received(dir, "a", 2, 10);
    const newer = await received(dir, "c", 3, 20);
    shard.enqueueStep(older.message);
    shard.enqueueStep(newer.message);
    shard.drainInbox(0, 1000);
    assert.ok(newer.message.type === "snapshot");
    assert.equal(raw.pendingSnapshot(), newer.message.snapshot, "the newer one is to install");
    await eventually("the replaced snapshot's file is gone", () => !existsSync(older.path), 2000);
    assert.ok(existsSync(newer.path), "the pending snapshot's file is kept for its install");
  });

  it("goes when the replica is removed while the snapshot waits for its round", async () => {
    const dir = tempDir();
    const { shard, wal, fs } = await follower();
    const { path, message } = await received(dir, "a", 2, 10);
    shard.enqueueStep(message); // as Peers.receive does, for the next round
    const removal = new Removal({
      options: { dataDir: "/data", transport: { send() {}, flush() {} } as never, fs },
      observer: undefined,
      shards: new Map([[1, shard]]) as never,
      wal,
      snapshotPins: null,
      sleep: { setTicking() {} },
      whenRoundsIdle: () => Promise.resolve(),
      placedOn: () => ["n4"],
      opening: () => false,
      markDirty() {},
      stopped: () => false,
      fail: (err) => assert.fail(String(err)),
    });
    assert.equal((await removal.remove(1, () => Promise.resolve(true))).kind, "removed");
    await eventually("the queued snapshot's file is gone", () => !existsSync(path), 2000);
  });
});
