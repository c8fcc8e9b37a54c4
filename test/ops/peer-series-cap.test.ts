/**
 * The per-peer series of a node's Raft traffic for peers its meta state does not record
 * (metrics.ts, UNKNOWN_PEER_SERIES): the node answers such a sender (a member that joined while
 * it was behind), but anyone naming the cluster's id can invent one, and a review's probe grew
 * /metrics from 742 KB to 5.2 MB with 10,000 invented ids. The first few get series of their
 * own, the rest count under peer="_other", so that the sum over peers is still every frame; a
 * peer the meta state records since keeps its series, and one folded in gets its own from then.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CairnMetrics } from "../../src/ops/index.ts";
import { OTHER_PEERS, UNKNOWN_PEER_SERIES } from "../../src/ops/metrics.ts";
import { type Sample, samples } from "./prom-text.ts";

const FAMILIES = [
  "cairn_raft_frames_sent_total",
  "cairn_raft_messages_sent_total",
  "cairn_raft_heartbeats_sent_total",
];
const FLOOD = 10 * UNKNOWN_PEER_SERIES;

/** n1's metrics, whose meta state records the members in the set returned with them. */
function rig(): { metrics: CairnMetrics; members: Set<string> } {
  const metrics = new CairnMetrics({ nodeId: "n1" });
  const members = new Set(["n1", "n2"]);
  metrics.setKnownPeers((peer) => members.has(peer));
  return { metrics, members };
}

/** Each peer family's `peer` values, and the frames each peer value counts. */
async function peerSeries(
  metrics: CairnMetrics,
): Promise<{ peers: Map<string, string[]>; frames: Map<string, number> }> {
  const all: Sample[] = samples(await metrics.expose());
  const peers = new Map<string, string[]>();
  const frames = new Map<string, number>();
  for (const s of all) {
    const peer = s.labels["peer"];
    if (!FAMILIES.includes(s.name) || peer === undefined) continue;
    peers.set(s.name, [...(peers.get(s.name) ?? []), peer]);
    if (s.name === "cairn_raft_frames_sent_total") frames.set(peer, s.value);
  }
  return { peers, frames };
}

describe("the per-peer series of peers the meta state does not record", () => {
  it(`keeps ${UNKNOWN_PEER_SERIES} of them, counts the rest under peer="${OTHER_PEERS}", and every member's`, async () => {
    const { metrics } = rig();
    metrics.raftFrameSent("n2", 3, 1);
    for (let i = 0; i < FLOOD; i++) metrics.raftFrameSent(`intruder-${i}`, 1, 1);
    const { peers, frames } = await peerSeries(metrics);
    for (const family of FAMILIES) {
      const values = peers.get(family) ?? [];
      assert.equal(values.length, UNKNOWN_PEER_SERIES + 2, `${family}: ${values.length} series`);
      assert.ok(values.includes("n2") && values.includes(OTHER_PEERS), family);
    }
    assert.equal(frames.get("intruder-0"), 1);
    assert.equal(frames.get(`intruder-${UNKNOWN_PEER_SERIES}`), undefined);
    assert.equal(frames.get(OTHER_PEERS), FLOOD - UNKNOWN_PEER_SERIES);
    // The sum over peers is every frame sent.
    let sum = 0;
    for (const n of frames.values()) sum += n;
    assert.equal(sum, FLOOD + 1);
    // The peers with series of their own keep counting there.
    metrics.raftFrameSent("intruder-0", 1, 0);
    assert.equal((await peerSeries(metrics)).frames.get("intruder-0"), 2);
  });

  it("keeps the series of a peer the meta state records since, and gives one folded in its own from then", async () => {
    const { metrics, members } = rig();
    metrics.raftFrameSent("joiner", 1, 0);
    for (let i = 0; i < FLOOD; i++) metrics.raftFrameSent(`intruder-${i}`, 1, 1);
    metrics.raftFrameSent("late", 1, 0);
    let { peers, frames } = await peerSeries(metrics);
    assert.equal(peers.get("cairn_raft_frames_sent_total")?.length, UNKNOWN_PEER_SERIES + 1);
    assert.equal(frames.get("late"), undefined, "past the cap: counted under the other peers");
    // Both had joined: the meta state here catches up.
    members.add("joiner");
    members.add("late");
    metrics.raftFrameSent("late", 1, 0);
    for (let i = 0; i < FLOOD; i++) metrics.raftFrameSent(`later-${i}`, 1, 1);
    metrics.raftFrameSent("joiner", 1, 0);
    ({ peers, frames } = await peerSeries(metrics));
    assert.equal(frames.get("joiner"), 2, "the series kept counting");
    assert.equal(frames.get("late"), 1, "a series of its own once recorded");
    // The joiner's place among the unknown peers went to the first of the later ones.
    assert.equal(frames.get("later-0"), 1);
    assert.equal(frames.get("later-1"), undefined);
    assert.equal(peers.get("cairn_raft_frames_sent_total")?.length, UNKNOWN_PEER_SERIES + 3);
  });

  it("frees the place of an unknown peer removed for good", async () => {
    const { metrics } = rig();
    for (let i = 0; i < UNKNOWN_PEER_SERIES; i++) metrics.raftFrameSent(`intruder-${i}`, 1, 1);
    assert.equal(
      (await peerSeries(metrics)).frames.get(OTHER_PEERS),
      undefined,
      "none past the cap yet",
    );
    metrics.removePeer("intruder-0");
    metrics.raftFrameSent("next", 1, 0);
    metrics.raftFrameSent("after", 1, 0);
    const { frames } = await peerSeries(metrics);
    assert.equal(frames.get("intruder-0"), undefined);
    assert.equal(frames.get("next"), 1, "the place it left");
    assert.equal(frames.get("after"), undefined);
    assert.equal(frames.get(OTHER_PEERS), 1);
  });
});
