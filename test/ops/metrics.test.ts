import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { GOSSIP_LATENCY_BUCKETS_MS } from "../../src/membership/index.ts";
import { CairnMetrics, KV_DURATION_BUCKETS_MS } from "../../src/ops/index.ts";
import { COMPACTION_DURATION_BUCKETS_MS } from "../../src/storage/index.ts";
import { CATALOGUE, checkHistogram, familyTypes, type Sample, samples } from "./prom-text.ts";

function fresh(): CairnMetrics {
  return new CairnMetrics({
    nodeId: "n1",
    processStats: () => ({ cpuSeconds: 1.25, residentBytes: 123_456_789 }),
  });
}

function find(
  list: readonly Sample[],
  name: string,
  labels: Record<string, string> = {},
): Sample[] {
  return list.filter(
    (s) => s.name === name && Object.entries(labels).every(([k, v]) => s.labels[k] === v),
  );
}

function valueOf(
  list: readonly Sample[],
  name: string,
  labels: Record<string, string> = {},
): number {
  const found = find(list, name, labels);
  assert.equal(found.length, 1, `one ${name} ${JSON.stringify(labels)}, got ${found.length}`);
  return found[0]?.value ?? NaN;
}

describe("CairnMetrics", () => {
  it("exports all 13 catalogue families with their types before any observation", async () => {
    const text = await fresh().expose();
    const types = familyTypes(text);
    for (const [name, type] of CATALOGUE) {
      assert.equal(types.get(name), type, `${name} is exported as a ${type}`);
      assert.match(text, new RegExp(`^# HELP ${name} \\S`, "m"));
    }
    const extra = [...types.keys()].filter((n) => !CATALOGUE.some(([c]) => c === n));
    assert.deepEqual(
      extra.filter((n) => !n.startsWith("cairn_")),
      [],
      "extras are named cairn_*",
    );
  });

  it("uses exactly the catalogue's label names on every series", async () => {
    const m = fresh();
    m.initShard(0);
    m.lsmMetrics.sstableCount(0, 0, 1);
    m.lsmMetrics.compactionDuration(0, "success", 3);
    m.membershipMetrics.observeGossipLatencyMs(2);
    const all = samples(await m.expose());
    for (const [name, , labels] of CATALOGUE) {
      const series = all.filter((s) => s.name === name || s.name.startsWith(`${name}_`));
      assert.ok(series.length > 0, `${name} has series`);
      for (const s of series) {
        const names = Object.keys(s.labels)
          .filter((l) => l !== "le")
          .sort();
        assert.deepEqual(names, [...labels].sort(), `${s.name} labels`);
      }
    }
  });

  it("has the exact histogram bounds, with _bucket/_sum/_count per series", async () => {
    const m = fresh();
    m.recordKv("put", "success", 3);
    m.lsmMetrics.compactionDuration(1, "success", 40);
    m.membershipMetrics.observeGossipLatencyMs(0.5);
    const text = await m.expose();
    assert.deepEqual(KV_DURATION_BUCKETS_MS, [1, 2, 4, 8, 16, 32, 64, 128, 256, 512]);
    assert.equal(checkHistogram(text, "kv_request_duration_ms", KV_DURATION_BUCKETS_MS), 29);
    assert.equal(
      checkHistogram(text, "lsm_compaction_duration_ms", COMPACTION_DURATION_BUCKETS_MS),
      12,
    );
    assert.equal(checkHistogram(text, "swim_gossip_latency_ms", GOSSIP_LATENCY_BUCKETS_MS), 1);
  });

  it("starts every known KV and compaction series at zero, and swim_cluster_size at 1", async () => {
    const all = samples(await fresh().expose());
    assert.equal(find(all, "kv_requests_total").length, 28); // 4 operations × 7 statuses
    assert.ok(find(all, "kv_requests_total").every((s) => s.value === 0));
    assert.deepEqual(
      find(all, "kv_request_duration_ms_count", { operation: "get", status: "success" })
        .map((s) => s.labels["result"])
        .sort(),
      ["found", "not_found"],
    );
    assert.equal(
      valueOf(all, "kv_request_duration_ms_count", { operation: "put", status: "success" }),
      0,
    );
    assert.equal(
      valueOf(all, "lsm_compaction_duration_ms_count", { level: "L0", result: "error" }),
      0,
    );
    assert.equal(valueOf(all, "swim_cluster_size"), 1);
    assert.equal(valueOf(all, "swim_failed_members_total"), 0);
    assert.equal(valueOf(all, "swim_gossip_latency_ms_count"), 0);
  });

  it("records KV requests with status and result", async () => {
    const m = fresh();
    m.recordKv("get", "success", 0.5, "found");
    m.recordKv("get", "success", 3, "not_found");
    m.recordKv("get", "not_leader", 1.5, "found"); // result ignored off successful gets
    m.recordKv("put", "error", 700);
    const all = samples(await m.expose());
    assert.equal(valueOf(all, "kv_requests_total", { operation: "get", status: "success" }), 2);
    assert.equal(valueOf(all, "kv_requests_total", { operation: "get", status: "not_leader" }), 1);
    assert.equal(valueOf(all, "kv_requests_total", { operation: "put", status: "error" }), 1);
    const found = { operation: "get", status: "success", result: "found" };
    assert.equal(valueOf(all, "kv_request_duration_ms_bucket", { ...found, le: "1" }), 1);
    assert.equal(valueOf(all, "kv_request_duration_ms_sum", found), 0.5);
    const notLeader = { operation: "get", status: "not_leader", result: "" };
    assert.equal(valueOf(all, "kv_request_duration_ms_count", notLeader), 1);
    const slow = { operation: "put", status: "error", result: "" };
    assert.equal(valueOf(all, "kv_request_duration_ms_bucket", { ...slow, le: "512" }), 0);
    assert.equal(valueOf(all, "kv_request_duration_ms_bucket", { ...slow, le: "+Inf" }), 1);
    assert.throws(() => m.recordKv("get", "success", 1), TypeError);
  });

  it("feeds the LSM families from the storage hooks (failure becomes error)", async () => {
    const m = fresh();
    m.lsmMetrics.memtableSize(7, 4096);
    m.lsmMetrics.sstableCount(7, 0, 3);
    m.lsmMetricsFor(9).sstableCount(123, 2, 5); // bound to shard 9
    m.lsmMetrics.compactionDuration(0, "failure", 20);
    m.lsmMetrics.compactionDuration(6, "success", 20);
    const all = samples(await m.expose());
    assert.equal(valueOf(all, "lsm_memtable_size_bytes", { shard_id: "7" }), 4096);
    assert.equal(valueOf(all, "lsm_sstable_count", { shard_id: "7", level: "L0" }), 3);
    assert.equal(valueOf(all, "lsm_sstable_count", { shard_id: "9", level: "L2" }), 5);
    assert.equal(
      valueOf(all, "lsm_compaction_duration_ms_count", { level: "L0", result: "error" }),
      1,
    );
    assert.equal(
      valueOf(all, "lsm_compaction_duration_ms_count", { level: "L6", result: "success" }),
      1,
    );
    assert.equal(find(all, "lsm_compaction_duration_ms_count", { result: "failure" }).length, 0);
  });

  it("reads the memtables' current sizes at each scrape from the source the node gives", async () => {
    const m = fresh();
    m.initShard(3);
    m.initShard(9);
    const sizes = new Map([
      [3, 1000],
      [9, 0],
    ]);
    m.setMemtableSource(() => sizes.entries());
    let all = samples(await m.expose());
    assert.equal(valueOf(all, "lsm_memtable_size_bytes", { shard_id: "3" }), 1000);
    assert.equal(valueOf(all, "lsm_memtable_size_bytes", { shard_id: "9" }), 0);
    sizes.set(9, 250);
    all = samples(await m.expose());
    assert.equal(valueOf(all, "lsm_memtable_size_bytes", { shard_id: "9" }), 250);
  });

  it("reads the tables per level at each scrape, and keeps only the source's shards", async () => {
    const m = fresh();
    m.lsmMetrics.sstableCount(4, 0, 7); // an engine's push, before the node gives its source
    const tables = new Map<number, number[]>([
      [3, [2, 0, 1]],
      [9, [0, 0, 0]],
    ]);
    m.setSstableSource(() => tables.entries());
    let all = samples(await m.expose());
    assert.equal(valueOf(all, "lsm_sstable_count", { shard_id: "3", level: "L0" }), 2);
    assert.equal(valueOf(all, "lsm_sstable_count", { shard_id: "3", level: "L2" }), 1);
    assert.equal(valueOf(all, "lsm_sstable_count", { shard_id: "9", level: "L1" }), 0);
    assert.equal(all.filter((x) => x.labels["shard_id"] === "4").length, 0);
    tables.set(9, [1, 0, 0]);
    tables.delete(3);
    all = samples(await m.expose());
    assert.equal(valueOf(all, "lsm_sstable_count", { shard_id: "9", level: "L0" }), 1);
    assert.equal(
      all.filter((x) => x.name === "lsm_sstable_count" && x.labels["shard_id"] === "3").length,
      0,
    );
  });

  it("tracks Raft state per shard and drops a removed shard's series", async () => {
    const m = fresh();
    m.initShard(0);
    m.initShard(5);
    m.setRaftState(5, "n1", 3, 42);
    m.incLeaderChanges(5);
    m.incLeaderChanges(5);
    m.lsmMetrics.sstableCount(5, 1, 2);
    let all = samples(await m.expose());
    assert.equal(valueOf(all, "raft_term", { shard_id: "5" }), 3);
    assert.equal(valueOf(all, "raft_commit_index", { shard_id: "5", node_id: "n1" }), 42);
    assert.equal(valueOf(all, "raft_leader_changes_total", { shard_id: "5" }), 2);
    assert.equal(valueOf(all, "raft_term", { shard_id: "0" }), 0);
    assert.equal(valueOf(all, "lsm_memtable_size_bytes", { shard_id: "0" }), 0);
    // Recorded per round, exported at each scrape: the next scrape shows the latest round.
    m.setRaftState(5, "n1", 4, 50);
    all = samples(await m.expose());
    assert.equal(valueOf(all, "raft_term", { shard_id: "5" }), 4);
    assert.equal(valueOf(all, "raft_commit_index", { shard_id: "5", node_id: "n1" }), 50);
    m.removeShard(5);
    all = samples(await m.expose());
    assert.equal(all.filter((s) => s.labels["shard_id"] === "5").length, 0);
    assert.equal(valueOf(all, "raft_term", { shard_id: "0" }), 0);
  });

  it("exports the meta state's placement work left: 0 without a cluster, then its counts", async () => {
    const m = fresh();
    let all = samples(await m.expose());
    assert.equal(valueOf(all, "cairn_cluster_shards_moving"), 0);
    assert.equal(valueOf(all, "cairn_cluster_shards_underreplicated"), 0);
    assert.equal(valueOf(all, "cairn_cluster_members_disk_full"), 0);
    let work: { moving: number; underReplicated: number; diskFull: number } | null = null;
    m.setPlacementSource(() => work);
    all = samples(await m.expose());
    assert.equal(valueOf(all, "cairn_cluster_shards_moving"), 0);
    work = { moving: 4, underReplicated: 250, diskFull: 1 };
    all = samples(await m.expose());
    assert.equal(valueOf(all, "cairn_cluster_shards_moving"), 4);
    assert.equal(valueOf(all, "cairn_cluster_shards_underreplicated"), 250);
    assert.equal(valueOf(all, "cairn_cluster_members_disk_full"), 1);
  });

  it("feeds the SWIM families from the membership hooks", async () => {
    const m = fresh();
    m.membershipMetrics.onClusterSize(3);
    m.membershipMetrics.onMemberFailed();
    m.membershipMetrics.observeGossipLatencyMs(3);
    m.membershipMetrics.onDatagramDropped("truncated");
    const all = samples(await m.expose());
    assert.equal(valueOf(all, "swim_cluster_size"), 3);
    assert.equal(valueOf(all, "swim_failed_members_total"), 1);
    assert.equal(valueOf(all, "swim_gossip_latency_ms_bucket", { le: "4" }), 1);
    assert.equal(valueOf(all, "swim_gossip_latency_ms_bucket", { le: "2" }), 0);
    assert.equal(valueOf(all, "cairn_swim_dropped_datagrams_total", { reason: "truncated" }), 1);
  });

  it("feeds the cairn_raft_snapshot* extras from the peer transport's hooks, failures at 0 first", async () => {
    const m = fresh();
    let all = samples(await m.expose());
    assert.equal(valueOf(all, "cairn_raft_snapshots_failed_total", { direction: "send" }), 0);
    assert.equal(valueOf(all, "cairn_raft_snapshots_failed_total", { direction: "receive" }), 0);
    m.snapshotMetrics.bytesSent(1024);
    m.snapshotMetrics.bytesSent(512);
    m.snapshotMetrics.sent();
    m.snapshotMetrics.received();
    m.snapshotMetrics.failed("send");
    m.snapshotMetrics.failed("receive");
    m.snapshotMetrics.failed("receive");
    all = samples(await m.expose());
    assert.equal(valueOf(all, "cairn_raft_snapshots_sent_total"), 1);
    assert.equal(valueOf(all, "cairn_raft_snapshot_sent_bytes_total"), 1536);
    assert.equal(valueOf(all, "cairn_raft_snapshots_received_total"), 1);
    assert.equal(valueOf(all, "cairn_raft_snapshots_failed_total", { direction: "send" }), 1);
    assert.equal(valueOf(all, "cairn_raft_snapshots_failed_total", { direction: "receive" }), 2);
  });

  it("counts the Raft frames, messages and heartbeats sent per peer, the awake groups and the WAL's writes", async () => {
    const m = fresh();
    m.raftFrameSent("n2", 40, 38);
    m.raftFrameSent("n2", 3, 0);
    m.raftFrameSent("n3", 1, 1);
    m.setAwakeGroups(7);
    m.walWritten(0.3, 1000);
    m.walWritten(40, 24);
    const all = samples(await m.expose());
    assert.equal(valueOf(all, "cairn_wal_write_duration_seconds_count"), 2);
    assert.equal(valueOf(all, "cairn_wal_write_duration_seconds_bucket", { le: "0.0005" }), 1);
    assert.equal(valueOf(all, "cairn_wal_write_duration_seconds_bucket", { le: "0.05" }), 2);
    assert.equal(valueOf(all, "cairn_wal_write_duration_seconds_sum"), 0.0403);
    assert.equal(valueOf(all, "cairn_wal_written_bytes_total"), 1024);
    assert.equal(valueOf(all, "cairn_raft_frames_sent_total", { peer: "n2" }), 2);
    assert.equal(valueOf(all, "cairn_raft_messages_sent_total", { peer: "n2" }), 43);
    assert.equal(valueOf(all, "cairn_raft_heartbeats_sent_total", { peer: "n2" }), 38);
    assert.equal(valueOf(all, "cairn_raft_heartbeats_sent_total", { peer: "n3" }), 1);
    assert.equal(valueOf(all, "cairn_raft_awake_groups"), 7);
  });

  it("removes the series of a peer that left for good, keeps the other peers', and counts no frame sent to it after", async () => {
    const m = fresh();
    m.raftFrameSent("n2", 4, 3);
    m.raftFrameSent("n3", 1, 1);
    const peers = async (): Promise<string[]> =>
      samples(await m.expose())
        .filter((s) => s.name.startsWith("cairn_raft_") && s.labels["peer"] !== undefined)
        .map((s) => `${s.name}{${s.labels["peer"]}}`)
        .sort();
    assert.deepEqual(await peers(), [
      "cairn_raft_frames_sent_total{n2}",
      "cairn_raft_frames_sent_total{n3}",
      "cairn_raft_heartbeats_sent_total{n2}",
      "cairn_raft_heartbeats_sent_total{n3}",
      "cairn_raft_messages_sent_total{n2}",
      "cairn_raft_messages_sent_total{n3}",
    ]);
    // n2 decommissioned or removed (the node's meta state says so from now on).
    m.setGonePeers((peer) => peer === "n2");
    m.removePeer("n2");
    const left = [
      "cairn_raft_frames_sent_total{n3}",
      "cairn_raft_heartbeats_sent_total{n3}",
      "cairn_raft_messages_sent_total{n3}",
    ];
    assert.deepEqual(await peers(), left);
    // A frame still sent to it (an answer to a replica it left behind) brings nothing back.
    m.raftFrameSent("n2", 1, 0);
    assert.deepEqual(await peers(), left);
    m.raftFrameSent("n3", 2, 0);
    assert.equal(
      valueOf(samples(await m.expose()), "cairn_raft_messages_sent_total", { peer: "n3" }),
      3,
    );
  });

  it("reads the WAL's unwritten bytes at each scrape (0 without a source)", async () => {
    const m = fresh();
    assert.equal(valueOf(samples(await m.expose()), "cairn_wal_unwritten_bytes"), 0);
    let unwritten = 180;
    m.setWalSource(() => unwritten);
    assert.equal(valueOf(samples(await m.expose()), "cairn_wal_unwritten_bytes"), 180);
    unwritten = 0;
    assert.equal(valueOf(samples(await m.expose()), "cairn_wal_unwritten_bytes"), 0);
  });

  it("reads rpc_addr's open and refused connections and streams at each scrape (0 without a source)", async () => {
    const m = fresh();
    let all = samples(await m.expose());
    const node = { reason: "node" };
    const address = { reason: "address" };
    assert.equal(valueOf(all, "cairn_rpc_connections"), 0);
    assert.equal(valueOf(all, "cairn_rpc_connections_refused_total", node), 0);
    assert.equal(valueOf(all, "cairn_rpc_connections_refused_total", address), 0);
    const count = {
      open: 16,
      refused: { node: 25, address: 3 },
      openStreams: 4,
      refusedStreams: 2,
      incoming: 7,
      refusedIncoming: 1,
      tooSlow: 5,
    };
    m.setConnectionSource(count);
    all = samples(await m.expose());
    assert.equal(valueOf(all, "cairn_rpc_connections"), 16);
    assert.equal(valueOf(all, "cairn_rpc_connections_refused_total", node), 25);
    assert.equal(valueOf(all, "cairn_rpc_connections_refused_total", address), 3);
    assert.equal(valueOf(all, "cairn_rpc_client_streams"), 4);
    assert.equal(valueOf(all, "cairn_rpc_client_streams_refused_total"), 2);
    assert.equal(valueOf(all, "cairn_rpc_incoming_request_bytes"), 7);
    assert.equal(valueOf(all, "cairn_rpc_incoming_refused_total"), 1);
    assert.equal(valueOf(all, "cairn_rpc_requests_too_slow_total"), 5);
    Object.assign(count, { open: 1, refused: { node: 30, address: 3 } });
    all = samples(await m.expose());
    assert.equal(valueOf(all, "cairn_rpc_connections"), 1);
    assert.equal(valueOf(all, "cairn_rpc_connections_refused_total", node), 30);
  });

  it("computes the process families at scrape time", async () => {
    const injected = samples(await fresh().expose());
    assert.equal(valueOf(injected, "process_cpu_seconds_total"), 1.25);
    assert.equal(valueOf(injected, "process_resident_memory_bytes"), 123_456_789);
    const real = new CairnMetrics({ nodeId: "n1" });
    const first = valueOf(samples(await real.expose()), "process_cpu_seconds_total");
    let x = 0;
    for (let i = 0; i < 2e6; i++) x += i; // burn a little CPU
    assert.ok(x > 0);
    const all = samples(await real.expose());
    assert.ok(valueOf(all, "process_cpu_seconds_total") >= first);
    assert.ok(first > 0);
    assert.ok(valueOf(all, "process_resident_memory_bytes") > 1024 * 1024);
  });

  it("keeps registries of two nodes apart", async () => {
    const a = fresh();
    const b = fresh();
    a.recordKv("put", "success", 1);
    const bPuts = valueOf(samples(await b.expose()), "kv_requests_total", {
      operation: "put",
      status: "success",
    });
    assert.equal(bPuts, 0);
  });
});
