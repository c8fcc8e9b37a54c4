/**
 * A member's data directory records its cluster id outside shard 0 (src/node/cluster-id.ts). A
 * member whose shard 0 directory was lost (moved aside as corrupt, or removed) restarts knowing no
 * meta state until its peers refill shard 0; it took any peer's handshake meanwhile (handshake.ts
 * accepts everything while the id is unknown), so a node of another cluster (a seed list or an
 * address pointing at the wrong cluster) could feed it Raft messages and snapshots, for shard 0
 * or any other, and have it join that cluster or mix its data into this one's. With the record it
 * refuses a handshake naming another cluster, and still takes its own cluster's refill.
 */
import assert from "node:assert/strict";
import { writeFileSync } from "node:fs";
import { join } from "node:path";
import { describe, it } from "node:test";
import { ClusterViewPublisher, type MetaMember, MetaState } from "../../src/cluster/index.ts";
import { loadConfig } from "../../src/config/index.ts";
import { ClusterState } from "../../src/node/cluster.ts";
import { CLUSTER_ID_FILE, readClusterIdRecord } from "../../src/node/cluster-id.ts";
import { silentLogger } from "../../src/ops/index.ts";
import { nodeId } from "../../src/raft/index.ts";
import { handshakeRefusal, type PeerCheck } from "../../src/replication/handshake.ts";
import { tempDir } from "../storage/helpers.ts";

const N2: MetaMember = { id: "n2", rpcAddr: "127.0.0.1:7002", httpAddr: "127.0.0.1:8002" };

/** n2 on `dataDir`, as node.ts makes it: the record read before shard 0 opens. */
async function node(dataDir: string): Promise<{ cs: ClusterState; views: ClusterViewPublisher }> {
  const config = loadConfig({
    env: { CAIRN_NODE_ID: "n2", CAIRN_SEED_NODES: "127.0.0.1:7001", CAIRN_DATA_DIR: dataDir },
  });
  const views = new ClusterViewPublisher(1024);
  const cs = new ClusterState(config, silentLogger, views, "inc-a", () => undefined);
  await cs.loadClusterIdRecord(true);
  return { cs, views };
}

/** What n2's peer service checks a handshake against (node.ts's raft service). */
function peerCheck(cs: ClusterState): PeerCheck {
  return {
    clusterId: cs.peerClusterId,
    self: nodeId("n2"),
    membership: (id) => (cs.meta?.stateOf(id) === undefined ? "unknown" : "member"),
  };
}

const handshake = (clusterId: string): Parameters<typeof handshakeRefusal>[0] => ({
  cluster_id: clusterId,
  from_node_id: "n1",
  to_node_id: "n2",
  from_replica_id: "",
});

describe("a member's record of its cluster id", () => {
  it("refuses another cluster's handshake while shard 0 is refilled, and takes its own", async () => {
    const dir = tempDir("cluster-id");
    const before = await node(dir);
    before.cs.applied(
      MetaState.empty().apply({
        op: "bootstrap",
        clusterId: "c1",
        totalShards: 1024,
        replicationFactor: 3,
        members: [N2],
      }).state,
    );
    await before.cs.clusterIdRecorded();
    assert.equal(await readClusterIdRecord(dir), "c1");

    // Restarted with shard 0's directory lost: no meta state until its peers refill it.
    const { cs: after, views } = await node(dir);
    assert.equal(after.meta, null);
    assert.equal(after.acceptsReplica(0), true, "shard 0 is still refilled");
    const other = handshakeRefusal(handshake("c-other"), peerCheck(after));
    assert.equal(other?.kind, "other_cluster", "accepted a handshake of another cluster");
    assert.equal(handshakeRefusal(handshake("c1"), peerCheck(after)), null, "its own cluster");
    assert.equal(views.current().cluster_id, "c1", "its view names its cluster");
  });

  it("takes a record that does not check as none (any handshake, as before)", async () => {
    const dir = tempDir("cluster-id");
    writeFileSync(join(dir, CLUSTER_ID_FILE), "c1\ncrc32c 00000000\n");
    const { cs } = await node(dir);
    assert.equal(cs.peerClusterId, "");
    assert.equal(handshakeRefusal(handshake("c-other"), peerCheck(cs)), null);
  });

  it("keeps the first cluster id it recorded", async () => {
    const dir = tempDir("cluster-id");
    const { cs } = await node(dir);
    assert.equal(await readClusterIdRecord(dir), "");
    const boot = (clusterId: string): MetaState =>
      MetaState.empty().apply({
        op: "bootstrap",
        clusterId,
        totalShards: 1024,
        replicationFactor: 3,
        members: [N2],
      }).state;
    cs.applied(boot("c1"));
    cs.applied(boot("c2"));
    await cs.clusterIdRecorded();
    assert.equal(await readClusterIdRecord(dir), "c1");
  });
});
