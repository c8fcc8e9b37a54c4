/**
 * A follower far behind catches up by a snapshot of a shard much larger than the chunk window,
 * and memory does not grow with the shard (issue 53): three MultiRaft nodes in this process over
 * real sockets, the leader streaming from a pinned engine version, the follower writing to a
 * file and importing from it. What the process holds while the snapshot moves (its anonymous
 * resident memory on Linux: RSS without the pages of mapped files, since the engines read their
 * tables through mappings; elsewhere its live JavaScript memory) is bounded, whatever the
 * shard's size; sender and receiver are both in this process, so the bound covers both.
 *
 * The default shard is 128 MiB (CAIRN_SNAPSHOT_TEST_MIB); `npm run bench:snapshot` runs it at
 * 1 GiB and prints what it measured. CAIRN_SNAPSHOT_TEST_MODE=memory runs the control: the
 * snapshot held whole at both ends, as before issue 53 (measured, not bounded).
 */
import assert from "node:assert/strict";
import { readdirSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { setFlagsFromString } from "node:v8";
import { runInNewContext } from "node:vm";
import type { CairnError } from "../../src/common/errors.ts";
import { GrpcTransport, MultiRaft } from "../../src/replication/index.ts";
import { tempDir } from "../storage/helpers.ts";
import { eventually, type RaftServer, startRaftServer } from "./peer-support.ts";

const MIB = 1024 * 1024;
const SHARD_MIB = Number(process.env["CAIRN_SNAPSHOT_TEST_MIB"] ?? 128);
const VALUE_BYTES = 256 * 1024;
const CHUNK_BYTES = 256 * 1024;
/**
 * What the process's memory may grow by while the snapshot moves: the default shard's size, 128
 * MiB, whatever the shard's (CAIRN_SNAPSHOT_TEST_MIB). Streamed, the growth does not depend on
 * the shard (48–85 MiB at 128 MiB alone, 76 at 1 GiB in bench:snapshot): the transfer's frames
 * and chunk window at each end, and the restarted follower's own (its engine and WAL opened
 * again, and the malloc arenas of its new compaction threads, 11–22 MiB each in
 * /proc/self/smaps); on a loaded CI run it measured 101.5 once, past the 96 MiB this bound was
 * before. Held whole at either end, the snapshot adds the shard's size to that (the control at
 * 128 MiB, both ends: 270–295 MiB).
 */
const BOUND = 128 * MIB;
/** `memory`: the control, snapshots held whole in memory (the transport and service of before). */
const IN_MEMORY = process.env["CAIRN_SNAPSHOT_TEST_MODE"] === "memory";
const IDS = ["n1", "n2", "n3"] as const;
const SHARD = 1;
const enc = new TextEncoder();

setFlagsFromString("--expose-gc");
const gc = runInNewContext("gc") as () => void;

interface Node {
  readonly id: string;
  readonly mr: MultiRaft;
  readonly transport: GrpcTransport;
  readonly server: RaftServer;
  readonly snapshotDir: string;
}

class Cluster {
  readonly nodes = new Map<string, Node>();
  readonly fatals: unknown[] = [];
  readonly #addresses = new Map<string, string>();
  readonly #dir = tempDir("snap-memory");

  async start(id: string): Promise<Node> {
    const dataDir = join(this.#dir, id);
    const snapshotDir = join(dataDir, "incoming-snapshots");
    let mr: MultiRaft | null = null;
    const server = await startRaftServer((from, messages) => mr?.receive(from, messages), {
      clusterId: "c1",
      nodeId: id,
      ...(IN_MEMORY ? {} : { snapshotDir }),
    });
    this.#addresses.set(id, server.address);
    const transport = new GrpcTransport({
      clusterId: "c1",
      nodeId: id,
      peers: (peer) => this.#addresses.get(peer) ?? null,
      initialBackoffMs: 10,
      maxBackoffMs: 200,
      snapshotChunkBytes: CHUNK_BYTES,
      // Not the limit under test: 1 GiB/s.
      snapshotRateBytesPerSec: 1024 * MIB,
    });
    mr = await MultiRaft.open({
      nodeId: id,
      dataDir,
      totalShards: 2,
      tickMs: 10,
      electionTicks: 10,
      heartbeatTicks: 1,
      memtableBytes: 4 * MIB,
      blockCacheBytes: 4 * MIB,
      // The control hides streamsSnapshots: the driver builds each snapshot in one buffer.
      transport: IN_MEMORY
        ? { send: (to, ms, sent) => transport.send(to, ms, sent), flush: () => transport.flush() }
        : transport,
      requestTimeoutMs: 30_000,
      replicasOf: () => IDS,
      observer: { fatal: (err) => this.fatals.push(err) },
    });
    const node = { id, mr, transport, server, snapshotDir };
    this.nodes.set(id, node);
    return node;
  }

  async stop(id: string): Promise<void> {
    const node = this.nodes.get(id);
    if (node === undefined) return;
    this.nodes.delete(id);
    this.#addresses.delete(id);
    node.server.stop();
    await node.transport.close();
    await node.mr.close();
  }

  async stopAll(): Promise<void> {
    for (const id of [...this.nodes.keys()]) await this.stop(id);
    assert.deepEqual(this.fatals, []);
  }

  leader(): Node | undefined {
    return [...this.nodes.values()].find((n) => n.mr.shardInfo(SHARD)?.role === "leader");
  }

  /** Writes through the shard's leader, waiting out elections (bounded). */
  async put(key: Uint8Array, value: Uint8Array): Promise<void> {
    const deadline = performance.now() + 30_000;
    for (;;) {
      const target = this.leader() ?? [...this.nodes.values()][0];
      assert.ok(target !== undefined);
      try {
        const out = await target.mr.put(key, value);
        assert.equal(out.type, "written");
        return;
      } catch (err) {
        const code = (err as CairnError).code;
        const retry =
          code === "CAIRN_ERR_NOT_LEADER" ||
          code === "CAIRN_ERR_PROPOSAL_LOST" ||
          // The engine's flushes fall behind the writes: they come back once it catches up.
          code === "CAIRN_ERR_BACKPRESSURE";
        if (!retry || performance.now() > deadline) throw err;
        await new Promise((r) => setTimeout(r, 10));
      }
    }
  }
}

/** JavaScript's share of the process's memory: the heap and the buffers outside it. */
function jsBytes(): number {
  const m = process.memoryUsage();
  return m.heapUsed + m.arrayBuffers;
}

/**
 * The process's resident anonymous memory (Linux), or 0: RSS without the pages of mapped files
 * (the SSTables a scan reads through their mappings count in RSS, and are not held memory).
 */
function anonBytes(): number {
  try {
    const m = /RssAnon:\s+(\d+) kB/.exec(readFileSync("/proc/self/status", "latin1"));
    return m === null ? 0 : Number(m[1]) * 1024;
  } catch {
    return 0;
  }
}

function keysOfShard(mr: MultiRaft, n: number): Uint8Array[] {
  const keys: Uint8Array[] = [];
  for (let i = 0; keys.length < n; i++) {
    const key = enc.encode(`big-${String(i).padStart(8, "0")}`);
    if (mr.shardOf(key) === SHARD) keys.push(key);
  }
  return keys;
}

describe("snapshot memory", () => {
  it(`a follower catches up by a snapshot of a ${SHARD_MIB} MiB shard; memory stays bounded by the chunk window, not the shard`, async () => {
    const cluster = new Cluster();
    try {
      for (const id of IDS) await cluster.start(id);
      const n1 = cluster.nodes.get("n1");
      assert.ok(n1);
      const keys = keysOfShard(n1.mr, Math.ceil((SHARD_MIB * MIB) / VALUE_BYTES));
      const first = keys[0] as Uint8Array;
      await cluster.put(first, enc.encode("before"));
      const leader = cluster.leader();
      assert.ok(leader);
      const follower = [...cluster.nodes.values()].find((n) => n !== leader);
      assert.ok(follower);
      await eventually("the follower has the shard", async () => {
        const item = await follower.mr.get(first, false);
        return item !== null;
      });
      await cluster.stop(follower.id);

      // The shard grows far past the chunk window while the follower is away.
      const value = (i: number): Uint8Array => Buffer.alloc(VALUE_BYTES, `${i}:`);
      for (let i = 0; i < keys.length; i += 32) {
        await Promise.all(keys.slice(i, i + 32).map((k, j) => cluster.put(k, value(i + j))));
      }
      const now = cluster.leader();
      assert.ok(now);
      // Compacted past the follower's log: it can only catch up by snapshot.
      await now.mr.snapshotShard(SHARD);

      gc();
      const before = jsBytes();
      const rssBefore = process.memoryUsage().rss;
      let peak = before;
      let rawPeak = before;
      let rssPeak = rssBefore;
      const anonBefore = anonBytes();
      let anonPeak = anonBefore;
      // What is live (after a full collection), every 250 ms: the garbage a transfer leaves
      // behind is not what it holds. Anonymous memory is read after the collection too: read
      // before it, it counted the garbage of however long the timer was late, and on a loaded
      // machine (CI, test files side by side) that alone passed the bound (105 MiB held,
      // 52–70 MiB on the same code alone).
      const sampler = setInterval(() => {
        rawPeak = Math.max(rawPeak, jsBytes());
        rssPeak = Math.max(rssPeak, process.memoryUsage().rss);
        gc();
        anonPeak = Math.max(anonPeak, anonBytes());
        peak = Math.max(peak, jsBytes());
      }, 250);
      const started = performance.now();
      const back = await cluster.start(follower.id);
      const last = keys[keys.length - 1] as Uint8Array;
      try {
        await eventually(
          "the follower caught up",
          async () => {
            const item = await back.mr.get(last, false);
            return item !== null && Buffer.from(item.value).equals(value(keys.length - 1));
          },
          600_000,
        );
      } finally {
        clearInterval(sampler);
      }
      const seconds = (performance.now() - started) / 1000;
      gc();
      const afterUsage = process.memoryUsage();
      const after = jsBytes();
      const sent = [...cluster.nodes.values()].reduce(
        (sum, n) => sum + (n.transport.stats()[back.id]?.snapshotBytesSent ?? 0),
        0,
      );
      const growth = peak - before;
      const measured = {
        shardMiB: SHARD_MIB,
        snapshotMiB: +(sent / MIB).toFixed(1),
        seconds: +seconds.toFixed(1),
        liveGrowthMiB: +(growth / MIB).toFixed(1),
        afterGrowthMiB: +((after - before) / MIB).toFixed(1),
        heapAfterMiB: +(afterUsage.heapUsed / MIB).toFixed(1),
        buffersAfterMiB: +(afterUsage.arrayBuffers / MIB).toFixed(1),
        jsGrowthMiB: +((rawPeak - before) / MIB).toFixed(1),
        rssGrowthMiB: +((rssPeak - rssBefore) / MIB).toFixed(1),
        anonRssGrowthMiB: +((anonPeak - anonBefore) / MIB).toFixed(1),
      };
      if (process.env["CAIRN_SNAPSHOT_TEST_MIB"] !== undefined) {
        console.log({ mode: IN_MEMORY ? "memory" : "streamed", ...measured });
      }
      assert.ok(sent >= SHARD_MIB * MIB, `the shard came by snapshot: ${JSON.stringify(measured)}`);
      // Held whole, the snapshot would be in memory at both ends: twice the shard, at least.
      // Streamed, a transfer holds a frame and the chunk window at each end; the rest of the
      // growth is the follower's own (its engine and WAL opened again), whatever the shard.
      // Held: the anonymous memory the process gained (Linux), else its live JavaScript memory,
      // whose buffers count the mapped tables the scans read (file pages, not held memory).
      const held = anonBefore > 0 ? anonPeak - anonBefore : growth;
      if (!IN_MEMORY) {
        assert.ok(held < BOUND, `memory grew with the shard: ${JSON.stringify(measured)}`);
      }
      // Installed: nothing is left pinned at the sender, nor a file at the receiver.
      await eventually("no pin left", () => now.mr.pinnedSnapshots === 0);
      if (!IN_MEMORY) {
        await eventually("no file left", () => readdirSync(back.snapshotDir).length === 0);
      }
      for (const i of [0, Math.floor(keys.length / 2)]) {
        const item = await back.mr.get(keys[i] as Uint8Array, false);
        assert.ok(item !== null && Buffer.from(item.value).equals(value(i)));
      }
    } finally {
      await cluster.stopAll();
    }
  });
});
