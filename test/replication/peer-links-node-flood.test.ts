/**
 * A real node flooded with senders its meta state does not know (a security review's probe, on
 * a two-node cluster in cleartext: shard 0 has two voters): streams of the peers' service, each under a new node id
 * that names the cluster's id (any client reads it from Meta.WatchCluster), each carrying one
 * stale-term heartbeat, which the node answers (handshake.ts: such a sender may be a member
 * that joined while the node was behind). Before, each invented id left a link and three metric
 * series behind, for good (10,000 ids: /metrics from 742 KB to 5.2 MB). Now every sender is
 * still answered, and the per-peer series of unknown ids stop at UNKNOWN_PEER_SERIES, the rest
 * counted under peer="_other"; one that then joins the cluster gets series of its own.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import {
  Client,
  type ClientWritableStream,
  credentials,
  Metadata,
  type ServiceError,
} from "@grpc/grpc-js";
import { loadRaftProto } from "../../src/api/proto.ts";
import { BUILD_VERSION, encodeMetaCommand, replicaIdOf } from "../../src/cluster/index.ts";
import { logIndex, nodeId, term } from "../../src/raft/index.ts";
import { encodeBatchFrame, encodeHandshakeFrame } from "../../src/replication/frame-encode.ts";
import { OTHER_PEERS, UNKNOWN_PEER_SERIES } from "../../src/ops/metrics.ts";
import { samples } from "../ops/prom-text.ts";
import { clusterView, eventually, withLocalCluster } from "../support/cluster-process.ts";

const FLOOD = 10 * UNKNOWN_PEER_SERIES;
/** Streams open at once. */
const WAVE = 40;
const raw = (b: Buffer): Buffer => b;

/**
 * One stream to `address` as node `from`, carrying one heartbeat at term 0 for the node's
 * replica `to` in shard 0 (older than any term it has: it answers with its own), half-closed at
 * once; resolves with the stream's outcome.
 */
function staleHeartbeat(
  client: Client,
  cluster: string,
  from: string,
  node: string,
  to: string,
): Promise<ServiceError | null> {
  return new Promise((resolve) => {
    const md = new Metadata();
    md.set("cairn-peer", from);
    const call: ClientWritableStream<Buffer> = client.makeClientStreamRequest(
      loadRaftProto().cairn.v1.Raft.service.Stream.path,
      raw,
      raw,
      md,
      (err: ServiceError | null) => resolve(err),
    );
    call.write(
      encodeHandshakeFrame({
        cluster_id: cluster,
        from_node_id: from,
        to_node_id: node,
        from_replica_id: "",
      }),
    );
    const message = {
      type: "heartbeat",
      from: nodeId(from),
      to: nodeId(to),
      term: term(0),
      commit: logIndex(0),
      readSeq: 0,
      quiesce: false,
      noReply: false,
    } as const;
    call.write(encodeBatchFrame([{ shard: 0, message }], to));
    call.end();
  });
}

/** The frames the node counts per `peer` value (cairn_raft_frames_sent_total). */
async function framesByPeer(http: string): Promise<Map<string, number>> {
  const text = await (await fetch(`http://${http}/metrics`)).text();
  const out = new Map<string, number>();
  for (const s of samples(text)) {
    const peer = s.labels["peer"];
    if (s.name === "cairn_raft_frames_sent_total" && peer !== undefined) out.set(peer, s.value);
  }
  return out;
}

/** The node's frames to the flood's senders, by `peer` value (theirs and "_other"). */
function toIntruders(frames: Map<string, number>): Map<string, number> {
  return new Map(
    [...frames].filter(([peer]) => peer.startsWith("intruder-") || peer === OTHER_PEERS),
  );
}

describe("a node flooded with senders its meta state does not know (real process)", () => {
  it(`answers every one, and keeps per-peer series for ${UNKNOWN_PEER_SERIES} of them`, async () => {
    await withLocalCluster(
      "peer-flood",
      2,
      {
        CAIRN_CLUSTER_BOOTSTRAP_EXPECT: "2",
        CAIRN_CLUSTER_REPLICATION_FACTOR: "2",
        CAIRN_CLUSTER_TOTAL_SHARDS: "4",
      },
      async (cluster) => {
        await cluster.startAll();
        await cluster.ready();
        const n1 = cluster.node("n1");
        assert.ok(n1.client !== null && n1.server !== null);
        const http = n1.server.http;
        const view = await clusterView(n1.client);
        assert.notEqual(view.cluster_id, "");
        const to = replicaIdOf("n1", view.incarnation === "" ? undefined : view.incarnation);

        const client = new Client(n1.rpc, credentials.createInsecure());
        try {
          for (let base = 0; base < FLOOD; base += WAVE) {
            const outcomes = await Promise.all(
              Array.from({ length: WAVE }, (_, j) =>
                staleHeartbeat(client, view.cluster_id, `intruder-${base + j}`, "n1", to),
              ),
            );
            // Taken, not refused: the node must hear a member it does not know yet.
            assert.deepEqual(
              outcomes.filter((e) => e !== null).map((e) => e?.details),
              [],
            );
          }
          // Every sender answered: one frame each, counted under its own id or "_other".
          let frames = new Map<string, number>();
          await eventually(`the node answered all ${FLOOD} senders`, async () => {
            frames = toIntruders(await framesByPeer(http));
            let sum = 0;
            for (const n of frames.values()) sum += n;
            return sum >= FLOOD;
          });
          assert.equal(frames.size, UNKNOWN_PEER_SERIES + 1, `${frames.size} peer series`);
          assert.ok((frames.get(OTHER_PEERS) ?? 0) >= FLOOD - UNKNOWN_PEER_SERIES);

          // A sender past the cap that then joins the cluster is recorded as a member: its
          // frames get series of their own.
          const joiner = "intruder-joiner";
          const other = (await framesByPeer(http)).get(OTHER_PEERS) ?? 0;
          assert.equal(await staleHeartbeat(client, view.cluster_id, joiner, "n1", to), null);
          let now = new Map<string, number>();
          await eventually("the node answered the joiner", async () => {
            now = await framesByPeer(http);
            return now.has(joiner) || (now.get(OTHER_PEERS) ?? 0) > other;
          });
          assert.ok(!now.has(joiner), "a series of its own while not recorded");
          const join = encodeMetaCommand({
            op: "join",
            member: {
              id: joiner,
              rpcAddr: "127.0.0.1:9", // nothing answers there
              httpAddr: "127.0.0.1:9",
              incarnation: `incarnation-of-${joiner}`,
              // The cluster's version may have risen past 1 meanwhile (version upkeep).
              build: BUILD_VERSION,
            },
          });
          const method = loadRaftProto().cairn.v1.Raft.service.ProposeMeta;
          const md = new Metadata();
          md.set("cairn-peer", joiner);
          const joined = await new Promise<ServiceError | null>((resolve) => {
            client.makeUnaryRequest(
              method.path,
              method.requestSerialize,
              method.responseDeserialize,
              { cluster_id: view.cluster_id, command: Buffer.from(join) },
              md,
              { deadline: Date.now() + 15_000 },
              (err: ServiceError | null) => resolve(err),
            );
          });
          assert.equal(joined, null, joined?.details);
          assert.equal(await staleHeartbeat(client, view.cluster_id, joiner, "n1", to), null);
          await eventually("the member's own series", async () =>
            (await framesByPeer(http)).has(joiner),
          );
        } finally {
          client.close();
        }
      },
    );
  });
});
