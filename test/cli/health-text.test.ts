/**
 * `cairn health`'s text (src/cli/ops-commands.ts): in a cluster each member is shown with its
 * standing in the cluster beside gossip's view, as `cairn cluster` shows it, so an operator
 * following a runbook sees a member decommissioned or dead from any node's /health.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { formatHealth } from "../../src/cli/ops-commands.ts";

const early = {
  status: "healthy",
  node_id: "n1",
  uptime_seconds: 61.4,
  total_shards: 1024,
  active_shards: 51,
  shards: [
    { id: 0, status: "healthy", is_leader: true, raft_term: 2, commit_index: 9 },
    { id: 7, status: "no_leader", is_leader: false, raft_term: 3, commit_index: 4 },
  ],
  nodes: [
    {
      id: "n1",
      rpc_addr: "127.0.0.1:7447",
      http_addr: "127.0.0.1:8080",
      state: "alive",
      member_state: "active",
      replicas: 51,
    },
    {
      id: "n2",
      rpc_addr: "127.0.0.2:7447",
      http_addr: "127.0.0.2:8080",
      state: "alive",
      member_state: "decommissioned",
      replicas: 0,
    },
    {
      id: "n3",
      rpc_addr: "127.0.0.3:7447",
      http_addr: "127.0.0.3:8080",
      state: "dead",
      member_state: "active",
      replicas: 51,
      disk_full: true,
    },
  ],
};

const report = { ...early, cluster_version: 1 };

describe("cairn health's text", () => {
  it("shows each member's standing, gossip's view and replicas, and the cluster version", () => {
    assert.equal(
      formatHealth(report),
      [
        "status: healthy",
        "node: n1  uptime: 61s  shards: 51 active of 1024  cluster version: 1",
        "shards not healthy: 1 of 51",
        "  7\tno_leader\tterm 3",
        "nodes:",
        "  n1\tactive\talive\trpc 127.0.0.1:7447\thttp 127.0.0.1:8080\treplicas 51",
        "  n2\tdecommissioned\talive\trpc 127.0.0.2:7447\thttp 127.0.0.2:8080\treplicas 0",
        "  n3\tactive\tdead\trpc 127.0.0.3:7447\thttp 127.0.0.3:8080\treplicas 51\tdisk full",
        "",
      ].join("\n"),
    );
  });

  it("counts the shards not healthy before listing them", () => {
    // A peer down for a few seconds made 238 lines under "shards not healthy:", and no count:
    // the operator counted them, or scrolled up to see how many (an audit, 2026-12-07).
    const shards = Array.from({ length: 238 }, (_, k) => ({
      id: k + 1,
      status: "degraded",
      is_leader: false,
      raft_term: 8,
      commit_index: 3,
    }));
    const text = formatHealth({ ...early, status: "degraded", active_shards: 510, shards });
    assert.match(text, /\nshards not healthy: 238 of 510\n {2}1\tdegraded\tterm 8\n/);
  });

  it("says why a node whose shards are all healthy is degraded: it refuses Puts for its disk", () => {
    // The report's puts_refused was left out: "status: degraded" and nothing to say why, the
    // node refusing every write (an audit, 2026-12-07).
    const full = { ...early, status: "degraded", shards: [], puts_refused: true as const };
    const text = formatHealth(full);
    assert.match(
      text,
      /^status: degraded\nnode: .*\nputs refused: this node's disk has less available than storage\.min_free_bytes/,
    );
    assert.doesNotMatch(formatHealth(early), /puts refused/);
  });

  it("says why a joining or decommissioned node is unhealthy, and that a decommissioned one's list is old", () => {
    // "status: unhealthy" alone, and the member list of the moment a decommissioned node left
    // shown as if current (its replica counts frozen): an operator following the runbook could
    // not tell why, nor that the list was stale (an audit, 2026-12-07).
    const self = (memberState: string): Parameters<typeof formatHealth>[0] => ({
      ...early,
      status: "unhealthy",
      node_id: "n2",
      shards: [],
      nodes: early.nodes.map((n) => (n.id === "n2" ? { ...n, member_state: memberState } : n)),
    });
    assert.match(
      formatHealth(self("decommissioned")),
      /^status: unhealthy\nnode: n2 .*\nthis node is decommissioned: it serves no client request, and the members below are as it saw them when it left the meta group \(ask another member\)\n/,
    );
    const joining = formatHealth(self("joining"));
    assert.match(
      joining,
      /^status: unhealthy\nnode: n2 .*\nthis node is joining: it serves clients once the meta group has it active\n/,
    );
    assert.doesNotMatch(formatHealth(early), /this node is/);
  });

  it("a node that does not know its cluster yet shows gossip's view alone", () => {
    const text = formatHealth({
      ...early,
      nodes: [
        { id: "n4", rpc_addr: "127.0.0.4:7447", http_addr: "127.0.0.4:8080", state: "alive" },
      ],
    });
    assert.ok(
      text.endsWith("\nnodes:\n  n4\talive\trpc 127.0.0.4:7447\thttp 127.0.0.4:8080\n"),
      text,
    );
    assert.doesNotMatch(text, /cluster version/);
  });
});
