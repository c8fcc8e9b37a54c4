import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { type ClusterView, rpcAddressOf } from "../../src/cluster/index.ts";

describe("rpcAddressOf", () => {
  const view: ClusterView = {
    epoch: 1,
    total_shards: 16,
    cluster_id: "c1",
    incarnation: "",
    shards: [],
    nodes: [
      { id: "n1", rpc_addr: "10.0.0.1:7447", http_addr: "10.0.0.1:8080", state: "alive" },
      { id: "n2", rpc_addr: "10.0.0.2:7447", http_addr: "10.0.0.2:8080", state: "suspect" },
      { id: "n3", rpc_addr: "10.0.0.3:7447", http_addr: "10.0.0.3:8080", state: "dead" },
      { id: "n4", rpc_addr: "", http_addr: "", state: "alive" },
    ],
  };

  it("gives the address of a live or suspect member, null for dead, unknown or addressless", () => {
    assert.equal(rpcAddressOf(view, "n1"), "10.0.0.1:7447");
    assert.equal(rpcAddressOf(view, "n2"), "10.0.0.2:7447");
    assert.equal(rpcAddressOf(view, "n3"), null);
    assert.equal(rpcAddressOf(view, "n4"), null);
    assert.equal(rpcAddressOf(view, "n9"), null);
  });
});
