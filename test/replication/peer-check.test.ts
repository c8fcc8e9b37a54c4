/**
 * Who may call the peers' service (cairn.v1.Raft) of a node that knows its cluster: a current
 * member other than itself, naming the node's cluster (a member that does not know it yet may
 * still open streams and propose its rejoin). Over real sockets, behind grpc-js's server and the
 * front end. Not authentication: anyone who reads Meta.WatchCluster can pass (docs/architecture.md).
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type ServiceError, status } from "@grpc/grpc-js";
import { nodeId } from "../../src/raft/index.ts";
import { GrpcTransport } from "../../src/replication/index.ts";
import {
  handshakeRefusal,
  ownHandshake,
  type PeerMembership,
  peerRefusal,
} from "../../src/replication/handshake.ts";
import {
  countingServer,
  eventually,
  heartbeat,
  type LogLine,
  N2,
  RAFT_SERVERS,
  rawUnary,
  recordingLogger,
} from "./peer-support.ts";

const MEMBERS = new Set(["n1", "n2", "n3"]);
/** n1–n3 are members, n9 was removed for good, any other node is not known here. */
const membership = (node: string): PeerMembership =>
  MEMBERS.has(node) ? "member" : node === "n9" ? "removed" : "unknown";

describe("peerRefusal", () => {
  const check = { clusterId: "c1", self: N2, membership };
  it("accepts a member naming this cluster", () => {
    assert.equal(peerRefusal("n1", "c1", check, true), null);
  });
  it("refuses a call that names no sender, or this node itself (PERMISSION_DENIED)", () => {
    assert.equal(peerRefusal("", "c1", check, false)?.code, status.PERMISSION_DENIED);
    assert.equal(peerRefusal("n2", "c1", check, false)?.code, status.PERMISSION_DENIED);
  });
  it("refuses a node removed for good, with or without the cluster id (PERMISSION_DENIED)", () => {
    for (const theirs of ["c1", ""]) {
      const refusal = peerRefusal("n9", theirs, check, false);
      assert.equal(refusal?.code, status.PERMISSION_DENIED);
      assert.match(refusal?.reason ?? "", /not a member/);
      assert.equal(refusal?.kind, "not_member");
    }
  });
  it("accepts a node not known here that names this cluster: a member that joined since (chaos seed 103)", () => {
    // This node's meta state is behind (it was down while n4 joined), and n4 may be the meta
    // group's leader now: refusing it kept this node from ever learning of it.
    assert.equal(peerRefusal("n4", "c1", check, true), null);
    const refusal = peerRefusal("n4", "", check, false);
    assert.equal(refusal?.code, status.PERMISSION_DENIED, "unknown, and naming no cluster");
    assert.equal(refusal?.kind, "not_member");
  });
  it("refuses a member without the cluster id where the call needs one", () => {
    assert.equal(peerRefusal("n1", "", check, false), null, "a stream, a rejoin");
    const refusal = peerRefusal("n1", "", check, true);
    assert.equal(refusal?.code, status.PERMISSION_DENIED);
    assert.equal(refusal?.kind, "no_cluster_id");
  });
  it("keeps another cluster's id a configuration mistake (FAILED_PRECONDITION), naming neither id", () => {
    const refusal = peerRefusal("n1", "c2", check, false);
    assert.equal(refusal?.code, status.FAILED_PRECONDITION);
    assert.match(refusal?.reason ?? "", /cluster id mismatch/);
    assert.doesNotMatch(refusal?.reason ?? "", /c1|c2/);
  });
  it("accepts any other node while this node does not know its cluster (founding, rejoining)", () => {
    const fresh = { clusterId: "", self: N2, membership: (): PeerMembership => "removed" };
    assert.equal(peerRefusal("n9", "", fresh, true), null);
    assert.equal(peerRefusal("n9", "c7", fresh, true), null);
    assert.equal(peerRefusal("n2", "", fresh, true)?.code, status.PERMISSION_DENIED);
  });
});

describe("ownHandshake", () => {
  it("names this node, the receiver, and the replica only when it is not the node", () => {
    assert.deepEqual(ownHandshake("c1", nodeId("n1"), nodeId("n1"), N2), {
      cluster_id: "c1",
      from_node_id: "n1",
      to_node_id: "n2",
      from_replica_id: "",
    });
    assert.equal(ownHandshake("c1", nodeId("n1"), nodeId("n1@ab"), N2).from_replica_id, "n1@ab");
  });
  it("reads the cluster id as it is now, and passes the receiver's own check", () => {
    let id = "";
    const source = (): string => id;
    assert.equal(ownHandshake(source, nodeId("n1"), nodeId("n1"), N2).cluster_id, "");
    id = "c1";
    const hs = ownHandshake(source, nodeId("n1"), nodeId("n1@ab"), N2);
    assert.equal(hs.cluster_id, "c1");
    assert.equal(handshakeRefusal(hs, { clusterId: "c1", self: N2, membership }), null);
  });
});

