/**
 * A CairnClient whose configured endpoints went stale (one node of the cluster and an address
 * where nothing listens) keeps serving when that node dies: its fallbacks go to the members its
 * cluster view shows alive, its watch moves to one of them, and it does not follow a leader the
 * view names on the dead node. Against a real three-node cluster on loopback.
 */
import assert from "node:assert/strict";
import { describe, it } from "node:test";
import { CairnClient } from "../../src/client/index.ts";
import { shardForKey } from "../../src/cluster/index.ts";
import {
  eventually,
  freePort,
  type LocalCluster,
  withLocalCluster,
} from "../support/cluster-process.ts";

describe("a client whose configured endpoints went stale (real processes)", () => {
  it(
    "writes through the members its view shows alive when its one live endpoint is killed",
    {
      timeout: 120_000,
    },
    () => withLocalCluster("stale-endpoints", 3, {}, killTheLiveEndpoint),
  );
});

async function killTheLiveEndpoint(cluster: LocalCluster): Promise<void> {
  await cluster.startAll();
  await cluster.ready();
  // Nothing listens at the second endpoint: a node decommissioned and gone.
  const nowhere = `127.0.0.1:${await freePort()}`;
  const client = new CairnClient({ endpoints: [cluster.node("n1").rpc, nowhere] });
  try {
    // Keys until one whose shard the client's view says n1 leads: the shard that must elect a
    // new leader, and the one the client would route to the dead node.
    const written: string[] = [];
    let onN1: string | undefined;
    await eventually("the view names n1 the leader of a written key's shard", async () => {
      const key = `stale/${written.length}`;
      await client.put(key, "before");
      written.push(key);
      onN1 = written.find((k) => leaderOf(client, k) === "n1");
      return onN1 !== undefined && client.view?.nodes.length === 3;
    });
    assert.ok(onN1 !== undefined);
    assert.ok(
      client.view?.nodes.every((n) => n.state === "alive" && n.memberState === "active"),
      "the view shows every member alive and active",
    );

    await cluster.stop("n1", "SIGKILL");

    // The shard's new leader is elected within about two election timeouts (1–2 s each by
    // default; the put took 1–1.6 s on an idle machine): the call's 5 s cover that. It used to
    // go round its two dead endpoints until its time ran out (UnavailableError).
    await client.put(onN1, "after", { timeoutMs: 5000 });
    assert.equal(await client.getString(onN1, { timeoutMs: 5000 }), "after");
    // The client's watch moved to a survivor: its view tells n1 is gone.
    await eventually("the client follows a live member's view", () =>
      Promise.resolve(client.view?.nodes.find((n) => n.id === "n1")?.state !== "alive"),
    );
    // Every shard written before serves through the survivors, n1's others included.
    for (const key of written) {
      const want: string = key === onN1 ? "after" : "before";
      assert.equal(await client.getString(key, { timeoutMs: 5000 }), want);
    }
  } finally {
    client.close();
  }
}

/** The leader `client`'s view names for `key`'s shard. */
function leaderOf(client: CairnClient, key: string): string | undefined {
  const view = client.view;
  if (view === null || view.totalShards === 0) return undefined;
  const shard = shardForKey(new TextEncoder().encode(key), view.totalShards);
  return view.shards.find((s) => s.id === shard)?.leader;
}
