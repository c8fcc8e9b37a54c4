/**
 * The links a node keeps to senders its meta state does not record (peer-links.ts,
 * UNKNOWN_PEER_LINKS): such a sender is answered (handshake.ts: a member that joined while this
 * node was behind), but anyone naming the cluster's id can invent one. A review's probe opened
 * 10,000 streams under new ids and the node kept a link for each, for good. Through a real
 * transport: a flood of answers to invented ids keeps at most the cap of them, the least
 * recently used idle ones dropped; a link with a call waiting for its answer is not; a dropped
 * sender is answered again on a new link; one the meta state records since stays.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { status } from "@grpc/grpc-js";
import { deadlineClock } from "../../src/common/deadline-clock.ts";
import { logIndex, nodeId, term } from "../../src/raft/index.ts";
import { GrpcTransport, type PeerCall, type ShardMessage } from "../../src/replication/index.ts";
import { UNKNOWN_PEER_LINKS } from "../../src/replication/peer-links.ts";
import { eventually, type RaftServer, startRaftServer } from "./peer-support.ts";

/** A node that joined while n1 was behind: n1's meta state does not record it, gossip has its address. */
const STRANGER = "stranger";
const FLOOD = 10 * UNKNOWN_PEER_LINKS;

/** n1's answer on shard 1 to node `to` (a heartbeat: what it is does not matter here). */
function answer(to: string): ShardMessage[] {
  const message = {
    type: "heartbeat",
    from: nodeId("n1"),
    to: nodeId(to),
    term: term(1),
    commit: logIndex(0),
    readSeq: 0,
    quiesce: false,
    noReply: false,
  } as const;
  return [{ shard: 1, message }];
}

interface Rig {
  readonly transport: GrpcTransport;
  /** The nodes n1's meta state records (any state). */
  readonly members: Set<string>;
  /** The stranger's server: the frames it got, the forwarded calls it took (never answered by itself). */
  readonly got: ShardMessage[][];
  readonly served: PeerCall[];
  readonly server: RaftServer;
  close(): Promise<void>;
}

/** n1's transport; only the stranger has an address (the invented ids have none, as in the probe). */
async function rig(): Promise<Rig> {
  const got: ShardMessage[][] = [];
  const served: PeerCall[] = [];
  const server = await startRaftServer((_from, messages) => got.push(messages), {
    clusterId: "c1",
    nodeId: STRANGER,
    calls: { serve: (_from, call) => served.push(call), replied: () => undefined },
  });
  const members = new Set(["n1", "n2"]);
  const transport = new GrpcTransport({
    clusterId: "c1",
    nodeId: "n1",
    peers: (id) => (id === STRANGER ? server.address : null),
    known: (id) => members.has(id),
  });
  return {
    transport,
    members,
    got,
    served,
    server,
    async close() {
      await transport.close();
      server.stop();
    },
  };
}

/** Answers `count` invented senders, each a new id (`prefix`-i). */
function flood(transport: GrpcTransport, prefix: string, count: number): void {
  for (let i = 0; i < count; i++)
    transport.send(nodeId(`${prefix}-${i}`), answer(`${prefix}-${i}`));
}

const linked = (transport: GrpcTransport): string[] => Object.keys(transport.stats());

describe("links to senders the meta state does not record", () => {
  it(`keeps at most ${UNKNOWN_PEER_LINKS} idle ones, the most recently used, whatever their number, and every member's`, async () => {
    const r = await rig();
    try {
      r.transport.send(nodeId("n2"), answer("n2"));
      flood(r.transport, "intruder", FLOOD);
      const links = linked(r.transport);
      assert.equal(links.length, UNKNOWN_PEER_LINKS + 1, `${links.length} links kept`);
      // The member's link, the least recently used of all, stays; the newest intruders' too.
      assert.ok(links.includes("n2"));
      for (let i = FLOOD - UNKNOWN_PEER_LINKS; i < FLOOD; i++) {
        assert.ok(links.includes(`intruder-${i}`), `intruder-${i}'s link, among the newest`);
      }
    } finally {
      await r.close();
    }
  });

  it("never drops a link with a call waiting for its answer; an idle one goes, and its sender is answered on a new link", async () => {
    const r = await rig();
    try {
      r.transport.send(nodeId(STRANGER), answer(STRANGER));
      await eventually("the stranger got n1's answer", () => r.got.length === 1);
      const pending = r.transport.call(STRANGER, "/cairn.v1.KV/Get", Buffer.from("get"), {
        deadline: deadlineClock() + 60_000,
      });
      await eventually("the forwarded call reached the stranger", () => r.served.length === 1);

      flood(r.transport, "intruder", FLOOD);
      assert.ok(linked(r.transport).includes(STRANGER), "a link with a call waiting was dropped");
      assert.equal(r.transport.stats()[STRANGER]?.streamsOpened, 1);

      const call = r.served[0];
      assert.ok(call !== undefined);
      r.transport.receiveReply(STRANGER, {
        id: call.id,
        code: status.OK,
        details: "",
        response: Buffer.from("value"),
        trailers: [],
      });
      assert.equal((await pending).code, status.OK, "the call waiting was answered on its stream");

      // Idle now, and the least recently used: the next intruders take its place.
      flood(r.transport, "later", UNKNOWN_PEER_LINKS);
      assert.ok(!linked(r.transport).includes(STRANGER), "the idle link was kept over the cap");
      assert.equal(linked(r.transport).length, UNKNOWN_PEER_LINKS);

      // Still answered: a new link, a new stream.
      r.transport.send(nodeId(STRANGER), answer(STRANGER));
      await eventually("the stranger got n1's next answer", () => r.got.length === 2);
      assert.equal(r.transport.stats()[STRANGER]?.streamsOpened, 1);
    } finally {
      await r.close();
    }
  });

  it("keeps the link of a sender the meta state records since, as any member's", async () => {
    const r = await rig();
    try {
      r.transport.send(nodeId("joiner"), answer("joiner"));
      const made = r.transport.stats()["joiner"];
      assert.ok(made !== undefined);
      // The meta state here catches up: the sender had joined.
      r.members.add("joiner");
      flood(r.transport, "intruder", FLOOD);
      const links = linked(r.transport);
      assert.ok(links.includes("joiner"), "the member's link was dropped");
      assert.equal(links.length, UNKNOWN_PEER_LINKS + 1, `${links.length} links kept`);
      r.transport.send(nodeId("joiner"), answer("joiner"));
      // The same link: its counters went on.
      assert.equal(r.transport.stats()["joiner"]?.framesDropped, 2);
    } finally {
      await r.close();
    }
  });
});
