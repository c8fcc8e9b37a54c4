/**
 * recordedMembers (src/node/recorded-members.ts): the members a node's meta state records, which
 * its membership joins and re-contacts through besides the seeds: every one but this node and
 * those that left for good (decommissioned, removed), the serving ones first; none before the
 * node knows its cluster.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type MetaCommand, MetaState } from "../../src/cluster/index.ts";
import { metaStateOf } from "./meta-fixtures.ts";
import { recordedMembers } from "../../src/node/recorded-members.ts";

const member = (i: number): { id: string; rpcAddr: string; httpAddr: string } => ({
  id: `n${i}`,
  rpcAddr: i === 3 ? `cairn-3.cairn.svc:7${i}00` : `127.0.0.1:700${i}`,
  httpAddr: `127.0.0.1:800${i}`,
});

describe("recordedMembers", () => {
  it("lists the other members not gone for good, serving ones first, at their recorded addresses", () => {
    const meta = metaStateOf(
      {
        op: "bootstrap",
        clusterId: "c1",
        totalShards: 16,
        replicationFactor: 3,
        members: [1, 2, 3, 4].map(member),
      },
      ...[5, 6, 7, 8].map((i): MetaCommand => ({
        op: "join",
        member: { ...member(i), incarnation: `i${i}` },
      })),
      { op: "set-state", id: "n2", state: "dead" },
      { op: "set-state", id: "n4", state: "decommissioning" },
      { op: "set-state", id: "n5", state: "active" },
      { op: "set-state", id: "n5", state: "decommissioning" },
      { op: "set-state", id: "n5", state: "decommissioned" },
      { op: "set-state", id: "n6", state: "dead" },
      { op: "set-state", id: "n6", state: "removed" },
      { op: "set-state", id: "n7", state: "active" },
    );
    assert.deepEqual(
      recordedMembers(meta, "n1").map((m) => [m.id, m.rpcAddr, meta.stateOf(m.id)]),
      [
        ["n3", "cairn-3.cairn.svc:7300", "active"],
        ["n4", "127.0.0.1:7004", "decommissioning"],
        ["n7", "127.0.0.1:7007", "active"],
        ["n8", "127.0.0.1:7008", "joining"],
        ["n2", "127.0.0.1:7002", "dead"],
      ],
    );
    // Never itself, whatever its state.
    assert.ok(!recordedMembers(meta, "n3").some((m) => m.id === "n3"));
    assert.ok(recordedMembers(meta, "n3").some((m) => m.id === "n1"));
  });

  it("lists none before the node knows its cluster (a new node joins through its seeds)", () => {
    assert.deepEqual(recordedMembers(null, "n1"), []);
    assert.deepEqual(recordedMembers(MetaState.empty(), "n1"), []);
  });
});
