/**
 * What a node checks of a peer's identity before it takes its call (handshake.ts): here, that the
 * ids a caller sends are node ids, and that a refusal does not echo an id of any length.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { nodeId } from "../../src/raft/index.ts";
import {
  handshakeRefusal,
  type PeerCheck,
  peerRefusal,
  shownId,
} from "../../src/replication/handshake.ts";

const CHECK: PeerCheck = {
  clusterId: "c1",
  self: nodeId("n2"),
  membership: (id) => (id === "n1" || id === "n3" ? "member" : "unknown"),
};

describe("a peer's identity", () => {
  it("refuses a sender whose id no node can have, which it took as a member that joined since", () => {
    // Naming the (public) cluster id, any string was taken as the id of a member this node's
    // meta state had not caught up with: 64 KiB of it, or one with spaces or quotes.
    for (const from of ["x".repeat(65_536), "n 1", 'n"1', "-n1", "a".repeat(129)]) {
      const refusal = peerRefusal(from, "c1", CHECK, false);
      assert.equal(refusal?.kind, "no_sender", JSON.stringify(from.slice(0, 20)));
      assert.ok((refusal?.reason.length ?? 0) < 300, "the id is not echoed whole");
    }
    assert.equal(peerRefusal("n4", "c1", CHECK, false), null, "a node id it does not know yet");
    assert.equal(peerRefusal("n1", "c1", CHECK, true), null);
  });

  it("shows a misaddressed handshake's ids only up to a node id's length", () => {
    const long = "y".repeat(65_536);
    const misaddressed = handshakeRefusal(
      { cluster_id: "c1", from_node_id: "n1", to_node_id: long, from_replica_id: "" },
      CHECK,
    );
    assert.equal(misaddressed?.kind, "misaddressed");
    assert.match(misaddressed?.reason ?? "", /the sender addressed \(an id of 65536 characters\)/);
    const replica = handshakeRefusal(
      { cluster_id: "c1", from_node_id: "n1", to_node_id: "n2", from_replica_id: `n3@${long}` },
      CHECK,
    );
    assert.equal(replica?.kind, "misaddressed");
    assert.ok((replica?.reason.length ?? 0) < 300);
    assert.equal(shownId("n1@0123abcd"), '"n1@0123abcd"');
  });
});
