/** Where a call that is not routed goes (src/client/fallback.ts): no network, no timers. */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { pickFallback, servingMembers } from "../../src/client/fallback.ts";
import type { ClusterView, MemberInfo } from "../../src/client/index.ts";

function member(id: string, rpcAddr: string, state = "alive", memberState = "active"): MemberInfo {
  return { id, rpcAddr, httpAddr: "", state, memberState, replicas: 0, diskFull: false, build: 1 };
}

function viewOf(nodes: MemberInfo[]): ClusterView {
  return { epoch: 1, totalShards: 16, clusterId: "c", clusterVersion: 1, nodes, shards: [] };
}

const anywhere = (): boolean => true;
const none = new Set<string>();
const healthy = (): boolean => false;

/** The addresses `pickFallback` gives for turns 0..n-1. */
function picks(
  c: Partial<Parameters<typeof pickFallback>[0]> & { endpoints: readonly string[] },
  n: number,
): string[] {
  const full = { members: [], failed: none, isFailing: healthy, ...c };
  return Array.from({ length: n }, (_, turn) => pickFallback(full, turn));
}

describe("servingMembers", () => {
  it("lists the members alive to gossip and active in the cluster, in the view's order", () => {
    const view = viewOf([
      member("n1", "10.0.0.1:7447"),
      member("n2", "10.0.0.2:7447", "suspect"),
      member("n3", "10.0.0.3:7447", "dead"),
      member("n4", "10.0.0.4:7447", "left"),
      member("n5", "10.0.0.5:7447", "alive", "decommissioning"),
      member("n6", "10.0.0.6:7447", "alive", "joining"),
      member("n7", "10.0.0.7:7447", "alive", "dead"),
      member("n8", "10.0.0.8:7447", "alive", ""),
      member("n9", ""),
      member("n10", "10.0.0.10:7447"),
    ]);
    assert.deepEqual(servingMembers(view, anywhere), ["10.0.0.1:7447", "10.0.0.10:7447"]);
  });

  it("lists none without a view", () => {
    assert.deepEqual(servingMembers(null, anywhere), []);
  });

  it("leaves out the addresses the caller may not send to (a cleartext token off the host)", () => {
    const view = viewOf([member("n1", "10.0.0.1:7447"), member("n2", "127.0.0.1:7447")]);
    assert.deepEqual(
      servingMembers(view, (a) => a.startsWith("127.")),
      ["127.0.0.1:7447"],
    );
  });

  it("takes a view of absurd size in time linear in it (a hostile or broken node's view)", () => {
    // Each member was looked up in the list built so far: 60,000 members (a view of ~2 MB,
    // far inside the client's 256 MiB receive limit) cost 1.8e9 comparisons, seconds of CPU
    // on every fallback pick and watch restart, the client's event loop blocked meanwhile.
    const nodes = Array.from({ length: 60_000 }, (_, i) =>
      member(`n${i}`, `10.${(i >> 16) & 255}.${(i >> 8) & 255}.${i & 255}:7447`),
    );
    nodes.push(member("again", "10.0.0.0:7447"));
    const t0 = performance.now();
    const members = servingMembers(viewOf(nodes), anywhere);
    const took = performance.now() - t0;
    assert.equal(members.length, 60_000, "each address once");
    assert.ok(took < 3000, `${Math.round(took)} ms`);
  });
});

describe("pickFallback", () => {
  it("takes the configured endpoints in turn when the view shows no member serving", () => {
    assert.deepEqual(picks({ endpoints: ["e1", "e2"] }, 4), ["e1", "e2", "e1", "e2"]);
  });

  it("takes the members the view shows serving in turn, never a stale endpoint while one is usable", () => {
    assert.deepEqual(picks({ members: ["m1", "m2"], endpoints: ["gone", "m1"] }, 4), [
      "m1",
      "m2",
      "m1",
      "m2",
    ]);
  });

  it("does not go back to an address that failed to connect in the call while another is left", () => {
    const failed = new Set(["m1"]);
    assert.deepEqual(picks({ members: ["m1", "m2", "m3"], endpoints: [], failed }, 4), [
      "m2",
      "m3",
      "m2",
      "m3",
    ]);
  });

  it("passes over a channel in reconnect backoff while another is not", () => {
    const isFailing = (a: string): boolean => a === "m2";
    assert.deepEqual(picks({ members: ["m1", "m2"], endpoints: ["e1"], isFailing }, 3), [
      "m1",
      "m1",
      "m1",
    ]);
    const noEndpoint = (a: string): boolean => a === "e1";
    assert.deepEqual(picks({ endpoints: ["e1", "e2"], isFailing: noEndpoint }, 2), ["e2", "e2"]);
  });

  it("falls back to the endpoints when every member failed or is failing (a view gone stale)", () => {
    const failed = new Set(["m1"]);
    const isFailing = (a: string): boolean => a === "m2";
    assert.deepEqual(
      picks({ members: ["m1", "m2"], endpoints: ["e1", "e2"], failed, isFailing }, 3),
      ["e1", "e2", "e1"],
    );
  });

  it("tries a failing channel before one that failed in the call, and any address when all have failed", () => {
    const isFailing = (a: string): boolean => a === "m2";
    assert.deepEqual(
      picks(
        { members: ["m1", "m2"], endpoints: ["e1"], failed: new Set(["m1", "e1"]), isFailing },
        2,
      ),
      ["m2", "m2"],
    );
    const all = new Set(["m1", "m2", "e1"]);
    assert.deepEqual(picks({ members: ["m1", "m2"], endpoints: ["e1"], failed: all }, 3), [
      "m1",
      "m2",
      "e1",
    ]);
  });
});
