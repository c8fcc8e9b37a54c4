/**
 * Admin.TransferLeader without a meta group (transferInPlace: a single node, a shard worker's own
 * shards), over a real single-node MultiRaft: what it answers, and that asking changes nothing it
 * was not asked to change. And in a cluster (transferLeadership), over gRPC: a refusal reaches
 * the client as itself, not as a timeout.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { credentials, type ServiceError, status } from "@grpc/grpc-js";
import { RpcServer, toServiceError, transferInPlace } from "../../src/api/index.ts";
import type { AdminClient } from "../../src/api/generated/cairn/v1/Admin.ts";
import { ClusterViewPublisher, MetaState } from "../../src/cluster/index.ts";
import { loadConfig } from "../../src/config/index.ts";
import { ClusterState, transferLeadership } from "../../src/node/cluster.ts";
import { CairnMetrics, silentLogger } from "../../src/ops/index.ts";
import type { MultiRaft } from "../../src/replication/index.ts";
import { FollowerStore, LIMITS, openLeaderStore, proto, TOTAL_SHARDS } from "./forward-support.ts";

let dir: string;
let store: MultiRaft;

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "cairn-admin-"));
  store = await openLeaderStore(dir);
});

after(async () => {
  await store.close();
  await rm(dir, { recursive: true, force: true });
});

async function answer(id: number, to: string): Promise<{ code: number; cairnCode?: string }> {
  try {
    await transferInPlace(store, id, to);
    return { code: status.OK };
  } catch (err) {
    const e = toServiceError(err);
    return { code: e.code ?? -1, cairnCode: String(e.metadata?.get("cairn-error-code")[0]) };
  }
}

describe("Admin.TransferLeader on a single node", () => {
  it("refuses a shard that holds no data here, as SnapshotShard does, and creates nothing", async () => {
    const before = store.shardIds();
    assert.ok(!before.includes(5) && !before.includes(6));
    // A typo's node, and this node itself: the shard has no group here, no leader to move.
    assert.deepEqual(await answer(5, "nX"), {
      code: status.FAILED_PRECONDITION,
      cairnCode: "CAIRN_ERR_SHARD_NOT_ACTIVE",
    });
    assert.deepEqual(await answer(6, "n1"), {
      code: status.FAILED_PRECONDITION,
      cairnCode: "CAIRN_ERR_SHARD_NOT_ACTIVE",
    });
    assert.deepEqual(store.shardIds(), before, "no shard was opened to answer");
  });

  it("refuses a shard id past total_shards as INVALID_ARGUMENT, as SnapshotShard does", async () => {
    for (const id of [TOTAL_SHARDS, 2 ** 32 - 1]) {
      assert.deepEqual(await answer(id, "n1"), {
        code: status.INVALID_ARGUMENT,
        cairnCode: "CAIRN_ERR_INVALID_ARGUMENT",
      });
    }
  });

  it("answers the leader of a shard that holds data, and refuses a node that is not its replica", async () => {
    await store.put(Buffer.from("k"), Buffer.from("v"));
    const id = store.shardIds().find((s) => s !== 0) ?? 0;
    assert.equal(await transferInPlace(store, id, "n1"), "n1");
    assert.deepEqual(await answer(id, "nX"), {
      code: status.INVALID_ARGUMENT,
      cairnCode: "CAIRN_ERR_INVALID_ARGUMENT",
    });
  });
});

describe("Admin.TransferLeader in a cluster, over gRPC", () => {
  it("a node that holds no replica of the shard answers FAILED_PRECONDITION, CAIRN_ERR_PRECONDITION, at once: not DEADLINE_EXCEEDED", async () => {
    // Node n2 of four; shard 5 on n1, n3 and n4.
    const member = (i: number): { id: string; rpcAddr: string; httpAddr: string } => ({
      id: `n${i}`,
      rpcAddr: `127.0.0.1:700${i}`,
      httpAddr: `127.0.0.1:800${i}`,
    });
    let meta = MetaState.empty();
    for (const cmd of [
      {
        op: "bootstrap" as const,
        clusterId: "c1",
        totalShards: 1024,
        replicationFactor: 3,
        members: [1, 2, 3, 4].map(member),
      },
      { op: "create-shard" as const, shard: 5, replicas: ["n1", "n3", "n4"] },
    ]) {
      meta = meta.apply(cmd).state;
    }
    const config = loadConfig({
      env: { CAIRN_NODE_ID: "n2", CAIRN_SEED_NODES: "127.0.0.1:7001" },
    });
    const cluster = new ClusterState(
      config,
      silentLogger,
      new ClusterViewPublisher(1024),
      "inc-2",
      () => undefined,
    );
    cluster.applied(meta);
    cluster.attach({ propose: () => Promise.resolve() });
    const store = new FollowerStore("n1");
    const server = new RpcServer({
      address: "127.0.0.1:0",
      nodeId: "n2",
      store,
      metrics: new CairnMetrics({ nodeId: "n2" }),
      views: new ClusterViewPublisher(TOTAL_SHARDS),
      logger: silentLogger,
      limits: LIMITS,
      maxMessageBytes: 4 * 1024 * 1024,
      transferLeader: (id, to) =>
        transferLeadership(cluster, store as unknown as MultiRaft, id, to, 10_000),
    });
    const { port } = await server.start();
    const admin = new proto.cairn.v1.Admin(
      `127.0.0.1:${port}`,
      credentials.createInsecure(),
    ) as unknown as AdminClient;
    try {
      const started = performance.now();
      const err = await new Promise<ServiceError | null>((resolve) =>
        admin.TransferLeader(
          { shard_id: 5, node_id: "n3" },
          { deadline: Date.now() + 20_000 },
          (e) => resolve(e),
        ),
      );
      assert.equal(err?.code, status.FAILED_PRECONDITION, err?.details);
      assert.equal(err.metadata.get("cairn-error-code")[0], "CAIRN_ERR_PRECONDITION");
      assert.match(err.details, /n2 holds no replica of shard 5.*n1, n3, n4/);
      assert.ok(performance.now() - started < 5_000, "refused, not timed out");
      // A shard id past total_shards: the caller's mistake, as SnapshotShard answers it.
      const past = await new Promise<ServiceError | null>((resolve) =>
        admin.TransferLeader(
          { shard_id: 1024, node_id: "n3" },
          { deadline: Date.now() + 20_000 },
          (e) => resolve(e),
        ),
      );
      assert.equal(past?.code, status.INVALID_ARGUMENT, past?.details);
      assert.match(past.details, /shard id must be in \[0, 1023\], got 1024/);
    } finally {
      admin.close();
      await server.close(1000);
    }
  });
});
