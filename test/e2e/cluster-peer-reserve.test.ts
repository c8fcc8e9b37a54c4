/**
 * A connection flood must not cut a node off from its peers (real processes on loopback).
 *
 * Clients on other addresses fill n1's `rpc.max_connections`; n2 restarts, so every connection
 * it had to n1 is gone and must be made again; n3 dies. Every shard now needs n1 and n2 to talk
 * both ways. The last connections of the bound are kept for the members' addresses
 * (src/api/connection-slots.ts, "the members' reserve"), so n2's new connections are taken
 * while the flood's are refused, and writes go on.
 *
 * Seen failing before the reserve (111dfe5): n1 closed n2's new connections as it accepted them,
 * and the Puts through n2 failed UNAVAILABLE until the test's deadline.
 *
 * The nodes listen on 127.0.0.1 and reach each other from it; the flood comes from 127.0.0.2.
 */
import assert from "node:assert/strict";
import { connect as connectTcp, type Socket } from "node:net";
import { describe, it } from "node:test";
import {
  eventually,
  type LocalCluster,
  retryingKv,
  withLocalCluster,
} from "../support/cluster-process.ts";
import { PREFACE, settings } from "../support/h2-raw.ts";
import { metricValue } from "../support/server-process.ts";

const KEYS = Array.from({ length: 12 }, (_, i) => `reserve-${i}`);
const FLOOD_FROM = "127.0.0.2";

/**
 * Keeps `count` HTTP/2 connections to `address` open from FLOOD_FROM, sending nothing after the
 * preface: each one the node closes is opened again at once, as an attacker would, so a slot
 * freed on the node is raced for. `stop()` ends it.
 */
function flood(address: string, count: number): { stop(): void; open(): number } {
  const port = Number(address.split(":").at(-1));
  const hello = Buffer.concat([PREFACE, settings()]);
  const sockets = new Set<Socket>();
  let stopped = false;
  const open = (): void => {
    if (stopped) return;
    const s = connectTcp({ port, host: "127.0.0.1", localAddress: FLOOD_FROM }, () => {
      s.write(hello);
    });
    sockets.add(s);
    s.on("data", () => {});
    s.on("error", () => {});
    s.once("close", () => {
      sockets.delete(s);
      setImmediate(open);
    });
  };
  for (let i = 0; i < count; i++) open();
  return {
    stop() {
      stopped = true;
      for (const s of sockets) s.destroy();
    },
    open: () => [...sockets].filter((s) => s.readyState === "open").length,
  };
}

async function putAll(cluster: LocalCluster, via: string, value: string): Promise<void> {
  const c = cluster.node(via).client;
  assert.ok(c !== null);
  for (const key of KEYS) {
    await retryingKv(c, "Put", { key: Buffer.from(key), value: Buffer.from(value) });
  }
}

describe("a connection flood and a node's peers (real processes)", { timeout: 240_000 }, () => {
  it("a flood from another address fills n1's rpc.max_connections; a restarted peer still gets in", async () => {
    await withLocalCluster("peer-reserve", 3, {}, async (cluster) => {
      await cluster.start("n1", { CAIRN_RPC_MAX_CONNECTIONS: "40" });
      await cluster.start("n2");
      await cluster.start("n3");
      await cluster.ready();
      // The keys' shards are made while every node is up.
      await putAll(cluster, "n1", "before");

      const n1 = cluster.node("n1").server;
      assert.ok(n1 !== null);
      const attack = flood(cluster.node("n1").rpc, 80);
      try {
        await eventually("n1 refuses the flood past its bound", async () => {
          return (await metricValue(n1, 'cairn_rpc_connections_refused_total{reason="node"}')) > 0;
        });
        const held = await metricValue(n1, "cairn_rpc_connections");
        assert.ok(held <= 40, `n1 holds ${held} connections`);

        // n2's connections to n1 go, and must be made again; then n3 dies.
        await cluster.stop("n2", "SIGKILL");
        await cluster.start("n2");
        await cluster.stop("n3", "SIGKILL");
        // Every shard needs n1 and n2 now.
        await putAll(cluster, "n2", "after");
        const c1 = cluster.node("n1").client;
        assert.ok(c1 !== null);
        for (const key of KEYS) {
          const r = await retryingKv(c1, "Get", { key: Buffer.from(key) });
          assert.equal(String(r["value"]), "after", key);
        }
        assert.ok(
          (await metricValue(n1, "cairn_rpc_connections")) <= 40,
          "the bound still holds the node",
        );
      } finally {
        attack.stop();
      }
    });
  });
});
