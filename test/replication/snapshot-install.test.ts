/**
 * A snapshot's install in the follower's driver and its WAL (docs/raft.md, driver invariant 7):
 * the engine takes the snapshot first, then the round records it in the WAL; nothing between
 * may make durable a WAL that disagrees with itself. In-memory file system (crash()) and
 * engines, the node's own driver, a transport that sends nothing.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { logIndex, type Message, nodeId, term } from "../../src/raft/index.ts";
import { MemoryEngine } from "../../src/replication/memory-engine.ts";
import {
  MultiRaft,
  type MultiRaftOptions,
  type ShardMessage,
} from "../../src/replication/multi-raft.ts";
import type { ShardEngine } from "../../src/replication/engine.ts";
import { encodeSnapshotFrames, MemoryFileSystem } from "../../src/storage/index.ts";
import { tempDir } from "../storage/helpers.ts";
import { eventually } from "./peer-support.ts";

const [n1, n2, n3] = [nodeId("n1"), nodeId("n2"), nodeId("n3")];
const conf = { voters: [n1, n2, n3], learners: [] };

/** An engine whose imports wait for `gate` (`started` set once one does). */
function heldImports(
  engine: ShardEngine,
  gate: Promise<void>,
  started: { importing: boolean },
): ShardEngine {
  return new Proxy(engine, {
    get(target, p) {
      if (p === "importSnapshot") {
        return async (chunks: AsyncIterable<Uint8Array>) => {
          started.importing = true;
          await gate;
          return target.importSnapshot(chunks);
        };
      }
      const v: unknown = Reflect.get(target, p, target);
      return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
}

/**
 * Node n2 over `fs`, shard 2's imports held until `release()`; its shards 1 and 2 hold entries
 * 4..6 from n1, acknowledged.
 */
async function followerWithHeldImports(fs: MemoryFileSystem) {
  let release: () => void = () => undefined;
  const gate = new Promise<void>((resolve) => (release = resolve));
  const started = { importing: false };
  const sent: ShardMessage[] = [];
  const acked = (id: number, index: number): boolean =>
    sent.some(
      (m) => m.shard === id && m.message.type === "append-resp" && m.message.index === index,
    );
  const mr = await MultiRaft.open(
    options(
      fs,
      async (shard, dir) => {
        const engine = await MemoryEngine.open(fs, dir);
        return shard === 2 ? heldImports(engine, gate, started) : engine;
      },
      sent,
    ),
  );
  mr.receive("n1", [
    { shard: 1, message: append() },
    { shard: 2, message: append() },
  ]);
  // Acknowledged once durable.
  await eventually("both followers hold entries 4..6", () => acked(1, 6) && acked(2, 6));
  return { mr, started, acked, release: () => release() };
}

/** Node n2, a follower of shards 1 and 2 (replicas n1, n2, n3), over `fs`; `sent` hears it. */
function options(
  fs: MemoryFileSystem,
  openEngine: NonNullable<MultiRaftOptions["openEngine"]>,
  sent: ShardMessage[] = [],
) {
  return { ...onDisk("/data", sent), fs, openEngine } satisfies MultiRaftOptions;
}

/** The same node with its WAL and LSM engines in `dataDir`, on the disk. */
function onDisk(dataDir: string, sent: ShardMessage[] = []) {
  return {
    nodeId: "n2",
    dataDir,
    totalShards: 4,
    tickMs: 1_000_000,
    electionTicks: 10,
    heartbeatTicks: 1,
    memtableBytes: 64 * 1024,
    blockCacheBytes: 1 << 20,
    transport: {
      send: (_to: string, messages: readonly ShardMessage[]) => void sent.push(...messages),
      flush: () => undefined,
    },
    replicasOf: () => ["n1", "n2", "n3"],
  } satisfies MultiRaftOptions;
}

/** n1's entries 4..6 (term 1) after the founding ones, its commit still at the founding's 3. */
function append(): Message {
  return appendAfter(3, 3);
}

/** n1's three entries (term 1) after `prev`, with commit `commit`. */
function appendAfter(prev: number, commit: number): Message {
  const entries = [prev + 1, prev + 2, prev + 3].map((i) => ({
    term: term(1),
    index: logIndex(i),
    type: "normal" as const,
    data: new Uint8Array(0),
  }));
  return {
    type: "append",
    from: n1,
    to: n2,
    term: term(1),
    prevIndex: logIndex(prev),
    prevTerm: term(1),
    entries,
    commit: logIndex(commit),
    noReply: false,
  };
}

function snapshot(index: number): Message {
  return snapshotOf(index, Buffer.concat([...encodeSnapshotFrames(index, [])]));
}

/** A snapshot at `index` from n1 whose image is `image` (another index's, in some tests). */
function snapshotOf(index: number, image: Uint8Array, streamed = false): Message {
  const meta = { index: logIndex(index), term: term(1), conf };
  const stream = {
    chunks: async function* (): AsyncGenerator<Uint8Array> {
      yield image;
    },
    release: () => undefined,
  };
  return {
    type: "snapshot",
    from: n1,
    to: n2,
    term: term(1),
    snapshot: streamed ? { meta, data: new Uint8Array(0), stream } : { meta, data: image },
  };
}

describe("a snapshot's install", () => {
  it("lets no WAL compaction past the commit the WAL records between a snapshot's install and the round that records it: a crash then leaves a WAL that opens", async () => {
    // Shard 1's snapshot is in its engine, and the WAL does not record it yet: the round that
    // does comes after the install. A maintenance pass then compacted shard 1's log to its
    // engine's new flushed index bounded by the Raft core's commit, which the snapshot had
    // moved, while the WAL's hard state still said 3: past it, up to 6. Made durable by the
    // pass's sync, a crash before the round's write left a log compacted beyond its recorded
    // commit, which the shard refuses to open ("persisted commit outside"). The pass runs
    // exactly there: from the engine's import, once it is done.
    const fs = new MemoryFileSystem();
    const sent: ShardMessage[] = [];
    let pass: () => Promise<void> = () => Promise.resolve();
    let passed = false;
    const passAfterImport = (engine: ShardEngine): ShardEngine =>
      new Proxy(engine, {
        get(target, p) {
          if (p === "importSnapshot") {
            return async (chunks: AsyncIterable<Uint8Array>) => {
              await target.importSnapshot(chunks);
              await pass();
              passed = true;
              fs.crash();
            };
          }
          const v: unknown = Reflect.get(target, p, target);
          return typeof v === "function" ? (v as (...a: unknown[]) => unknown).bind(target) : v;
        },
      });
    const mr = await MultiRaft.open(
      options(
        fs,
        async (shard, dir) => {
          const engine = await MemoryEngine.open(fs, dir);
          return shard === 1 ? passAfterImport(engine) : engine;
        },
        sent,
      ),
    );
    pass = () => mr.maintain();
    try {
      mr.receive("n1", [{ shard: 1, message: append() }]);
      // Acknowledged once durable.
      await eventually("the follower holds entries 4..6", () =>
        sent.some(
          (m) => m.shard === 1 && m.message.type === "append-resp" && m.message.index === 6,
        ),
      );
      mr.receive("n1", [{ shard: 1, message: snapshot(100) }]);
      await eventually("a pass ran between the install and its record", () => passed);
    } finally {
      await mr.close().catch(() => undefined);
    }
    const again = await MultiRaft.open(options(fs, (_shard, dir) => MemoryEngine.open(fs, dir)));
    try {
      assert.ok(again.holds(1), "shard 1 opened again");
      assert.equal(again.failure, undefined);
    } finally {
      await again.close();
    }
  });

  it("holds no other shard's round while one installs a snapshot: theirs are acknowledged meanwhile, its own once installed, and both open again", async () => {
    // The round awaited every install: while shard 2's engine took a snapshot (a gigabyte
    // takes seconds), shard 1's appends were neither written nor acknowledged, nor any other
    // group's on the node.
    const fs = new MemoryFileSystem();
    const { mr, started, acked, release } = await followerWithHeldImports(fs);
    try {
      mr.receive("n1", [{ shard: 2, message: snapshot(100) }]);
      await eventually("shard 2's import started", () => started.importing);
      mr.receive("n1", [{ shard: 1, message: appendAfter(6, 6) }]);
      await eventually("shard 1 holds entries 7..9 while shard 2 imports", () => acked(1, 9));
      assert.equal(acked(2, 100), false, "shard 2 acknowledges its snapshot only once installed");
      release();
      await eventually("shard 2 acknowledges its snapshot", () => acked(2, 100));
      assert.equal(mr.failure, undefined);
      // Shard 2 goes on from the snapshot.
      mr.receive("n1", [{ shard: 2, message: appendAfter(100, 100) }]);
      await eventually("shard 2 holds entries 101..103", () => acked(2, 103));
    } finally {
      release();
      await mr.close();
    }
    const again = await MultiRaft.open(options(fs, (_shard, dir) => MemoryEngine.open(fs, dir)));
    try {
      assert.ok(again.holds(1) && again.holds(2), "both shards opened again");
      assert.equal(again.failure, undefined);
    } finally {
      await again.close();
    }
  });

  it("drops a snapshot whose image is at another index than it says before its Raft core takes it: unacknowledged, uninstalled, the node unharmed", async () => {
    // Such a snapshot (a peer's bug, or a hostile peer's, through a Stream frame or a transport
    // in this process; InstallSnapshot's receiver checks it) was acknowledged and installed:
    // an image above its index failed the node at the next entry's apply ("sequence 11 is not
    // above the last one (20)") and made the replica skip the entries between after a
    // restart; one below it kept the node from starting.
    const fs = new MemoryFileSystem();
    const sent: ShardMessage[] = [];
    const fatals: unknown[] = [];
    const acked = (index: number): boolean =>
      sent.some(
        (m) => m.shard === 1 && m.message.type === "append-resp" && m.message.index === index,
      );
    const mr = await MultiRaft.open({
      ...options(fs, (_shard, dir) => MemoryEngine.open(fs, dir), sent),
      observer: { fatal: (err) => fatals.push(err) },
    });
    try {
      mr.receive("n1", [{ shard: 1, message: append() }]);
      await eventually("the follower holds entries 4..6", () => acked(6));
      const at20 = Buffer.concat([...encodeSnapshotFrames(20, [])]);
      mr.receive("n1", [
        { shard: 1, message: snapshotOf(10, at20) }, // an image above its index
        { shard: 1, message: snapshotOf(30, at20) }, // below it
        { shard: 1, message: snapshotOf(40, new Uint8Array(0)) }, // none
      ]);
      // The next append, after them, is taken where the log was: they changed nothing.
      mr.receive("n1", [{ shard: 1, message: appendAfter(6, 9) }]);
      await eventually("the follower holds entries 7..9", () => acked(9));
      await eventually("it applied them", () => mr.shardInfo(1)?.applied === 9);
      assert.equal(acked(10) || acked(30) || acked(40), false, "no snapshot acknowledged");
      assert.deepEqual(fatals, []);
      assert.equal(mr.failure, undefined);
    } finally {
      await mr.close();
    }
  });

  it("refuses to install an image at another index than its snapshot's: the engine is left as it was", async () => {
    // A streamed image was checked whole by its receiver (SnapshotAssembler) and gets past the
    // driver's check of an image in memory: should one still differ, the install refuses it at
    // its header, before the engine replaces anything. The Raft core has taken the snapshot by
    // then, and only a restart undoes that: the node fails, as for any failed install.
    const fs = new MemoryFileSystem();
    const sent: ShardMessage[] = [];
    const fatals: unknown[] = [];
    const opts = {
      ...options(fs, (_shard, dir) => MemoryEngine.open(fs, dir), sent),
      observer: { fatal: (err: unknown) => fatals.push(err) },
    };
    const mr = await MultiRaft.open(opts);
    try {
      mr.receive("n1", [{ shard: 1, message: appendAfter(3, 6) }]);
      await eventually("the follower holds entries 4..6", () =>
        sent.some(
          (m) => m.shard === 1 && m.message.type === "append-resp" && m.message.index === 6,
        ),
      );
      await eventually("it applied them", () => mr.shardInfo(1)?.applied === 6);
      await mr.snapshotShard(1); // its engine's image at 6, on disk
      const before = await fs.readdir("/data/shards/1");
      const at20 = Buffer.concat([...encodeSnapshotFrames(20, [])]);
      mr.receive("n1", [{ shard: 1, message: snapshotOf(10, at20, true) }]);
      await eventually("the install failed", () => fatals.length > 0);
      assert.match(String(fatals[0]), /image is at sequence 20, not at 10/);
      assert.equal(
        sent.some((m) => m.message.type === "append-resp" && m.message.index >= 10),
        false,
        "not acknowledged",
      );
      assert.deepEqual(await fs.readdir("/data/shards/1"), before, "the engine kept its image");
    } finally {
      await mr.close().catch(() => undefined);
    }
    const again = await MultiRaft.open(options(fs, (_shard, dir) => MemoryEngine.open(fs, dir)));
    try {
      assert.equal(again.failure, undefined);
      assert.equal(again.shardInfo(1)?.applied, 6, "opened as before the snapshot");
    } finally {
      await again.close();
    }
  });

  // Each engine: the driver's memory engine, and the LSM a node runs.
  const engines = {
    memory: (sent: ShardMessage[] = []): MultiRaftOptions => {
      const fs = new MemoryFileSystem();
      return options(fs, (_shard, dir) => MemoryEngine.open(fs, dir), sent);
    },
    LSM: (sent: ShardMessage[] = []): MultiRaftOptions => onDisk(tempDir("snap-install"), sent),
  };
  for (const [name, engine] of Object.entries(engines)) {
    it(`stops at close() a snapshot's install under way, rather than reading its whole image first: the snapshot unrecorded, the shard opens again as it was (${name})`, async () => {
      // close() waited for every install to end: a node told to stop while it installed a
      // large snapshot (a gigabyte is read and built into tables for tens of seconds) went on
      // until the whole image was in. An import stopped before its end leaves the engine as it
      // was, and the WAL records the snapshot only after the install: the leader sends it
      // again.
      const sent: ShardMessage[] = [];
      const fatals: unknown[] = [];
      const opts = engine(sent);
      const mr = await MultiRaft.open({ ...opts, observer: { fatal: (err) => fatals.push(err) } });
      // An image at 100 read back in 1 KiB chunks, each a turn of the event loop after the one
      // before (as a file is).
      const key = (i: number): Buffer => Buffer.from(`key-${String(i).padStart(4, "0")}`);
      const entries: [Uint8Array, Uint8Array][] = [];
      for (let i = 0; i < 200; i++) entries.push([key(i), Buffer.alloc(1000, i)]);
      const image = Buffer.concat([...encodeSnapshotFrames(100, entries)]);
      const total = Math.ceil(image.length / 1024);
      let read = 0;
      // Resolved as the install reads its first chunk: close() is called then, not at a poll
      // of `read` (on an idle machine the whole image went by within one poll's interval).
      let started = (): void => {};
      const installing = new Promise<void>((resolve) => (started = resolve));
      const stream = {
        async *chunks(): AsyncGenerator<Uint8Array> {
          for (let at = 0; at < image.length; at += 1024) {
            await new Promise<void>((resolve) => setImmediate(resolve));
            read++;
            if (read === 1) started();
            yield image.subarray(at, at + 1024);
          }
        },
        release: () => undefined,
      };
      const meta = { index: logIndex(100), term: term(1), conf };
      try {
        mr.receive("n1", [{ shard: 1, message: appendAfter(3, 6) }]);
        await eventually("the follower holds entries 4..6", () =>
          sent.some(
            (m) => m.shard === 1 && m.message.type === "append-resp" && m.message.index === 6,
          ),
        );
        await eventually("it applied them", () => mr.shardInfo(1)?.applied === 6);
        await mr.snapshotShard(1); // its engine's image at 6, on disk
        const snapshot: Message = {
          type: "snapshot",
          from: n1,
          to: n2,
          term: term(1),
          snapshot: { meta, data: new Uint8Array(0), stream },
        };
        mr.receive("n1", [{ shard: 1, message: snapshot }]);
        await installing;
      } finally {
        await mr.close();
      }
      assert.ok(read < total, `close() waited for the whole image: ${read} of ${total} chunks`);
      assert.deepEqual(fatals, [], "stopping an install fails nothing");
      const again = await MultiRaft.open(opts);
      try {
        assert.equal(again.failure, undefined);
        assert.equal(again.shardInfo(1)?.applied, 6, "opened as before the snapshot");
      } finally {
        await again.close();
      }
    });
  }
});