for (const [receiver, startRaftServer] of RAFT_SERVERS) {
  describe(`the peers' service checks who calls (receiver: ${receiver})`, () => {
    it("refuses a stream from a node that is not a member (PERMISSION_DENIED), logged on both ends", async () => {
      let delivered = 0;
      const serverLines: LogLine[] = [];
      const server = await startRaftServer(() => delivered++, {
        clusterId: "c1",
        nodeId: "n2",
        membership,
        logger: recordingLogger(serverLines),
      });
      const lines: LogLine[] = [];
      const stranger = new GrpcTransport({
        clusterId: "c1",
        nodeId: "n9",
        peers: () => server.address,
        logger: recordingLogger(lines),
      });
      const member = new GrpcTransport({
        clusterId: "",
        nodeId: "n1",
        peers: () => server.address,
      });
      try {
        stranger.send(N2, [heartbeat("n9")]);
        await eventually("the refusal", () =>
          lines.some((l) => l.message === "raft peer refused the stream"),
        );
        const refusal = lines.find((l) => l.message === "raft peer refused the stream");
        assert.equal(refusal?.level, "warn");
        assert.equal(refusal?.fields["code"], "PERMISSION_DENIED");
        assert.match(String(refusal?.fields["details"]), /not a member/);
        const logged = serverLines.find((l) => l.message === "raft stream refused");
        assert.equal(logged?.fields["code"], "PERMISSION_DENIED");
        assert.ok(!JSON.stringify(logged?.fields).includes("c1"), "no cluster id in the log");
        assert.equal(delivered, 0);
        // A member that does not know the cluster id yet (founding, a wiped data directory).
        member.send(N2, [heartbeat("n1")]);
        await eventually("a member's frame delivered", () => delivered === 1);
      } finally {
        await stranger.close();
        await member.close();
        server.stop();
      }
    });

    it("answers a unary call only from a member naming the cluster (PERMISSION_DENIED otherwise)", async () => {
      const asked: string[] = [];
      const proposed: Uint8Array[] = [];
      const server = await startRaftServer(() => undefined, {
        clusterId: "c1",
        nodeId: "n2",
        membership,
        confirmTerms: (checks) => {
          asked.push("confirm");
          return checks.map(() => true);
        },
        proposeMeta: async (command) => {
          proposed.push(command);
        },
      });
      const transport = (node: string, clusterId: string): GrpcTransport =>
        new GrpcTransport({ clusterId, nodeId: node, peers: () => server.address });
      const member = transport("n1", "c1");
      const unknowing = transport("n3", "");
      const stranger = transport("n9", "c1");
      const checks = [{ shard: 3, term: 7, replica: "n2" }];
      try {
        assert.deepEqual(await member.confirmTerms(N2, checks, 5_000), [true]);
        await assert.rejects(stranger.confirmTerms(N2, checks, 5_000), (err: ServiceError) => {
          assert.equal(err.code, status.PERMISSION_DENIED);
          assert.match(err.details, /not a member/);
          return true;
        });
        await assert.rejects(unknowing.confirmTerms(N2, checks, 5_000), (err: ServiceError) => {
          assert.equal(err.code, status.PERMISSION_DENIED);
          assert.match(err.details, /cluster id/);
          return true;
        });
        assert.deepEqual(asked, ["confirm"], "refused calls are not served");
        // A member that lost its data directory proposes its rejoin without the cluster id.
        await unknowing.proposeMeta(N2, new Uint8Array([1]), 5_000);
        await assert.rejects(stranger.proposeMeta(N2, new Uint8Array([2]), 5_000), {
          code: status.PERMISSION_DENIED,
        });
        assert.equal(proposed.length, 1);
      } finally {
        await member.close();
        await unknowing.close();
        await stranger.close();
        server.stop();
      }
    });

    it("refuses a unary call without cairn-peer metadata (PERMISSION_DENIED)", async () => {
      const server = await countingServer(startRaftServer, { membership });
      try {
        const err = await rawUnary(
          server.address,
          "ConfirmTerms",
          { cluster_id: "c1", shard_ids: [1], terms: [1], replicas: ["n2"] },
          null,
        );
        assert.equal(err?.code, status.PERMISSION_DENIED);
        assert.equal(server.served, 0);
      } finally {
        server.stop();
      }
    });
  });
}
