/**
 * A routing CairnClient learns a shard's leader from the `cairn-served-by` trailer of an answer,
 * for the shards its cluster view does not list (a node's view lists the shards it holds a
 * replica of: about 3/n of them in a cluster of n > 3 nodes). Over real gRPC on loopback: a
 * leader (a real single-node MultiRaft behind an RpcServer) and a node that holds no replica
 * and forwards every call to it; the client's one endpoint is that node, whose view lists both
 * members and no shard.
 */
import assert from "node:assert/strict";
import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { after, before, describe, it } from "node:test";
import { RpcServer } from "../../src/api/index.ts";
import { CairnClient } from "../../src/client/index.ts";
import { ClusterViewPublisher, shardForKey } from "../../src/cluster/index.ts";
import { CairnMetrics, silentLogger } from "../../src/ops/index.ts";
import type { MultiRaft } from "../../src/replication/index.ts";
import { FollowerStore, LIMITS, openLeaderStore, TOTAL_SHARDS } from "../api/forward-support.ts";

let dir: string;
let store: MultiRaft;
const servers: RpcServer[] = [];
const addresses = new Map<string, string>();
const far = new FollowerStore("n1", false);
const views = new ClusterViewPublisher(TOTAL_SHARDS, { minIntervalMs: 0 });

async function serve(id: string, s: RpcServer): Promise<void> {
  servers.push(s);
  addresses.set(id, `127.0.0.1:${(await s.start()).port}`);
}

before(async () => {
  dir = await mkdtemp(join(tmpdir(), "cairn-leader-cache-"));
  store = await openLeaderStore(dir);
  const common = {
    address: "127.0.0.1:0",
    logger: silentLogger,
    limits: LIMITS,
    maxMessageBytes: 4 * 1024 * 1024,
  };
  await serve(
    "n1",
    new RpcServer({
      ...common,
      nodeId: "n1",
      store,
      metrics: new CairnMetrics({ nodeId: "n1" }),
      views: new ClusterViewPublisher(TOTAL_SHARDS),
    }),
  );
  await serve(
    "n2",
    new RpcServer({
      ...common,
      nodeId: "n2",
      store: far,
      metrics: new CairnMetrics({ nodeId: "n2" }),
      views,
      forward: { nodeId: "n2", addressOf: (n: string) => addresses.get(n) ?? null },
    }),
  );
  views.setMembers(
    ["n1", "n2"].map((id) => ({
      id,
      rpc_addr: addresses.get(id) ?? "",
      http_addr: "",
      state: "alive" as const,
    })),
  );
});

after(async () => {
  for (const s of servers) await s.close(1000);
  await store.close();
  await rm(dir, { recursive: true, force: true });
});

/** Waits (2 s at most) until `client`'s view, n2's, lists `shard`. */
async function listed(client: CairnClient, shard: number): Promise<void> {
  for (let i = 0; i < 200 && !client.view?.shards.some((s) => s.id === shard); i++)
    await new Promise((r) => setTimeout(r, 10));
  assert.ok(
    client.view?.shards.some((s) => s.id === shard),
    "the client follows n2's view",
  );
}

describe("a routing client's leaders learnt from answers", () => {
  it("sends a shard's calls to the leader that served the last one, not through the forwarding node", async () => {
    const client = new CairnClient({ endpoints: [addresses.get("n2") ?? ""] });
    try {
      for (let i = 0; i < 200 && client.view?.nodes.length !== 2; i++)
        await new Promise((r) => setTimeout(r, 10));
      assert.equal(client.view?.nodes.length, 2, "the client follows n2's view");
      assert.equal(client.view?.shards.length, 0, "n2's view lists no shard");

      await client.put("a", "1"); // to n2, forwarded to n1, which serves it and says so
      assert.equal(far.calls, 1);
      await client.put("a", "2");
      assert.equal(await client.getString("a"), "2");
      await client.delete("a");
      assert.equal(far.calls, 1, "the shard's later calls went straight to n1");

      const enc = new TextEncoder();
      assert.notEqual(
        shardForKey(enc.encode("b"), TOTAL_SHARDS),
        shardForKey(enc.encode("a"), TOTAL_SHARDS),
      );
      await client.put("b", "1"); // another shard: not learnt yet
      assert.equal(far.calls, 2);
    } finally {
      client.close();
    }
  });

  it("trusts the leader that served the last call over the one the view names", async () => {
    const client = new CairnClient({ endpoints: [addresses.get("n2") ?? ""] });
    try {
      const shard = shardForKey(new TextEncoder().encode("d"), TOTAL_SHARDS);
      // As a node's view names the leader of a shard it no longer holds a replica of: as it was
      // when the replica moved off (here n2, which forwards), after the leadership moved on.
      views.setShard({ id: shard, leader: "n2", replicas: ["n1", "n2"], term: 3 });
      await listed(client, shard);
      const before = far.calls;
      await client.put("d", "1"); // to n2 as the view says, forwarded to n1, which says so
      assert.equal(far.calls, before + 1);
      await client.put("d", "2");
      assert.equal(await client.getString("d"), "2");
      assert.equal(far.calls, before + 1, "the shard's later calls went straight to n1");
    } finally {
      client.close();
    }
  });

  it("sends a call for a shard the view lists with no leader to its first-ranked node", async () => {
    const client = new CairnClient({ endpoints: [addresses.get("n2") ?? ""] });
    try {
      const shard = shardForKey(new TextEncoder().encode("c"), TOTAL_SHARDS);
      // As a node's view lists a shard it holds no replica of: where it is placed, no leader.
      views.setShard({ id: shard, leader: "", replicas: ["n1", "n2"], term: 0 });
      await listed(client, shard);
      const before = far.calls;
      await client.put("c", "1");
      assert.equal(await client.getString("c"), "1");
      assert.equal(far.calls, before, "straight to n1, the shard's first-ranked node");
    } finally {
      client.close();
    }
  });

  it("sends a cleartext token to loopback addresses only, routed calls included", async () => {
    // Without TLS the nodes take a token only on loopback: one sent off the host has already
    // crossed the network unsealed. The client followed a member's address wherever it was.
    assert.throws(
      () => new CairnClient({ endpoints: ["192.0.2.1:7447"], token: "a-token-of-enough-length" }),
      /cross the network in cleartext to 192\.0\.2\.1:7447/,
    );
    const n2 = addresses.get("n2") ?? "";
    views.setMembers(
      [
        { id: "n1", rpc_addr: addresses.get("n1") ?? "" },
        { id: "n2", rpc_addr: n2 },
        { id: "n3", rpc_addr: "192.0.2.1:7447" }, // TEST-NET-1: off the host
      ].map((m) => ({ ...m, http_addr: "", state: "alive" as const })),
    );
    const client = new CairnClient({
      endpoints: [n2],
      token: "a-token-of-enough-length",
      maxAttempts: 1,
      timeoutMs: 2000,
    });
    try {
      const shard = shardForKey(new TextEncoder().encode("t"), TOTAL_SHARDS);
      views.setShard({ id: shard, leader: "n3", replicas: ["n1", "n2", "n3"], term: 4 });
      await listed(client, shard);
      await client.put("t", "1"); // to n2, the endpoint, never to n3's address
      assert.equal(await client.getString("t"), "1");
    } finally {
      client.close();
    }
  });
});
